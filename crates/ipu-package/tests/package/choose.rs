//! Choosing GEMM grids by the whole operation's steps: the choice is the
//! cheapest fitting candidate by an independent scan, never below the
//! shard's MACs at the AMP's peak, and the step costs it predicts for a
//! built package are those its cycle estimate charges.

use ipu_layout::Precision;
use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::{Op, parse_fixture};
use ipu_package::plan::{
    CostModel, GemmEstimate, GemmGrid, GemmOpCycles, GemmProblem, GemmScorer, choose_gemm_grid,
    gemm_candidates,
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
        for (_, op) in graph.ops().iter() {
            let Op::Gemm {
                left,
                right,
                bias,
                output,
            } = op
            else {
                continue;
            };
            let (tl, tr, tout) = (
                graph.tensor(*left),
                graph.tensor(*right),
                graph.tensor(*output),
            );
            let problem = GemmProblem::of(tl, tr, tout, &cost);
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
