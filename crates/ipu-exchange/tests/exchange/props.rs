//! Properties over random phases: every schedule checks clean, bounds stay
//! below the horizon, replay moves the right words, and results do not
//! depend on threads or repetition.

use ipu_exchange::*;
use ipu_layout::TileId;
use proptest::prelude::*;
use smallvec::SmallVec;

use crate::common::{SparseMemory, fabric, initial_word, schedule_and_check};

/// One transfer before addresses: source, destinations (indices into the
/// other tiles), words, paired, gather.
type Spec = (u32, Vec<u32>, u32, bool, bool);

/// Lays a phase out in memory: sources from 0x4c000 up, destinations from
/// 0x90000 up on each tile; a gather reads every other word.
pub fn build_phase(tile_count: u32, specs: &[Spec]) -> Phase {
    let n = tile_count as usize;
    let mut send = vec![0x4c000u32; n];
    let mut recv = vec![0x90000u32; n];
    let mut transfers = Vec::new();
    for (source, dests, words, paired, gather) in specs {
        let source = source % tile_count;
        let mut destinations: SmallVec<[(TileId, u32); 2]> = SmallVec::new();
        let words = if *paired { (words + 1) & !1 } else { *words };
        let align = if *paired { 8 } else { 4 };
        for d in dests {
            // Skip the source and repeats.
            let d = (source + 1 + d % (tile_count - 1)) % tile_count;
            if destinations.iter().any(|&(t, _)| t.as_u32() == d) {
                continue;
            }
            let at = recv[d as usize].next_multiple_of(align);
            recv[d as usize] = at + 4 * words;
            destinations.push((TileId::from_u32(d), at));
        }
        if destinations.is_empty() {
            continue;
        }
        let start = send[source as usize].next_multiple_of(align);
        let source_addresses = if *gather && !*paired {
            send[source as usize] = start + 8 * words;
            (0..words).map(|k| start + 8 * k).collect()
        } else {
            send[source as usize] = start + 4 * words;
            smallvec::smallvec![start]
        };
        transfers.push(Transfer {
            source: TileId::from_u32(source),
            source_addresses,
            destinations,
            words,
            width: if *paired {
                Width::Paired64
            } else {
                Width::Word32
            },
        });
    }
    Phase {
        tile_count,
        transfers,
    }
}

fn spec(max_fanout: usize) -> impl Strategy<Value = Spec> {
    (
        any::<u32>(),
        proptest::collection::vec(any::<u32>(), 1..=max_fanout),
        1u32..60,
        any::<bool>(),
        prop::bool::weighted(0.15),
    )
}

fn phase(max_fanout: usize) -> impl Strategy<Value = Phase> {
    (4u32..24, proptest::collection::vec(spec(max_fanout), 1..40))
        .prop_map(|(tiles, specs)| build_phase(tiles, &specs))
}

fn unicast_phase() -> impl Strategy<Value = Phase> {
    (4u32..24, proptest::collection::vec(spec(1), 1..60)).prop_map(|(tiles, specs)| {
        let specs: Vec<Spec> = specs
            .into_iter()
            .map(|(s, d, w, _, g)| (s, d, w, false, g))
            .collect();
        build_phase(tiles, &specs)
    })
}

fn config() -> impl Strategy<Value = ScheduleConfig> {
    (
        0u32..20_000,
        1usize..64,
        any::<bool>(),
        any::<bool>(),
        2usize..600,
        // Phases split in time down to sets of a few jobs, or not at all.
        prop::sample::select(vec![usize::MAX, 2, 8, 32]),
    )
        .prop_map(
            |(slack, budget, split, paired, limit, split_jobs)| ScheduleConfig {
                target_slack_ppm: slack,
                fill_budget: budget,
                fanout_split: split,
                try_paired: paired,
                path_search_limit: limit,
                split_jobs,
                ..ScheduleConfig::default()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Another partner rule (`t ^ 1`, `t ^ 4`, `t ^ 8`): paired sends
    /// borrow the lane the fabric names, and the checker agrees.
    #[test]
    fn any_phase_schedules_and_checks_with_another_partner_rule(
        phase in phase(4),
        config in config(),
        partner in prop::sample::select(vec![1u32, 4, 8]),
    ) {
        let text = ipu_target::IPU21_TOML
            .replace("partner_xor = 2", &format!("partner_xor = {partner}"));
        let target = ipu_target::Target::from_toml(&text).expect("a valid description");
        let fabric = Fabric::new(&target).expect("a supported fabric");
        prop_assert_eq!(fabric.partner(TileId::from_u32(6)), TileId::from_u32(6 ^ partner));
        schedule_and_check(&phase, &fabric, &config);
    }

    #[test]
    fn any_phase_schedules_and_checks(phase in phase(4), config in config(), latency in 0u32..20) {
        let fabric = fabric().with_latency(latency);
        let s = schedule_and_check(&phase, &fabric, &config);
        prop_assert!(endpoint_lower_bound(&phase, &fabric) <= s.horizon());
    }

    /// Few tiles and wide multicasts, scheduled with and without fanout
    /// splitting: `schedule_and_check` asserts `multicast bound <= horizon`
    /// (here the receive ports usually bind, so the multicast bound rarely
    /// rises; the covered-sender property below makes it rise).
    #[test]
    fn multicast_bound_holds_on_dense_multicast(
        tiles in 3u32..8,
        specs in proptest::collection::vec(
            (any::<u32>(), proptest::collection::vec(any::<u32>(), 1..8), 1u32..40, Just(false), Just(false)),
            1..12,
        ),
        split in any::<bool>(),
        latency in 0u32..6,
    ) {
        let phase = build_phase(tiles, &specs);
        let fabric = fabric().with_latency(latency);
        let config = ScheduleConfig { fanout_split: split, ..ScheduleConfig::default() };
        let s = schedule_and_check(&phase, &fabric, &config);
        prop_assert!(s.multicast_lower_bound() <= s.horizon());
    }

    /// The covered-sender pattern with random sizes and random extra
    /// transfers: tile 0 sends to tiles 1 and 2, tile 3 multicasts to both
    /// and sends more to tile 4. The multicast bound rises above the
    /// stronger one in about a third of the cases, and must stay at or
    /// below the horizon.
    #[test]
    fn multicast_bound_holds_on_covered_senders(
        a in (1u32..60, 1u32..60),
        b in (1u32..60, 0u32..60),
        noise in proptest::collection::vec(
            (any::<u32>(), proptest::collection::vec(any::<u32>(), 1..4), 1u32..20, Just(false), Just(false)),
            0..4,
        ),
        latency in 0u32..6,
    ) {
        let mut specs: Vec<Spec> = vec![
            (0, vec![0], a.0, false, false),
            (0, vec![1], a.1, false, false),
            (3, vec![2, 3], b.0, false, false),
        ];
        if b.1 > 0 {
            specs.push((3, vec![0], b.1, false, false));
        }
        specs.extend(noise);
        let phase = build_phase(5, &specs);
        let fabric = fabric().with_latency(latency);
        let s = schedule_and_check(&phase, &fabric, &ScheduleConfig::default());
        prop_assert!(s.multicast_lower_bound() <= s.horizon());
    }

    #[test]
    fn unicast_word32_phases_reach_the_bound(phase in unicast_phase()) {
        // With no slack and an unlimited path search, the critical-set
        // scheduler finishes exactly at the endpoint bound (plus latency).
        let fabric = fabric();
        let config = ScheduleConfig {
            target_slack_ppm: 0,
            path_search_limit: usize::MAX,
            ..ScheduleConfig::default()
        };
        let s = schedule_and_check(&phase, &fabric, &config);
        prop_assert_eq!(s.horizon(), s.stronger_lower_bound());
    }

    #[test]
    fn replay_writes_exactly_the_transfers(phase in phase(3)) {
        let fabric = fabric();
        let s = schedule_and_check(&phase, &fabric, &ScheduleConfig::default());
        let mut memory = SparseMemory::default();
        let stats = replay(s.rows(), &fabric, &mut memory).expect("replays");
        let mut words = 0u64;
        for t in &phase.transfers {
            for &(d, at) in &t.destinations {
                for k in 0..t.words {
                    let src = t.source_word_address(k).unwrap();
                    prop_assert_eq!(
                        memory.read_word(d, at + 4 * k).unwrap(),
                        initial_word(t.source.as_u32(), src)
                    );
                    words += 1;
                }
            }
        }
        prop_assert_eq!(stats.words_written, words);
        prop_assert_eq!(memory.words.len() as u64, words);
    }

    #[test]
    fn kept_kind_is_the_shorter(phase in phase(2)) {
        let fabric = fabric();
        let s = schedule_and_check(&phase, &fabric, &ScheduleConfig::default());
        match s.paired_horizon() {
            Some(p) => prop_assert_eq!(s.horizon(), p.min(s.ordinary_horizon())),
            None => prop_assert_eq!(s.horizon(), s.ordinary_horizon()),
        }
        if s.kind() == ScheduleKind::Paired {
            prop_assert!(s.paired_horizon().unwrap() < s.ordinary_horizon());
        }
    }

    #[test]
    fn decoded_rows_cover_the_horizon(phase in phase(3)) {
        let fabric = fabric();
        let s = schedule_and_check(&phase, &fabric, &ScheduleConfig::default());
        for t in 0..phase.tile_count {
            let timeline = decode(s.rows().row(TileId::from_u32(t))).expect("decodes");
            prop_assert!(timeline.end() <= s.horizon());
        }
    }
}

#[test]
fn results_do_not_depend_on_threads() {
    use ipu_exchange::generate::{GenConfig, ReduceConfig, generate_phase, reduce_phase};
    let mut phases: Vec<Phase> = (0..6)
        .map(|seed| {
            generate_phase(&GenConfig {
                tile_count: 64,
                transfers: 300,
                target_bound: 400,
                max_fanout: if seed < 4 { 3 } else { 40 },
                paired_percent: 30,
                balanced_sources: false,
                seed,
            })
        })
        .collect();
    // A reduce phase large enough that the per-tile parallel passes split
    // their work, with unicast, group multicasts and broadcasts.
    phases.push(reduce_phase(&ReduceConfig {
        tile_count: 256,
        used_tiles: 250,
        rows: 250,
        columns: 256,
        partials: 2,
        row_block: 25,
        column_block: 24,
        broadcast_vectors: 1,
        seed: 7,
    }));
    let fabric = fabric();
    let config = ScheduleConfig::default();
    let parallel = schedule_phases(&phases, &fabric, &config).expect("schedules");
    let single = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool")
        .install(|| schedule_phases(&phases, &fabric, &config).expect("schedules"));
    for ((p, s), phase) in parallel.iter().zip(&single).zip(&phases) {
        assert_eq!(p.rows(), s.rows());
        assert_eq!(p.horizon(), s.horizon());
        check_schedule(phase, &fabric, p.rows()).expect("checks");
    }
}

/// The phase of `specs` as iteration `k` of a repeat: laid out as
/// [`build_phase`] does, then transfer `i` moved by `k * (4096 + 8 i)`
/// bytes on every tile. Iteration 0 packs transfers back to back; later
/// ones open gaps between them, so which transfers sit next to each other
/// in memory changes from one iteration to the next.
fn relocated_phase(tile_count: u32, specs: &[Spec], k: u32) -> Phase {
    let mut phase = build_phase(tile_count, specs);
    for (i, t) in phase.transfers.iter_mut().enumerate() {
        let shift = k * (4096 + 8 * i as u32);
        for a in &mut t.source_addresses {
            *a += shift;
        }
        for (_, a) in &mut t.destinations {
            *a += shift;
        }
    }
    phase
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn relocatable_rows_are_affine_in_the_addresses(
        tiles in 4u32..20,
        specs in proptest::collection::vec(spec(3), 1..40),
        config in config(),
    ) {
        // Relocatable rows of three iterations check clean, have the same
        // lengths, and iteration 2's words are iteration 0's plus twice the
        // difference to iteration 1: the repeat patches of a package.
        let fabric = fabric();
        let config = ScheduleConfig { relocatable: true, ..config };
        let rows: Vec<Schedule> = (0..3)
            .map(|k| schedule_and_check(&relocated_phase(tiles, &specs, k), &fabric, &config))
            .collect();
        // The timing does not depend on addresses: re-encoding iteration
        // 0's schedule with another iteration's addresses gives exactly the
        // rows of scheduling that iteration afresh.
        for (k, fresh) in rows.iter().enumerate().skip(1) {
            let moved = rows[0]
                .readdress(&relocated_phase(tiles, &specs, k as u32), &fabric, &config)
                .expect("same transfers, other addresses");
            prop_assert_eq!(moved.rows(), fresh.rows());
            prop_assert_eq!(moved.horizon(), fresh.horizon());
            prop_assert!(check_schedule(&relocated_phase(tiles, &specs, k as u32), &fabric, moved.rows()).is_ok());
        }
        for t in 0..tiles {
            let tile = TileId::from_u32(t);
            let (r0, r1, r2) = (rows[0].rows().row(tile), rows[1].rows().row(tile), rows[2].rows().row(tile));
            prop_assert_eq!(r0.len(), r1.len());
            prop_assert_eq!(r0.len(), r2.len());
            for i in 0..r0.len() {
                let delta = r1[i].wrapping_sub(r0[i]);
                prop_assert_eq!(r2[i], r0[i].wrapping_add(delta.wrapping_mul(2)), "tile {} word {}", t, i);
            }
        }
    }
}

#[test]
fn readdress_rejects_another_phase() {
    let specs: Vec<Spec> = vec![
        (0, vec![1, 2], 8, false, false),
        (1, vec![0], 5, false, false),
    ];
    let fabric = fabric();
    let config = ScheduleConfig::default();
    let s = schedule_and_check(&build_phase(4, &specs), &fabric, &config);
    // More words in one transfer: not the same phase.
    let mut other = specs.clone();
    other[1].2 = 6;
    let e = s
        .readdress(&build_phase(4, &other), &fabric, &config)
        .unwrap_err();
    assert!(
        matches!(
            e,
            ScheduleError::Readdress {
                transfer: Some(1),
                ..
            }
        ),
        "{e}"
    );
    // Fewer transfers.
    let e = s
        .readdress(&build_phase(4, &specs[..1]), &fabric, &config)
        .unwrap_err();
    assert!(matches!(e, ScheduleError::Readdress { .. }), "{e}");
    // Another destination tile.
    let mut other = specs.clone();
    other[0].1 = vec![1, 1];
    let e = s
        .readdress(&build_phase(4, &other), &fabric, &config)
        .unwrap_err();
    assert!(e.to_string().contains("cannot reuse the schedule"), "{e}");
}

/// A sender whose every receiver also hears another tile's multicast must
/// wait while that multicast is sent whole, or the multicast's sender pays
/// for copies: tile 0 sends 100 words to each of tiles 1 and 2, tile 3
/// multicasts 100 words to both and 100 more to tile 4. Every lane and port
/// needs 200 cycles, but the multicast bound is 250 (plus latency), and the
/// scheduler's horizon respects it.
#[test]
fn multicast_bound_counts_covered_senders() {
    let specs: Vec<Spec> = vec![
        (0, vec![0], 100, false, false),
        (0, vec![1], 100, false, false),
        (3, vec![2, 3], 100, false, false),
        (3, vec![0], 100, false, false),
    ];
    let phase = build_phase(5, &specs);
    let fabric = fabric();
    assert_eq!(phase.transfers[2].destinations.len(), 2);
    assert_eq!(endpoint_lower_bound(&phase, &fabric), 200);
    let latency = u64::from(fabric.latency_cycles());
    assert_eq!(multicast_lower_bound(&phase, &fabric), 250 + latency);
    let s = schedule_and_check(&phase, &fabric, &ScheduleConfig::default());
    assert_eq!(s.multicast_lower_bound(), 250 + latency);
}
