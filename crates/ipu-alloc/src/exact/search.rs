//! One depth-first run of the exact search over canonical placements.
//!
//! A placement is *pushed down* when no item can move to a lower address
//! alone. Sorted by address, each item of a pushed-down placement sits at
//! the lowest feasible address at or above both the previous item's address
//! `L` and its *floor*, the highest top of the items before it that live at
//! the same time. The search builds exactly these sequences: at every node
//! it places one more item at that address. A run is complete: every
//! pushed-down placement (and every problem with a placement has one) lies
//! on a path that no rule below cuts.
//!
//! Rules, each sound for pushed-down placements:
//! - *Order.* Items at the same address are placed in rank order (the
//!   portfolio's static preorder), interchangeable items in index order.
//! - *Dominance.* If an unplaced item `j` without partners fits entirely
//!   below address `H` (its lowest address above its floor, plus its size),
//!   nothing may be placed at or above `H` before it: `j` could move down
//!   under it. In particular, if `H <= L` the node fails.
//! - *Section bound.* Items still to place lie at or above `L`, so in every
//!   section the bytes still to place must fit above `max(skyline, L)`.
//! - *Release bound.* In each section the unplaced items must stack above
//!   their own lowest addresses; stacking them in that order gives the
//!   lowest possible top (scheduling with release times), which must stay
//!   within the limit.
//! - *Forced point.* If a section at the lowest level has no slack, its byte
//!   at that level must be the bottom of an item: the node branches only on
//!   items that start there. Fill-or-close runs branch this way on every
//!   node, with one more child where the section has slack: it stays empty
//!   at that level (`branch.rs`).
//! - *Cut.* Below a window boundary no item crosses, each section's empty
//!   bytes are at most its slack, so some items of the section must fill
//!   the room below the boundary to within the slack (`cut.rs`).
//! - *Supports.* An item that cannot sit at its lowest address any more
//!   sits on the top of an unplaced neighbour or on an edge of its windows
//!   and obstacles; its lowest such address is its release address.
//! - *Independent parts.* Where no unplaced item crosses a section boundary,
//!   the sides are solved one after the other; a failure on one is final.
//! - *Failure memo.* States (unplaced set, skyline, `L`, tie rank) that
//!   failed are remembered; a state with the same skyline and unplaced set
//!   and a higher `L` (or a stricter tie rank) fails too.
//!
//! With separation partners the order is not complete (an item may need to
//! sit higher to leave an element free for a partner placed later), so an
//! exhausted search then proves nothing; the caller reports `Unknown`.

mod branch;
mod cut;
mod rules;

pub(super) use cut::Cut;

use std::collections::HashMap;

use smallvec::SmallVec;

use super::prepare::{NO_TWIN, Prepared};
use super::{ExactBudget, SearchStats};
use crate::arena::{Arena, align_up, for_each_gap, merge_intervals};
use crate::greedy::UNPLACED;

/// How a subtree ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Found,
    Fail,
    Stop,
}

/// Switches of one run.
#[derive(Clone, Copy, Debug)]
pub(super) struct RunStyle {
    /// Branch on the forced point with the fewest candidates rather than
    /// the leftmost.
    pub fewest: bool,
    /// Run the well test.
    pub wells: bool,
    /// Branch on forced points (sections at the lowest level without slack).
    pub forced: bool,
    /// At forced points, try first the items whose top meets a neighbour.
    pub flush: bool,
    /// Branch at every node on one section at the lowest level: an item
    /// placed at the level covers it, or it stays empty there (fill or
    /// close; see `branch.rs`). Implies `forced` where there is no slack.
    pub sections: bool,
}

/// Failed states remembered at most (16 bytes each, plus table overhead).
const MEMO_LIMIT: usize = 1 << 21;

/// Failed states: a digest of the skyline and unplaced set, with the
/// loosest `L` and tie rank that failed. A failure is a fact about the
/// state, whatever rules found it, so runs on one arena share the memo
/// across strategies and restarts; only a tie rank's meaning depends on
/// the run's ranks, and `Search::salt` keeps those states apart.
pub(super) type Memo = HashMap<u128, (u64, Option<u32>)>;

/// A bijective 128-bit mixer (multiply and xor-shift rounds).
fn mix128(mut x: u128) -> u128 {
    x ^= x >> 67;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
    x ^= x >> 61;
    x = x.wrapping_mul(0xd6e8_feb8_6659_fd93_2545_f491_4f6c_dd1d);
    x ^ (x >> 64)
}

/// Whether state `a` (`L`, tie rank) allows strictly more than `b`: a lower
/// `L`, or the same `L` with a looser tie rank (none is loosest).
fn looser(a: (u64, Option<u32>), b: (u64, Option<u32>)) -> bool {
    a.0 < b.0
        || (a.0 == b.0
            && match (a.1, b.1) {
                (None, Some(_)) => true,
                (Some(x), Some(y)) => x < y,
                _ => false,
            })
}

/// A child: `(address, rank, item)`, tried in ascending order.
type Child = (u64, u32, u32);

/// Packs a release address, a rank and an item into one sort key.
fn pack(at: u64, rank: u32, k: u32) -> u128 {
    u128::from(at) << 64 | u128::from(rank) << 32 | u128::from(k)
}

/// The release address and the item of a sort key.
fn unpack(key: u128) -> (u64, usize) {
    ((key >> 64) as u64, (key & 0xffff_ffff) as usize)
}

/// The rank of a sort key.
fn key_rank(key: u128) -> u32 {
    (key >> 32) as u32
}

/// The `Undo::item` of a close, which places no item.
const CLOSED: u32 = u32::MAX;

/// What `apply` or `close` must undo: item (`CLOSED` for a close),
/// previous `L`, previous tie rank, and the lengths of the two trails
/// before it.
#[derive(Clone, Copy, Debug)]
struct Undo {
    item: u32,
    last: u64,
    last_rank: Option<u32>,
    sky_mark: usize,
    floor_mark: usize,
}

pub(super) struct Search<'a> {
    arena: &'a Arena,
    p: &'a Prepared,
    rank: &'a [u32],
    style: RunStyle,
    budget: &'a ExactBudget,
    pub nodes: u64,
    pub stats: SearchStats,
    /// Address per free item, `UNPLACED` until placed.
    pub offsets: Vec<u64>,
    /// Highest top of placed items overlapping the item in time.
    floor: Vec<u64>,
    /// Per free item, valid for the items of the current node: its lowest
    /// address at or above `max(floor, L)`.
    pos: Vec<u64>,
    /// Per free item of the current node: the lowest address it can still
    /// take (at or above `L`).
    rel: Vec<u64>,
    sky: Vec<u64>,
    rem: Vec<u64>,
    crosses: Vec<u32>,
    last: u64,
    last_rank: Option<u32>,
    sky_trail: Vec<(u32, u64)>,
    floor_trail: Vec<(u32, u64)>,
    history: Vec<Undo>,
    item_hash: Vec<u128>,
    remaining_hash: u128,
    /// Failed states: skyline and unplaced set, with the loosest `L` and
    /// tie rank that failed, shared by every run on the same arena.
    failed: &'a mut Memo,
    /// Mixed into the keys of states with a tie rank, whose meaning
    /// depends on the run's ranks.
    salt: u128,
    memo: bool,
    // Scratch.
    pool: Vec<Vec<Child>>,
    open: Vec<u32>,
    orders: Vec<Vec<u128>>,
    tops: Vec<u64>,
    /// Valley tiling passes: sections reachable from the run's start, and
    /// from which the run's end is reachable.
    fwd: Vec<bool>,
    bwd: Vec<bool>,
    scratch: Vec<(u64, u64)>,
    tight: Vec<u32>,
    /// Open sections at the lowest level of the current node.
    lowest: Vec<u32>,
    cut_sums: Vec<u64>,
    cut_spare: Vec<u64>,
    count: Vec<u32>,
    level: Vec<u64>,
    run_of: Vec<u32>,
    runs: Vec<(usize, usize, u64, u64)>,
    contained: Vec<u64>,
}

impl<'a> Search<'a> {
    pub fn new(
        arena: &'a Arena,
        p: &'a Prepared,
        rank: &'a [u32],
        style: RunStyle,
        budget: &'a ExactBudget,
        failed: &'a mut Memo,
        salt: u64,
    ) -> Search<'a> {
        let m = p.ids.len();
        let sections = p.sections;
        let mut rem = vec![0u64; sections];
        let mut crosses = vec![0u32; sections + 1];
        for k in 0..m {
            for s in p.start[k]..p.end[k] {
                rem[s as usize] = rem[s as usize].saturating_add(p.size[k]);
            }
            for s in p.start[k] + 1..p.end[k] {
                crosses[s as usize] += 1;
            }
        }
        let item_hash: Vec<u128> = (0..m as u128)
            .map(|i| mix128(i.wrapping_add(0x5151)))
            .collect();
        let remaining_hash = item_hash.iter().fold(0, |h, &x| h ^ x);
        Search {
            arena,
            p,
            rank,
            style,
            budget,
            nodes: 0,
            stats: SearchStats::default(),
            offsets: vec![UNPLACED; m],
            floor: vec![p.base; m],
            pos: vec![0; m],
            rel: vec![0; m],
            sky: vec![p.base; sections],
            rem,
            crosses,
            last: p.base,
            last_rank: None,
            sky_trail: Vec::new(),
            floor_trail: Vec::new(),
            history: Vec::new(),
            item_hash,
            remaining_hash,
            failed,
            salt: mix128(u128::from(salt) ^ 0x7a11),
            memo: !p.any_partners,
            pool: Vec::new(),
            open: Vec::new(),
            orders: Vec::new(),
            tops: vec![0; sections],
            fwd: vec![false; sections + 1],
            bwd: vec![false; sections + 1],
            scratch: Vec::new(),
            tight: Vec::new(),
            lowest: Vec::new(),
            cut_sums: Vec::new(),
            cut_spare: Vec::new(),
            count: vec![0; sections],
            level: Vec::new(),
            run_of: Vec::new(),
            runs: Vec::new(),
            contained: Vec::new(),
        }
    }

    /// Runs the search from the root.
    pub fn run(&mut self) -> Step {
        let sections = self.p.sections;
        self.dfs(0, 0, sections)
    }

    fn tick(&mut self) -> bool {
        self.nodes += 1;
        self.budget.allows(self.nodes)
    }

    /// Unblocked bytes of section `s` at or above `x`.
    fn free_above(&self, s: usize, x: u64) -> u64 {
        let limit = self.p.limit;
        if x >= limit {
            return 0;
        }
        let list = &self.p.blocked[s];
        if list.is_empty() {
            return limit - x;
        }
        let k = list.partition_point(|iv| iv.1 <= x);
        let blocked = if k < list.len() {
            let (a, b) = list[k];
            b.min(limit).saturating_sub(a.max(x)) + self.p.blocked_suffix[s][k + 1]
        } else {
            0
        };
        (limit - x).saturating_sub(blocked)
    }

    fn blocked_at(&self, s: usize, x: u64) -> bool {
        let list = &self.p.blocked[s];
        let k = list.partition_point(|iv| iv.1 <= x);
        k < list.len() && list[k].0 <= x
    }

    /// Bytes of section `s` in `[lo, hi)` that no free item may use.
    fn blocked_between(&self, s: usize, lo: u64, hi: u64) -> u64 {
        let list = &self.p.blocked[s];
        let mut k = list.partition_point(|iv| iv.1 <= lo);
        let mut total = 0u64;
        while k < list.len() && list[k].0 < hi {
            total += list[k].1.min(hi).saturating_sub(list[k].0.max(lo));
            k += 1;
        }
        total
    }

    /// The lowest feasible address at or above `floor` for item `k`.
    fn position(&mut self, k: usize, floor: u64) -> Option<u64> {
        self.fit(k, floor, false)
    }

    /// The lowest address at or above `from` where item `k` can sit
    /// supported from below by something not yet decided: the top of an
    /// unplaced time neighbour, which itself sits at or above `base`, or
    /// the start of a gap its windows leave around its obstacles (a window
    /// start, the top of a fixed item, the end of a placed partner's
    /// element). A pushed-down item that cannot sit lower sits on one of
    /// these, so no pushed-down completion puts `k` lower.
    pub(super) fn support_from(&mut self, k: usize, base: u64, from: u64) -> Option<u64> {
        let (r0, r1) = (
            self.p.adj_start[k] as usize,
            self.p.adj_start[k + 1] as usize,
        );
        let smallest = self.p.adj[r0..r1]
            .iter()
            .filter(|&&q| self.offsets[q as usize] == UNPLACED)
            .map(|&q| self.p.size[q as usize])
            .min();
        let on_neighbour =
            smallest.and_then(|s| self.position(k, base.saturating_add(s).max(from)));
        let on_edge = self.fit(k, from, true);
        match (on_neighbour, on_edge) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The lowest feasible address at or above `floor` for item `k`; with
    /// `edges`, only addresses at the start of a gap (aligned up).
    fn fit(&mut self, k: usize, floor: u64, edges: bool) -> Option<u64> {
        let size = self.p.size[k];
        let align = self.p.align[k];
        if let Some((w0, w1)) = self.p.simple {
            let a = if edges {
                align_up(w0, align).filter(|&a| a >= floor)?
            } else {
                align_up(floor.max(w0), align)?
            };
            return (a.checked_add(size)? <= w1).then_some(a);
        }
        let windows = &self.arena.window_sets[self.p.windows[k] as usize];
        let mut use_scratch = false;
        for &q in &self.p.partners[k] {
            let o = self.offsets[q as usize];
            if o != UNPLACED {
                if !use_scratch {
                    self.scratch.clear();
                    self.scratch.extend_from_slice(&self.p.statics[k]);
                    use_scratch = true;
                }
                if let Some(span) = self.arena.element_span(o, self.p.size[q as usize]) {
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
            &self.p.statics[k]
        };
        let mut found = None;
        for_each_gap(windows, obstacles, |g0, g1| {
            if g1 <= floor {
                return true;
            }
            let at = if edges {
                align_up(g0, align).filter(|&a| a >= floor)
            } else {
                align_up(g0.max(floor), align)
            };
            match at {
                Some(a) if a.checked_add(size).is_some_and(|e| e <= g1) => {
                    found = Some(a);
                    false
                }
                _ => true,
            }
        });
        found
    }

    /// Places every unplaced item whose lifetime lies in sections `lo..hi`.
    /// On `Found` the placements stay applied; otherwise the state is as on
    /// entry.
    fn dfs(&mut self, depth: usize, lo: usize, hi: usize) -> Step {
        if self.rem[lo..hi].iter().all(|&r| r == 0) {
            return Step::Found;
        }
        if !self.tick() {
            return Step::Stop;
        }
        // Independent parts: where no unplaced item crosses a boundary, the
        // sides share nothing and are solved one after the other.
        let mut parts: SmallVec<[(usize, usize); 8]> = SmallVec::new();
        let mut run: Option<(usize, usize)> = None;
        for s in lo..hi {
            if s > lo && self.crosses[s] == 0 {
                if let Some(r) = run.take() {
                    parts.push(r);
                }
            }
            if self.rem[s] > 0 {
                run = Some(run.map_or((s, s + 1), |(a, _)| (a, s + 1)));
            }
        }
        if let Some(r) = run {
            parts.push(r);
        }
        if parts.len() > 1 {
            // The parts' nodes have no parent order at this depth.
            if let Some(stale) = self.orders.get_mut(depth) {
                stale.clear();
            }
            let mark = self.history.len();
            let saved = (self.last, self.last_rank);
            for &(a, b) in &parts {
                (self.last, self.last_rank) = saved;
                match self.dfs(depth + 1, a, b) {
                    Step::Found => {}
                    other => {
                        while self.history.len() > mark {
                            self.undo();
                        }
                        (self.last, self.last_rank) = saved;
                        return other;
                    }
                }
            }
            return Step::Found;
        }
        let (lo, hi) = parts.first().copied().unwrap_or((lo, hi));

        // Section bound, the lowest level and its tight sections.
        let mut level = u64::MAX;
        self.tight.clear();
        self.lowest.clear();
        for s in lo..hi {
            let need = self.rem[s];
            if need == 0 {
                continue;
            }
            let h = self.sky[s].max(self.last);
            let free = self.free_above(s, h);
            if need > free {
                self.stats.section += 1;
                return Step::Fail;
            }
            if h < level {
                level = h;
                self.tight.clear();
                self.lowest.clear();
            }
            if h == level {
                self.lowest.push(s as u32);
                if free == need && !self.blocked_at(s, h) {
                    self.tight.push(s as u32);
                }
            }
        }
        let key = self.memo.then(|| self.state_key(lo, hi));
        if let Some(k) = key {
            if self
                .failed
                .get(&k)
                .is_some_and(|&(l, r)| self.at_least_as_tight(l, r))
            {
                self.stats.memo += 1;
                return Step::Fail;
            }
        }
        self.stats.max_depth = self.stats.max_depth.max(self.history.len() as u64);
        let result = self.expand(depth, lo, hi, level);
        if result == Step::Fail {
            if let Some(k) = key {
                if self.failed.len() >= MEMO_LIMIT {
                    self.failed.clear();
                }
                // Keep the loosest failure: it covers every tighter state.
                let entry = (self.last, self.last_rank);
                match self.failed.get(&k) {
                    Some(&(l, r)) if !looser(entry, (l, r)) => {}
                    _ => {
                        self.failed.insert(k, entry);
                    }
                }
            }
        }
        result
    }

    /// Whether the current state allows no more than a failed state with
    /// the same skyline and unplaced items whose `L` was `l` and tie rank
    /// `r`: every completion of a state with a higher `L` (or the same `L`
    /// and a stricter tie rank) is a completion of the looser one, so the
    /// looser one's failure covers it.
    fn at_least_as_tight(&self, l: u64, r: Option<u32>) -> bool {
        !looser((self.last, self.last_rank), (l, r)) || (self.last, self.last_rank) == (l, r)
    }

    /// Lists in `open` the unplaced items starting in sections `lo..hi`,
    /// in the parent's order when there is one: the keys change little
    /// from node to node, so the sort of the children then sees long
    /// sorted runs.
    fn collect_open(&self, depth: usize, lo: usize, hi: usize, open: &mut Vec<u32>) {
        open.clear();
        match self.orders.get(depth.wrapping_sub(1)) {
            Some(parent) if depth > 0 && !parent.is_empty() => {
                for &key in parent {
                    let (_, k) = unpack(key);
                    let st = self.p.start[k] as usize;
                    if self.offsets[k] == UNPLACED && lo <= st && st < hi {
                        open.push(k as u32);
                    }
                }
            }
            _ => {
                for s in lo..hi {
                    for &k in &self.p.by_start[s] {
                        if self.offsets[k as usize] == UNPLACED {
                            open.push(k);
                        }
                    }
                }
            }
        }
    }

    /// Computes each open item's canonical position (`pos`) and release
    /// address (`rel`), and returns the dominance height: the lowest top
    /// of an unpartnered open item. `None` when an item has no position
    /// or no support.
    fn position_open(&mut self, open: &[u32], level: u64) -> Option<u64> {
        let mut height = u64::MAX;
        for &k in open {
            let k = k as usize;
            let f = self.floor[k];
            // A pushed-down placement puts the item at its lowest address
            // above its floor, whatever `L` is; that address is a child only
            // if it is not below `L`. Either way the item ends at or above
            // `rel`.
            let at = self.position(k, f)?;
            self.pos[k] = at;
            let rel = if at >= self.last {
                Some(at)
            } else {
                // Below `L` the item needs a new support at or above `L`:
                // an unplaced neighbour, which will sit at or above the
                // lowest level, or an edge of its windows and obstacles.
                self.support_from(k, level, self.last)
            };
            let rel = rel?;
            self.rel[k] = rel;
            if self.p.partners[k].is_empty() {
                height = height.min(at.saturating_add(self.p.size[k]));
            }
        }
        Some(height)
    }

    /// Computes positions, runs the bounds and tries the children.
    fn expand(&mut self, depth: usize, lo: usize, hi: usize, level: u64) -> Step {
        // The unplaced items of this part, their positions, and the
        // dominance height.
        let mut open = std::mem::take(&mut self.open);
        self.collect_open(depth, lo, hi, &mut open);
        let positioned = self.position_open(&open, level);
        let mut ok = positioned.is_some();
        let height = positioned.unwrap_or(u64::MAX);
        // An item that fits wholly below `L` could have gone there: every
        // child would be dominated.
        // One order serves the release bound and the children: by release
        // address, then rank. Children are the items whose release address
        // is their canonical address, so they come out sorted too.
        if self.orders.len() <= depth {
            self.orders.resize_with(depth + 1, Vec::new);
        }
        let mut order = std::mem::take(&mut self.orders[depth]);
        order.clear();
        if ok {
            order.extend(
                open.iter()
                    .map(|&k| pack(self.rel[k as usize], self.rank[k as usize], k)),
            );
            order.sort();
        }
        // The rules in order of cost; each failure is counted by rule.
        let stats = &mut self.stats;
        let pruned = if !ok {
            Some(&mut stats.no_position)
        } else if height <= self.last {
            Some(&mut stats.dominance)
        } else {
            None
        };
        if let Some(c) = pruned {
            *c += 1;
            ok = false;
        } else if !self.valleys_ok(lo, hi) {
            self.stats.valley += 1;
            ok = false;
        } else if !self.release_ok(lo, hi, &order) {
            self.stats.release += 1;
            ok = false;
        } else if self.style.wells && !self.wells_ok(lo, hi, &open) {
            self.stats.wells += 1;
            ok = false;
        } else if !self.cut_ok(lo, hi) {
            self.stats.cut += 1;
            ok = false;
        }
        let mut children = self.pool.pop().unwrap_or_default();
        children.clear();
        let forced = self.style.sections || (self.style.forced && !self.tight.is_empty());
        let mut close = None;
        if ok && self.style.sections {
            // Every child places its item at `level` or above: one that
            // fits wholly below `height` would be dominated.
            if height <= level {
                self.stats.dominance += 1;
                ok = false;
            } else {
                ok = self.section_children(level, &order, &mut children, &mut close);
            }
        } else if ok {
            // A child at `p` raises `L` to `p`: every open section must still
            // hold its remaining bytes above `p`.
            let mut cap = height;
            for s in lo..hi {
                if self.rem[s] > 0 {
                    cap = cap.min(self.p.limit.saturating_sub(self.rem[s]).saturating_add(1));
                }
            }
            ok = if forced {
                self.forced_children(level, &order, &mut children)
            } else {
                for &key in &order {
                    let (at, ku) = unpack(key);
                    let (rank, k) = (key_rank(key), ku as u32);
                    if at >= cap {
                        break;
                    }
                    let twin = self.p.twin_prev[ku];
                    let in_order = self.pos[ku] == at
                        && (at > self.last || self.last_rank.is_none_or(|r| rank > r));
                    if in_order && (twin == NO_TWIN || self.offsets[twin as usize] != UNPLACED) {
                        children.push((at, rank, k));
                    }
                }
                true
            };
        }
        self.open = open;
        self.orders[depth] = order;
        let mut result = Step::Fail;
        if ok && children.is_empty() && close.is_none() {
            self.stats.no_children += 1;
        }
        if ok {
            for &(at, _, k) in children.iter() {
                self.apply(k as usize, at);
                if forced {
                    // The forced point chose the item without the tie order,
                    // so the next tie at this address is unconstrained.
                    self.last_rank = None;
                }
                result = self.dfs(depth + 1, lo, hi);
                if result != Step::Fail {
                    if result == Step::Stop {
                        self.undo();
                    }
                    break;
                }
                self.undo();
            }
            if let (Step::Fail, Some((s0, to))) = (result, close) {
                self.close(depth, s0, to);
                result = self.dfs(depth + 1, lo, hi);
                if result != Step::Found {
                    self.undo();
                }
            }
        }
        self.pool.push(children);
        result
    }

    /// A 128-bit digest of everything the rest of the search in sections
    /// `lo..hi` depends on: the unplaced set, the skyline of every open
    /// section, `L` and the tie rank.
    fn state_key(&self, lo: usize, hi: usize) -> u128 {
        let mut h = mix128(self.remaining_hash ^ ((lo as u128) << 96 | (hi as u128) << 64));
        for s in lo..hi {
            if self.rem[s] != 0 {
                h = mix128(h ^ u128::from(self.sky[s]) ^ ((s as u128) << 64));
            }
        }
        if self.last_rank.is_some() {
            h = mix128(h ^ self.salt);
        }
        h
    }

    fn apply(&mut self, k: usize, at: u64) {
        let top = at.saturating_add(self.p.size[k]);
        self.history.push(Undo {
            item: k as u32,
            last: self.last,
            last_rank: self.last_rank,
            sky_mark: self.sky_trail.len(),
            floor_mark: self.floor_trail.len(),
        });
        let (a, b) = (self.p.start[k], self.p.end[k]);
        for s in a..b {
            let su = s as usize;
            if self.sky[su] < top {
                self.sky_trail.push((s, self.sky[su]));
                self.sky[su] = top;
            }
            self.rem[su] -= self.p.size[k];
        }
        for s in a + 1..b {
            self.crosses[s as usize] -= 1;
        }
        let (r0, r1) = (
            self.p.adj_start[k] as usize,
            self.p.adj_start[k + 1] as usize,
        );
        for &q in &self.p.adj[r0..r1] {
            let qu = q as usize;
            if self.offsets[qu] == UNPLACED && self.floor[qu] < top {
                self.floor_trail.push((q, self.floor[qu]));
                self.floor[qu] = top;
            }
        }
        self.offsets[k] = at;
        self.remaining_hash ^= self.item_hash[k];
        self.last = at;
        self.last_rank = Some(self.rank[k]);
    }

    fn undo(&mut self) {
        let Some(u) = self.history.pop() else {
            return;
        };
        while self.sky_trail.len() > u.sky_mark {
            if let Some((s, v)) = self.sky_trail.pop() {
                self.sky[s as usize] = v;
            }
        }
        while self.floor_trail.len() > u.floor_mark {
            if let Some((q, v)) = self.floor_trail.pop() {
                self.floor[q as usize] = v;
            }
        }
        self.last = u.last;
        self.last_rank = u.last_rank;
        if u.item == CLOSED {
            return;
        }
        let k = u.item as usize;
        let (a, b) = (self.p.start[k], self.p.end[k]);
        for s in a..b {
            self.rem[s as usize] += self.p.size[k];
        }
        for s in a + 1..b {
            self.crosses[s as usize] += 1;
        }
        self.offsets[k] = UNPLACED;
        self.remaining_hash ^= self.item_hash[k];
    }
}
