//! Tests of the valley-local search: guillotine cuts placed, restarts,
//! the portfolio's determinism, proofs with and without slack, and its
//! verdicts against an exhaustive search.

use super::{Valley, ValleyMemo, luby, restarts};
use crate::csv::CsvProblem;
use crate::exact::ExactBudget;
use crate::exact::prepare::Prepared;
use crate::exact::search::Step;
use crate::generate::{near_zero_slack_grid, zero_slack_grid};
use crate::greedy::UNPLACED;

/// One run on `problem` at `capacity` with the given branching rule:
/// how it ended and the placement in the problem's buffer order, or
/// `None` if the search does not apply.
fn run(problem: &CsvProblem, capacity: u64, local: bool) -> Option<(Step, Vec<u64>)> {
    let arena = problem.arena(capacity);
    let p = Prepared::new(&arena)?;
    let budget = small_budget();
    let mut memo = ValleyMemo::new();
    let mut v = Valley::new(&arena, &p, &budget, local, &mut memo)?;
    let step = v.run();
    let mut offsets = vec![0u64; problem.buffers.len()];
    for (k, &id) in p.ids.iter().enumerate() {
        offsets[id as usize] = v.offsets[k];
    }
    Some((step, offsets))
}

#[test]
fn guillotine_cuts_are_placed_and_pass_the_checker() {
    for seed in 0..8 {
        let (problem, _) = zero_slack_grid(seed, 120, 1 << 20, 1 << 20, 1024);
        for local in [false, true] {
            let (step, offsets) = run(&problem, 1 << 20, local).expect("applies");
            assert_eq!(step, Step::Found, "seed {seed}, local {local}");
            problem.check(1 << 20, &offsets).expect("checked placement");
        }
    }
}

#[test]
fn restarts_place_larger_cuts_and_follow_the_luby_sequence() {
    let firsts: Vec<u64> = (1..=15).map(luby).collect();
    assert_eq!(firsts, [1, 1, 2, 1, 1, 2, 4, 1, 1, 2, 1, 1, 2, 4, 8]);
    let (problem, _) = zero_slack_grid(1003, 350, 1 << 20, 1 << 20, 1024);
    let arena = problem.arena(1 << 20);
    let p = Prepared::new(&arena).expect("prepared");
    let budget = ExactBudget {
        max_nodes: 200_000,
        deadline: None,
        stop: None,
    };
    let mut memo = ValleyMemo::new();
    let r = restarts(&arena, &p, &budget, false, &mut memo, (0, &mut 1)).expect("applies");
    assert_eq!(r.step, Step::Found);
    assert!(r.nodes <= budget.max_nodes);
    let mut offsets = vec![0u64; problem.buffers.len()];
    for (k, &id) in p.ids.iter().enumerate() {
        offsets[id as usize] = r.offsets[k];
    }
    problem.check(1 << 20, &offsets).expect("checked placement");
}

#[test]
fn the_portfolio_answers_alike_on_one_thread_and_two() {
    use crate::exact::{ExactOutcome, solve_exact_deep, solve_exact_parallel};
    let (problem, _) = zero_slack_grid(4002, 300, 1 << 20, 1 << 20, 1024);
    let arena = problem.arena(1 << 20);
    let budget = || ExactBudget {
        max_nodes: 2_000_000,
        deadline: None,
        stop: None,
    };
    let one = solve_exact_deep(&arena, budget());
    let two = solve_exact_parallel(&arena, budget());
    match (one.outcome, two.outcome) {
        (ExactOutcome::Found(a), ExactOutcome::Found(b)) => {
            assert_eq!(a, b);
            problem.check(1 << 20, &a).expect("checked placement");
        }
        other => panic!("expected two placements, got {other:?}"),
    }
}

#[test]
fn a_conflict_without_slack_is_proved_and_slack_is_declined() {
    // Two 2-byte buffers aligned to 4 in 4 bytes: both need address 0.
    let problem = CsvProblem::parse("a,0,2,2,4\nb,0,2,2,4\n").expect("parse");
    for local in [false, true] {
        let (step, _) = run(&problem, 4, local).expect("applies");
        assert_eq!(step, Step::Fail);
    }
    // Full sections where order matters: `e` (2 bytes, step 2) needs
    // `a` (1 byte, steps 0-2) at an edge.
    let split = CsvProblem::parse("a,0,3,1\nb,0,1,1\nc,0,2,1\nd,1,2,1\ne,2,3,2\n").expect("parse");
    let (step, offsets) = run(&split, 3, false).expect("applies");
    assert_eq!(step, Step::Found);
    split.check(3, &offsets).expect("checked placement");
    // With slack, holes: a cut with buffers removed, and the same
    // instance in a window one byte larger (every section has slack).
    let (near, _) = near_zero_slack_grid(3, 60, 1 << 16, 1 << 16, 256, 5);
    for capacity in [1 << 16, (1 << 16) + 1] {
        for local in [false, true] {
            let (step, offsets) = run(&near, capacity, local).expect("applies");
            assert_eq!(step, Step::Found, "capacity {capacity}, local {local}");
            near.check(capacity, &offsets).expect("checked placement");
        }
    }
    let (step, offsets) = run(&split, 4, false).expect("applies");
    assert_eq!(step, Step::Found);
    split.check(4, &offsets).expect("checked placement");
    // Live bytes beyond the window: no placement, left to the others.
    assert!(run(&split, 2, false).is_none());
}

/// Whether `items` (`start, end, size`) fit in `capacity` bytes, by
/// trying every address of every item in turn.
fn brute_force(items: &[(u64, u64, u64)], capacity: u64, at: &mut Vec<u64>) -> bool {
    let aligned: Vec<(u64, u64, u64, u64)> = items.iter().map(|&(s, e, z)| (s, e, z, 1)).collect();
    brute_force_aligned(&aligned, capacity, at)
}

/// [`brute_force`] with an alignment per item (`start, end, size,
/// alignment`): every aligned address of every item in turn.
fn brute_force_aligned(items: &[(u64, u64, u64, u64)], capacity: u64, at: &mut Vec<u64>) -> bool {
    let k = at.len();
    let Some(&(s, e, size, align)) = items.get(k) else {
        return true;
    };
    for x in (0..=capacity - size).step_by(align as usize) {
        let clear = at
            .iter()
            .zip(items)
            .all(|(&y, &(s2, e2, size2, _))| e2 <= s || e <= s2 || x + size <= y || y + size2 <= x);
        if clear {
            at.push(x);
            if brute_force_aligned(items, capacity, at) {
                return true;
            }
            at.pop();
        }
    }
    false
}

/// `items` (`start, end, size, alignment`) as CSV rows.
fn csv_of(items: &[(u64, u64, u64, u64)]) -> String {
    items
        .iter()
        .enumerate()
        .map(|(k, &(s, e, size, align))| format!("i{k},{s},{e},{size},{align}\n"))
        .collect()
}

/// `items` (`start, end, size, alignment`), largest first: the order in
/// which the exhaustive search fails soonest.
fn largest_first(mut items: Vec<(u64, u64, u64, u64)>) -> Vec<(u64, u64, u64, u64)> {
    items.sort_by_key(|i| std::cmp::Reverse(i.2));
    items
}

/// The node budget of one search on the small instances of these tests.
fn small_budget() -> ExactBudget {
    ExactBudget {
        max_nodes: 100_000,
        deadline: None,
        stop: None,
    }
}

/// A random lifetime of at least one of `steps` steps.
fn lifetime(rng: &mut ipu_layout::rng::SplitMix64, steps: u64) -> (u64, u64) {
    let s = rng.below(steps);
    (s, s + 1 + rng.below(steps - s))
}

/// The live bytes of `items` (`start, end, size, alignment`) at step `t`.
fn live_at(t: u64, items: &[(u64, u64, u64, u64)]) -> u64 {
    items
        .iter()
        .filter(|i| i.0 <= t && t < i.1)
        .map(|i| i.2)
        .sum()
}

/// Fills each of `steps` steps of `items` to `capacity` with items of
/// random sizes (at most `max_size`) over random runs of steps with room;
/// with `align_even`, an even size is aligned to 2 half the time.
fn fill_steps(
    rng: &mut ipu_layout::rng::SplitMix64,
    items: &mut Vec<(u64, u64, u64, u64)>,
    (steps, capacity): (u64, u64),
    max_size: u64,
    align_even: bool,
) {
    for t in 0..steps {
        loop {
            let gap = capacity - live_at(t, items);
            if gap == 0 {
                break;
            }
            let size = 1 + rng.below(gap.min(max_size));
            let mut e = t + 1;
            while e < steps && capacity - live_at(e, items) >= size && rng.below(2) == 0 {
                e += 1;
            }
            let align = if align_even && size % 2 == 0 {
                1 + rng.below(2)
            } else {
                1
            };
            items.push((t, e, size, align));
        }
    }
}

/// Asserts that both branching rules find a placement of `problem` in
/// `capacity` bytes, which the checker passes, exactly when `truth`.
fn agrees(problem: &CsvProblem, capacity: u64, truth: bool, label: &str) {
    for local in [false, true] {
        let (step, offsets) = run(problem, capacity, local).expect("applies");
        assert_eq!(step == Step::Found, truth, "local {local}, {label}");
        if truth {
            problem
                .check(capacity, &offsets)
                .expect("checked placement");
        }
    }
}

#[test]
fn backjumping_keeps_the_verdicts_of_an_exhaustive_search() {
    // Random lifetimes and sizes, each step then filled to the
    // capacity with one-step items: full sections, placeable or not.
    let mut rng = ipu_layout::rng::SplitMix64::new(77);
    let (mut fits, mut not) = (0, 0);
    for case in 0..1500 {
        let steps = 3 + rng.below(3);
        let mut items = Vec::new();
        for _ in 0..2 + rng.below(3) {
            let (s, e) = lifetime(&mut rng, steps);
            items.push((s, e, 1 + rng.below(3), 1));
        }
        let capacity = 3 + rng.below(4);
        if (0..steps).any(|t| live_at(t, &items) > capacity) {
            continue;
        }
        fill_steps(&mut rng, &mut items, (steps, capacity), u64::MAX, false);
        let csv = csv_of(&items);
        let problem = CsvProblem::parse(&csv).expect("parse");
        let truth = brute_force_aligned(&largest_first(items), capacity, &mut Vec::new());
        agrees(&problem, capacity, truth, &format!("case {case}: {csv}"));
        if truth {
            fits += 1;
        } else {
            not += 1;
        }
    }
    assert!(fits > 500, "{fits} fit, {not} do not");
    // Full instances that do not fit are rare among these; three found
    // by the same construction and the exhaustive search.
    let rows = [
        (
            6,
            "0,1,4,2\n1,2,5,2\n2,1,2,3\n3,0,1,4\n4,0,1,1\n5,0,3,1\n6,2,3,1\n7,3,4,2\n8,4,5,3\n9,4,5,1\n",
        ),
        (
            5,
            "0,0,3,1\n1,3,4,3\n2,0,1,4\n3,1,4,1\n4,1,2,2\n5,1,3,1\n6,2,3,1\n7,2,5,1\n8,4,5,4\n",
        ),
        (
            6,
            "0,3,5,3\n1,0,3,2\n2,0,1,3\n3,0,4,1\n4,1,2,2\n5,1,5,1\n6,2,4,1\n7,2,3,1\n8,4,5,2\n",
        ),
    ];
    for (capacity, csv) in rows {
        let problem = CsvProblem::parse(csv).expect("parse");
        let items: Vec<(u64, u64, u64)> = problem
            .buffers
            .iter()
            .map(|b| (b.lower, b.upper, b.size))
            .collect();
        assert!(!brute_force(&items, capacity, &mut Vec::new()), "{csv}");
        for local in [false, true] {
            let (step, _) = run(&problem, capacity, local).expect("applies");
            assert_eq!(step, Step::Fail, "{csv}");
        }
    }
}

#[test]
fn holes_keep_the_verdicts_of_an_exhaustive_search() {
    // Random lifetimes, sizes and alignments in a window at their peak
    // or up to two bytes above it, so sections have slack: placeable or
    // not, by the brute force. (Without alignments such small instances
    // nearly always fit; with them, about one in eight does not.)
    let mut rng = ipu_layout::rng::SplitMix64::new(78);
    let (mut fits, mut not) = (0, 0);
    for case in 0..2000 {
        let steps = 2 + rng.below(4);
        let mut items = Vec::new();
        for _ in 0..3 + rng.below(4) {
            let (s, e) = lifetime(&mut rng, steps);
            let align = [1, 1, 2, 4][rng.below(4) as usize];
            items.push((s, e, 1 + rng.below(3), align));
        }
        let peak = (0..steps).map(|t| live_at(t, &items)).max().unwrap_or(0);
        let capacity = peak + rng.below(3);
        let csv = csv_of(&items);
        let problem = CsvProblem::parse(&csv).expect("parse");
        let truth = brute_force_aligned(&largest_first(items), capacity, &mut Vec::new());
        agrees(&problem, capacity, truth, &format!("case {case}: {csv}"));
        if truth {
            fits += 1;
        } else {
            not += 1;
        }
    }
    assert!(fits > 500 && not > 100, "{fits} fit, {not} do not");
}

#[test]
fn coalesced_copies_place_what_they_find_and_prove_nothing() {
    use crate::exact::coalesce::coalesce;
    use crate::exact::{
        ExactOutcome, Variant, original_offsets, portfolio, portfolio_runs, solve_exact, variants,
    };
    // Full sections as in the backjumping test (a few random items, each
    // step then filled with items of a few sizes, so that pieces hand over
    // and share lifetimes), then one item removed: coalescing is for
    // arenas with slack.
    let mut rng = ipu_layout::rng::SplitMix64::new(80);
    let (mut copies, mut found, mut misled) = (0, 0, 0);
    for case in 0..1500 {
        let steps = 3 + rng.below(4);
        let capacity = 3 + rng.below(4);
        let mut items: Vec<(u64, u64, u64, u64)> = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let (s, e) = lifetime(&mut rng, steps);
            let size = 1 + rng.below(2);
            items.push((s, e, size, size.min(1 + rng.below(2))));
        }
        if (0..steps).any(|t| live_at(t, &items) > capacity) {
            continue;
        }
        // Even sizes sometimes aligned, so that where pieces hand over is
        // not always where they fit.
        fill_steps(&mut rng, &mut items, (steps, capacity), 3, true);
        items.remove(rng.below(items.len() as u64) as usize);
        let csv = csv_of(&items);
        let problem = CsvProblem::parse(&csv).expect("parse");
        let arena = problem.arena(capacity);
        let Some(c) = coalesce(&arena) else {
            continue;
        };
        copies += 1;
        let truth = brute_force_aligned(&largest_first(items.clone()), capacity, &mut Vec::new());
        let copy_items: Vec<(u64, u64, u64, u64)> = c
            .arena
            .items
            .iter()
            .map(|it| (u64::from(it.start), u64::from(it.end), it.size, it.align))
            .collect();
        let copy_truth = brute_force_aligned(&largest_first(copy_items), capacity, &mut Vec::new());
        assert!(
            truth || !copy_truth,
            "case {case}: the copy fits where the problem does not"
        );
        if truth && !copy_truth {
            misled += 1;
            // The copies' runs first: their failure must not end the
            // portfolio, whose later runs find the problem's placement.
            let vs = variants(&arena);
            let prepared: Vec<Prepared> = vs
                .iter()
                .map(|v| Prepared::new(&v.arena).expect("prepares"))
                .collect();
            let mut runs = portfolio_runs(&vs);
            runs.sort_by_key(|r| vs[r.variant].members.is_none());
            match portfolio(&arena, &vs, &prepared, &runs, &small_budget(), None)
                .report
                .outcome
            {
                ExactOutcome::Found(offsets) => {
                    problem
                        .check(capacity, &offsets)
                        .expect("checked placement");
                }
                other => panic!("case {case}: {other:?} after the copies failed\n{csv}"),
            }
        }
        // The copy's own search, its placement expanded to the problem's.
        let variant = Variant {
            arena: c.arena.clone(),
            flipped: false,
            members: Some(c.members.clone()),
        };
        let p = Prepared::new(&variant.arena).expect("prepares");
        let budget = small_budget();
        let mut memo = ValleyMemo::new();
        let mut v = Valley::new(&variant.arena, &p, &budget, false, &mut memo).expect("applies");
        match v.run() {
            Step::Found => {
                assert!(copy_truth, "case {case}");
                let offsets = original_offsets(&arena, &variant, &p, &v.offsets).expect("expands");
                problem
                    .check(capacity, &offsets)
                    .unwrap_or_else(|e| panic!("case {case}: {e:?}\n{csv}"));
                found += 1;
            }
            Step::Fail => assert!(!copy_truth, "case {case}"),
            Step::Stop => panic!("case {case}: small copies conclude"),
        }
        // The portfolio, copies included, keeps the exhaustive verdict.
        match solve_exact(&arena, budget).outcome {
            ExactOutcome::Found(offsets) => {
                assert!(truth, "case {case}");
                problem
                    .check(capacity, &offsets)
                    .expect("checked placement");
            }
            ExactOutcome::Infeasible => assert!(!truth, "case {case}: {csv}"),
            ExactOutcome::Unknown => panic!("case {case}: small problems conclude"),
        }
    }
    assert!(
        copies > 300 && found > 100 && misled > 10,
        "{copies} coalesced, {found} placed from the copy, {misled} copies without the problem's placement"
    );
}

#[test]
fn region_digests_follow_placements_and_read_only_their_sections() {
    use super::{cell, mix};
    // Items placed and taken back in a random order: every pair's key is
    // what a digest made from scratch of the pair's sections gives (their
    // skyline and the unplaced items covering them), so two states that
    // agree there share it and a placement elsewhere leaves it alone.
    let (problem, witness) = near_zero_slack_grid(5, 150, 1 << 20, 1 << 20, 1024, 10);
    let arena = problem.arena(1 << 20);
    let p = Prepared::new(&arena).expect("prepared");
    let budget = small_budget();
    let mut memo = ValleyMemo::new();
    let mut v = Valley::new(&arena, &p, &budget, false, &mut memo).expect("applies");
    let mut rng = ipu_layout::rng::SplitMix64::new(9);
    let m = p.ids.len();
    let sections = p.sections;
    let from_scratch = |v: &Valley, level: usize, k: usize| {
        let mut blocks = [0u128; 2];
        for (j, block) in blocks.iter_mut().enumerate() {
            let (s0, s1) = ((k + j) << level, ((k + j + 1) << level).min(sections));
            for s in s0..s1 {
                *block ^= cell(s, v.sky[s]);
            }
            for i in 0..m {
                let (a, b) = (p.start[i] as usize, p.end[i] as usize);
                if v.offsets[i] == UNPLACED && a < s1 && s0 < b {
                    *block ^= v.item_hash[i].rotate_left(((k + j) % 128) as u32);
                }
            }
        }
        let pair = blocks[0] ^ blocks[1].rotate_left(64);
        mix(pair ^ mix(((level as u128) << 64 | k as u128) ^ 0x5ec7_1075))
    };
    let mut placed: Vec<u32> = Vec::new();
    let mut keys_seen = std::collections::HashMap::new();
    for step in 0..400 {
        if placed.is_empty() || (placed.len() < m && rng.below(3) > 0) {
            let unplaced: Vec<u32> = (0..m as u32)
                .filter(|&k| v.offsets[k as usize] == UNPLACED)
                .collect();
            let k = unplaced[rng.below(unplaced.len() as u64) as usize];
            v.apply(k, witness[p.ids[k as usize] as usize]);
            placed.push(k);
        } else {
            let k = placed.swap_remove(rng.below(placed.len() as u64) as usize);
            let at = v.offsets[k as usize];
            // Taking back an item other than the last is fine for the
            // digests: they are sums, whatever the order.
            v.undo(k, at);
        }
        for level in 0..v.regions.levels() {
            for k in 0..=(sections.saturating_sub(1) >> level) {
                let key = v.regions.key(level, k);
                assert_eq!(
                    key,
                    from_scratch(&v, level, k),
                    "step {step}, level {level}, block {k}"
                );
                // One key, one content of the pair's sections.
                let (s0, s1) = (k << level, ((k + 2) << level).min(sections));
                let content: Vec<(u64, bool)> = (s0..s1)
                    .map(|s| (v.sky[s], true))
                    .chain(
                        (0..m)
                            .filter(|&i| (p.start[i] as usize) < s1 && s0 < p.end[i] as usize)
                            .map(|i| (i as u64, v.offsets[i] == UNPLACED)),
                    )
                    .collect();
                let old = keys_seen.entry(key).or_insert_with(|| content.clone());
                assert_eq!(*old, content, "two contents, one key");
            }
        }
    }
    assert!(
        v.regions.levels() >= 5 && keys_seen.len() > 5_000,
        "{}",
        keys_seen.len()
    );
}

#[test]
fn an_edge_depends_on_the_lives_of_its_items_not_the_whole_valley() {
    use super::{Edge, valley_region};
    // Capacity 4 over ten steps: a lifelong item of 1 at the bottom, walls
    // of 3 over steps 0-1 and 8-9, and the valley between them at level 1
    // filled by items of 3 over steps 2-4, 5-6 and 7: five sections,
    // 0-1, 2-4, 5-6, 7 and 8-9.
    let csv = "0,0,10,1\n1,0,2,3\n2,8,10,3\n3,2,5,3\n4,5,7,3\n5,7,8,3\n";
    let problem = CsvProblem::parse(csv).expect("parse");
    let arena = problem.arena(4);
    let p = Prepared::new(&arena).expect("prepared");
    let budget = small_budget();
    let mut memo = ValleyMemo::new();
    let mut v = Valley::new(&arena, &p, &budget, false, &mut memo).expect("applies");
    // The walls, on whatever the lifelong item left below them.
    for id in [1, 2] {
        let k = p.ids.iter().position(|&x| x == id).expect("free");
        let at = v.sky[p.start[k] as usize];
        v.apply(k as u32, at);
    }
    assert_eq!(v.sky.len(), 5);
    let level = v.sky[1];
    assert!(v.sky[0] > level && v.sky[4] > level && v.sky[1..4].iter().all(|&h| h == level));
    let valley = (1, 4);
    let edge = |from_left| Edge {
        level,
        valley,
        from_left,
    };
    // From the left: the wall and the life of the item that starts there.
    assert_eq!(v.edge_reason(&edge(true)), (0, 2));
    // From the right: the life of the item that ends there and the wall.
    assert_eq!(v.edge_reason(&edge(false)), (3, 5));
    // Either edge's region before: the whole valley with its walls.
    assert_eq!(valley_region(valley, v.sky.len()), (0, 5));
}
