//! A third exact search for the portfolio: *valley-local* placement, for
//! arenas with no slack in any section and, with holes (`holes.rs`), for
//! those with slack in some.
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
//! restarts ([`restarts`]), one sequence per entry across its rounds. A
//! node costs about 2 µs on 1000 buffers (gcut-n1000: 4 M nodes of its
//! restarts in 8.7 s on one thread, the region memo's upkeep included):
//! only the valleys around the last placement are tested again.
//!
//! Children are tried by fit: first the items whose top meets a wall of
//! the valley (the pieces of a cut leave the skyline flat), then those
//! that span it, largest first in the first run and shuffled within each
//! group in the restarts (shuffling across groups threw the order away).
//!
//! A failure carries the sections it depends on, so that a node whose
//! child failed for reasons elsewhere fails at once (conflict-directed
//! backjumping, `reasons.rs`).
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
//! | gcut-n1000 | unknown at 10 s               | unknown at 10 s (~2 M; see below) |
//! | bcut-n1000 | fits, 707 ms                  | fits, 667 ms (2,006)         |
//!
//! gcut-n1000 stayed out of reach until the edge reasons of `reasons.rs`:
//! alone, with either rule and in either time direction, 16 M nodes of
//! Luby restarts did not place it. Neither did a search from both sides,
//! placing items under a ceiling skyline as well as on the floor and
//! branching on the edge with the fewest candidates of either: its runs
//! stalled where the floor-only runs did (the deepest of them with 278
//! items left), at four times the cost a node. With the witness's items
//! below 384 KiB fixed (251 of them) the search placed the rest in
//! 160,000 nodes; below 320 KiB (202) it did not within 2 M: what
//! defeated it was a band in the middle of the cut, not the first
//! choices.
//!
//! A failure is also remembered by the state of the sections it depends
//! on alone (`learn.rs`), so it is found again under any arrangement of
//! the rest, after a restart as well. Measured with `cargo xtask alloc
//! bench --timeout 10` and `--class guillotine --sizes 600,700,800 --seeds
//! 4 --timeout 6`: gnear-n600 from 308 to 152 ms (35,805 to 4,161
//! nodes), gcut-n700-s2 from 1.37 s to 0.28 s, gcut-n800-s3 still
//! unknown at 6 s and the 1000-buffer cuts at 10 s; the rest within the
//! noise. On gcut-n1000 a fifth of the nodes then end in a remembered
//! region, and it stayed unknown: what defeated the search there was not
//! failures found twice but failures blamed on too much.
//!
//! Near-zero-slack arenas have sections with slack, where the argument
//! above does not hold as it stands: an edge's byte may be empty. There
//! the search makes holes (`holes.rs`). Measured with `cargo xtask alloc
//! bench --timeout 10` and `--class guillotine-near --sizes 150,300
//! --timeout 120`: gnear-n300 was unknown after 120 s (29.7 M nodes) and
//! then fitted in 37 s; at 10 s every class kept its verdicts, and the
//! instances that fit took at most 130 ms more (ivl-n1000: 758 to 885
//! ms). Alone, the valley search with holes placed gnear-n300 in 0.7 to
//! 1.3 M nodes (about a second) in two of its four configurations, but
//! the portfolio began its Luby sequence again at every round, so it ran
//! the short terms over and over. Continued across the rounds, it places
//! gnear-n300 in 3.7 s, and in 2.0 s with items kept off holes
//! (`holes.rs`); gnear-n600 and -n1000 stayed unknown at 10 s (the first
//! is placed now, on the coalesced copy, `coalesce.rs`).
//!
//! The fit order and the backjumping, measured with `cargo xtask alloc
//! bench --class guillotine --sizes 700,800 --seeds 6 --timeout 6` (draws
//! then seeded by their place in `--sizes`): 5 of
//! the 12 cuts placed before, 10 after (gcut-n800-s2: unknown at 6 s, then
//! 4.0 s; gcut-n700-s4: unknown, then 1.4 s). The 1000-buffer cuts stay
//! unknown at 10 s.
//!
//! It runs on arenas whose free items share one window interval, without
//! separation partners, where each section's fixed items form one block
//! at the window's start (lifelong items stacked by `stack.rs`), and where
//! no section's live bytes exceed the window; the search is then
//! complete, so an exhausted run proves that no placement exists.
//! Placements are checked by the caller like any other.

use std::collections::HashMap;

use smallvec::SmallVec;

use ipu_layout::rng::SplitMix64;

use super::ExactBudget;
use super::prepare::{MAX_ADJACENCY, NO_TWIN, Prepared};
use super::search::Step;
use crate::arena::Arena;
use crate::greedy::UNPLACED;
use holes::HOLE;
use learn::Regions;
use reasons::{Reason, Sections, valley_region};

/// Failed states remembered at most (24 bytes each, plus table overhead).
const FAILED_LIMIT: usize = 1 << 21;

/// Failed states (skyline and unplaced set digests) with the sections
/// their failure depends on, shared by every run on the same arena: a
/// failure is a fact about the state.
pub(super) type ValleyMemo = HashMap<u128, Reason>;

/// The valley edge a node branches on.
struct Edge {
    /// The valley's height.
    level: u64,
    /// The valley's sections.
    valley: (usize, usize),
    /// The edge is the valley's first section (else its last).
    from_left: bool,
}

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

/// The digest of `depth` bytes of hole just below section `s`'s skyline
/// (none for no hole, so that arenas without slack hash as before).
fn hole_cell(s: usize, depth: u64) -> u128 {
    if depth == 0 {
        0
    } else {
        mix((s as u128) << 64 | u128::from(depth) ^ 0x401e_5eed)
    }
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
/// the item count), from its term `*next` on, and leaves in `*next` the
/// term the next call starts at: the one this call cut short, or the one
/// after its last. So a portfolio that calls it round after round with
/// growing budgets runs one Luby sequence, and its long runs come, where
/// a sequence begun again each round would repeat the short ones. The
/// first run (term 1 with a `seed` of 0) is in the fixed order, the others
/// with children shuffled from `seed`; they share `failed`. Heavy tails
/// are the rule here: one order places a cut in a few hundred nodes where
/// another thrashes for millions. Any restart that exhausts its tree is a
/// proof. `None` when the search does not apply.
pub(super) fn restarts(
    arena: &Arena,
    p: &Prepared,
    budget: &ExactBudget,
    local: bool,
    failed: &mut ValleyMemo,
    (seed, next): (u64, &mut u64),
) -> Option<Restarts> {
    let unit = (p.ids.len() as u64).saturating_mul(4).max(1024);
    let mut nodes = 0u64;
    for i in (*next).max(1).. {
        let left = budget.max_nodes.saturating_sub(nodes);
        let full = luby(i).saturating_mul(unit);
        let run_budget = ExactBudget {
            max_nodes: full.min(left),
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
            let cut_short = out_of_budget && run_budget.max_nodes < full;
            *next = if cut_short { i } else { i + 1 };
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
    /// Top of the decided part of each section: below it every byte is
    /// an item's or a hole's.
    sky: Vec<u64>,
    /// Bytes each section may still leave empty (its room less its live
    /// bytes, less the holes made so far).
    slack: Vec<u64>,
    /// Bytes of hole just below each section's skyline (0 where an item,
    /// a fixed block or the window's start is there): an item placed on
    /// holes alone could move down, so the search does not place it there
    /// (`holes.rs`). Empty where no section has slack: no hole is made.
    hole_below: Vec<u64>,
    /// `hole_below` of the sections each placed item covers, as they were
    /// before it (a stack, in placement order).
    saved_holes: Vec<u64>,
    /// One past the highest address an item may use.
    top: u64,
    /// Free items by first section and by end section, largest first.
    by_start: Vec<Vec<u32>>,
    by_end: Vec<Vec<u32>>,
    /// Free items by the sections they cover, where any section has slack
    /// (what a hole's bound reads) and the lists hold at most
    /// [`MAX_ADJACENCY`] entries; empty otherwise.
    covering: Vec<Vec<u32>>,
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
    /// The sections the last failure depends on.
    reason: Sections,
    /// The state's digest by region (`learn.rs`).
    regions: Regions,
}

impl<'a> Valley<'a> {
    /// A run on `p` (prepared from `arena`), or `None` when the search does
    /// not apply: several windows, partners, fixed items other than a block
    /// at the window's start, or a section whose live bytes exceed the
    /// window (no placement; the other searches prove it).
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
        let slack = live
            .iter()
            .map(|&l| room.checked_sub(l))
            .collect::<Option<Vec<u64>>>()?;
        let mut by_start = vec![Vec::new(); p.sections];
        let mut by_end = vec![Vec::new(); p.sections + 1];
        let mut order: Vec<u32> = (0..m as u32).collect();
        order.sort_by_key(|&k| (std::cmp::Reverse(p.size[k as usize]), k));
        let mut covering = Vec::new();
        let entries = (0..m)
            .map(|k| u64::from(p.end[k] - p.start[k]))
            .sum::<u64>();
        if slack.iter().any(|&s| s > 0) && entries <= MAX_ADJACENCY as u64 {
            covering = vec![Vec::new(); p.sections];
            for k in 0..m {
                for list in &mut covering[p.start[k] as usize..p.end[k] as usize] {
                    list.push(k as u32);
                }
            }
        }
        for &k in &order {
            by_start[p.start[k as usize] as usize].push(k);
            by_end[p.end[k as usize] as usize].push(k);
        }
        let item_hash: Vec<u128> = (0..m as u128).map(|k| mix(k ^ 0xa11e)).collect();
        let mut regions = Regions::new(p.sections);
        for (s, &h) in sky.iter().enumerate() {
            regions.section(s, cell(s, h));
        }
        for (k, &h) in item_hash.iter().enumerate() {
            regions.item(h, p.start[k] as usize, p.end[k] as usize);
        }
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
            hole_below: if slack.iter().any(|&s| s > 0) {
                vec![0; slack.len()]
            } else {
                Vec::new()
            },
            saved_holes: Vec::new(),
            slack,
            top: w1,
            by_start,
            by_end,
            covering,
            item_hash,
            hash,
            left: m,
            rng: None,
            recent: None,
            reach: Vec::new(),
            diff: Vec::new(),
            reason: Sections::default(),
            regions,
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

    /// One node. On `Fail`, `self.reason` holds the sections the failure
    /// depends on.
    fn dfs(&mut self) -> Step {
        if self.left == 0 {
            return Step::Found;
        }
        if !self.tick() {
            return Step::Stop;
        }
        if let Some(&why) = self.failed.get(&self.hash) {
            self.reason = Sections::range(self.sky.len(), why);
            return Step::Fail;
        }
        if let Some(why) = self.failed_region() {
            self.reason = Sections::range(self.sky.len(), why);
            return Step::Fail;
        }
        let result = match self.branch() {
            Err(why) => {
                self.reason = Sections::range(self.sky.len(), why);
                Step::Fail
            }
            Ok((edge, mut children)) => {
                if let Some(rng) = self.rng.as_mut() {
                    for j in (1..children.len()).rev() {
                        children.swap(j, rng.below(j as u64 + 1) as usize);
                    }
                }
                // Shuffled or largest first, then stably by fit; the hole
                // last.
                children.sort_by_key(|&k| self.fit_rank(&edge, k));
                self.try_children(&edge, &children)
            }
        };
        if result == Step::Fail {
            if self.failed.len() >= FAILED_LIMIT {
                self.failed.clear();
            }
            let why = self.reason.hull();
            self.failed.insert(self.hash, why);
            self.remember_region(why);
        }
        result
    }

    /// Tries the children of `edge`: its items, and [`HOLE`] for a hole.
    /// A child's failure that depends on no section the child covers
    /// holds in this node's state too: the node fails at once (the other
    /// children would change nothing it depends on). Otherwise the node's
    /// failure depends on its edge's sections and its children's.
    fn try_children(&mut self, edge: &Edge, children: &[u32]) -> Step {
        let level = edge.level;
        let region = self.edge_reason(edge);
        // Built at the first failed child: most nodes never need it.
        let mut why: Option<Sections> = None;
        for &k in children {
            // A hole: its section and where it ends; an item: its sections.
            let (hole, (s0, s1)) = if k == HOLE {
                let s = edge.section();
                let Some(top) = self.hole_top(edge) else {
                    continue;
                };
                (Some((s, top)), (s, s + 1))
            } else {
                let ku = k as usize;
                (None, (self.p.start[ku] as usize, self.p.end[ku] as usize))
            };
            match hole {
                Some((s, top)) => self.open_hole(s, level, top),
                None => self.apply(k, level),
            }
            let r = self.dfs();
            if r == Step::Found {
                return r;
            }
            match hole {
                Some((s, top)) => self.close_hole(s, level, top),
                None => self.undo(k, level),
            }
            if r == Step::Stop {
                return r;
            }
            if !self.reason.meets(s0, s1) {
                return Step::Fail;
            }
            why.get_or_insert_with(|| Sections::range(self.sky.len(), region))
                .union(&self.reason);
        }
        self.reason = why.unwrap_or_else(|| Sections::range(self.sky.len(), region));
        Step::Fail
    }

    /// The valley edge to branch on: its height, its valley's sections
    /// with the walls, and its candidates, the fewest of any edge (leftmost
    /// on ties); `Err` with the sections of a valley that cannot be filled.
    fn branch(&mut self) -> Result<(Edge, Candidates), Reason> {
        let sections = self.sky.len();
        let mut best: Option<(Edge, Candidates)> = None;
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
                let region = valley_region((a, b), sections);
                if near && !self.valley_ok(a, b, h) {
                    return Err(region);
                }
                for from_left in [true, false] {
                    let c = self.candidates(a, b, h, from_left);
                    if c.is_empty() {
                        let edge = Edge {
                            level: h,
                            valley: (a, b),
                            from_left,
                        };
                        return Err(self.edge_reason(&edge));
                    }
                    // A hole's bound is computed only for the edge chosen:
                    // `hole_top` reads the valley's items.
                    let better = match best.as_ref() {
                        None => true,
                        Some((_, old)) if self.local => c.len() <= 1 && old.len() > 1,
                        Some((_, old)) => c.len() < old.len(),
                    };
                    if better {
                        let edge = Edge {
                            level: h,
                            valley: (a, b),
                            from_left,
                        };
                        best = Some((edge, c));
                    }
                }
            }
            a = b;
        }
        best.ok_or((0, sections as u32))
    }

    /// How well child `k` fits `edge`, best first: an item before the
    /// hole, then an item whose top meets a wall (a cut's pieces leave the
    /// skyline flat), then one that spans the valley.
    fn fit_rank(&self, edge: &Edge, k: u32) -> (bool, bool, bool) {
        if k == HOLE {
            return (true, true, true);
        }
        let ku = k as usize;
        let (a, b) = edge.valley;
        let top = edge.level.saturating_add(self.p.size[ku]);
        let meets = |s: Option<usize>| s.is_some_and(|s| self.sky.get(s) == Some(&top));
        let flush = meets(a.checked_sub(1)) || meets(Some(b));
        let spans = if edge.from_left {
            self.p.end[ku] as usize == b
        } else {
            self.p.start[ku] as usize == a
        };
        (false, !flush, !spans)
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
            // A hole can leave the byte at `h` empty where the section
            // has slack.
            if self.reach[t - a] && self.slack[t] > 0 {
                self.reach[t + 1 - a] = true;
            }
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
            if covered + i128::from(self.slack[a + t]) < i128::from(need) {
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
        let edge_section = if from_left { a } else { b - 1 };
        let mut out: Candidates = list
            .iter()
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
                    && !self.floats(ku)
                    && (twin == NO_TWIN || self.offsets[twin as usize] != UNPLACED)
            })
            .collect();
        if self.slack[edge_section] > 0 {
            out.push(HOLE);
        }
        out
    }

    fn apply(&mut self, k: u32, at: u64) {
        let ku = k as usize;
        let size = self.p.size[ku];
        for s in self.p.start[ku] as usize..self.p.end[ku] as usize {
            let old = self.sky[s];
            self.sky[s] = old + size;
            let mut delta = cell(s, old) ^ cell(s, old + size);
            if let Some(slot) = self.hole_below.get_mut(s) {
                let below = std::mem::take(slot);
                delta ^= hole_cell(s, below);
                self.saved_holes.push(below);
            }
            self.hash ^= delta;
            self.regions.section(s, delta);
        }
        self.offsets[ku] = at;
        self.hash ^= self.item_hash[ku];
        let (s0, s1) = (self.p.start[ku] as usize, self.p.end[ku] as usize);
        self.regions.item(self.item_hash[ku], s0, s1);
        self.left -= 1;
        self.recent = Some((self.p.start[ku] as usize, self.p.end[ku] as usize));
    }

    fn undo(&mut self, k: u32, at: u64) {
        let ku = k as usize;
        let size = self.p.size[ku];
        for s in (self.p.start[ku] as usize..self.p.end[ku] as usize).rev() {
            let old = self.sky[s];
            self.sky[s] = old - size;
            let mut delta = cell(s, old) ^ cell(s, old - size);
            if let Some(slot) = self.hole_below.get_mut(s) {
                let below = self.saved_holes.pop().unwrap_or(0);
                *slot = below;
                delta ^= hole_cell(s, below);
            }
            self.hash ^= delta;
            self.regions.section(s, delta);
        }
        debug_assert_eq!(self.offsets[ku], at);
        self.offsets[ku] = UNPLACED;
        self.hash ^= self.item_hash[ku];
        let (s0, s1) = (self.p.start[ku] as usize, self.p.end[ku] as usize);
        self.regions.item(self.item_hash[ku], s0, s1);
        self.left += 1;
    }
}

mod holes;
mod learn;
mod reasons;
#[cfg(test)]
mod tests;
