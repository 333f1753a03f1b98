//! Holes: the valley search where sections have slack.
//!
//! With slack, the byte just above the skyline at a valley's edge is the
//! bottom of an item that starts (or ends) there, as without, or it is
//! empty. So each edge whose section has slack left gets one more child,
//! [`HOLE`]: the section is left empty from the valley's level up to the
//! lowest address an item can still cover it at ([`Valley::hole_top`]),
//! and its slack shrinks by as much. The skyline then bounds the decided
//! bytes, items' and holes', and the rest of the search is unchanged:
//! the state is the skyline and the unplaced set (a section's slack
//! follows from them; with the rule below, also the holes just under the
//! skyline), the valley test lets a section with slack leave
//! its byte at the level empty and its bytes below the lower wall
//! uncovered up to its slack, and a hole's failure depends on its own
//! section. Without slack anywhere no edge has a hole and the search is
//! the one of `valley.rs`. It stays complete: a pushed-down placement
//! fills or leaves empty each edge byte the search branches on.
//!
//! Holes are tried last, after every item of their edge, and an edge's
//! hole counts as one more candidate when the search picks the edge with
//! the fewest, so it works where sections are full first.
//!
//! An item is never placed on holes alone ([`Valley::floats`]): with a
//! hole of its alignment or more below it in every section of its life it
//! could move down, which a pushed-down placement rules out. Without this
//! rule every way of stacking holes and then an item over an empty region
//! was searched. The bytes of hole below each section's skyline are part
//! of the failure memo's state, since the rule reads them. Measured with
//! `cargo xtask alloc bench --timeout 10 --class guillotine-near`:
//! gnear-n300 from 3.7 s to 2.0 s (the valley search's nodes from 1.90 M
//! to 0.91 M); alone, with 8 M nodes for each of its four configurations,
//! the search now places gnear-n600 in one of them (1.84 M nodes), where
//! it placed it in none before.
//!
//! The bound reads the items covering the edge's section from an index
//! (`Valley::covering`), built where sections have slack and its lists
//! stay within the adjacency limit, else from a scan of every item: with
//! it the search runs 57 % more nodes on gnear-n600 in 10 s.

use super::{Edge, UNPLACED, Valley, cell, hole_cell};
use crate::arena::align_up;

/// The child that leaves the edge's byte empty: a hole in its section up
/// to the lowest address an item there can sit at ([`Valley::hole_top`]).
pub(super) const HOLE: u32 = u32::MAX;

impl Edge {
    /// The section the edge's byte lies in.
    pub(super) fn section(&self) -> usize {
        if self.from_left {
            self.valley.0
        } else {
            self.valley.1 - 1
        }
    }
}

impl Valley<'_> {
    /// Where a hole at `edge` ends: the lowest address at which an item
    /// can cover the edge's section `s` once its byte is empty, or `None`
    /// if the section has not the slack for it.
    ///
    /// In a pushed-down completion the lowest item `x` above the empty
    /// byte cannot move down. If `x` reaches past the valley it sits above
    /// a wall, and so does anything that blocks it from outside the
    /// valley: the hole reaches at least the lower wall. If `x` lies
    /// within the valley, every section of its life is at the valley's
    /// level, so what blocks it is an unplaced item `z` below it, live
    /// beside it, at or above the level (`x` sits at `z`'s top or higher;
    /// if `z` reaches past the valley, above a wall again), or, only if `x`
    /// is aligned to more than a byte, the decided bytes below the level
    /// (`x` then sits at its first aligned address above the level). An
    /// item within the valley with neither cannot be that `x`. Only items
    /// within the valley and its walls are read, so the bound depends on
    /// the edge's region alone, as a failure's reason must.
    pub(super) fn hole_top(&self, edge: &Edge) -> Option<u64> {
        let s = edge.section();
        let p = self.p;
        let top = match self.covering.get(s) {
            Some(list) => self.lowest_cover(edge, list.iter().map(|&x| x as usize)),
            // Too many entries to index: scan the items.
            None => self.lowest_cover(
                edge,
                (0..p.ids.len()).filter(|&x| p.start[x] as usize <= s && s < p.end[x] as usize),
            ),
        };
        let depth = top.checked_sub(edge.level)?;
        (depth > 0 && depth <= self.slack[s]).then_some(top)
    }

    /// The bound of [`Valley::hole_top`] over `covering`, the items that
    /// cover the edge's section.
    fn lowest_cover(&self, edge: &Edge, covering: impl Iterator<Item = usize>) -> u64 {
        let (a, b) = edge.valley;
        let h = edge.level;
        let p = self.p;
        let sections = self.sky.len();
        let wall = |t: Option<usize>| t.map_or(self.top, |t| self.sky[t]);
        let low = wall(a.checked_sub(1))
            .min(wall((b < sections).then_some(b)))
            .min(self.top);
        let within = |k: usize| {
            self.offsets[k] == UNPLACED && p.start[k] as usize >= a && p.end[k] as usize <= b
        };
        let mut top = low;
        for x in covering.filter(|&x| within(x)) {
            let (r0, r1) = (p.adj_start[x] as usize, p.adj_start[x + 1] as usize);
            let on_item = p.adj[r0..r1]
                .iter()
                .map(|&z| z as usize)
                .filter(|&z| within(z))
                .map(|z| h.saturating_add(p.size[z]))
                .min();
            let aligned = (p.align[x] > 1)
                .then(|| align_up(h.saturating_add(1), p.align[x]))
                .flatten();
            for y in [on_item, aligned].into_iter().flatten() {
                top = top.min(y);
            }
        }
        top
    }

    /// Whether item `k`, placed on the skyline now (every section of its
    /// life is at one level when it is a candidate), would rest on holes
    /// alone: holes of at least its alignment below it in every section,
    /// so it could move down. A pushed-down placement has none; the path
    /// to one never places an item on holes alone, since the bytes below
    /// it are decided as that placement has them.
    pub(super) fn floats(&self, k: usize) -> bool {
        let align = self.p.align[k];
        !self.hole_below.is_empty()
            && (self.p.start[k] as usize..self.p.end[k] as usize)
                .all(|s| self.hole_below[s] >= align)
    }

    /// Leaves section `s` empty from `from` to `to`.
    pub(super) fn open_hole(&mut self, s: usize, from: u64, to: u64) {
        self.sky[s] = to;
        self.slack[s] -= to - from;
        let below = self.hole_below[s];
        self.hole_below[s] = below + (to - from);
        let delta =
            cell(s, from) ^ cell(s, to) ^ hole_cell(s, below) ^ hole_cell(s, below + (to - from));
        self.hash ^= delta;
        self.regions.section(s, delta);
        self.recent = Some((s, s + 1));
    }

    /// Undoes [`Valley::open_hole`].
    pub(super) fn close_hole(&mut self, s: usize, from: u64, to: u64) {
        debug_assert_eq!(self.sky[s], to);
        self.sky[s] = from;
        self.slack[s] += to - from;
        let below = self.hole_below[s];
        self.hole_below[s] = below - (to - from);
        let delta =
            cell(s, from) ^ cell(s, to) ^ hole_cell(s, below) ^ hole_cell(s, below - (to - from));
        self.hash ^= delta;
        self.regions.section(s, delta);
    }
}
