//! Choosing GEMM grids by the whole operation's steps: the choice is the
//! cheapest fitting candidate by an independent scan, never below the
//! shard's MACs at the AMP's peak, and the step costs it predicts for a
//! built package are those its cycle estimate charges.

use ipu_layout::Precision;
use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::{Op, parse_fixture};
use ipu_package::lower::{LowerConfig, gemm_problem};
use ipu_package::plan::{
    CostModel, GemmEstimate, GemmGrid, GemmOpCycles, GemmProblem, GemmScorer, MAX_INNER_WINDOWS,
    choose_gemm_grid, choose_gemm_plan, gemm_candidates, inner_windows,
};
use ipu_package::profile::StepKind;
use ipu_target::Target;

use crate::fixture_text;
use crate::plan::{siglip_gemms, siglip_gemms_at};

#[test]
fn the_chosen_grid_is_the_cheapest_fitting_candidate_and_above_its_bound() {
    let cost = CostModel::ipu21();
    let budget = 160 * 1024;
    for (name, problem) in siglip_gemms() {
        let (grid, cycles) = choose_gemm_grid(&problem, 1472, budget, true, &cost);
        let candidates = gemm_candidates(&problem, 1472, &cost);
        let (_, quick) = candidates
            .iter()
            .find(|(g, _)| *g == grid)
            .unwrap_or_else(|| panic!("{name}: {grid:?} is a candidate"));
        assert!(quick.transient_bytes <= budget, "{name}: {grid:?} fits");
        // An independent scan with a fresh scorer finds nothing cheaper,
        // and the quick estimate's first pick is never cheaper either.
        let mut scorer = GemmScorer::new(&problem, 1472, true, &cost);
        let mut first = None;
        for (g, e) in candidates
            .iter()
            .filter(|(_, e)| e.transient_bytes <= budget)
        {
            let c = scorer.score(*g, e);
            first.get_or_insert(c);
            assert!(
                c.total() >= cycles.total(),
                "{name}: {g:?} costs {} < the chosen {grid:?}'s {}",
                c.total(),
                cycles.total()
            );
        }
        assert!(first.is_some_and(|f| f.total() >= cycles.total()));
        // The kernel never beats the largest shard's MACs at the AMP's peak.
        let rows = 2 * 729u64.div_ceil(u64::from(grid.pm));
        let inner = problem.inner.div_ceil(32).div_ceil(u64::from(grid.pk)) * 32;
        let columns = problem.columns.div_ceil(32).div_ceil(u64::from(grid.pn)) * 32;
        let bound = (rows * inner * columns).div_ceil(cost.fp8_macs_per_cycle);
        assert!(
            bound <= cycles.gemm,
            "{name}: bound {bound} <= {}",
            cycles.gemm
        );
        assert_eq!(cycles.reduce_exchange > 0, grid.pk > 1, "{name}");
    }
}

#[test]
fn a_problem_without_candidates_gets_one_tile_and_no_cost() {
    let problem = GemmProblem {
        outer: vec![4],
        inner: 0,
        columns: 0,
        left: Precision::F16,
        right: Precision::F16,
        output: Precision::F16,
        amp_columns: CostModel::ipu21().amp_columns,
        residual: None,
    };
    let (grid, cycles) = choose_gemm_grid(&problem, 16, 1 << 20, false, &CostModel::ipu21());
    assert_eq!((grid.pm, grid.pn, grid.pk), (1, 1, 1));
    assert_eq!(cycles, GemmOpCycles::default());
}

/// On built packages the chosen grid's predicted GEMM and reduce compute
/// steps are exactly what the package's estimate charges (both use the
/// kernel cost model and the vector model; the exchange terms are the
/// planner's receive bound, which the scheduled horizon may exceed, and
/// are held between that bound and the measured step).
#[test]
fn predicted_compute_steps_are_what_the_estimate_charges() {
    let (mut checked, mut split) = (0, 0);
    for (fixture, tiles) in [("tiny-2l-h64.json", 64), ("tiny-2l-h64.json", 16)] {
        let graph = parse_fixture(&fixture_text(fixture)).expect("fixture parses");
        let config = BuildConfig {
            tiles: Some(tiles),
            ..BuildConfig::default()
        };
        let package =
            build_package(&graph, &config, &Stages::in_memory()).expect("the fixture builds");
        let profile = package.profile.as_ref().expect("estimated");
        let cost = CostModel::new(Target::ipu21());
        let budget = package.manifest.summary.transient_budget;
        let lower_config = LowerConfig {
            tiles,
            ..LowerConfig::default()
        };
        for (id, op) in graph.ops().iter() {
            let Op::Gemm { bias, output, .. } = op else {
                continue;
            };
            let tout = graph.tensor(*output);
            // The lowering's view, with the residual add its reduce may run.
            let problem = gemm_problem(&graph, id, &lower_config).expect("a GEMM");
            let (grid, predicted) =
                choose_gemm_grid(&problem, tiles, budget, bias.is_some(), &cost);
            let step = |kind: &str, step_kind: StepKind| {
                profile
                    .steps
                    .iter()
                    .find(|s| s.op == tout.name() && s.op_kind == kind && s.kind == step_kind)
                    .map(|s| s.cycles)
            };
            // A repeat's body is one iteration's steps, named after its first.
            if !profile.steps.iter().any(|s| s.op == tout.name()) {
                continue;
            }
            let what = format!("{fixture} on {tiles} tiles, {} on {grid:?}", tout.name());
            assert_eq!(
                step("gemm", StepKind::Compute),
                Some(predicted.gemm),
                "{what}"
            );
            let operands = step("gemm", StepKind::Exchange).unwrap_or(0);
            assert!(
                predicted.operands <= operands + cost.exchange_phase_cycles,
                "{what}: operands {predicted:?} vs {operands}"
            );
            if grid.pk > 1 {
                assert_eq!(
                    step("reduce", StepKind::Compute),
                    Some(predicted.reduce),
                    "{what}"
                );
            } else {
                assert_eq!(step("reduce", StepKind::Compute), None, "{what}");
            }
            checked += 1;
            split += usize::from(grid.pk > 1);
        }
    }
    // Both kinds of grid are compared, over the two tile counts.
    assert!(
        checked >= 8 && split > 0 && split < checked,
        "the GEMMs of a layer are compared, split-K ({split}) and not ({checked})"
    );
}

#[test]
fn extreme_sizes_and_empty_splits_score_without_overflow() {
    let problem = GemmProblem {
        outer: vec![3, 1 << 40],
        inner: 1 << 40,
        columns: 1 << 40,
        left: Precision::F16,
        right: Precision::F16,
        output: Precision::F32,
        amp_columns: CostModel::ipu21().amp_columns,
        residual: None,
    };
    let cost = CostModel::ipu21();
    let quick = GemmEstimate {
        compute_cycles: 1,
        exchange_cycles: 0,
        transient_bytes: 0,
        resident_bytes: 0,
    };
    let mut scorer = GemmScorer::new(&problem, 1472, true, &cost);
    for (pm, pn, pk) in [(0, 0, 0), (1, 1, 1), (7, 3, 2), (u32::MAX, 1, u32::MAX)] {
        let c = scorer.score(GemmGrid { pm, pn, pk }, &quick);
        assert!(c.total() >= c.operands.max(c.gemm), "{pm}×{pn}×{pk}: {c:?}");
        assert_eq!(
            c.reduce > 0,
            pk > 1,
            "{pm}×{pn}×{pk}: a reduce only with pk > 1"
        );
    }
}

/// The stretched budget (`LowerConfig::stretch_budget_for`) is taken only
/// where it buys at least `STRETCH_GAIN_PERCENT` % of a GEMM's cycles:
/// never at SigLIP's batch 2, whose package it leaves alone, and for the
/// QKV and first MLP GEMMs at batch 4, which within the plain budget split
/// their rows 27 ways. A stretched plan is never slower and stays within
/// the stretched budget; a replanned operation gets no stretch.
#[test]
fn the_stretched_budget_is_taken_only_where_it_buys_cycles() {
    use ipu_package::OpId;
    use ipu_package::lower::{LowerConfig, STRETCH_GAIN_PERCENT};

    let cost = CostModel::ipu21();
    let config = LowerConfig::default();
    let op = OpId::from_u32(0);
    let budget = config.budget_for(op);
    let stretch = config.stretch_budget_for(op).expect("no replan");
    assert!(stretch > budget);
    let mut taken = Vec::new();
    for batch in [2, 4] {
        for (name, problem) in siglip_gemms_at(batch) {
            let (_, plain) = choose_gemm_grid(&problem, 1472, budget, true, &cost);
            let (grid, wide) = choose_gemm_grid(&problem, 1472, stretch, true, &cost);
            assert!(wide.total() <= plain.total(), "b{batch} {name}");
            let candidates = gemm_candidates(&problem, 1472, &cost);
            let (_, quick) = candidates
                .iter()
                .find(|(g, _)| *g == grid)
                .expect("a candidate");
            assert!(
                quick.transient_bytes <= stretch,
                "b{batch} {name}: {grid:?}"
            );
            let gain = plain.total() - wide.total();
            if gain * 100 >= plain.total() * STRETCH_GAIN_PERCENT {
                taken.push((batch, name));
            }
        }
    }
    assert_eq!(taken, [(4, "qkv"), (4, "fc1")]);
    let mut replanned = LowerConfig::default();
    replanned.op_budgets.insert(op, budget / 2);
    assert_eq!(replanned.stretch_budget_for(op), None);
}

/// Inner windows cover the inner dimension in order, each starting on a
/// whole micro block, all but the last of one length, exactly `count` of
/// them or none (always none for no windows).
#[test]
fn inner_windows_cover_the_inner_dimension_in_whole_blocks() {
    for inner in [1u64, 31, 32, 33, 288, 1152, 4304] {
        for micro in [16u64, 32] {
            assert_eq!(inner_windows(inner, micro, 0), None);
            for count in 1..=MAX_INNER_WINDOWS {
                let Some(windows) = inner_windows(inner, micro, count) else {
                    // Only when there are fewer blocks than windows, or
                    // equal windows would leave the last one empty.
                    let blocks = inner.div_ceil(micro);
                    let length = blocks.div_ceil(u64::from(count)) * micro;
                    assert!(
                        length * (u64::from(count) - 1) >= inner,
                        "{inner} {micro} {count}"
                    );
                    continue;
                };
                assert_eq!(windows.len(), count as usize);
                let mut next = 0;
                for (i, &(start, length)) in windows.iter().enumerate() {
                    assert_eq!(start, next, "{inner} {micro} {count}");
                    assert_eq!(start % micro, 0);
                    assert!(length > 0);
                    if i + 1 < windows.len() {
                        assert_eq!(length, windows[0].1);
                    }
                    next = start + length;
                }
                assert_eq!(next, inner, "{inner} {micro} {count}");
            }
        }
    }
}

/// The bytes a window of `problem` takes on grid `grid` by the quick
/// estimate, with the weights' copy of a grid of one row block (`None`:
/// the grid is not a candidate of that window).
fn window_bytes(
    problem: &GemmProblem,
    inner: u64,
    grid: GemmGrid,
    cost: &CostModel,
) -> Option<u64> {
    let window = GemmProblem {
        inner,
        ..problem.clone()
    };
    let (_, e) = *gemm_candidates(&window, 1472, cost)
        .iter()
        .find(|(g, _)| *g == grid)?;
    let block = |extent: u64, parts: u32| extent.div_ceil(32).div_ceil(u64::from(parts)) * 32;
    let weights = if grid.pm == 1 {
        block(inner, grid.pk) * block(problem.columns, grid.pn)
    } else {
        0
    };
    Some(e.transient_bytes + weights)
}

/// Where some grid fits its budget whole, a GEMM runs whole on
/// `choose_gemm_grid`'s grid (every SigLIP GEMM at batch 2 and the default
/// budget). Where none does (SigLIP's GEMMs under half that budget, the
/// replan of a batch-5 build's first MLP GEMM), it runs in inner windows on a split-K grid, whose
/// window fits where any windowed plan's does, never faster than its MACs
/// at the AMP's peak nor than the best grid without a budget.
#[test]
fn a_gemm_no_grid_fits_whole_runs_in_inner_windows() {
    let cost = CostModel::ipu21();
    let mut windowed = Vec::new();
    for (batch, budget) in [(2, 160 * 1024), (2, 80 * 1024), (5, 80 * 1024)] {
        for (name, problem) in siglip_gemms_at(batch) {
            let plan = choose_gemm_plan(&problem, 1472, budget, true, &cost);
            let least_whole = gemm_candidates(&problem, 1472, &cost)
                .iter()
                .map(|(_, e)| e.transient_bytes)
                .min()
                .expect("candidates");
            if least_whole <= budget {
                assert_eq!(plan.windows, [(0, problem.inner)], "b{batch} {name}");
                let whole = choose_gemm_grid(&problem, 1472, budget, true, &cost);
                assert_eq!((plan.grid, plan.cycles), whole, "b{batch} {name}");
                assert!(plan.bytes <= budget);
                continue;
            }
            let what = format!(
                "b{batch} {name}: {:?} in {} windows",
                plan.grid,
                plan.windows.len()
            );
            // An independent scan: does any windowed plan fit?
            let any_fits = (2..=MAX_INNER_WINDOWS).any(|count| {
                let Some(windows) = inner_windows(problem.inner, problem.micro_inner(), count)
                else {
                    return false;
                };
                let (first, last) = (windows[0].1, windows[windows.len() - 1].1);
                gemm_candidates(
                    &GemmProblem {
                        inner: first,
                        ..problem.clone()
                    },
                    1472,
                    &cost,
                )
                .iter()
                .filter(|(g, _)| g.pk > 1)
                .any(|&(g, _)| {
                    window_bytes(&problem, last, g, &cost).is_some()
                        && window_bytes(&problem, first, g, &cost).is_some_and(|b| b <= budget)
                })
            });
            assert_eq!(
                plan.bytes <= budget,
                any_fits,
                "{what}: {} bytes",
                plan.bytes
            );
            if !any_fits {
                // Then the plan needing the fewest bytes of all, which no
                // whole grid beats.
                assert!(plan.bytes <= least_whole, "{what}");
            }
            if plan.windows.len() == 1 {
                continue;
            }
            assert!(plan.grid.pk > 1, "{what}");
            let count = u32::try_from(plan.windows.len()).expect("few");
            assert_eq!(
                Some(plan.windows.clone()),
                inner_windows(problem.inner, problem.micro_inner(), count),
                "{what}"
            );
            assert_eq!(
                window_bytes(&problem, plan.windows[0].1, plan.grid, &cost),
                Some(plan.bytes),
                "{what}"
            );
            // Lower bounds: the busiest tile's MACs at the AMP's FP8 peak,
            // window by window, and the best grid with memory to spare.
            let block =
                |extent: u64, parts: u32| extent.div_ceil(32).div_ceil(u64::from(parts)) * 32;
            let rows = batch * 729u64.div_ceil(u64::from(plan.grid.pm));
            let columns = block(problem.columns, plan.grid.pn);
            let macs: u64 = plan
                .windows
                .iter()
                .map(|&(_, length)| rows * block(length, plan.grid.pk) * columns)
                .sum();
            assert!(
                macs.div_ceil(cost.fp8_macs_per_cycle) <= plan.cycles.gemm,
                "{what}"
            );
            let (_, free) = choose_gemm_grid(&problem, 1472, u64::MAX, true, &cost);
            assert!(free.total() <= plan.cycles.total(), "{what}");
            windowed.push((batch, budget, name));
        }
    }
    // At batch 2 and the default budget every GEMM runs whole.
    assert!(windowed.contains(&(5, 80 * 1024, "fc1")), "{windowed:?}");
    assert!(
        !windowed.iter().any(|&(_, budget, _)| budget == 160 * 1024),
        "{windowed:?}"
    );
}
