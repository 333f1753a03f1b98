//! Choosing a GEMM's grid by the cost of the whole operation.
//!
//! [`gemm_candidates`](super::gemm_candidates) ranks grids by the planner's
//! quick estimate: AMP cycles at the peak rate plus the exchange feeding
//! the GEMM and gathering its partials. The package's cycle estimate
//! (`crate::profile`) charges more than that for a split-K grid: the
//! partials are summed in a compute step of their own, every exchange phase
//! and compute step ends in a sync, and a kernel call costs what the kernel
//! cost model says rather than its MACs at peak. A grid that wins by the
//! quick estimate can lose by those, so the lowering asks this module,
//! which scores each candidate the way the profile will cost the steps the
//! lowering emits for it:
//!
//! ```text
//! operands  exchange: phase + (left block + weight block if pm > 1) words + sync
//! GEMM      compute:  kernel cost of the largest shard (+ bias add) + sync
//! pk > 1:   exchange: phase + max(pk × result shard, partial block) words + sync
//!           compute:  sum of pk partials over the share (+ bias add) + sync
//! ```
//!
//! with the kernel call costed by `ipu_kernels::estimate_cycles` on the
//! variant the build would plan for that shard, and the vector work by the
//! profile's [`VectorModel`]. The busiest tile is the one with the largest
//! blocks, as in the quick estimate, except that the kernel call is the
//! costlier of the shard's two row counts (the kernel's cycles are not
//! monotone in the rows of a short shard). With `pk == 1` the result stays in the
//! grid's blocks and its consumer's exchange moves it from there; that
//! consumer exchanges its operands in either case, so no term is charged
//! for it.
//!
//! Only the choice among candidates changes; the candidates, their layouts
//! and the per-tile budget rule are [`super::gemm`]'s.

use std::collections::HashMap;

use rayon::prelude::*;

use ipu_kernels::{AmpModel, GemmShape, Mode, PlanConfig, estimate_cycles, plan_variant};
use ipu_layout::{ElementOrder, MemoryClass};
use ipu_target::Target;

use super::gemm::{GemmEstimate, largest_block, reduce_layout};
use super::{CostModel, GemmGrid, GemmProblem, element_layout, gemm_candidates};
use crate::profile::{VectorModel, Work};

/// The step costs the package's cycle estimate uses, for scoring plans.
#[derive(Clone, Debug)]
pub struct StepCosts {
    /// The target's AMP, for planning and costing kernel variants.
    pub(crate) amp: AmpModel,
    /// The vector model of every codelet but the GEMM.
    pub(crate) vector: VectorModel,
    /// Cycles of the sync ending every step.
    pub(crate) sync_cycles: u64,
}

impl StepCosts {
    /// The costs of `target`.
    pub fn new(target: &Target) -> StepCosts {
        StepCosts {
            amp: AmpModel::new(target),
            vector: VectorModel::new(target),
            sync_cycles: target.sync().sync_cycles,
        }
    }

    /// The kernel planner's configuration for this target's AMP
    /// ([`kernel_plan_config`]).
    pub(crate) fn plan_config(&self) -> PlanConfig {
        kernel_plan_config(self.amp.clone())
    }
}

/// The kernel planner's configuration for an AMP: the one the build plans
/// its kernels with (`build/kernels.rs`), so that a variant planned for
/// costing is the package's.
pub(crate) fn kernel_plan_config(amp: AmpModel) -> PlanConfig {
    PlanConfig {
        model: amp,
        ..PlanConfig::default()
    }
}

/// The cycles of a GEMM on one grid, step by step, on its busiest tile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemmOpCycles {
    /// The exchange phase bringing the operands.
    pub operands: u64,
    /// The compute step running the kernel (and the bias, with `pk == 1`).
    pub gemm: u64,
    /// The exchange phase gathering the partials (`pk > 1`).
    pub reduce_exchange: u64,
    /// The compute step summing the partials (`pk > 1`), with the
    /// residual add where it runs there ([`folds_residual`]).
    pub reduce: u64,
    /// The residual add's own steps (copying the result to the add's
    /// layout, then adding) where the reduce does not run it.
    pub residual: u64,
}

impl GemmOpCycles {
    /// All steps.
    pub fn total(&self) -> u64 {
        self.operands
            .saturating_add(self.gemm)
            .saturating_add(self.reduce_exchange)
            .saturating_add(self.reduce)
            .saturating_add(self.residual)
    }
}

/// Elements of the largest shard on which a split-K grid's partials are
/// summed: the grid's own blocks where the rows allow it, else the element
/// layout the result rests in between ops.
pub(crate) fn reduce_share(p: &GemmProblem, grid: GemmGrid, tiles: u32) -> u64 {
    let eb = p.output.element_bytes().max(1);
    match reduce_layout(p, grid, p.output) {
        Ok(Some(t)) => t.max_shard_bytes() / eb,
        _ => {
            let even = p
                .rows_per_token()
                .saturating_mul(p.tokens())
                .saturating_mul(p.columns)
                .div_ceil(u64::from(tiles.max(1)));
            let mut extents = p.outer.clone();
            extents.push(p.columns);
            element_layout(&extents, p.output, tiles)
                .map(|t| t.max_shard_bytes() / eb)
                .unwrap_or(even)
                .max(even)
        }
    }
}

/// Whether `grid`'s reduce sums the partials in the layout of the
/// problem's residual add and runs the add (`lower/fold.rs`): a split-K
/// grid whose result has such a reader, where summing there moves no more
/// bytes to a tile than summing in the grid's layout and copying the sum
/// on (`fold_pays`).
pub fn folds_residual(p: &GemmProblem, grid: GemmGrid, tiles: u32) -> bool {
    grid.pk > 1
        && p.residual
            .is_some_and(|r| fold_pays(grid.pk, reduce_share(p, grid, tiles), r))
}

/// Whether summing `pk` partials on a largest shard of `folded` elements
/// moves no more bytes to a tile than summing them on one of `grid`
/// elements and then copying the sum (`folded` elements) on. A row layout
/// of few rows, such as a pooled head's, does not pay: its few tiles would
/// receive every partial.
pub(crate) fn fold_pays(pk: u32, grid: u64, folded: u64) -> bool {
    let pk = u64::from(pk);
    folded.saturating_mul(pk) <= grid.saturating_mul(pk).saturating_add(folded)
}

/// Scores grids of one GEMM problem, remembering kernel costs by shard.
#[derive(Debug)]
pub struct GemmScorer<'a> {
    problem: &'a GemmProblem,
    tiles: u32,
    bias: bool,
    cost: &'a CostModel,
    kernels: HashMap<(u64, u64, u64, u64), Option<u64>>,
    /// Whether the weights are copied into the grid's layout even with
    /// `pm == 1` (a GEMM run in inner windows: the weights rest whole, each
    /// window's rows are copied out of them).
    copy_weights: bool,
}

impl<'a> GemmScorer<'a> {
    /// A scorer for `problem` on `tiles` tiles, with a bias added when
    /// `bias`.
    pub fn new(problem: &'a GemmProblem, tiles: u32, bias: bool, cost: &'a CostModel) -> Self {
        GemmScorer {
            problem,
            tiles: tiles.max(1),
            bias,
            cost,
            kernels: HashMap::new(),
            copy_weights: false,
        }
    }

    /// The scorer of one inner window of a GEMM run in windows: its
    /// weights are copied whatever the grid.
    fn for_window(problem: &'a GemmProblem, tiles: u32, bias: bool, cost: &'a CostModel) -> Self {
        GemmScorer {
            copy_weights: true,
            ..GemmScorer::new(problem, tiles, bias, cost)
        }
    }

    /// Tile cycles of the costlier kernel call of a shard of `inner ×
    /// columns` on `small` or `large` rows, or `None` when no variant can
    /// be planned for it.
    fn kernel_cycles(&mut self, small: u64, large: u64, inner: u64, columns: u64) -> Option<u64> {
        let key = (small, large, inner, columns);
        if let Some(&known) = self.kernels.get(&key) {
            return known;
        }
        let cycles = self.plan_kernel(key);
        self.kernels.insert(key, cycles);
        cycles
    }

    /// [`GemmScorer::kernel_cycles`] of `(small, large, inner, columns)`,
    /// planned now.
    fn plan_kernel(&self, (small, large, inner, columns): (u64, u64, u64, u64)) -> Option<u64> {
        let p = self.problem;
        let shape = GemmShape {
            rows: u32::try_from(large).ok()?,
            inner: u32::try_from(inner).ok()?,
            columns: u32::try_from(columns).ok()?,
            left: p.left,
            left_order: p.left_order(),
            right: p.right,
            output: p.output,
            output_order: ElementOrder::RowMajor,
            right_class: MemoryClass::Ipu21Interleaved,
        };
        let config = self.cost.steps.plan_config();
        let small = u32::try_from(small).ok()?;
        let variant = plan_variant(&shape, small, shape.rows, &config).ok()?;
        // The kernel's cycles are not monotone in its rows (poplibs charges
        // a two-row worker stream more than a three-row one, and a pass
        // whose workers are all equally busy a tail more), so the busiest
        // tile may hold the shorter shard.
        let cycles = [small, shape.rows]
            .map(|rows| estimate_cycles(&variant, rows, Mode::Initialise).cycles);
        cycles.into_iter().max()
    }

    /// The kernel call [`GemmScorer::score`] costs for `grid`, as
    /// `(small, large, inner, columns)`.
    fn kernel_of(&self, grid: GemmGrid) -> (u64, u64, u64, u64) {
        let p = self.problem;
        let part = |n: u32| u64::from(n.max(1));
        let (pm, pn, pk) = (part(grid.pm), part(grid.pn), part(grid.pk));
        let per_token = p.rows_per_token();
        let tokens = p.tokens();
        let large = per_token.saturating_mul(tokens.div_ceil(pm));
        let small = per_token.saturating_mul((tokens / pm).max(1));
        let inner = largest_block(p.inner, pk, p.micro_inner());
        let columns = largest_block(p.columns, pn, p.column_block());
        (small.min(large), large, inner, columns)
    }

    /// Plans, in parallel, the kernels of `grids` not planned yet: scoring
    /// them afterwards finds every kernel known. The scores are the same
    /// either way (planning is a function of the kernel's shape).
    fn prepare(&mut self, grids: impl Iterator<Item = GemmGrid>) {
        let mut keys: Vec<(u64, u64, u64, u64)> = grids
            .map(|g| self.kernel_of(g))
            .filter(|k| !self.kernels.contains_key(k))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let planned: Vec<_> = keys
            .into_par_iter()
            .map(|key| (key, self.plan_kernel(key)))
            .collect();
        self.kernels.extend(planned);
    }

    /// The steps of `grid`, given the quick estimate `quick` (whose compute
    /// stands in when no kernel variant can be planned).
    pub fn score(&mut self, grid: GemmGrid, quick: &GemmEstimate) -> GemmOpCycles {
        let p = self.problem;
        let steps = &self.cost.steps;
        let sync = steps.sync_cycles;
        // Sizes come from the graph: arithmetic saturates, and a grid with
        // an empty split counts as one part.
        let part = |n: u32| u64::from(n.max(1));
        let (pm, pk) = (part(grid.pm), part(grid.pk));
        let (kernel_small, large, inner, columns) = self.kernel_of(grid);
        let left = large
            .saturating_mul(inner)
            .saturating_mul(p.left.element_bytes());
        let right = if pm > 1 || self.copy_weights {
            inner
                .saturating_mul(columns)
                .saturating_mul(p.right.element_bytes())
        } else {
            0
        };
        let operands = self
            .cost
            .exchange_cycles(left.saturating_add(right))
            .saturating_add(sync);
        let kernel = self
            .kernel_cycles(kernel_small, large, inner, columns)
            .unwrap_or(quick.compute_cycles);
        let add = |elements: u64| {
            let lanes = steps.vector.lanes(p.output);
            steps.vector.cycles(&Work::Add { elements, lanes })
        };
        // A residual add the reduce does not run copies the result into its
        // own layout and adds in a step of its own.
        let own_steps = |r: u64| {
            self.cost
                .exchange_cycles(r.saturating_mul(p.output.element_bytes()))
                .saturating_add(add(r))
                .saturating_add(sync.saturating_mul(2))
        };
        if pk == 1 {
            let bias = if self.bias {
                add(large.saturating_mul(columns))
            } else {
                0
            };
            return GemmOpCycles {
                operands,
                gemm: kernel.saturating_add(bias).saturating_add(sync),
                reduce_exchange: 0,
                reduce: 0,
                residual: p.residual.map_or(0, own_steps),
            };
        }
        // The partials are summed where the lowering puts the result: in
        // the residual add's layout where the reduce runs the add, else in
        // the grid's own blocks when the rows allow it, else where the
        // result rests between ops (the element layout). Its largest shard
        // receives `pk` partials of itself, and each GEMM tile sends its
        // block of partial sums.
        let eb = p.output.element_bytes();
        let folded = folds_residual(p, grid, self.tiles);
        let share = match p.residual {
            Some(r) if folded => r,
            _ => reduce_share(p, grid, self.tiles),
        };
        let received = share.saturating_mul(pk).saturating_mul(eb);
        let sent = large.saturating_mul(columns).saturating_mul(eb);
        let reduce_exchange = self
            .cost
            .exchange_cycles(received.max(sent))
            .saturating_add(sync);
        let lanes = steps.vector.lanes(p.output);
        let sum = steps.vector.cycles(&Work::Reduce {
            partials: pk,
            elements: share,
            lanes,
        });
        let bias = if self.bias { add(share) } else { 0 };
        let (in_reduce, residual) = match p.residual {
            Some(r) if folded => (add(r), 0),
            Some(r) => (0, own_steps(r)),
            None => (0, 0),
        };
        GemmOpCycles {
            operands,
            gemm: kernel.saturating_add(sync),
            reduce_exchange,
            reduce: sum
                .saturating_add(bias)
                .saturating_add(in_reduce)
                .saturating_add(sync),
            residual,
        }
    }
}

/// The grid a GEMM runs on: of the candidates whose operands and result fit
/// `budget` bytes per tile, the one whose steps cost least by
/// [`GemmScorer::score`] (ties by the quick estimate's order); when none
/// fits, the one needing the fewest bytes; without candidates, one tile.
pub fn choose_gemm_grid(
    problem: &GemmProblem,
    tiles: u32,
    budget: u64,
    bias: bool,
    cost: &CostModel,
) -> (GemmGrid, GemmOpCycles) {
    let plan = choose_within(problem, tiles, budget, bias, cost, 1);
    (plan.grid, plan.cycles)
}

/// The most inner windows [`choose_gemm_plan`] runs a GEMM in.
pub const MAX_INNER_WINDOWS: u32 = 8;

/// How a GEMM runs: on one grid, over its whole inner dimension at once or
/// in windows of it one after another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GemmChoice {
    /// The grid every window runs on.
    pub grid: GemmGrid,
    /// The windows of the inner dimension, `(start, length)` in order; one
    /// window is the whole of it. Each window brings its part of both
    /// operands to the grid and its kernels add into the same partial sums
    /// (only split-K grids run in windows), so the operands' bytes on a
    /// tile are a window's, not the whole GEMM's.
    pub windows: Vec<(u64, u64)>,
    /// The steps' cycles, summed over the windows.
    pub cycles: GemmOpCycles,
    /// The bytes a window's operands, result and partial sums take on the
    /// busiest tile by the quick estimate (the whole GEMM's with one
    /// window), with the weights' copy of a windowed grid of one row block.
    pub bytes: u64,
}

/// `inner` in `count` windows of whole `micro` blocks, all but the last of
/// one length, or `None` when that many windows would leave one empty (or
/// `count` is 0).
pub fn inner_windows(inner: u64, micro: u64, count: u32) -> Option<Vec<(u64, u64)>> {
    if count == 0 {
        return None;
    }
    let count = u64::from(count);
    let micro = micro.max(1);
    let length = inner.div_ceil(micro).div_ceil(count).checked_mul(micro)?;
    let windows: Vec<(u64, u64)> = (0..count)
        .map_while(|w| {
            let start = w.checked_mul(length)?;
            (start < inner).then(|| (start, length.min(inner - start)))
        })
        .collect();
    (windows.len() as u64 == count).then_some(windows)
}

/// How a GEMM runs within `budget` bytes per tile: the grid of
/// [`choose_gemm_grid`] where one fits; where none does, the cheapest
/// split-K grid that fits when the inner dimension runs in 2 to
/// [`MAX_INNER_WINDOWS`] windows one after another (each window's operands
/// on a tile at a time; the partial sums and the reduction as before);
/// where none fits that way either, the plan needing the fewest bytes of
/// all.
///
/// Windows trade cycles for memory far more cheaply than a smaller grid
/// budget everywhere: every window pays its own operand exchange, kernel
/// call and sync, but the AMP runs the same rows.
pub fn choose_gemm_plan(
    problem: &GemmProblem,
    tiles: u32,
    budget: u64,
    bias: bool,
    cost: &CostModel,
) -> GemmChoice {
    choose_within(problem, tiles, budget, bias, cost, MAX_INNER_WINDOWS)
}

/// [`choose_gemm_plan`] with at most `max_windows` windows (1: whole).
fn choose_within(
    problem: &GemmProblem,
    tiles: u32,
    budget: u64,
    bias: bool,
    cost: &CostModel,
    max_windows: u32,
) -> GemmChoice {
    let candidates = gemm_candidates(problem, tiles, cost);
    let mut scorer = GemmScorer::new(problem, tiles, bias, cost);
    let whole = |(grid, e): &(GemmGrid, GemmEstimate), scorer: &mut GemmScorer<'_>| GemmChoice {
        grid: *grid,
        windows: vec![(0, problem.inner)],
        cycles: scorer.score(*grid, e),
        bytes: e.transient_bytes,
    };
    let fitting: Vec<_> = candidates
        .iter()
        .filter(|(_, e)| e.transient_bytes <= budget)
        .collect();
    // The candidates' kernels are planned together, in parallel; the
    // choice below then only looks them up.
    scorer.prepare(fitting.iter().map(|(grid, _)| *grid));
    // The cheapest that fits, ties by the quick estimate's order.
    let cheapest = fitting
        .into_iter()
        .map(|c| whole(c, &mut scorer))
        .reduce(|best, c| {
            if c.cycles.total() < best.cycles.total() {
                c
            } else {
                best
            }
        });
    if let Some(fits) = cheapest {
        return fits;
    }
    let mut best: Option<GemmChoice> = None;
    let mut least: Option<GemmChoice> = candidates
        .iter()
        .min_by_key(|(_, e)| e.transient_bytes)
        .map(|c| {
            scorer.prepare(std::iter::once(c.0));
            whole(c, &mut scorer)
        });
    for count in 2..=max_windows {
        let Some(windows) = inner_windows(problem.inner, problem.micro_inner(), count) else {
            break;
        };
        for choice in windowed_plans(problem, tiles, bias, cost, &windows) {
            let total = choice.cycles.total();
            if choice.bytes <= budget && best.as_ref().is_none_or(|b| total < b.cycles.total()) {
                best = Some(choice.clone());
            }
            if least.as_ref().is_none_or(|l| choice.bytes < l.bytes) {
                least = Some(choice);
            }
        }
    }
    best.or(least).unwrap_or(GemmChoice {
        grid: GemmGrid {
            pm: 1,
            pn: 1,
            pk: 1,
        },
        windows: vec![(0, problem.inner)],
        cycles: GemmOpCycles::default(),
        bytes: 0,
    })
}

/// Every plan of `problem` in `windows`: each grid a candidate of its
/// first window that its last can run on too.
///
/// Only split-K grids (`pk > 1`) run in windows: their windows add into
/// partial sums, a temporary the reduction reads once the last window has
/// run, so the result's buffer is written once, as every other op's is
/// (the per-op check reads a result when a step first writes it).
fn windowed_plans(
    problem: &GemmProblem,
    tiles: u32,
    bias: bool,
    cost: &CostModel,
    windows: &[(u64, u64)],
) -> Vec<GemmChoice> {
    let (Some(&(_, first_len)), Some(&(_, last_len))) = (windows.first(), windows.last()) else {
        return Vec::new();
    };
    let with_inner = |inner| GemmProblem {
        inner,
        ..problem.clone()
    };
    let (first, last) = (with_inner(first_len), with_inner(last_len));
    let last_grids: HashMap<GemmGrid, GemmEstimate> =
        gemm_candidates(&last, tiles, cost).into_iter().collect();
    // The bias is added once, after the last window.
    let mut first_scorer = GemmScorer::for_window(&first, tiles, false, cost);
    let mut last_scorer = GemmScorer::for_window(&last, tiles, bias, cost);
    let candidates: Vec<_> = gemm_candidates(&first, tiles, cost)
        .into_iter()
        .filter(|(grid, _)| grid.pk > 1)
        .filter_map(|(grid, e)| Some((grid, e, *last_grids.get(&grid)?)))
        .collect();
    first_scorer.prepare(candidates.iter().map(|(g, _, _)| *g));
    last_scorer.prepare(candidates.iter().map(|(g, _, _)| *g));
    let repeats = windows.len().saturating_sub(1) as u64;
    candidates
        .into_iter()
        .map(|(grid, e, last_e)| {
            let a = first_scorer.score(grid, &e);
            let b = last_scorer.score(grid, &last_e);
            // The weights rest whole and each window copies its rows of
            // them even where `pm == 1`.
            let right = if grid.pm == 1 {
                let columns =
                    largest_block(problem.columns, u64::from(grid.pn), problem.column_block());
                let inner = largest_block(first_len, u64::from(grid.pk), problem.micro_inner());
                inner
                    .saturating_mul(columns)
                    .saturating_mul(problem.right.element_bytes())
            } else {
                0
            };
            let cycles = GemmOpCycles {
                operands: a
                    .operands
                    .saturating_mul(repeats)
                    .saturating_add(b.operands),
                gemm: a.gemm.saturating_mul(repeats).saturating_add(b.gemm),
                reduce_exchange: b.reduce_exchange,
                reduce: b.reduce,
                residual: b.residual,
            };
            GemmChoice {
                grid,
                windows: windows.to_vec(),
                cycles,
                bytes: e.transient_bytes.saturating_add(right),
            }
        })
        .collect()
}

#[cfg(test)]
mod fold_tests {
    use super::fold_pays;

    #[test]
    fn a_fold_pays_where_its_shards_are_no_larger_than_the_grids() {
        // SigLIP b2's out projection: 18 x 64 grid blocks, rows of 1152.
        assert!(fold_pays(9, 1152, 1152));
        // One more partial's worth is what the saved copy moved.
        assert!(fold_pays(9, 1024, 1152));
        assert!(!fold_pays(9, 1023, 1152));
        // Whole rows on few tiles against small grid blocks: those tiles
        // would take every partial.
        assert!(!fold_pays(36, 32, 1152));
    }
}
