//! Solving CSV problems: degenerate inputs answered at once, ML-shaped
//! traces near their bound, gridded zero-slack instances at their bound,
//! and the exact search's verdicts against brute force on tiny problems.

use std::time::{Duration, Instant};

use ipu_alloc::generate::{ml_trace, near_zero_slack_grid, zero_slack_grid};
use ipu_alloc::{CsvBuffer, CsvProblem, Infeasibility, SolveConfig, SolveMethod, SolveResult};
use ipu_layout::rng::SplitMix64;
use proptest::prelude::*;

/// A generous wall-clock budget: a degenerate input must be answered long
/// before it, without searching.
fn patient() -> SolveConfig {
    SolveConfig {
        max_nodes: u64::MAX,
        timeout: Some(Duration::from_secs(600)),
        ..SolveConfig::default()
    }
}

fn buffer(id: &str, lower: u64, upper: u64, size: u64, offset: Option<u64>) -> CsvBuffer {
    CsvBuffer {
        id: id.into(),
        lower,
        upper,
        size,
        alignment: 1,
        offset,
    }
}

#[test]
fn degenerate_inputs_are_answered_without_searching() {
    let cases: Vec<(CsvProblem, u64, SolveResult)> = vec![
        // Empty lifetimes and zero sizes: placed, the empty lifetime still
        // inside the capacity.
        (
            CsvProblem {
                buffers: vec![
                    buffer("a", 0, 10, 0, None),
                    buffer("b", 3, 3, 7, None),
                    buffer("c", 0, 5, 4, None),
                ],
            },
            8,
            SolveResult::Fits,
        ),
        // Every buffer fixed at offset 0, two of them live together.
        (
            CsvProblem {
                buffers: vec![
                    buffer("a", 0, 10, 5, Some(0)),
                    buffer("b", 5, 15, 5, Some(0)),
                    buffer("c", 20, 30, 5, Some(0)),
                ],
            },
            1 << 20,
            SolveResult::Infeasible,
        ),
        // Sizes near u64::MAX: live bytes beyond 64 bits.
        (
            CsvProblem {
                buffers: vec![
                    buffer("a", 0, 10, u64::MAX, None),
                    buffer("b", 5, 20, u64::MAX - 1, None),
                ],
            },
            u64::MAX,
            SolveResult::Infeasible,
        ),
        (
            CsvProblem {
                buffers: vec![buffer("a", 0, 10, u64::MAX, None)],
            },
            u64::MAX,
            SolveResult::Fits,
        ),
        // A buffer that is never live but larger than the capacity.
        (
            CsvProblem {
                buffers: vec![buffer("a", 0, 10, 4, None), buffer("b", 7, 7, 9, None)],
            },
            8,
            SolveResult::Infeasible,
        ),
        // A fixed buffer beyond the capacity.
        (
            CsvProblem {
                buffers: vec![buffer("a", 0, 10, 4, Some(6))],
            },
            8,
            SolveResult::Infeasible,
        ),
    ];
    for (k, (p, cap, want)) in cases.iter().enumerate() {
        let t = Instant::now();
        let out = p.solve(*cap, &patient());
        assert_eq!(out.result, *want, "case {k}: {out:?}");
        assert!(!out.used_exact, "case {k} searched: {out:?}");
        assert!(t.elapsed() < Duration::from_secs(5), "case {k} was slow");
        match out.result {
            SolveResult::Fits => {
                let offsets = out.offsets.unwrap();
                p.check(*cap, &offsets).unwrap();
                assert!(out.lower_bound <= out.peak && out.peak <= *cap);
            }
            SolveResult::Infeasible => {
                let reason = out.infeasibility.unwrap();
                assert!(!reason.to_string().is_empty());
            }
            SolveResult::Unknown => unreachable!(),
        }
    }
}

#[test]
fn fixed_collisions_and_big_buffers_name_the_buffers() {
    let p = CsvProblem {
        buffers: vec![buffer("x", 0, 4, 3, Some(2)), buffer("y", 2, 6, 3, Some(0))],
    };
    let out = p.solve(100, &patient());
    assert!(
        matches!(&out.infeasibility, Some(Infeasibility::FixedOverlap { first, second }) if first == "x" && second == "y"),
        "{out:?}"
    );
    let q = CsvProblem {
        buffers: vec![buffer("big", 0, 4, 101, None)],
    };
    let out = q.solve(100, &patient());
    assert!(
        matches!(&out.infeasibility, Some(Infeasibility::TooLarge { id, size: 101, .. }) if id == "big"),
        "{out:?}"
    );
    // Live bytes above the capacity: the first time of the peak.
    let r = CsvProblem {
        buffers: vec![buffer("a", 0, 4, 60, None), buffer("b", 3, 9, 60, None)],
    };
    let out = r.solve(100, &patient());
    assert!(
        matches!(
            out.infeasibility,
            Some(Infeasibility::BoundExceeded {
                time: 3,
                live_bytes: 120,
                ..
            })
        ),
        "{out:?}"
    );
    // The best placement made is still reported.
    assert_eq!(out.peak, 120);
    r.check(120, out.offsets.as_ref().unwrap()).unwrap();
}

#[test]
fn an_empty_lifetime_does_not_change_the_search() {
    let (p, _) = zero_slack_grid(5, 60, 1 << 16, 1 << 10, 16);
    let lb = p.lower_bound();
    let config = SolveConfig {
        max_nodes: 2_000_000,
        timeout: None,
        parallel_search: false,
        ..SolveConfig::default()
    };
    let plain = p.solve(lb, &config);
    assert_eq!(plain.result, SolveResult::Fits);
    let mut q = p.clone();
    q.buffers.push(buffer("empty", 500, 500, 100, None));
    let with_empty = q.solve(lb, &config);
    assert_eq!(with_empty.result, SolveResult::Fits);
    assert_eq!(with_empty.nodes, plain.nodes);
    q.check(lb, with_empty.offsets.as_ref().unwrap()).unwrap();
}

#[test]
fn ml_traces_are_placed_near_their_bound() {
    for seed in 0..3 {
        let p = ml_trace(seed, 2_000);
        let lb = p.lower_bound();
        let config = SolveConfig {
            max_nodes: 0,
            timeout: None,
            ..SolveConfig::default()
        };
        let out = p.solve(u64::MAX, &config);
        assert_eq!(out.result, SolveResult::Fits);
        let offsets = out.offsets.unwrap();
        p.check(out.peak, &offsets).unwrap();
        assert!(lb <= out.peak, "seed {seed}: {} below {lb}", out.peak);
        assert!(
            out.peak as f64 <= 1.03 * lb as f64,
            "seed {seed}: {} vs {lb}",
            out.peak
        );
        // The same capacity again answers at once.
        let again = p.solve(out.peak, &config);
        assert_eq!(again.result, SolveResult::Fits);
        assert!(matches!(
            again.method,
            Some(SolveMethod::Skyline | SolveMethod::Greedy(_))
        ));
    }
}

#[test]
fn gridded_zero_slack_instances_are_solved_at_the_bound() {
    for seed in 0..4 {
        let (p, cut) = zero_slack_grid(seed, 80, 1 << 20, 1 << 20, 1024);
        let lb = p.lower_bound();
        assert_eq!(lb, 1 << 20);
        p.check(lb, &cut).unwrap();
        let out = p.solve(
            lb,
            &SolveConfig {
                max_nodes: 5_000_000,
                timeout: None,
                parallel_search: false,
                ..SolveConfig::default()
            },
        );
        assert_eq!(out.result, SolveResult::Fits, "seed {seed}");
        p.check(lb, out.offsets.as_ref().unwrap()).unwrap();
        assert_eq!(out.peak, lb);
    }
}

#[test]
fn near_zero_slack_instances_keep_their_cut_and_are_solved() {
    for seed in 0..3 {
        let (p, cut) = near_zero_slack_grid(seed, 60, 1 << 16, 1 << 12, 64, 10);
        p.check(1 << 16, &cut).unwrap();
        let lb = p.lower_bound();
        assert!(lb <= 1 << 16);
        let out = p.solve(
            1 << 16,
            &SolveConfig {
                max_nodes: 5_000_000,
                timeout: None,
                parallel_search: false,
                ..SolveConfig::default()
            },
        );
        assert_eq!(out.result, SolveResult::Fits, "seed {seed}");
        p.check(1 << 16, out.offsets.as_ref().unwrap()).unwrap();
        assert!(lb <= out.peak && out.peak <= 1 << 16);
    }
}

/// Whether any placement of `p` within `cap` exists, by trying every
/// offset of every buffer.
fn brute_force(p: &CsvProblem, cap: u64) -> bool {
    let n = p.buffers.len();
    let mut off = vec![0u64; n];
    loop {
        if p.check(cap, &off).is_ok() {
            return true;
        }
        let mut i = 0;
        loop {
            if i == n {
                return false;
            }
            off[i] += 1;
            if off[i] <= cap {
                break;
            }
            off[i] = 0;
            i += 1;
        }
    }
}

fn tiny_problem(seed: u64) -> (CsvProblem, u64) {
    let mut rng = SplitMix64::new(seed);
    let n = rng.range(1, 5) as usize;
    let buffers = (0..n)
        .map(|i| {
            let lower = rng.range(0, 5);
            let upper = lower + rng.range(0, 3);
            let alignment = [1u64, 1, 2][rng.range(0, 2) as usize];
            let offset = (rng.range(0, 9) == 0).then(|| rng.range(0, 3) * alignment);
            CsvBuffer {
                id: i.to_string(),
                lower,
                upper,
                size: rng.range(0, 3),
                alignment,
                offset,
            }
        })
        .collect();
    (CsvProblem { buffers }, rng.range(0, 6))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every verdict agrees with brute force: a placement returned passes
    /// the checker, and a proof of infeasibility is never wrong.
    #[test]
    fn verdicts_agree_with_brute_force(seed in any::<u64>()) {
        let (p, cap) = tiny_problem(seed);
        let out = p.solve(cap, &SolveConfig { max_nodes: 1_000_000, timeout: None, parallel_search: false, ..SolveConfig::default() });
        let exists = brute_force(&p, cap);
        match out.result {
            SolveResult::Fits => {
                prop_assert!(exists);
                prop_assert!(p.check(cap, out.offsets.as_ref().unwrap()).is_ok());
                prop_assert!(out.lower_bound <= out.peak && out.peak <= cap);
            }
            SolveResult::Infeasible => prop_assert!(!exists, "claimed infeasible: {:?}", p),
            SolveResult::Unknown => prop_assert!(false, "no verdict on a tiny problem: {:?}", p),
        }
    }
}
