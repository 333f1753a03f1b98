//! Exact search: finds a placement inside the arena's windows or proves that
//! none exists, within a node budget.
//!
//! The search builds *canonical* placements. Any feasible placement can be
//! pushed down until every item sits at the lowest feasible address given the
//! items below it; sorted by `(address, start section, index)`, each item of
//! such a placement is then at the lowest feasible address at or above every
//! item before it. So the search places items one at a time in that order,
//! each at the lowest feasible address above the current skyline of the
//! sections it lives in and not below the previous item's address. Every
//! canonical placement is reached by exactly one path.
//!
//! Pruning, all of it sound:
//! - *Section bound.* Items still to place lie at or above the last address
//!   `L`, so in every section the bytes still to place must fit in the free
//!   (unreserved, allowed) bytes above `max(skyline, L)`.
//! - *Forced lowest point.* Let `H` be the lowest level `max(skyline, L)` of
//!   any section with work left. If some section at level `H` has no slack,
//!   the byte at `H` there must be the bottom of an item, so the next item in
//!   canonical order sits at `H` and starts no later than that section. In a
//!   zero-slack instance this makes the search branch only on which item
//!   fills the lowest, leftmost point of the skyline.
//! - *Twins.* Interchangeable items (same lifetime, size, alignment, windows,
//!   no partners) are placed in index order.
//! - An item that cannot be placed at all given the current state can never
//!   be placed later (addresses only rise), so the node fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use smallvec::SmallVec;

use crate::arena::{Arena, TimeIndex, align_up, for_each_gap, merge_intervals};
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

/// The outcome and the number of nodes visited.
#[derive(Debug)]
pub(crate) struct ExactReport {
    pub outcome: ExactOutcome,
    pub nodes: u64,
}

enum Step {
    Found,
    Fail,
    Stop,
}

struct Search<'a> {
    arena: &'a Arena,
    placed: usize,
    offsets: Vec<u64>,
    statics: Vec<Vec<(u64, u64)>>,
    blocked: Vec<Vec<(u64, u64)>>,
    blocked_suffix: Vec<Vec<u64>>,
    sky: Vec<u64>,
    rem: Vec<u64>,
    by_start: Vec<Vec<u32>>,
    free_items: Vec<u32>,
    twin_prev: Vec<u32>,
    last_offset: u64,
    last_key: Option<(u32, u32)>,
    nodes: u64,
    budget: ExactBudget,
    trail: Vec<(u32, u64)>,
    pool: Vec<Vec<Candidate>>,
    scratch: Vec<(u64, u64)>,
    level: Vec<u64>,
    run_of: Vec<u32>,
    runs: Vec<(usize, usize, u64, u64)>,
    contained: Vec<u64>,
    memo_enabled: bool,
    tight_list: Vec<u32>,
    count: Vec<u32>,
    heuristic: u8,
    fewest: bool,
    order_buf: Vec<(u64, u32)>,
    tops: Vec<u64>,
    split_enabled: bool,
    crosses: Vec<u32>,
    history: Vec<Placed>,
    failed: std::collections::HashSet<u128>,
    remaining_hash: u128,
    item_hash: Vec<u128>,
}

/// Failed states remembered at most (16 bytes each, plus table overhead).
const MEMO_LIMIT: usize = 1 << 21;

/// A bijective 128-bit mixer (multiply and xor-shift rounds).
fn mix128(mut x: u128) -> u128 {
    x ^= x >> 67;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
    x ^= x >> 61;
    x = x.wrapping_mul(0xd6e8_feb8_6659_fd93_2545_f491_4f6c_dd1d);
    x ^ (x >> 64)
}

const NO_TWIN: u32 = u32::MAX;

/// A child of a search node: `(address, three rank keys, item)`, tried in
/// ascending order.
type Candidate = (u64, u64, u64, u64, u32);

/// A placement on the undo stack: `(item, previous last address, previous
/// last key)`.
type Placed = (u32, u64, Option<(u32, u32)>);

/// Runs the exact search on `arena` within `budget`.
pub(crate) fn solve_exact(arena: &Arena, budget: ExactBudget) -> ExactReport {
    // A portfolio with restarts: the same complete search on the problem
    // and on its time-reversed copy, with several child orders, each run
    // with a growing node budget. Zero-slack instances are often easy in
    // one orientation or order and hard in another; any run that finishes
    // is conclusive.
    portfolio(&[arena.clone(), flip_time(arena)], &budget)
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
            Ok(handle) => handle.join().unwrap_or(ExactReport {
                outcome: ExactOutcome::Unknown,
                nodes: 0,
            }),
            Err(_) => ExactReport {
                outcome: ExactOutcome::Unknown,
                nodes: 0,
            },
        }
    })
}

/// [`solve_exact`] with the two orientations on two threads (each with a
/// deep stack); the first conclusive answer stops the other. Which answer
/// wins depends on timing, so this is for interactive tools, never for
/// tile placement.
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
    let run = |variant: Arena| {
        let report = portfolio(&[variant], &half);
        if !matches!(report.outcome, ExactOutcome::Unknown) {
            stop.store(true, Ordering::Relaxed);
        }
        report
    };
    let unknown = || ExactReport {
        outcome: ExactOutcome::Unknown,
        nodes: 0,
    };
    let (a, b) = std::thread::scope(|scope| {
        let spawn = |variant: Arena| {
            let run = &run;
            std::thread::Builder::new()
                .stack_size(SEARCH_STACK_BYTES)
                .spawn_scoped(scope, move || run(variant))
        };
        let first = spawn(arena.clone());
        let second = spawn(flip_time(arena));
        let join = |h: std::io::Result<std::thread::ScopedJoinHandle<'_, ExactReport>>| match h {
            Ok(h) => h.join().unwrap_or_else(|_| unknown()),
            Err(_) => unknown(),
        };
        (join(first), join(second))
    });
    let nodes = a.nodes + b.nodes;
    let outcome = match (a.outcome, b.outcome) {
        (ExactOutcome::Unknown, other) | (other, _) => other,
    };
    ExactReport { outcome, nodes }
}

fn portfolio(variants: &[Arena], budget: &ExactBudget) -> ExactReport {
    let mut total = 0u64;
    let mut round = 2048u64;
    loop {
        for (heuristic, fewest) in HEURISTICS {
            for variant in variants {
                let left = budget.max_nodes.saturating_sub(total);
                let stopped = budget
                    .stop
                    .as_ref()
                    .is_some_and(|s| s.load(Ordering::Relaxed));
                if left == 0 || stopped || budget.deadline.is_some_and(|d| Instant::now() >= d) {
                    return ExactReport {
                        outcome: ExactOutcome::Unknown,
                        nodes: total,
                    };
                }
                let run = ExactBudget {
                    max_nodes: round.min(left),
                    deadline: budget.deadline,
                    stop: budget.stop.clone(),
                };
                let report = solve_once(variant, run, heuristic, fewest);
                total += report.nodes;
                match report.outcome {
                    ExactOutcome::Found(offsets) => {
                        return ExactReport {
                            outcome: ExactOutcome::Found(offsets),
                            nodes: total,
                        };
                    }
                    ExactOutcome::Infeasible => {
                        return ExactReport {
                            outcome: ExactOutcome::Infeasible,
                            nodes: total,
                        };
                    }
                    ExactOutcome::Unknown => {}
                }
            }
        }
        round = round.saturating_mul(4);
    }
}

/// Child orders and forced-point rules tried by the portfolio, best first
/// on zero-slack instances: (order, branch on the forced point with the
/// fewest candidates rather than the leftmost). Orders: 2 flush then
/// largest, 1 largest, 0 longest, 3 flush then longest.
const HEURISTICS: [(u8, bool); 6] = [
    (2, false),
    (2, true),
    (1, false),
    (1, true),
    (0, false),
    (3, true),
];

/// The same problem with time reversed.
fn flip_time(arena: &Arena) -> Arena {
    let mut out = arena.clone();
    let s = arena.sections;
    for it in &mut out.items {
        if it.live() {
            let (a, b) = (s - it.end, s - it.start);
            it.start = a;
            it.end = b;
        }
    }
    out
}

fn solve_once(arena: &Arena, budget: ExactBudget, heuristic: u8, fewest: bool) -> ExactReport {
    let n = arena.items.len();
    let sections = arena.sections as usize;
    let mut offsets = vec![UNPLACED; n];
    let mut free_items = Vec::new();
    let mut trivial = Vec::new();
    for (i, it) in arena.items.iter().enumerate() {
        match it.fixed {
            Some(a) => offsets[i] = a,
            None if it.live() && it.size > 0 => free_items.push(i as u32),
            None => trivial.push(i as u32),
        }
    }
    let index = TimeIndex::new(&arena.items);
    let mut statics = vec![Vec::new(); n];
    let mut hits = Vec::new();
    for &i in &free_items {
        let it = &arena.items[i as usize];
        hits.clear();
        index.query(it.start, it.end, &mut hits);
        let mut list: Vec<(u64, u64)> = hits
            .iter()
            .filter_map(|&q| {
                let o = arena.items[q as usize].fixed?;
                Some((o, o.saturating_add(arena.items[q as usize].size)))
            })
            .collect();
        merge_intervals(&mut list);
        statics[i as usize] = list;
    }
    // Bytes no free item may use: outside the union of their windows, or
    // under a fixed item live in the section.
    let mut allowed: Vec<(u64, u64)> = Vec::new();
    let mut seen_sets = vec![false; arena.window_sets.len()];
    for &i in &free_items {
        let w = arena.items[i as usize].windows as usize;
        if !seen_sets[w] {
            seen_sets[w] = true;
            allowed.extend(arena.window_sets[w].iter().copied());
        }
    }
    merge_intervals(&mut allowed);
    let mut outside = Vec::new();
    let mut cur = arena.base;
    for &(a, b) in &allowed {
        if a > cur {
            outside.push((cur, a.min(arena.limit)));
        }
        cur = cur.max(b);
    }
    if cur < arena.limit {
        outside.push((cur, arena.limit));
    }
    let mut blocked = vec![outside.clone(); sections];
    for it in &arena.items {
        if let (Some(o), true) = (it.fixed, it.live()) {
            for s in it.start..it.end {
                blocked[s as usize].push((o, o.saturating_add(it.size)));
            }
        }
    }
    let mut blocked_suffix = Vec::with_capacity(sections);
    for list in &mut blocked {
        merge_intervals(list);
        let mut suffix = vec![0u64; list.len() + 1];
        for k in (0..list.len()).rev() {
            let (a, b) = list[k];
            let len = b.min(arena.limit).saturating_sub(a.max(arena.base));
            suffix[k] = suffix[k + 1].saturating_add(len);
        }
        blocked_suffix.push(suffix);
    }
    let mut rem = vec![0u64; sections];
    let mut by_start = vec![Vec::new(); sections];
    for &i in &free_items {
        let it = &arena.items[i as usize];
        for s in it.start..it.end {
            rem[s as usize] = rem[s as usize].saturating_add(it.size);
        }
        by_start[it.start as usize].push(i);
    }
    let mut twin_prev = vec![NO_TWIN; n];
    let mut keyed: Vec<u32> = free_items
        .iter()
        .copied()
        .filter(|&i| arena.items[i as usize].partners.is_empty())
        .collect();
    let key = |i: u32| {
        let it = &arena.items[i as usize];
        (it.start, it.end, it.size, it.align, it.windows)
    };
    keyed.sort_by_key(|&i| (key(i), i));
    for w in keyed.windows(2) {
        if key(w[0]) == key(w[1]) {
            twin_prev[w[1] as usize] = w[0];
        }
    }
    let mut search = Search {
        arena,
        placed: 0,
        offsets,
        statics,
        blocked,
        blocked_suffix,
        sky: vec![arena.base; sections],
        rem,
        by_start,
        free_items,
        twin_prev,
        last_offset: arena.base,
        last_key: None,
        nodes: 0,
        budget,
        trail: Vec::new(),
        pool: Vec::new(),
        scratch: Vec::new(),
        level: Vec::new(),
        run_of: Vec::new(),
        runs: Vec::new(),
        contained: Vec::new(),
        memo_enabled: arena.items.iter().all(|it| it.partners.is_empty()),
        split_enabled: arena.items.iter().all(|it| it.partners.is_empty()),
        crosses: vec![0; sections + 1],
        history: Vec::new(),
        tight_list: Vec::new(),
        count: vec![0; sections],
        heuristic,
        fewest,
        order_buf: Vec::new(),
        tops: vec![0; sections],
        failed: std::collections::HashSet::new(),
        remaining_hash: 0,
        item_hash: (0..n as u128)
            .map(|i| mix128(i.wrapping_add(0x5151)))
            .collect(),
    };
    for k in 0..search.free_items.len() {
        let b = search.free_items[k] as usize;
        search.remaining_hash ^= search.item_hash[b];
        let it = &arena.items[b];
        for s in it.start + 1..it.end {
            search.crosses[s as usize] += 1;
        }
    }
    let step = search.dfs(0, 0, sections);
    let nodes = search.nodes;
    let outcome = match step {
        Step::Found => {
            let mut offsets = search.offsets;
            if place_trivial(arena, &trivial, &mut offsets) {
                ExactOutcome::Found(offsets)
            } else {
                ExactOutcome::Unknown
            }
        }
        Step::Fail => ExactOutcome::Infeasible,
        Step::Stop => ExactOutcome::Unknown,
    };
    ExactReport { outcome, nodes }
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

impl Search<'_> {
    fn free_above(&self, s: usize, x: u64) -> u64 {
        let limit = self.arena.limit;
        if x >= limit {
            return 0;
        }
        let list = &self.blocked[s];
        let k = list.partition_point(|iv| iv.1 <= x);
        let blocked = if k < list.len() {
            let (a, b) = list[k];
            b.min(limit).saturating_sub(a.max(x)) + self.blocked_suffix[s][k + 1]
        } else {
            0
        };
        (limit - x).saturating_sub(blocked)
    }

    fn blocked_at(&self, s: usize, x: u64) -> bool {
        let list = &self.blocked[s];
        let k = list.partition_point(|iv| iv.1 <= x);
        k < list.len() && list[k].0 <= x
    }

    /// The lowest feasible address at or above `floor` for item `b`.
    fn position(&mut self, b: u32, floor: u64) -> Option<u64> {
        let arena = self.arena;
        let it = &arena.items[b as usize];
        let windows = &arena.window_sets[it.windows as usize];
        let mut use_scratch = false;
        for &p in &it.partners {
            let o = self.offsets[p as usize];
            if o != UNPLACED {
                if !use_scratch {
                    self.scratch.clear();
                    self.scratch.extend_from_slice(&self.statics[b as usize]);
                    use_scratch = true;
                }
                if let Some(span) = arena.element_span(o, arena.items[p as usize].size) {
                    self.scratch.push(span);
                }
            }
        }
        if use_scratch {
            merge_intervals(&mut self.scratch);
        }
        let obstacles = if use_scratch {
            &self.scratch
        } else {
            &self.statics[b as usize]
        };
        let mut found = None;
        for_each_gap(windows, obstacles, |g0, g1| {
            if g1 <= floor {
                return true;
            }
            match align_up(g0.max(floor), it.align) {
                Some(a) if a.checked_add(it.size).is_some_and(|e| e <= g1) => {
                    found = Some(a);
                    false
                }
                _ => true,
            }
        });
        found
    }

    fn floor_of(&self, b: u32, cap: u64) -> u64 {
        let it = &self.arena.items[b as usize];
        let mut f = self.last_offset;
        for s in it.start..it.end {
            f = f.max(self.sky[s as usize]);
            if f > cap {
                break;
            }
        }
        f
    }

    fn tick(&mut self) -> bool {
        self.nodes += 1;
        if self.nodes > self.budget.max_nodes {
            return false;
        }
        if self.nodes % 1024 == 0 {
            if let Some(d) = self.budget.deadline {
                if Instant::now() >= d {
                    return false;
                }
            }
            if let Some(stop) = &self.budget.stop {
                if stop.load(Ordering::Relaxed) {
                    return false;
                }
            }
        }
        true
    }

    /// Places every item still to place whose lifetime lies in sections
    /// `lo..hi`. On `Found` the placements stay applied; otherwise the
    /// state is as on entry.
    fn dfs(&mut self, depth: usize, lo: usize, hi: usize) -> Step {
        if (lo..hi).all(|s| self.rem[s] == 0) {
            return Step::Found;
        }
        if !self.tick() {
            return Step::Stop;
        }
        // Independent parts: where no item still to place crosses a section
        // boundary, the two sides share nothing and are solved one after the
        // other. A failure in a later part is final: nothing in an earlier
        // part can change it, so the search does not revisit it.
        let mut parts: SmallVec<[(usize, usize); 8]> = SmallVec::new();
        let mut open: Option<(usize, usize)> = None;
        for s in lo..hi {
            if s > lo && self.crosses[s] == 0 {
                if let Some(p) = open.take() {
                    parts.push(p);
                }
            }
            if self.rem[s] > 0 {
                open = Some(open.map_or((s, s + 1), |(a, _)| (a, s + 1)));
            }
        }
        if let Some(p) = open {
            parts.push(p);
        }
        if parts.len() > 1 && self.split_enabled {
            let mark = self.history.len();
            let saved = (self.last_offset, self.last_key);
            for &(a, b) in &parts {
                self.last_offset = saved.0;
                self.last_key = saved.1;
                match self.dfs(depth + 1, a, b) {
                    Step::Found => {}
                    other => {
                        while self.history.len() > mark {
                            self.undo_last();
                        }
                        self.last_offset = saved.0;
                        self.last_key = saved.1;
                        return other;
                    }
                }
            }
            return Step::Found;
        }
        let (lo, hi) = match parts.as_slice() {
            [only] => *only,
            _ => (lo, hi),
        };
        let mut level = u64::MAX;
        let mut tight: Option<usize> = None;
        for s in lo..hi {
            let need = self.rem[s];
            if need == 0 {
                continue;
            }
            let h = self.sky[s].max(self.last_offset);
            let free = self.free_above(s, h);
            if need > free {
                return Step::Fail;
            }
            if h < level {
                level = h;
                tight = None;
                self.tight_list.clear();
            }
            if h == level && free == need && !self.blocked_at(s, h) {
                if tight.is_none() {
                    tight = Some(s);
                }
                self.tight_list.push(s as u32);
            }
        }
        let key = self.memo_enabled.then(|| self.state_key(level, lo, hi));
        if let Some(k) = key {
            if self.failed.contains(&k) {
                return Step::Fail;
            }
        }
        if !self.wells_ok(lo, hi) || !self.release_ok(lo, hi) {
            self.remember(key);
            return Step::Fail;
        }
        let mut cands = if depth < self.pool.len() {
            std::mem::take(&mut self.pool[depth])
        } else {
            Vec::new()
        };
        cands.clear();
        let forced = tight.is_some();
        let ok = match tight {
            Some(_) => self.forced_candidates(lo, hi, level, &mut cands),
            None => self.all_candidates(lo, hi, &mut cands),
        };
        let mut result = Step::Fail;
        if ok {
            cands.sort_unstable();
            for &(pos, _, _, _, b) in cands.iter() {
                self.apply(b, pos);
                if forced {
                    // The forced point fixes which item comes next without
                    // the canonical tie order, so later ties are unconstrained.
                    self.last_key = None;
                }
                match self.dfs(depth + 1, lo, hi) {
                    Step::Found => {
                        result = Step::Found;
                        break;
                    }
                    Step::Stop => {
                        self.undo_last();
                        result = Step::Stop;
                        break;
                    }
                    Step::Fail => self.undo_last(),
                }
            }
        }
        if depth >= self.pool.len() {
            self.pool.resize_with(depth + 1, Vec::new);
        }
        self.pool[depth] = cands;
        if matches!(result, Step::Fail) {
            self.remember(key);
        }
        result
    }

    /// A 128-bit digest of everything the rest of the search in sections
    /// `lo..hi` depends on: the level of every open section, the set of
    /// items left, and, when an item could still be placed at the last
    /// address, the last key.
    fn state_key(&self, level: u64, lo: usize, hi: usize) -> u128 {
        let mut h = mix128(self.remaining_hash ^ ((lo as u128) << 96 | (hi as u128) << 64));
        for s in lo..hi {
            let v = if self.rem[s] == 0 {
                u64::MAX
            } else {
                self.sky[s].max(self.last_offset)
            };
            h = mix128(h ^ u128::from(v) ^ ((s as u128) << 64));
        }
        if level == self.last_offset {
            if let Some((a, b)) = self.last_key {
                h = mix128(h ^ u128::from(self.last_offset));
                h = mix128(h ^ (u128::from(a) << 32 | u128::from(b) | 1 << 127));
            }
        }
        h
    }

    fn remember(&mut self, key: Option<u128>) {
        if let Some(k) = key {
            if self.failed.len() >= MEMO_LIMIT {
                self.failed.clear();
            }
            self.failed.insert(k);
        }
    }

    /// Bytes of section `s` in `[lo, hi)` that no free item may use.
    fn blocked_between(&self, s: usize, lo: u64, hi: u64) -> u64 {
        let list = &self.blocked[s];
        let mut k = list.partition_point(|iv| iv.1 <= lo);
        let mut total = 0u64;
        while k < list.len() && list[k].0 < hi {
            total += list[k].1.min(hi).saturating_sub(list[k].0.max(lo));
            k += 1;
        }
        total
    }

    /// The well check. Take a maximal run of open sections at one level `h`
    /// whose neighbours are higher (the lower neighbour at `n`). A byte of
    /// the run at a height in `[h, n)` can only be covered by an item whose
    /// whole lifetime lies inside the run: anything reaching a neighbour
    /// sits at or above `n`. So in every section of the run, the items
    /// contained in the run plus the section's slack must cover the
    /// unblocked bytes of `[h, n)`. Fails the node otherwise.
    fn wells_ok(&mut self, lo: usize, hi: usize) -> bool {
        let sections = self.sky.len();
        let limit = self.arena.limit;
        self.level.clear();
        for s in 0..sections {
            self.level.push(if self.rem[s] == 0 || s < lo || s >= hi {
                u64::MAX
            } else {
                self.sky[s].max(self.last_offset)
            });
        }
        self.run_of.clear();
        self.runs.clear();
        for s in 0..sections {
            let h = self.level[s];
            if h == u64::MAX {
                self.run_of.push(u32::MAX);
                continue;
            }
            if s > 0 && self.level[s - 1] == h {
                let r = self.runs.len() - 1;
                self.runs[r].1 = s + 1;
                self.run_of.push(r as u32);
            } else {
                self.run_of.push(self.runs.len() as u32);
                self.runs.push((s, s + 1, h, 0));
            }
        }
        let mut any_well = false;
        for r in 0..self.runs.len() {
            let (a, b, h, _) = self.runs[r];
            let left = if a > 0 { self.level[a - 1] } else { u64::MAX };
            let right = if b < sections {
                self.level[b]
            } else {
                u64::MAX
            };
            let n = left.min(right).min(limit);
            self.runs[r].3 = n;
            any_well |= n > h;
        }
        if !any_well {
            return true;
        }
        self.contained.clear();
        self.contained.resize(sections, 0);
        for k in 0..self.free_items.len() {
            let b = self.free_items[k];
            let st = self.arena.items[b as usize].start as usize;
            if self.offsets[b as usize] != UNPLACED || st < lo || st >= hi {
                continue;
            }
            let it = &self.arena.items[b as usize];
            let r = self.run_of[it.start as usize];
            if r == u32::MAX || self.run_of[it.end as usize - 1] != r {
                continue;
            }
            let (_, _, h, n) = self.runs[r as usize];
            if n <= h {
                continue;
            }
            for s in it.start..it.end {
                self.contained[s as usize] += it.size;
            }
        }
        for r in 0..self.runs.len() {
            let (a, b, h, n) = self.runs[r];
            if n <= h {
                continue;
            }
            for s in a..b {
                let need = (n - h).saturating_sub(self.blocked_between(s, h, n));
                let slack = self.free_above(s, h) - self.rem[s];
                if self.contained[s].saturating_add(slack) < need {
                    return false;
                }
            }
        }
        true
    }

    /// The release-time bound. In each section, the items still to place
    /// that live there must be stacked at or above their own floors (the
    /// highest level over their lifetimes), one above another. Stacking them
    /// in order of floor gives the lowest possible top (single-machine
    /// scheduling with release times); if even that top passes the limit,
    /// the node fails. Blocked bytes are ignored, which only lowers the top,
    /// so the test stays sound.
    fn release_ok(&mut self, lo: usize, hi: usize) -> bool {
        let mut order = std::mem::take(&mut self.order_buf);
        order.clear();
        for s in lo..hi {
            if self.rem[s] > 0 {
                for &b in &self.by_start[s] {
                    if self.offsets[b as usize] == UNPLACED {
                        order.push((self.floor_of(b, u64::MAX), b));
                    }
                }
            }
        }
        order.sort_unstable();
        for s in lo..hi {
            self.tops[s] = 0;
        }
        let limit = self.arena.limit;
        let mut ok = true;
        'outer: for &(floor, b) in &order {
            let it = &self.arena.items[b as usize];
            for s in it.start..it.end {
                let t = &mut self.tops[s as usize];
                *t = (*t).max(floor).saturating_add(it.size);
                if *t > limit {
                    ok = false;
                    break 'outer;
                }
            }
        }
        self.order_buf = order;
        ok
    }

    /// The order children are tried in (smaller first), by heuristic.
    fn rank(&self, b: u32, pos: u64) -> (u64, u64, u64) {
        let it = &self.arena.items[b as usize];
        let top = pos.saturating_add(it.size);
        let end = u64::from(it.end);
        let life = u64::from(it.end - it.start);
        let flush = {
            let left = (it.start as usize).checked_sub(1).map(|s| self.sky[s]);
            let right = self.sky.get(it.end as usize).copied();
            u64::from(!(left == Some(top) || right == Some(top)))
        };
        match self.heuristic {
            0 => (u64::MAX - end, u64::MAX - it.size, 0),
            1 => (u64::MAX - it.size, u64::MAX - end, 0),
            2 => (flush, u64::MAX - it.size, u64::MAX - end),
            3 => (flush, u64::MAX - end, u64::MAX - it.size),
            _ => (u64::MAX - it.size.saturating_mul(life), u64::MAX - end, 0),
        }
    }

    fn admissible(&self, b: u32, pos: u64) -> bool {
        let it = &self.arena.items[b as usize];
        let twin = self.twin_prev[b as usize];
        if twin != NO_TWIN && self.offsets[twin as usize] == UNPLACED {
            return false;
        }
        pos > self.last_offset || self.last_key.is_none_or(|k| (it.start, b) > k)
    }

    /// Candidates when the lowest point is forced: items at `level` that
    /// start no later than section `s0`. Returns `false` if the node fails.
    /// Candidates when a lowest point is forced. Every section at `level`
    /// without slack must have its byte at `level` covered by the bottom of
    /// an item whose whole lifetime sits at `level`; the search branches on
    /// the section with the fewest such items (fail first). Returns `false`
    /// if the node fails.
    fn forced_candidates(
        &mut self,
        lo: usize,
        hi: usize,
        level: u64,
        cands: &mut Vec<Candidate>,
    ) -> bool {
        for s in lo..hi {
            self.count[s] = 0;
        }
        for s in lo..hi {
            if self.rem[s] == 0 || self.sky[s].max(self.last_offset) > level {
                continue;
            }
            for k in 0..self.by_start[s].len() {
                let b = self.by_start[s][k];
                if self.offsets[b as usize] != UNPLACED || self.floor_of(b, level) > level {
                    continue;
                }
                let it = &self.arena.items[b as usize];
                for t in it.start..it.end {
                    self.count[t as usize] += 1;
                }
            }
        }
        let mut point: Option<(u32, usize)> = None;
        let considered = if self.fewest {
            self.tight_list.len()
        } else {
            1
        };
        for k in 0..considered.min(self.tight_list.len()) {
            let s = self.tight_list[k] as usize;
            let c = self.count[s];
            if point.is_none_or(|(best, _)| c < best) {
                point = Some((c, s));
            }
        }
        let Some((count, s0)) = point else {
            return true;
        };
        if count == 0 {
            return false;
        }
        // Items covering s0 at `level` start inside the run of sections at
        // `level` that contains s0.
        let mut first = s0;
        while first > lo
            && self.rem[first - 1] > 0
            && self.sky[first - 1].max(self.last_offset) <= level
        {
            first -= 1;
        }
        for s in first..=s0 {
            for k in 0..self.by_start[s].len() {
                let b = self.by_start[s][k];
                let it = &self.arena.items[b as usize];
                if self.offsets[b as usize] != UNPLACED || (it.end as usize) <= s0 {
                    continue;
                }
                let floor = self.floor_of(b, level);
                if floor > level {
                    continue;
                }
                match self.position(b, floor) {
                    Some(pos) if pos == level => {
                        let twin = self.twin_prev[b as usize];
                        if twin == NO_TWIN || self.offsets[twin as usize] != UNPLACED {
                            let (k1, k2, k3) = self.rank(b, pos);
                            cands.push((pos, k1, k2, k3, b));
                        }
                    }
                    Some(_) => {}
                    None => return false,
                }
            }
        }
        true
    }

    fn all_candidates(&mut self, lo: usize, hi: usize, cands: &mut Vec<Candidate>) -> bool {
        for k in 0..self.free_items.len() {
            let b = self.free_items[k];
            let st = self.arena.items[b as usize].start as usize;
            if self.offsets[b as usize] != UNPLACED || st < lo || st >= hi {
                continue;
            }
            let floor = self.floor_of(b, u64::MAX);
            match self.position(b, floor) {
                Some(pos) => {
                    if self.admissible(b, pos) {
                        let (k1, k2, k3) = self.rank(b, pos);
                        cands.push((pos, k1, k2, k3, b));
                    }
                }
                None => return false,
            }
        }
        true
    }

    fn apply(&mut self, b: u32, pos: u64) {
        let it = &self.arena.items[b as usize];
        let top = pos.saturating_add(it.size);
        for s in it.start..it.end {
            let s = s as usize;
            self.trail.push((s as u32, self.sky[s]));
            self.sky[s] = self.sky[s].max(top);
            self.rem[s] -= it.size;
        }
        for s in it.start + 1..it.end {
            self.crosses[s as usize] -= 1;
        }
        self.offsets[b as usize] = pos;
        self.remaining_hash ^= self.item_hash[b as usize];
        self.placed += 1;
        self.history.push((b, self.last_offset, self.last_key));
        self.last_offset = pos;
        self.last_key = Some((it.start, b));
    }

    fn undo_last(&mut self) {
        let Some((b, saved_offset, saved_key)) = self.history.pop() else {
            return;
        };
        let it = &self.arena.items[b as usize];
        for _ in it.start..it.end {
            if let Some((s, old)) = self.trail.pop() {
                self.sky[s as usize] = old;
                self.rem[s as usize] += it.size;
            }
        }
        for s in it.start + 1..it.end {
            self.crosses[s as usize] += 1;
        }
        self.offsets[b as usize] = UNPLACED;
        self.remaining_hash ^= self.item_hash[b as usize];
        self.placed -= 1;
        self.last_offset = saved_offset;
        self.last_key = saved_key;
    }
}
