//! Why a state of the valley search fails: the sections a failure
//! depends on, and those an edge's candidates read.
//!
//! A failure carries the sections it depends on ([`Sections`]): a valley
//! that cannot be filled depends on its sections and its walls (its extent,
//! its candidates and its tests read nothing else); a node whose children
//! all failed depends on its edge and their sections, where an edge in a
//! full section depends on its section, the wall beside it and the lives
//! of the unplaced items that start (end) there ([`Valley::edge_reason`]),
//! and one with slack on its whole valley. A state that agrees with a
//! failed one there (the skyline, and the items that cover those sections)
//! fails too, since any completion must cover the edge with one of the
//! same candidates. So when a child's failure depends on none of the
//! sections the child covers, its parent's state fails for the same reason
//! and the parent's other children are not tried (conflict-directed
//! backjumping): a region that failed is not filled again under each
//! choice made since in a region it does not touch.
//!
//! An edge's reason was its whole valley at first. A wide valley, whose
//! far end is being filled by choices in another region, then tied a
//! failure at one edge to all of them: on gcut-n1000, with the witness's
//! first 439 placements forced, refuting the wrong child at the next edge
//! took 722,063 nodes, among stacking orders of small items a hundred
//! sections away; with the edge's own reason, 2,536. Measured with `cargo
//! xtask alloc bench --class guillotine --sizes 800,1000 --seeds 6
//! --timeout 10` (one binary, the changes switched off for the columns
//! before them):
//!
//! | class | before | failures by region (`learn.rs`) | and edge reasons |
//! |-------|--------|-------------------------------|------------------|
//! | gcut, 800 and 1000 | 8 of 12 | 9 of 12 | 10 of 12 |
//! | gcut-n1000 (the default suite's) | unknown | unknown | 1.6 s |
//! | gnear, 800 and 1000 (`--class guillotine-near`) | 5 of 12 | 5 of 12 | 5 of 12 |
//!
//! The near-zero-slack cuts do not gain: their edges mostly have slack.

use smallvec::SmallVec;

use super::{Edge, UNPLACED, Valley};

/// The sections `lo..hi` a failure depends on: it holds in any state with
/// the same skyline there and the same items placed among those that
/// cover any of them (which also fixes each section's slack).
pub(super) type Reason = (u32, u32);

/// The sections of valley `a..b` with its walls: what a test of the valley
/// reads (`sections` in all).
pub(super) fn valley_region((a, b): (usize, usize), sections: usize) -> Reason {
    // Sections fit in `u32`: the prepared arena indexes them so.
    (a.saturating_sub(1) as u32, (b + 1).min(sections) as u32)
}

/// A set of sections a failure depends on (a bit per section).
#[derive(Clone, Debug, Default)]
pub(super) struct Sections(SmallVec<[u64; 8]>);

impl Sections {
    pub(super) fn range(sections: usize, (lo, hi): Reason) -> Sections {
        let mut set = Sections(SmallVec::from_elem(0, sections.div_ceil(64)));
        for s in lo as usize..hi as usize {
            set.0[s / 64] |= 1 << (s % 64);
        }
        set
    }

    pub(super) fn union(&mut self, other: &Sections) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }

    /// Whether any section of `lo..hi` is in the set.
    pub(super) fn meets(&self, lo: usize, hi: usize) -> bool {
        (lo..hi).any(|s| self.0[s / 64] >> (s % 64) & 1 == 1)
    }

    /// The smallest range holding the set.
    pub(super) fn hull(&self) -> Reason {
        let mut lo = None;
        let mut hi = 0;
        for (w, &bits) in self.0.iter().enumerate() {
            if bits != 0 {
                let first = w * 64 + bits.trailing_zeros() as usize;
                lo.get_or_insert(first);
                hi = w * 64 + 64 - bits.leading_zeros() as usize;
            }
        }
        (lo.unwrap_or(0) as u32, hi as u32)
    }
}

impl Valley<'_> {
    /// The sections an edge's candidates depend on: the edge's section,
    /// the wall beside it and the lives of the unplaced items that start
    /// (end) there. An item is a candidate exactly when the skyline is at
    /// the edge's level in every section of its life (it cannot reach
    /// past a wall), so in a state that agrees there the edge has the
    /// same candidates, however far the valley reaches on its other side:
    /// a wide valley whose far end changes does not make a failure at
    /// this edge depend on it. A hole's bound reads the whole valley.
    pub(super) fn edge_reason(&self, edge: &Edge) -> Reason {
        let (a, b) = edge.valley;
        let sections = self.sky.len();
        if self.slack[edge.section()] > 0 {
            return valley_region(edge.valley, sections);
        }
        let p = self.p;
        let unplaced = |k: &&u32| self.offsets[**k as usize] == UNPLACED;
        // Sections fit in `u32`: the prepared arena indexes them so.
        if edge.from_left {
            let hi = self.by_start[a]
                .iter()
                .filter(unplaced)
                .map(|&k| p.end[k as usize] as usize)
                .fold(a + 1, usize::max);
            (a.saturating_sub(1) as u32, hi.min(sections) as u32)
        } else {
            let lo = self.by_end[b]
                .iter()
                .filter(unplaced)
                .map(|&k| p.start[k as usize] as usize)
                .fold(b - 1, usize::min);
            (lo as u32, (b + 1).min(sections) as u32)
        }
    }
}
