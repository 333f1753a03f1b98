//! Phase validation and the device description.

use ipu_exchange::*;
use ipu_layout::TileId;

fn t(i: u32) -> TileId {
    TileId::from_u32(i)
}

fn transfer(source: u32, dest: u32, src: u32, dst: u32, words: u32) -> Transfer {
    Transfer {
        source: t(source),
        source_addresses: smallvec::smallvec![src],
        destinations: smallvec::smallvec![(t(dest), dst)],
        words,
        width: Width::Word32,
    }
}

fn phase(transfers: Vec<Transfer>) -> Phase {
    Phase {
        tile_count: 8,
        transfers,
    }
}

#[test]
fn invalid_phases_are_rejected_with_the_ids_involved() {
    let ok = transfer(0, 1, 0x4c000, 0x90000, 4);
    assert_eq!(validate_phase(&phase(vec![ok.clone()])), Ok(()));
    assert!(matches!(
        validate_phase(&phase(vec![transfer(0, 9, 0x4c000, 0x90000, 4)])),
        Err(PhaseError::TileOutOfRange { transfer: 0, .. })
    ));
    assert!(matches!(
        validate_phase(&phase(vec![transfer(0, 1, 0x4c000, 0x90000, 0)])),
        Err(PhaseError::Empty { transfer: 0 })
    ));
    assert!(matches!(
        validate_phase(&phase(vec![transfer(0, 1, 0x4c002, 0x90000, 4)])),
        Err(PhaseError::BadAddress { .. })
    ));
    assert!(matches!(
        validate_phase(&phase(vec![transfer(0, 0, 0x4c000, 0x90000, 4)])),
        Err(PhaseError::DuplicateTile { .. })
    ));
    // Two writes overlap on tile 1.
    assert!(matches!(
        validate_phase(&phase(vec![
            ok.clone(),
            transfer(2, 1, 0x4c000, 0x90008, 4)
        ])),
        Err(PhaseError::Overlap {
            first: 0,
            second: 1,
            ..
        })
    ));
    // A write overlaps what the tile sends.
    assert!(matches!(
        validate_phase(&phase(vec![
            ok.clone(),
            transfer(1, 2, 0x90004, 0x90000, 2)
        ])),
        Err(PhaseError::Overlap { .. })
    ));
    // Reads may overlap.
    assert_eq!(
        validate_phase(&phase(vec![
            ok.clone(),
            transfer(0, 2, 0x4c000, 0x90000, 4)
        ])),
        Ok(())
    );
    let mut paired = ok.clone();
    paired.width = Width::Paired64;
    paired.words = 3;
    assert!(matches!(
        validate_phase(&phase(vec![paired])),
        Err(PhaseError::BadPaired { .. })
    ));
    let mut gather = ok;
    gather.source_addresses = smallvec::smallvec![0x4c000, 0x4c010];
    assert!(matches!(
        validate_phase(&phase(vec![gather])),
        Err(PhaseError::SourceAddressCount {
            given: 2,
            words: 4,
            ..
        })
    ));
    assert!(matches!(
        validate_phase(&Phase {
            tile_count: 0,
            transfers: vec![]
        }),
        Err(PhaseError::TileCount { .. })
    ));
}

#[test]
fn schedule_refuses_invalid_phases_and_too_many_tiles() {
    let fabric = Fabric::ipu21().unwrap();
    let bad = phase(vec![transfer(0, 1, 0x4c000, 0x90000, 0)]);
    assert!(matches!(
        schedule(&bad, &fabric, &ScheduleConfig::default()),
        Err(ScheduleError::Phase { .. })
    ));
    let big = Phase {
        tile_count: 2000,
        transfers: vec![transfer(0, 1, 0x4c000, 0x90000, 4)],
    };
    assert!(matches!(
        schedule(&big, &fabric, &ScheduleConfig::default()),
        Err(ScheduleError::TileCount {
            fabric_tiles: 1472,
            ..
        })
    ));
    let empty = Phase {
        tile_count: 16,
        transfers: vec![],
    };
    let s = schedule(&empty, &fabric, &ScheduleConfig::default()).unwrap();
    assert_eq!(s.horizon(), 0);
    assert_eq!(s.rows().total_bytes(), 0);
    assert_eq!(s.rows().unique_rows().len(), 1);
    check_schedule(&empty, &fabric, s.rows()).unwrap();
}

#[test]
fn the_device_description_is_read() {
    let fabric = Fabric::ipu21().unwrap();
    assert_eq!(fabric.tile_count(), 1472);
    assert_eq!(fabric.latency(t(0), t(1000)), 12);
    assert_eq!(fabric.partner(t(5)), t(7));
    assert_eq!(fabric.memory_element(0x4c000), Some((0, 0)));
    assert_eq!(fabric.memory_element(0x80000 + 0x8000), Some((1, 1)));
    assert!(!fabric.memory_element_hazards());
    let switching =
        ipu_target::IPU21_TOML.replace("source_switch_cycles = 0", "source_switch_cycles = 3");
    let target = ipu_target::Target::from_toml(&switching).expect("a valid description");
    assert!(matches!(
        Fabric::new(&target),
        Err(FabricError::Unsupported {
            key: "exchange.source_switch_cycles",
            ..
        })
    ));
}

#[test]
fn the_first_overlap_by_tile_is_reported_whatever_the_thread_count() {
    // 64 tiles each receive from their neighbour; tiles 41 and 9 also get a
    // second write over the first (listed in that order), so the report
    // must name tile 9, the lowest, and the two transfers writing it.
    let mut transfers: Vec<Transfer> = (0..64)
        .map(|i| transfer(i, (i + 1) % 64, 0x4c000, 0x90000, 8))
        .collect();
    transfers.push(transfer(20, 41, 0x50000, 0x90010, 4));
    transfers.push(transfer(30, 9, 0x50000, 0x9001c, 2));
    let phase = Phase {
        tile_count: 64,
        transfers,
    };
    let run = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| validate_phase(&phase))
    };
    let one = run(1);
    assert_eq!(
        one,
        Err(PhaseError::Overlap {
            tile: t(9),
            first: 8,
            second: 65,
            overlap_start: 0x9001c,
            overlap_end: 0x90020,
        })
    );
    assert_eq!(one, run(2));
    assert_eq!(one, run(4));
}

/// A phase validated once (`ValidPhase`) schedules, readdresses and checks
/// through the `_valid` entry points exactly as through the ones that
/// validate it themselves; an invalid phase gets no proof, with the error
/// `validate_phase` gives.
#[test]
fn validated_phases_take_the_same_paths() {
    use ipu_exchange::generate::{GenConfig, generate_phase};
    let fabric = Fabric::ipu21().expect("the built-in device");
    let phase = generate_phase(&GenConfig {
        tile_count: 64,
        transfers: 300,
        target_bound: 400,
        max_fanout: 6,
        paired_percent: 20,
        balanced_sources: true,
        seed: 11,
    });
    let config = ScheduleConfig {
        relocatable: true,
        ..ScheduleConfig::default()
    };
    let valid = ValidPhase::new(&phase).expect("generated phases are valid");
    let plain = schedule(&phase, &fabric, &config).expect("schedules");
    let proved = schedule_valid(valid, &fabric, &config).expect("schedules");
    assert_eq!(plain.rows(), proved.rows());
    assert_eq!(plain.horizon(), proved.horizon());
    assert_eq!(
        check_valid_schedule(valid, &fabric, proved.rows()).map(|c| c.horizon),
        Ok(proved.horizon())
    );
    // The same transfers elsewhere: every destination 64 KiB higher.
    let mut moved = phase.clone();
    for t in &mut moved.transfers {
        for (_, address) in &mut t.destinations {
            *address += 0x1_0000;
        }
    }
    let moved_valid = ValidPhase::new(&moved).expect("still valid");
    let again = plain
        .readdress(&moved, &fabric, &config)
        .expect("readdresses");
    let again_valid = proved
        .readdress_valid(moved_valid, &fabric, &config)
        .expect("readdresses");
    assert_eq!(again.rows(), again_valid.rows());
    assert_ne!(again.rows(), plain.rows());
    assert_eq!(
        check_valid_schedule(moved_valid, &fabric, again_valid.rows()).map(|c| c.horizon),
        Ok(proved.horizon())
    );
    // The moved rows are not the first phase's.
    assert!(check_valid_schedule(valid, &fabric, again_valid.rows()).is_err());

    // The scheduler stage gives the same rows as plain data, and its
    // readdress capability moves them as `Schedule::readdress` does.
    let stage = BuiltinScheduler { config };
    let request = ScheduleRequest {
        label: 0,
        relocatable: true,
    };
    let output = stage.schedule(valid, &fabric, request).expect("schedules");
    assert_eq!(&output.rows, plain.rows());
    let moved_output = output
        .readdress
        .as_ref()
        .expect("the built-in scheduler can readdress")
        .readdress(moved_valid, &fabric, request)
        .expect("readdresses");
    assert_eq!(&moved_output.rows, again.rows());
    assert!(moved_output.readdress.is_some());

    let bad = phase_with_overlap();
    assert_eq!(
        ValidPhase::new(&bad).map(|_| ()),
        validate_phase(&bad),
        "an invalid phase gets no proof"
    );
    assert!(validate_phase(&bad).is_err());
}

/// Two transfers writing the same bytes of tile 1.
fn phase_with_overlap() -> Phase {
    phase(vec![
        transfer(0, 1, 0x4c000, 0x90000, 4),
        transfer(2, 1, 0x4c000, 0x90008, 4),
    ])
}
