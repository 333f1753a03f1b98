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
    /// The time at which each section starts, and one past the last
    /// (`sections + 1` values, ascending): lifetimes in the caller's units,
    /// which the exact search's branching orders weigh by.
    pub times: Vec<u64>,
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
    v.sort_unstable_by_key(|p| p.0);
    // Merge in place: `w` is the last kept interval.
    let mut w = 0;
    for k in 1..v.len() {
        if v[k].0 <= v[w].1 {
            v[w].1 = v[w].1.max(v[k].1);
        } else {
            w += 1;
            v[w] = v[k];
        }
    }
    v.truncate((w + 1).min(v.len()));
}

/// A static centred interval tree over the items' lifetimes answering
/// "which items are live at some section in `[s, e)`" in `O(log S + k)`.
///
/// Each node owns the items live at its centre section, sorted by start and
/// by end; items wholly before or after the centre go to its children.
#[derive(Debug)]
pub(crate) struct TimeIndex {
    nodes: Vec<TimeNode>,
    by_start: Vec<(u32, u32)>,
    by_end: Vec<(u32, u32)>,
}

#[derive(Debug)]
struct TimeNode {
    centre: u32,
    from: u32,
    to: u32,
    left: u32,
    right: u32,
}

const NO_NODE: u32 = u32::MAX;

impl TimeIndex {
    pub fn new(items: &[Item]) -> TimeIndex {
        let live: Vec<u32> = (0..items.len() as u32)
            .filter(|&i| items[i as usize].live())
            .collect();
        let sections = live
            .iter()
            .map(|&i| items[i as usize].end)
            .max()
            .unwrap_or(0);
        let mut index = TimeIndex {
            nodes: Vec::new(),
            by_start: Vec::with_capacity(live.len()),
            by_end: Vec::with_capacity(live.len()),
        };
        // Explicit work list: (items, lo, hi, parent, is_right).
        let mut work: Vec<(Vec<u32>, u32, u32, u32, bool)> =
            vec![(live, 0, sections, NO_NODE, false)];
        while let Some((list, lo, hi, parent, is_right)) = work.pop() {
            if list.is_empty() || lo >= hi {
                continue;
            }
            let centre = lo + (hi - lo) / 2;
            let (mut here, mut before, mut after) = (Vec::new(), Vec::new(), Vec::new());
            for i in list {
                let it = &items[i as usize];
                if it.end <= centre {
                    before.push(i);
                } else if it.start > centre {
                    after.push(i);
                } else {
                    here.push(i);
                }
            }
            let from = index.by_start.len() as u32;
            let mut starts: Vec<(u32, u32)> =
                here.iter().map(|&i| (items[i as usize].start, i)).collect();
            starts.sort_unstable();
            let mut ends: Vec<(u32, u32)> =
                here.iter().map(|&i| (items[i as usize].end, i)).collect();
            ends.sort_unstable_by(|a, b| b.cmp(a));
            index.by_start.extend(starts);
            index.by_end.extend(ends);
            let node = index.nodes.len() as u32;
            index.nodes.push(TimeNode {
                centre,
                from,
                to: index.by_start.len() as u32,
                left: NO_NODE,
                right: NO_NODE,
            });
            if parent != NO_NODE {
                if is_right {
                    index.nodes[parent as usize].right = node;
                } else {
                    index.nodes[parent as usize].left = node;
                }
            }
            work.push((before, lo, centre, node, false));
            work.push((after, centre + 1, hi, node, true));
        }
        index
    }

    /// Appends to `out` every live item with `start < e` and `end > s`.
    pub fn query(&self, s: u32, e: u32, out: &mut Vec<u32>) {
        if self.nodes.is_empty() || s >= e {
            return;
        }
        let mut stack: SmallVec<[u32; 64]> = SmallVec::new();
        stack.push(0);
        while let Some(n) = stack.pop() {
            let node = &self.nodes[n as usize];
            let (from, to) = (node.from as usize, node.to as usize);
            let c = node.centre;
            if s <= c && c < e {
                out.extend(self.by_start[from..to].iter().map(|p| p.1));
                if node.left != NO_NODE {
                    stack.push(node.left);
                }
                if node.right != NO_NODE {
                    stack.push(node.right);
                }
            } else if e <= c {
                for &(start, i) in &self.by_start[from..to] {
                    if start >= e {
                        break;
                    }
                    out.push(i);
                }
                if node.left != NO_NODE {
                    stack.push(node.left);
                }
            } else {
                for &(end, i) in &self.by_end[from..to] {
                    if end <= s {
                        break;
                    }
                    out.push(i);
                }
                if node.right != NO_NODE {
                    stack.push(node.right);
                }
            }
        }
    }
}

/// The time-overlap neighbours of every item, for the greedy passes: a
/// compressed adjacency list when it stays small (every pass then reads it
/// instead of querying), otherwise the interval tree.
#[derive(Debug)]
pub(crate) struct Neighbours {
    index: Option<TimeIndex>,
    csr: Option<(Vec<u32>, Vec<u32>)>,
}

/// The most adjacency entries kept in memory (128 MiB of `u32`).
const MAX_ADJACENCY: usize = 32 << 20;

impl Neighbours {
    pub fn new(items: &[Item]) -> Neighbours {
        // A sweep in start order: every item still active when another
        // starts overlaps it. Pairs are counted into a compressed list.
        let mut order: Vec<u32> = (0..items.len() as u32)
            .filter(|&i| items[i as usize].live())
            .collect();
        order.sort_unstable_by_key(|&i| (items[i as usize].start, i));
        let mut active: Vec<u32> = Vec::new();
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        let mut ok = true;
        for &i in &order {
            let start = items[i as usize].start;
            active.retain(|&j| items[j as usize].end > start);
            for &j in &active {
                pairs.push((i, j));
            }
            if pairs.len() > MAX_ADJACENCY / 2 {
                ok = false;
                break;
            }
            active.push(i);
        }
        if !ok {
            return Neighbours {
                index: Some(TimeIndex::new(items)),
                csr: None,
            };
        }
        let mut starts = vec![0u32; items.len() + 1];
        for &(a, b) in &pairs {
            starts[a as usize + 1] += 1;
            starts[b as usize + 1] += 1;
        }
        for k in 0..items.len() {
            starts[k + 1] += starts[k];
        }
        let mut fill = starts.clone();
        let mut list = vec![0u32; pairs.len() * 2];
        for &(a, b) in &pairs {
            list[fill[a as usize] as usize] = b;
            fill[a as usize] += 1;
            list[fill[b as usize] as usize] = a;
            fill[b as usize] += 1;
        }
        Neighbours {
            index: None,
            csr: Some((starts, list)),
        }
    }

    /// The items live at some section where item `i` is live.
    pub fn of<'a>(&'a self, i: u32, items: &[Item], scratch: &'a mut Vec<u32>) -> &'a [u32] {
        match &self.csr {
            Some((starts, list)) => {
                let (a, b) = (starts[i as usize] as usize, starts[i as usize + 1] as usize);
                &list[a..b]
            }
            None => {
                scratch.clear();
                let it = &items[i as usize];
                if let (true, Some(index)) = (it.live(), &self.index) {
                    index.query(it.start, it.end, scratch);
                }
                scratch.retain(|&q| q != i);
                scratch
            }
        }
    }
}
