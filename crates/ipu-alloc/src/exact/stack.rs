//! A reduction before the search: items live whenever anything is live
//! (a repeat's stacked weights, say) are fixed at the bottom of the
//! arena, one above the other, where that loses no placement.
//!
//! The argument: take any placement and such an item `x` at address `a`.
//! Nothing else is ever live in `[a, a + s)`, so every item below `a`
//! ends at or below `a`. Moving the items whose address lies in
//! `[b, a)` up by `s` and `x` down to `b` keeps every pair apart, and it
//! keeps every item inside its window and aligned when
//!
//! - every free item's windows are one interval, all ending at the same
//!   address (moving up never leaves them), `x`'s starting at or below `b`;
//! - `s` is a multiple of every free item's alignment and `b` of `x`'s;
//! - nothing lies below `b` that could straddle it: `b` is the end of a
//!   solid block of fixed items live throughout, or the arena's base, and
//!   no fixed item lies elsewhere;
//! - no item has separation partners (moving changes memory elements;
//!   with partners the reduced arena is only tried first, see [`Stacked`]);
//! - no window set is split where memory regions meet (an item moved up
//!   could straddle the boundary; with such sets, too, the reduced arena
//!   is only tried first), and each fixed item lies inside one window.
//!
//! Applied item by item (the placed ones joining the solid block), so a
//! placement of the reduced arena is one of the original and a proof that
//! the reduced arena has none is a proof for the original. It leaves the
//! search the transient items only: on a tile nearly full of lifelong
//! weights, the fragmented gaps between them are what defeats it.

use crate::arena::{Arena, align_up, merge_intervals};

/// An arena with lifelong items fixed at the bottom.
pub(super) struct Stacked {
    /// The reduced arena.
    pub arena: Arena,
    /// Whether it loses no placement. With separation partners it may
    /// (moving an item changes its memory elements): the reduced arena is
    /// then only a first attempt, whose placements are the original's but
    /// whose failure proves nothing.
    pub exact: bool,
}

/// `arena` with its lifelong items fixed at the bottom, or `None` when the
/// reduction does not apply or fixes nothing.
pub(super) fn stack_lifelong(arena: &Arena) -> Option<Stacked> {
    // Moving items up by `s` keeps them inside their windows only when
    // each window set is one interval: a set split where memory regions
    // meet (touching intervals) has a boundary an item must not straddle,
    // which moving it may make it do. With such sets the reduced arena is
    // only a first attempt.
    let exact = arena.items.iter().all(|it| it.partners.is_empty())
        && arena.window_sets.iter().all(|set| set.len() <= 1);
    let live = || arena.items.iter().filter(|it| it.live() && it.size > 0);
    let busy_start = live().map(|it| it.start).min()?;
    let busy_end = live().map(|it| it.end).max()?;
    let lifelong = |it: &crate::arena::Item| {
        it.live() && it.size > 0 && it.start <= busy_start && it.end >= busy_end
    };
    // The solid block of fixed items at the bottom, and nothing fixed
    // elsewhere.
    let mut fixed: Vec<(u64, u64)> = Vec::new();
    for it in live().filter(|it| it.fixed.is_some()) {
        if !lifelong(it) {
            return None;
        }
        let at = it.fixed?;
        fixed.push((at, at.checked_add(it.size)?));
    }
    merge_intervals(&mut fixed);
    let mut bottom = match fixed.as_slice() {
        [] => arena.base,
        [(lo, hi)] if *lo <= arena.base => *hi,
        _ => return None,
    };
    // One window interval per free item, all ending at the same address.
    let mut top = None;
    let mut align = 1u64;
    for it in arena.items.iter().filter(|it| it.fixed.is_none()) {
        let (_, hi) = span(&arena.window_sets[it.windows as usize])?;
        if *top.get_or_insert(hi) != hi {
            return None;
        }
        align = align.max(it.align);
    }
    let mut out = arena.clone();
    let mut order: Vec<usize> = (0..arena.items.len())
        .filter(|&i| arena.items[i].fixed.is_none() && lifelong(&arena.items[i]))
        .collect();
    // Largest first, then by index: a fixed order, so the result does not
    // depend on anything but the arena.
    order.sort_by_key(|&i| (std::cmp::Reverse(arena.items[i].size), i));
    let mut stacked = 0usize;
    for i in order {
        let it = &arena.items[i];
        let windows = &arena.window_sets[it.windows as usize];
        let end = bottom.checked_add(it.size)?;
        // Inside one window: touching windows meet at a region boundary,
        // which an item may not straddle.
        let inside = windows.iter().any(|&(lo, hi)| lo <= bottom && end <= hi);
        let fits = it.size % align == 0
            && align_up(bottom, it.align) == Some(bottom)
            && inside
            && top.is_some_and(|t| end <= t)
            && end <= arena.limit;
        if !fits {
            continue;
        }
        out.items[i].fixed = Some(bottom);
        bottom = end;
        stacked += 1;
    }
    (stacked > 0).then_some(Stacked { arena: out, exact })
}

/// The one interval a window set covers, if it is contiguous.
fn span(windows: &[(u64, u64)]) -> Option<(u64, u64)> {
    let (first, rest) = windows.split_first()?;
    let mut hi = first.1;
    for &(a, b) in rest {
        if a != hi {
            return None;
        }
        hi = b;
    }
    Some((first.0, hi))
}

#[cfg(test)]
mod tests {
    use super::stack_lifelong;
    use crate::csv::CsvProblem;
    use crate::exact::{ExactBudget, ExactOutcome, solve_exact};

    fn problem(rows: &str) -> CsvProblem {
        CsvProblem::parse(&format!("id,lower,upper,size,alignment,offset\n{rows}"))
            .expect("a valid problem")
    }

    /// Lifelong buffers between zero-slack transients are fixed at the
    /// bottom, largest first, and the search places the rest around them.
    #[test]
    fn lifelong_items_are_stacked_and_the_rest_placed_above() {
        let p = problem("t0,0,5,8,1,\nw0,0,10,2,1,\nt1,5,10,3,1,\nw1,0,10,6,1,\nt2,5,10,5,1,\n");
        let arena = p.arena(16);
        let stacked = stack_lifelong(&arena).expect("two lifelong items");
        assert!(stacked.exact);
        let fixed: Vec<_> = stacked.arena.items.iter().map(|it| it.fixed).collect();
        assert_eq!(fixed, [None, Some(6), None, Some(0), None]);
        let budget = ExactBudget {
            max_nodes: 10_000,
            deadline: None,
            stop: None,
        };
        match solve_exact(&arena, budget).outcome {
            ExactOutcome::Found(offsets) => {
                assert_eq!((offsets[3], offsets[1]), (0, 6));
                assert!(p.check(16, &offsets).is_ok(), "{offsets:?}");
            }
            other => panic!("expected a placement, got {other:?}"),
        }
    }

    /// Windows split where memory regions meet: a lifelong item is not
    /// fixed across the boundary, and the reduction claims nothing.
    #[test]
    fn lifelong_items_do_not_straddle_a_region_boundary() {
        let p = problem("w0,0,10,6,1,\nw1,0,10,6,1,\nt,0,5,2,1,\n");
        let mut arena = p.arena(16);
        for set in &mut arena.window_sets {
            *set = vec![(0, 8), (8, 16)];
        }
        let stacked = stack_lifelong(&arena).expect("one lifelong item fits below 8");
        assert!(!stacked.exact);
        let fixed: Vec<_> = stacked.arena.items.iter().map(|it| it.fixed).collect();
        // w0 at 0; w1 would end at 12 across the boundary at 8, so it stays
        // free for the search.
        assert_eq!(fixed, [Some(0), None, None]);
    }

    /// A fixed item above the bottom, or separation partners, keep the
    /// reduction from claiming it loses nothing.
    #[test]
    fn obstacles_above_the_bottom_stop_the_reduction() {
        let p = problem("f,0,10,2,1,4\nw,0,10,2,1,\nt,0,5,4,1,\n");
        assert!(stack_lifelong(&p.arena(16)).is_none());
        let mut arena = p.arena(16);
        arena.items[1].fixed = None;
        arena.items[0].fixed = None;
        arena.items[0].partners.push(2);
        arena.items[2].partners.push(0);
        let stacked = stack_lifelong(&arena).expect("lifelong items");
        assert!(!stacked.exact);
    }
}
