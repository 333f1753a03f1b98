//! Placing a [`CsvProblem`] within a capacity: proofs first, heuristics
//! next, the exact search last, and always the best placement found.
//!
//! ```text
//! quick proofs (too large, fixed buffers outside or overlapping, live
//!   bytes above the capacity) ──► Infeasible, at once
//! skyline passes (lowest floor first; on the problem and reversed in
//!   time) and, for problems of moderate size or with fixed buffers,
//!   greedy passes ──► best placement; within capacity ──► Fits
//! squeaky-wheel passes at the capacity ──► placement ──► Fits
//! exact search at the capacity (node budget, optional deadline)
//!   ──► placement ──► Fits | exhausted ──► Infeasible | budget ──► Unknown
//! ```
//!
//! Every placement returned has passed [`CsvProblem::check`]. The outcome
//! keeps the best placement found even when it exceeds the capacity, so a
//! tool stopped by its deadline still reports its peak against the bound.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::CsvProblem;
use crate::arena::{Arena, Neighbours};
use crate::exact::{
    ExactBudget, ExactOutcome, SearchStats, solve_exact_deep, solve_exact_parallel,
};
use crate::greedy::{GreedyStrategy, greedy, strategy_order};
use crate::skyline::{SkyOrder, skyline};
use crate::squeaky::squeaky;

/// The verdict of [`CsvProblem::solve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SolveResult {
    /// A placement within the capacity was found (and checked).
    Fits,
    /// No placement within the capacity exists (proved).
    Infeasible,
    /// Neither was established within the budget.
    Unknown,
}

impl std::fmt::Display for SolveResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SolveResult::Fits => "fits",
            SolveResult::Infeasible => "infeasible",
            SolveResult::Unknown => "unknown",
        })
    }
}

/// Why no placement within the capacity exists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Infeasibility {
    /// More bytes are live at one time than the capacity holds.
    #[error(
        "{live_bytes} bytes are live at time {time}, more than the capacity of {capacity}; \
         raise the capacity or shorten what is live then"
    )]
    BoundExceeded {
        /// The first time of the peak.
        time: u64,
        /// Bytes live then (may exceed 64 bits).
        live_bytes: u128,
        /// The capacity asked for.
        capacity: u64,
    },
    /// A buffer is larger than the capacity.
    #[error("buffer `{id}` has {size} bytes, more than the capacity of {capacity}")]
    TooLarge {
        /// The buffer.
        id: String,
        /// Its size.
        size: u64,
        /// The capacity asked for.
        capacity: u64,
    },
    /// A fixed buffer does not lie inside the capacity or is misaligned.
    #[error(
        "buffer `{id}` is fixed at offset {offset} with {size} bytes and alignment {alignment}, \
         which is misaligned or reaches beyond the capacity of {capacity}"
    )]
    FixedOutside {
        /// The buffer.
        id: String,
        /// Its fixed offset.
        offset: u64,
        /// Its size.
        size: u64,
        /// Its alignment.
        alignment: u64,
        /// The capacity asked for.
        capacity: u64,
    },
    /// Two fixed buffers live at the same time overlap.
    #[error(
        "buffers `{first}` and `{second}` are fixed at overlapping offsets while both are live"
    )]
    FixedOverlap {
        /// One buffer.
        first: String,
        /// The other.
        second: String,
    },
    /// The exact search tried every canonical placement.
    #[error(
        "the live bytes fit, but the exact search exhausted every placement ({nodes} nodes): \
         fragmentation makes the capacity unreachable"
    )]
    Exhausted {
        /// Search nodes visited.
        nodes: u64,
    },
}

/// How the placement in a [`SolveOutcome`] was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SolveMethod {
    /// Nothing needed placing (no buffer is live with a nonzero size).
    Trivial,
    /// A skyline pass (lowest floor first).
    Skyline,
    /// A greedy pass.
    Greedy(GreedyStrategy),
    /// Squeaky-wheel greedy passes at the capacity (the last placed
    /// every buffer).
    Squeaky,
    /// The exact search.
    Exact,
}

/// Budgets for [`CsvProblem::solve`].
#[derive(Clone, Debug)]
pub struct SolveConfig {
    /// Greedy passes for problems of at most `large_problem_buffers`
    /// buffers (and for any problem the skyline passes cannot place).
    pub strategies: Vec<GreedyStrategy>,
    /// Above this many buffers only the skyline passes run when they
    /// apply: a greedy pass costs time proportional to the overlapping
    /// pairs, which grows quadratically on long traces.
    pub large_problem_buffers: usize,
    /// The greedy passes for large problems the skyline cannot place.
    pub large_strategies: Vec<GreedyStrategy>,
    /// Exact-search node budget.
    pub max_nodes: u64,
    /// Squeaky-wheel passes at the capacity, when no heuristic placement
    /// fits (problems of at most `large_problem_buffers` buffers).
    pub squeaky_passes: u32,
    /// Wall-clock budget for the whole solve (the exact search stops at
    /// it; the heuristics always finish).
    pub timeout: Option<Duration>,
    /// Run the exact search on two threads (the problem and its
    /// time-reversed copy). The answer is that of the earliest conclusive
    /// run of the portfolio, so the placement does not depend on timing or
    /// the thread count; it may differ from the one-thread search, whose
    /// runs get the whole node budget.
    pub parallel_search: bool,
}

impl Default for SolveConfig {
    fn default() -> Self {
        SolveConfig {
            strategies: GreedyStrategy::DEFAULT_SET.to_vec(),
            large_problem_buffers: 4096,
            large_strategies: vec![
                GreedyStrategy::DEFAULT_SET[3],
                GreedyStrategy::DEFAULT_SET[0],
            ],
            max_nodes: 50_000_000,
            squeaky_passes: 512,
            timeout: Some(Duration::from_secs(10)),
            parallel_search: true,
        }
    }
}

/// What [`CsvProblem::solve`] found.
#[derive(Clone, Debug)]
pub struct SolveOutcome {
    /// The verdict.
    pub result: SolveResult,
    /// The best placement found, one offset per buffer; within the
    /// capacity exactly when `result` is `Fits`. `None` when no placement
    /// was made at all (a buffer larger than any address space, fixed
    /// buffers that collide).
    pub offsets: Option<Vec<u64>>,
    /// The capacity `offsets` needs (the highest end of any buffer), or
    /// `u64::MAX` without a placement.
    pub peak: u64,
    /// The peak-live lower bound (saturated to 64 bits).
    pub lower_bound: u64,
    /// Why the capacity cannot be met, when `result` is `Infeasible`.
    pub infeasibility: Option<Infeasibility>,
    /// How `offsets` was found.
    pub method: Option<SolveMethod>,
    /// Exact-search nodes visited (0 if the exact search did not run).
    pub nodes: u64,
    /// Whether the exact search ran.
    pub used_exact: bool,
    /// How the exact search's nodes ended (all zero if it did not run).
    pub search: SearchStats,
}

/// The best placement so far: peak, offsets, method.
type Best = Option<(u64, Vec<u64>, SolveMethod)>;

impl CsvProblem {
    /// Places the buffers within `capacity`: proofs first, then the
    /// heuristics, then the exact search, which finds a placement or proves
    /// there is none within its budget. Every placement returned has passed
    /// [`CsvProblem::check`].
    pub fn solve(&self, capacity: u64, config: &SolveConfig) -> SolveOutcome {
        let started = Instant::now();
        let lower_bound = self.lower_bound();
        let mut out = SolveOutcome {
            result: SolveResult::Unknown,
            offsets: None,
            peak: u64::MAX,
            lower_bound,
            infeasibility: None,
            method: None,
            nodes: 0,
            used_exact: false,
            search: SearchStats::default(),
        };
        let proof = self.quick_proof(capacity);
        // The heuristics need no capacity; a buffer larger than the whole
        // address space or colliding fixed buffers leave nothing to place.
        let collide = matches!(proof, Some(Infeasibility::FixedOverlap { .. }));
        let best = if collide {
            None
        } else {
            self.heuristics(config)
        };
        if let Some((peak, offsets, method)) = best {
            if self.check(peak, &offsets).is_ok() {
                out.peak = peak;
                out.offsets = Some(offsets);
                out.method = Some(method);
            }
        }
        if let Some(reason) = proof {
            out.result = SolveResult::Infeasible;
            out.infeasibility = Some(reason);
            return out;
        }
        if out.peak <= capacity {
            out.result = SolveResult::Fits;
            return out;
        }
        let bounded = self.arena(capacity);
        if self.buffers.len() <= config.large_problem_buffers {
            if let Some(offsets) = self.squeaky(&bounded, config.squeaky_passes) {
                out.peak = self.peak(&offsets);
                out.offsets = Some(offsets);
                out.method = Some(SolveMethod::Squeaky);
                out.result = SolveResult::Fits;
                return out;
            }
        }
        let budget = ExactBudget {
            max_nodes: config.max_nodes,
            deadline: config.timeout.map(|t| started + t),
            stop: None,
        };
        if budget.max_nodes == 0 || budget.deadline.is_some_and(|d| Instant::now() >= d) {
            return out;
        }
        let report = if config.parallel_search && rayon::current_num_threads() > 1 {
            solve_exact_parallel(&bounded, budget)
        } else {
            solve_exact_deep(&bounded, budget)
        };
        out.used_exact = true;
        out.nodes = report.nodes;
        out.search = report.stats;
        match report.outcome {
            ExactOutcome::Found(offsets) if self.check(capacity, &offsets).is_ok() => {
                out.peak = self.peak(&offsets);
                out.offsets = Some(offsets);
                out.method = Some(SolveMethod::Exact);
                out.result = SolveResult::Fits;
            }
            ExactOutcome::Found(_) | ExactOutcome::Unknown => {}
            ExactOutcome::Infeasible => {
                out.result = SolveResult::Infeasible;
                out.infeasibility = Some(Infeasibility::Exhausted {
                    nodes: report.nodes,
                });
            }
        }
        out
    }

    /// A squeaky-wheel placement within `bounded`'s capacity from the
    /// size-first order, checked, if `passes` passes find one.
    fn squeaky(&self, bounded: &Arena, passes: u32) -> Option<Vec<u64>> {
        let first = GreedyStrategy::DEFAULT_SET[0];
        let index = Neighbours::new(&bounded.items);
        let start = strategy_order(bounded, first.order);
        let (offsets, _) = squeaky(bounded, &index, &start, first.fit, passes)?;
        let peak = self.peak(&offsets);
        self.check(peak, &offsets).is_ok().then_some(offsets)
    }

    /// The capacity a placement needs: the highest end of any buffer (a
    /// buffer that is never live must still lie inside the capacity).
    fn peak(&self, offsets: &[u64]) -> u64 {
        self.buffers
            .iter()
            .zip(offsets)
            .map(|(b, &o)| o.saturating_add(b.size))
            .max()
            .unwrap_or(0)
    }

    /// Proofs that need no search: a buffer larger than the capacity, a
    /// fixed buffer misaligned or beyond it, two fixed buffers that
    /// collide, more live bytes than the capacity at some time.
    fn quick_proof(&self, capacity: u64) -> Option<Infeasibility> {
        for b in &self.buffers {
            if let Some(offset) = b.offset {
                let inside = offset.checked_add(b.size).is_some_and(|e| e <= capacity);
                if !inside || offset % b.alignment.max(1) != 0 {
                    return Some(Infeasibility::FixedOutside {
                        id: b.id.clone(),
                        offset,
                        size: b.size,
                        alignment: b.alignment,
                        capacity,
                    });
                }
            } else if b.size > capacity {
                return Some(Infeasibility::TooLarge {
                    id: b.id.clone(),
                    size: b.size,
                    capacity,
                });
            }
        }
        if let Some((first, second)) = self.fixed_collision() {
            return Some(Infeasibility::FixedOverlap {
                first: self.buffers[first].id.clone(),
                second: self.buffers[second].id.clone(),
            });
        }
        let peak = self.live_peak();
        (peak.bytes > u128::from(capacity)).then_some(Infeasibility::BoundExceeded {
            time: peak.time,
            live_bytes: peak.bytes,
            capacity,
        })
    }

    /// Two fixed buffers live at the same time whose bytes overlap, if any:
    /// a sweep over time with the live fixed buffers keyed by offset, which
    /// stay disjoint until the first collision.
    fn fixed_collision(&self) -> Option<(usize, usize)> {
        let mut events: Vec<(u64, bool, usize)> = Vec::new();
        for (i, b) in self.buffers.iter().enumerate() {
            if b.offset.is_some() && b.upper > b.lower && b.size > 0 {
                events.push((b.lower, true, i));
                events.push((b.upper, false, i));
            }
        }
        events.sort_unstable();
        let mut active: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
        for (_, start, i) in events {
            let b = &self.buffers[i];
            let offset = b.offset.unwrap_or(0);
            if !start {
                if active.get(&offset).is_some_and(|&(_, j)| j == i) {
                    active.remove(&offset);
                }
                continue;
            }
            let end = offset.saturating_add(b.size);
            if let Some((_, &(e, j))) = active.range(..=offset).next_back() {
                if e > offset {
                    return Some((j, i));
                }
            }
            if let Some((&o, &(_, j))) = active.range(offset..).next() {
                if o < end {
                    return Some((j, i));
                }
            }
            active.insert(offset, (end, i));
        }
        None
    }

    /// The heuristic passes; the lowest peak wins, the earliest pass on
    /// ties, so the result does not depend on the thread count.
    fn heuristics(&self, config: &SolveConfig) -> Best {
        let open = self.arena(u64::MAX);
        if open.items.iter().all(|it| !it.live() || it.size == 0) {
            let offsets = skyline(&open, SkyOrder::Longest)?;
            return Some((self.peak(&offsets), offsets, SolveMethod::Trivial));
        }
        let reversed = open.reversed();
        let passes = [
            (&open, SkyOrder::Longest),
            (&open, SkyOrder::Area),
            (&reversed, SkyOrder::Longest),
            (&reversed, SkyOrder::Area),
        ];
        let runs: Vec<Option<Vec<u64>>> = passes
            .par_iter()
            .map(|&(arena, order)| skyline(arena, order))
            .collect();
        let mut best: Best = None;
        let keep = |best: &mut Best, offsets: Vec<u64>, method| {
            let peak = self.peak(&offsets);
            if best.as_ref().is_none_or(|b| peak < b.0) {
                *best = Some((peak, offsets, method));
            }
        };
        let skyline_applies = runs.iter().any(Option::is_some);
        for offsets in runs.into_iter().flatten() {
            keep(&mut best, offsets, SolveMethod::Skyline);
        }
        let strategies = if self.buffers.len() <= config.large_problem_buffers {
            &config.strategies[..]
        } else if !skyline_applies {
            &config.large_strategies[..]
        } else {
            &[]
        };
        if !strategies.is_empty() {
            let index = Neighbours::new(&open.items);
            let runs: Vec<Option<Vec<u64>>> = strategies
                .par_iter()
                .map(|&strategy| greedy(&open, &index, strategy).ok())
                .collect();
            for (offsets, &strategy) in runs.into_iter().zip(strategies) {
                if let Some(offsets) = offsets {
                    keep(&mut best, offsets, SolveMethod::Greedy(strategy));
                }
            }
        }
        best
    }
}

impl Arena {
    /// The same problem with addresses mirrored inside `[base, limit)`
    /// (an item at `a` goes to `base + limit - a - size`), or `None` where
    /// the mirror would not keep alignments or element separation.
    pub(crate) fn flipped(&self) -> Option<Arena> {
        let mirror = self.base.checked_add(self.limit)?;
        let mut out = self.clone();
        for it in &mut out.items {
            let align = it.align.max(1);
            if !it.partners.is_empty() || mirror % align != 0 || it.size % align != 0 {
                return None;
            }
            if let Some(f) = it.fixed {
                it.fixed = Some(mirror.checked_sub(f)?.checked_sub(it.size)?);
            }
        }
        for set in &mut out.window_sets {
            for w in set.iter_mut() {
                *w = (mirror.checked_sub(w.1)?, mirror.checked_sub(w.0)?);
            }
            set.reverse();
        }
        Some(out)
    }

    /// The address of an item of size `size` at `a` in [`Arena::flipped`].
    pub(crate) fn mirror(&self, a: u64, size: u64) -> u64 {
        (self.base + self.limit)
            .saturating_sub(a)
            .saturating_sub(size)
    }

    /// The same problem with time reversed.
    pub(crate) fn reversed(&self) -> Arena {
        let mut out = self.clone();
        let s = self.sections;
        for it in &mut out.items {
            if it.live() {
                let (a, b) = (s - it.end, s - it.start);
                it.start = a;
                it.end = b;
            }
        }
        let last = self.times.last().copied().unwrap_or(0);
        out.times = self.times.iter().rev().map(|&t| last - t).collect();
        out
    }
}
