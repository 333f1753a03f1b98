//! The region relaxation: a proof that a tile cannot be placed because no
//! split of its items between the address windows fits every step.
//!
//! An item lies inside one of its windows for its whole life (windows are
//! already split at region boundaries, and nothing may straddle one). So a
//! placement gives every item a window, and at every time section the
//! items given a window, with the fixed items inside it, take at most the
//! window's bytes. The lower bound only compares each section's total
//! with the total space; here the split must be the same at every section
//! an item lives through. When no split exists, no placement does: the
//! proof ignores alignment, separation and where in its window an item
//! sits, each of which only makes placing harder.
//!
//! On IPU21 standard memory has two windows, region 0 beside the support
//! memory and region 1, which interleaved items must use. SigLIP so400m's text tower at batch 42 left
//! such a tile (1186) undecided after 200,000 exact-search nodes; no split
//! of its 71 requests fits, which this search shows in a few nodes.
//!
//! The search is a depth-first assignment of the items, largest first, to
//! the windows they fit, checked section by section, with two prunings:
//! at every section the bytes still to assign must fit the room left in
//! all windows together, and of interchangeable items (same size, life and
//! windows) each takes a window no earlier than the one before it. It runs
//! within a node budget and says `Unknown` when the budget ends first.

use crate::arena::Arena;

/// How the relaxation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// Some split of the items fits every section (a placement may still
    /// not exist).
    Fits,
    /// No split fits: the tile cannot be placed.
    Impossible,
    /// The node budget ended first, or the windows overlap without being
    /// equal (the relaxation does not apply).
    Unknown,
}

/// One free item: its size, life and the windows (bins) it fits.
struct Piece {
    size: u64,
    start: usize,
    end: usize,
    bins: Vec<usize>,
}

/// Searches for a split of `arena`'s free items between its windows within
/// `max_nodes` nodes; returns how it ended and the nodes used.
pub(crate) fn split_between_windows(arena: &Arena, max_nodes: u64) -> (Split, u64) {
    let Some(bins) = bins(arena) else {
        return (Split::Unknown, 0);
    };
    if bins.len() < 2 {
        // One window: the lower bound already says all this does.
        return (Split::Unknown, 0);
    }
    let sections = arena.sections as usize;
    // Room per bin and section: its bytes minus the fixed items in it.
    let mut room: Vec<Vec<i128>> = bins
        .iter()
        .map(|&(a, b)| vec![i128::from(b - a); sections])
        .collect();
    let mut pieces = Vec::new();
    for it in arena.items.iter().filter(|it| it.live() && it.size > 0) {
        let (s, e) = (it.start as usize, (it.end as usize).min(sections));
        if let Some(at) = it.fixed {
            let end = at.saturating_add(it.size);
            for (k, &(a, b)) in bins.iter().enumerate() {
                let overlap = end.min(b).saturating_sub(at.max(a));
                for r in &mut room[k][s..e] {
                    *r -= i128::from(overlap);
                }
            }
            continue;
        }
        let windows = arena
            .window_sets
            .get(it.windows as usize)
            .map_or(&[][..], Vec::as_slice);
        let fits: Vec<usize> = windows
            .iter()
            .filter(|&&(a, b)| b - a >= it.size)
            .filter_map(|w| bins.iter().position(|b| b == w))
            .collect();
        if fits.is_empty() {
            // Larger than every window: the tile is impossible, but the
            // gap test says so better.
            return (Split::Unknown, 0);
        }
        pieces.push(Piece {
            size: it.size,
            start: s,
            end: e,
            bins: fits,
        });
    }
    // Forced pieces first, then the largest.
    pieces.sort_by(|p, q| {
        (p.bins.len() > 1, q.size, p.start, p.end).cmp(&(q.bins.len() > 1, p.size, q.start, q.end))
    });
    let mut left = vec![0i128; sections];
    for p in &pieces {
        for l in &mut left[p.start..p.end] {
            *l += i128::from(p.size);
        }
    }
    let mut search = Search {
        pieces: &pieces,
        room,
        left,
        nodes: 0,
        max_nodes,
        chosen: vec![usize::MAX; pieces.len()],
    };
    let split = match search.assign(0) {
        Some(true) => Split::Fits,
        Some(false) => Split::Impossible,
        None => Split::Unknown,
    };
    (split, search.nodes)
}

/// The windows of `arena` as bins, if every two are equal or disjoint.
fn bins(arena: &Arena) -> Option<Vec<(u64, u64)>> {
    let mut all: Vec<(u64, u64)> = arena.window_sets.iter().flatten().copied().collect();
    all.sort_unstable();
    all.dedup();
    let disjoint = all.windows(2).all(|w| w[0].1 <= w[1].0);
    disjoint.then_some(all)
}

/// The depth-first search's state.
struct Search<'a> {
    pieces: &'a [Piece],
    /// Room left per bin and section.
    room: Vec<Vec<i128>>,
    /// Bytes not yet assigned per section.
    left: Vec<i128>,
    nodes: u64,
    max_nodes: u64,
    /// The bin each assigned piece took.
    chosen: Vec<usize>,
}

impl Search<'_> {
    /// Assigns pieces `k..`: `Some(true)` when a split fits, `Some(false)`
    /// when none does, `None` when the budget ended.
    fn assign(&mut self, k: usize) -> Option<bool> {
        let Some(p) = self.pieces.get(k) else {
            return Some(true);
        };
        self.nodes += 1;
        if self.nodes > self.max_nodes {
            return None;
        }
        // Interchangeable with the piece before: no earlier bin than its.
        let floor = match k.checked_sub(1).map(|j| (j, &self.pieces[j])) {
            Some((j, q))
                if q.size == p.size && q.start == p.start && q.end == p.end && q.bins == p.bins =>
            {
                self.chosen[j]
            }
            _ => 0,
        };
        for &b in p.bins.iter().filter(|&&b| b >= floor) {
            if self.room[b][p.start..p.end]
                .iter()
                .any(|&r| r < i128::from(p.size))
            {
                continue;
            }
            self.take(p, b, 1);
            self.chosen[k] = b;
            if self.fits_in_total(p) {
                match self.assign(k + 1) {
                    Some(true) => return Some(true),
                    // The search stops here; the state is not needed.
                    None => return None,
                    Some(false) => {}
                }
            }
            self.take(p, b, -1);
        }
        Some(false)
    }

    /// Moves piece `p` into (`sign` 1) or out of (`sign` -1) bin `b`.
    fn take(&mut self, p: &Piece, b: usize, sign: i128) {
        let bytes = sign * i128::from(p.size);
        for r in &mut self.room[b][p.start..p.end] {
            *r -= bytes;
        }
        for l in &mut self.left[p.start..p.end] {
            *l -= bytes;
        }
    }

    /// Whether, in the sections `p` lives through, the bytes still to
    /// assign fit the room left in all bins together (the other sections
    /// did not change).
    fn fits_in_total(&self, p: &Piece) -> bool {
        (p.start..p.end).all(|s| {
            let room: i128 = self.room.iter().map(|r| r[s].max(0)).sum();
            self.left[s] <= room
        })
    }
}

#[cfg(test)]
mod tests {
    use smallvec::SmallVec;

    use super::*;
    use crate::arena::Item;

    fn item(size: u64, start: u32, end: u32, windows: u32) -> Item {
        Item {
            start,
            end,
            size,
            align: 1,
            windows,
            fixed: None,
            partners: SmallVec::new(),
        }
    }

    /// Two windows of 100 bytes; window set 0 may use both, set 1 only the
    /// second.
    fn arena(items: Vec<Item>) -> Arena {
        Arena {
            items,
            sections: 3,
            times: vec![0, 1, 2, 3],
            window_sets: vec![vec![(0, 100), (100, 200)], vec![(100, 200)]],
            elements: Vec::new(),
            base: 0,
            limit: 200,
        }
    }

    #[test]
    fn three_items_of_sixty_have_no_split_between_two_windows_of_a_hundred() {
        // 180 bytes against 200, so the lower bound passes; but each window
        // holds one item of 60.
        let a = arena(vec![
            item(60, 0, 3, 0),
            item(60, 0, 3, 0),
            item(60, 0, 3, 0),
        ]);
        assert_eq!(split_between_windows(&a, 1000).0, Split::Impossible);
    }

    #[test]
    fn a_split_is_found_where_one_exists() {
        let a = arena(vec![
            item(60, 0, 3, 0),
            item(40, 0, 3, 0),
            item(60, 0, 3, 1),
            item(40, 0, 3, 0),
        ]);
        assert_eq!(split_between_windows(&a, 1000).0, Split::Fits);
    }

    #[test]
    fn lifetimes_count_per_section() {
        // 60 bytes in the second window only (set 1) in sections 0..2: the
        // two 50s cannot join it there, so both take the first window,
        // which they fill; a third 50 living throughout fits nowhere.
        let mut items = vec![item(60, 0, 2, 1), item(50, 1, 3, 0), item(50, 0, 3, 0)];
        assert_eq!(
            split_between_windows(&arena(items.clone()), 1000).0,
            Split::Fits
        );
        items.push(item(50, 0, 3, 0));
        assert_eq!(
            split_between_windows(&arena(items), 1000).0,
            Split::Impossible
        );
    }

    #[test]
    fn fixed_items_take_room_and_the_budget_is_kept() {
        let mut fixed = item(50, 0, 3, 0);
        fixed.fixed = Some(0);
        let a = arena(vec![fixed, item(60, 0, 3, 0), item(60, 0, 3, 0)]);
        assert_eq!(split_between_windows(&a, 1000).0, Split::Impossible);
        let many = arena((0..40).map(|_| item(5, 0, 3, 0)).collect());
        // Interchangeable items: a split is found without enumerating.
        let (split, nodes) = split_between_windows(&many, 1000);
        assert_eq!(split, Split::Fits);
        assert!(nodes <= 41);
        let (split, nodes) = split_between_windows(&a, 0);
        assert_eq!((split, nodes), (Split::Unknown, 1));
    }
}
