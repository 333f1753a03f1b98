//! A second exact search for the portfolio: a *time sweep* that places the
//! items section by section instead of address by address.
//!
//! The address-ordered search (`search.rs`) raises one global level, so
//! regions that share nothing (the two sides of a band below a cut) are
//! coupled: a failure on one side re-enumerates the other's choices. The
//! sweep follows time instead. At each section where items start (an
//! *event*), the live items placed earlier occupy known intervals; the
//! free runs between them are the *holes*, and the starting items must go
//! into them.
//!
//! - *No slack at the event* (live bytes equal the window's size): every
//!   byte of every hole must be covered, so the lowest free byte is the
//!   bottom of a starting item (the bytes below it are covered already and
//!   every other live item is placed). Branching on which item sits there
//!   is complete, and the current hole must be filled exactly by a subset
//!   of the items left (a subset-sum test).
//! - *Slack `s` at the event*: a hole may keep free bytes, at most `s` in
//!   all. An item sits at the bottom of the free run, or at its top, or
//!   the run stays empty. That is not every placement (an item may need to
//!   sit in the middle of a run, or on an item that starts later), so here
//!   the sweep only *finds*: its failure proves nothing.
//! - *Determined holes.* After an event, a run of touching items that all
//!   end at section `e`, with a neighbour on each side that is still live
//!   at `e` (or the window's edge), is exactly a hole at `e`: only items
//!   starting at `e` can use it then. Some of them must fill it to within
//!   the slack of `e` (a subset-sum test on static data, cached).
//! - *Failure memo.* The state at an event is the set of live items with
//!   their addresses (which items are placed follows from the event), so a
//!   failed state is remembered by a digest of it, in a bounded table
//!   shared by every run on the same arena.
//! - *Twins.* Starting items with the same size, end and alignment are
//!   interchangeable: only the first unplaced one of a class is tried.
//!
//! The sweep runs only on arenas with one window, no fixed items and no
//! separation partners (`Prepared::simple`). When every event has no
//! slack it is complete, and an exhausted sweep proves that no placement
//! exists; otherwise an exhausted sweep proves nothing. Every placement
//! it finds is checked by the caller like any other.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use super::ExactBudget;
use super::prepare::Prepared;
use super::search::Step;
use crate::greedy::UNPLACED;

/// Failed event states remembered at most (16 bytes each, plus overhead).
const FAILED_LIMIT: usize = 1 << 20;

/// Cached subset sums at most.
const FILLS_LIMIT: usize = 1 << 18;

/// Subset sums are listed for at most this many items.
const SUMS_ITEMS: usize = 12;

/// Subset sums are computed on bit sets of at most this many bits (in
/// units of the sizes' common divisor); longer holes are not tested.
const SUBSET_BITS: u64 = 1 << 22;

/// What sweeps on one arena share across runs: failed event states and
/// the best fills of determined holes.
#[derive(Debug, Default)]
pub(super) struct SweepMemo {
    failed: HashSet<u128>,
    /// `(section, length)` to the largest sum of items starting at the
    /// section that is at most the length.
    fills: HashMap<(u32, u64), u64>,
    /// Per section with few starting items, their subset sums.
    sums: HashMap<u32, Vec<u64>>,
}

/// Static data of the sweep on one arena.
struct Plan {
    /// Sections where items start, ascending.
    events: Vec<u32>,
    /// Per event, its starting items: largest first, then latest end, then
    /// index, so interchangeable items are adjacent.
    starts: Vec<Vec<u32>>,
    /// Per event and position: the item before it in the list is
    /// interchangeable with it.
    twin: Vec<Vec<bool>>,
    /// Per section, the window's bytes that no item live there uses.
    slack: Vec<u64>,
    /// Per section, the items that start there (for determined holes).
    by_start: Vec<Vec<u32>>,
    /// The greatest common divisor of the sizes and the window's size.
    unit: u64,
    /// The window.
    w0: u64,
    w1: u64,
    /// Every event has no slack: an exhausted sweep is a proof.
    complete: bool,
}

impl Plan {
    /// The plan of `p`, or `None` when the sweep does not apply (several
    /// windows, fixed items or partners) or some section holds more live
    /// bytes than the window (the caller's bounds report that).
    fn new(p: &Prepared) -> Option<Plan> {
        let (w0, w1) = p.simple?;
        let room = w1.checked_sub(w0)?;
        let mut live = vec![0u64; p.sections];
        for k in 0..p.ids.len() {
            for s in p.start[k]..p.end[k] {
                live[s as usize] = live[s as usize].checked_add(p.size[k])?;
            }
        }
        let slack = live
            .iter()
            .map(|&l| room.checked_sub(l))
            .collect::<Option<Vec<u64>>>()?;
        let mut events = Vec::new();
        let mut starts = Vec::new();
        let mut twin = Vec::new();
        for (s, list) in p.by_start.iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let mut items = list.clone();
            let key = |k: u32| {
                let k = k as usize;
                (
                    std::cmp::Reverse(p.size[k]),
                    std::cmp::Reverse(p.end[k]),
                    p.align[k],
                )
            };
            items.sort_by_key(|&k| (key(k), k));
            let same: Vec<bool> = (0..items.len())
                .map(|j| j > 0 && key(items[j - 1]) == key(items[j]))
                .collect();
            events.push(s as u32);
            starts.push(items);
            twin.push(same);
        }
        let unit = p.size.iter().fold(room, |g, &s| gcd(g, s)).max(1);
        let complete = events.iter().all(|&s| slack[s as usize] == 0);
        Some(Plan {
            events,
            starts,
            twin,
            slack,
            by_start: p.by_start.clone(),
            unit,
            w0,
            w1,
            complete,
        })
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A 128-bit mixer (multiply and xor-shift rounds).
fn mix(mut x: u128) -> u128 {
    x ^= x >> 67;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
    x ^= x >> 61;
    x = x.wrapping_mul(0xd6e8_feb8_6659_fd93_2545_f491_4f6c_dd1d);
    x ^ (x >> 64)
}

/// The largest sum of a subset of `sizes` that is at most `cap`, all in
/// multiples of `unit`; `cap` itself when the bit set would be too long
/// (no test then). `bits` is scratch.
fn best_sum(sizes: impl Iterator<Item = u64>, cap: u64, unit: u64, bits: &mut Vec<u64>) -> u64 {
    let units = cap / unit;
    if units >= SUBSET_BITS {
        return cap;
    }
    let n = units as usize + 1;
    bits.clear();
    bits.resize(n.div_ceil(64), 0);
    bits[0] = 1;
    let mut total = 0u64;
    for size in sizes {
        let s = size / unit;
        if s == 0 || s > units {
            continue;
        }
        total = total.saturating_add(s);
        shift_or(bits, s as usize, n);
        if bits[units as usize / 64] >> (units % 64) & 1 == 1 {
            return units * unit;
        }
    }
    if total <= units {
        return total * unit;
    }
    for b in (0..n).rev() {
        if bits[b / 64] >> (b % 64) & 1 == 1 {
            return b as u64 * unit;
        }
    }
    0
}

/// `bits |= bits << s` over the first `n` bits.
fn shift_or(bits: &mut [u64], s: usize, n: usize) {
    let (words, off) = (s / 64, s % 64);
    for w in (words..bits.len()).rev() {
        let lo = bits[w - words] << off;
        let hi = if off > 0 && w > words {
            bits[w - words - 1] >> (64 - off)
        } else {
            0
        };
        bits[w] |= lo | hi;
    }
    let tail = n % 64;
    if tail != 0 {
        if let Some(last) = bits.last_mut() {
            *last &= (1u64 << tail) - 1;
        }
    }
}

/// One run of the sweep.
pub(super) struct Sweep<'a> {
    p: &'a Prepared,
    plan: Plan,
    budget: &'a ExactBudget,
    memo: &'a mut SweepMemo,
    pub nodes: u64,
    /// Address per free item, `UNPLACED` until placed.
    pub offsets: Vec<u64>,
    /// Placed items live at the current event, by address.
    occ: Vec<(u64, u32)>,
    /// Per event, its items not placed yet.
    todo: Vec<usize>,
    bits: Vec<u64>,
}

impl<'a> Sweep<'a> {
    /// A sweep of `p`, or `None` when it does not apply.
    pub fn new(p: &'a Prepared, budget: &'a ExactBudget, memo: &'a mut SweepMemo) -> Option<Self> {
        let plan = Plan::new(p)?;
        let todo = plan.starts.iter().map(Vec::len).collect();
        Some(Sweep {
            p,
            plan,
            budget,
            memo,
            nodes: 0,
            offsets: vec![UNPLACED; p.ids.len()],
            occ: Vec::new(),
            todo,
            bits: Vec::new(),
        })
    }

    /// Whether an exhausted sweep proves that no placement exists.
    pub fn complete(&self) -> bool {
        self.plan.complete
    }

    /// Runs the sweep from the first event.
    pub fn run(&mut self) -> Step {
        self.event(0)
    }

    fn tick(&mut self) -> bool {
        self.nodes += 1;
        if self.nodes > self.budget.max_nodes {
            return false;
        }
        if self.nodes % 1024 == 0 {
            if self.budget.deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            if self.budget.stop.as_ref().is_some_and(super::Stop::stopped) {
                return false;
            }
        }
        true
    }

    /// Places the items of event `i` and every later one.
    fn event(&mut self, i: usize) -> Step {
        let Some(&s) = self.plan.events.get(i) else {
            return Step::Found;
        };
        if !self.tick() {
            return Step::Stop;
        }
        let saved = self.occ.clone();
        let end = &self.p.end;
        self.occ.retain(|&(_, k)| end[k as usize] > s);
        let key = self.occ.iter().fold(mix(i as u128 ^ 0x5eeb), |h, &(a, k)| {
            h ^ mix(u128::from(k) << 64 | u128::from(a))
        });
        if self.memo.failed.contains(&key) {
            self.occ = saved;
            return Step::Fail;
        }
        let result = self.fill(i, self.plan.w0, self.plan.slack[s as usize], false);
        if result == Step::Fail {
            if self.memo.failed.len() >= FAILED_LIMIT {
                self.memo.failed.clear();
            }
            self.memo.failed.insert(key);
        }
        if result != Step::Found {
            self.occ = saved;
        }
        result
    }

    /// The lowest free run at or above `from`: `(x, y)`, or `None` if the
    /// window is full above `from`.
    fn hole(&self, from: u64) -> Option<(u64, u64)> {
        let mut x = from;
        let mut j = self.occ.partition_point(|&(a, _)| a < x);
        if j > 0 {
            let (a, k) = self.occ[j - 1];
            x = x.max(a.saturating_add(self.p.size[k as usize]));
        }
        while j < self.occ.len() && self.occ[j].0 <= x {
            let (a, k) = self.occ[j];
            x = x.max(a.saturating_add(self.p.size[k as usize]));
            j += 1;
        }
        let y = self.occ.get(j).map_or(self.plan.w1, |&(a, _)| a);
        (x < y).then_some((x, y))
    }

    fn place(&mut self, k: u32, at: u64) {
        let j = self.occ.partition_point(|&(a, _)| a < at);
        self.occ.insert(j, (at, k));
        self.offsets[k as usize] = at;
    }

    fn unplace(&mut self, k: u32, at: u64) {
        let j = self.occ.partition_point(|&(a, _)| a < at);
        if self.occ.get(j) == Some(&(at, k)) {
            self.occ.remove(j);
        }
        self.offsets[k as usize] = UNPLACED;
    }

    /// Places the rest of event `i`'s items at or above `from` with `left`
    /// free bytes still allowed; `top`: the current run is being filled
    /// from its top (no more items at its bottom).
    fn fill(&mut self, i: usize, from: u64, left: u64, top: bool) -> Step {
        if !self.tick() {
            return Step::Stop;
        }
        if self.todo[i] == 0 {
            if !self.determined_ok() {
                return Step::Fail;
            }
            return self.event(i + 1);
        }
        let Some((x, y)) = self.hole(from) else {
            return Step::Fail;
        };
        let len = y - x;
        // Some of the items left must fill the run to within the slack.
        let best = {
            let (p, starts) = (self.p, &self.plan.starts[i]);
            let sizes = starts
                .iter()
                .filter(|&&k| self.offsets[k as usize] == UNPLACED)
                .map(|&k| p.size[k as usize]);
            best_sum(sizes, len, self.plan.unit, &mut self.bits)
        };
        if len - best > left {
            return Step::Fail;
        }
        let n = self.plan.starts[i].len();
        if !top {
            // Items that end with the item below first: they leave one
            // hole together, as the pieces of a cut do.
            let below_end = {
                let j = self.occ.partition_point(|&(a, _)| a < x);
                j.checked_sub(1).map(|q| self.occ[q]).and_then(|(a, q)| {
                    (a.saturating_add(self.p.size[q as usize]) == x).then(|| self.p.end[q as usize])
                })
            };
            for pass in 0..2 {
                for j in 0..n {
                    let Some((k, _)) = self.candidate(i, j, len) else {
                        continue;
                    };
                    let flush = Some(self.p.end[k as usize]) == below_end;
                    if flush != (pass == 0) || x % self.p.align[k as usize] != 0 {
                        continue;
                    }
                    let r = self.try_at(i, k, x, left, false, x);
                    if r != Step::Fail {
                        return r;
                    }
                }
            }
        }
        if left == 0 {
            return Step::Fail;
        }
        for j in 0..n {
            let Some((k, size)) = self.candidate(i, j, len) else {
                continue;
            };
            let at = y - size;
            if size == len || at % self.p.align[k as usize] != 0 {
                continue;
            }
            let r = self.try_at(i, k, at, left, true, x);
            if r != Step::Fail {
                return r;
            }
        }
        if len <= left {
            return self.fill(i, y, left - len, false);
        }
        Step::Fail
    }

    /// Item `j` of event `i` and its size, if it is unplaced, the first of
    /// its twins left, and no longer than `len`.
    fn candidate(&self, i: usize, j: usize, len: u64) -> Option<(u32, u64)> {
        let list = &self.plan.starts[i];
        let k = list[j];
        if self.offsets[k as usize] != UNPLACED {
            return None;
        }
        if self.plan.twin[i][j] && self.offsets[list[j - 1] as usize] == UNPLACED {
            return None;
        }
        let size = self.p.size[k as usize];
        (size <= len).then_some((k, size))
    }

    /// Places `k` at `at` and continues event `i` from `from`; undone
    /// unless the rest is found.
    fn try_at(&mut self, i: usize, k: u32, at: u64, left: u64, top: bool, from: u64) -> Step {
        self.place(k, at);
        self.todo[i] -= 1;
        let j = self.occ.partition_point(|&(a, _)| a < at);
        let ok = (j.saturating_sub(1)..(j + 2).min(self.occ.len())).all(|q| self.run_ok(q))
            && (j..(j + 2).min(self.occ.len())).all(|q| self.boundary_ok(q));
        let r = if ok {
            self.fill(i, from, left, top)
        } else {
            Step::Fail
        };
        if r != Step::Found {
            self.todo[i] += 1;
            self.unplace(k, at);
        }
        r
    }

    /// Whether the run of touching items with the same end around
    /// `occ[j]`, if it is a determined hole, can be filled by the items
    /// starting at its end to within that section's slack.
    fn run_ok(&mut self, j: usize) -> bool {
        let Some(&(a, k)) = self.occ.get(j) else {
            return true;
        };
        let e = self.p.end[k as usize];
        if e as usize >= self.p.sections {
            return true;
        }
        let top_of = |q: usize| {
            let (b, m) = self.occ[q];
            b.saturating_add(self.p.size[m as usize])
        };
        let same = |q: usize| self.p.end[self.occ[q].1 as usize] == e;
        let (mut lo, mut hi) = (j, j);
        while lo > 0 && top_of(lo - 1) == self.occ[lo].0 && same(lo - 1) {
            lo -= 1;
        }
        while hi + 1 < self.occ.len() && self.occ[hi + 1].0 == top_of(hi) && same(hi + 1) {
            hi += 1;
        }
        let (bottom, top) = (self.occ[lo].0, top_of(hi));
        let below = bottom == self.plan.w0
            || lo > 0 && top_of(lo - 1) == bottom && self.p.end[self.occ[lo - 1].1 as usize] > e;
        let above = top == self.plan.w1
            || self
                .occ
                .get(hi + 1)
                .is_some_and(|&(b, q)| b == top && self.p.end[q as usize] > e);
        let _ = a;
        if !(below && above) {
            return true;
        }
        let len = top - bottom;
        len - self.best_fill(e, len) <= self.plan.slack[e as usize]
    }

    /// Whether the boundary below `occ[q]`, if `occ[q - 1]` touches it, can
    /// still be a hole's edge when the first of the two ends at section
    /// `e` without slack: the hole it leaves is filled exactly by items
    /// starting at `e`, so some subset of them spans from the ended item's
    /// far side (or beyond, up to the nearest item live at `e`) to the
    /// boundary.
    fn boundary_ok(&mut self, q: usize) -> bool {
        if q == 0 || q >= self.occ.len() {
            return true;
        }
        let (a, j) = self.occ[q - 1];
        let (b, k) = self.occ[q];
        let (j, k) = (j as usize, k as usize);
        if a.saturating_add(self.p.size[j]) != b || self.p.end[j] == self.p.end[k] {
            return true;
        }
        let e = self.p.end[j].min(self.p.end[k]);
        if e as usize >= self.p.sections || self.plan.slack[e as usize] != 0 {
            return true;
        }
        // The ended item's side: from the boundary to the nearest item
        // still live at `e` on that side (or the window's edge).
        let (least, most) = if self.p.end[j] < self.p.end[k] {
            let floor = self.occ[..q - 1]
                .iter()
                .rev()
                .find(|&&(_, m)| self.p.end[m as usize] > e)
                .map_or(self.plan.w0, |&(c, m)| {
                    c.saturating_add(self.p.size[m as usize])
                });
            (self.p.size[j], b - floor.min(b))
        } else {
            let ceil = self.occ[q + 1..]
                .iter()
                .find(|&&(_, m)| self.p.end[m as usize] > e)
                .map_or(self.plan.w1, |&(c, _)| c);
            (self.p.size[k], ceil.saturating_sub(b))
        };
        let Some(sums) = self.subset_sums(e) else {
            return true;
        };
        let at = sums.partition_point(|&x| x < least);
        sums.get(at).is_some_and(|&x| x <= most)
    }

    /// The sorted subset sums of the items starting at section `e`, when
    /// there are few of them.
    fn subset_sums(&mut self, e: u32) -> Option<&[u64]> {
        if !self.memo.sums.contains_key(&e) {
            let items = &self.plan.by_start[e as usize];
            if items.len() > SUMS_ITEMS {
                return None;
            }
            let mut sums = vec![0u64];
            for &k in items {
                let size = self.p.size[k as usize];
                let more: Vec<u64> = sums.iter().filter_map(|&x| x.checked_add(size)).collect();
                sums.extend(more);
                sums.sort_unstable();
                sums.dedup();
            }
            if self.memo.sums.len() >= FILLS_LIMIT {
                self.memo.sums.clear();
            }
            self.memo.sums.insert(e, sums);
        }
        self.memo.sums.get(&e).map(Vec::as_slice)
    }

    /// Whether every determined hole of a later section can be filled by
    /// the items starting there to within that section's slack.
    fn determined_ok(&mut self) -> bool {
        let n = self.occ.len();
        let mut waste: Vec<(u32, u64)> = Vec::new();
        let mut j = 0;
        while j < n {
            let (a, k) = self.occ[j];
            let e = self.p.end[k as usize];
            let mut top = a.saturating_add(self.p.size[k as usize]);
            let mut last = j;
            while last + 1 < n
                && self.occ[last + 1].0 == top
                && self.p.end[self.occ[last + 1].1 as usize] == e
            {
                last += 1;
                let (b, q) = self.occ[last];
                top = b.saturating_add(self.p.size[q as usize]);
            }
            let below = a == self.plan.w0
                || j > 0 && {
                    let (b, q) = self.occ[j - 1];
                    b.saturating_add(self.p.size[q as usize]) == a && self.p.end[q as usize] > e
                };
            let above = top == self.plan.w1
                || self
                    .occ
                    .get(last + 1)
                    .is_some_and(|&(b, q)| b == top && self.p.end[q as usize] > e);
            if below && above && (e as usize) < self.p.sections {
                let len = top - a;
                let best = self.best_fill(e, len);
                let w = len - best;
                match waste.iter_mut().find(|(s, _)| *s == e) {
                    Some((_, t)) => *t = t.saturating_add(w),
                    None => waste.push((e, w)),
                }
            }
            j = last + 1;
        }
        waste.iter().all(|&(e, w)| w <= self.plan.slack[e as usize])
    }

    /// The largest sum of items starting at section `e` that is at most
    /// `len` (cached).
    fn best_fill(&mut self, e: u32, len: u64) -> u64 {
        if let Some(&b) = self.memo.fills.get(&(e, len)) {
            return b;
        }
        let sizes = self.plan.by_start[e as usize]
            .iter()
            .map(|&k| self.p.size[k as usize]);
        let b = best_sum(sizes, len, self.plan.unit, &mut self.bits);
        if self.memo.fills.len() >= FILLS_LIMIT {
            self.memo.fills.clear();
        }
        self.memo.fills.insert((e, len), b);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::{SweepMemo, best_sum};
    use crate::csv::CsvProblem;
    use crate::exact::ExactBudget;
    use crate::exact::prepare::Prepared;
    use crate::exact::search::Step;
    use crate::generate::{near_zero_slack_grid, zero_slack_grid};
    use ipu_layout::rng::SplitMix64;

    /// Runs one sweep on `problem` at `capacity`: its end, whether it was
    /// complete, and the placement in the problem's buffer order.
    fn sweep(problem: &CsvProblem, capacity: u64) -> (Step, bool, Vec<u64>) {
        let arena = problem.arena(capacity);
        let p = Prepared::new(&arena).expect("prepared");
        let budget = ExactBudget {
            max_nodes: 200_000,
            deadline: None,
            stop: None,
        };
        let mut memo = SweepMemo::default();
        let mut s = super::Sweep::new(&p, &budget, &mut memo).expect("the sweep applies");
        let step = s.run();
        let mut offsets = vec![0u64; problem.buffers.len()];
        for (k, &id) in p.ids.iter().enumerate() {
            offsets[id as usize] = s.offsets[k];
        }
        (step, s.complete(), offsets)
    }

    #[test]
    fn small_guillotine_cuts_are_placed_and_pass_the_checker() {
        for seed in 0..6 {
            let (problem, _) = zero_slack_grid(seed, 14, 1 << 14, 1 << 14, 256);
            let (step, complete, offsets) = sweep(&problem, 1 << 14);
            assert_eq!(step, Step::Found, "seed {seed}");
            assert!(complete, "no slack anywhere: seed {seed}");
            problem.check(1 << 14, &offsets).expect("checked placement");
        }
    }

    #[test]
    fn with_slack_the_sweep_only_finds() {
        let (problem, _) = near_zero_slack_grid(7, 20, 1 << 14, 1 << 14, 256, 4);
        let (step, complete, offsets) = sweep(&problem, 1 << 14);
        assert!(!complete);
        assert_eq!(step, Step::Found);
        problem.check(1 << 14, &offsets).expect("checked placement");
    }

    #[test]
    fn an_alignment_conflict_without_slack_is_proved() {
        // Two 2-byte buffers aligned to 4 in 4 bytes: both need address 0.
        let problem = CsvProblem::parse("a,0,2,2,4\nb,0,2,2,4\n").expect("parse");
        let (step, complete, _) = sweep(&problem, 4);
        assert_eq!(step, Step::Fail);
        assert!(complete);
        // A layout that fits: one buffer below the other, both ending
        // where the other two start.
        let fits = CsvProblem::parse("a,0,2,2\nb,0,1,2\nc,1,2,1\nd,1,2,1\n").expect("parse");
        let (step, complete, offsets) = sweep(&fits, 4);
        assert_eq!((step, complete), (Step::Found, true));
        fits.check(4, &offsets).expect("checked placement");
    }

    #[test]
    fn best_sum_is_the_largest_subset_sum_within_the_cap() {
        let mut rng = SplitMix64::new(5);
        let mut bits = Vec::new();
        for _ in 0..200 {
            let n = rng.range(0, 7) as usize;
            let sizes: Vec<u64> = (0..n).map(|_| rng.range(1, 40) * 3).collect();
            let cap = rng.range(0, 200);
            let brute = (0u32..1 << n)
                .map(|mask| {
                    (0..n)
                        .filter(|&i| mask >> i & 1 == 1)
                        .map(|i| sizes[i])
                        .sum::<u64>()
                })
                .filter(|&s| s <= cap)
                .max()
                .unwrap_or(0);
            assert_eq!(best_sum(sizes.iter().copied(), cap, 3, &mut bits), brute);
        }
    }
}
