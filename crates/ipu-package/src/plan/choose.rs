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
    /// The compute step summing the partials (`pk > 1`).
    pub reduce: u64,
}

impl GemmOpCycles {
    /// All steps.
    pub fn total(&self) -> u64 {
        self.operands
            .saturating_add(self.gemm)
            .saturating_add(self.reduce_exchange)
            .saturating_add(self.reduce)
    }
}

/// Scores grids of one GEMM problem, remembering kernel costs by shard.
#[derive(Debug)]
pub struct GemmScorer<'a> {
    problem: &'a GemmProblem,
    tiles: u32,
    bias: bool,
    cost: &'a CostModel,
    kernels: HashMap<(u64, u64, u64, u64), Option<u64>>,
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
        let config = PlanConfig {
            model: self.cost.steps.amp.clone(),
            ..PlanConfig::default()
        };
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
        let per_token = p.rows_per_token();
        let tokens = p.tokens();
        let (kernel_small, large, inner, columns) = self.kernel_of(grid);
        let left = large
            .saturating_mul(inner)
            .saturating_mul(p.left.element_bytes());
        let right = if pm > 1 {
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
            };
        }
        // The partials are summed where the lowering puts the result: in
        // the grid's own blocks when the rows allow it, else where the
        // result rests between ops (the element layout). Its largest shard
        // receives `pk` partials of itself, and each GEMM tile sends its
        // block of partial sums.
        let eb = p.output.element_bytes();
        let share = match reduce_layout(p, grid, p.output) {
            Ok(Some(t)) => t.max_shard_bytes() / eb.max(1),
            _ => {
                let even = per_token
                    .saturating_mul(tokens)
                    .saturating_mul(p.columns)
                    .div_ceil(u64::from(self.tiles));
                let mut extents = p.outer.clone();
                extents.push(p.columns);
                element_layout(&extents, p.output, self.tiles)
                    .map(|t| t.max_shard_bytes() / eb.max(1))
                    .unwrap_or(even)
                    .max(even)
            }
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
        GemmOpCycles {
            operands,
            gemm: kernel.saturating_add(sync),
            reduce_exchange,
            reduce: sum.saturating_add(bias).saturating_add(sync),
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
    let candidates = gemm_candidates(problem, tiles, cost);
    let mut scorer = GemmScorer::new(problem, tiles, bias, cost);
    let fitting: Vec<_> = candidates
        .iter()
        .filter(|(_, e)| e.transient_bytes <= budget)
        .collect();
    // The candidates' kernels are planned together, in parallel; the
    // choice below then only looks them up.
    if fitting.is_empty() {
        let least = candidates.iter().min_by_key(|(_, e)| e.transient_bytes);
        scorer.prepare(least.map(|(grid, _)| *grid).into_iter());
    } else {
        scorer.prepare(fitting.iter().map(|(grid, _)| *grid));
    }
    let chosen = if fitting.is_empty() {
        candidates
            .iter()
            .min_by_key(|(_, e)| e.transient_bytes)
            .map(|(grid, e)| (*grid, scorer.score(*grid, e)))
    } else {
        fitting
            .into_iter()
            .enumerate()
            .map(|(rank, (grid, e))| (scorer.score(*grid, e), rank, *grid))
            .min_by_key(|(c, rank, _)| (c.total(), *rank))
            .map(|(c, _, grid)| (grid, c))
    };
    chosen.unwrap_or((
        GemmGrid {
            pm: 1,
            pn: 1,
            pk: 1,
        },
        GemmOpCycles::default(),
    ))
}
