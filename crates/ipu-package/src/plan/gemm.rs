//! GEMM distribution: grids of row, column and inner blocks over tiles.
//!
//! A GEMM `left [.., tokens, K] × right [K, N] → [.., tokens, N]` is spread
//! over a grid of `pm × pn × pk` tiles: tile `n + pn·(k + pk·m)` computes
//! rows block `m`, output columns block `n` and inner block `k`. So the
//! left operand is tiled over (tokens, K) and replicated `pn` times, the
//! weights over (K, N) and replicated `pm` times, and with `pk > 1` the
//! result is a partial tensor `[pk, .., tokens, N]` that a reduction sums.
//!
//! The reduction keeps the grid: the `pk` tiles that computed block
//! `(m, n)` each sum `1/pk` of its rows ([`reduce_layout`]), so a tile
//! gathers one run per batch row group from each inner block — about
//! `tiles · pk` fragments instead of `rows · pn · pk`. The
//! `k`-inner tile numbering is what makes row part `k` of block `m` land on
//! the tile that computed partial `k` of it where the parts nest.
//!
//! Inner blocks are multiples of the AMP micro inner dimension (16 for F16,
//! 32 for FP8) and column blocks multiples of 16, so every shard is a whole
//! number of AMP panels and every fragment is a whole number of words.

use ipu_layout::{
    AmpOperand, Axis, AxisTiling, ElementOrder, Layout, LayoutError, MemoryClass, Precision,
    TensorFormat, TensorShape, TensorTiling, TensorType,
};

use crate::graph::Tensor;
use crate::plan::CostModel;

/// One GEMM as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GemmProblem {
    /// The left operand's axes before the inner one (for example
    /// `[batch, tokens]`); the last is the one rows are split along.
    pub outer: Vec<u64>,
    /// The inner dimension.
    pub inner: u64,
    /// The output columns.
    pub columns: u64,
    /// Left operand precision.
    pub left: Precision,
    /// Weight precision.
    pub right: Precision,
    /// Precision of the (partial) result the AMP writes.
    pub output: Precision,
    /// Output columns per AMP instruction: the target's
    /// `amp.column_multiple` ([`CostModel::amp_columns`]).
    pub amp_columns: u64,
    /// Where the result's only reader is an add of a residual of its shape:
    /// the elements of the largest shard of that add's layout, where a
    /// split-K reduce may sum the partials and run the add
    /// ([`super::folds_residual`]).
    pub residual: Option<u64>,
}

impl GemmProblem {
    /// The GEMM `left × right → output` of a graph: `left`'s axes before
    /// its last are the outer ones, partial results are F32 only for an F32
    /// output (F16 otherwise), and the column blocks are `cost`'s AMP's.
    pub fn of(left: &Tensor, right: &Tensor, output: &Tensor, cost: &CostModel) -> GemmProblem {
        let le = left.extents();
        let (outer, inner) = match le.split_last() {
            Some((&inner, outer)) => (outer.to_vec(), inner),
            None => (Vec::new(), 0),
        };
        GemmProblem {
            outer,
            inner,
            columns: right.extents().get(1).copied().unwrap_or(0),
            left: left.precision(),
            right: right.precision(),
            output: if output.precision() == Precision::F32 {
                Precision::F32
            } else {
                Precision::F16
            },
            amp_columns: cost.amp_columns,
            residual: None,
        }
    }

    /// Columns are split in blocks that are whole AMP output blocks and
    /// whole weight panels (32 columns for FP8 weights), so that a weight
    /// block moves as whole panels rather than row by row.
    pub fn column_block(&self) -> u64 {
        self.amp_columns.max(self.right.amp_panel_columns()).max(1)
    }

    /// The order the left operand is stored in on the GEMM's tiles:
    /// row-major when every row's inner blocks start 32-byte aligned (the
    /// AMP reads a row-major left with one strided run per row block), so
    /// that row-major activations arrive in whole-row fragments; otherwise
    /// AMP panels.
    pub fn left_order(&self) -> ElementOrder {
        if (self.micro_inner() * self.left.element_bytes()) % 32 == 0 {
            ElementOrder::RowMajor
        } else {
            ElementOrder::Amp(AmpOperand::Left)
        }
    }

    /// The AMP micro inner dimension: 32 when both operands are FP8, else 16.
    pub fn micro_inner(&self) -> u64 {
        if self.left.is_fp8() && self.right.is_fp8() {
            32
        } else {
            16
        }
    }

    /// The extent rows are split along (1 for a rank-1 left operand).
    pub(crate) fn tokens(&self) -> u64 {
        self.outer.last().copied().unwrap_or(1)
    }

    /// Rows per token-row: the product of the outer axes before the last.
    pub(crate) fn rows_per_token(&self) -> u64 {
        let n = self.outer.len().saturating_sub(1);
        self.outer[..n].iter().product()
    }
}

/// A grid of `pm` row blocks, `pn` column blocks and `pk` inner blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GemmGrid {
    /// Row blocks (split of the token axis).
    pub pm: u32,
    /// Output column blocks.
    pub pn: u32,
    /// Inner blocks; above 1 the result is a partial sum to reduce.
    pub pk: u32,
}

impl GemmGrid {
    /// Tiles the grid uses.
    pub fn tiles(&self) -> u64 {
        u64::from(self.pm) * u64::from(self.pn) * u64::from(self.pk)
    }
}

/// Estimated per-tile cost and footprint of a grid (largest tile).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmEstimate {
    /// AMP cycles of the largest tile's shard.
    pub compute_cycles: u64,
    /// Exchange cycles feeding the GEMM (left, weight replicas) and, with
    /// `pk > 1`, reducing its partials.
    pub exchange_cycles: u64,
    /// Bytes the GEMM's operands and result occupy on the largest tile
    /// while it runs, excluding resident weights.
    pub transient_bytes: u64,
    /// Bytes of resident weights on the largest tile.
    pub resident_bytes: u64,
}

impl GemmEstimate {
    /// The ranking cost.
    pub fn cycles(&self) -> u64 {
        self.compute_cycles + self.exchange_cycles
    }
}

/// Per-tile largest block of `extent` split into `parts` in blocks of `block`.
pub(crate) fn largest_block(extent: u64, parts: u64, block: u64) -> u64 {
    extent.div_ceil(block).div_ceil(parts) * block
}

/// Estimates a grid without building its layouts.
pub fn estimate(
    problem: &GemmProblem,
    grid: GemmGrid,
    tiles: u64,
    cost: &CostModel,
) -> GemmEstimate {
    let micro = problem.micro_inner();
    let (pm, pn, pk) = (u64::from(grid.pm), u64::from(grid.pn), u64::from(grid.pk));
    let rows = problem.rows_per_token() * problem.tokens().div_ceil(pm);
    let inner = largest_block(problem.inner, pk, micro);
    let columns = largest_block(problem.columns, pn, problem.column_block());
    let left = rows * inner * problem.left.element_bytes();
    let right = inner * columns * problem.right.element_bytes();
    let out = rows * columns * problem.output.element_bytes();
    let macs = rows * inner * columns;
    let compute_cycles =
        macs.div_ceil(cost.macs_per_cycle(problem.left, problem.right)) + cost.compute_step_cycles;
    let mut exchange_cycles = cost.exchange_cycles(left);
    let mut transient_bytes = left + out;
    // Weights rest once, spread over the grid's (k, n) tiles; with pm > 1
    // each row block needs its own copy for the duration of the GEMM.
    if pm > 1 {
        exchange_cycles += cost.exchange_cycles(right);
        transient_bytes += right;
    }
    if pk > 1 {
        // The reduction gathers pk partial blocks of an even share of the
        // result on every tile and sums them there.
        let share = (problem.rows_per_token() * problem.tokens() * problem.columns)
            .div_ceil(tiles.max(1))
            * problem.output.element_bytes();
        exchange_cycles += cost.exchange_cycles(share * pk);
        transient_bytes += share * pk;
    }
    GemmEstimate {
        compute_cycles,
        exchange_cycles,
        transient_bytes,
        resident_bytes: right,
    }
}

/// Every sensible grid on at most `tiles` tiles using at least three
/// quarters of them, with its estimate, cheapest first (ties by grid).
pub fn gemm_candidates(
    problem: &GemmProblem,
    tiles: u32,
    cost: &CostModel,
) -> Vec<(GemmGrid, GemmEstimate)> {
    let tiles = u64::from(tiles);
    let kblocks = problem.inner.div_ceil(problem.micro_inner());
    let nblocks = problem.columns.div_ceil(problem.column_block());
    let mut out = Vec::new();
    for pk in 1..=kblocks.min(tiles) {
        for pn in 1..=nblocks.min(tiles / pk) {
            let pm = (tiles / (pk * pn)).min(problem.tokens());
            if pm == 0 || 4 * pm * pn * pk < 3 * tiles.min(problem.tokens() * nblocks * kblocks) {
                continue;
            }
            // Skip grids whose last blocks would be empty.
            if largest_block(problem.inner, pk, problem.micro_inner()) * (pk - 1)
                >= problem.inner.div_ceil(problem.micro_inner()) * problem.micro_inner()
                || largest_block(problem.columns, pn, problem.column_block()) * (pn - 1)
                    >= nblocks * problem.column_block()
            {
                continue;
            }
            let grid = GemmGrid {
                pm: pm as u32,
                pn: pn as u32,
                pk: pk as u32,
            };
            out.push((grid, estimate(problem, grid, tiles, cost)));
        }
    }
    out.sort_by_key(|(grid, e)| (e.cycles(), e.transient_bytes, *grid));
    out
}

/// The operand layouts of a GEMM on a grid.
#[derive(Clone, Debug)]
pub struct GemmLayouts {
    /// `[.., tokens, K]` in `Amp(Left)` order, replicated `pn` times.
    pub left: TensorType,
    /// `[K, N]` in `Amp(Right)` order, interleaved, replicated `pm` times.
    pub right: TensorType,
    /// `[K, N]` as it rests between uses: the grid's (k, n) tiles, once.
    pub right_resident: TensorType,
    /// `[.., tokens, N]` row-major when `pk == 1`, else the partial sums
    /// `[pk, .., tokens, N]`.
    pub output: TensorType,
}

impl GemmLayouts {
    /// Every operand's tiling rotated by `rotation` (modulo its tile count),
    /// so that operands that shared a tile still do.
    pub fn rotated(&self, rotation: u64) -> Result<GemmLayouts, LayoutError> {
        Ok(GemmLayouts {
            left: crate::plan::rotated(&self.left, rotation)?,
            right: crate::plan::rotated(&self.right, rotation)?,
            right_resident: crate::plan::rotated(&self.right_resident, rotation)?,
            output: crate::plan::rotated(&self.output, rotation)?,
        })
    }
}

fn axis(axis: Axis, partitions: u32, block: u64, stride: u64) -> AxisTiling {
    AxisTiling::new(axis, partitions)
        .with_block(block as u32)
        .with_stride(stride as u32)
}

fn tensor(
    shape: Vec<u64>,
    precision: Precision,
    order: ElementOrder,
    memory_class: MemoryClass,
    tiling: TensorTiling,
) -> Result<TensorType, LayoutError> {
    let format = TensorFormat {
        precision,
        layout: Layout {
            order,
            tiling,
            memory_class,
        },
    };
    TensorType::new(TensorShape::new(shape), format)
}

/// Builds the layouts of `problem` on `grid`.
pub fn gemm_layouts(problem: &GemmProblem, grid: GemmGrid) -> Result<GemmLayouts, LayoutError> {
    let GemmGrid { pm, pn, pk } = grid;
    let tiles = u32::try_from(grid.tiles()).map_err(|_| LayoutError::Overflow { what: "grid" })?;
    let micro = problem.micro_inner();
    let (s_n, s_k, s_m) = (1u64, u64::from(pn), u64::from(pn) * u64::from(pk));
    let has_rows = !problem.outer.is_empty();
    if !has_rows && pm != 1 {
        return Err(LayoutError::TileCountMismatch {
            tile_count: tiles,
            replicas: 1,
            partitions: vec![pm],
            covered: 1,
        });
    }

    let mut left_shape = problem.outer.clone();
    left_shape.push(problem.inner);
    let mut left_axes = vec![axis(Axis::FromEnd(1), pk, micro, s_k)];
    if has_rows {
        left_axes.push(axis(Axis::FromEnd(2), pm, 1, s_m));
    }
    let left = tensor(
        left_shape,
        problem.left,
        problem.left_order(),
        MemoryClass::Ipu21Standard,
        TensorTiling::new(tiles, pn, left_axes)?,
    )?;

    let right_shape = vec![problem.inner, problem.columns];
    let right_axes = vec![
        axis(Axis::FromStart(0), pk, micro, s_k),
        axis(Axis::FromStart(1), pn, problem.column_block(), s_n),
    ];
    let right = tensor(
        right_shape,
        problem.right,
        ElementOrder::Amp(AmpOperand::Right),
        MemoryClass::Ipu21Interleaved,
        TensorTiling::new(tiles, pm, right_axes)?,
    )?;
    // Never empty: `kp = 1` is always a candidate.
    let right_resident = resting_candidates(problem, grid)?.swap_remove(0);

    let mut out_shape = problem.outer.clone();
    out_shape.push(problem.columns);
    let mut out_axes = vec![axis(Axis::FromEnd(1), pn, problem.column_block(), s_n)];
    if has_rows {
        out_axes.push(axis(Axis::FromEnd(2), pm, 1, s_m));
    }
    if pk > 1 {
        out_shape.insert(0, u64::from(pk));
        out_axes.push(axis(Axis::FromStart(0), pk, 1, s_k));
    }
    let output = tensor(
        out_shape,
        problem.output,
        ElementOrder::RowMajor,
        MemoryClass::Ipu21Standard,
        TensorTiling::new(tiles, 1, out_axes)?,
    )?;
    Ok(GemmLayouts {
        left,
        right,
        right_resident,
        output,
    })
}

/// The tilings weights may rest in between uses: each element once, spread
/// as evenly as the AMP blocks allow over the grid's tiles. With `pm == 1`
/// only the GEMM's own layout, so the weights never move; otherwise every
/// split `kp × np ≤ tiles` whose largest shard is the smallest possible,
/// the one using the most tiles first, then by `kp`, and the GEMM's row
/// blocks receive their copies by exchange. They differ in which tiles
/// hold the larger shards of a ragged split, which is what
/// [`resting_candidates`] lets the lowering choose between.
fn resident_tilings(
    problem: &GemmProblem,
    grid: GemmGrid,
) -> Result<Vec<TensorTiling>, LayoutError> {
    let GemmGrid { pm, pn, pk } = grid;
    let micro = problem.micro_inner();
    let tiles = u32::try_from(grid.tiles()).map_err(|_| LayoutError::Overflow { what: "grid" })?;
    if pm == 1 {
        return Ok(vec![TensorTiling::new(
            tiles,
            1,
            vec![
                axis(Axis::FromStart(0), pk, micro, u64::from(pn)),
                axis(Axis::FromStart(1), pn, problem.column_block(), 1),
            ],
        )?]);
    }
    let kblocks = problem.inner.div_ceil(micro).max(1);
    let nblocks = problem.columns.div_ceil(problem.column_block()).max(1);
    // (largest shard, tiles unused, kp, np) of every split.
    let mut splits: Vec<(u64, u64, u64, u64)> = (1..=kblocks.min(u64::from(tiles)))
        .map(|kp| {
            let np = (u64::from(tiles) / kp).min(nblocks);
            let k_block = kblocks.div_ceil(kp) * micro;
            let n_block = nblocks.div_ceil(np) * problem.column_block();
            (k_block * n_block, u64::MAX - kp * np, kp, np)
        })
        .collect();
    splits.sort_unstable();
    let smallest = splits.first().map_or(0, |s| s.0);
    splits
        .into_iter()
        .take_while(|s| s.0 == smallest)
        .map(|(_, _, kp, np)| {
            TensorTiling::new(
                (kp * np) as u32,
                1,
                vec![
                    axis(Axis::FromStart(0), kp as u32, micro, np),
                    axis(Axis::FromStart(1), np as u32, problem.column_block(), 1),
                ],
            )
        })
        .collect()
}

/// The types GEMM weights on `grid` may rest in, [`GemmLayouts::right_resident`]
/// first: with `pm == 1` only that one (the AMP reads the weights where they
/// rest); otherwise every resting tiling with the smallest largest shard,
/// unrotated. All hold the same bytes on their fullest tile; a caller
/// placing several GEMMs' weights picks the one (and the rotation) that
/// keeps the tiles' total resting bytes even.
pub fn resting_candidates(
    problem: &GemmProblem,
    grid: GemmGrid,
) -> Result<Vec<TensorType>, LayoutError> {
    // With `pm == 1` the resting weights are the AMP's operand and need
    // interleaved memory; otherwise they are only the source of its copies
    // and may rest in any memory, leaving interleaved room for those copies.
    let memory_class = if grid.pm == 1 {
        MemoryClass::Ipu21Interleaved
    } else {
        MemoryClass::Ipu21Standard
    };
    resident_tilings(problem, grid)?
        .into_iter()
        .map(|tiling| {
            tensor(
                vec![problem.inner, problem.columns],
                problem.right,
                ElementOrder::Amp(AmpOperand::Right),
                memory_class,
                tiling,
            )
        })
        .collect()
}

/// Where the `pk` partial sums of a GEMM on `grid` are reduced: the result
/// `[.., tokens, N]` with the grid's column blocks (`pn` parts at tile
/// stride one) and the token axis cut into `pm · pk` parts (at tile stride
/// `pn`), so that row part `k` of row block `m` lies on the tile that
/// computed partial `k` of it (tile `n + pn·(k + pk·m)`, see
/// [`gemm_layouts`]) where the parts nest (`pm · pk` divides the tokens).
/// Ragged splits shift the parts against the row blocks, so a part may
/// gather from the tiles of two row blocks. Either way each tile gathers
/// whole rows of its column block — one fragment per batch row group from
/// each inner block — instead of every tile gathering whole rows from all
/// `pn · pk` tiles of the row.
///
/// The result is in `precision` (the output tensor's; the gathered
/// partials take the same tiling in the GEMM's output precision).
///
/// `None` when the token axis has fewer than `pm · pk` rows (the parts
/// would be empty) or there is no reduction; callers then reduce on an
/// element layout.
pub fn reduce_layout(
    problem: &GemmProblem,
    grid: GemmGrid,
    precision: Precision,
) -> Result<Option<TensorType>, LayoutError> {
    let GemmGrid { pm, pn, pk } = grid;
    let parts = u64::from(pm) * u64::from(pk);
    if pk <= 1 || problem.outer.is_empty() || problem.tokens() < parts {
        return Ok(None);
    }
    let tiles = u32::try_from(grid.tiles()).map_err(|_| LayoutError::Overflow { what: "grid" })?;
    let mut shape = problem.outer.clone();
    shape.push(problem.columns);
    let axes = vec![
        axis(Axis::FromEnd(1), pn, problem.column_block(), 1),
        axis(Axis::FromEnd(2), parts as u32, 1, u64::from(pn)),
    ];
    tensor(
        shape,
        precision,
        ElementOrder::RowMajor,
        MemoryClass::Ipu21Standard,
        TensorTiling::new(tiles, 1, axes)?,
    )
    .map(Some)
}
