//! Exact search: finds a placement inside the arena's windows or proves that
//! none exists, within a node budget (and, for interactive tools, a
//! deadline).
//!
//! `search.rs` holds one depth-first run over canonical placements and the
//! rules that prune it; `prepare.rs` the static data a run needs. This file
//! is the portfolio around them: the same complete search on the problem, on
//! its time-reversed copy and, where alignments allow, on both with
//! addresses mirrored, under several static branching orders and two
//! branching rules, each run restarted with a growing node budget. Zero-slack
//! instances are often easy in one orientation or order and hard in
//! another; any run that finishes is conclusive. Runs on one copy share
//! their failure memo, so a restart does not prove again what an earlier
//! run proved.

mod prepare;
mod search;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use prepare::{Preorder, Prepared};
use search::{Memo, RunStyle, Search, Step};

use crate::arena::{Arena, align_up, for_each_gap, merge_intervals};
use crate::greedy::UNPLACED;

/// Limits on one exact search.
#[derive(Clone, Debug)]
pub(crate) struct ExactBudget {
    /// Search nodes before giving up (deterministic).
    pub max_nodes: u64,
    /// Wall-clock limit (not deterministic; only for interactive tools).
    pub deadline: Option<Instant>,
    /// Set by a parallel search that has concluded: stop this one.
    pub stop: Option<Arc<AtomicBool>>,
}

/// What an exact search concluded.
#[derive(Debug)]
pub(crate) enum ExactOutcome {
    /// A placement: one address per item.
    Found(Vec<u64>),
    /// The whole search space was exhausted: no placement exists.
    Infeasible,
    /// The budget ran out first.
    Unknown,
}

/// The outcome, the number of nodes visited and why nodes failed.
#[derive(Debug)]
pub(crate) struct ExactReport {
    pub outcome: ExactOutcome,
    pub nodes: u64,
    pub stats: SearchStats,
}

impl ExactReport {
    fn unknown(nodes: u64, stats: SearchStats) -> ExactReport {
        ExactReport {
            outcome: ExactOutcome::Unknown,
            nodes,
            stats,
        }
    }
}

/// How the nodes of an exact search ended, by rule: where the bounds bite
/// and where the search spends its effort.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Runs of the portfolio started.
    pub runs: u64,
    /// The deepest node (placed items) of any run.
    pub max_depth: u64,
    /// Nodes failed by the section bound.
    pub section: u64,
    /// Nodes failed because their state failed before.
    pub memo: u64,
    /// Nodes where some item had no address left at all.
    pub no_position: u64,
    /// Nodes where an item fits wholly below the previous address.
    pub dominance: u64,
    /// Nodes failed by the valley tiling test.
    pub valley: u64,
    /// Nodes failed by the release-time bound.
    pub release: u64,
    /// Nodes failed by the well test.
    pub wells: u64,
    /// Nodes left with no child after every rule passed.
    pub no_children: u64,
    /// Sections left empty at the lowest level (close children taken).
    pub closed: u64,
    /// Nodes failed by the cut test (a knapsack below a window boundary).
    pub cut: u64,
}

impl SearchStats {
    fn add(&mut self, o: &SearchStats) {
        self.runs += o.runs;
        self.max_depth = self.max_depth.max(o.max_depth);
        self.section += o.section;
        self.memo += o.memo;
        self.no_position += o.no_position;
        self.dominance += o.dominance;
        self.valley += o.valley;
        self.release += o.release;
        self.wells += o.wells;
        self.no_children += o.no_children;
        self.closed += o.closed;
        self.cut += o.cut;
    }
}

/// One entry of the portfolio: a static order and run switches.
#[derive(Clone, Copy, Debug)]
struct Strategy {
    order: Preorder,
    style: RunStyle,
}

/// Shorthand for the portfolio table.
const fn strategy(order: Preorder, forced: bool, fewest: bool, wells: bool) -> Strategy {
    Strategy {
        order,
        style: RunStyle {
            fewest,
            wells,
            forced,
            flush: true,
            sections: false,
        },
    }
}

/// Shorthand for a fill-or-close entry of the portfolio table.
const fn sections(order: Preorder, fewest: bool, wells: bool) -> Strategy {
    Strategy {
        order,
        style: RunStyle {
            fewest,
            wells,
            forced: true,
            flush: true,
            sections: true,
        },
    }
}

/// The portfolio's entries, in the order they are tried each round. Runs
/// that branch on forced points win on instances with no slack anywhere
/// (largest items first place guillotine cuts in about one node per item);
/// fill-or-close runs and plain canonical runs win where sections have
/// slack; the orders differ in which items they try first.
const STRATEGIES: [Strategy; 5] = [
    strategy(Preorder::SizeEnd, true, false, false),
    strategy(Preorder::TotalAreaLength, true, false, true),
    sections(Preorder::TotalAreaLength, true, true),
    strategy(Preorder::LengthAreaTotal, false, false, false),
    sections(Preorder::TotalLengthArea, false, true),
];

/// Nodes of the first round of the portfolio.
const FIRST_ROUND: u64 = 1024;

/// One copy of the problem a portfolio searches.
struct Variant {
    arena: Arena,
    /// Addresses are mirrored ([`Arena::flipped`]).
    flipped: bool,
}

/// The variants a portfolio searches: the problem and its time-reversed
/// copy, then both with addresses mirrored where that keeps the problem
/// the same (a zero-slack cut is as often easy from its top as from its
/// bottom).
fn variants(arena: &Arena) -> Vec<Variant> {
    let mut out = vec![
        Variant {
            arena: arena.clone(),
            flipped: false,
        },
        Variant {
            arena: arena.reversed(),
            flipped: false,
        },
    ];
    if let Some(f) = arena.flipped() {
        let r = f.reversed();
        out.push(Variant {
            arena: f,
            flipped: true,
        });
        out.push(Variant {
            arena: r,
            flipped: true,
        });
    }
    out
}

/// Runs the exact search on `arena` within `budget`.
pub(crate) fn solve_exact(arena: &Arena, budget: ExactBudget) -> ExactReport {
    let variants = variants(arena);
    let Some(prepared) = variants
        .iter()
        .map(|v| Prepared::new(&v.arena))
        .collect::<Option<Vec<_>>>()
    else {
        return ExactReport::unknown(0, SearchStats::default());
    };
    let runs: Vec<(usize, Strategy)> = STRATEGIES
        .iter()
        .flat_map(|&s| (0..variants.len()).map(move |v| (v, s)))
        .collect();
    portfolio(arena, &variants, &prepared, &runs, &budget)
}

/// Stack for threads that run the search: its recursion is as deep as the
/// number of items, and only the pages touched are ever committed.
const SEARCH_STACK_BYTES: usize = 1 << 30;

/// [`solve_exact`] on a thread of its own with a stack deep enough for any
/// problem size, so a large problem cannot overflow the caller's stack.
pub(crate) fn solve_exact_deep(arena: &Arena, budget: ExactBudget) -> ExactReport {
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .stack_size(SEARCH_STACK_BYTES)
            .spawn_scoped(scope, || solve_exact(arena, budget));
        match worker {
            Ok(handle) => handle
                .join()
                .unwrap_or(ExactReport::unknown(0, SearchStats::default())),
            Err(_) => ExactReport::unknown(0, SearchStats::default()),
        }
    })
}

/// [`solve_exact`] with the portfolio split over two threads (each with a
/// deep stack): one takes the problem, the other its time-reversed copy;
/// the first conclusive answer stops the other. Which answer wins depends
/// on timing, so this is for interactive tools, never for tile placement.
pub(crate) fn solve_exact_parallel(arena: &Arena, budget: ExactBudget) -> ExactReport {
    let stop = budget
        .stop
        .clone()
        .unwrap_or_else(|| Arc::new(AtomicBool::new(false)));
    let half = ExactBudget {
        max_nodes: (budget.max_nodes / 2).max(1),
        deadline: budget.deadline,
        stop: Some(stop.clone()),
    };
    let variants = variants(arena);
    let Some(prepared) = variants
        .iter()
        .map(|v| Prepared::new(&v.arena))
        .collect::<Option<Vec<_>>>()
    else {
        return ExactReport::unknown(0, SearchStats::default());
    };
    let run = |which: usize| {
        // Thread 0 takes the even variants, thread 1 the odd ones (the
        // time-reversed copies).
        let runs: Vec<(usize, Strategy)> = STRATEGIES
            .iter()
            .flat_map(|&s| {
                (0..variants.len())
                    .filter(move |v| v % 2 == which)
                    .map(move |v| (v, s))
            })
            .collect();
        let report = portfolio(arena, &variants, &prepared, &runs, &half);
        if !matches!(report.outcome, ExactOutcome::Unknown) {
            stop.store(true, Ordering::Relaxed);
        }
        report
    };
    let (a, b) = std::thread::scope(|scope| {
        let spawn = |which: usize| {
            let run = &run;
            std::thread::Builder::new()
                .stack_size(SEARCH_STACK_BYTES)
                .spawn_scoped(scope, move || run(which))
        };
        let first = spawn(0);
        let second = spawn(1);
        let join = |h: std::io::Result<std::thread::ScopedJoinHandle<'_, ExactReport>>| match h {
            Ok(h) => h
                .join()
                .unwrap_or(ExactReport::unknown(0, SearchStats::default())),
            Err(_) => ExactReport::unknown(0, SearchStats::default()),
        };
        (join(first), join(second))
    });
    let nodes = a.nodes + b.nodes;
    let mut stats = a.stats;
    stats.add(&b.stats);
    let outcome = match (a.outcome, b.outcome) {
        (ExactOutcome::Unknown, other) | (other, _) => other,
    };
    ExactReport {
        outcome,
        nodes,
        stats,
    }
}

/// Runs `runs` (variant index, strategy) round-robin with a node budget
/// that doubles every round.
fn portfolio(
    original: &Arena,
    variants: &[Variant],
    prepared: &[Prepared],
    runs: &[(usize, Strategy)],
    budget: &ExactBudget,
) -> ExactReport {
    let mut ranks: Vec<Vec<u32>> = runs
        .iter()
        .map(|&(v, s)| prepared[v].ranks(s.order, 0))
        .collect();
    let mut total = 0u64;
    let mut stats = SearchStats::default();
    let mut round_index = 0u64;
    let mut memos: Vec<Memo> = variants.iter().map(|_| Memo::new()).collect();
    let mut round = FIRST_ROUND.max(2 * prepared[0].ids.len() as u64);
    loop {
        for (r, &(v, strategy)) in runs.iter().enumerate() {
            let left = budget.max_nodes.saturating_sub(total);
            let stopped = budget
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed));
            if left == 0 || stopped || budget.deadline.is_some_and(|d| Instant::now() >= d) {
                return ExactReport::unknown(total, stats);
            }
            let run_budget = ExactBudget {
                max_nodes: round.min(left),
                deadline: budget.deadline,
                stop: budget.stop.clone(),
            };
            let p = &prepared[v];
            let arena = &variants[v].arena;
            let salt = round_index << 16 | r as u64;
            let mut search = Search::new(
                arena,
                p,
                &ranks[r],
                strategy.style,
                &run_budget,
                &mut memos[v],
                salt,
            );
            let step = search.run();
            total += search.nodes;
            stats.add(&search.stats);
            stats.runs += 1;
            match step {
                Step::Found => {
                    let mut offsets = vec![UNPLACED; original.items.len()];
                    for (it, o) in original.items.iter().zip(offsets.iter_mut()) {
                        if let Some(f) = it.fixed {
                            *o = f;
                        }
                    }
                    for (k, &id) in p.ids.iter().enumerate() {
                        let at = search.offsets[k];
                        offsets[id as usize] = if variants[v].flipped {
                            original.mirror(at, p.size[k])
                        } else {
                            at
                        };
                    }
                    let outcome = if place_trivial(original, &p.trivial, &mut offsets) {
                        ExactOutcome::Found(offsets)
                    } else {
                        ExactOutcome::Unknown
                    };
                    return ExactReport {
                        outcome,
                        nodes: total,
                        stats,
                    };
                }
                Step::Fail if !p.any_partners => {
                    return ExactReport {
                        outcome: ExactOutcome::Infeasible,
                        nodes: total,
                        stats,
                    };
                }
                Step::Fail if runs.iter().all(|&(w, _)| prepared[w].any_partners) => {
                    // The order is not complete with partners: an exhausted
                    // run proves nothing, and neither will the others.
                    return ExactReport::unknown(total, stats);
                }
                Step::Fail | Step::Stop => {}
            }
        }
        round = round.saturating_mul(2);
        round_index += 1;
        // Later rounds perturb the orders, so that a restart explores a
        // different part of the tree instead of repeating the last one.
        for (r, &(v, s)) in runs.iter().enumerate() {
            ranks[r] = prepared[v].ranks(s.order, round_index << 16 | r as u64);
        }
    }
}

/// Places items that conflict with nothing in time (never live or empty):
/// the lowest aligned address in their windows clear of placed partners.
fn place_trivial(arena: &Arena, trivial: &[u32], offsets: &mut [u64]) -> bool {
    for &i in trivial {
        let it = &arena.items[i as usize];
        let mut obstacles: Vec<(u64, u64)> = it
            .partners
            .iter()
            .filter(|&&p| offsets[p as usize] != UNPLACED)
            .filter_map(|&p| arena.element_span(offsets[p as usize], arena.items[p as usize].size))
            .collect();
        merge_intervals(&mut obstacles);
        let mut at = None;
        let windows = &arena.window_sets[it.windows as usize];
        for_each_gap(windows, &obstacles, |g0, g1| match align_up(g0, it.align) {
            Some(a) if a.checked_add(it.size).is_some_and(|e| e <= g1) => {
                at = Some(a);
                false
            }
            _ => true,
        });
        if at.is_none() && it.size == 0 {
            at = windows
                .iter()
                .find_map(|&(a, b)| align_up(a, it.align).filter(|&x| x <= b));
        }
        match at {
            Some(a) => offsets[i as usize] = a,
            None => return false,
        }
    }
    true
}
