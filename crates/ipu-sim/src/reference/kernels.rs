//! The arithmetic of every op on whole row-major tensors.
//!
//! These functions take validated extents (the caller has checked every
//! length against the graph), compute in f32 in a fixed order, and return
//! unrounded results; rounding to the output precision is the caller's
//! single final step. Parallel loops split only over independent output
//! rows, each computed sequentially, so results do not depend on the thread
//! count.

use ipu_layout::Precision;
use rayon::prelude::*;

/// Output rows computed per parallel task: small tensors stay on one
/// thread, large GEMMs split.
const ROWS_PER_TASK: usize = 32;

/// How GEMM sums are accumulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GemmAccumulation {
    /// One f32 running sum over `k = 0, 1, ..`, bias added at the end: the
    /// reference semantics.
    #[default]
    F32,
    /// Sums of `block` consecutive products are formed in f32 and added to
    /// a running partial that is rounded to F16 after each block, as AMP
    /// F16 partials are; bias is added to the rounded total. For
    /// calibrating tolerances, not the reference.
    F16Partials {
        /// Products per block (at least 1).
        block: u32,
    },
}

/// Columns of one output block: with [`ROWS_PER_TASK`] rows the running
/// sums of a block stay in L1 while a row of `right` streams past.
const COLUMNS_PER_BLOCK: usize = 256;

/// `left [rows, k] × right [k, n] (+ bias [n])`.
///
/// Each output element is one f32 running sum over `k = 0, 1, ..` whatever
/// the blocking, so the result is the naive triple loop's, bit for bit;
/// the blocking over rows and columns only keeps `right` in cache.
pub fn gemm(
    left: &[f32],
    right: &[f32],
    bias: Option<&[f32]>,
    rows: usize,
    k: usize,
    n: usize,
    accumulation: GemmAccumulation,
) -> Vec<f32> {
    let mut out = vec![0.0f32; rows * n];
    if n == 0 {
        return out;
    }
    out.par_chunks_mut(n * ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, chunk)| {
            let first_row = task * ROWS_PER_TASK;
            let task_rows = chunk.len() / n;
            match accumulation {
                GemmAccumulation::F32 => {
                    for j0 in (0..n).step_by(COLUMNS_PER_BLOCK) {
                        let j1 = (j0 + COLUMNS_PER_BLOCK).min(n);
                        for kk in 0..k {
                            let b_row = &right[kk * n + j0..kk * n + j1];
                            for r in 0..task_rows {
                                let a = left[(first_row + r) * k + kk];
                                let acc = &mut chunk[r * n + j0..r * n + j1];
                                for (x, &b) in acc.iter_mut().zip(b_row) {
                                    *x += a * b;
                                }
                            }
                        }
                    }
                }
                GemmAccumulation::F16Partials { block } => {
                    let block = (block as usize).max(1);
                    let f16 = Precision::F16.codec();
                    let mut block_sum = vec![0.0f32; n];
                    for (r, row) in chunk.chunks_mut(n).enumerate() {
                        let a_row = &left[(first_row + r) * k..(first_row + r + 1) * k];
                        for start in (0..k).step_by(block) {
                            block_sum.iter_mut().for_each(|s| *s = 0.0);
                            for kk in start..(start + block).min(k) {
                                let a = a_row[kk];
                                let b_row = &right[kk * n..(kk + 1) * n];
                                for (acc, &b) in block_sum.iter_mut().zip(b_row) {
                                    *acc += a * b;
                                }
                            }
                            for (acc, &s) in row.iter_mut().zip(&block_sum) {
                                *acc = f16.quantize(*acc + s);
                            }
                        }
                    }
                }
            }
            if let Some(bias) = bias {
                for row in chunk.chunks_mut(n) {
                    for (acc, &b) in row.iter_mut().zip(bias) {
                        *acc += b;
                    }
                }
            }
        });
    out
}

/// Per-axis strides of a row-major shape.
pub fn strides(extents: &[u64]) -> Vec<usize> {
    let mut strides = vec![0usize; extents.len()];
    let mut stride = 1usize;
    for (s, &e) in strides.iter_mut().zip(extents).rev() {
        *s = stride;
        stride *= e as usize;
    }
    strides
}

/// Strides of `input` as seen from a broadcast output of rank
/// `out_rank`: aligned at the last axis, 0 on missing and extent-1 axes.
fn broadcast_strides(input: &[u64], out: &[u64]) -> Vec<usize> {
    let own = strides(input);
    let mut result = vec![0usize; out.len()];
    let skip = out.len() - input.len();
    for (i, (&e, &s)) in input.iter().zip(&own).enumerate() {
        result[skip + i] = if e == 1 && out[skip + i] != 1 { 0 } else { s };
    }
    result
}

/// Calls `f(output index, offset in each operand)` for every element of
/// `out` in row-major order, with each operand broadcast to `out`.
fn for_each_broadcast<const N: usize>(
    out: &[u64],
    operands: [&[u64]; N],
    mut f: impl FnMut(usize, [usize; N]),
) {
    let total: usize = out.iter().map(|&e| e as usize).product();
    if total == 0 {
        return;
    }
    let strides: Vec<Vec<usize>> = operands.iter().map(|s| broadcast_strides(s, out)).collect();
    let rank = out.len();
    let mut index = vec![0u64; rank];
    let mut offsets = [0usize; N];
    for flat in 0..total {
        f(flat, offsets);
        // Odometer step: bump the last axis, carrying into earlier ones.
        for axis in (0..rank).rev() {
            index[axis] += 1;
            for (o, s) in offsets.iter_mut().zip(&strides) {
                *o += s[axis];
            }
            if index[axis] < out[axis] {
                break;
            }
            for (o, s) in offsets.iter_mut().zip(&strides) {
                *o -= s[axis] * out[axis] as usize;
            }
            index[axis] = 0;
        }
    }
}

/// `left + right` with numpy broadcasting to `out`.
pub fn add(left: &[f32], l: &[u64], right: &[f32], r: &[u64], out: &[u64]) -> Vec<f32> {
    let mut result = Vec::with_capacity(out.iter().map(|&e| e as usize).product());
    for_each_broadcast(out, [l, r], |_, [a, b]| result.push(left[a] + right[b]));
    result
}

/// `input` broadcast to `out`.
pub fn broadcast(input: &[f32], shape: &[u64], out: &[u64]) -> Vec<f32> {
    let mut result = Vec::with_capacity(out.iter().map(|&e| e as usize).product());
    for_each_broadcast(out, [shape], |_, [a]| result.push(input[a]));
    result
}

/// Layer norm over rows of `d`; statistics in f64, the rest in f32.
pub fn layer_norm(input: &[f32], scale: &[f32], bias: &[f32], d: usize, eps: f32) -> Vec<f32> {
    let mut out = vec![0.0f32; input.len()];
    if d == 0 {
        return out;
    }
    out.par_chunks_mut(d * ROWS_PER_TASK)
        .zip(input.par_chunks(d * ROWS_PER_TASK))
        .for_each(|(o, x)| {
            for (row_out, row) in o.chunks_mut(d).zip(x.chunks(d)) {
                let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
                let var = row
                    .iter()
                    .map(|&v| (f64::from(v) - mean).powi(2))
                    .sum::<f64>()
                    / d as f64;
                let inv = (1.0 / (var + f64::from(eps)).sqrt()) as f32;
                let mean = mean as f32;
                for (((y, &v), &g), &b) in row_out.iter_mut().zip(row).zip(scale).zip(bias) {
                    *y = (v - mean) * inv * g + b;
                }
            }
        });
    out
}

/// GELU, tanh approximation, in f32.
pub fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)).tanh())
}

/// Multi-head attention; shapes as documented on `Op::Attention`.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    batch: usize,
    tokens_q: usize,
    tokens_kv: usize,
    hidden: usize,
    heads: usize,
    softmax: Precision,
) -> Vec<f32> {
    let head_dim = hidden / heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let round = softmax.codec();
    // Keys transposed per (batch, head) to [head_dim, tokens_kv], so the
    // scores of one query row accumulate over the head's columns with the
    // key tokens as the vectorised inner loop; each score is still one
    // running sum over the columns in increasing order.
    let mut keys_t = vec![0.0f32; batch * heads * head_dim * tokens_kv];
    keys_t
        .par_chunks_mut((head_dim * tokens_kv).max(1))
        .enumerate()
        .for_each(|(bh, block)| {
            let (b, h) = (bh / heads, bh % heads);
            for j in 0..tokens_kv {
                let row = (b * tokens_kv + j) * hidden + h * head_dim;
                for c in 0..head_dim {
                    block[c * tokens_kv + j] = k[row + c];
                }
            }
        });
    let mut out = vec![0.0f32; batch * tokens_q * hidden];
    // One task per (batch, query row): each writes its own output row.
    out.par_chunks_mut(hidden.max(1))
        .enumerate()
        .for_each(|(row, out_row)| {
            let b = row / tokens_q.max(1);
            let q_row = &q[row * hidden..(row + 1) * hidden];
            let mut p = vec![0.0f32; tokens_kv];
            for h in 0..heads {
                let cols = h * head_dim..(h + 1) * head_dim;
                let block = (b * heads + h) * head_dim * tokens_kv;
                p.iter_mut().for_each(|x| *x = 0.0);
                for (c, &qc) in q_row[cols.clone()].iter().enumerate() {
                    let kt = &keys_t[block + c * tokens_kv..block + (c + 1) * tokens_kv];
                    for (pj, &kv) in p.iter_mut().zip(kt) {
                        *pj += qc * kv;
                    }
                }
                for pj in p.iter_mut() {
                    *pj = round.quantize(*pj * scale);
                }
                let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0f32;
                for pj in p.iter_mut() {
                    *pj = round.quantize((*pj - max).exp());
                    sum += *pj;
                }
                for pj in p.iter_mut() {
                    *pj = round.quantize(*pj / sum);
                }
                let o = &mut out_row[cols.clone()];
                o.iter_mut().for_each(|x| *x = 0.0);
                for (j, &pj) in p.iter().enumerate() {
                    let vr = (b * tokens_kv + j) * hidden;
                    let vh = &v[vr + cols.start..vr + cols.end];
                    for (x, &vv) in o.iter_mut().zip(vh) {
                        *x += pj * vv;
                    }
                }
            }
        });
    out
}

/// Axis permutation: output axis `a` is input axis `perm[a]`.
pub fn transpose(input: &[f32], extents: &[u64], perm: &[u32]) -> Vec<f32> {
    let in_strides = strides(extents);
    let out_extents: Vec<u64> = perm.iter().map(|&p| extents[p as usize]).collect();
    // The input stride of each output axis.
    let permuted: Vec<usize> = perm.iter().map(|&p| in_strides[p as usize]).collect();
    let total: usize = out_extents.iter().map(|&e| e as usize).product();
    let mut out = Vec::with_capacity(total);
    let rank = out_extents.len();
    let mut index = vec![0u64; rank];
    let mut offset = 0usize;
    for _ in 0..total {
        out.push(input[offset]);
        for axis in (0..rank).rev() {
            index[axis] += 1;
            offset += permuted[axis];
            if index[axis] < out_extents[axis] {
                break;
            }
            offset -= permuted[axis] * out_extents[axis] as usize;
            index[axis] = 0;
        }
    }
    out
}

/// Indices `start .. start + out[axis]` of `axis`.
pub fn slice(input: &[f32], extents: &[u64], axis: usize, start: usize, out: &[u64]) -> Vec<f32> {
    let outer: usize = extents[..axis].iter().map(|&e| e as usize).product();
    let inner: usize = extents[axis + 1..].iter().map(|&e| e as usize).product();
    let (in_len, out_len) = (extents[axis] as usize, out[axis] as usize);
    let mut result = Vec::with_capacity(outer * out_len * inner);
    for o in 0..outer {
        let begin = (o * in_len + start) * inner;
        result.extend_from_slice(&input[begin..begin + out_len * inner]);
    }
    result
}
