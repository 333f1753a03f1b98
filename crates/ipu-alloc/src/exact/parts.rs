//! Independent parts in time: an arena whose free items leave a section
//! boundary uncrossed is two problems, solved one after the other.
//!
//! No free item is live on both sides of such a boundary, so a placement
//! of each side is a placement of the whole, and a side with none proves
//! that the whole has none. Fixed items are obstacles in the sections
//! they cover, so one that crosses the boundary is cut in two, one piece
//! on each side, at the same address. Separation partners tie items
//! across time, so an arena with any is not split.
//!
//! The address-ordered search already solves such sides one after the
//! other within a run, but every restart of the portfolio, and every run
//! of the valley search, started again from the whole arena: a run that
//! had placed one side lost it when the other side's search was cut
//! short, and the heavy tails of the sides multiply. Lifelong items are
//! stacked first (`stack.rs`), so a tile whose weights live throughout
//! splits between the steps its transient buffers share; each part is
//! stacked and split again (an item live throughout a part goes to its
//! bottom), which on guillotine cuts rarely splits further.
//!
//! Measured with `cargo xtask alloc bench --class guillotine --sizes
//! 800,1000 --seeds 6 --timeout 10`, and the same with `--class
//! guillotine-near` (release, two threads; draws then seeded by their
//! place in `--sizes`, see `docs/ARCHITECTURE.md`), instances concluded
//! within 10 s before and after:
//!
//! | class, buffers | before | after |
//! |----------------|--------|-------|
//! | gcut, 800      | 6 of 6 (at most 5.4 s) | 6 of 6 (at most 1.9 s) |
//! | gcut, 1000     | 0 of 6 | 2 of 6 |
//! | gnear, 800     | 2 of 6 | 4 of 6 |
//! | gnear, 1000    | 0 of 6 | 2 of 6 |
//!
//! The default suite's gcut-n1000 and gnear-n1000 stayed unknown: their
//! largest parts hold 723 and 619 buffers. The first is placed since the
//! valley search's edge reasons (`valley.rs`); the second stays unknown.

use super::{
    ExactBudget, ExactOutcome, ExactReport, SearchStats, solve_portfolio, with_lifelong_stacked,
};
use crate::arena::{Arena, Item};
use crate::greedy::UNPLACED;

/// Parts with fewer items than this are searched by the one-thread
/// portfolio whatever the caller's.
const SMALL_PART: usize = 64;

/// One side: its arena (sections renumbered from 0) and, for each of its
/// items, the item of the whole arena it stands for.
struct Part {
    arena: Arena,
    items: Vec<u32>,
}

/// The parts of `arena` between the section boundaries no free live item
/// crosses, or `None` when there is only one (or the arena has separation
/// partners). Free items never live go to the first part.
fn time_parts(arena: &Arena) -> Option<Vec<Part>> {
    if arena.items.iter().any(|it| !it.partners.is_empty()) {
        return None;
    }
    let sections = arena.sections as usize;
    // By differences, in time linear in items and sections: crossing[b]
    // counts the free live items live in sections b - 1 and b, live[s]
    // those live in section s.
    let mut crossing = vec![0i64; sections + 1];
    let mut live = vec![0i64; sections + 1];
    for it in arena
        .items
        .iter()
        .filter(|it| it.fixed.is_none() && it.live())
    {
        let (s, e) = (it.start as usize, (it.end as usize).min(sections));
        if s >= e {
            continue;
        }
        crossing[s + 1] += 1;
        crossing[e] -= 1;
        live[s] += 1;
        live[e] -= 1;
    }
    // Runs of sections between uncrossed boundaries that hold a free item.
    let mut runs: Vec<(u32, u32)> = Vec::new();
    let (mut start, mut crossed, mut alive, mut busy) = (0, 0i64, 0i64, false);
    for b in 0..sections {
        if b > 0 {
            crossed += crossing[b];
            if crossed == 0 {
                if busy {
                    runs.push((start as u32, b as u32));
                }
                (start, busy) = (b, false);
            }
        }
        alive += live[b];
        busy |= alive > 0;
    }
    if busy {
        runs.push((start as u32, sections as u32));
    }
    if runs.len() < 2 {
        return None;
    }
    // An arena without a time per section boundary is left whole.
    let mut parts: Vec<Part> = runs
        .iter()
        .map(|&(lo, hi)| {
            Some(Part {
                arena: Arena {
                    items: Vec::new(),
                    sections: hi - lo,
                    times: arena.times.get(lo as usize..=hi as usize)?.to_vec(),
                    window_sets: arena.window_sets.clone(),
                    elements: arena.elements.clone(),
                    base: arena.base,
                    limit: arena.limit,
                },
                items: Vec::new(),
            })
        })
        .collect::<Option<_>>()?;
    for (i, it) in arena.items.iter().enumerate() {
        let id = u32::try_from(i).ok()?;
        if !it.live() {
            if it.fixed.is_none() {
                push(&mut parts[0], id, it, 0, 0);
            }
            continue;
        }
        // The parts the item's life meets: from the first ending after
        // its start (one for a free item, several for a fixed one).
        let first = runs.partition_point(|&(_, hi)| hi <= it.start);
        for (part, &(lo, hi)) in parts[first..].iter_mut().zip(&runs[first..]) {
            if lo >= it.end {
                break;
            }
            let (s, e) = (it.start.max(lo), it.end.min(hi));
            if s < e {
                push(part, id, it, s - lo, e - lo);
            }
        }
    }
    Some(parts)
}

/// Adds item `id` to `part`, live over its sections `start..end`.
fn push(part: &mut Part, id: u32, it: &Item, start: u32, end: u32) {
    part.arena.items.push(Item {
        start,
        end,
        ..it.clone()
    });
    part.items.push(id);
}

/// Runs `solve` on each independent part of `arena` in time (smallest
/// first, within what is left of the node budget) and joins their
/// placements; on the whole arena when it has one part. The first part
/// proved to have no placement proves the same of the whole; the first
/// left undecided leaves the whole undecided.
pub(super) fn solve_in_parts(
    arena: &Arena,
    budget: ExactBudget,
    solve: &dyn Fn(&Arena, ExactBudget) -> ExactReport,
) -> ExactReport {
    let Some(mut parts) = time_parts(arena) else {
        return solve(arena, budget);
    };
    parts.sort_by_key(|p| p.items.len());
    let mut offsets = vec![UNPLACED; arena.items.len()];
    for (it, o) in arena.items.iter().zip(offsets.iter_mut()) {
        if let Some(f) = it.fixed {
            *o = f;
        }
    }
    let mut nodes = 0u64;
    let mut stats = SearchStats::default();
    for part in &parts {
        let left = ExactBudget {
            max_nodes: budget.max_nodes.saturating_sub(nodes).max(1),
            ..budget.clone()
        };
        // A small part is searched on this thread: starting the threads
        // of a parallel portfolio costs more than its search (3,000 parts
        // of 12 buffers: 2.3 s of system time for their stacks).
        let solve = if part.items.len() < SMALL_PART {
            &solve_portfolio
        } else {
            solve
        };
        let report = with_lifelong_stacked(&part.arena, left, |a, b| solve_in_parts(a, b, solve));
        nodes = nodes.saturating_add(report.nodes);
        stats.add(&report.stats);
        // The part itself, unless it was split again.
        if report.stats.largest_part == 0 {
            let free = part
                .items
                .iter()
                .filter(|&&id| arena.items[id as usize].fixed.is_none())
                .count();
            stats.largest_part = stats.largest_part.max(free as u64);
        }
        match report.outcome {
            ExactOutcome::Found(found) => {
                for (&id, &at) in part.items.iter().zip(&found) {
                    if arena.items[id as usize].fixed.is_none() {
                        offsets[id as usize] = at;
                    }
                }
            }
            outcome => {
                return ExactReport {
                    outcome,
                    nodes,
                    stats,
                };
            }
        }
    }
    ExactReport {
        outcome: ExactOutcome::Found(offsets),
        nodes,
        stats,
    }
}

#[cfg(test)]
mod tests {
    use super::{Part, solve_in_parts, time_parts};
    use crate::csv::{CsvBuffer, CsvProblem};
    use crate::exact::{ExactBudget, ExactOutcome, solve_portfolio};
    use crate::generate::zero_slack_grid;
    use ipu_layout::rng::SplitMix64;

    fn buffer(id: usize, lower: u64, upper: u64, size: u64, offset: Option<u64>) -> CsvBuffer {
        CsvBuffer {
            id: id.to_string(),
            lower,
            upper,
            size,
            alignment: 1,
            offset,
        }
    }

    fn budget() -> ExactBudget {
        ExactBudget {
            max_nodes: 2_000_000,
            deadline: None,
            stop: None,
        }
    }

    /// Two zero-slack guillotine cuts one after the other in time, the
    /// second's buffers after the first's.
    fn two_cuts(seed: u64, buffers: usize) -> CsvProblem {
        let horizon = 1 << 20;
        let (first, _) = zero_slack_grid(seed, buffers, 1 << 20, horizon, 1024);
        let (second, _) = zero_slack_grid(seed + 1, buffers, 1 << 20, horizon, 1024);
        let shifted = second.buffers.into_iter().map(|b| CsvBuffer {
            lower: b.lower + horizon,
            upper: b.upper + horizon,
            ..b
        });
        let buffers = first
            .buffers
            .into_iter()
            .chain(shifted)
            .enumerate()
            .map(|(i, b)| CsvBuffer {
                id: i.to_string(),
                ..b
            })
            .collect();
        CsvProblem { buffers }
    }

    #[test]
    fn an_arena_splits_where_no_free_item_crosses_and_a_fixed_one_is_cut() {
        // Free items 0 and 1 before time 10, 2 after it; item 3 is fixed
        // across the boundary; item 4 is never live.
        let problem = CsvProblem {
            buffers: vec![
                buffer(0, 0, 5, 8, None),
                buffer(1, 2, 10, 8, None),
                buffer(2, 10, 20, 8, None),
                buffer(3, 0, 20, 8, Some(0)),
                buffer(4, 7, 7, 8, None),
            ],
        };
        let arena = problem.arena(64);
        let parts = time_parts(&arena).expect("two parts");
        assert_eq!(parts.len(), 2);
        let ids: Vec<Vec<u32>> = parts.iter().map(|p| p.items.clone()).collect();
        assert_eq!(ids, [vec![0, 1, 3, 4], vec![2, 3]]);
        for part in &parts {
            // Sections renumbered from 0, times kept, the fixed item's
            // piece at its address over the whole part.
            assert_eq!(part.arena.times.len(), part.arena.sections as usize + 1);
            let fixed = part
                .items
                .iter()
                .position(|&i| i == 3)
                .expect("fixed piece");
            let piece = &part.arena.items[fixed];
            assert_eq!(piece.fixed, Some(0));
            assert_eq!((piece.start, piece.end), (0, part.arena.sections));
            for it in &part.arena.items {
                assert!(it.end <= part.arena.sections);
            }
        }
        // One more free item across the boundary joins the parts.
        let mut joined = problem.clone();
        joined.buffers.push(buffer(5, 4, 12, 8, None));
        assert!(time_parts(&joined.arena(64)).is_none());
    }

    #[test]
    fn random_arenas_split_exactly_at_the_uncrossed_boundaries() {
        let mut rng = SplitMix64::new(52);
        for case in 0..200 {
            let n = 1 + rng.below(12) as usize;
            let buffers: Vec<CsvBuffer> = (0..n)
                .map(|i| {
                    let lower = rng.below(30);
                    let upper = lower + rng.below(8);
                    let fixed = (rng.below(5) == 0).then_some(0);
                    buffer(i, lower, upper, 1 + rng.below(16), fixed)
                })
                .collect();
            let problem = CsvProblem { buffers };
            let arena = problem.arena(1 << 10);
            let free_live: Vec<usize> = (0..arena.items.len())
                .filter(|&i| arena.items[i].fixed.is_none() && arena.items[i].live())
                .collect();
            // The parts by brute force: free live items in start order,
            // a new part wherever one starts at or after every earlier
            // one's end.
            let mut lives: Vec<(u32, u32)> = free_live
                .iter()
                .map(|&i| (arena.items[i].start, arena.items[i].end))
                .collect();
            lives.sort_unstable();
            let mut groups = 0;
            let mut reach = 0;
            for (i, &(s, e)) in lives.iter().enumerate() {
                if i == 0 || s >= reach {
                    groups += 1;
                }
                reach = reach.max(e);
            }
            match time_parts(&arena) {
                None => assert!(groups <= 1, "case {case}"),
                Some(parts) => {
                    assert_eq!(parts.len(), groups, "case {case}");
                    // Every free live item in exactly one part, whole.
                    for &i in &free_live {
                        let holders: Vec<&Part> = parts
                            .iter()
                            .filter(|p| p.items.contains(&(i as u32)))
                            .collect();
                        assert_eq!(holders.len(), 1, "case {case}, item {i}");
                        let k = holders[0].items.iter().position(|&x| x == i as u32);
                        let piece = &holders[0].arena.items[k.expect("held")];
                        let whole = &arena.items[i];
                        assert_eq!(piece.end - piece.start, whole.end - whole.start);
                    }
                }
            }
        }
    }

    #[test]
    fn cuts_side_by_side_in_time_are_placed_part_by_part_and_pass_the_checker() {
        for seed in [3, 11] {
            let problem = two_cuts(seed, 200);
            let arena = problem.arena(1 << 20);
            // Each cut may split in time again.
            assert!(time_parts(&arena).is_some_and(|p| p.len() >= 2));
            let report = solve_in_parts(&arena, budget(), &solve_portfolio);
            let ExactOutcome::Found(offsets) = report.outcome else {
                panic!("seed {seed}: {:?}", report.outcome);
            };
            problem.check(1 << 20, &offsets).expect("checked placement");
            assert!(report.nodes <= budget().max_nodes);
            // The largest part searched whole lies within one cut.
            let largest = report.stats.largest_part;
            assert!((1..=200).contains(&largest), "seed {seed}: {largest}");
        }
    }

    #[test]
    fn a_part_without_placement_proves_the_whole_has_none() {
        // The first part fits; in the second, three 16-byte buffers live
        // at once take 48 of the 64 bytes, but aligned to 32 they have
        // two addresses.
        let mut buffers = vec![buffer(0, 0, 4, 16, None), buffer(1, 0, 4, 16, None)];
        for i in 2..5 {
            buffers.push(CsvBuffer {
                alignment: 32,
                ..buffer(i, 4, 8, 16, None)
            });
        }
        let problem = CsvProblem { buffers };
        let arena = problem.arena(64);
        assert_eq!(time_parts(&arena).map(|p| p.len()), Some(2));
        let report = solve_in_parts(&arena, budget(), &solve_portfolio);
        assert!(
            matches!(report.outcome, ExactOutcome::Infeasible),
            "{:?}",
            report.outcome
        );
        // The whole arena, searched as one, agrees.
        let whole = solve_portfolio(&arena, budget());
        assert!(matches!(whole.outcome, ExactOutcome::Infeasible));
    }
}
