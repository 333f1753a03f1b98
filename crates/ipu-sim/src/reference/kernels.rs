//! The arithmetic of every op on whole row-major tensors.
//!
//! These functions take validated extents (the caller has checked every
//! length against the graph), compute in f32 (the activations other than
//! the tanh GELU in f64) in a fixed order, and return f32 results;
//! rounding to the output precision is the caller's single final step. Parallel loops split only over independent output
//! rows, each computed sequentially, so results do not depend on the thread
//! count.

use ipu_layout::Precision;
use ipu_package::graph::SoftmaxPrecision;
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

/// Output rows of one parallel GEMM task: each task streams all of
/// `right` once, so fewer, larger tasks read it less often.
const GEMM_ROWS_PER_TASK: usize = 64;

/// Columns of one packed panel of `right`, and of one register block.
const PANEL: usize = 8;

/// Rows of one register block: `BLOCK_ROWS × PANEL` running sums stay in
/// registers while a panel of `right` streams past.
const BLOCK_ROWS: usize = 4;

/// `left [rows, k] × right [k, n] (+ bias [n])`.
///
/// Each output element is one f32 running sum over `k = 0, 1, ..` whatever
/// the blocking, so the result is the naive triple loop's, bit for bit;
/// the blocking into register blocks of rows and packed panels of columns
/// only changes which elements are summed side by side.
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
    let packed = match accumulation {
        GemmAccumulation::F32 => pack_panels(right, k, n),
        GemmAccumulation::F16Partials { .. } => Vec::new(),
    };
    out.par_chunks_mut(n * GEMM_ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, chunk)| {
            let first_row = task * GEMM_ROWS_PER_TASK;
            let task_rows = chunk.len() / n;
            let task_left = &left[first_row * k..(first_row + task_rows) * k];
            match accumulation {
                GemmAccumulation::F32 => f32_rows(task_left, right, &packed, chunk, k, n),
                GemmAccumulation::F16Partials { block } => {
                    let block = (block as usize).max(1);
                    let f16 = Precision::F16.codec();
                    let mut block_sum = vec![0.0f32; n];
                    for (row, a_row) in chunk.chunks_mut(n).zip(task_left.chunks_exact(k.max(1))) {
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

/// The full `PANEL`-column panels of `right [k, n]`, each stored as `k`
/// consecutive rows of `PANEL` values, so a register block reads its
/// panel as one contiguous stream.
fn pack_panels(right: &[f32], k: usize, n: usize) -> Vec<f32> {
    let panels = n / PANEL;
    let mut packed = vec![0.0f32; panels * k * PANEL];
    for (p, panel) in packed.chunks_exact_mut((k * PANEL).max(1)).enumerate() {
        for (kk, dst) in panel.chunks_exact_mut(PANEL).enumerate() {
            let at = kk * n + p * PANEL;
            dst.copy_from_slice(&right[at..at + PANEL]);
        }
    }
    packed
}

/// `left [m, k] × right` into `out [m, n]` (`m = out.len() / n`), every
/// element one f32 running sum over `k` in increasing order: for each
/// packed panel, the register blocks of every row (the panel stays in
/// cache across them), then the columns past the last panel.
fn f32_rows(left: &[f32], right: &[f32], packed: &[f32], out: &mut [f32], k: usize, n: usize) {
    let m = out.len() / n;
    let panels = n / PANEL;
    for p in 0..panels {
        let panel = &packed[p * k * PANEL..(p + 1) * k * PANEL];
        let mut r = 0;
        while r + BLOCK_ROWS <= m {
            let rows: [&[f32]; BLOCK_ROWS] =
                std::array::from_fn(|i| &left[(r + i) * k..(r + i + 1) * k]);
            let sums = register_block(rows, panel, k);
            for (i, s) in sums.iter().enumerate() {
                out[(r + i) * n + p * PANEL..][..PANEL].copy_from_slice(s);
            }
            r += BLOCK_ROWS;
        }
        for r in r..m {
            let sums = register_block([&left[r * k..(r + 1) * k]], panel, k);
            out[r * n + p * PANEL..][..PANEL].copy_from_slice(&sums[0]);
        }
    }
    for (a_row, out_row) in left.chunks_exact(k.max(1)).zip(out.chunks_exact_mut(n)) {
        for j in panels * PANEL..n {
            let mut acc = 0.0f32;
            for (kk, &a) in a_row.iter().enumerate() {
                acc += a * right[kk * n + j];
            }
            out_row[j] = acc;
        }
    }
}

/// `R` rows of `left` (each `k` long) times one packed panel: the
/// `R × PANEL` running sums, each over `k` in increasing order.
#[inline(always)]
fn register_block<const R: usize>(rows: [&[f32]; R], panel: &[f32], k: usize) -> [[f32; PANEL]; R] {
    let mut acc = [[0.0f32; PANEL]; R];
    let rows = rows.map(|row| &row[..k]);
    let panel = &panel[..k * PANEL];
    for kk in 0..k {
        let b = &panel[kk * PANEL..kk * PANEL + PANEL];
        for (acc_row, row) in acc.iter_mut().zip(&rows) {
            let a = row[kk];
            for (x, &y) in acc_row.iter_mut().zip(b) {
                *x += a * y;
            }
        }
    }
    acc
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

/// GELU in its exact form, `0.5·x·(1 + erf(x/√2))`, in f64 (libm's erf,
/// within an ulp), rounded to f32.
pub fn gelu_erf(x: f32) -> f32 {
    let x = f64::from(x);
    (0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))) as f32
}

/// Quick GELU, `x·sigmoid(1.702·x) = x / (1 + exp(−1.702·x))`, in f64,
/// rounded to f32.
pub fn quick_gelu(x: f32) -> f32 {
    let x = f64::from(x);
    (x / (1.0 + libm::exp(-1.702 * x))) as f32
}

/// The hyperbolic tangent in f64, rounded to f32.
pub fn tanh(x: f32) -> f32 {
    libm::tanh(f64::from(x)) as f32
}

/// Multi-head attention; shapes as documented on `Op::Attention`. With
/// `causal`, query row `i` of each batch element sees keys `j ≤ i` only:
/// the others' scores are −∞, so their exponentials are exactly 0. With
/// `queries_scaled` the scores are not multiplied by `1/√head_dim`.
/// Scores and exponentials are rounded to the softmax's precision, the
/// exponentials then to its probabilities' (F16-FP8).
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
    softmax: SoftmaxPrecision,
    causal: bool,
    queries_scaled: bool,
) -> Vec<f32> {
    let head_dim = hidden / heads;
    let scale = if queries_scaled {
        1.0
    } else {
        1.0 / (head_dim as f32).sqrt()
    };
    let round = softmax.precision().codec();
    // F16-FP8 rounds the exponentials once more, to its FP8 precision.
    let probs =
        (softmax.probabilities() != softmax.precision()).then(|| softmax.probabilities().codec());
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
    let shape = AttentionShape {
        tokens_kv,
        hidden,
        heads,
        head_dim,
        scale,
        tokens_q,
        causal,
    };
    // One task per block of query rows: each writes its own output rows.
    out.par_chunks_mut((hidden * QUERY_ROWS).max(1))
        .enumerate()
        .for_each(|(task, chunk)| {
            let first = task * QUERY_ROWS;
            let rows = chunk.len() / hidden.max(1);
            // The rows of one batch element at a time: they share keys.
            let mut r0 = 0;
            while r0 < rows {
                let b = (first + r0) / tokens_q.max(1);
                let r1 = rows.min((b + 1) * tokens_q - first);
                shape.attend(
                    q,
                    &keys_t,
                    v,
                    b,
                    first + r0,
                    &mut chunk[r0 * hidden..r1 * hidden],
                    round,
                    probs,
                );
                r0 = r1;
            }
        });
    out
}

/// Query rows attended together: each key and value row read serves all
/// of them, while each row's sums keep their own order.
const QUERY_ROWS: usize = 8;

/// The extents of one attention op.
struct AttentionShape {
    tokens_kv: usize,
    hidden: usize,
    heads: usize,
    head_dim: usize,
    scale: f32,
    tokens_q: usize,
    causal: bool,
}

impl AttentionShape {
    /// Query rows `first..` (all of batch element `b`; as many as `out`
    /// holds) against the keys (transposed per head in `keys_t`) and the
    /// values of `b`, into `out`.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        q: &[f32],
        keys_t: &[f32],
        v: &[f32],
        b: usize,
        first: usize,
        out: &mut [f32],
        round: ipu_layout::numeric::Codec,
        probs: Option<ipu_layout::numeric::Codec>,
    ) {
        let AttentionShape {
            tokens_kv,
            hidden,
            heads,
            head_dim,
            scale,
            tokens_q,
            causal,
        } = *self;
        let rows = out.len() / hidden.max(1);
        // The first row's index within its batch element.
        let first_row = first - b * tokens_q;
        let mut p = vec![0.0f32; rows * tokens_kv];
        for h in 0..heads {
            let cols = h * head_dim..(h + 1) * head_dim;
            let block = (b * heads + h) * head_dim * tokens_kv;
            p.iter_mut().for_each(|x| *x = 0.0);
            // Each score: one running sum over the head's columns in
            // increasing order, the key tokens as the vectorised loop.
            for c in 0..head_dim {
                let kt = &keys_t[block + c * tokens_kv..block + (c + 1) * tokens_kv];
                for (r, p_row) in p.chunks_exact_mut(tokens_kv.max(1)).enumerate() {
                    let qc = q[(first + r) * hidden + cols.start + c];
                    for (pj, &kv) in p_row.iter_mut().zip(kt) {
                        *pj += qc * kv;
                    }
                }
            }
            for (r, p_row) in p.chunks_exact_mut(tokens_kv.max(1)).enumerate() {
                for pj in p_row.iter_mut() {
                    *pj = round.quantize(*pj * scale);
                }
                if causal {
                    let visible = (first_row + r + 1).min(tokens_kv);
                    p_row[visible..]
                        .iter_mut()
                        .for_each(|x| *x = f32::NEG_INFINITY);
                }
                let max = p_row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0f32;
                for pj in p_row.iter_mut() {
                    *pj = round.quantize((*pj - max).exp());
                    if let Some(probs) = probs {
                        *pj = probs.quantize(*pj);
                    }
                    sum += *pj;
                }
                for pj in p_row.iter_mut() {
                    *pj = round.quantize(*pj / sum);
                }
            }
            for o_row in out.chunks_exact_mut(hidden.max(1)) {
                o_row[cols.clone()].iter_mut().for_each(|x| *x = 0.0);
            }
            // Each output: one running sum over the key tokens in order.
            for j in 0..tokens_kv {
                let vr = (b * tokens_kv + j) * hidden;
                let vh = &v[vr + cols.start..vr + cols.end];
                for (r, o_row) in out.chunks_exact_mut(hidden.max(1)).enumerate() {
                    let pj = p[r * tokens_kv + j];
                    for (x, &vv) in o_row[cols.clone()].iter_mut().zip(vh) {
                        *x += pj * vv;
                    }
                }
            }
        }
    }
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

/// Row `indices[i]` of `table` (`rows` rows of `d`) for every index, in
/// order; the first index that is not a whole number below `rows` is
/// returned as `(position, value)`.
pub fn gather(
    table: &[f32],
    indices: &[f32],
    rows: u64,
    d: usize,
) -> Result<Vec<f32>, (usize, f32)> {
    let mut out = Vec::with_capacity(indices.len() * d);
    for (i, &x) in indices.iter().enumerate() {
        if !(x >= 0.0 && x.fract() == 0.0 && f64::from(x) < rows as f64) {
            return Err((i, x));
        }
        let r = x as usize;
        out.extend_from_slice(table.get(r * d..(r + 1) * d).ok_or((i, x))?);
    }
    Ok(out)
}
