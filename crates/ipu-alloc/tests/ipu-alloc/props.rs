//! Properties over random problems: whatever `place` returns passes the
//! checker and is never below the lower bound; every failure is explained
//! consistently; arbitrary inputs never panic; results do not depend on the
//! thread count. Also the memory profile on a hand-checked tile.

use ipu_alloc::generate::{siglip_like, zero_slack};
use ipu_alloc::{
    CsvProblem, MemoryMap, MemoryProfile, PlaceConfig, PlaceError, Problem, Request, RequestId,
    Reservation, SolveConfig, SolveResult, TileProblem, Verdict, check_placement, lower_bound,
    place,
};
use ipu_layout::{MemoryClass, TileId};
use proptest::prelude::*;
use smallvec::SmallVec;

fn request_strategy(id: u32, tile_requests: u32) -> impl Strategy<Value = Request> {
    (
        any::<bool>(),
        1u32..40_000,
        prop_oneof![Just(1u32), Just(8), Just(32)],
        0u32..24,
        0u32..6,
        proptest::option::weighted(0.15, 0..tile_requests),
    )
        .prop_map(
            move |(interleaved, bytes, alignment, first, len, partner)| Request {
                id: RequestId::from_u32(id),
                class: if interleaved {
                    MemoryClass::Ipu21Interleaved
                } else {
                    MemoryClass::Ipu21Standard
                },
                bytes,
                alignment,
                first_step: first,
                last_step: first + len,
                separate_from: partner
                    .filter(|&p| p != id)
                    .map(|p| SmallVec::from_slice(&[RequestId::from_u32(p)]))
                    .unwrap_or_default(),
            },
        )
}

fn tile_strategy(tile: u32) -> impl Strategy<Value = TileProblem> {
    (1u32..40)
        .prop_flat_map(move |n| {
            let requests: Vec<_> = (0..n).map(|i| request_strategy(i, n)).collect();
            let reservations = proptest::collection::vec(
                (
                    0u32..150,
                    1u32..20,
                    proptest::option::of((0u32..20, 0u32..8)),
                ),
                0..3,
            );
            (requests, reservations)
        })
        .prop_map(move |(requests, reservations)| TileProblem {
            tile: TileId::from_u32(tile),
            reservations: reservations
                .into_iter()
                .map(|(at, len, steps)| Reservation {
                    start: 0x4c000 + at * 4096,
                    end: 0x4c000 + at * 4096 + len * 1024,
                    steps: steps.map(|(a, l)| (a, a + l)),
                    label: format!("r{at}"),
                })
                .filter(|r| r.end <= 0xe8000)
                .collect(),
            requests,
        })
}

fn problem_strategy() -> impl Strategy<Value = Problem> {
    (1u32..4)
        .prop_flat_map(|tiles| (0..tiles).map(tile_strategy).collect::<Vec<_>>())
        .prop_map(|tiles| Problem {
            map: MemoryMap::ipu21(),
            tiles,
        })
}

fn assert_consistent(problem: &Problem, config: &PlaceConfig) {
    match place(problem, config) {
        Ok(placement) => {
            check_placement(problem, &placement).unwrap();
            for (tp, pl) in problem.tiles.iter().zip(placement.tiles()) {
                let bound = lower_bound(tp, &problem.map);
                assert!(bound.peak_with_reservations <= pl.achieved_peak_bytes());
                assert!(!bound.proves_infeasible());
            }
        }
        Err(PlaceError::DoesNotFit(f)) => {
            let tp = problem.tiles.iter().find(|t| t.tile == f.tile).unwrap();
            let r = tp.requests.iter().find(|r| r.id == f.request).unwrap();
            assert_eq!(
                (f.bytes, f.alignment, f.class),
                (r.bytes, r.alignment, r.class)
            );
            assert_eq!((f.first_step, f.last_step), (r.first_step, r.last_step));
            assert!(f.first_step <= f.step && f.step <= f.last_step);
            assert_eq!(f.allowed_ranges, problem.map.class_ranges(r.class));
            let largest = f.free.iter().map(|g| g.1 - g.0).max().unwrap_or(0);
            assert_eq!(largest, f.largest_free_gap);
            let bound = lower_bound(tp, &problem.map);
            match f.verdict {
                Verdict::BoundExceeded { .. } => assert!(bound.proves_infeasible()),
                Verdict::TooLarge { largest_gap } => assert!(largest_gap < f.bytes),
                Verdict::Exhausted { .. } | Verdict::Unknown { .. } => {
                    assert!(!bound.proves_infeasible())
                }
            }
        }
        Err(e) => panic!("unexpected error on a valid problem: {e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn placements_pass_the_checker_and_failures_are_explained(problem in problem_strategy()) {
        assert_consistent(&problem, &PlaceConfig { verify: true, ..PlaceConfig::default() });
    }

    #[test]
    fn tight_tiles_use_the_exact_search_soundly(problem in problem_strategy()) {
        // Greedy disabled: every tile goes to the exact search.
        let config = PlaceConfig { strategies: vec![], exact_node_budget: 20_000, ..PlaceConfig::default() };
        assert_consistent(&problem, &config);
    }

    #[test]
    fn zero_slack_csv_instances_are_solved_at_the_bound(seed in any::<u64>(), n in 5usize..60) {
        let (p, cut) = zero_slack(seed, n, 1 << 16, 200);
        let lb = p.lower_bound();
        prop_assert!(p.check(lb, &cut).is_ok());
        let out = p.solve(lb, &SolveConfig { max_nodes: 2_000_000, timeout: None, ..SolveConfig::default() });
        prop_assert_eq!(out.result, SolveResult::Fits);
        let offsets = out.offsets.unwrap();
        prop_assert!(p.check(lb, &offsets).is_ok());
    }

    #[test]
    fn random_csv_solutions_are_checked_and_never_below_the_bound(
        rows in proptest::collection::vec((0u64..30, 1u64..10, 1u64..100, 0u32..3), 1..40),
        slack in 0u64..30,
    ) {
        let text: String = rows.iter().enumerate()
            .map(|(i, &(lo, len, size, a))| format!("{i},{lo},{},{size},{}\n", lo + len, 1u64 << (a * 2)))
            .collect();
        let p = CsvProblem::parse(&text).unwrap();
        let lb = p.lower_bound();
        let cap = lb + lb * slack / 100;
        let out = p.solve(cap, &SolveConfig { max_nodes: 200_000, timeout: None, ..SolveConfig::default() });
        match out.result {
            SolveResult::Fits => {
                let offsets = out.offsets.unwrap();
                prop_assert!(p.check(cap, &offsets).is_ok());
                prop_assert!(lb <= out.peak && out.peak <= cap);
            }
            SolveResult::Infeasible => prop_assert!(out.peak > cap),
            SolveResult::Unknown => {}
        }
    }

    #[test]
    fn arbitrary_problems_never_panic(
        raw in proptest::collection::vec(
            (any::<u32>(), any::<bool>(), any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
            0..12),
        res in proptest::collection::vec((any::<u32>(), any::<u32>(), any::<Option<(u32, u32)>>()), 0..3),
    ) {
        let requests = raw.iter().map(|&(id, inter, bytes, align, first, last, partner)| Request {
            id: RequestId::from_u32(id % 16),
            class: if inter { MemoryClass::Ipu21Interleaved } else { MemoryClass::Ipu21Standard },
            bytes: bytes >> (id % 24),
            alignment: if align % 3 == 0 { align } else { 1 << (align % 12) },
            first_step: first,
            last_step: if partner % 2 == 0 { last } else { first.saturating_add(last % 4) },
            separate_from: SmallVec::from_slice(&[RequestId::from_u32(partner % 16)]),
        }).collect();
        let reservations = res.iter().map(|&(a, b, steps)| Reservation {
            start: a, end: b, steps, label: String::new(),
        }).collect();
        let problem = Problem {
            map: MemoryMap::ipu21(),
            tiles: vec![TileProblem { tile: TileId::from_u32(0), reservations, requests }],
        };
        let config = PlaceConfig { exact_node_budget: 5_000, ..PlaceConfig::default() };
        match place(&problem, &config) {
            Ok(placement) => prop_assert!(check_placement(&problem, &placement).is_ok()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        let _ = MemoryProfile::from_problem(&problem);
    }

    #[test]
    fn arbitrary_csv_text_never_panics(text in "[0-9a-z,\\n ]{0,200}") {
        if let Ok(p) = CsvProblem::parse(&text) {
            let out = p.solve(p.lower_bound(), &SolveConfig { max_nodes: 10_000, timeout: None, ..SolveConfig::default() });
            if let Some(o) = out.offsets {
                prop_assert!(p.check(p.lower_bound().max(out.peak), &o).is_ok());
            }
        }
    }
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let problem = siglip_like(7, 48, 120, 60);
    let config = PlaceConfig::default();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(|| place(&problem, &config))
        .unwrap();
    let many = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap()
        .install(|| place(&problem, &config))
        .unwrap();
    assert_eq!(one, many);
    check_placement(&problem, &one).unwrap();
    assert!(one.summary().achieved_bytes >= one.summary().bound_bytes);
}

#[test]
fn memory_profile_counts_live_bytes_per_step_and_round_trips() {
    let mk = |id, class, bytes, first, last| Request {
        id: RequestId::from_u32(id),
        class,
        bytes,
        alignment: 8,
        first_step: first,
        last_step: last,
        separate_from: SmallVec::new(),
    };
    let problem = Problem {
        map: MemoryMap::ipu21(),
        tiles: vec![TileProblem {
            tile: TileId::from_u32(3),
            reservations: vec![
                Reservation {
                    start: 0x4c000,
                    end: 0x4d000,
                    steps: None,
                    label: "rt".into(),
                },
                Reservation {
                    start: 0x4d000,
                    end: 0x4d800,
                    steps: Some((2, 2)),
                    label: "x".into(),
                },
            ],
            requests: vec![
                mk(0, MemoryClass::Ipu21Standard, 100, 0, 1),
                mk(1, MemoryClass::Ipu21Interleaved, 300, 1, 2),
                mk(2, MemoryClass::Ipu21Standard, 50, 3, 3),
            ],
        }],
    };
    let profile = MemoryProfile::from_problem(&problem);
    let t = &profile.tiles[0];
    let at = |step: u32| {
        let r = t
            .runs
            .iter()
            .find(|r| r.first_step <= step && step <= r.last_step)
            .unwrap();
        (r.standard, r.interleaved, r.reserved)
    };
    assert_eq!(at(0), (100, 0, 4096));
    assert_eq!(at(1), (100, 300, 4096));
    assert_eq!(at(2), (0, 300, 4096 + 2048));
    assert_eq!(at(3), (50, 0, 4096));
    assert_eq!(
        (t.peak_step, t.effective_peak_bytes),
        (2, 300 + 4096 + 2048)
    );
    assert_eq!(profile.peak_tile, Some(TileId::from_u32(3)));
    assert_eq!(profile.schema, ipu_alloc::PROFILE_SCHEMA);
    let json = profile.to_json();
    assert!(json.contains("\"effective_peak_bytes\""));
    assert_eq!(MemoryProfile::from_json(&json).unwrap(), profile);
}

/// Shrunk from `tight_tiles_use_the_exact_search_soundly`: with separation
/// partners the search does not split independent parts, and it once
/// solved only the first part and returned the rest unplaced.
#[test]
fn regression_exact_search_with_partners_places_every_part() {
    let mk = |id: u32, first: u32, last: u32, partner: Option<u32>| Request {
        id: RequestId::from_u32(id),
        class: MemoryClass::Ipu21Standard,
        bytes: 4096,
        alignment: 8,
        first_step: first,
        last_step: last,
        separate_from: partner
            .map(|p| SmallVec::from_slice(&[RequestId::from_u32(p)]))
            .unwrap_or_default(),
    };
    let problem = Problem {
        map: MemoryMap::ipu21(),
        tiles: vec![TileProblem {
            tile: TileId::from_u32(0),
            reservations: vec![],
            requests: vec![mk(0, 0, 1, None), mk(1, 5, 6, Some(0)), mk(2, 9, 9, None)],
        }],
    };
    let config = PlaceConfig {
        strategies: vec![],
        fallback_strategies: vec![],
        verify: true,
        ..PlaceConfig::default()
    };
    let placement = place(&problem, &config).unwrap();
    assert!(matches!(
        placement.tiles()[0].method(),
        ipu_alloc::PlaceMethod::Exact { .. }
    ));
    check_placement(&problem, &placement).unwrap();
}

#[test]
fn a_misfit_reports_the_first_failing_tile_whatever_the_thread_count() {
    // Three tiles get one more request than their memory holds for its
    // whole lifetime; the exact search stops at the first tile it cannot
    // place, so the report must still name the lowest of them.
    let mut problem = siglip_like(7, 48, 120, 60);
    let capacity = problem.map.loader_limit() - problem.map.sram_start();
    for &t in &[40usize, 5, 17] {
        let tile = &mut problem.tiles[t];
        let id = u32::try_from(tile.requests.len()).unwrap();
        tile.requests.push(Request {
            id: RequestId::from_u32(id),
            class: MemoryClass::Ipu21Standard,
            bytes: capacity - 64,
            alignment: 8,
            first_step: 0,
            last_step: 59,
            separate_from: SmallVec::new(),
        });
    }
    let config = PlaceConfig::default();
    let run = |threads| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        match pool.install(|| place(&problem, &config)) {
            Err(PlaceError::DoesNotFit(f)) => (f.tile, f.request, f.failing_tiles),
            Err(e) => panic!("expected a misfit, got {e}"),
            Ok(_) => panic!("expected a misfit, got a placement"),
        }
    };
    let one = run(1);
    assert_eq!(one.0, TileId::from_u32(5));
    assert!(one.2 >= 3, "{one:?}");
    assert_eq!(one, run(2));
    assert_eq!(one, run(4));
}
