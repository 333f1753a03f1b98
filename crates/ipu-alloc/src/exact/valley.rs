//! A third exact search for the portfolio, for arenas with no slack in any
//! section: *valley-local* placement.
//!
//! Where every section's live bytes fill the window exactly, a placement
//! leaves no free byte, so at any state of a search that keeps the placed
//! items below a skyline (each section full from the window's start up to
//! its skyline height) the byte just above the skyline in a section is the
//! bottom of an unplaced item. In a *valley*, a maximal run of sections at
//! one height whose neighbours are higher (or the ends of time), that item
//! cannot reach past the valley (it would overlap the neighbours), so the
//! byte at the valley's first section is the bottom of an item that
//! *starts* there and ends within the valley, and the byte at its last
//! section the bottom of one that *ends* there. Branching on either is
//! complete, in any valley, not only the lowest one.
//!
//! The address-ordered search (`search.rs`) must fill the lowest level
//! first, which interleaves regions that share nothing (the two sides of a
//! band below a cut) and makes a failure on one side re-enumerate the
//! other's choices. Here the search branches on the valley edge with the
//! fewest candidates (none: the state fails; one: a forced move), the
//! leftmost on ties, so it finishes one region before it starts the next;
//! and a failed state is remembered by its skyline and unplaced set, which
//! no longer depend on how a finished region was filled, so a region that
//! failed is not solved again under each arrangement of another.
//!
//! Runs are heavy-tailed (one order places a 600-buffer cut in 10^4 nodes,
//! another thrashes for millions), so the portfolio runs the search as Luby
//! restarts with shuffled children ([`restarts`]). A node costs about a
//! microsecond on 1000 buffers: only the valleys around the last placement
//! are tested again.
//!
//! A time sweep (placing the items section by section into the holes the
//! live items leave) was tried first and dropped: where thirty items start
//! at once it branches over their orders in the holes, where this search
//! branches over which items start a valley, and it placed none of the
//! 600- and 1000-buffer guillotine cuts within millions of nodes.
//!
//! Measured with `cargo xtask alloc bench --timeout 10` (release, two
//! threads; wall times, the heuristics included):
//!
//! | instance   | before (address-ordered only) | with this search (its nodes) |
//! |------------|-------------------------------|------------------------------|
//! | gcut-n150  | fits, 23 ms                   | fits, 22 ms (150)            |
//! | gcut-n300  | fits, 201 ms                  | fits, 184 ms (374)           |
//! | gcut-n600  | fits, 2550 ms                 | fits, 425 ms (61,685)        |
//! | gcut-n1000 | unknown at 10 s               | unknown at 10 s (~2 M)       |
//! | bcut-n1000 | fits, 707 ms                  | fits, 667 ms (2,006)         |
//!
//! gcut-n1000 stays out of reach: alone, with either rule and in either
//! time direction, 16 M nodes of Luby restarts do not place it. The
//! near-zero-slack classes have sections with slack, where the argument
//! above does not hold, so the search does not run on them.
//!
//! It runs on arenas whose free items share one window interval, without
//! separation partners, where each section's fixed items form one block
//! at the window's start (lifelong items stacked by `stack.rs`), and where
//! every section is full; the search is then complete, so an exhausted
//! run proves that no placement exists. Placements are checked by the
//! caller like any other.

use std::collections::HashSet;

use smallvec::SmallVec;

use ipu_layout::rng::SplitMix64;

use super::ExactBudget;
use super::prepare::{NO_TWIN, Prepared};
use super::search::Step;
use crate::arena::Arena;
use crate::greedy::UNPLACED;

/// Failed states remembered at most (16 bytes each, plus table overhead).
const FAILED_LIMIT: usize = 1 << 21;

/// Failed states (skyline and unplaced set digests), shared by every run
/// on the same arena: a failure is a fact about the state.
pub(super) type ValleyMemo = HashSet<u128>;

/// A 128-bit mixer (multiply and xor-shift rounds).
fn mix(mut x: u128) -> u128 {
    x ^= x >> 67;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
    x ^= x >> 61;
    x = x.wrapping_mul(0xd6e8_feb8_6659_fd93_2545_f491_4f6c_dd1d);
    x ^ (x >> 64)
}

/// The digest of section `s` at height `h`.
fn cell(s: usize, h: u64) -> u128 {
    mix((s as u128) << 64 | u128::from(h) ^ 0x7a11_e700)
}

/// Candidates of one valley edge: items largest first.
type Candidates = SmallVec<[u32; 16]>;

/// The `i`-th term (from 1) of the Luby sequence 1, 1, 2, 1, 1, 2, 4, ...
fn luby(mut i: u64) -> u64 {
    loop {
        let mut k = 1u32;
        while k < 63 && (1u64 << k) - 1 < i {
            k += 1;
        }
        if (1u64 << k) - 1 == i || k >= 63 {
            return 1u64 << (k - 1);
        }
        i -= (1u64 << (k - 1)) - 1;
    }
}

/// What a sequence of restarts ended with: the last run's end, the nodes
/// of all runs and the placement found (local indices).
pub(super) struct Restarts {
    pub step: Step,
    pub nodes: u64,
    pub offsets: Vec<u64>,
}

/// Runs the valley-local search on `p` within `budget` as a sequence of
/// restarts with node budgets following the Luby sequence (a multiple of
/// the item count), the first in the fixed order, the others with children
/// shuffled from `seed`; they share `failed`. Heavy tails are the rule
/// here: one order places a cut in a few hundred nodes where another
/// thrashes for millions. Any restart that exhausts its tree is a proof.
/// `None` when the search does not apply.
pub(super) fn restarts(
    arena: &Arena,
    p: &Prepared,
    budget: &ExactBudget,
    local: bool,
    failed: &mut ValleyMemo,
    seed: u64,
) -> Option<Restarts> {
    let unit = (p.ids.len() as u64).saturating_mul(4).max(1024);
    let mut nodes = 0u64;
    for i in 1u64.. {
        let left = budget.max_nodes.saturating_sub(nodes);
        let run_budget = ExactBudget {
            max_nodes: luby(i).saturating_mul(unit).min(left),
            deadline: budget.deadline,
            stop: budget.stop.clone(),
        };
        let mut v = Valley::new(arena, p, &run_budget, local, failed)?;
        if seed != 0 || i > 1 {
            v.rng = Some(SplitMix64::new(
                seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ));
        }
        let step = v.run();
        nodes = nodes.saturating_add(v.nodes.min(run_budget.max_nodes));
        let out_of_budget = v.nodes > run_budget.max_nodes;
        if step != Step::Stop || !out_of_budget || nodes >= budget.max_nodes {
            let offsets = std::mem::take(&mut v.offsets);
            // A run cut short by its own budget with the whole budget
            // spent reports more nodes than it may: the caller's sign
            // that the budget, not the deadline, stopped it.
            let nodes = if step == Step::Stop && out_of_budget {
                budget.max_nodes.saturating_add(1)
            } else {
                nodes
            };
            return Some(Restarts {
                step,
                nodes,
                offsets,
            });
        }
    }
    None
}

/// One run of the valley-local search.
pub(super) struct Valley<'a> {
    p: &'a Prepared,
    budget: &'a ExactBudget,
    /// Branch in the leftmost valley unless another edge is forced.
    local: bool,
    failed: &'a mut ValleyMemo,
    pub nodes: u64,
    /// Address per free item, `UNPLACED` until placed.
    pub offsets: Vec<u64>,
    /// Top of the full part of each section.
    sky: Vec<u64>,
    /// One past the highest address an item may use.
    top: u64,
    /// Free items by first section and by end section, largest first.
    by_start: Vec<Vec<u32>>,
    by_end: Vec<Vec<u32>>,
    item_hash: Vec<u128>,
    hash: u128,
    left: usize,
    /// The sections of the last item placed (`None` at the root).
    recent: Option<(usize, usize)>,
    /// Shuffles the children of every node (restarts); `None`: largest
    /// first.
    rng: Option<SplitMix64>,
    // Scratch of the valley test.
    reach: Vec<bool>,
    diff: Vec<i128>,
}

impl<'a> Valley<'a> {
    /// A run on `p` (prepared from `arena`), or `None` when the search does
    /// not apply: several windows, partners, fixed items other than a block
    /// at the window's start, or a section that is not full.
    pub fn new(
        arena: &Arena,
        p: &'a Prepared,
        budget: &'a ExactBudget,
        local: bool,
        failed: &'a mut ValleyMemo,
    ) -> Option<Valley<'a>> {
        if p.any_partners {
            return None;
        }
        let m = p.ids.len();
        let set = *p.windows.first()?;
        if p.windows.iter().any(|&w| w != set) {
            return None;
        }
        let [(w0, w1)] = arena.window_sets.get(set as usize)?.as_slice() else {
            return None;
        };
        let (w0, w1) = (*w0, *w1);
        // Each section: one fixed block at the window's start, or none.
        let mut sky = Vec::with_capacity(p.sections);
        for list in &p.blocked {
            let inside: SmallVec<[(u64, u64); 2]> = list
                .iter()
                .map(|&(a, b)| (a.max(w0), b.min(w1)))
                .filter(|&(a, b)| a < b)
                .collect();
            match inside.as_slice() {
                [] => sky.push(w0),
                [(a, b)] if *a == w0 => sky.push(*b),
                _ => return None,
            }
        }
        let room = w1.checked_sub(w0)?;
        let mut live = sky
            .iter()
            .map(|&h| h.checked_sub(w0))
            .collect::<Option<Vec<u64>>>()?;
        for k in 0..m {
            for s in p.start[k]..p.end[k] {
                let l = &mut live[s as usize];
                *l = l.checked_add(p.size[k])?;
            }
        }
        if live.iter().any(|&l| l != room) {
            return None;
        }
        let mut by_start = vec![Vec::new(); p.sections];
        let mut by_end = vec![Vec::new(); p.sections + 1];
        let mut order: Vec<u32> = (0..m as u32).collect();
        order.sort_by_key(|&k| (std::cmp::Reverse(p.size[k as usize]), k));
        for &k in &order {
            by_start[p.start[k as usize] as usize].push(k);
            by_end[p.end[k as usize] as usize].push(k);
        }
        let item_hash: Vec<u128> = (0..m as u128).map(|k| mix(k ^ 0xa11e)).collect();
        let hash = item_hash.iter().fold(0u128, |h, &x| h ^ x)
            ^ sky
                .iter()
                .enumerate()
                .fold(0u128, |h, (s, &v)| h ^ cell(s, v));
        Some(Valley {
            p,
            budget,
            local,
            failed,
            nodes: 0,
            offsets: vec![UNPLACED; m],
            sky,
            top: w1,
            by_start,
            by_end,
            item_hash,
            hash,
            left: m,
            rng: None,
            recent: None,
            reach: Vec::new(),
            diff: Vec::new(),
        })
    }

    /// Runs the search from the start.
    pub fn run(&mut self) -> Step {
        self.dfs()
    }

    fn tick(&mut self) -> bool {
        self.nodes += 1;
        self.budget.allows(self.nodes)
    }

    fn dfs(&mut self) -> Step {
        if self.left == 0 {
            return Step::Found;
        }
        if !self.tick() {
            return Step::Stop;
        }
        if self.failed.contains(&self.hash) {
            return Step::Fail;
        }
        let result = match self.branch() {
            None => Step::Fail,
            Some((level, mut children)) => {
                if let Some(rng) = self.rng.as_mut() {
                    for j in (1..children.len()).rev() {
                        children.swap(j, rng.below(j as u64 + 1) as usize);
                    }
                }
                self.try_children(level, &children)
            }
        };
        if result == Step::Fail {
            if self.failed.len() >= FAILED_LIMIT {
                self.failed.clear();
            }
            self.failed.insert(self.hash);
        }
        result
    }

    fn try_children(&mut self, level: u64, children: &[u32]) -> Step {
        for &k in children {
            self.apply(k, level);
            let r = self.dfs();
            if r == Step::Found {
                return r;
            }
            self.undo(k, level);
            if r == Step::Stop {
                return r;
            }
        }
        Step::Fail
    }

    /// The valley edge to branch on: its height and its candidates, the
    /// fewest of any edge (leftmost on ties); `None` if some edge has none.
    fn branch(&mut self) -> Option<(u64, Candidates)> {
        let sections = self.sky.len();
        let mut best: Option<(u64, Candidates)> = None;
        let mut a = 0;
        while a < sections {
            let h = self.sky[a];
            let mut b = a + 1;
            while b < sections && self.sky[b] == h {
                b += 1;
            }
            let valley = h < self.top
                && (a == 0 || self.sky[a - 1] > h)
                && (b == sections || self.sky[b] > h);
            // Placements change only the valleys around them; the test on
            // the others ran when they last changed (it only prunes).
            let near = self.recent.is_none_or(|(s0, s1)| a <= s1 && s0 <= b);
            if valley {
                if near && !self.valley_ok(a, b, h) {
                    return None;
                }
                for from_left in [true, false] {
                    let c = self.candidates(a, b, h, from_left);
                    if c.is_empty() {
                        return None;
                    }
                    let better = match best.as_ref() {
                        None => true,
                        Some((_, old)) if self.local => c.len() <= 1 && old.len() > 1,
                        Some((_, old)) => c.len() < old.len(),
                    };
                    if better {
                        best = Some((h, c));
                    }
                }
            }
            a = b;
        }
        best
    }

    /// Whether valley `a..b` at height `h` can still be filled: unplaced
    /// items at `h` must cover it one after another (each starting where
    /// the previous ends, all within the valley: its lowest bytes are all
    /// item bottoms, and an item there cannot reach past it), and below
    /// the lower wall every section's bytes are covered by items that lie
    /// within the valley in time (anything else would cross a wall).
    fn valley_ok(&mut self, a: usize, b: usize, h: u64) -> bool {
        let p = self.p;
        let room = self.top - h;
        let sections = self.sky.len();
        let wall = |s: Option<usize>| s.map_or(self.top, |s| self.sky[s]);
        let low = wall(a.checked_sub(1))
            .min(wall((b < sections).then_some(b)))
            .min(self.top);
        let need = low.saturating_sub(h);
        let width = b - a + 1;
        self.reach.clear();
        self.reach.resize(width, false);
        self.diff.clear();
        self.diff.resize(width, 0);
        self.reach[0] = true;
        for t in a..b {
            for &k in &self.by_start[t] {
                let ku = k as usize;
                let e = p.end[ku] as usize;
                if e > b || self.offsets[ku] != UNPLACED || p.size[ku] > room {
                    continue;
                }
                self.diff[t - a] += i128::from(p.size[ku]);
                self.diff[e - a] -= i128::from(p.size[ku]);
                if self.reach[t - a] && h % p.align[ku] == 0 {
                    self.reach[e - a] = true;
                }
            }
        }
        if !self.reach[b - a] {
            return false;
        }
        let mut covered = 0i128;
        for t in 0..b - a {
            covered += self.diff[t];
            if covered < i128::from(need) {
                return false;
            }
        }
        true
    }

    /// The unplaced items that can cover the first section of valley
    /// `a..b` at height `h` (`from_left`), or its last one: they start
    /// (end) there, end (start) within it, fit below the top and are
    /// aligned at `h`; of interchangeable items only the first unplaced.
    fn candidates(&self, a: usize, b: usize, h: u64, from_left: bool) -> Candidates {
        let p = self.p;
        let list = if from_left {
            &self.by_start[a]
        } else {
            &self.by_end[b]
        };
        let room = self.top - h;
        list.iter()
            .copied()
            .filter(|&k| {
                let ku = k as usize;
                let inside = if from_left {
                    p.end[ku] as usize <= b
                } else {
                    p.start[ku] as usize >= a
                };
                let twin = p.twin_prev[ku];
                self.offsets[ku] == UNPLACED
                    && inside
                    && p.size[ku] <= room
                    && h % p.align[ku] == 0
                    && (twin == NO_TWIN || self.offsets[twin as usize] != UNPLACED)
            })
            .collect()
    }

    fn apply(&mut self, k: u32, at: u64) {
        let ku = k as usize;
        let size = self.p.size[ku];
        for s in self.p.start[ku] as usize..self.p.end[ku] as usize {
            let old = self.sky[s];
            self.sky[s] = old + size;
            self.hash ^= cell(s, old) ^ cell(s, old + size);
        }
        self.offsets[ku] = at;
        self.hash ^= self.item_hash[ku];
        self.left -= 1;
        self.recent = Some((self.p.start[ku] as usize, self.p.end[ku] as usize));
    }

    fn undo(&mut self, k: u32, at: u64) {
        let ku = k as usize;
        let size = self.p.size[ku];
        for s in self.p.start[ku] as usize..self.p.end[ku] as usize {
            let old = self.sky[s];
            self.sky[s] = old - size;
            self.hash ^= cell(s, old) ^ cell(s, old - size);
        }
        debug_assert_eq!(self.offsets[ku], at);
        self.offsets[ku] = UNPLACED;
        self.hash ^= self.item_hash[ku];
        self.left += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::{Valley, ValleyMemo, luby, restarts};
    use crate::csv::CsvProblem;
    use crate::exact::ExactBudget;
    use crate::exact::prepare::Prepared;
    use crate::exact::search::Step;
    use crate::generate::{near_zero_slack_grid, zero_slack_grid};

    /// One run on `problem` at `capacity` with the given branching rule:
    /// how it ended and the placement in the problem's buffer order, or
    /// `None` if the search does not apply.
    fn run(problem: &CsvProblem, capacity: u64, local: bool) -> Option<(Step, Vec<u64>)> {
        let arena = problem.arena(capacity);
        let p = Prepared::new(&arena)?;
        let budget = ExactBudget {
            max_nodes: 100_000,
            deadline: None,
            stop: None,
        };
        let mut memo = ValleyMemo::new();
        let mut v = Valley::new(&arena, &p, &budget, local, &mut memo)?;
        let step = v.run();
        let mut offsets = vec![0u64; problem.buffers.len()];
        for (k, &id) in p.ids.iter().enumerate() {
            offsets[id as usize] = v.offsets[k];
        }
        Some((step, offsets))
    }

    #[test]
    fn guillotine_cuts_are_placed_and_pass_the_checker() {
        for seed in 0..8 {
            let (problem, _) = zero_slack_grid(seed, 120, 1 << 20, 1 << 20, 1024);
            for local in [false, true] {
                let (step, offsets) = run(&problem, 1 << 20, local).expect("applies");
                assert_eq!(step, Step::Found, "seed {seed}, local {local}");
                problem.check(1 << 20, &offsets).expect("checked placement");
            }
        }
    }

    #[test]
    fn restarts_place_larger_cuts_and_follow_the_luby_sequence() {
        let firsts: Vec<u64> = (1..=15).map(luby).collect();
        assert_eq!(firsts, [1, 1, 2, 1, 1, 2, 4, 1, 1, 2, 1, 1, 2, 4, 8]);
        let (problem, _) = zero_slack_grid(1003, 350, 1 << 20, 1 << 20, 1024);
        let arena = problem.arena(1 << 20);
        let p = Prepared::new(&arena).expect("prepared");
        let budget = ExactBudget {
            max_nodes: 200_000,
            deadline: None,
            stop: None,
        };
        let mut memo = ValleyMemo::new();
        let r = restarts(&arena, &p, &budget, false, &mut memo, 0).expect("applies");
        assert_eq!(r.step, Step::Found);
        assert!(r.nodes <= budget.max_nodes);
        let mut offsets = vec![0u64; problem.buffers.len()];
        for (k, &id) in p.ids.iter().enumerate() {
            offsets[id as usize] = r.offsets[k];
        }
        problem.check(1 << 20, &offsets).expect("checked placement");
    }

    #[test]
    fn the_portfolio_answers_alike_on_one_thread_and_two() {
        use crate::exact::{ExactOutcome, solve_exact_deep, solve_exact_parallel};
        let (problem, _) = zero_slack_grid(4002, 300, 1 << 20, 1 << 20, 1024);
        let arena = problem.arena(1 << 20);
        let budget = || ExactBudget {
            max_nodes: 2_000_000,
            deadline: None,
            stop: None,
        };
        let one = solve_exact_deep(&arena, budget());
        let two = solve_exact_parallel(&arena, budget());
        match (one.outcome, two.outcome) {
            (ExactOutcome::Found(a), ExactOutcome::Found(b)) => {
                assert_eq!(a, b);
                problem.check(1 << 20, &a).expect("checked placement");
            }
            other => panic!("expected two placements, got {other:?}"),
        }
    }

    #[test]
    fn a_conflict_without_slack_is_proved_and_slack_is_declined() {
        // Two 2-byte buffers aligned to 4 in 4 bytes: both need address 0.
        let problem = CsvProblem::parse("a,0,2,2,4\nb,0,2,2,4\n").expect("parse");
        for local in [false, true] {
            let (step, _) = run(&problem, 4, local).expect("applies");
            assert_eq!(step, Step::Fail);
        }
        // Full sections where order matters: `e` (2 bytes, step 2) needs
        // `a` (1 byte, steps 0-2) at an edge.
        let split =
            CsvProblem::parse("a,0,3,1\nb,0,1,1\nc,0,2,1\nd,1,2,1\ne,2,3,2\n").expect("parse");
        let (step, offsets) = run(&split, 3, false).expect("applies");
        assert_eq!(step, Step::Found);
        split.check(3, &offsets).expect("checked placement");
        // With slack the argument fails: the search does not apply.
        let (near, _) = near_zero_slack_grid(3, 60, 1 << 16, 1 << 16, 256, 5);
        assert!(run(&near, 1 << 16, false).is_none());
        // A section holding less than the window (here: 3 of 4 bytes).
        assert!(run(&split, 4, false).is_none());
    }
}
