//! Exact search: finds a placement inside the arena's windows or proves that
//! none exists, within a node budget (and, for interactive tools, a
//! deadline).
//!
//! `search.rs` holds one depth-first run over canonical placements and the
//! rules that prune it; `prepare.rs` the static data a run needs; `stack.rs`
//! fixes the items live throughout at the bottom first; `parts.rs` then
//! splits the arena in time where no free item crosses a section boundary,
//! and runs the portfolio on each part; `valley.rs` a
//! second complete search for arenas full in every section (and, with
//! holes, for those with slack), which branches in any valley of the
//! skyline rather than at the lowest level; `coalesce.rs` a heuristic
//! coarser copy of arenas with slack. This file is the portfolio around
//! them: the valley search (two branching rules, Luby restarts) on the
//! problem and its time-reversed copy, then on the coalesced copy and its
//! time-reversed copy, then the address-ordered search on the problem and
//! its time-reversed copy and, where alignments allow, on both with
//! addresses mirrored, under several static branching orders and two
//! branching rules, each run restarted with a growing node budget.
//! Zero-slack instances are often easy in one orientation or order and
//! hard in another; any run on the problem's copies that finishes is
//! conclusive, while a coalesced copy only ever contributes placements.
//! Runs on one copy share their failure memo, so a restart does not prove
//! again what an earlier run proved.

mod coalesce;
mod parts;
mod prepare;
mod search;
mod stack;
mod valley;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use prepare::{Preorder, Prepared};
use search::{Memo, RunStyle, Search, Step};
use valley::ValleyMemo;

use crate::arena::{Arena, align_up, for_each_gap, merge_intervals};
use crate::greedy::UNPLACED;

/// Limits on one exact search.
#[derive(Clone, Debug)]
pub(crate) struct ExactBudget {
    /// Search nodes before giving up (deterministic).
    pub max_nodes: u64,
    /// Wall-clock limit (not deterministic; only for interactive tools).
    pub deadline: Option<Instant>,
    /// Shared with the other thread of a parallel search: stop once it has
    /// concluded at an earlier position of the portfolio.
    pub stop: Option<Stop>,
}

impl ExactBudget {
    /// Whether a run that has used `nodes` nodes may go on: within the node
    /// budget and, checked every 1,024 nodes, before the deadline and not
    /// told to stop.
    pub(crate) fn allows(&self, nodes: u64) -> bool {
        if nodes > self.max_nodes {
            return false;
        }
        if nodes % 1024 == 0 {
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            if self.stop.as_ref().is_some_and(Stop::stopped) {
                return false;
            }
        }
        true
    }
}

/// The stop condition of one run of a parallel portfolio: every run has a
/// position in one global order (round, then entry), and a run stops only
/// when a run at an earlier position has concluded, whose answer wins
/// whatever this run finds. The answer is therefore that of the earliest
/// conclusive position, as on one thread.
#[derive(Clone, Debug)]
pub(crate) struct Stop {
    /// The earliest position that has concluded (`u64::MAX`: none yet).
    pub best: Arc<AtomicU64>,
    /// This run's position.
    pub position: u64,
}

impl Stop {
    /// Whether a run at an earlier position has concluded.
    pub fn stopped(&self) -> bool {
        self.best.load(Ordering::Relaxed) < self.position
    }
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
    /// Nodes of the valley-local search (`valley.rs`), included in the
    /// total.
    pub local: u64,
    /// Free items of the largest part searched on its own where the
    /// search split the problem in time (`parts.rs`; parts after an
    /// undecided one are not searched); 0 where it did not split.
    pub largest_part: u64,
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
        self.local += o.local;
        self.largest_part = self.largest_part.max(o.largest_part);
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

/// The valley-local search's node budget per node of a round: its nodes
/// cost about a tenth of the address-ordered search's.
const VALLEY_NODES_PER_NODE: u64 = 8;

/// The seed of a run: its round and entry.
fn salt_of(round: u64, entry: u64) -> u64 {
    round << 16 | entry
}

/// Nodes of the first round of the portfolio.
const FIRST_ROUND: u64 = 1024;

/// One copy of the problem a portfolio searches.
struct Variant {
    arena: Arena,
    /// Addresses are mirrored ([`Arena::flipped`]).
    flipped: bool,
    /// For a coalesced copy ([`coalesce`]), each item's members: original
    /// items and their offsets in it. Its searches can find a placement
    /// but prove nothing.
    members: Option<Vec<Vec<(u32, u64)>>>,
}

impl Variant {
    fn plain(arena: Arena, flipped: bool) -> Variant {
        Variant {
            arena,
            flipped,
            members: None,
        }
    }
}

/// The variants a portfolio searches: the problem and its time-reversed
/// copy, then both with addresses mirrored where that keeps the problem
/// the same (a zero-slack cut is as often easy from its top as from its
/// bottom), then, where coalescing joins enough items, the coalesced copy
/// and its time-reversed copy.
fn variants(arena: &Arena) -> Vec<Variant> {
    let mut out = vec![
        Variant::plain(arena.clone(), false),
        Variant::plain(arena.reversed(), false),
    ];
    if let Some(f) = arena.flipped() {
        let r = f.reversed();
        out.push(Variant::plain(f, true));
        out.push(Variant::plain(r, true));
    }
    if let Some(c) = coalesce::coalesce(arena) {
        let reversed = c.arena.reversed();
        out.push(Variant {
            arena: c.arena,
            flipped: false,
            members: Some(c.members.clone()),
        });
        out.push(Variant {
            arena: reversed,
            flipped: false,
            members: Some(c.members),
        });
    }
    out
}

/// Runs the exact search on `arena` within `budget`.
pub(crate) fn solve_exact(arena: &Arena, budget: ExactBudget) -> ExactReport {
    with_lifelong_stacked(arena, budget, |a, b| {
        parts::solve_in_parts(a, b, &solve_portfolio)
    })
}

/// Runs `solve` on `arena` with its lifelong items stacked at the bottom
/// ([`stack::stack_lifelong`]): only on the reduced arena where that loses
/// nothing; else on the reduced arena with half the node budget first, then
/// on `arena` with what is left, unless the first found a placement.
fn with_lifelong_stacked(
    arena: &Arena,
    budget: ExactBudget,
    solve: impl Fn(&Arena, ExactBudget) -> ExactReport,
) -> ExactReport {
    match stack::stack_lifelong(arena) {
        None => solve(arena, budget),
        Some(s) if s.exact => solve(&s.arena, budget),
        Some(s) => {
            let first = solve(
                &s.arena,
                ExactBudget {
                    max_nodes: (budget.max_nodes / 2).max(1),
                    ..budget.clone()
                },
            );
            if matches!(first.outcome, ExactOutcome::Found(_)) {
                return first;
            }
            let rest = ExactBudget {
                max_nodes: budget.max_nodes.saturating_sub(first.nodes).max(1),
                ..budget
            };
            let mut second = solve(arena, rest);
            second.nodes = second.nodes.saturating_add(first.nodes);
            second.stats.add(&first.stats);
            second
        }
    }
}

/// The portfolio on one thread.
fn solve_portfolio(arena: &Arena, budget: ExactBudget) -> ExactReport {
    let variants = variants(arena);
    let Some(prepared) = variants
        .iter()
        .map(|v| Prepared::new(&v.arena))
        .collect::<Option<Vec<_>>>()
    else {
        return ExactReport::unknown(0, SearchStats::default());
    };
    let runs = portfolio_runs(&variants);
    portfolio(arena, &variants, &prepared, &runs, &budget, None).report
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
/// deep stack): one takes the problem and its mirror, the other their
/// time-reversed copies. Each thread's runs are those of the one-thread
/// portfolio at the same positions, with the same node budgets and the
/// same failure memos, and the answer is that of the earliest conclusive
/// position, so the result does not depend on timing: a run stops early
/// only when an earlier position has already concluded. A thread cut off
/// by the deadline before reaching the winning position leaves the answer
/// unknown rather than risk another one.
pub(crate) fn solve_exact_parallel(arena: &Arena, budget: ExactBudget) -> ExactReport {
    with_lifelong_stacked(arena, budget, |a, b| {
        parts::solve_in_parts(a, b, &solve_portfolio_parallel)
    })
}

/// The portfolio on two threads.
fn solve_portfolio_parallel(arena: &Arena, budget: ExactBudget) -> ExactReport {
    let best = Arc::new(AtomicU64::new(u64::MAX));
    let variants = variants(arena);
    let Some(prepared) = variants
        .iter()
        .map(|v| Prepared::new(&v.arena))
        .collect::<Option<Vec<_>>>()
    else {
        return ExactReport::unknown(0, SearchStats::default());
    };
    let all = portfolio_runs(&variants);
    let run = |which: usize| {
        // Thread 0 takes the even variants, thread 1 the odd ones (the
        // time-reversed copies); positions stay those of the whole list.
        let mine: Vec<Run> = all
            .iter()
            .copied()
            .filter(|r| r.variant % 2 == which)
            .collect();
        let race = Race {
            best: best.clone(),
            entries: all.len() as u64,
        };
        let thread_budget = ExactBudget {
            max_nodes: (budget.max_nodes / 2).max(1),
            deadline: budget.deadline,
            stop: None,
        };
        portfolio(
            arena,
            &variants,
            &prepared,
            &mine,
            &thread_budget,
            Some(&race),
        )
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
        let join = |h: std::io::Result<std::thread::ScopedJoinHandle<'_, Raced>>| match h {
            Ok(h) => h.join().unwrap_or_else(|_| Raced::lost()),
            Err(_) => Raced::lost(),
        };
        (join(first), join(second))
    });
    let nodes = a.report.nodes + b.report.nodes;
    let mut stats = a.report.stats;
    stats.add(&b.report.stats);
    // The earliest conclusive position wins, provided the other thread
    // ran every one of its positions before it.
    let (win, other) = if a.concluded <= b.concluded {
        (a, b)
    } else {
        (b, a)
    };
    let outcome = if win.concluded < other.reached {
        win.report.outcome
    } else {
        ExactOutcome::Unknown
    };
    ExactReport {
        outcome,
        nodes,
        stats,
    }
}

/// One run of the portfolio: a variant, a strategy and the entry's index
/// in the whole list (its position within a round).
#[derive(Clone, Copy, Debug)]
struct Run {
    variant: usize,
    strategy: Strategy,
    kind: Kind,
    entry: u64,
}

/// Which search a portfolio entry runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The address-ordered search (`search.rs`) with the entry's strategy.
    Search,
    /// The valley-local search (`valley.rs`), branching on the edge with
    /// the fewest candidates (`local: false`) or staying in the leftmost
    /// valley unless another edge is forced (`local: true`); the entry's
    /// strategy is unused.
    Valley { local: bool },
}

/// Every entry of the portfolio, in the order one thread tries them each
/// round: the valley-local search, both branching rules, on the problem and
/// its time-reversed copy (mirrored addresses change nothing for it), then
/// on the coalesced copies, then every (strategy, variant) of the
/// address-ordered search on the uncoalesced variants.
fn portfolio_runs(variants: &[Variant]) -> Vec<Run> {
    let plain: Vec<usize> = (0..variants.len())
        .filter(|&v| variants[v].members.is_none())
        .collect();
    let coalesced: Vec<usize> = (0..variants.len())
        .filter(|&v| variants[v].members.is_some())
        .collect();
    let valley_variants: Vec<usize> = plain.iter().take(2).chain(&coalesced).copied().collect();
    let valleys = [false, true].into_iter().flat_map(|local| {
        valley_variants
            .iter()
            .map(move |&variant| (variant, STRATEGIES[0], Kind::Valley { local }))
    });
    let searches = STRATEGIES.iter().flat_map(|&strategy| {
        plain
            .iter()
            .map(move |&variant| (variant, strategy, Kind::Search))
    });
    valleys
        .chain(searches)
        .enumerate()
        .map(|(entry, (variant, strategy, kind))| Run {
            variant,
            strategy,
            kind,
            entry: entry as u64,
        })
        .collect()
}

/// The shared state of a parallel portfolio.
struct Race {
    /// The earliest conclusive position so far.
    best: Arc<AtomicU64>,
    /// Entries per round (positions are `round * entries + entry`).
    entries: u64,
}

/// What one thread of a parallel portfolio ended with.
struct Raced {
    report: ExactReport,
    /// The position of its conclusive run (`u64::MAX`: none).
    concluded: u64,
    /// Every position of this thread below this one ran to its end
    /// without concluding (`u64::MAX`: all of them).
    reached: u64,
}

impl Raced {
    /// A thread that could not run: it reached nothing.
    fn lost() -> Raced {
        Raced {
            report: ExactReport::unknown(0, SearchStats::default()),
            concluded: u64::MAX,
            reached: 0,
        }
    }
}

/// Runs `runs` round-robin with a node budget that doubles every round;
/// in a parallel portfolio (`race`), only until an earlier position of the
/// other thread has concluded.
fn portfolio(
    original: &Arena,
    variants: &[Variant],
    prepared: &[Prepared],
    runs: &[Run],
    budget: &ExactBudget,
    race: Option<&Race>,
) -> Raced {
    let mut ranks: Vec<Vec<u32>> = runs
        .iter()
        .map(|r| {
            if r.kind == Kind::Search {
                prepared[r.variant].ranks(r.strategy.order, 0)
            } else {
                Vec::new()
            }
        })
        .collect();
    let mut valley_memos: Vec<ValleyMemo> = variants.iter().map(|_| ValleyMemo::new()).collect();
    // Each valley entry's next Luby term: one sequence across the rounds.
    let mut valley_next = vec![1u64; runs.len()];
    // Variants where the valley search does not apply: later rounds skip
    // them.
    let mut valley_done = vec![false; variants.len()];
    let mut total = 0u64;
    let mut stats = SearchStats::default();
    let mut round_index = 0u64;
    let mut memos: Vec<Memo> = variants.iter().map(|_| Memo::new()).collect();
    let mut round = FIRST_ROUND.max(2 * prepared[0].ids.len() as u64);
    let proves = !runs.iter().all(|r| prepared[r.variant].any_partners);
    let ended = |outcome: Option<ExactOutcome>, total, stats, position: u64| {
        let concluded = outcome.is_some();
        Raced {
            report: ExactReport {
                outcome: outcome.unwrap_or(ExactOutcome::Unknown),
                nodes: total,
                stats,
            },
            concluded: if concluded { position } else { u64::MAX },
            reached: if concluded { u64::MAX } else { position },
        }
    };
    loop {
        for (r, run) in runs.iter().enumerate() {
            let position = race.map_or(0, |race| {
                round_index
                    .saturating_mul(race.entries)
                    .saturating_add(run.entry)
            });
            let stop = race.map(|race| Stop {
                best: race.best.clone(),
                position,
            });
            let left = budget.max_nodes.saturating_sub(total);
            let stopped = stop.as_ref().is_some_and(Stop::stopped);
            if left == 0 || stopped || budget.deadline.is_some_and(|d| Instant::now() >= d) {
                return ended(None, total, stats, position);
            }
            let run_budget = ExactBudget {
                max_nodes: round.min(left),
                deadline: budget.deadline,
                stop,
            };
            let v = run.variant;
            let p = &prepared[v];
            if let Kind::Valley { local } = run.kind {
                if valley_done[v] {
                    continue;
                }
                let arena = &variants[v].arena;
                let seed = u64::from(local) << 63 | salt_of(round_index, run.entry);
                let weighted = ExactBudget {
                    max_nodes: run_budget.max_nodes.saturating_mul(VALLEY_NODES_PER_NODE),
                    ..run_budget.clone()
                };
                let Some(valley) = valley::restarts(
                    arena,
                    p,
                    &weighted,
                    local,
                    &mut valley_memos[v],
                    (seed, &mut valley_next[r]),
                ) else {
                    valley_done[v] = true;
                    continue;
                };
                total += valley.nodes.min(weighted.max_nodes) / VALLEY_NODES_PER_NODE;
                stats.runs += 1;
                stats.local += valley.nodes.min(weighted.max_nodes);
                let step = valley.step;
                let outcome = match step {
                    Step::Found => Some(
                        original_offsets(original, &variants[v], p, &valley.offsets)
                            .map_or(ExactOutcome::Unknown, ExactOutcome::Found),
                    ),
                    // A coalesced copy with no placement proves nothing
                    // of the problem: only its own runs end.
                    Step::Fail if variants[v].members.is_some() => {
                        valley_done[v] = true;
                        continue;
                    }
                    Step::Fail => Some(ExactOutcome::Infeasible),
                    Step::Stop if valley.nodes <= weighted.max_nodes => {
                        return ended(None, total, stats, position);
                    }
                    Step::Stop => None,
                };
                if let Some(outcome) = outcome {
                    if let Some(race) = race {
                        race.best.fetch_min(position, Ordering::Relaxed);
                    }
                    return ended(Some(outcome), total, stats, position);
                }
                continue;
            }
            let arena = &variants[v].arena;
            let salt = salt_of(round_index, run.entry);
            let mut search = Search::new(
                arena,
                p,
                &ranks[r],
                run.strategy.style,
                &run_budget,
                &mut memos[v],
                salt,
            );
            let step = search.run();
            total += search.nodes;
            stats.add(&search.stats);
            stats.runs += 1;
            let outcome = match step {
                Step::Found => {
                    let offsets = original_offsets(original, &variants[v], p, &search.offsets);
                    Some(match offsets {
                        Some(offsets) => ExactOutcome::Found(offsets),
                        None => ExactOutcome::Unknown,
                    })
                }
                Step::Fail if !p.any_partners => Some(ExactOutcome::Infeasible),
                Step::Fail if !proves => {
                    // The order is not complete with partners: an exhausted
                    // run proves nothing, and neither will the others.
                    return ended(None, total, stats, u64::MAX);
                }
                // A run stopped by its budget ran to its end at this
                // position; one stopped by the deadline or the race did not.
                Step::Stop if search.nodes <= run_budget.max_nodes => {
                    return ended(None, total, stats, position);
                }
                Step::Fail | Step::Stop => None,
            };
            if let Some(outcome) = outcome {
                if let Some(race) = race {
                    race.best.fetch_min(position, Ordering::Relaxed);
                }
                return ended(Some(outcome), total, stats, position);
            }
        }
        round = round.saturating_mul(2);
        round_index += 1;
        // Later rounds perturb the orders, so that a restart explores a
        // different part of the tree instead of repeating the last one.
        for (r, run) in runs
            .iter()
            .enumerate()
            .filter(|(_, run)| run.kind == Kind::Search)
        {
            ranks[r] =
                prepared[run.variant].ranks(run.strategy.order, salt_of(round_index, run.entry));
        }
    }
}

/// The placement of the original arena from a run's offsets on variant
/// `v`: fixed items where they are, mirrored addresses turned back, and
/// the items that conflict with nothing placed last; `None` if one of
/// those has no room.
fn original_offsets(
    original: &Arena,
    variant: &Variant,
    p: &Prepared,
    found: &[u64],
) -> Option<Vec<u64>> {
    let Some(members) = &variant.members else {
        return arena_offsets(original, variant.flipped, p, found);
    };
    // The coalesced copy's own placement, then each group's members at
    // their offsets from it.
    let groups = arena_offsets(&variant.arena, false, p, found)?;
    let mut offsets = vec![UNPLACED; original.items.len()];
    for (&at, members) in groups.iter().zip(members) {
        for &(i, rel) in members {
            offsets[i as usize] = at.checked_add(rel)?;
        }
    }
    Some(offsets)
}

/// The placement of `arena` from a run's offsets on it or, `flipped`, on
/// its address-mirrored copy: fixed items where they are, and the items
/// that conflict with nothing placed last.
fn arena_offsets(arena: &Arena, flipped: bool, p: &Prepared, found: &[u64]) -> Option<Vec<u64>> {
    let mut offsets = vec![UNPLACED; arena.items.len()];
    for (it, o) in arena.items.iter().zip(offsets.iter_mut()) {
        if let Some(f) = it.fixed {
            *o = f;
        }
    }
    for (k, &id) in p.ids.iter().enumerate() {
        let at = found[k];
        offsets[id as usize] = if flipped {
            arena.mirror(at, p.size[k])
        } else {
            at
        };
    }
    place_trivial(arena, &p.trivial, &mut offsets).then_some(offsets)
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
