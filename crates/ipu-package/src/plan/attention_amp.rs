//! Attention on the AMP: both products as GEMM kernel calls, the softmax
//! between them on the vector unit.
//!
//! Each tile takes one `(batch, head)` pair, a block of `rq` query rows and
//! a block of `rk` key rows (a multiple of 16, the AMP's F16 micro inner
//! dimension) on the grid `pb = batch, ph = heads, gq × s`, numbered as
//! the vector attention's (`tile = kv + s·(q + gq·(h + heads·b))`). Per
//! tile, one compute step writes the keys (transposed) and the values as
//! AMP weight panels (so that the row-major copies are dead before the
//! scores exist) and the next runs the rest, in passes over the query
//! rows so that one pass's scores and probabilities are held at a time:
//!
//! ```text
//! keys    [rk, d] row-major ──transpose──► keysᵀ  [d₁₆, rk] Amp(Right)
//! values  [rk, d] row-major ──panels─────► values [rk, d₁₆] Amp(Right)
//! per pass of the query rows:
//! scores  [r, rk] = queries [r, d₁₆] (row-major) × keysᵀ          AMP
//! probs   [r, rk] F16, max, sum = softmax(scores / √d)          vector
//! blocks  [r, d₁₆] F16 = probs × values [rk, d₁₆] (Amp(Right))   AMP
//! ```
//!
//! With FP8 values and an F16-FP8 softmax the softmax writes FP8
//! probabilities (`probs` F143, scaled as [`probs_buffer_precision`]
//! says) and the second product multiplies FP8 rows by FP8 weights at
//! the AMP's FP8 rate, key blocks padded to its FP8 inner block of 32
//! ([`key_block`]); the values arrive and are written as panels in FP8.
//!
//! The second product keeps F16 partial sums (the AMP's full F16 rate; F32
//! partials run at half of it). Its sums are bounded by scaling the
//! probabilities: the softmax writes `p_j · 2^-e` with `2^e ≥ rk`
//! ([`blocks_exponent`]), so a block's sum `Σ_j p_j 2^-e v_j` stays
//! within the largest `|v_j|`, which F16 holds, however many keys agree.
//! The row sums are of the same scaled probabilities, so the scale
//! cancels in the combine's division. The first product keeps F16
//! partials too: a score then carries up to about one F16 step of its
//! magnitude into the exponential (a relative error of about 2^-11 of
//! the scaled score in each probability), which stays within the per-op
//! check's bound for F16 partial sums over the keys
//! (`ipu_sim::oracle::op_tolerance`) and costs the golden checkpoint's
//! pooled cosines less than 0.001; F32 scores ran at half the rate, and
//! their softmax read twice the vectors.
//!
//! where `d₁₆` is the head dimension rounded up to 16 (zero padding in the
//! queries, cleared before the exchange fills their data, and in the
//! panels, which the panels codelet writes). The exchange delivers the
//! queries straight into the first kernel's row-major left operand: with
//! one pair per tile the head's columns of `[B, T, H]` are a tile's whole
//! rows. Keys and values arrive as row-major rows, one exchange piece
//! each, and are written as panels on the tile: the exchange moves 32-bit
//! words, so the keys' transpose would move single 16-bit elements, and
//! values delivered in panels would take a piece per panel of every row,
//! each costing the receiving tile exchange code. With `s > 1` the blocks
//! are combined flash-style exactly as the vector attention's
//! ([`super::fine_combine`]).
//!
//! The grid is chosen by the steps it lowers to, costed as the package's
//! estimate costs them: the operands' exchange (receive-bound: every byte
//! a tile receives at one word a cycle), the clear of the queries'
//! padding, the codelets (the GEMMs by the kernel cost model on the
//! variants the build would plan, the panels and the softmax by the vector
//! model), the gather of the blocks and the combine, each step with its
//! sync.

use std::collections::HashMap;

use ipu_kernels::{GemmShape, Mode, estimate_cycles, plan_variant};
use ipu_layout::{
    AmpOperand, Axis, ElementOrder, LayoutError, MemoryClass, Precision, TensorTiling, TensorType,
};

use super::CostModel;
use super::layouts::{AttentionGrid, AttentionShape, fine_combine, split, tensor_type};
use crate::profile::Work;

/// Key rows per block of the AMP attention: the AMP's F16 micro inner
/// dimension, so that a block of keys is whole inner blocks of the second
/// product and whole weight panels of the first. FP8 probabilities take
/// blocks of [`key_block`] rows.
pub const KEY_BLOCK: u64 = 16;

/// The rows key blocks are padded to: [`KEY_BLOCK`], or with FP8
/// probabilities the AMP's FP8 micro inner dimension (a left operand row
/// of 64 bytes, 32 FP8 elements), so that the values' product reads whole
/// inner blocks.
pub fn key_block(a: &AttentionShape) -> u64 {
    a.probs.amp_panel_columns().max(KEY_BLOCK)
}

/// The precision of the probabilities' buffer of a plan whose key blocks
/// are at most `rk` rows (padded): F16 probabilities as they are; FP8
/// ones, which the softmax writes scaled by `2^-e` ([`blocks_exponent`])
/// like F16 ones, with a scale `e` lower, so that each code is the
/// graph's rounding of the exponential against its block's largest one
/// (the row's, in the reference).
pub fn probs_buffer_precision(a: &AttentionShape, rk: u64, blocks: Precision) -> Precision {
    match a.probs {
        Precision::F8 { format, scale } => {
            let e = i8::try_from(blocks_exponent(rk, blocks)).unwrap_or(i8::MAX);
            Precision::F8 {
                format,
                scale: scale.saturating_sub(e),
            }
        }
        other => other,
    }
}

/// An attention lowered to the AMP: its grid (one pair per tile), how
/// many passes each tile's query rows take, and the precisions its two
/// GEMMs write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AmpAttention {
    /// The grid: `pb = batch`, `ph = heads`.
    pub grid: AttentionGrid,
    /// Passes over each tile's query rows (split as evenly as they go):
    /// the scores and probabilities are held for one pass at a time.
    pub passes: u32,
    /// Precision of the scores (the first GEMM's output).
    pub scores: Precision,
    /// Precision of the unnormalised blocks (the second GEMM's output and
    /// partial sums), which the combine reads.
    pub blocks: Precision,
}

impl AmpAttention {
    /// Query rows of the longest pass of the longest query block.
    pub fn pass_rows(&self, a: &AttentionShape) -> u64 {
        blocks(a, self.grid)
            .0
            .div_ceil(u64::from(self.passes.max(1)))
    }

    /// Rows of the longest key block, padded ([`key_block`]).
    pub fn key_rows(&self, a: &AttentionShape) -> u64 {
        blocks(a, self.grid).1
    }

    /// The precision of the probabilities' buffer
    /// ([`probs_buffer_precision`]).
    pub fn probs_buffer(&self, a: &AttentionShape) -> Precision {
        probs_buffer_precision(a, self.key_rows(a), self.blocks)
    }
}

/// The query rows of each of `passes` passes over `rows` rows: as even as
/// they go, the longer first.
pub fn pass_rows(rows: u64, passes: u32) -> impl Iterator<Item = u64> {
    let n = u64::from(passes.max(1)).min(rows.max(1));
    (0..n).map(move |i| rows / n + u64::from(i < rows % n))
}

/// The estimated cycles of an attention's steps on its busiest tile, each
/// with its sync.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttentionCycles {
    /// The clear of padding the kernels read.
    pub clear: u64,
    /// The exchange bringing queries, keys and values.
    pub operands: u64,
    /// The keys' and values' panels (AMP attention only).
    pub panels: u64,
    /// The blocks (vector blocks, or transpose, GEMMs and softmax).
    pub blocks: u64,
    /// The exchange gathering blocks to combine (`s > 1`).
    pub gather: u64,
    /// The combine.
    pub combine: u64,
}

impl AttentionCycles {
    /// All steps.
    pub fn total(&self) -> u64 {
        self.clear
            .saturating_add(self.operands)
            .saturating_add(self.panels)
            .saturating_add(self.blocks)
            .saturating_add(self.gather)
            .saturating_add(self.combine)
    }
}

/// The `e` of the probabilities' scale `2^-e` for key blocks of `rk`
/// rows (padded) whose products keep F16 partial sums: the least with
/// `2^e ≥ rk`, so that `Σ_j p_j 2^-e |v_j| ≤ max |v_j|` since every
/// `p_j ≤ 1`. Zero for F32 blocks, whose sums cannot overflow.
pub fn blocks_exponent(rk: u64, blocks: Precision) -> u32 {
    if blocks == Precision::F32 {
        0
    } else {
        rk.max(1).next_power_of_two().trailing_zeros()
    }
}

/// The head dimension rounded up to whole AMP blocks.
pub fn padded_head_dim(a: &AttentionShape) -> u64 {
    a.head_dim().div_ceil(KEY_BLOCK) * KEY_BLOCK
}

/// Whether the values' product also sums the probabilities: where the
/// head dimension leaves its panels a padding column, that column holds
/// ones ([`Codelet::Panels`](crate::program::Codelet::Panels)'s `ones`),
/// which costs the AMP nothing and spares the softmax its row sums; the
/// values' precision must hold 1 exactly.
pub fn sums_on_amp(a: &AttentionShape) -> bool {
    padded_head_dim(a) > a.head_dim() && a.values.quantize(1.0) == 1.0
}

/// Columns a head takes in the blocks: the head dimension, and where the
/// AMP computes the row sums ([`sums_on_amp`]) their column, rounded up
/// so that a row of F16 blocks is whole exchange words for the gather
/// (within the padded head either way: 74 for a head dimension of 72).
pub fn block_head_width(a: &AttentionShape) -> u64 {
    if sums_on_amp(a) {
        let per_word = crate::graph::WORD_BYTES / Precision::F16.element_bytes();
        (a.head_dim() + 1).next_multiple_of(per_word)
    } else {
        a.head_dim()
    }
}

/// Bytes of one head's row of blocks in `blocks`' precision with its
/// statistics: the F32 maximum, and the sum, an F32 statistic or (with
/// `sums_in_blocks`) a column of the blocks.
fn block_row_bytes(a: &AttentionShape, blocks: Precision, sums_in_blocks: bool) -> u64 {
    let (columns, stats) = if sums_in_blocks {
        (block_head_width(a), 1)
    } else {
        (a.head_dim(), 2)
    };
    columns * blocks.element_bytes() + stats * 4
}

/// Largest blocks of a grid: `(query rows, key rows padded to
/// [`key_block`], key rows holding data)`. The keys are split as evenly
/// as the rows allow and each block padded on its own (the layouts'
/// `key_rows`), so that no block carries more keys than it must: the
/// softmax and the panels' exchange read the keys, the products their
/// padded blocks.
fn blocks(a: &AttentionShape, grid: AttentionGrid) -> (u64, u64, u64) {
    let rq = a.tq.div_ceil(u64::from(grid.gq.max(1)));
    let rk_data = a.tk.div_ceil(u64::from(grid.s.max(1)));
    (rq, rk_data.next_multiple_of(key_block(a)), rk_data)
}

/// Whether an attention can run on the AMP: F16 queries and keys, F16 or
/// FP8 values (whose largest value F16 holds), an F16 softmax (the
/// second product's left operand is the F16 exponentials, which only the
/// F16 softmax rounds to) whose probabilities are F16, or FP8 with FP8
/// values (the AMP multiplies FP8 rows by FP8 weights only), whole heads,
/// and at least one tile per `(batch, head)` pair.
pub fn amp_attention_supported(
    a: &AttentionShape,
    operands: Precision,
    softmax_f16: bool,
    tiles: u32,
) -> bool {
    let pairs = a.batch.saturating_mul(a.heads);
    // FP8 values whose largest magnitude F16 holds: the second product's
    // F16 partial sums stay within the largest value (see the header).
    let values = a.values == Precision::F16
        || (a.values.is_fp8() && a.values.max_value() <= Precision::F16.max_value());
    let probs = a.probs == Precision::F16 || (a.probs.is_fp8() && a.values.is_fp8());
    operands == Precision::F16
        && values
        && probs
        && softmax_f16
        && a.heads > 0
        && a.hidden % a.heads == 0
        && a.head_dim() > 0
        && a.tq > 0
        && a.tk > 0
        && pairs > 0
        && pairs <= u64::from(tiles)
}

/// The grids of an AMP attention on at most `tiles` tiles: every pair on
/// tiles of its own, each pair's `tiles / pairs` tiles split `gq × s`.
pub fn amp_attention_grids(a: &AttentionShape, tiles: u32) -> Vec<AttentionGrid> {
    let pairs = a.batch.saturating_mul(a.heads).max(1);
    let groups = u64::from(tiles) / pairs;
    let key_blocks = a.tk.div_ceil(KEY_BLOCK);
    let mut out = Vec::new();
    for s in 1..=groups.min(key_blocks) {
        let gq = (groups / s).min(a.tq).max(1);
        out.push(AttentionGrid {
            pb: a.batch as u32,
            ph: a.heads as u32,
            gq: gq as u32,
            s: s as u32,
        });
    }
    out
}

/// A GEMM call the scorer costs: `(small, large, rows, inner, columns,
/// left, right and output precisions)`.
type KernelCall = (u64, u64, u64, u64, u64, [Precision; 3]);

/// Costs AMP attention grids the way the package's estimate will cost
/// their steps, remembering kernel costs by shape.
#[derive(Debug)]
pub struct AmpAttentionScorer<'a> {
    shape: AttentionShape,
    cost: &'a CostModel,
    scores: Precision,
    blocks: Precision,
    kernels: HashMap<KernelCall, Option<u64>>,
}

impl<'a> AmpAttentionScorer<'a> {
    /// A scorer for attention `shape` whose scores are written in `scores`
    /// and blocks in `blocks`.
    pub fn new(
        shape: AttentionShape,
        scores: Precision,
        blocks: Precision,
        cost: &'a CostModel,
    ) -> Self {
        AmpAttentionScorer {
            shape,
            cost,
            scores,
            blocks,
            kernels: HashMap::new(),
        }
    }

    /// Tile cycles of a GEMM call on `rows` rows of `inner × columns`
    /// reading `left` and `right` and writing `output`, by the variant
    /// serving `small` and `large` rows, or `None` when no variant can be
    /// planned.
    fn kernel(
        &mut self,
        (small, large, rows): (u64, u64, u64),
        inner: u64,
        columns: u64,
        [left, right, output]: [Precision; 3],
    ) -> Option<u64> {
        let key = (small, large, rows, inner, columns, [left, right, output]);
        if let Some(&known) = self.kernels.get(&key) {
            return known;
        }
        let shape = GemmShape {
            rows: u32::try_from(large).ok()?,
            inner: u32::try_from(inner).ok()?,
            columns: u32::try_from(columns).ok()?,
            left,
            left_order: ElementOrder::RowMajor,
            right,
            output,
            output_order: ElementOrder::RowMajor,
            right_class: MemoryClass::Ipu21Interleaved,
        };
        let config = self.cost.steps.plan_config();
        let cycles = match (u32::try_from(small), u32::try_from(rows)) {
            (Ok(small), Ok(rows)) => plan_variant(&shape, small, shape.rows, &config)
                .ok()
                .map(|v| estimate_cycles(&v, rows, Mode::Initialise).cycles),
            _ => None,
        };
        self.kernels.insert(key, cycles);
        cycles
    }

    /// The steps of `grid` with `passes` passes over the query rows, on
    /// its busiest tile, or `None` when a kernel cannot be planned for it.
    pub fn score(&mut self, grid: AttentionGrid, passes: u32) -> Option<AttentionCycles> {
        let a = self.shape;
        let cost = self.cost;
        let vector = &cost.steps.vector;
        let sync = cost.steps.sync_cycles;
        let d = a.head_dim();
        let dp = padded_head_dim(&a);
        let (rq, rk, rk_data) = blocks(&a, grid);
        let zero = |bytes: u64, runs: u64| vector.cycles(&Work::Zero { bytes, runs });
        // The queries' padding: a strided clear of each row's end, or the
        // whole span, whichever the lowering finds cheaper.
        let clear = zero(rq * dp * 2, 1)
            .min(zero((dp - d) * 2, rq))
            .saturating_add(sync);
        let received = (rq + rk_data) * d * 2 + rk_data * d * a.values.element_bytes();
        let operands = cost.exchange_cycles(received).saturating_add(sync);
        let panels = vector
            .cycles(&Work::Panels {
                out_rows: dp,
                out_cols: rk,
                transpose: true,
                fp8: false,
            })
            .saturating_add(vector.cycles(&Work::Panels {
                out_rows: rk,
                out_cols: dp,
                transpose: false,
                fp8: a.values.is_fp8(),
            }))
            .saturating_add(sync);
        let mut blocks = sync;
        // The passes of the longest query block; a kernel serves the two
        // row counts its passes have.
        let rows: Vec<u64> = pass_rows(rq, passes).collect();
        let (small, large) = (
            rows.iter().copied().min().unwrap_or(1),
            rows.iter().copied().max().unwrap_or(1),
        );
        let f16 = Precision::F16;
        let probs = probs_buffer_precision(&a, rk, self.blocks);
        for &r in &rows {
            let scores = self.kernel((small, large, r), dp, rk, [f16, f16, self.scores])?;
            let values = self.kernel((small, large, r), rk, dp, [probs, a.values, self.blocks])?;
            let softmax = vector.cycles(&Work::AttentionSoftmax {
                rows: r,
                columns: rk,
                keys: rk_data,
                score_lanes: vector.lanes(self.scores),
                prob_lanes: vector.lanes(probs),
                unscaled: a.score_scale() == 1.0,
                sums_on_amp: sums_on_amp(&a),
            });
            blocks = blocks
                .saturating_add(scores)
                .saturating_add(softmax)
                .saturating_add(values);
        }
        let (gather, combine) = combine_cycles(&a, grid, rq, self.blocks, sums_on_amp(&a), cost);
        Some(AttentionCycles {
            clear,
            operands,
            panels,
            blocks,
            gather,
            combine,
        })
    }

    /// Bytes of the largest tile at the fullest of its steps: while the
    /// panels are written (queries, keys and values, and their panels),
    /// while the blocks run (queries, panels, one pass's scores and
    /// probabilities, the blocks and their statistics), or, with `s > 1`,
    /// while the blocks are gathered for the combine.
    pub fn bytes_per_tile(&self, grid: AttentionGrid, passes: u32) -> u64 {
        let a = &self.shape;
        let d = a.head_dim();
        let dp = padded_head_dim(a);
        let (rq, rk, _) = blocks(a, grid);
        let pass = rq.div_ceil(u64::from(passes.max(1)));
        let eb = self.blocks.element_bytes();
        let stats = if sums_on_amp(a) { 1 } else { 2 };
        let results = rq * dp * eb + stats * rq * 4;
        let vb = a.values.element_bytes();
        let held = rq * dp * 2 + rk * dp * vb + dp * rk * 2;
        let panels = held + rk * d * (2 + vb);
        // The probabilities, in a buffer of their own unless over the
        // scores.
        let probs = if probs_over_scores(a, self.scores) {
            0
        } else {
            a.probs.element_bytes()
        };
        let scratch = pass * rk * (self.scores.element_bytes() + probs);
        let gathered = if grid.s > 1 {
            let fine =
                a.tq.div_ceil((u64::from(grid.gq) * u64::from(grid.s)).min(a.tq));
            u64::from(grid.s) * fine * block_row_bytes(a, self.blocks, sums_on_amp(a))
        } else {
            0
        };
        panels.max(held + scratch + results).max(results + gathered)
    }
}

/// The gather and combine steps of an attention whose largest block has
/// `rq` query rows and whose blocks are in `blocks`' precision (their
/// statistics in F32, the sums a column of the blocks with
/// `sums_in_blocks`): `(gather, combine)` cycles with their syncs.
pub(crate) fn combine_cycles(
    a: &AttentionShape,
    grid: AttentionGrid,
    rq: u64,
    blocks: Precision,
    sums_in_blocks: bool,
    cost: &CostModel,
) -> (u64, u64) {
    let row_bytes = block_row_bytes(a, blocks, sums_in_blocks);
    let d = a.head_dim();
    let sync = cost.steps.sync_cycles;
    let heads_per = a.heads.div_ceil(u64::from(grid.ph.max(1)));
    let pairs = a.batch.div_ceil(u64::from(grid.pb.max(1))) * heads_per;
    let s = u64::from(grid.s.max(1));
    let (gather, rows) = if s > 1 {
        // Each block tile sends its rows; each combine tile receives `s`
        // blocks of its finer share of them.
        let fine = a.tq.div_ceil((u64::from(grid.gq) * s).min(a.tq));
        let received = pairs * s * fine * row_bytes;
        let sent = pairs * rq * row_bytes;
        (
            cost.exchange_cycles(received.max(sent))
                .saturating_add(sync),
            fine,
        )
    } else {
        (0, rq)
    };
    let combine = cost
        .steps
        .vector
        .cycles(&Work::AttentionCombine {
            blocks: s,
            q_rows: rows,
            head_dim: d,
            block_precision: blocks,
        })
        .saturating_mul(pairs)
        .saturating_add(sync);
    (gather, combine)
}

/// The steps of the vector attention on `grid` (operands in
/// `element_bytes`, scores in F16 or F32), costed like
/// [`AmpAttentionScorer::score`]'s, so that the two can be compared.
pub fn vector_attention_cycles(
    a: &AttentionShape,
    grid: AttentionGrid,
    element_bytes: u64,
    softmax_f16: bool,
    cost: &CostModel,
) -> AttentionCycles {
    let vector = &cost.steps.vector;
    let sync = cost.steps.sync_cycles;
    let d = a.head_dim();
    let pairs =
        a.batch.div_ceil(u64::from(grid.pb.max(1))) * a.heads.div_ceil(u64::from(grid.ph.max(1)));
    let rq = a.tq.div_ceil(u64::from(grid.gq.max(1)));
    let rk = a.tk.div_ceil(u64::from(grid.s.max(1)));
    let received = pairs * ((rq + rk) * d * element_bytes + rk * d * a.values.element_bytes());
    let score_lanes = vector.lanes(if softmax_f16 {
        Precision::F16
    } else {
        Precision::F32
    });
    let block = vector.cycles(&Work::AttentionBlock {
        q_rows: rq,
        kv_rows: rk,
        head_dim: d,
        score_lanes,
        // Planned unmasked: a causal block's cost is at most this.
        diagonal: None,
        probs_fp8: a.probs.is_fp8(),
    });
    let (gather, combine) = combine_cycles(a, grid, rq, Precision::F32, false, cost);
    AttentionCycles {
        clear: 0,
        panels: 0,
        operands: cost.exchange_cycles(received).saturating_add(sync),
        blocks: block.saturating_mul(pairs).saturating_add(sync),
        gather,
        combine,
    }
}

/// Whether the softmax writes its F16 probabilities over the scores they
/// are computed from: it reads a pass's scores whole before it writes, and
/// F16 scores have the probabilities' layout, so one buffer serves both and
/// a pass holds half the scratch (at batch 6 two passes over the query rows
/// fit where three did, each pass paying the kernels' fixed costs again).
/// F32 scores and FP8 probabilities keep a buffer of their own (a buffer
/// has one precision).
pub fn probs_over_scores(a: &AttentionShape, scores: Precision) -> bool {
    scores == Precision::F16 && a.probs == Precision::F16
}

/// The most passes over a tile's query rows a plan considers: beyond it
/// the kernels' fixed costs outweigh the memory saved.
const MAX_PASSES: u32 = 8;

/// The AMP grid and passes an attention runs on: of the plans whose
/// largest tile needs at most `budget` bytes, the one whose steps cost
/// least (ties to fewer key blocks, then fewer passes); when none fits,
/// the one needing the fewest bytes. With it, its steps and whether it
/// fits. `None` when no plan can be costed.
pub fn choose_amp_attention(
    a: &AttentionShape,
    tiles: u32,
    budget: u64,
    cost: &CostModel,
) -> Option<(AmpAttention, AttentionCycles, bool)> {
    // F16 scores and blocks: the module header says why.
    let (scores, partial) = (Precision::F16, Precision::F16);
    let mut scorer = AmpAttentionScorer::new(*a, scores, partial, cost);
    // (does not fit, cycles or bytes, plan, cycles)
    let mut best: Option<(bool, u64, AmpAttention, AttentionCycles)> = None;
    for grid in amp_attention_grids(a, tiles) {
        let rq = blocks(a, grid).0;
        for passes in 1..=MAX_PASSES.min(u32::try_from(rq).unwrap_or(u32::MAX)) {
            let bytes = scorer.bytes_per_tile(grid, passes);
            let over = bytes > budget;
            if over && best.as_ref().is_some_and(|b| !b.0) {
                continue;
            }
            let Some(c) = scorer.score(grid, passes) else {
                continue;
            };
            let key = (over, if over { bytes } else { c.total() });
            if best.as_ref().is_none_or(|b| key < (b.0, b.1)) {
                let plan = AmpAttention {
                    grid,
                    passes,
                    scores,
                    blocks: partial,
                };
                best = Some((key.0, key.1, plan, c));
            }
        }
    }
    best.map(|(over, _, plan, c)| (plan, c, !over))
}

/// The layouts of an AMP attention.
#[derive(Clone, Debug)]
pub struct AmpAttentionLayouts {
    /// `[B, Tq, H]` F16, row-major, a pair's head columns padded to 16 on
    /// each tile (the first GEMM's left operand), replicated `s` times.
    pub q: TensorType,
    /// `[B, Tk, H]` F16, row-major, key rows in blocks of [`key_block`],
    /// replicated `gq` times (the transpose's source).
    pub k: TensorType,
    /// `[B, Tk, H]` in the values' precision, row-major, key rows in
    /// blocks like the keys', replicated `gq` times (the values' panels'
    /// source).
    pub v: TensorType,
    /// `[tiles, d₁₆, rk]` F16 in `Amp(Right)` order, interleaved: each
    /// tile's transposed keys (the first GEMM's right operand).
    pub keys_t: TensorType,
    /// `[tiles, rk, d₁₆]` in the values' precision, `Amp(Right)` order,
    /// interleaved: each tile's values (the second GEMM's right operand).
    pub values: TensorType,
    /// `[tiles, rq, rk]` scores, row-major.
    pub scores: TensorType,
    /// `[tiles, rq, rk]` probabilities in [`AmpAttention::probs_buffer`],
    /// row-major (the scores' own buffer where [`probs_over_scores`]).
    pub probs: TensorType,
    /// `[s, B, Tq, H]` unnormalised blocks in the plan's `blocks`
    /// precision, head columns padded to 16 (the second GEMM's output).
    pub out_part: TensorType,
    /// `[s, B, heads, Tq]` F32 row maxima (and sums).
    pub stat_part: TensorType,
    /// The blocks where they are combined (`out_part` when `s == 1`).
    pub out_combine: TensorType,
    /// The statistics where they are combined.
    pub stat_combine: TensorType,
    /// `[B, Tq, H]` result.
    pub output: TensorType,
}

/// Builds the layouts of `plan` for attention `a`, the result in `output`.
pub fn amp_attention_layouts(
    a: &AttentionShape,
    plan: AmpAttention,
    output: Precision,
) -> Result<AmpAttentionLayouts, LayoutError> {
    let grid = plan.grid;
    let AttentionGrid { pb, ph, gq, s } = grid;
    let (pb, ph, gq, s) = (u64::from(pb), u64::from(ph), u64::from(gq), u64::from(s));
    let d = a.head_dim();
    let dp = padded_head_dim(a);
    let tiles =
        u32::try_from(pb * ph * gq * s).map_err(|_| LayoutError::Overflow { what: "grid" })?;
    let (st_kv, st_q, st_h, st_b) = (1, s, s * gq, s * gq * ph);
    let (rm, std, il) = (
        ElementOrder::RowMajor,
        MemoryClass::Ipu21Standard,
        MemoryClass::Ipu21Interleaved,
    );
    let right = ElementOrder::Amp(AmpOperand::Right);
    let heads = |pad: u64| {
        let mut axis = split(Axis::FromEnd(1), ph, d, st_h);
        axis.shard_padding_multiple = pad as u32;
        axis
    };
    // The blocks' heads, each with the row sums' column where the AMP
    // computes them.
    let width = block_head_width(a);
    let mut block_heads = split(Axis::FromEnd(1), ph, width, st_h);
    block_heads.shard_padding_multiple = KEY_BLOCK as u32;
    let batch = |axis: u32| split(Axis::FromStart(axis), pb, 1, st_b);
    let query_rows = |axis: u32| split(Axis::FromStart(axis), gq, 1, st_q);
    // Even key blocks, each padded to whole AMP blocks (`blocks`).
    let mut key_rows = split(Axis::FromStart(1), s, 1, st_kv);
    key_rows.shard_padding_multiple = key_block(a) as u32;
    let q = tensor_type(
        &[a.batch, a.tq, a.hidden],
        Precision::F16,
        rm,
        std,
        TensorTiling::new(
            tiles,
            s as u32,
            vec![batch(0), heads(KEY_BLOCK), query_rows(1)],
        )?,
    )?;
    let kv_tiling = TensorTiling::new(tiles, gq as u32, vec![batch(0), heads(1), key_rows])?;
    let k = tensor_type(
        &[a.batch, a.tk, a.hidden],
        Precision::F16,
        rm,
        std,
        kv_tiling.clone(),
    )?;
    let v = tensor_type(&[a.batch, a.tk, a.hidden], a.values, rm, std, kv_tiling)?;
    let (rq, rk) = (plan.pass_rows(a), blocks(a, grid).1);
    let scratch = |inner: u64, columns: u64, precision: Precision, order, class| {
        tensor_type(
            &[u64::from(tiles), inner, columns],
            precision,
            order,
            class,
            TensorTiling::new(
                tiles,
                1,
                vec![split(Axis::FromStart(0), u64::from(tiles), 1, 1)],
            )?,
        )
    };
    let keys_t = scratch(dp, rk, Precision::F16, right, il)?;
    let values = scratch(rk, dp, a.values, right, il)?;
    let scores = scratch(rq, rk, plan.scores, rm, std)?;
    let probs = scratch(rq, rk, plan.probs_buffer(a), rm, std)?;
    let out_part = tensor_type(
        &[s, a.batch, a.tq, a.heads * width],
        plan.blocks,
        rm,
        std,
        TensorTiling::new(
            tiles,
            1,
            vec![
                batch(1),
                block_heads,
                query_rows(2),
                split(Axis::FromStart(0), s, 1, st_kv),
            ],
        )?,
    )?;
    let stat_part = tensor_type(
        &[s, a.batch, a.heads, a.tq],
        Precision::F32,
        rm,
        std,
        TensorTiling::new(
            tiles,
            1,
            vec![
                batch(1),
                split(Axis::FromStart(2), ph, 1, st_h),
                split(Axis::FromStart(3), gq, 1, st_q),
                split(Axis::FromStart(0), s, 1, st_kv),
            ],
        )?,
    )?;
    let (out_combine, stat_combine, output_tiling) = if s == 1 {
        let tiling = TensorTiling::new(tiles, 1, vec![batch(0), heads(1), query_rows(1)])?;
        (out_part.clone(), stat_part.clone(), tiling)
    } else {
        fine_combine(a, grid, plan.blocks, width)?
    };
    let output = tensor_type(&[a.batch, a.tq, a.hidden], output, rm, std, output_tiling)?;
    Ok(AmpAttentionLayouts {
        q,
        k,
        v,
        keys_t,
        values,
        scores,
        probs,
        out_part,
        stat_part,
        out_combine,
        stat_combine,
        output,
    })
}
