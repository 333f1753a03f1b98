//! The reference evaluator: the end-to-end correctness oracle.
//!
//! [`evaluate`] computes a [`Graph`] on whole tensors, independent of any
//! layout, tiling or placement, so that comparing the tile simulator's
//! outputs with it catches layout, placement, exchange and kernel bugs.
//!
//! # Semantics
//!
//! Values are row-major f32 vectors. Supplied tensors (inputs and weights)
//! are first rounded to their tensor's precision (a no-op for values from
//! `ipu_package::graph::values`, which are already rounded), so FP8 weights
//! enter as the exact f32 values of their codes times `2^scale`. Every op
//! then computes in f32 from the exact values of its inputs and **rounds
//! each output element once, to the output tensor's precision**
//! (F16 round-to-nearest-even; FP8 nearest, ties to even, saturating). So
//! every tensor holds exactly the values the device's bytes can hold, and
//! the comparison with the device model can be tight op by op.
//!
//! - `gemm`: `out[i, j] = (Σ_{k=0..K-1} left[i, k]·right[k, j]) + bias[j]`,
//!   one f32 running sum in increasing `k`, bias added after the sum.
//! - `add`: `left + right` in f32 with numpy broadcasting.
//! - `layer_norm`: per row of the last axis, mean and population variance
//!   in f64; `y = (x − mean)·(1/sqrt(var + eps)) · scale + bias` in f32
//!   with the mean and inverse root rounded to f32.
//! - `gelu`: `0.5·x·(1 + tanh(0.7978846·(x + 0.044715·x³)))` in f32.
//! - `gelu_erf`: `0.5·x·(1 + erf(x/√2))`, `quick_gelu`:
//!   `x / (1 + exp(−1.702·x))` and `tanh`, each in f64 (libm's functions)
//!   and rounded to f32.
//! - `attention`: per batch, head and query row, with `p` the softmax
//!   precision and `round_p` rounding to it (identity for F32):
//!   `s_j = round_p(dot(q_h, k_{j,h}) · (1/sqrt(head_dim)))` with the dot an
//!   f32 running sum over the head's columns; `m = max_j s_j`;
//!   `e_j = round_p(exp(s_j − m))`; `sum = Σ_j e_j` (f32, increasing `j`);
//!   `p_j = round_p(e_j / sum)`; `out_h = Σ_j p_j · v_{j,h}` (f32,
//!   increasing `j`). The score matrix is never materialised beyond one
//!   row.
//! - `cast_fp8`: the input value rounded to the output's FP8 precision.
//! - `reshape`, `transpose`, `slice`, `broadcast`: exact data movement.
//! - `gather`: row `indices[i]` of the table for every index, each
//!   element rounded once; an index that is not a whole number below the
//!   table's rows is an error ([`ReferenceError::GatherIndex`]).
//!
//! Computed tensors are dropped after their last reader, so memory stays
//! near the largest live set; outputs (or, with [`Keep::All`], every
//! computed tensor) are returned. Results do not depend on the thread
//! count: parallel loops split only over independent output rows.
//!
//! Comparing a device result with the reference uses the tolerances in
//! [`compare`](mod@compare).

pub mod compare;
mod kernels;

use std::borrow::Cow;

use ipu_layout::EntityId;
use ipu_package::graph::values::ValueSet;
use ipu_package::graph::{Activation, AttentionMask, Graph, Op, OpId, TensorId, gather_table_rows};

pub use compare::{Comparison, Tolerance, compare};

pub use kernels::GemmAccumulation;

/// The largest tensor the evaluator holds (2^32 elements, 16 GiB of f32):
/// larger ones are refused with [`ReferenceError::TooLarge`] instead of
/// exhausting host memory.
pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 32;

/// Which computed tensors [`evaluate_with`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Keep {
    /// Only the graph's outputs.
    #[default]
    Outputs,
    /// Every activation and output (memory grows with the graph).
    All,
}

/// Options of [`evaluate_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReferenceConfig {
    /// Which computed tensors to return.
    pub keep: Keep,
    /// How GEMM sums accumulate; [`GemmAccumulation::F32`] is the
    /// reference, the other mode exists to calibrate tolerances.
    pub gemm_accumulation: GemmAccumulation,
}

/// Why the reference could not evaluate a graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceError {
    /// An input or weight has no values.
    #[error("{tensor} `{name}` is a {kind} but has no values; supply it in the value set")]
    Missing {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Its kind, as the fixture spells it.
        kind: &'static str,
    },
    /// Supplied values have the wrong length.
    #[error("{tensor} `{name}` has {found} values but its shape {extents:?} needs {expected}")]
    Length {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Its extents.
        extents: Vec<u64>,
        /// Its element count.
        expected: u64,
        /// Values supplied.
        found: usize,
    },
    /// A tensor has more elements than host memory can index.
    #[error(
        "{tensor} `{name}` has {elements} elements, more than the reference evaluator holds \
         (MAX_TENSOR_ELEMENTS); evaluate a smaller batch or layer count"
    )]
    TooLarge {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Its element count.
        elements: u64,
    },
    /// An op id is not in the graph.
    #[error("{op} is not an op of this graph, which has {op_count} ops")]
    UnknownOp {
        /// The op.
        op: OpId,
        /// How many ops the graph has.
        op_count: usize,
    },
    /// A gather index is not a row of its table.
    #[error(
        "{op}: gather index {position} is {value}, not a row number of the {rows}-row table; \
         every index must be a whole number in 0..{rows}"
    )]
    GatherIndex {
        /// The gather.
        op: OpId,
        /// The index's position in the index tensor.
        position: usize,
        /// Its value, as printed.
        value: String,
        /// Rows of the table.
        rows: u64,
    },
    /// An operand was gone when an op needed it: a bug in the evaluator.
    #[error("bug in the reference evaluator: {op} found no values for {tensor}")]
    Internal {
        /// The op.
        op: OpId,
        /// The tensor.
        tensor: TensorId,
    },
}

/// Evaluates `graph` on `values` (every input and weight), returning the
/// outputs.
pub fn evaluate(graph: &Graph, values: &ValueSet) -> Result<ValueSet, ReferenceError> {
    evaluate_with(graph, values, &ReferenceConfig::default())
}

/// Evaluates `graph` with options.
pub fn evaluate_with(
    graph: &Graph,
    values: &ValueSet,
    config: &ReferenceConfig,
) -> Result<ValueSet, ReferenceError> {
    let tensors = graph.tensors();
    // Supplied tensors, rounded to their precision (borrowed when they
    // already are).
    let mut live: Vec<Option<Cow<'_, [f32]>>> = vec![None; tensors.len()];
    for (id, tensor) in tensors.iter() {
        if tensor.element_count() > MAX_TENSOR_ELEMENTS
            || usize::try_from(tensor.element_count()).is_err()
        {
            return Err(ReferenceError::TooLarge {
                tensor: id,
                name: tensor.name().to_owned(),
                elements: tensor.element_count(),
            });
        }
        if tensor.kind().is_computed() {
            continue;
        }
        let Some(v) = values.get(id) else {
            return Err(ReferenceError::Missing {
                tensor: id,
                name: tensor.name().to_owned(),
                kind: tensor.kind().as_str(),
            });
        };
        live[id.index()] = Some(supplied(graph, id, v)?);
    }
    // The last op reading each tensor, so intermediates can be dropped.
    let mut last_read = vec![None::<usize>; tensors.len()];
    for (id, op) in graph.ops().iter() {
        for input in op.inputs() {
            last_read[input.index()] = Some(id.index());
        }
    }

    let mut result = ValueSet::new();
    for (id, op) in graph.ops().iter() {
        let output = op.output();
        let out = compute(graph, id, config, |t| {
            live.get(t.index()).and_then(|v| v.as_deref())
        })?;
        live[output.index()] = Some(Cow::Owned(out));
        // Drop computed tensors nobody reads any more; hand over outputs.
        for t in op.inputs().into_iter().chain([output]) {
            let tensor = graph.tensor(t);
            if !tensor.kind().is_computed() || last_read[t.index()].is_some_and(|l| l > id.index())
            {
                continue;
            }
            let wanted =
                config.keep == Keep::All || tensor.kind() == ipu_package::TensorKind::Output;
            if let Some(values) = live[t.index()].take()
                && wanted
            {
                result.insert(t, values.into_owned());
            }
        }
    }
    Ok(result)
}

/// Evaluates one op of `graph` on values for its inputs (for example the
/// device's own inputs to that op, so that a per-op comparison does not
/// accumulate differences from earlier ops). `inputs` must hold every
/// tensor the op reads; values are rounded to their tensor's precision
/// first. Returns the op's output, rounded to its precision.
pub fn evaluate_op(
    graph: &Graph,
    op: OpId,
    inputs: &ValueSet,
    config: &ReferenceConfig,
) -> Result<Vec<f32>, ReferenceError> {
    let Some(node) = graph.ops().get(op) else {
        return Err(ReferenceError::UnknownOp {
            op,
            op_count: graph.ops().len(),
        });
    };
    let mut rounded: Vec<(TensorId, Cow<'_, [f32]>)> = Vec::new();
    for t in node.inputs() {
        let tensor = graph.tensor(t);
        let Some(v) = inputs.get(t) else {
            return Err(ReferenceError::Missing {
                tensor: t,
                name: tensor.name().to_owned(),
                kind: tensor.kind().as_str(),
            });
        };
        rounded.push((t, supplied(graph, t, v)?));
    }
    compute(graph, op, config, |t| {
        rounded
            .iter()
            .find(|(id, _)| *id == t)
            .map(|(_, v)| v.as_ref())
    })
}

/// Checks the length of supplied values and rounds them to the tensor's
/// precision, borrowing them when they already are.
fn supplied<'a>(
    graph: &Graph,
    id: TensorId,
    v: &'a [f32],
) -> Result<Cow<'a, [f32]>, ReferenceError> {
    let tensor = graph.tensor(id);
    let elements =
        usize::try_from(tensor.element_count()).map_err(|_| ReferenceError::TooLarge {
            tensor: id,
            name: tensor.name().to_owned(),
            elements: tensor.element_count(),
        })?;
    if v.len() != elements {
        return Err(ReferenceError::Length {
            tensor: id,
            name: tensor.name().to_owned(),
            extents: tensor.extents().to_vec(),
            expected: tensor.element_count(),
            found: v.len(),
        });
    }
    let q = tensor.precision().codec();
    let exact = v.iter().all(|&x| q.quantize(x).to_bits() == x.to_bits());
    Ok(if exact {
        Cow::Borrowed(v)
    } else {
        Cow::Owned(v.iter().map(|&x| q.quantize(x)).collect())
    })
}

/// The output of op `id`, rounded to its precision, reading operands
/// through `lookup`.
fn compute<'v>(
    graph: &Graph,
    id: OpId,
    config: &ReferenceConfig,
    lookup: impl Fn(TensorId) -> Option<&'v [f32]>,
) -> Result<Vec<f32>, ReferenceError> {
    let op = graph.op(id);
    let get = |t: TensorId| lookup(t).ok_or(ReferenceError::Internal { op: id, tensor: t });
    let output = op.output();
    let out_tensor = graph.tensor(output);
    let shape = |t: TensorId| graph.tensor(t).extents();
    let mut out: Vec<f32> = match op {
        Op::Gemm {
            left, right, bias, ..
        } => {
            let k = *shape(*right).first().unwrap_or(&0) as usize;
            let n = *shape(*right).get(1).unwrap_or(&0) as usize;
            let l = shape(*left);
            let rows = l[..l.len().saturating_sub(1)]
                .iter()
                .map(|&e| e as usize)
                .product();
            let bias = bias.map(get).transpose()?;
            kernels::gemm(
                get(*left)?,
                get(*right)?,
                bias,
                rows,
                k,
                n,
                config.gemm_accumulation,
            )
        }
        Op::Add { left, right, .. } => kernels::add(
            get(*left)?,
            shape(*left),
            get(*right)?,
            shape(*right),
            out_tensor.extents(),
        ),
        Op::LayerNorm {
            input,
            scale,
            bias,
            eps,
            ..
        } => {
            let d = *shape(*input).last().unwrap_or(&0) as usize;
            kernels::layer_norm(get(*input)?, get(*scale)?, get(*bias)?, d, *eps)
        }
        Op::Activation {
            function, input, ..
        } => {
            let f: fn(f32) -> f32 = match function {
                Activation::GeluTanh => kernels::gelu,
                Activation::GeluErf => kernels::gelu_erf,
                Activation::QuickGelu => kernels::quick_gelu,
                Activation::Tanh => kernels::tanh,
            };
            // Element-wise, so the split over threads cannot change a bit.
            use rayon::prelude::*;
            get(*input)?.par_iter().map(|&x| f(x)).collect()
        }
        Op::Attention {
            q,
            k,
            v,
            heads,
            softmax,
            mask,
            queries_scaled,
            ..
        } => {
            let (qs, ks) = (shape(*q), shape(*k));
            kernels::attention(
                get(*q)?,
                get(*k)?,
                get(*v)?,
                qs[0] as usize,
                qs[1] as usize,
                ks[1] as usize,
                qs[2] as usize,
                *heads as usize,
                *softmax,
                *mask == AttentionMask::Causal,
                *queries_scaled,
            )
        }
        Op::CastFp8 { input, .. } | Op::Reshape { input, .. } => get(*input)?.to_vec(),
        Op::Transpose { input, perm, .. } => kernels::transpose(get(*input)?, shape(*input), perm),
        Op::Slice {
            input, axis, start, ..
        } => kernels::slice(
            get(*input)?,
            shape(*input),
            *axis as usize,
            *start as usize,
            out_tensor.extents(),
        ),
        Op::Broadcast { input, .. } => {
            kernels::broadcast(get(*input)?, shape(*input), out_tensor.extents())
        }
        Op::Gather { table, indices, .. } => {
            // Validated: rank ≥ 2 and the rows' product fits.
            let (rows, d) = gather_table_rows(shape(*table)).unwrap_or((0, 0));
            kernels::gather(get(*table)?, get(*indices)?, rows, d as usize).map_err(
                |(position, value)| ReferenceError::GatherIndex {
                    op: id,
                    position,
                    value: value.to_string(),
                    rows,
                },
            )?
        }
    };
    let q = out_tensor.precision().codec();
    out.iter_mut().for_each(|x| *x = q.quantize(*x));
    Ok(out)
}
