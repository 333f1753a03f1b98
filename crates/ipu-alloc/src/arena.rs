//! The single-arena model every algorithm of the crate works on.
//!
//! A tile problem and a MiniMalloc-style CSV problem both become an
//! [`Arena`]: items with a lifetime in compressed time sections, a size, an
//! alignment, the address windows they may use, an optional fixed address and
//! separation partners. Keeping one model means the greedy heuristics and the
//! exact search are written once and tested on both kinds of input.
//!
//! Addresses are `u64` so that research traces beyond 4 GiB fit; tile
//! problems convert their `u32` addresses losslessly.

use smallvec::SmallVec;

/// One thing to place (or already placed, when `fixed` is set).
#[derive(Clone, Debug)]
pub(crate) struct Item {
    /// First time section the item is live.
    pub start: u32,
    /// One past the last time section; `start == end` means never live.
    pub end: u32,
    /// Size in bytes.
    pub size: u64,
    /// Alignment, a power of two (at least 1).
    pub align: u64,
    /// Index into [`Arena::window_sets`].
    pub windows: u32,
    /// A fixed address: the item is an obstacle, not a decision.
    pub fixed: Option<u64>,
    /// Items this one must not share a memory element with (symmetric).
    pub partners: SmallVec<[u32; 2]>,
}

impl Item {
    pub fn live(&self) -> bool {
        self.start < self.end
    }
}

/// A placement problem in one address space.
#[derive(Clone, Debug)]
pub(crate) struct Arena {
    pub items: Vec<Item>,
    /// Number of time sections.
    pub sections: u32,
    /// Sorted, disjoint address windows; an item lies inside one of its set.
    pub window_sets: Vec<Vec<(u64, u64)>>,
    /// Regions `(start, end, element_bytes)` that define memory elements for
    /// separation; empty when the problem has none.
    pub elements: Vec<(u64, u64, u64)>,
    /// Lowest address any item may use.
    pub base: u64,
    /// One past the highest address any item may use.
    pub limit: u64,
}

/// Rounds `x` up to a multiple of the power of two `align`.
pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    let mask = align.checked_sub(1)?;
    Some(x.checked_add(mask)? & !mask)
}

impl Arena {
    /// The address range of whole memory elements touched by `[addr, addr + size)`.
    pub fn element_span(&self, addr: u64, size: u64) -> Option<(u64, u64)> {
        if size == 0 {
            return None;
        }
        let last = addr.checked_add(size - 1)?;
        let lo = self.element_bounds(addr).map_or(addr, |e| e.0);
        let hi = self.element_bounds(last).map_or(last + 1, |e| e.1);
        Some((lo, hi))
    }

    fn element_bounds(&self, addr: u64) -> Option<(u64, u64)> {
        let &(rs, re, eb) = self.elements.iter().find(|r| r.0 <= addr && addr < r.1)?;
        let k = (addr - rs) / eb.max(1);
        let s = rs + k * eb.max(1);
        Some((s, s.saturating_add(eb).min(re)))
    }

    /// Peak over sections of the bytes of every live item: no placement
    /// can use fewer bytes at once.
    pub fn peak_live(&self) -> (u64, u32) {
        let mut delta = vec![0i128; self.sections as usize + 1];
        for it in &self.items {
            if it.live() {
                delta[it.start as usize] += i128::from(it.size);
                delta[it.end as usize] -= i128::from(it.size);
            }
        }
        let (mut run, mut best, mut at) = (0i128, 0i128, 0u32);
        for (s, d) in delta.iter().enumerate().take(self.sections as usize) {
            run += d;
            if run > best {
                best = run;
                at = s as u32;
            }
        }
        (u64::try_from(best).unwrap_or(u64::MAX), at)
    }
}

/// Visits the free gaps of `windows` around the sorted, disjoint
/// `obstacles`, lowest first, until `f` returns `false`.
pub(crate) fn for_each_gap(
    windows: &[(u64, u64)],
    obstacles: &[(u64, u64)],
    mut f: impl FnMut(u64, u64) -> bool,
) {
    let mut j = 0;
    for &(ws, we) in windows {
        while j < obstacles.len() && obstacles[j].1 <= ws {
            j += 1;
        }
        let mut cur = ws;
        let mut k = j;
        while k < obstacles.len() && obstacles[k].0 < we {
            if obstacles[k].0 > cur && !f(cur, obstacles[k].0) {
                return;
            }
            cur = cur.max(obstacles[k].1);
            k += 1;
        }
        if cur < we && !f(cur, we) {
            return;
        }
    }
}

/// Sorts intervals and merges overlapping or touching ones.
pub(crate) fn merge_intervals(v: &mut Vec<(u64, u64)>) {
    v.retain(|&(a, b)| a < b);
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for &(a, b) in v.iter() {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    *v = out;
}

/// A static index over the items' lifetimes answering "which items are live
/// at some time in `[s, e)`" in `O(log n + k)`.
#[derive(Debug)]
pub(crate) struct TimeIndex {
    order: Vec<u32>,
    starts: Vec<u32>,
    max_end: Vec<u32>,
    leaves: usize,
}

impl TimeIndex {
    pub fn new(items: &[Item]) -> TimeIndex {
        let mut order: Vec<u32> = (0..items.len() as u32)
            .filter(|&i| items[i as usize].live())
            .collect();
        order.sort_by_key(|&i| (items[i as usize].start, i));
        let starts: Vec<u32> = order.iter().map(|&i| items[i as usize].start).collect();
        let leaves = order.len().next_power_of_two().max(1);
        let mut max_end = vec![0u32; 2 * leaves];
        for (k, &i) in order.iter().enumerate() {
            max_end[leaves + k] = items[i as usize].end;
        }
        for n in (1..leaves).rev() {
            max_end[n] = max_end[2 * n].max(max_end[2 * n + 1]);
        }
        TimeIndex {
            order,
            starts,
            max_end,
            leaves,
        }
    }

    /// Appends to `out` every live item with `start < e` and `end > s`.
    pub fn query(&self, s: u32, e: u32, out: &mut Vec<u32>) {
        let prefix = self.starts.partition_point(|&x| x < e);
        if prefix == 0 {
            return;
        }
        let mut stack: SmallVec<[(usize, usize, usize); 64]> = SmallVec::new();
        stack.push((1, 0, self.leaves));
        while let Some((node, lo, hi)) = stack.pop() {
            if lo >= prefix || self.max_end[node] <= s {
                continue;
            }
            if hi - lo == 1 {
                out.push(self.order[lo]);
                continue;
            }
            let mid = (lo + hi) / 2;
            stack.push((2 * node + 1, mid, hi));
            stack.push((2 * node, lo, mid));
        }
    }
}
