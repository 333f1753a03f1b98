//! The exact search's benchmark classes: zero-slack and near-zero-slack
//! instances of several shapes, 150 to 1000 buffers each.
//!
//! - *guillotine*: a 1 MiB × 1 Mi-step rectangle cut by random guillotine
//!   cuts, on the 1 KiB grid and byte-exact ([`zero_slack_grid`]); the
//!   near-zero-slack class removes one buffer in ten.
//! - *interval*: a random interval graph (log-uniform lifetimes, sizes up
//!   to 64 KiB) solved at its peak live bytes; whether it fits there is not
//!   known in advance, so the search must place it or prove it cannot. The
//!   near-zero-slack class allows 1 % more.
//! - *ml*: the shape of a training step: a few weights live throughout,
//!   activations kept from the forward pass until their backward step
//!   (nested lifetimes), and each step's temporaries cut from the room
//!   left, so every step is full; the near-zero-slack class removes one
//!   temporary in ten.
//!
//! Every instance with a construction keeps it as a witness, so a test can
//! check that the capacity is reachable.

use ipu_layout::rng::SplitMix64;

use super::{SuiteInstance, near_zero_slack_grid, zero_slack_grid};
use crate::{CsvBuffer, CsvProblem};

/// One class of the exact-search benchmark.
#[derive(Clone, Debug)]
pub struct SuiteClass {
    /// A short name for tables.
    pub name: &'static str,
    /// What the class is, for the table's header.
    pub about: &'static str,
    /// Whether the capacity leaves no slack at the peak.
    pub zero_slack: bool,
    /// The instances, smallest first.
    pub instances: Vec<SuiteInstance>,
}

/// Buffer counts of every class.
pub const CLASS_SIZES: [usize; 4] = [150, 300, 600, 1000];

/// Every class of the exact-search benchmark, zero-slack then
/// near-zero-slack, each over [`CLASS_SIZES`]: one instance per size.
pub fn exact_classes() -> Vec<SuiteClass> {
    exact_classes_with(&CLASS_SIZES, 1)
}

/// The classes of [`exact_classes`] over buffer counts `sizes`, with
/// `seeds` instances per class and size drawn from as many seeds. An
/// instance's name says its class, buffer count and draw, and names the
/// same instance whatever else `sizes` lists: the first draw of a size in
/// [`CLASS_SIZES`] is the instance [`exact_classes`] has; later draws are
/// named with `-s2`, `-s3`, ...
pub fn exact_classes_with(sizes: &[usize], seeds: usize) -> Vec<SuiteClass> {
    let mib = 1u64 << 20;
    let each = |base: u64, make: &dyn Fn(u64, usize) -> SuiteInstance| {
        let mut out = Vec::new();
        for &n in sizes {
            for j in 0..seeds.max(1) {
                let mut inst = make(draw_seed(base, n, j), n);
                if j > 0 {
                    inst.name = format!("{}-s{}", inst.name, j + 1);
                }
                out.push(inst);
            }
        }
        out
    };
    let named = |prefix: &str, n: usize, problem: CsvProblem, capacity: u64| SuiteInstance {
        name: format!("{prefix}-n{n}"),
        problem,
        capacity,
    };
    vec![
        SuiteClass {
            name: "guillotine",
            about: "1 MiB x 1 Mi-step rectangle cut on the 1 KiB grid; capacity = bound",
            zero_slack: true,
            instances: each(4000, &|seed, n| {
                named("gcut", n, zero_slack_grid(seed, n, mib, mib, 1024).0, mib)
            }),
        },
        SuiteClass {
            name: "guillotine-byte",
            about: "the same rectangle cut at any byte and step; capacity = bound",
            zero_slack: true,
            instances: each(4100, &|seed, n| {
                named("bcut", n, zero_slack_grid(seed, n, mib, mib, 1).0, mib)
            }),
        },
        SuiteClass {
            name: "interval",
            about: "random interval graph at its peak live bytes (fit not known)",
            zero_slack: true,
            instances: each(4200, &|seed, n| {
                let p = interval_graph(seed, n);
                let cap = p.lower_bound();
                named("ivl", n, p, cap)
            }),
        },
        SuiteClass {
            name: "ml",
            about: "training-step shape, every step full; capacity = bound",
            zero_slack: true,
            instances: each(4300, &|seed, n| {
                named("ml", n, ml_zero_slack(seed, n, 0).0, mib)
            }),
        },
        SuiteClass {
            name: "guillotine-near",
            about: "grid cut with one buffer in ten removed; capacity 1 MiB",
            zero_slack: false,
            instances: each(4400, &|seed, n| {
                // Count the buffers kept: cut 10/9 as many.
                let cut = n * 10 / 9;
                let p = near_zero_slack_grid(seed, cut, mib, mib, 1024, 10).0;
                named("gnear", n, p, mib)
            }),
        },
        SuiteClass {
            name: "interval-near",
            about: "random interval graph at 1 % above its peak live bytes",
            zero_slack: false,
            instances: each(4500, &|seed, n| {
                let p = interval_graph(seed, n);
                let cap = p.lower_bound() + p.lower_bound() / 100;
                named("ivln", n, p, cap)
            }),
        },
        SuiteClass {
            name: "ml-near",
            about: "training-step shape with one temporary in ten removed; capacity 1 MiB",
            zero_slack: false,
            instances: each(4600, &|seed, n| {
                named("mlnear", n, ml_zero_slack(seed, n * 10 / 9, 10).0, mib)
            }),
        },
    ]
}

/// The seed of draw `j` (from 0) of `n` buffers in the class whose seeds
/// start at `base`. A size of [`CLASS_SIZES`] takes its place in it, as
/// the default suite always has; any other size its count, far above the
/// class bases (100 apart), so that no two sizes share a seed. Later draws
/// lie far from every class's base.
fn draw_seed(base: u64, n: usize, j: usize) -> u64 {
    let size = CLASS_SIZES
        .iter()
        .position(|&c| c == n)
        .map_or((n as u64) << 40, |k| k as u64);
    base.wrapping_add(size).wrapping_add((j as u64) << 20)
}

/// A random interval graph of `buffers` buffers: starts uniform over 4096
/// steps, lifetimes log-uniform from 1 to 1024 steps, sizes from 1 KiB to
/// 64 KiB in 64-byte units.
pub fn interval_graph(seed: u64, buffers: usize) -> CsvProblem {
    let mut rng = SplitMix64::new(seed ^ 0x1e7e_1a15);
    let buffers = (0..buffers)
        .map(|i| {
            let lower = rng.range(0, 4095);
            let bits = rng.range(0, 10);
            let length = (1u64 << bits) + rng.range(0, (1u64 << bits) - 1);
            CsvBuffer {
                id: i.to_string(),
                lower,
                upper: lower + length,
                size: rng.range(16, 1024) * 64,
                alignment: 1,
                offset: None,
            }
        })
        .collect();
    CsvProblem { buffers }
}

/// A zero-slack training-step instance of about `buffers` buffers in
/// 1 MiB, with the offsets of its construction; with `drop_one_in > 0`
/// about one temporary in that many is removed (the rest still fit at
/// their offsets).
///
/// Three or four weights live throughout at the bottom. Layer `i`'s
/// activation lives from forward step `i` to backward step `2L - 1 - i`,
/// stacked above the weights, so activations nest. In every step the
/// room above the live activations is cut into temporaries by guillotine
/// cuts within the step (sixteen time units wide), so every step is full.
pub fn ml_zero_slack(seed: u64, buffers: usize, drop_one_in: u64) -> (CsvProblem, Vec<u64>) {
    const GRAIN: u64 = 64;
    const STEP: u64 = 16;
    let units = (1u64 << 20) / GRAIN;
    let mut rng = SplitMix64::new(seed ^ 0x0a1_5eed);
    let layers = (buffers / 8).max(2);
    let weights = rng.range(3, 4) as usize;
    // Weights take 10-30 % of the capacity, activations at most half the
    // rest.
    let weight_units = units * rng.range(10, 30) / 100;
    let mut out: Vec<(u64, u64, u64, u64)> = Vec::new(); // (t0, t1, a0, a1) in units
    let mut at = 0u64;
    for w in 0..weights {
        let size = if w + 1 == weights {
            weight_units - at
        } else {
            (weight_units / weights as u64).max(1)
        };
        out.push((0, 2 * layers as u64 * STEP, at, at + size));
        at += size;
    }
    let act_room = (units - weight_units) / 2;
    let mut stack = vec![weight_units];
    for i in 0..layers {
        // At most `act_room` in all: the temporaries always keep room.
        let size = rng.range(1, (act_room / layers as u64).max(1));
        let base = *stack.last().unwrap_or(&weight_units);
        let top = base + size;
        let t1 = (2 * layers - i) as u64 * STEP;
        out.push((i as u64 * STEP, t1, base, top));
        stack.push(top);
    }
    let temporaries = buffers.saturating_sub(out.len()).max(2 * layers);
    for step in 0..2 * layers {
        let live = if step < layers {
            step
        } else {
            2 * layers - 1 - step
        };
        let floor = stack[live + 1];
        let t0 = step as u64 * STEP;
        let pieces = temporaries / (2 * layers) + usize::from(step < temporaries % (2 * layers));
        let mut rects = vec![(t0, t0 + STEP, floor, units)];
        let mut stuck = 0;
        while rects.len() < pieces.max(1) && stuck < 100 {
            let k = rng.range(0, rects.len() as u64 - 1) as usize;
            let (a, b, c, d) = rects[k];
            let by_time = rng.range(0, 3) == 0;
            if by_time && b - a >= 2 {
                let t = rng.range(a + 1, b - 1);
                rects[k] = (a, t, c, d);
                rects.push((t, b, c, d));
            } else if d - c >= 2 {
                let y = rng.range(c + 1, d - 1);
                rects[k] = (a, b, c, y);
                rects.push((a, b, y, d));
            } else {
                stuck += 1;
            }
        }
        out.extend(rects);
    }
    let fixed = weights + layers;
    let mut kept = Vec::with_capacity(out.len());
    for (k, r) in out.into_iter().enumerate() {
        if k < fixed || drop_one_in == 0 || rng.range(1, drop_one_in) != 1 {
            kept.push(r);
        }
    }
    // Shuffle so that file order carries no hint of the construction.
    for i in (1..kept.len()).rev() {
        let j = rng.range(0, i as u64) as usize;
        kept.swap(i, j);
    }
    let offsets = kept.iter().map(|r| r.2 * GRAIN).collect();
    let buffers = kept
        .iter()
        .enumerate()
        .map(|(i, &(t0, t1, a0, a1))| CsvBuffer {
            id: i.to_string(),
            lower: t0,
            upper: t1,
            size: (a1 - a0) * GRAIN,
            alignment: 1,
            offset: None,
        })
        .collect();
    (CsvProblem { buffers }, offsets)
}
