//! The snapshot format: round trips, the fixture, and arbitrary input never
//! panicking the tool.

use ipu_exchange::report::snapshot_report;
use ipu_exchange::*;
use proptest::prelude::*;

use crate::common::fabric;

#[test]
fn the_fixture_schedules_and_checks() {
    let text = include_str!("../../../../fixtures/exchange/small.json");
    let snapshot = Snapshot::from_json(text).expect("the fixture parses");
    let fabric = fabric();
    for phase in snapshot.phases() {
        crate::common::schedule_and_check(&phase, &fabric, &ScheduleConfig::default());
    }
    let report = snapshot_report(text, &fabric, &ScheduleConfig::default(), true).unwrap();
    assert!(report.contains("total"), "{report}");
    assert!(!report.contains("error"), "{report}");
}

#[test]
fn snapshots_round_trip() {
    let phase = crate::props::build_phase(
        6,
        &[
            (0, vec![1, 2], 5, false, true),
            (1, vec![3], 4, true, false),
        ],
    );
    let snapshot = Snapshot::from_phases(6, std::slice::from_ref(&phase));
    let back = Snapshot::from_json(&snapshot.to_json()).unwrap();
    assert_eq!(back.phases(), vec![phase]);
    assert!(matches!(
        Snapshot::from_json(
            &snapshot
                .to_json()
                .replace("\"schema_version\":1", "\"schema_version\":7")
        ),
        Err(SnapshotError::Version { found: 7, .. })
    ));
    assert!(matches!(
        Snapshot::from_json("{"),
        Err(SnapshotError::Json { .. })
    ));
}

fn json_transfer() -> impl Strategy<Value = String> {
    (
        0u32..20,
        proptest::collection::vec(any::<u32>(), 0..3),
        proptest::collection::vec((0u32..20, any::<u32>()), 0..3),
        0u32..10,
        any::<bool>(),
    )
        .prop_map(|(s, src, dst, words, paired)| {
            let dst: Vec<String> = dst.iter().map(|(t, a)| format!("[{t},{}]", a & 0xfffff)).collect();
            let src: Vec<String> = src.iter().map(|a| (a & 0xfffff).to_string()).collect();
            format!(
                "{{\"source\":{s},\"source_addresses\":[{}],\"destinations\":[{}],\"words\":{words},\"width\":\"{}\"}}",
                src.join(","),
                dst.join(","),
                if paired { "Paired64" } else { "Word32" }
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn arbitrary_text_never_panics_the_tool(text in ".{0,200}") {
        let _ = snapshot_report(&text, &fabric(), &ScheduleConfig::default(), true);
    }

    #[test]
    fn arbitrary_snapshots_never_panic_the_tool(
        tiles in 0u32..12,
        transfers in proptest::collection::vec(json_transfer(), 0..6),
    ) {
        let text = format!(
            "{{\"schema_version\":1,\"tile_count\":{tiles},\"phases\":[{{\"phase\":3,\"transfers\":[{}]}}]}}",
            transfers.join(",")
        );
        let report = snapshot_report(&text, &fabric(), &ScheduleConfig::default(), true);
        // Every phase that schedules must also check clean.
        if let Ok(r) = report {
            for line in r.lines().filter(|l| l.trim_start().starts_with('3')) {
                // The check column is the last but one (the last is its time).
                let check = line.split_whitespace().rev().nth(1);
                prop_assert!(line.contains("error") || check == Some("ok"), "{}", line);
            }
        }
    }
}
