//! Deterministic values for every input and weight tensor, and the
//! [`ValueSet`] that carries whole-tensor values between the crates.
//!
//! Fixtures describe shapes, not numbers, so every weight and input gets its
//! values from a seeded generator: the values of a tensor depend only on the
//! seed, the tensor's name, its element count, its role in the graph and its
//! precision — not on the thread count or on which other tensors exist. The
//! stream is cut into blocks of [`BLOCK`] elements, each with its own
//! generator seeded from `(seed, name, block)`, so blocks can be filled in
//! parallel and still give the same bytes.
//!
//! Magnitudes follow the tensor's role (see [`ValueRole`]): GEMM weights
//! have standard deviation `1/sqrt(fan_in)`, biases and embeddings 0.02,
//! layer-norm gains `1 ± 0.05`, inputs lie in `[-1, 1]`. The distribution is
//! an Irwin–Hall sum of four uniforms (bell-shaped, bounded at ±3.47σ), so a
//! fixture whose FP8 scale leaves room for 3.5σ never saturates. Every value
//! is already rounded to the tensor's precision (by the one codec,
//! `ipu_layout::numeric`).

use std::collections::BTreeMap;

use ipu_layout::Precision;
use ipu_layout::numeric::Codec;
use ipu_layout::rng::SplitMix64;
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::graph::{
    Graph, Op, QueryColumns, TensorId, TensorKind, gather_table_rows, query_columns, query_factor,
};

/// Elements per independently seeded block of the value stream.
pub const BLOCK: usize = 1 << 16;

/// Whole-tensor values, row-major f32, by tensor id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValueSet {
    values: BTreeMap<TensorId, Vec<f32>>,
}

impl ValueSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the values of `tensor`, returning the previous ones.
    pub fn insert(&mut self, tensor: TensorId, values: Vec<f32>) -> Option<Vec<f32>> {
        self.values.insert(tensor, values)
    }

    /// The values of `tensor`, if present.
    pub fn get(&self, tensor: TensorId) -> Option<&[f32]> {
        self.values.get(&tensor).map(Vec::as_slice)
    }

    /// Removes and returns the values of `tensor`.
    pub fn remove(&mut self, tensor: TensorId) -> Option<Vec<f32>> {
        self.values.remove(&tensor)
    }

    /// Whether `tensor` has values.
    pub fn contains(&self, tensor: TensorId) -> bool {
        self.values.contains_key(&tensor)
    }

    /// How many tensors have values.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no tensor has values.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Tensors and values in id order.
    pub fn iter(&self) -> impl Iterator<Item = (TensorId, &[f32])> + '_ {
        self.values.iter().map(|(&id, v)| (id, v.as_slice()))
    }

    /// Moves every entry of `other` into this set (replacing duplicates).
    pub fn extend(&mut self, other: ValueSet) {
        self.values.extend(other.values);
    }
}

/// What a supplied tensor is used for, which decides its magnitudes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValueRole {
    /// The right operand of a GEMM with this inner extent:
    /// standard deviation `1/sqrt(fan_in)`.
    Matrix {
        /// The GEMM's inner extent `k`.
        fan_in: u64,
    },
    /// A GEMM or layer-norm bias: standard deviation 0.02.
    Bias,
    /// A layer-norm gain: `1 +` standard deviation 0.05.
    NormScale,
    /// An operand of an add, such as a position embedding, or a gathered
    /// table (token embeddings): standard deviation 0.02.
    Embedding,
    /// A graph input: uniform in `[-1, 1]` (normalised pixels).
    Input,
    /// The row numbers a gather reads: whole numbers uniform in
    /// `0..rows` (token ids).
    Index {
        /// Rows of the gathered table.
        rows: u64,
    },
    /// Anything else (for example a learned probe token): standard
    /// deviation 1.
    Other,
}

impl ValueRole {
    /// The role of `tensor`, from its kind and the first op that reads it.
    pub fn of(graph: &Graph, tensor: TensorId) -> ValueRole {
        let index_of = graph.ops().values().iter().find_map(|op| match op {
            Op::Gather { table, indices, .. } if *indices == tensor => {
                gather_table_rows(graph.tensor(*table).extents()).map(|(rows, _)| rows)
            }
            _ => None,
        });
        if let Some(rows) = index_of {
            return ValueRole::Index { rows };
        }
        if graph.tensors().get(tensor).map(|t| t.kind()) == Some(TensorKind::Input) {
            return ValueRole::Input;
        }
        for op in graph.ops().values() {
            let inputs = op.inputs();
            let Some(slot) = inputs.iter().position(|&t| t == tensor) else {
                continue;
            };
            return match (op, slot) {
                (Op::Gemm { left, .. }, 1) => ValueRole::Matrix {
                    fan_in: graph
                        .tensor(*left)
                        .extents()
                        .last()
                        .copied()
                        .unwrap_or(1)
                        .max(1),
                },
                (Op::Gemm { .. }, 2) | (Op::LayerNorm { .. }, 2) => ValueRole::Bias,
                (Op::LayerNorm { .. }, 1) => ValueRole::NormScale,
                (Op::Add { .. }, _) | (Op::Gather { .. }, 0) => ValueRole::Embedding,
                _ => ValueRole::Other,
            };
        }
        ValueRole::Other
    }

    /// `(mean, standard deviation)` of the role's values; inputs are
    /// uniform, so theirs is the half-width.
    fn moments(self) -> (f64, f64) {
        match self {
            ValueRole::Matrix { fan_in } => (0.0, 1.0 / (fan_in as f64).sqrt()),
            ValueRole::Bias | ValueRole::Embedding => (0.0, 0.02),
            ValueRole::NormScale => (1.0, 0.05),
            ValueRole::Input | ValueRole::Index { .. } => (0.0, 1.0),
            ValueRole::Other => (0.0, 1.0),
        }
    }
}

/// Values for every input and weight of `graph`.
pub fn generate(graph: &Graph, seed: u64) -> ValueSet {
    let mut set = generate_inputs(graph, seed);
    set.extend(generate_weights(graph, seed));
    set
}

/// Values for every input of `graph`.
pub fn generate_inputs(graph: &Graph, seed: u64) -> ValueSet {
    generate_kind(graph, seed, TensorKind::Input)
}

/// Values for every weight of `graph`.
pub fn generate_weights(graph: &Graph, seed: u64) -> ValueSet {
    generate_kind(graph, seed, TensorKind::Weight)
}

fn generate_kind(graph: &Graph, seed: u64, kind: TensorKind) -> ValueSet {
    // Found once for the graph, not once a tensor.
    let queries = query_columns(graph);
    let mut set = ValueSet::new();
    for (id, tensor) in graph.tensors().iter() {
        if tensor.kind() == kind {
            set.insert(id, values_with(graph, id, seed, &queries));
        }
    }
    set
}

/// The values of one tensor (any kind; computed tensors get values as if
/// they were supplied, which tests use for stand-alone op checks).
/// Returns an empty vector for an id outside the graph. The query columns
/// of an attention that takes its queries scaled
/// ([`query_columns`]) are drawn divided by
/// `√head_dim`, as an importer divides a checkpoint's, so the scores keep
/// their spread.
pub fn tensor_values(graph: &Graph, tensor: TensorId, seed: u64) -> Vec<f32> {
    values_with(graph, tensor, seed, &query_columns(graph))
}

/// [`tensor_values`] with the graph's query columns already found.
fn values_with(graph: &Graph, tensor: TensorId, seed: u64, queries: &[QueryColumns]) -> Vec<f32> {
    let Some(t) = graph.tensors().get(tensor) else {
        return Vec::new();
    };
    let role = ValueRole::of(graph, tensor);
    let count = usize::try_from(t.element_count()).unwrap_or(0);
    let mine: Vec<QueryColumns> = queries
        .iter()
        .filter(|q| q.covers(tensor))
        .cloned()
        .collect();
    if mine.is_empty() {
        return values_for(t.name(), count, role, t.precision(), seed);
    }
    let columns = t.extents().last().copied().unwrap_or(1);
    let factor = |i: usize| query_factor(&mine, tensor, columns, i as u64);
    values_scaled(t.name(), count, role, t.precision(), seed, factor)
}

/// The value stream of a tensor called `name` with `count` elements, a
/// role and a precision: the function [`tensor_values`] applies.
pub fn values_for(
    name: &str,
    count: usize,
    role: ValueRole,
    precision: Precision,
    seed: u64,
) -> Vec<f32> {
    // A constant factor of 1, which the compiler folds away.
    values_scaled(name, count, role, precision, seed, |_| 1.0)
}

/// [`values_for`] with element `i`'s deviation from the mean multiplied
/// by `factor(i)` before it is rounded to `precision`.
fn values_scaled(
    name: &str,
    count: usize,
    role: ValueRole,
    precision: Precision,
    seed: u64,
    factor: impl Fn(usize) -> f64 + Sync,
) -> Vec<f32> {
    let mut out = vec![0.0f32; count];
    let key = name_key(seed, name);
    let codec = Codec::new(precision);
    let (mean, spread) = role.moments();
    out.par_chunks_mut(BLOCK)
        .enumerate()
        .for_each(|(block, chunk)| {
            let mut rng = SplitMix64::new(key ^ (block as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            for (i, value) in chunk.iter_mut().enumerate() {
                let bits = rng.next_u64();
                if let ValueRole::Index { rows } = role {
                    // Whole numbers below `rows` (at most 2^24, so exact
                    // in f32); the bias of the modulo does not matter here.
                    *value = codec.quantize((bits % rows.max(1)) as f32);
                    continue;
                }
                let z = if role == ValueRole::Input {
                    // Uniform in [-1, 1).
                    (bits >> 11) as f64 / (1u64 << 52) as f64 - 1.0
                } else {
                    irwin_hall4(bits)
                };
                let scale = factor(block * BLOCK + i);
                *value = codec.quantize((mean + spread * scale * z) as f32);
            }
        });
    out
}

/// A standardised Irwin–Hall(4) sample from 64 random bits: the sum of four
/// 16-bit uniforms, centred and scaled to unit variance.
fn irwin_hall4(bits: u64) -> f64 {
    let sum: u64 = (0..4).map(|i| (bits >> (16 * i)) & 0xffff).sum();
    // Each 16-bit uniform on {0..65535}/65536 + 1/2^17 has mean 1/2 and
    // variance ≈ 1/12; four of them sum to mean 2 and variance 1/3.
    let u = (sum as f64 + 2.0) / 65536.0;
    (u - 2.0) * 3f64.sqrt()
}

/// A 64-bit key from the seed and the tensor name.
fn name_key(seed: u64, name: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(seed.to_le_bytes());
    hasher.update(name.as_bytes());
    let digest = hasher.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes)
}

/// The little-endian bytes of `values` in `precision`, exactly as
/// `Precision::encode_into` writes them element by element: the codec's
/// slice encoder ([`Codec::encode_slice`]) over blocks in parallel.
/// Deterministic whatever the thread count.
pub fn encode(precision: Precision, values: &[f32]) -> Vec<u8> {
    let width = precision.element_bytes() as usize;
    let mut out = vec![0u8; values.len() * width];
    let codec = Codec::new(precision);
    out.par_chunks_mut(BLOCK * width)
        .zip(values.par_chunks(BLOCK))
        .for_each(|(bytes, chunk)| codec.encode_slice(chunk, bytes));
    out
}
