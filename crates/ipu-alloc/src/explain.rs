//! What a tile that did not place is told: the request a greedy pass
//! could not place, the section of its life with the least room, what is
//! live there, and the verdict (the bound exceeded, too large alone,
//! proved impossible by the exact search, or undecided at its budget).

use crate::arena::{Arena, for_each_gap, merge_intervals};
use crate::bound::TileBound;
use crate::error::{FitFailure, LiveRange, Occupant, Verdict};
use crate::greedy::{GreedyFailure, UNPLACED};
use crate::{MemoryMap, TileProblem};

/// How the exact search ended on a tile it did not place.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SearchEnd {
    /// It did not run (the bound already proves the tile infeasible).
    NotRun,
    /// It proved that no placement exists.
    Proved { nodes: u64, relaxed: bool },
    /// It stopped at its budget (0: it did not run on a tile this large).
    Unknown { nodes: u64, budget: u64 },
}

/// The section of a failing request's lifetime with the smallest largest
/// gap: `(largest gap, section, gaps, live items)`.
type WorstSection = (u64, u32, Vec<(u64, u64)>, Vec<usize>);

/// Builds the failure report for the request a greedy pass could not place.
pub(crate) fn explain(
    tile: &TileProblem,
    map: &MemoryMap,
    arena: &Arena,
    bound: &TileBound,
    failure: GreedyFailure,
    search: SearchEnd,
) -> FitFailure {
    let k = (failure.item as usize).min(tile.requests.len().saturating_sub(1));
    let r = &tile.requests[k];
    let it = &arena.items[k];
    let windows = &arena.window_sets[it.windows as usize];
    let n = tile.requests.len();
    let (worst, alone_best) = worst_section(arena, &failure, k, n, windows);
    let (largest, worst_s, gaps, live) = worst.unwrap_or((0, 0, Vec::new(), Vec::new()));
    // The step of the worst section: the first step of the request inside it.
    let step = arena
        .times
        .get(worst_s as usize)
        .map_or(r.first_step, |&p| u32::try_from(p).unwrap_or(u32::MAX))
        .max(r.first_step);
    let verdict = verdict_of(bound, u64::from(r.bytes), alone_best, search);
    let clamp = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    let live = live
        .into_iter()
        .map(|j| {
            let o = clamp(failure.offsets[j]);
            if j < n {
                let q = &tile.requests[j];
                LiveRange {
                    occupant: Occupant::Request(q.id),
                    last_step: Some(q.last_step),
                    start: o,
                    bytes: q.bytes,
                }
            } else {
                let q = &tile.reservations[j - n];
                LiveRange {
                    occupant: Occupant::Reservation(q.label.clone()),
                    last_step: q.steps.map(|s| s.1),
                    start: o,
                    bytes: q.end.saturating_sub(q.start),
                }
            }
        })
        .collect();
    FitFailure {
        tile: tile.tile,
        request: r.id,
        class: r.class,
        bytes: r.bytes,
        alignment: r.alignment,
        first_step: r.first_step,
        last_step: r.last_step,
        allowed_ranges: map.class_ranges(r.class).to_vec(),
        step,
        free: gaps.iter().map(|&(a, b)| (clamp(a), clamp(b))).collect(),
        largest_free_gap: clamp(largest),
        live,
        verdict,
        failing_tiles: 1,
    }
}

/// Per section of request `k`'s lifetime, the free gaps in its `windows`
/// given what the greedy pass had placed (`failure`) and the reservations
/// (items from `n` on) live there: the section with the smallest largest
/// gap, and the largest gap the reservations alone leave in every section.
fn worst_section(
    arena: &Arena,
    failure: &GreedyFailure,
    k: usize,
    n: usize,
    windows: &[(u64, u64)],
) -> (Option<WorstSection>, u64) {
    let it = &arena.items[k];
    let mut worst: Option<WorstSection> = None;
    let mut alone_best = 0u64;
    let sections: Vec<u32> = if it.live() {
        (it.start..it.end).collect()
    } else {
        vec![0]
    };
    for &s in &sections {
        let mut obstacles = Vec::new();
        let mut reserved = Vec::new();
        let mut live = Vec::new();
        for (j, other) in arena.items.iter().enumerate() {
            let o = failure.offsets.get(j).copied().unwrap_or(UNPLACED);
            if o == UNPLACED || j == k || !(other.start <= s && s < other.end) {
                continue;
            }
            obstacles.push((o, o.saturating_add(other.size)));
            if j >= n {
                reserved.push((o, o.saturating_add(other.size)));
            }
            live.push(j);
        }
        merge_intervals(&mut obstacles);
        merge_intervals(&mut reserved);
        let mut gaps = Vec::new();
        for_each_gap(windows, &obstacles, |a, b| {
            gaps.push((a, b));
            true
        });
        let largest = gaps.iter().map(|g| g.1 - g.0).max().unwrap_or(0);
        let mut alone = 0;
        for_each_gap(windows, &reserved, |a, b| {
            alone = alone.max(b - a);
            true
        });
        alone_best = if s == sections[0] {
            alone
        } else {
            alone_best.min(alone)
        };
        if worst.as_ref().is_none_or(|w| largest < w.0) {
            worst = Some((largest, s, gaps, live));
        }
    }
    (worst, alone_best)
}

/// Why a request of `bytes` failed: the bound already exceeded, no gap
/// large enough even beside the reservations alone, or what the exact
/// search ended with at the tightest class's peak.
fn verdict_of(bound: &TileBound, bytes: u64, alone_best: u64, search: SearchEnd) -> Verdict {
    if let Some((class, short)) = bound.worst_shortfall() {
        Verdict::BoundExceeded {
            class,
            step: short.step,
            needs_bytes: short.bytes,
        }
    } else if bytes > alone_best {
        Verdict::TooLarge {
            largest_gap: u32::try_from(alone_best).unwrap_or(u32::MAX),
        }
    } else {
        // The tightest class at its peak: where shrinking pays first.
        let tight = std::iter::once(&bound.all)
            .chain(bound.classes.iter())
            .min_by_key(|c| c.usable_bytes_at_peak.saturating_sub(c.peak_live_bytes))
            .unwrap_or(&bound.all);
        let (class, step, live_bytes, usable_bytes) = (
            tight.class,
            tight.peak_step,
            tight.peak_live_bytes,
            tight.usable_bytes_at_peak,
        );
        let (nodes, budget) = match search {
            SearchEnd::Proved { nodes, relaxed } => {
                return Verdict::Exhausted {
                    nodes,
                    relaxed,
                    class,
                    step,
                    live_bytes,
                    usable_bytes,
                };
            }
            SearchEnd::Unknown { nodes, budget } => (nodes, budget),
            SearchEnd::NotRun => (0, 0),
        };
        Verdict::Unknown {
            nodes,
            budget,
            class,
            step,
            live_bytes,
            usable_bytes,
        }
    }
}
