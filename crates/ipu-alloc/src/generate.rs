//! Instance generators for tests, benchmarks and the `alloc` xtask.
//!
//! - [`zero_slack`] and [`zero_slack_grid`]: a capacity × time rectangle
//!   cut into buffers by random guillotine cuts (on a grid, like the
//!   MiniMalloc benchmarks). The cut itself is a placement whose peak equals
//!   the peak-live lower bound, so the optimum is known and equals the
//!   bound. [`zero_slack_suite`] is the benchmark suite;
//!   [`near_zero_slack_grid`] and [`near_zero_slack_suite`] remove a tenth
//!   of the buffers, leaving slack in some sections.
//! - [`ml_trace`]: a training-step trace of a deep network: weights live
//!   throughout, activations kept for the backward pass, short-lived
//!   temporaries from bytes to hundreds of MiB, 64-bit sizes.
//!   [`ml_trace_suite`] is the large-trace benchmark suite.
//! - [`exact_classes`]: the exact search's benchmark classes (guillotine
//!   cuts, random interval graphs at their peak, training-step shapes; each
//!   zero-slack and near-zero-slack, 150 to 1000 buffers).
//! - [`siglip_like`]: a whole-chip tile problem at SigLIP scale (1472 tiles,
//!   about 340 requests per tile) around IPU21-style reservations.
//!
//! Generators are seeded and deterministic ([`SplitMix64`], the workspace's
//! one generator), so the crate needs no random-number dependency.

mod classes;

pub use classes::{
    CLASS_SIZES, SuiteClass, exact_classes, exact_classes_with, interval_graph, ml_zero_slack,
};

use ipu_layout::rng::SplitMix64;
use ipu_layout::{MemoryClass, TileId};
use smallvec::SmallVec;

use crate::{
    CsvBuffer, CsvProblem, MemoryMap, Problem, Request, RequestId, Reservation, TileProblem,
};

/// A zero-slack instance: `buffers` pieces cut from a `capacity` × `horizon`
/// rectangle, with the offsets of the cut (a placement at the bound).
///
/// Every time step is fully covered, so the peak-live lower bound equals
/// `capacity` and the cut proves it reachable.
pub fn zero_slack(
    seed: u64,
    buffers: usize,
    capacity: u64,
    horizon: u64,
) -> (CsvProblem, Vec<u64>) {
    zero_slack_grid(seed, buffers, capacity, horizon, 1)
}

/// [`zero_slack`] with every cut on a grid of `grain` units in both time
/// and address (the full rectangle is rounded down to the grid). With a
/// grain of 1 KiB on a 1 MiB × 1 Mi-step rectangle this is the shape of the
/// MiniMalloc benchmark instances: sizes and times are multiples of 1024,
/// so many buffers share sizes and boundaries.
pub fn zero_slack_grid(
    seed: u64,
    buffers: usize,
    capacity: u64,
    horizon: u64,
    grain: u64,
) -> (CsvProblem, Vec<u64>) {
    let mut rng = SplitMix64::new(seed);
    let grain = grain.max(1);
    // Work in grid units; scale back at the end.
    let (width, height) = ((horizon / grain).max(1), (capacity / grain).max(1));
    // Rectangles (t0, t1, a0, a1).
    let mut rects: Vec<(u64, u64, u64, u64)> = vec![(0, width, 0, height)];
    let mut stuck = 0;
    while rects.len() < buffers && stuck < 1000 {
        // Pick a rectangle with probability growing with its area, so cuts
        // spread over the whole rectangle.
        let k = {
            let a = rng.range(0, rects.len() as u64 - 1) as usize;
            let b = rng.range(0, rects.len() as u64 - 1) as usize;
            let area = |r: &(u64, u64, u64, u64)| u128::from(r.1 - r.0) * u128::from(r.3 - r.2);
            if area(&rects[a]) >= area(&rects[b]) {
                a
            } else {
                b
            }
        };
        let (t0, t1, a0, a1) = rects[k];
        let can_time = t1 - t0 >= 2;
        let can_space = a1 - a0 >= 2;
        if !can_time && !can_space {
            stuck += 1;
            continue;
        }
        let cut_time = if can_time && can_space {
            rng.next_u64() % 2 == 0
        } else {
            can_time
        };
        if cut_time {
            let t = rng.range(t0 + 1, t1 - 1);
            rects[k] = (t0, t, a0, a1);
            rects.push((t, t1, a0, a1));
        } else {
            let a = rng.range(a0 + 1, a1 - 1);
            rects[k] = (t0, t1, a0, a);
            rects.push((t0, t1, a, a1));
        }
    }
    // Shuffle so that file order carries no hint of the solution.
    for i in (1..rects.len()).rev() {
        let j = rng.range(0, i as u64) as usize;
        rects.swap(i, j);
    }
    let offsets = rects.iter().map(|r| r.2 * grain).collect();
    let buffers = rects
        .iter()
        .enumerate()
        .map(|(i, &(t0, t1, a0, a1))| CsvBuffer {
            id: i.to_string(),
            lower: t0 * grain,
            upper: t1 * grain,
            size: (a1 - a0) * grain,
            alignment: 1,
            offset: None,
        })
        .collect();
    (CsvProblem { buffers }, offsets)
}

/// A near-zero-slack instance: [`zero_slack_grid`] with about one buffer
/// in `drop_one_in` removed (and the others renumbered), and the offsets of
/// the cut for the rest. The capacity stays feasible (the cut still fits);
/// most sections keep no slack, those that lost a buffer keep some, as in
/// the MiniMalloc benchmark instances. With slack the search cannot rely
/// on forced points everywhere, which makes these the harder class.
pub fn near_zero_slack_grid(
    seed: u64,
    buffers: usize,
    capacity: u64,
    horizon: u64,
    grain: u64,
    drop_one_in: u64,
) -> (CsvProblem, Vec<u64>) {
    let (full, cut) = zero_slack_grid(seed, buffers, capacity, horizon, grain);
    let mut rng = SplitMix64::new(seed ^ 0xd20b);
    let mut kept = Vec::with_capacity(full.buffers.len());
    let mut offsets = Vec::with_capacity(full.buffers.len());
    for (b, o) in full.buffers.into_iter().zip(cut) {
        if drop_one_in == 0 || rng.range(1, drop_one_in) != 1 {
            kept.push(CsvBuffer {
                id: kept.len().to_string(),
                ..b
            });
            offsets.push(o);
        }
    }
    (CsvProblem { buffers: kept }, offsets)
}

/// One instance of a benchmark suite, with the capacity it is solved at.
#[derive(Clone, Debug)]
pub struct SuiteInstance {
    /// A short name for tables.
    pub name: String,
    /// The problem.
    pub problem: CsvProblem,
    /// The capacity to solve at (the lower bound for zero-slack instances).
    pub capacity: u64,
}

/// The zero-slack benchmark suite: twelve instances of 150 to 500 buffers
/// cut from a 1 MiB × 1 Mi-step rectangle, eight on the 1 KiB grid of the
/// MiniMalloc benchmarks and four with byte-exact cuts. Every one has a
/// placement at its capacity (the cut), which is also its lower bound.
pub fn zero_slack_suite() -> Vec<SuiteInstance> {
    let grid = [150usize, 200, 250, 300, 350, 400, 450, 500];
    let exact = [180usize, 270, 360, 480];
    let mut out = Vec::new();
    for (k, &n) in grid.iter().enumerate() {
        let (problem, _) = zero_slack_grid(1000 + k as u64, n, 1 << 20, 1 << 20, 1024);
        out.push(SuiteInstance {
            name: format!("grid-n{n}"),
            problem,
            capacity: 1 << 20,
        });
    }
    for (k, &n) in exact.iter().enumerate() {
        let (problem, _) = zero_slack_grid(2000 + k as u64, n, 1 << 20, 1 << 20, 1);
        out.push(SuiteInstance {
            name: format!("byte-n{n}"),
            problem,
            capacity: 1 << 20,
        });
    }
    out
}

/// The near-zero-slack benchmark suite: six instances of 200 to 500 cut
/// buffers on the 1 KiB grid with one buffer in ten removed, solved at
/// capacity 1 MiB (feasible by construction).
pub fn near_zero_slack_suite() -> Vec<SuiteInstance> {
    [200usize, 260, 320, 380, 440, 500]
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let (problem, _) = near_zero_slack_grid(3000 + k as u64, n, 1 << 20, 1 << 20, 1024, 10);
            SuiteInstance {
                name: format!("near-n{n}"),
                problem,
                capacity: 1 << 20,
            }
        })
        .collect()
}

/// A trace shaped like one training step of a deep network, with about
/// `buffers` buffers and 64-bit sizes.
///
/// Layers run forward, then backward in reverse, then an optimizer pass.
/// Each layer has weights live for the whole trace, an activation that
/// most layers keep for their backward step (so kept activations nest like
/// a stack and the peak sits at the turn from forward to backward), and
/// short-lived temporaries of every size from a few bytes up. The backward
/// step makes an activation gradient that lives two steps and a weight
/// gradient that lives until the optimizer consumes it. Layer sizes follow
/// a random walk between 1 KiB and 512 MiB, as stages of a network widen
/// and narrow.
pub fn ml_trace(seed: u64, buffers: usize) -> CsvProblem {
    let mut rng = SplitMix64::new(seed ^ 0x006d_6c74_7261_6365);
    let layers = (buffers / 11).max(1);
    // log2 of each layer's scale: a bounded random walk.
    let mut scale_log = 18i64;
    let scales: Vec<u64> = (0..layers)
        .map(|_| {
            scale_log = (scale_log + rng.range(0, 4) as i64 - 2).clamp(10, 29);
            1u64 << scale_log
        })
        .collect();
    // A size around `scale`: a factor between 1/4 and 2, rounded up to 64.
    let around = |rng: &mut SplitMix64, scale: u64| -> u64 {
        let v = scale / 4 + rng.range(0, scale.saturating_mul(7) / 4);
        v.div_ceil(64).max(1) * 64
    };
    // A temporary: log-uniform from 4 bytes up to `scale`.
    let temporary = |rng: &mut SplitMix64, scale: u64| -> u64 {
        let top = 63 - scale.leading_zeros() as u64;
        let bits = rng.range(2, top.max(2));
        (1u64 << bits) + rng.range(0, (1u64 << bits) - 1)
    };
    let forward_end = layers as u64 * 2;
    let backward_end = forward_end + layers as u64 * 2;
    let end = backward_end + layers as u64 / 4 + 2;
    let mut out: Vec<CsvBuffer> = Vec::with_capacity(buffers + layers);
    fn push(out: &mut Vec<CsvBuffer>, lower: u64, upper: u64, size: u64) {
        out.push(CsvBuffer {
            id: out.len().to_string(),
            lower,
            upper,
            size,
            alignment: 1,
            offset: None,
        });
    }
    let mut weights: Vec<u64> = Vec::with_capacity(layers * 2);
    let mut kept: Vec<Option<(u64, u64)>> = vec![None; layers];
    // Forward.
    for (l, &scale) in scales.iter().enumerate() {
        let t = l as u64 * 2;
        for _ in 0..rng.range(1, 2) {
            let w = around(&mut rng, scale / 2);
            weights.push(w);
            push(&mut out, 0, end, w);
        }
        let act = around(&mut rng, scale);
        if rng.range(0, 9) < 7 {
            kept[l] = Some((t, act));
        } else {
            push(&mut out, t, t + rng.range(2, 6), act);
        }
        for _ in 0..rng.range(1, 4) {
            let lower = t + rng.range(0, 1);
            let size = temporary(&mut rng, scale);
            push(&mut out, lower, lower + rng.range(1, 3), size);
        }
    }
    // Backward, in reverse: kept activations are freed here.
    for (k, l) in (0..layers).rev().enumerate() {
        let t = forward_end + k as u64 * 2;
        let scale = scales[l];
        if let Some((lower, act)) = kept[l] {
            push(&mut out, lower, t + 1, act);
        }
        let grad = around(&mut rng, scale);
        push(&mut out, t, t + 2, grad);
        let opt = backward_end + rng.range(0, end - backward_end - 1);
        let wgrad = around(&mut rng, scale / 2);
        push(&mut out, t + 1, opt.max(t + 2), wgrad);
        for _ in 0..rng.range(1, 4) {
            let lower = t + rng.range(0, 1);
            let size = temporary(&mut rng, scale);
            push(&mut out, lower, lower + rng.range(1, 3), size);
        }
    }
    // Optimizer: a short-lived temporary per weight, a few at a time.
    for (k, &w) in weights.iter().enumerate() {
        if out.len() >= buffers {
            break;
        }
        let t = backward_end + (k as u64 * 4) / weights.len().max(1) as u64;
        push(&mut out, t, t + 1, w / 2 + 64);
    }
    CsvProblem { buffers: out }
}

/// The large-trace benchmark suite: ML-shaped traces of 10k to 60k
/// buffers (see [`ml_trace`]), to be placed near their lower bound.
pub fn ml_trace_suite() -> Vec<SuiteInstance> {
    [10_000usize, 20_000, 40_000, 60_000]
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let problem = ml_trace(k as u64 + 1, n);
            let capacity = problem.lower_bound();
            SuiteInstance {
                name: format!("ml-n{n}"),
                problem,
                capacity,
            }
        })
        .collect()
}

/// A SigLIP-scale whole-chip problem: `tiles` tiles with about
/// `requests_per_tile` requests each over `steps` steps, around reservations
/// for runtime, code and exchange tables in region 0. Peak live bytes stay
/// below about 70 % of the usable space, so it is feasible.
pub fn siglip_like(seed: u64, tiles: u32, requests_per_tile: u32, steps: u32) -> Problem {
    let map = MemoryMap::ipu21();
    let r0 = map
        .regions()
        .first()
        .map_or((map.sram_start(), map.sram_start()), |r| (r.start, r.end));
    let tiles = (0..tiles)
        .map(|t| {
            let mut rng = SplitMix64::new(seed ^ (u64::from(t) << 32) ^ 0x5eed);
            let code = 16_384 + rng.range(0, 8) as u32 * 1024;
            let tables = 24_576 + rng.range(0, 16) as u32 * 512;
            let reservations = vec![
                Reservation {
                    start: r0.0,
                    end: r0.0 + 8192,
                    steps: None,
                    label: "runtime".into(),
                },
                Reservation {
                    start: r0.0 + 8192,
                    end: r0.0 + 8192 + code,
                    steps: None,
                    label: "code".into(),
                },
                Reservation {
                    start: r0.1 - tables,
                    end: r0.1,
                    steps: None,
                    label: "exchange tables".into(),
                },
            ];
            let mut requests = Vec::with_capacity(requests_per_tile as usize);
            // Weights: long-lived interleaved operands.
            let weights = requests_per_tile / 20;
            for k in 0..weights {
                let first = rng.range(0, u64::from(steps) / 2) as u32;
                requests.push(Request {
                    id: RequestId::from_u32(k),
                    class: MemoryClass::Ipu21Interleaved,
                    bytes: (rng.range(2, 8) * 1024 + 16) as u32,
                    alignment: 32,
                    first_step: first,
                    last_step: first + rng.range(10, u64::from(steps) / 2) as u32,
                    separate_from: SmallVec::new(),
                });
            }
            for k in weights..requests_per_tile {
                let first = rng.range(0, u64::from(steps) - 1) as u32;
                let life = if rng.range(0, 9) == 0 {
                    rng.range(5, 40)
                } else {
                    rng.range(0, 3)
                };
                let class = if rng.range(0, 3) == 0 {
                    MemoryClass::Ipu21Interleaved
                } else {
                    MemoryClass::Ipu21Standard
                };
                let bytes = (rng.range(1, 48) * 512 + rng.range(0, 1) * 16) as u32;
                let separate_from = if k > weights && rng.range(0, 7) == 0 {
                    let mut v = SmallVec::new();
                    v.push(RequestId::from_u32(k - 1));
                    v
                } else {
                    SmallVec::new()
                };
                requests.push(Request {
                    id: RequestId::from_u32(k),
                    class,
                    bytes,
                    alignment: if class == MemoryClass::Ipu21Interleaved {
                        32
                    } else {
                        8
                    },
                    first_step: first,
                    last_step: (first + life as u32).min(steps - 1),
                    separate_from,
                });
            }
            TileProblem {
                tile: TileId::from_u32(t),
                reservations,
                requests,
            }
        })
        .collect();
    Problem { map, tiles }
}
