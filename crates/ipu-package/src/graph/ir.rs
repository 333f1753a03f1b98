//! The graph IR: tensors, operations in topological order, and repeats.
//!
//! A [`Graph`] is the input of the whole backend. It is plain data with
//! private fields: the only ways to get one are [`Graph::new`] and
//! [`GraphBuilder::finish`], and both run
//! [`validate_graph`](crate::graph::validate_graph), so every later stage may
//! rely on the shape, precision and topology rules documented on [`Op`].
//!
//! Repeated layers stay visible: a [`Repeat`] says which consecutive op and
//! tensor ranges are iterations of one body, so the lowering can emit one
//! tile program per repeat and patch addresses per iteration.

use std::ops::Range;

use ipu_layout::{IdVec, Precision, TensorShape};
use smallvec::SmallVec;

use crate::graph::{Activation, GraphError, validate_graph};

ipu_layout::define_id!(
    /// A tensor of a [`Graph`].
    pub struct TensorId, "t"
);

ipu_layout::define_id!(
    /// An operation of a [`Graph`]; ids follow the topological order.
    pub struct OpId, "op"
);

/// What role a tensor plays, which decides who may write it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TensorKind {
    /// Supplied by the caller for every run (for example image patches).
    Input,
    /// A parameter: supplied once, read-only.
    Weight,
    /// An intermediate value written by exactly one operation.
    Activation,
    /// A result returned to the caller, written by exactly one operation.
    Output,
}

impl TensorKind {
    /// Whether an operation produces tensors of this kind (as opposed to
    /// the caller supplying them).
    pub const fn is_computed(self) -> bool {
        matches!(self, TensorKind::Activation | TensorKind::Output)
    }

    /// The fixture spelling of the kind.
    pub const fn as_str(self) -> &'static str {
        match self {
            TensorKind::Input => "input",
            TensorKind::Weight => "weight",
            TensorKind::Activation => "activation",
            TensorKind::Output => "output",
        }
    }
}

impl std::fmt::Display for TensorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tensor: a name (unique in the graph), a shape, an element precision and
/// a kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    name: String,
    shape: TensorShape,
    precision: Precision,
    kind: TensorKind,
}

impl Tensor {
    /// A tensor description; [`Graph::new`] checks it.
    pub fn new(
        name: impl Into<String>,
        shape: TensorShape,
        precision: Precision,
        kind: TensorKind,
    ) -> Self {
        Self {
            name: name.into(),
            shape,
            precision,
            kind,
        }
    }

    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its shape, outermost axis first.
    pub fn shape(&self) -> &TensorShape {
        &self.shape
    }

    /// The extents of its shape.
    pub fn extents(&self) -> &[u64] {
        self.shape.extents()
    }

    /// Its element precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Its kind.
    pub fn kind(&self) -> TensorKind {
        self.kind
    }

    /// The number of elements. A validated graph guarantees this and the
    /// byte size fit in `u64`; on an unvalidated tensor an overflow gives
    /// `u64::MAX`.
    pub fn element_count(&self) -> u64 {
        self.shape.element_count().unwrap_or(u64::MAX)
    }

    /// The size of the whole tensor in bytes (see [`Tensor::element_count`]).
    pub fn bytes(&self) -> u64 {
        self.element_count()
            .saturating_mul(self.precision.element_bytes())
    }
}

/// Which keys each query row of an [`Op::Attention`] may see.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AttentionMask {
    /// Every query row sees every key.
    #[default]
    None,
    /// Query row `i` sees keys `j ≤ i` only (a decoder's or CLIP text
    /// tower's self-attention); needs `tokens_q == tokens_kv`.
    Causal,
}

impl AttentionMask {
    /// The fixture spelling (`None` is written by leaving the key out).
    pub const fn name(self) -> &'static str {
        match self {
            AttentionMask::None => "none",
            AttentionMask::Causal => "causal",
        }
    }

    /// Keys visible to a query row of a block whose first query row is
    /// `diagonal` rows past its first key row (`None` mask: all `keys`):
    /// the keys `j` with `j ≤ row + diagonal`, clamped to `0..=keys`. The
    /// one rule the reference, the codelets and their cost share.
    pub fn visible_keys(diagonal: Option<i64>, row: u64, keys: u64) -> u64 {
        match diagonal {
            None => keys,
            Some(d) => {
                let last = i128::from(row) + i128::from(d) + 1;
                u64::try_from(last.clamp(0, i128::from(keys))).unwrap_or(keys)
            }
        }
    }
}

/// The arithmetic precision of an attention softmax.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SoftmaxPrecision {
    /// Scores, exponentials and probabilities are rounded to F16.
    F16,
    /// Everything stays in F32.
    F32,
    /// As [`SoftmaxPrecision::F16`], and then each exponential
    /// `exp(s_j − m)` (at most 1, `m` the row's largest score) is rounded
    /// to [`FP8_PROBABILITIES`] before the values' product and the row
    /// sum, so that the product runs at the AMP's FP8 rate (with FP8
    /// values). The row sum is of the rounded exponentials, so every
    /// row's probabilities still sum to 1.
    F16Fp8,
}

/// The precision [`SoftmaxPrecision::F16Fp8`] rounds exponentials to:
/// F143 whose codes are multiplied by `2^-6`, so the row's largest
/// exponential, 1, is the code 64 (with room above it for a block whose
/// own maximum is below the row's) and exponentials down to `2^-16`
/// (the format's smallest subnormal times the scale) stay nonzero.
pub const FP8_PROBABILITIES: Precision = Precision::F8 {
    format: ipu_layout::Fp8Format::F143,
    scale: -6,
};

impl SoftmaxPrecision {
    /// Every softmax precision, in the order fixtures and reports list them.
    pub const ALL: [SoftmaxPrecision; 3] = [
        SoftmaxPrecision::F16,
        SoftmaxPrecision::F32,
        SoftmaxPrecision::F16Fp8,
    ];

    /// The element precision intermediate values are rounded to.
    pub const fn precision(self) -> Precision {
        match self {
            SoftmaxPrecision::F16 | SoftmaxPrecision::F16Fp8 => Precision::F16,
            SoftmaxPrecision::F32 => Precision::F32,
        }
    }

    /// The precision of the probabilities the values are multiplied by
    /// (before the division by the row sum).
    pub const fn probabilities(self) -> Precision {
        match self {
            SoftmaxPrecision::F16Fp8 => FP8_PROBABILITIES,
            other => other.precision(),
        }
    }

    /// The softmax an attention with FP8 values (`fp8_values`) or
    /// 16-bit ones computes: an F16 softmax rounds its exponentials to FP8
    /// for FP8 values (so that the values' product is an FP8 GEMM) and
    /// not for others; an F32 softmax stays F32.
    pub const fn with_fp8_values(self, fp8_values: bool) -> Self {
        match self {
            SoftmaxPrecision::F16 | SoftmaxPrecision::F16Fp8 if fp8_values => {
                SoftmaxPrecision::F16Fp8
            }
            SoftmaxPrecision::F16 | SoftmaxPrecision::F16Fp8 => SoftmaxPrecision::F16,
            SoftmaxPrecision::F32 => SoftmaxPrecision::F32,
        }
    }

    /// Whether scores and exponentials are rounded to F16.
    pub const fn is_f16(self) -> bool {
        matches!(self, SoftmaxPrecision::F16 | SoftmaxPrecision::F16Fp8)
    }

    /// The name fixtures and precision reports write.
    pub const fn name(self) -> &'static str {
        match self {
            SoftmaxPrecision::F16 => "F16",
            SoftmaxPrecision::F32 => "F32",
            SoftmaxPrecision::F16Fp8 => "F16-FP8",
        }
    }

    /// The precision [`SoftmaxPrecision::name`] names.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// An operation. Every operation computes its result from the exact values
/// of its inputs (FP8 and F16 elements decoded to f32) and rounds each output
/// element to the output tensor's precision once, at the end. The exact
/// arithmetic is the reference evaluator's (`ipu_sim::reference`); the
/// rules here are the ones [`validate_graph`] enforces.
///
/// Elementwise operations and GEMM/attention produce F32 or F16 outputs;
/// only [`Op::CastFp8`] produces FP8, and the data-movement operations
/// ([`Op::Reshape`], [`Op::Transpose`], [`Op::Slice`], [`Op::Broadcast`])
/// keep their input's precision exactly, so they move bytes unchanged.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `output[.., n] = Σ_k left[.., k] · right[k, n] (+ bias[n])`.
    ///
    /// `left` has rank ≥ 1 and shape `[.., k]`; `right` is `[k, n]`; the
    /// optional `bias` is `[n]`; `output` is `left`'s shape with the last
    /// extent replaced by `n`. Output precision F16 or F32.
    Gemm {
        /// The activations, `[.., k]`.
        left: TensorId,
        /// The weights, `[k, n]`.
        right: TensorId,
        /// An optional bias, `[n]`.
        bias: Option<TensorId>,
        /// The result, `[.., n]`.
        output: TensorId,
    },
    /// `output = left + right` with numpy broadcasting: shapes are aligned
    /// at their last axis, and on each axis the extents must be equal or
    /// one of them 1 (a missing axis counts as 1). `output` has the
    /// broadcast shape. Output precision F16 or F32.
    Add {
        /// The first operand.
        left: TensorId,
        /// The second operand.
        right: TensorId,
        /// The sum.
        output: TensorId,
    },
    /// Layer normalisation over the last axis of extent `d`:
    /// `(x − mean) / sqrt(var + eps) · scale + bias` with the population
    /// variance. `scale` and `bias` are `[d]`; `output` has `input`'s shape.
    /// `eps` is finite and positive. Output precision F16 or F32.
    LayerNorm {
        /// The values to normalise.
        input: TensorId,
        /// Per-feature gain, `[d]`.
        scale: TensorId,
        /// Per-feature offset, `[d]`.
        bias: TensorId,
        /// Added to the variance before the square root.
        eps: f32,
        /// The result, same shape as `input`.
        output: TensorId,
    },
    /// An activation function (GELU in its forms, tanh), elementwise.
    /// Same shape; output precision F16 or F32.
    Activation {
        /// The function; [`Activation`] says what each computes.
        function: Activation,
        /// The argument.
        input: TensorId,
        /// The result.
        output: TensorId,
    },
    /// Multi-head scaled dot-product attention, optionally causal.
    ///
    /// `q` is `[batch, tokens_q, hidden]`, `k` and `v` are
    /// `[batch, tokens_kv, hidden]`, `output` is `[batch, tokens_q, hidden]`.
    /// `hidden` is split into `heads` contiguous column blocks of
    /// `head_dim = hidden / heads` (which must divide exactly); head `h` uses
    /// columns `h·head_dim .. (h+1)·head_dim` of `q`, `k`, `v` and writes the
    /// same columns of `output`. Per batch, head and query row:
    /// `s_j = (q·k_j) / sqrt(head_dim)` (or `s_j = q·k_j` when
    /// `queries_scaled`), `p = softmax(s)` computed in the
    /// `softmax` precision, `out = Σ_j p_j · v_j`. Output precision F16 or
    /// F32. With [`AttentionMask::Causal`] (which needs
    /// `tokens_q == tokens_kv`) query row `i` takes the softmax over keys
    /// `j ≤ i` only: the others get probability 0. Computing it blockwise
    /// per head never needs the whole score tensor.
    Attention {
        /// Queries, `[batch, tokens_q, hidden]`.
        q: TensorId,
        /// Keys, `[batch, tokens_kv, hidden]`.
        k: TensorId,
        /// Values, `[batch, tokens_kv, hidden]`.
        v: TensorId,
        /// The number of heads; divides `hidden`.
        heads: u32,
        /// The precision the softmax is computed in.
        softmax: SoftmaxPrecision,
        /// Which keys each query row sees.
        mask: AttentionMask,
        /// Whether the queries already carry the `1 / sqrt(head_dim)`
        /// factor (folded into their projection by the importer), so that
        /// the scores are softmaxed as they are: the softmax then takes
        /// only the row maximum of each vector of scores, where it would
        /// also multiply it by the factor.
        queries_scaled: bool,
        /// The result, `[batch, tokens_q, hidden]`.
        output: TensorId,
    },
    /// Rounds every element to the output's FP8 precision, whose scale says
    /// which power of two the codes are multiplied by (saturating at the
    /// largest finite value, NaN to NaN). Same shape; the output precision
    /// must be FP8.
    CastFp8 {
        /// The values to cast.
        input: TensorId,
        /// The FP8 result.
        output: TensorId,
    },
    /// The same row-major elements under another shape with the same
    /// element count. Same precision.
    Reshape {
        /// The source.
        input: TensorId,
        /// The result.
        output: TensorId,
    },
    /// Permutes axes: output axis `a` is input axis `perm[a]`, so
    /// `output[i_0, .., i_{r-1}] = input[j]` with `j[perm[a]] = i_a`.
    /// `perm` is a permutation of `0..rank`. Same precision.
    Transpose {
        /// The source.
        input: TensorId,
        /// Output axis `a` is input axis `perm[a]`.
        perm: Vec<u32>,
        /// The result.
        output: TensorId,
    },
    /// A contiguous range of one axis: `output` equals `input` on every
    /// other axis, and on `axis` it takes indices
    /// `start .. start + output extent`. Same precision.
    Slice {
        /// The source.
        input: TensorId,
        /// The axis cut, counted from the outermost (0).
        axis: u32,
        /// The first index taken on `axis`.
        start: u64,
        /// The result.
        output: TensorId,
    },
    /// Numpy broadcasting of `input` to `output`'s shape (for example one
    /// learned probe token to every image of a batch). Same precision.
    Broadcast {
        /// The source.
        input: TensorId,
        /// The result.
        output: TensorId,
    },
    /// Rows of a table picked by index (token embeddings, CLIP's pooled
    /// row): `output[i.., c] = table[indices[i..], c]`.
    ///
    /// `table` is `[rows, d]`, or of higher rank `[a, b, .., d]`, whose
    /// rows are then all its leading axes numbered row-major (`rows =
    /// a·b·…`, [`gather_table_rows`]): a `[batch, tokens, d]` activation
    /// is a table of `batch·tokens` rows without a reshape. `indices` has
    /// rank ≥ 1 and precision F32,
    /// whose elements must be whole numbers in `0..rows` (F32 holds every
    /// integer up to 2^24 exactly, so `rows` is at most
    /// [`MAX_GATHER_ROWS`]); `output` is `indices`' shape with `d`
    /// appended. Each output element is the table element rounded once to
    /// the output precision, F16 or F32. An index that is not a whole
    /// number in range is a run-time error of the evaluator and the device
    /// alike, never a silent clamp.
    Gather {
        /// The table, `[rows, d]`.
        table: TensorId,
        /// Row numbers, F32 whole numbers, any shape.
        indices: TensorId,
        /// The rows, `[indices.., d]`.
        output: TensorId,
    },
}

/// The most rows an [`Op::Gather`] table may have: every index below it is
/// exact in the F32 index tensor.
pub const MAX_GATHER_ROWS: u64 = 1 << 24;

/// The rows and row width of an [`Op::Gather`] table of `extents`: the
/// leading axes' product and the last extent; `None` below rank 2 or
/// when the product overflows.
pub fn gather_table_rows(extents: &[u64]) -> Option<(u64, u64)> {
    let (&d, leading) = extents.split_last()?;
    if leading.is_empty() {
        return None;
    }
    let rows = leading
        .iter()
        .try_fold(1u64, |acc, &e| acc.checked_mul(e))?;
    Some((rows, d))
}

impl Op {
    /// The fixture spelling of the operation's kind.
    pub const fn kind_name(&self) -> &'static str {
        match self {
            Op::Gemm { .. } => "gemm",
            Op::Add { .. } => "add",
            Op::LayerNorm { .. } => "layer_norm",
            Op::Activation { function, .. } => function.name(),
            Op::Attention { .. } => "attention",
            Op::CastFp8 { .. } => "cast_fp8",
            Op::Reshape { .. } => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Slice { .. } => "slice",
            Op::Broadcast { .. } => "broadcast",
            Op::Gather { .. } => "gather",
        }
    }

    /// The tensors read, in the fixture's `inputs` order (GEMM: left, right,
    /// bias; layer norm: input, scale, bias; attention: q, k, v; gather:
    /// table, indices).
    pub fn inputs(&self) -> SmallVec<[TensorId; 3]> {
        let mut inputs = SmallVec::new();
        match self {
            Op::Gemm {
                left, right, bias, ..
            } => {
                inputs.push(*left);
                inputs.push(*right);
                inputs.extend(*bias);
            }
            Op::Add { left, right, .. } => inputs.extend([*left, *right]),
            Op::LayerNorm {
                input, scale, bias, ..
            } => inputs.extend([*input, *scale, *bias]),
            Op::Attention { q, k, v, .. } => inputs.extend([*q, *k, *v]),
            Op::Gather { table, indices, .. } => inputs.extend([*table, *indices]),
            Op::Activation { input, .. }
            | Op::CastFp8 { input, .. }
            | Op::Reshape { input, .. }
            | Op::Transpose { input, .. }
            | Op::Slice { input, .. }
            | Op::Broadcast { input, .. } => inputs.push(*input),
        }
        inputs
    }

    /// The tensor written.
    pub fn output(&self) -> TensorId {
        match self {
            Op::Gemm { output, .. }
            | Op::Add { output, .. }
            | Op::LayerNorm { output, .. }
            | Op::Activation { output, .. }
            | Op::Attention { output, .. }
            | Op::CastFp8 { output, .. }
            | Op::Reshape { output, .. }
            | Op::Transpose { output, .. }
            | Op::Slice { output, .. }
            | Op::Broadcast { output, .. }
            | Op::Gather { output, .. } => *output,
        }
    }

    /// A copy of this operation with every tensor id passed through `map`
    /// (attributes unchanged).
    pub fn map_tensors(&self, mut map: impl FnMut(TensorId) -> TensorId) -> Op {
        let mut op = self.clone();
        match &mut op {
            Op::Gemm {
                left,
                right,
                bias,
                output,
            } => {
                *left = map(*left);
                *right = map(*right);
                *bias = bias.map(&mut map);
                *output = map(*output);
            }
            Op::Add {
                left,
                right,
                output,
            } => {
                *left = map(*left);
                *right = map(*right);
                *output = map(*output);
            }
            Op::LayerNorm {
                input,
                scale,
                bias,
                output,
                ..
            } => {
                *input = map(*input);
                *scale = map(*scale);
                *bias = map(*bias);
                *output = map(*output);
            }
            Op::Attention {
                q, k, v, output, ..
            } => {
                *q = map(*q);
                *k = map(*k);
                *v = map(*v);
                *output = map(*output);
            }
            Op::Gather {
                table,
                indices,
                output,
            } => {
                *table = map(*table);
                *indices = map(*indices);
                *output = map(*output);
            }
            Op::Activation { input, output, .. }
            | Op::CastFp8 { input, output }
            | Op::Reshape { input, output }
            | Op::Transpose { input, output, .. }
            | Op::Slice { input, output, .. }
            | Op::Broadcast { input, output } => {
                *input = map(*input);
                *output = map(*output);
            }
        }
        op
    }
}

/// A value chained from one repeat iteration to the next, such as the
/// hidden state that each encoder layer reads and rewrites.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Carry {
    /// The tensor iteration 0 reads, written before the repeat.
    pub initial: TensorId,
    /// The body position (within an iteration's owned tensors) of the
    /// tensor each iteration writes and the next iteration reads in place
    /// of `initial`. The last iteration's one is the repeat's result.
    pub body_tensor: u32,
}

/// Consecutive iterations of one body of operations.
///
/// Iteration `k` (from 0) consists of the ops
/// `first_op + k·ops_per_iteration ..` and owns the tensors
/// `first_tensor + k·tensors_per_iteration ..` (each `ops_per_iteration` and
/// `tensors_per_iteration` long). A validated graph guarantees that every
/// iteration is the same computation as iteration 0: op `j` of iteration `k`
/// has the kind and attributes of op `j` of iteration 0, and each tensor it
/// names either is the corresponding tensor of iteration `k` (owned, same
/// shape, precision and kind), or is the tensor iteration 0 names (shared by
/// all iterations), or is carried (see [`Carry`]): iteration 0 names the
/// carry's `initial` tensor from before the repeat and iteration `k > 0`
/// names the carry's body tensor of iteration `k − 1`. A tensor that is a
/// carry's `initial` is read only in its carried role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repeat {
    name: String,
    count: u32,
    first_op: u32,
    ops_per_iteration: u32,
    first_tensor: u32,
    tensors_per_iteration: u32,
    carries: Vec<Carry>,
}

impl Repeat {
    /// A repeat description; [`Graph::new`] checks it against the graph.
    pub fn new(
        name: impl Into<String>,
        count: u32,
        first_op: OpId,
        ops_per_iteration: u32,
        first_tensor: TensorId,
        tensors_per_iteration: u32,
    ) -> Self {
        Self {
            name: name.into(),
            count,
            first_op: first_op.as_u32(),
            ops_per_iteration,
            first_tensor: first_tensor.as_u32(),
            tensors_per_iteration,
            carries: Vec::new(),
        }
    }

    /// The same repeat with these carries.
    pub fn with_carries(mut self, mut carries: Vec<Carry>) -> Self {
        carries.sort();
        carries.dedup();
        self.carries = carries;
        self
    }

    /// The values chained from iteration to iteration, sorted.
    pub fn carries(&self) -> &[Carry] {
        &self.carries
    }

    /// The tensor at body position `position` of iteration `k`, if both
    /// are in range.
    pub fn body_tensor(&self, k: u32, position: u32) -> Option<TensorId> {
        if k >= self.count || position >= self.tensors_per_iteration {
            return None;
        }
        let index = u64::from(self.first_tensor)
            + u64::from(k) * u64::from(self.tensors_per_iteration)
            + u64::from(position);
        u32::try_from(index).ok().map(TensorId::from_u32)
    }

    /// The op at body position `position` of iteration `k`, if both are in
    /// range.
    pub fn body_op(&self, k: u32, position: u32) -> Option<OpId> {
        if k >= self.count || position >= self.ops_per_iteration {
            return None;
        }
        let index = u64::from(self.first_op)
            + u64::from(k) * u64::from(self.ops_per_iteration)
            + u64::from(position);
        u32::try_from(index).ok().map(OpId::from_u32)
    }

    /// The repeat's name (the fixture layer's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many iterations.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Operations in one iteration.
    pub fn ops_per_iteration(&self) -> u32 {
        self.ops_per_iteration
    }

    /// Tensors owned by one iteration.
    pub fn tensors_per_iteration(&self) -> u32 {
        self.tensors_per_iteration
    }

    /// The op indices of iteration `k` (empty when `k >= count`).
    pub fn iteration_ops(&self, k: u32) -> Range<usize> {
        iteration_range(self.first_op, self.ops_per_iteration, k, self.count)
    }

    /// The tensor indices owned by iteration `k` (empty when `k >= count`).
    pub fn iteration_tensors(&self, k: u32) -> Range<usize> {
        iteration_range(self.first_tensor, self.tensors_per_iteration, k, self.count)
    }

    /// Every op index of the repeat.
    pub fn ops(&self) -> Range<usize> {
        let start = self.first_op as usize;
        start..start + self.count as usize * self.ops_per_iteration as usize
    }

    /// Every tensor index owned by the repeat.
    pub fn tensors(&self) -> Range<usize> {
        let start = self.first_tensor as usize;
        start..start + self.count as usize * self.tensors_per_iteration as usize
    }

    /// Where `op` sits: `(iteration, position in the body)`, if it belongs
    /// to this repeat.
    pub fn locate_op(&self, op: OpId) -> Option<(u32, u32)> {
        let index = op.as_u32().checked_sub(self.first_op)?;
        if self.ops_per_iteration == 0 {
            return None;
        }
        let iteration = index / self.ops_per_iteration;
        (iteration < self.count).then_some((iteration, index % self.ops_per_iteration))
    }

    /// Where `tensor` sits: `(iteration, position in the body)`, if it is
    /// owned by this repeat.
    pub fn locate_tensor(&self, tensor: TensorId) -> Option<(u32, u32)> {
        let index = tensor.as_u32().checked_sub(self.first_tensor)?;
        if self.tensors_per_iteration == 0 {
            return None;
        }
        let iteration = index / self.tensors_per_iteration;
        (iteration < self.count).then_some((iteration, index % self.tensors_per_iteration))
    }

    pub(crate) fn first_op(&self) -> u32 {
        self.first_op
    }

    pub(crate) fn first_tensor(&self) -> u32 {
        self.first_tensor
    }
}

fn iteration_range(first: u32, per: u32, k: u32, count: u32) -> Range<usize> {
    if k >= count {
        return 0..0;
    }
    let start = first as usize + k as usize * per as usize;
    start..start + per as usize
}

/// A validated dataflow graph.
///
/// **Invariant** (established by [`Graph::new`]): every op reads only
/// tensors that are inputs, weights, or written by an earlier op; every
/// activation and output is written by exactly one op; shapes and
/// precisions follow the rules on [`Op`]; every tensor's byte size fits in
/// `u64`; repeats are well formed (see [`Repeat`]) and do not overlap.
#[derive(Clone, Debug)]
pub struct Graph {
    name: String,
    tensors: IdVec<TensorId, Tensor>,
    ops: IdVec<OpId, Op>,
    repeats: Vec<Repeat>,
    producers: IdVec<TensorId, Option<OpId>>,
}

impl Graph {
    /// Validates and builds a graph. Ops must be listed in topological
    /// order; repeats in op order.
    pub fn new(
        name: impl Into<String>,
        tensors: IdVec<TensorId, Tensor>,
        ops: IdVec<OpId, Op>,
        repeats: Vec<Repeat>,
    ) -> Result<Self, GraphError> {
        let mut producers: IdVec<TensorId, Option<OpId>> = tensors.keys().map(|_| None).collect();
        for (id, op) in ops.iter() {
            if let Some(slot) = producers.get_mut(op.output())
                && slot.is_none()
            {
                *slot = Some(id);
            }
        }
        let graph = Self {
            name: name.into(),
            tensors,
            ops,
            repeats,
            producers,
        };
        validate_graph(&graph)?;
        Ok(graph)
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every tensor.
    pub fn tensors(&self) -> &IdVec<TensorId, Tensor> {
        &self.tensors
    }

    /// One tensor. Panics on an id from another graph; use
    /// [`Graph::tensors`]`.get` for untrusted ids.
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id]
    }

    /// The tensor with this name.
    pub fn tensor_by_name(&self, name: &str) -> Option<TensorId> {
        self.tensors
            .iter()
            .find(|(_, t)| t.name() == name)
            .map(|(id, _)| id)
    }

    /// Every operation, in topological order.
    pub fn ops(&self) -> &IdVec<OpId, Op> {
        &self.ops
    }

    /// One operation.
    pub fn op(&self, id: OpId) -> &Op {
        &self.ops[id]
    }

    /// The operation that writes `tensor`, if it is computed.
    pub fn producer(&self, tensor: TensorId) -> Option<OpId> {
        self.producers.get(tensor).copied().flatten()
    }

    /// The repeats, in op order.
    pub fn repeats(&self) -> &[Repeat] {
        &self.repeats
    }

    /// The repeat `op` belongs to, with its iteration and body position.
    pub fn repeat_of_op(&self, op: OpId) -> Option<(&Repeat, u32, u32)> {
        self.repeats
            .iter()
            .find_map(|r| r.locate_op(op).map(|(k, j)| (r, k, j)))
    }

    /// Tensors of kind [`TensorKind::Input`], in id order.
    pub fn inputs(&self) -> Vec<TensorId> {
        self.of_kind(TensorKind::Input)
    }

    /// Tensors of kind [`TensorKind::Weight`], in id order.
    pub fn weights(&self) -> Vec<TensorId> {
        self.of_kind(TensorKind::Weight)
    }

    /// Tensors of kind [`TensorKind::Output`], in id order.
    pub fn outputs(&self) -> Vec<TensorId> {
        self.of_kind(TensorKind::Output)
    }

    fn of_kind(&self, kind: TensorKind) -> Vec<TensorId> {
        self.tensors
            .iter()
            .filter(|(_, t)| t.kind() == kind)
            .map(|(id, _)| id)
            .collect()
    }

    /// The number of weight elements (the model's parameter count).
    pub fn parameter_count(&self) -> u64 {
        self.tensors
            .values()
            .iter()
            .filter(|t| t.kind() == TensorKind::Weight)
            .map(Tensor::element_count)
            .sum()
    }

    /// The weights first read by ops in `ops` (for example one repeat
    /// iteration), in first-read order, without duplicates.
    pub fn weights_read_by(&self, ops: Range<usize>) -> Vec<TensorId> {
        let mut seen = vec![false; self.tensors.len()];
        let mut weights = Vec::new();
        for op in self.ops.values().get(ops).unwrap_or(&[]) {
            for input in op.inputs() {
                let fresh = seen.get_mut(input.as_u32() as usize).is_some_and(|s| {
                    let was = *s;
                    *s = true;
                    !was
                });
                if fresh && self.tensors[input].kind() == TensorKind::Weight {
                    weights.push(input);
                }
            }
        }
        weights
    }
}

/// Builds a graph op by op; [`GraphBuilder::finish`] validates it.
#[derive(Debug, Default)]
pub struct GraphBuilder {
    name: String,
    tensors: IdVec<TensorId, Tensor>,
    ops: IdVec<OpId, Op>,
    repeats: Vec<Repeat>,
}

impl GraphBuilder {
    /// An empty graph called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// Adds a tensor.
    pub fn tensor(
        &mut self,
        name: impl Into<String>,
        shape: impl Into<TensorShape>,
        precision: Precision,
        kind: TensorKind,
    ) -> TensorId {
        self.tensors
            .push(Tensor::new(name, shape.into(), precision, kind))
    }

    /// Appends an operation (after every op added so far).
    pub fn op(&mut self, op: Op) -> OpId {
        self.ops.push(op)
    }

    /// The id the next tensor will get.
    pub fn next_tensor(&self) -> TensorId {
        TensorId::from_u32(u32::try_from(self.tensors.len()).unwrap_or(u32::MAX))
    }

    /// The id the next op will get.
    pub fn next_op(&self) -> OpId {
        OpId::from_u32(u32::try_from(self.ops.len()).unwrap_or(u32::MAX))
    }

    /// Records a repeat over ops and tensors already added.
    pub fn repeat(&mut self, repeat: Repeat) {
        self.repeats.push(repeat);
    }

    /// Validates and returns the graph.
    pub fn finish(self) -> Result<Graph, GraphError> {
        Graph::new(self.name, self.tensors, self.ops, self.repeats)
    }
}
