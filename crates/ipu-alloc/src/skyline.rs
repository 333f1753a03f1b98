//! Skyline placement, lowest floor first: the fast heuristic for large
//! traces.
//!
//! Every item is placed at its *floor*, the highest top of the placed items
//! live at the same time (so it rests on something, or on the base), and
//! items go in order of floor, ties broken by a static key. Such placements
//! are exactly the pushed-down placements the exact search enumerates; this
//! is its first dive without backtracking. On traces whose lifetimes nest
//! (activations kept for a backward pass) it stacks like an allocator that
//! frees in reverse order, and it fills the valleys of the skyline before
//! building on the peaks.
//!
//! Keeping every item's floor up to date would cost the number of
//! overlapping pairs, and nested lifetimes make that quadratic. Instead the
//! search works on *regions*: a skyline segment at height `h` stands for
//! the maximal run of sections around it whose skyline is at most `h`, and
//! the items ready at `h` there are exactly the unplaced items lying wholly
//! inside that run. A heap hands out segments lowest first, a segment tree
//! over sections finds the run and the floor, and a kd-tree over the items'
//! `(start, end)` returns the best item inside a run; placing it splits the
//! run. Items live in every section are stacked at the bottom first: they
//! are live whenever anything is, so nothing can do better with them. The
//! cost is `O(n log n)` for the tree operations plus the kd-tree queries,
//! whatever the overlaps.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::arena::{Arena, align_up};
use crate::greedy::UNPLACED;

/// How ties between items ready at the same height are broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SkyOrder {
    /// Longest lifetime first (in the caller's time units), then largest.
    Longest,
    /// Largest size × lifetime first, then largest size.
    Area,
}

/// A segment tree over sections with "assign a value to a range",
/// "maximum over a range" and "extent of the run at most `h` around a
/// section".
#[derive(Debug)]
struct MaxTree {
    n: usize,
    len: usize,
    max: Vec<u64>,
    /// A pending assignment for the whole subtree.
    set: Vec<Option<u64>>,
}

impl MaxTree {
    fn new(len: usize, base: u64) -> MaxTree {
        let n = len.max(1).next_power_of_two();
        MaxTree {
            n,
            len,
            max: vec![base; 2 * n],
            set: vec![None; 2 * n],
        }
    }

    fn push(&mut self, node: usize) {
        if let Some(v) = self.set[node].take() {
            for c in [2 * node, 2 * node + 1] {
                self.max[c] = v;
                self.set[c] = Some(v);
            }
        }
    }

    /// The maximum over `a..b`.
    fn query(&mut self, a: usize, b: usize) -> u64 {
        self.query_in(1, 0, self.n, a, b)
    }

    fn query_in(&mut self, node: usize, nl: usize, nr: usize, a: usize, b: usize) -> u64 {
        if b <= nl || nr <= a {
            return 0;
        }
        if a <= nl && nr <= b {
            return self.max[node];
        }
        self.push(node);
        let mid = (nl + nr) / 2;
        self.query_in(2 * node, nl, mid, a, b)
            .max(self.query_in(2 * node + 1, mid, nr, a, b))
    }

    /// Sets every value in `a..b` to `v`.
    fn assign(&mut self, a: usize, b: usize, v: u64) {
        self.assign_in(1, 0, self.n, a, b, v);
    }

    fn assign_in(&mut self, node: usize, nl: usize, nr: usize, a: usize, b: usize, v: u64) {
        if b <= nl || nr <= a {
            return;
        }
        if a <= nl && nr <= b {
            self.max[node] = v;
            self.set[node] = Some(v);
            return;
        }
        self.push(node);
        let mid = (nl + nr) / 2;
        self.assign_in(2 * node, nl, mid, a, b, v);
        self.assign_in(2 * node + 1, mid, nr, a, b, v);
        self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]);
    }

    /// The first section at or after `from` whose value exceeds `h`, or
    /// `len`.
    fn next_above(&mut self, from: usize, h: u64) -> usize {
        self.next_in(1, 0, self.n, from, h)
            .unwrap_or(self.len)
            .min(self.len)
    }

    fn next_in(&mut self, node: usize, nl: usize, nr: usize, from: usize, h: u64) -> Option<usize> {
        if nr <= from || self.max[node] <= h {
            return None;
        }
        if nr - nl == 1 {
            return Some(nl);
        }
        self.push(node);
        let mid = (nl + nr) / 2;
        self.next_in(2 * node, nl, mid, from, h)
            .or_else(|| self.next_in(2 * node + 1, mid, nr, from, h))
    }

    /// One past the last section before `until` whose value exceeds `h`,
    /// or 0.
    fn prev_above(&mut self, until: usize, h: u64) -> usize {
        self.prev_in(1, 0, self.n, until, h).map_or(0, |s| s + 1)
    }

    fn prev_in(
        &mut self,
        node: usize,
        nl: usize,
        nr: usize,
        until: usize,
        h: u64,
    ) -> Option<usize> {
        if nl >= until || self.max[node] <= h {
            return None;
        }
        if nr - nl == 1 {
            return Some(nl);
        }
        self.push(node);
        let mid = (nl + nr) / 2;
        self.prev_in(2 * node + 1, mid, nr, until, h)
            .or_else(|| self.prev_in(2 * node, nl, mid, until, h))
    }
}

/// Points per kd-tree leaf.
const LEAF: usize = 8;

/// A static kd-tree over the items' `(start, end)` points with deletion:
/// "the best live item with `start >= lo` and `end <= hi`".
#[derive(Debug)]
struct KdTree {
    /// Points in tree order: `(start, end, key, item)`; larger keys win.
    pts: Vec<(u32, u32, u64, u32)>,
    alive: Vec<bool>,
    /// Per node: bounding box `(min start, max start, min end, max end)`.
    bbox: Vec<(u32, u32, u32, u32)>,
    /// Per node: the best live point in its range (index into `pts`).
    best: Vec<Option<u32>>,
    /// Per node: its range of `pts`.
    range: Vec<(u32, u32)>,
    /// Item index -> position in `pts`.
    at: Vec<u32>,
}

impl KdTree {
    fn new(mut pts: Vec<(u32, u32, u64, u32)>, items: usize) -> KdTree {
        let n = pts.len();
        let mut tree = KdTree {
            pts: Vec::new(),
            alive: vec![true; n],
            bbox: Vec::new(),
            best: Vec::new(),
            range: Vec::new(),
            at: vec![u32::MAX; items],
        };
        if n > 0 {
            // Node 0 is unused; children of `k` are `2k` and `2k + 1`.
            let nodes = 2 * (n / LEAF + 1).next_power_of_two() * 2;
            tree.bbox = vec![(u32::MAX, 0, u32::MAX, 0); nodes];
            tree.best = vec![None; nodes];
            tree.range = vec![(0, 0); nodes];
            // Sort ranges in place, alternating axes, without recursion.
            let mut work = vec![(1usize, 0usize, n, false)];
            while let Some((node, a, b, by_end)) = work.pop() {
                tree.range[node] = (a as u32, b as u32);
                if b - a <= LEAF {
                    continue;
                }
                let mid = (a + b) / 2;
                let slice = &mut pts[a..b];
                if by_end {
                    slice.select_nth_unstable_by_key(mid - a, |p| (p.1, p.0, p.3));
                } else {
                    slice.select_nth_unstable_by_key(mid - a, |p| (p.0, p.1, p.3));
                }
                work.push((2 * node, a, mid, !by_end));
                work.push((2 * node + 1, mid, b, !by_end));
            }
            for (k, p) in pts.iter().enumerate() {
                tree.at[p.3 as usize] = k as u32;
            }
            tree.pts = pts;
            tree.rebuild(1);
        }
        tree
    }

    fn is_leaf(&self, node: usize) -> bool {
        let (a, b) = self.range[node];
        (b - a) as usize <= LEAF
    }

    /// Recomputes boxes and best points below `node` (post-order).
    fn rebuild(&mut self, root: usize) {
        let mut order = vec![root];
        let mut k = 0;
        while k < order.len() {
            let node = order[k];
            if !self.is_leaf(node) {
                order.push(2 * node);
                order.push(2 * node + 1);
            }
            k += 1;
        }
        for &node in order.iter().rev() {
            self.refresh(node);
        }
    }

    fn better(&self, x: Option<u32>, y: Option<u32>) -> Option<u32> {
        match (x, y) {
            (Some(a), Some(b)) => {
                let (ka, kb) = (self.pts[a as usize].2, self.pts[b as usize].2);
                Some(if (kb, a) > (ka, b) { b } else { a })
            }
            (a, None) => a,
            (None, b) => b,
        }
    }

    fn refresh(&mut self, node: usize) {
        if self.is_leaf(node) {
            let (a, b) = self.range[node];
            let mut bbox = (u32::MAX, 0, u32::MAX, 0);
            let mut best = None;
            for k in a..b {
                let p = self.pts[k as usize];
                bbox = (
                    bbox.0.min(p.0),
                    bbox.1.max(p.0),
                    bbox.2.min(p.1),
                    bbox.3.max(p.1),
                );
                if self.alive[k as usize] {
                    best = self.better(best, Some(k));
                }
            }
            self.bbox[node] = bbox;
            self.best[node] = best;
        } else {
            let (l, r) = (self.bbox[2 * node], self.bbox[2 * node + 1]);
            self.bbox[node] = (l.0.min(r.0), l.1.max(r.1), l.2.min(r.2), l.3.max(r.3));
            self.best[node] = self.better(self.best[2 * node], self.best[2 * node + 1]);
        }
    }

    /// Removes `item`.
    fn remove(&mut self, item: usize) {
        let k = self.at[item];
        if k == u32::MAX || !self.alive[k as usize] {
            return;
        }
        self.alive[k as usize] = false;
        let mut path = vec![1usize];
        let mut node = 1;
        while !self.is_leaf(node) {
            let (_, mid) = self.range[2 * node];
            node = if k < mid { 2 * node } else { 2 * node + 1 };
            path.push(node);
        }
        for &node in path.iter().rev() {
            let (a, b) = self.range[node];
            if self.is_leaf(node) {
                let mut best = None;
                for j in a..b {
                    if self.alive[j as usize] {
                        best = self.better(best, Some(j));
                    }
                }
                self.best[node] = best;
            } else {
                self.best[node] = self.better(self.best[2 * node], self.best[2 * node + 1]);
            }
        }
    }

    /// The best live item with `start >= lo` and `end <= hi`.
    fn best_inside(&self, lo: u32, hi: u32) -> Option<usize> {
        if self.pts.is_empty() {
            return None;
        }
        let mut found: Option<u32> = None;
        let mut stack = vec![1usize];
        while let Some(node) = stack.pop() {
            let Some(cand) = self.best[node] else {
                continue;
            };
            let (s0, s1, e0, e1) = self.bbox[node];
            if s1 < lo || e0 > hi {
                continue;
            }
            if let Some(f) = found {
                if self.pts[cand as usize].2 < self.pts[f as usize].2 {
                    continue;
                }
            }
            if s0 >= lo && e1 <= hi {
                found = self.better(found, Some(cand));
                continue;
            }
            if self.is_leaf(node) {
                let (a, b) = self.range[node];
                for k in a..b {
                    let p = self.pts[k as usize];
                    if self.alive[k as usize] && p.0 >= lo && p.1 <= hi {
                        found = self.better(found, Some(k));
                    }
                }
            } else {
                // The child with the better best point last, so it is
                // searched first.
                let (l, r) = (2 * node, 2 * node + 1);
                if self.better(self.best[l], self.best[r]) == self.best[l] {
                    stack.push(r);
                    stack.push(l);
                } else {
                    stack.push(l);
                    stack.push(r);
                }
            }
        }
        found.map(|k| self.pts[k as usize].3 as usize)
    }
}

/// Places every item of a plain arena (one window, no fixed items, no
/// partners) lowest floor first. `None` if the arena is not plain or an
/// item does not fit below the limit.
pub(crate) fn skyline(arena: &Arena, order: SkyOrder) -> Option<Vec<u64>> {
    let (w0, w1) = match arena.window_sets.as_slice() {
        [only] => match only.as_slice() {
            [w] => *w,
            _ => return None,
        },
        _ => return None,
    };
    if arena
        .items
        .iter()
        .any(|it| it.fixed.is_some() || !it.partners.is_empty())
    {
        return None;
    }
    let sections = arena.sections as usize;
    let time = |s: u32| arena.times.get(s as usize).copied().unwrap_or(u64::from(s));
    let mut offsets = vec![UNPLACED; arena.items.len()];
    let mut globals: Vec<(u64, u32)> = Vec::new();
    let mut keyed: Vec<(u128, u32)> = Vec::new();
    for (i, it) in arena.items.iter().enumerate() {
        if !it.live() || it.size == 0 {
            let at = align_up(w0, it.align)
                .filter(|&a| a.checked_add(it.size).is_some_and(|e| e <= w1))?;
            offsets[i] = at;
            continue;
        }
        let length = u128::from(time(it.end).saturating_sub(time(it.start)));
        let size = u128::from(it.size);
        let key = match order {
            SkyOrder::Longest => length << 64 | size,
            SkyOrder::Area => size.saturating_mul(length),
        };
        if it.start == 0 && it.end as usize == sections {
            globals.push((it.size, i as u32));
        } else {
            keyed.push((key, i as u32));
        }
    }
    // Items live in every section, largest first, at the bottom.
    globals.sort_unstable_by(|a, b| b.cmp(a));
    let mut base = w0;
    for &(_, i) in &globals {
        let it = &arena.items[i as usize];
        let at = align_up(base, it.align)?;
        offsets[i as usize] = at;
        base = at.checked_add(it.size).filter(|&t| t <= w1)?;
    }
    // Keys become ranks so the kd-tree compares small integers.
    keyed.sort_unstable();
    let pts: Vec<(u32, u32, u64, u32)> = keyed
        .iter()
        .enumerate()
        .map(|(rank, &(_, i))| {
            let it = &arena.items[i as usize];
            (it.start, it.end, rank as u64, i)
        })
        .collect();
    let mut kd = KdTree::new(pts, arena.items.len());
    let mut tree = MaxTree::new(sections, base);
    let mut heap: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
    if sections > 0 {
        heap.push(Reverse((base, 0)));
    }
    while let Some(Reverse((h, s))) = heap.pop() {
        let s = s as usize;
        if tree.query(s, s + 1) > h {
            // Overwritten since: its new height was pushed then.
            continue;
        }
        let r0 = tree.prev_above(s, h);
        let r1 = tree.next_above(s, h);
        let Some(i) = kd.best_inside(r0 as u32, r1 as u32) else {
            continue;
        };
        let it = &arena.items[i];
        let (a, b) = (it.start as usize, it.end as usize);
        let floor = align_up(tree.query(a, b).max(base), it.align)?;
        let top = floor.checked_add(it.size).filter(|&t| t <= w1)?;
        offsets[i] = floor;
        kd.remove(i);
        tree.assign(a, b, top);
        heap.push(Reverse((top, a as u32)));
        // The rest of this run, and whatever the new item cut off beside
        // it, are searched again at their own heights.
        heap.push(Reverse((h, s as u32)));
        if a > 0 {
            let v = tree.query(a - 1, a);
            heap.push(Reverse((v.max(h), (a - 1) as u32)));
        }
        if b < sections {
            let v = tree.query(b, b + 1);
            heap.push(Reverse((v.max(h), b as u32)));
        }
    }
    // Anything not placed had no region: cannot happen for live items, but
    // never return a partial placement.
    offsets.iter().all(|&o| o != UNPLACED).then_some(offsets)
}
