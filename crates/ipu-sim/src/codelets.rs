//! What every codelet does to tile memory.
//!
//! The same functions run the codelets of the logical model (buffers as
//! separate shard arrays) and of the tile model (one SRAM image per tile):
//! each reads its operands through [`CodeletMemory`], computes in f32 and
//! writes its results rounded once to the output buffer's precision. GEMMs
//! are delegated to the memory, which runs them through its own kernel
//! path.

use ipu_layout::{Precision, TileId};
use ipu_package::program::{BufferId, Codelet, GemmEntry, KernelId, Operand};

use crate::SimError;

/// GELU with the tanh approximation, as the device codelet computes it in
/// f32. Written here, not shared with the reference evaluator, so that the
/// oracle stays independent of the model it checks.
fn gelu(x: f32) -> f32 {
    let inner = 0.797_884_6_f32 * (x + 0.044_715 * x * x * x);
    0.5 * x * (1.0 + inner.tanh())
}

/// Layer normalisation of `rows` rows of `d` elements: mean and variance
/// accumulated in f64 (the device uses F32 pairs of partial sums, which
/// this bounds), then `(x − mean) · rsqrt(var + eps) · g + b` in f32.
fn layer_norm(x: &[f32], g: &[f32], b: &[f32], d: usize, eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(d.max(1)) {
        let n = row.len() as f64;
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = row
            .iter()
            .map(|&v| (f64::from(v) - mean) * (f64::from(v) - mean))
            .sum::<f64>()
            / n;
        let inv = (1.0 / (var + f64::from(eps)).sqrt()) as f32;
        let mean = mean as f32;
        out.extend(
            row.iter()
                .zip(g)
                .zip(b)
                .map(|((&v, &gg), &bb)| (v - mean) * inv * gg + bb),
        );
    }
    out
}

/// Tile memory as codelets see it.
pub trait CodeletMemory {
    /// The element precision of a buffer.
    fn precision(&self, buffer: BufferId) -> Precision;
    /// `bytes` bytes of `tile`'s shard of the operand's buffer, from its
    /// offset. Reading past the shard (and its access tail) is an error.
    fn read(&self, tile: TileId, at: Operand, bytes: u64) -> Result<Vec<u8>, SimError>;
    /// Writes `data` into `tile`'s shard of the operand's buffer.
    fn write(&mut self, tile: TileId, at: Operand, data: &[u8]) -> Result<(), SimError>;
    /// Runs a GEMM kernel call.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        tile: TileId,
        kernel: KernelId,
        entry: GemmEntry,
        rows: u32,
        left: Operand,
        right: Operand,
        output: Operand,
    ) -> Result<(), SimError>;
}

fn read_values(
    m: &impl CodeletMemory,
    tile: TileId,
    at: Operand,
    count: u64,
) -> Result<Vec<f32>, SimError> {
    let p = m.precision(at.buffer);
    let eb = p.element_bytes();
    let bytes = m.read(tile, at, count * eb)?;
    Ok(bytes
        .chunks_exact(eb as usize)
        .map(|c| p.decode_from(c))
        .collect())
}

fn write_values(
    m: &mut impl CodeletMemory,
    tile: TileId,
    at: Operand,
    values: &[f32],
) -> Result<(), SimError> {
    let p = m.precision(at.buffer);
    let eb = p.element_bytes() as usize;
    let mut bytes = vec![0u8; values.len() * eb];
    for (v, out) in values.iter().zip(bytes.chunks_exact_mut(eb)) {
        p.encode_into(*v, out);
    }
    m.write(tile, at, &bytes)
}

/// Reads `rows` rows of `cols` elements, rows `stride` elements apart.
fn read_rows(
    m: &impl CodeletMemory,
    tile: TileId,
    at: Operand,
    rows: u64,
    cols: u64,
    stride: u64,
) -> Result<Vec<f32>, SimError> {
    if rows == 0 {
        return Ok(Vec::new());
    }
    let span = (rows - 1) * stride + cols;
    let all = read_values(m, tile, at, span)?;
    let mut out = Vec::with_capacity((rows * cols) as usize);
    for r in 0..rows {
        let start = (r * stride) as usize;
        out.extend_from_slice(&all[start..start + cols as usize]);
    }
    Ok(out)
}

/// Writes rows into a strided destination, leaving the gaps as they are.
fn write_rows(
    m: &mut impl CodeletMemory,
    tile: TileId,
    at: Operand,
    values: &[f32],
    cols: u64,
    stride: u64,
) -> Result<(), SimError> {
    let eb = m.precision(at.buffer).element_bytes();
    for (r, row) in values.chunks(cols.max(1) as usize).enumerate() {
        let offset = u64::from(at.offset) + r as u64 * stride * eb;
        let offset = u32::try_from(offset).map_err(|_| SimError::Argument {
            what: "row offset".into(),
        })?;
        write_values(
            m,
            tile,
            Operand {
                buffer: at.buffer,
                offset,
            },
            row,
        )?;
    }
    Ok(())
}

/// Runs one codelet on `tile`.
pub fn run_codelet(
    m: &mut impl CodeletMemory,
    tile: TileId,
    codelet: &Codelet,
) -> Result<(), SimError> {
    match *codelet {
        Codelet::Gemm {
            kernel,
            entry,
            rows,
            left,
            right,
            output,
        } => m.gemm(tile, kernel, entry, rows, left, right, output),
        Codelet::Add {
            a,
            b,
            out,
            rows,
            cols,
            broadcast_rows,
        } => {
            let n = u64::from(rows) * u64::from(cols);
            let xa = read_values(m, tile, a, n)?;
            let xb = read_values(m, tile, b, if broadcast_rows { u64::from(cols) } else { n })?;
            let cols = cols as usize;
            let sum: Vec<f32> = xa
                .iter()
                .enumerate()
                .map(|(i, &v)| v + if broadcast_rows { xb[i % cols] } else { xb[i] })
                .collect();
            write_values(m, tile, out, &sum)
        }
        Codelet::LayerNorm {
            input,
            scale,
            bias,
            output,
            rows,
            cols,
            eps,
        } => {
            let x = read_values(m, tile, input, u64::from(rows) * u64::from(cols))?;
            let g = read_values(m, tile, scale, u64::from(cols))?;
            let b = read_values(m, tile, bias, u64::from(cols))?;
            write_values(m, tile, output, &layer_norm(&x, &g, &b, cols as usize, eps))
        }
        Codelet::Gelu {
            input,
            output,
            elements,
        } => {
            let x = read_values(m, tile, input, u64::from(elements))?;
            let y: Vec<f32> = x.into_iter().map(gelu).collect();
            write_values(m, tile, output, &y)
        }
        Codelet::Convert {
            input,
            output,
            elements,
        } => {
            let x = read_values(m, tile, input, u64::from(elements))?;
            write_values(m, tile, output, &x)
        }
        Codelet::ReduceSum {
            input,
            output,
            count,
            elements,
        } => {
            let x = read_values(m, tile, input, u64::from(count) * u64::from(elements))?;
            let n = elements as usize;
            let mut sum = vec![0.0f32; n];
            for part in x.chunks(n.max(1)) {
                for (s, v) in sum.iter_mut().zip(part) {
                    *s += v;
                }
            }
            write_values(m, tile, output, &sum)
        }
        Codelet::AttentionBlock {
            q,
            k,
            v,
            out,
            max,
            sum,
            workspace,
            q_rows,
            kv_rows,
            head_dim,
            q_stride,
            kv_stride,
            out_stride,
            scale,
            softmax_f16,
        } => {
            let (rq, rk, d) = (u64::from(q_rows), u64::from(kv_rows), u64::from(head_dim));
            let qv = read_rows(m, tile, q, rq, d, u64::from(q_stride))?;
            let kv_ = read_rows(m, tile, k, rk, d, u64::from(kv_stride))?;
            let vv = read_rows(m, tile, v, rk, d, u64::from(kv_stride))?;
            // The scratch row must exist on the tile, as on the device.
            m.read(tile, workspace, rk * 4)?;
            let round = |x: f32| {
                if softmax_f16 {
                    Precision::F16.quantize(x)
                } else {
                    x
                }
            };
            let (rk, d) = (rk as usize, d as usize);
            let mut o = vec![0.0f32; rq as usize * d];
            let mut maxima = Vec::with_capacity(rq as usize);
            let mut sums = Vec::with_capacity(rq as usize);
            let mut s = vec![0.0f32; rk];
            for r in 0..rq as usize {
                let qr = &qv[r * d..(r + 1) * d];
                for (j, sj) in s.iter_mut().enumerate() {
                    let kr = &kv_[j * d..(j + 1) * d];
                    let dot = qr.iter().zip(kr).fold(0.0f32, |acc, (&a, &b)| acc + a * b);
                    *sj = round(dot * scale);
                }
                let mx = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut l = 0.0f32;
                let orow = &mut o[r * d..(r + 1) * d];
                for (j, &sj) in s.iter().enumerate() {
                    let e = round((sj - mx).exp());
                    l += e;
                    for (x, &vj) in orow.iter_mut().zip(&vv[j * d..(j + 1) * d]) {
                        *x += e * vj;
                    }
                }
                maxima.push(mx);
                sums.push(l);
            }
            write_rows(m, tile, out, &o, d as u64, u64::from(out_stride))?;
            write_values(m, tile, max, &maxima)?;
            write_values(m, tile, sum, &sums)
        }
        Codelet::AttentionCombine {
            out,
            max,
            sum,
            output,
            blocks,
            q_rows,
            head_dim,
            out_block_stride,
            out_row_stride,
            stat_block_stride,
            output_row_stride,
        } => {
            let (nb, rq, d) = (u64::from(blocks), u64::from(q_rows), u64::from(head_dim));
            let mut os = Vec::new();
            let mut ms = Vec::new();
            let mut ls = Vec::new();
            for b in 0..nb {
                let shift = |at: Operand, elements: u64| -> Result<Operand, SimError> {
                    let offset = u64::from(at.offset) + elements * 4;
                    let offset = u32::try_from(offset).map_err(|_| SimError::Argument {
                        what: "block offset".into(),
                    })?;
                    Ok(Operand {
                        buffer: at.buffer,
                        offset,
                    })
                };
                os.push(read_rows(
                    m,
                    tile,
                    shift(out, b * u64::from(out_block_stride))?,
                    rq,
                    d,
                    u64::from(out_row_stride),
                )?);
                ms.push(read_values(
                    m,
                    tile,
                    shift(max, b * u64::from(stat_block_stride))?,
                    rq,
                )?);
                ls.push(read_values(
                    m,
                    tile,
                    shift(sum, b * u64::from(stat_block_stride))?,
                    rq,
                )?);
            }
            let d = d as usize;
            let mut y = vec![0.0f32; rq as usize * d];
            for r in 0..rq as usize {
                let mx = ms.iter().map(|m| m[r]).fold(f32::NEG_INFINITY, f32::max);
                let mut total = 0.0f32;
                let yr = &mut y[r * d..(r + 1) * d];
                for b in 0..nb as usize {
                    let w = (ms[b][r] - mx).exp();
                    total += w * ls[b][r];
                    for (x, &o) in yr.iter_mut().zip(&os[b][r * d..(r + 1) * d]) {
                        *x += w * o;
                    }
                }
                for x in yr.iter_mut() {
                    *x /= total;
                }
            }
            write_rows(m, tile, output, &y, d as u64, u64::from(output_row_stride))
        }
        Codelet::Zero { target, bytes } => m.write(tile, target, &vec![0u8; bytes as usize]),
    }
}
