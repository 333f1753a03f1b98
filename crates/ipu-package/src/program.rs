//! The tiled program: buffers, steps and the codelets tiles run.
//!
//! Lowering turns a [`Graph`](crate::graph::Graph) into a [`Program`]:
//! every tensor the device holds becomes a [`Buffer`] with a
//! [`TensorType`], and the computation becomes a sequence of bulk-synchronous
//! [`Step`]s — compute steps, where each tile runs [`Codelet`]s on its own
//! shards, and exchange steps, where buffers are redistributed between
//! layouts. A [`Step::Repeat`] keeps a repeated layer structured: one body,
//! run `count` times, with the buffers that differ per iteration (the
//! layer's weights) named in a substitution table. Every compute and
//! exchange step carries a [`StepLabel`]: the graph operation it belongs
//! to and its [`StepRole`]. [`Program::walk`] (in `walk.rs`) is the one
//! walk over steps and repeats.
//!
//! Codelet operands name a buffer and a byte offset inside the calling
//! tile's shard; placement later turns them into addresses. Every codelet
//! but the GEMM and the panels (which write an AMP operand's panels)
//! works on row-major shards whose shapes it is given explicitly, so the
//! simulator and the device need no layout logic.

use ipu_layout::{ElementOrder, IdVec, MemoryClass, Precision, SourceView, TensorType, TileId};
use serde::{Deserialize, Serialize};

use crate::graph::{Activation, OpId};

mod walk;

pub use walk::{At, Walk, WalkEvent};

ipu_layout::define_id!(
    /// A buffer of a [`Program`].
    pub struct BufferId, "buf"
);

ipu_layout::define_id!(
    /// A GEMM kernel variant of a [`Program`].
    pub struct KernelId, "kernel"
);

/// Where a causal [`Codelet::AttentionBlock`]'s rows sit in the whole
/// attention: the global indices of its first query row and first key row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CausalRows {
    /// The block's first query row within its batch element.
    pub q_first: u32,
    /// The block's first key row within its batch element.
    pub kv_first: u32,
}

impl CausalRows {
    /// How many rows past its first key row the block's first query row
    /// is: query row `r` sees local keys `j ≤ r + diagonal`.
    pub fn diagonal(self) -> i64 {
        i64::from(self.q_first) - i64::from(self.kv_first)
    }
}

/// What a buffer holds, which decides its lifetime and who fills it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BufferRole {
    /// Written by the host before every run.
    Input,
    /// Written by the host once; read-only; live for the whole program.
    Weight,
    /// Read by the host after the run.
    Output,
    /// A graph tensor computed on the device.
    Activation,
    /// A value the lowering introduced (operand copies, partial sums,
    /// attention statistics).
    Temporary,
}

/// A tensor as the device holds it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Buffer {
    /// A unique, readable name (graph tensor names, with suffixes for
    /// temporaries).
    pub name: String,
    /// Shape, precision, order, tiling and memory class.
    pub ty: TensorType,
    /// What the buffer holds.
    pub role: BufferRole,
    /// Whether a codelet reads the buffer's padding, which must then hold
    /// zeros: the lowering clears it at the start of the buffer's life.
    pub padding_read: bool,
    /// Bytes past the shard's end that a codelet reads (the AMP left
    /// operand's over-read); they belong to the allocation.
    pub tail_bytes: u32,
    /// Required address alignment in bytes.
    pub alignment: u32,
}

/// A codelet operand: a buffer's shard on the calling tile, from a byte
/// offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Operand {
    /// The buffer.
    pub buffer: BufferId,
    /// Byte offset inside the calling tile's shard.
    pub offset: u32,
}

impl From<BufferId> for Operand {
    fn from(buffer: BufferId) -> Self {
        Operand { buffer, offset: 0 }
    }
}

/// Which entry of a GEMM kernel object a call uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmEntry {
    /// The large-rows entry (else small rows).
    pub large: bool,
    /// Accumulate into the output (else initialise it).
    pub accumulate: bool,
}

impl GemmEntry {
    /// The entry's index among its object's four, in the order of
    /// [`ipu_kernels::Variant::entry_points`]: small initialise, small
    /// accumulate, large initialise, large accumulate.
    pub fn index(self) -> usize {
        usize::from(self.large) * 2 + usize::from(self.accumulate)
    }

    /// The entry at `index` (the inverse of [`GemmEntry::index`] on 0..4).
    pub fn from_index(index: usize) -> GemmEntry {
        GemmEntry {
            large: index >= 2,
            accumulate: index % 2 == 1,
        }
    }

    /// The entry's row count and mode.
    pub fn parts(self) -> (ipu_kernels::RowSize, ipu_kernels::Mode) {
        let size = if self.large {
            ipu_kernels::RowSize::Large
        } else {
            ipu_kernels::RowSize::Small
        };
        let mode = if self.accumulate {
            ipu_kernels::Mode::Accumulate
        } else {
            ipu_kernels::Mode::Initialise
        };
        (size, mode)
    }
}

/// A [`Codelet::Zero`] without a run count writes one run.
fn one_run() -> u32 {
    1
}

/// The largest scale exponent of [`Codelet::AttentionSoftmax`]'s
/// probabilities: `2^-14` is the smallest normal F16 number, so a
/// probability of 1 stays normal (enough for key blocks of 2^14 rows).
pub const MAX_PROB_EXPONENT: u32 = 14;

/// Work one tile does on its own memory in a compute step.
///
/// Shapes are of the calling tile's shards, padding included where the
/// codelet says so; precisions are the operand buffers'.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Codelet {
    /// An AMP GEMM kernel: `output (+)= left × right` on `Amp` shards.
    Gemm {
        /// The kernel variant.
        kernel: KernelId,
        /// The entry symbol.
        entry: GemmEntry,
        /// Rows of the left shard.
        rows: u32,
        /// `[rows, inner]` in `Amp(Left)` order.
        left: Operand,
        /// `[inner, columns]` in `Amp(Right)` order.
        right: Operand,
        /// `[rows, columns]` in the output buffer's order.
        output: Operand,
    },
    /// `out[r, c] = a[r, c] + b[r', c]` on row-major `[rows, cols]` shards,
    /// with `r' = r` or, when `broadcast_rows`, `r' = 0` (a bias row).
    Add {
        /// The first addend.
        a: Operand,
        /// The second addend.
        b: Operand,
        /// The sum.
        out: Operand,
        /// Rows.
        rows: u32,
        /// Columns.
        cols: u32,
        /// Whether `b` is a single row added to every row.
        broadcast_rows: bool,
    },
    /// Layer normalisation of each of `rows` rows of `cols` elements.
    LayerNorm {
        /// `[rows, cols]`.
        input: Operand,
        /// `[cols]` gain.
        scale: Operand,
        /// `[cols]` offset.
        bias: Operand,
        /// `[rows, cols]`.
        output: Operand,
        /// Rows.
        rows: u32,
        /// Columns (the normalised extent, no padding).
        cols: u32,
        /// Added to the variance.
        eps: f32,
    },
    /// An activation function of `elements` elements.
    ///
    /// Serialised under the name `Gelu` it had when the tanh GELU was the
    /// only activation, with `function` left out for that one, so that
    /// such packages read and write as before.
    #[serde(rename = "Gelu")]
    Activation {
        /// Argument.
        input: Operand,
        /// Result.
        output: Operand,
        /// Elements.
        elements: u32,
        /// The function.
        #[serde(
            default = "gelu_tanh",
            skip_serializing_if = "Activation::is_gelu_tanh"
        )]
        function: Activation,
    },
    /// Converts `elements` elements to the output buffer's precision
    /// (an FP8 cast, or any other conversion between precisions).
    Convert {
        /// Source.
        input: Operand,
        /// Result.
        output: Operand,
        /// Elements.
        elements: u32,
    },
    /// `output[e] = Σ_i input[i · elements + e]` for `i < count`: sums
    /// partial results laid out one after another.
    ReduceSum {
        /// `[count, elements]`.
        input: Operand,
        /// `[elements]`.
        output: Operand,
        /// Partials.
        count: u32,
        /// Elements per partial.
        elements: u32,
    },
    /// One block of attention for one head: `q_rows` queries against
    /// `kv_rows` keys and values with `head_dim` columns, rows `q_stride`,
    /// `kv_stride` and `out_stride` elements apart. Writes the unnormalised
    /// output `Σ_j exp(s_j − m) v_j` (F32), the row maxima `m` and the sums
    /// `l = Σ_j exp(s_j − m)` (F32, one per query row, contiguous), for
    /// [`Codelet::AttentionCombine`].
    AttentionBlock {
        /// Queries.
        q: Operand,
        /// Keys.
        k: Operand,
        /// Values.
        v: Operand,
        /// Unnormalised output, F32.
        out: Operand,
        /// Row maxima, F32.
        max: Operand,
        /// Row sums of exponentials, F32.
        sum: Operand,
        /// F32 scratch of `kv_rows` elements.
        workspace: Operand,
        /// Query rows.
        q_rows: u32,
        /// Key and value rows.
        kv_rows: u32,
        /// Columns per head.
        head_dim: u32,
        /// Elements between query rows.
        q_stride: u32,
        /// Elements between key (and value) rows.
        kv_stride: u32,
        /// Elements between output rows.
        out_stride: u32,
        /// `1 / sqrt(head_dim)`.
        scale: f32,
        /// Whether scores and exponentials are rounded to F16.
        softmax_f16: bool,
        /// A causal mask: query row `r` sees key rows `j` with
        /// `kv_first + j ≤ q_first + r` only (a row that sees none writes
        /// maximum −∞, sum 0 and a zero output, which the combine
        /// weighs 0). Absent in packages from before masks, which means
        /// every key; left out of unmasked calls so their packages are
        /// unchanged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        causal: Option<CausalRows>,
        /// Whether each exponential is rounded to
        /// [`FP8_PROBABILITIES`](crate::graph::FP8_PROBABILITIES) (relative
        /// to the block's row maximum) before it weighs its value row and
        /// joins the sum: an F16-FP8 softmax. Absent in packages from
        /// before it existed, which means not.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        probs_fp8: bool,
    },
    /// Combines `blocks` attention blocks into the normalised output
    /// `Σ_b e^{m_b − m} o_b / Σ_b e^{m_b − m} l_b` with `m = max_b m_b`.
    ///
    /// The arithmetic follows the blocks' precision. F32 blocks are
    /// weighed, added and divided in F32. F16 blocks (the AMP attention's)
    /// are combined in F16: each weight `e^{m_b − m}` is rounded to F16,
    /// every product and sum of the row is rounded to F16, and the row is
    /// multiplied by the F16 reciprocal of its total (the total itself,
    /// one scalar a row, stays F32). Its output is F16 and is cast to FP8
    /// for the next GEMM, a far coarser rounding than the combine's.
    AttentionCombine {
        /// Unnormalised outputs, F32 or F16: block `b`, row `r` at
        /// `b · out_block_stride + r · out_row_stride`.
        out: Operand,
        /// Row maxima, F32: block `b`, row `r` at `b · stat_block_stride + r`.
        max: Operand,
        /// Row sums, F32, laid out like `max`; or, with `sums_in_blocks`,
        /// in the blocks' precision at `b · out_block_stride + r ·
        /// out_row_stride` (column `head_dim` of the blocks' rows).
        sum: Operand,
        /// Whether the row sums are a column of the blocks (the values'
        /// product summed the probabilities against a column of ones,
        /// [`Codelet::Panels::ones`]) rather than statistics of their own;
        /// absent in packages from before it existed, which means not.
        #[serde(default)]
        sums_in_blocks: bool,
        /// The result, rows `output_row_stride` elements apart.
        output: Operand,
        /// Blocks to combine.
        blocks: u32,
        /// Query rows.
        q_rows: u32,
        /// Columns per head.
        head_dim: u32,
        /// Elements between blocks of `out`.
        out_block_stride: u32,
        /// Elements between rows of `out`.
        out_row_stride: u32,
        /// Elements between blocks of `max` and `sum`.
        stat_block_stride: u32,
        /// Elements between rows of `output`.
        output_row_stride: u32,
    },
    /// A 16-bit or FP8 `[rows, cols]` row-major block (rows `stride`
    /// elements apart; transposed blocks 16-bit only) written as an AMP
    /// weight operand in the same precision: the `[out_rows, out_cols]`
    /// matrix in `Amp(Right)` order (panels of
    /// [`Precision::amp_panel_columns`] columns) whose element `(i, j)` is
    /// `input[j, i]` when `transpose` (zero where `i ≥ cols` or `j ≥
    /// rows`), else `input[i, j]` (zero where `i ≥ rows` or `j ≥ cols`).
    /// Attention's keys (transposed) and values become the right operands
    /// of its two GEMMs this way: the exchange moves whole words and cannot
    /// transpose 16-bit elements, and it delivers a row in one piece where
    /// AMP panels would cut it into one per panel.
    Panels {
        /// `[rows, cols]`, rows `stride` elements apart.
        input: Operand,
        /// `[out_rows, out_cols]` in `Amp(Right)` order, same precision.
        output: Operand,
        /// Source rows.
        rows: u32,
        /// Source columns.
        cols: u32,
        /// Elements between source rows.
        stride: u32,
        /// Output rows: at least `cols` when transposing, else `rows`.
        out_rows: u32,
        /// Output columns: at least `rows` when transposing, else `cols`.
        out_cols: u32,
        /// Whether the block is transposed.
        transpose: bool,
        /// Without `transpose`: column `cols` of rows `0..rows` is 1 (the
        /// output must have it), so that the product with the values
        /// also sums its left operand's rows into that column (the
        /// softmax then writes no sums). Absent in packages from before
        /// it existed, which means not.
        #[serde(default)]
        ones: bool,
    },
    /// The softmax between attention's two AMP products, for `rows` rows of
    /// scores against `columns` keys, rows `stride` elements apart in both
    /// `scores` and `probs`. Per row: `s_j = scores_j · scale` (rounded to
    /// F16 when `softmax_f16`), `m = max_j s_j`, `p_j = exp(s_j − m) ·
    /// 2^-exponent` rounded to F16 and written to `probs` (zeros in columns
    /// `columns..stride`, so the next GEMM may read the whole row), and
    /// `m` and `l = Σ_j p_j` (F32) written for [`Codelet::AttentionCombine`]
    /// (FP8 `probs` round each F16 `p_j` once more, to their precision,
    /// and `l` sums the rounded values)
    /// (`l` only where `sum` is given: without it the values' product sums
    /// the probabilities, [`Codelet::Panels::ones`]).
    /// The scale `2^-exponent` (the exponential's argument lowered by
    /// `exponent · ln 2`) bounds the next product's F16 partial sums; it
    /// cancels in the combine, which divides by `l`.
    AttentionSoftmax {
        /// Scores `q · k`, F32 or F16.
        scores: Operand,
        /// Unnormalised probabilities, F16 or FP8.
        probs: Operand,
        /// Row maxima, F32.
        max: Operand,
        /// Row sums of the probabilities, F32; none where the values'
        /// product sums them.
        sum: Option<Operand>,
        /// Query rows.
        rows: u32,
        /// Keys (columns holding scores).
        columns: u32,
        /// Elements between rows of `scores` and of `probs`.
        stride: u32,
        /// The scores' factor: `1 / sqrt(head_dim)`, or exactly 1 when the
        /// queries carry it (then no multiply runs, and the cost counts
        /// none).
        scale: f32,
        /// Whether the scaled scores are rounded to F16.
        softmax_f16: bool,
        /// The probabilities are scaled by `2^-exponent` (at most
        /// [`MAX_PROB_EXPONENT`]); absent in packages from before it
        /// existed, which means 0.
        #[serde(default)]
        exponent: u32,
    },
    /// Writes `runs` runs of `bytes` zero bytes, run `i` starting
    /// `i · stride` bytes after `target`: one strided call clears the
    /// padding at the end of every row of a shard.
    Zero {
        /// Where the first run starts.
        target: Operand,
        /// Bytes of each run.
        bytes: u32,
        /// Runs; absent in packages from before strided clears, which
        /// means one.
        #[serde(default = "one_run")]
        runs: u32,
        /// Bytes from one run's start to the next (at least `bytes` when
        /// `runs > 1`); absent means 0.
        #[serde(default)]
        stride: u32,
    },
    /// Rows of a table shard picked by index: for each of the `rows`
    /// indices (F32 whole numbers, contiguous), output row `r` (`cols`
    /// elements, rows `cols` apart) is the table shard's row
    /// `indices[r] − first_row` when that is one of its `table_rows` rows
    /// (`cols` elements each, contiguous), else zeros; each element is
    /// rounded once to the output's precision. An index that is not a
    /// whole number in `0..total_rows` (the whole table's rows) faults the
    /// tile.
    Gather {
        /// The table shard, `[table_rows, cols]`.
        table: Operand,
        /// The row numbers, `[rows]`, F32.
        indices: Operand,
        /// The picked rows, `[rows, cols]`.
        output: Operand,
        /// Indices, and output rows.
        rows: u32,
        /// Rows of the table shard.
        table_rows: u32,
        /// The table row the shard's first row is.
        first_row: u32,
        /// Rows of the whole table.
        total_rows: u32,
        /// Elements per row (the shard's padded width).
        cols: u32,
    },
}

/// What a step does for the operation it belongs to.
///
/// A step is known by its operation's id and this role, never by its
/// name: the build halves an operation's budget from the id, the profile
/// groups time by the role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StepRole {
    /// Zeroes padding that the operation's codelets read.
    Clear,
    /// A GEMM's AMP kernel calls (with its bias where there is no
    /// split-K reduction).
    Gemm,
    /// The sum of a GEMM's split-K partial products (with its bias).
    Reduce,
    /// Attention blocks: scores, softmax statistics and the unnormalised
    /// output of each block of key rows (on the vector unit, or on the AMP
    /// with the keys transposed and the softmax between the products).
    Attention,
    /// Attention's keys (transposed) and values written as the AMP's
    /// weight panels, before its blocks on the AMP.
    Panels,
    /// Attention blocks combined into the normalised output.
    Combine,
    /// An elementwise addition.
    Add,
    /// A layer normalisation.
    LayerNorm,
    /// A conversion between precisions (the FP8 casts).
    Convert,
    /// The values a repeat carries brought into their buffers before its
    /// body.
    EnterRepeat,
    /// What a repeat body leaves pending at its end.
    EndOfRepeat,
    /// The program's outputs brought into their row layouts.
    Outputs,
    /// A view of a view (a reshape of a slice) copied into a buffer of its
    /// own, in an exchange step before the one that reads it.
    View,
    /// Table rows picked by index (each tile its shard's rows, zeros for
    /// the others; summed by a [`StepRole::Reduce`] step where the table's
    /// rows are split over tiles).
    Gather,
    /// An activation function, serialised as the function alone (`Gelu`,
    /// `GeluErf`, `QuickGelu`, `Tanh`).
    #[serde(untagged)]
    Activation(Activation),
}

impl StepRole {
    /// The role's name in logs, profiles and reports.
    pub const fn name(self) -> &'static str {
        match self {
            StepRole::Clear => "clear",
            StepRole::Gemm => "gemm",
            StepRole::Reduce => "reduce",
            StepRole::Attention => "attention",
            StepRole::Panels => "attention panels",
            StepRole::Combine => "attention combine",
            StepRole::Add => "add",
            StepRole::LayerNorm => "layer_norm",
            StepRole::Activation(function) => function.name(),
            StepRole::Convert => "cast_fp8",
            StepRole::EnterRepeat => "enter",
            StepRole::EndOfRepeat => "end of",
            StepRole::Outputs => "outputs",
            StepRole::Gather => "gather",
            StepRole::View => "view",
        }
    }
}

impl std::fmt::Display for StepRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which operation a step belongs to, what it does for it, and the name of
/// what it computes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StepLabel {
    /// The graph operation (none for the program's own steps, such as the
    /// outputs' layouts). Within a repeat body, the operation of the
    /// body's first iteration.
    pub op: Option<OpId>,
    /// What the step does for it.
    pub role: StepRole,
    /// The tensor the operation computes, for people: it identifies
    /// nothing, [`StepLabel::op`] does.
    pub name: String,
}

impl StepLabel {
    /// The label of a step of operation `op`.
    pub fn of(op: OpId, role: StepRole, name: impl Into<String>) -> StepLabel {
        StepLabel {
            op: Some(op),
            role,
            name: name.into(),
        }
    }
}

impl std::fmt::Display for StepLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.name.is_empty() {
            write!(f, "{}", self.role)
        } else {
            write!(f, "{} {}", self.role, self.name)
        }
    }
}

/// A compute step: every tile runs its codelets.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ComputeStep {
    /// Whose step it is and what it does.
    pub label: StepLabel,
    /// Codelets in the order each tile runs them.
    pub calls: Vec<(TileId, Codelet)>,
}

/// An exchange step: buffers are redistributed, all in one exchange phase
/// (plus on-tile copies where source and destination share a tile).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExchangeStep {
    /// Whose step it is: the operation whose next compute step reads
    /// what it brings.
    pub label: StepLabel,
    /// The redistributions.
    pub copies: Vec<Redistribute>,
}

/// A repeated layer: `body` runs `count` times. In iteration `i`, every
/// buffer `b` listed in `iteration_buffers` stands for the `i`-th entry of
/// its list.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RepeatStep {
    /// The repeat's name (from the graph).
    pub name: String,
    /// Iterations.
    pub count: u32,
    /// The steps of one iteration.
    pub body: Vec<Step>,
    /// Per-iteration substitutes: `(buffer used in the body, one buffer
    /// per iteration)`.
    pub iteration_buffers: Vec<(BufferId, Vec<BufferId>)>,
}

/// One bulk-synchronous step, or a repeat of a body of steps.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Step {
    /// Every tile runs its codelets.
    Compute(ComputeStep),
    /// Buffers are redistributed in one exchange phase.
    Exchange(ExchangeStep),
    /// A repeated layer.
    Repeat(RepeatStep),
}

/// One redistribution: `destination` receives the `view` of `source`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redistribute {
    /// The buffer read.
    pub source: BufferId,
    /// The buffer written.
    pub destination: BufferId,
    /// Which elements of the source the destination holds.
    pub view: SourceView,
}

/// A GEMM kernel the program calls: one AMP variant serving every tile
/// whose shard has these inner and column widths.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmKernel {
    /// Inner extent of each call's shard (padded).
    pub inner: u32,
    /// Output columns of each call's shard (padded).
    pub columns: u32,
    /// Rows of the short shards.
    pub rows_small: u32,
    /// Rows of the long shards.
    pub rows_large: u32,
    /// Left operand precision.
    pub left: Precision,
    /// Left operand order: `RowMajor` or `Amp(Left)`.
    #[serde(default = "amp_left")]
    pub left_order: ElementOrder,
    /// Weight precision.
    pub right: Precision,
    /// Output precision.
    pub output: Precision,
    /// Where the weights live.
    pub right_class: MemoryClass,
}

impl GemmKernel {
    /// The shape the kernel planner plans this spec's variant for: its
    /// long shards, row-major output.
    pub fn shape(&self) -> ipu_kernels::GemmShape {
        ipu_kernels::GemmShape {
            rows: self.rows_large,
            inner: self.inner,
            columns: self.columns,
            left: self.left,
            left_order: self.left_order,
            right: self.right,
            output: self.output,
            output_order: ElementOrder::RowMajor,
            right_class: self.right_class,
        }
    }

    /// The AMP variant the kernel planner makes of this spec under
    /// `config`: what the build compiles, and what the lowering costs.
    pub fn plan(
        &self,
        config: &ipu_kernels::PlanConfig,
    ) -> Result<ipu_kernels::Variant, ipu_kernels::KernelError> {
        ipu_kernels::plan_variant(&self.shape(), self.rows_small, self.rows_large, config)
    }
}

/// A lowered program (`program.json` in a package).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Program {
    /// Every buffer.
    pub buffers: IdVec<BufferId, Buffer>,
    /// The GEMM kernels codelets call.
    pub kernels: IdVec<KernelId, GemmKernel>,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

/// The left order of packages written before row-major left operands.
fn amp_left() -> ElementOrder {
    ElementOrder::Amp(ipu_layout::AmpOperand::Left)
}

/// The function of an activation codelet written without one: the tanh
/// GELU, the only activation of packages before the others.
fn gelu_tanh() -> Activation {
    Activation::GeluTanh
}
