//! What every codelet does to tile memory.
//!
//! The same functions run the codelets of the logical model (buffers as
//! separate shard arrays) and of the tile model (one SRAM image per tile):
//! each reads its operands through [`CodeletMemory`], computes in f32 and
//! writes its results rounded once to the output buffer's precision. GEMMs
//! are delegated to the memory, which runs them through its own kernel
//! path.
//!
//! Arguments come from the package, so nothing here trusts them: sizes are
//! computed with checked arithmetic, every operand's extent is checked
//! against its placed range before anything is allocated for it (so no
//! allocation exceeds what tile memory holds), and strided rows must not
//! overlap (so a row count cannot multiply a small read into a large
//! allocation). How long a codelet may loop is bounded by the run's work
//! limit, counted with `codelet_work` before the run.

use ipu_layout::{AmpOperand, ElementOrder, Precision, TileId};
use ipu_package::graph::{Activation, AttentionMask};
use ipu_package::profile::{VectorModel, Work, combines_in_f16};
use ipu_package::program::{
    BufferId, CausalRows, Codelet, GemmEntry, GemmKernel, KernelId, MAX_PROB_EXPONENT, Operand,
};

use crate::SimError;

mod attention;

use attention::{combine_row_f16, combine_row_f32, dot_rows, row_of, softmax_row};

/// An activation function as the device codelet computes it: the tanh
/// GELU in f32, the others in f64 with libm's functions, rounded to f32
/// once. Written here, not shared with the reference evaluator, so that
/// the oracle stays independent of the model it checks.
fn activation(function: Activation, x: f32) -> f32 {
    let v = f64::from(x);
    match function {
        Activation::GeluTanh => {
            let inner = 0.797_884_6_f32 * (x + 0.044_715 * x * x * x);
            0.5 * x * (1.0 + inner.tanh())
        }
        Activation::GeluErf => {
            (0.5 * v * (1.0 + libm::erf(v * std::f64::consts::FRAC_1_SQRT_2))) as f32
        }
        Activation::QuickGelu => (v / (1.0 + libm::exp(-1.702 * v))) as f32,
        Activation::Tanh => libm::tanh(v) as f32,
    }
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
    fn precision(&self, tile: TileId, buffer: BufferId) -> Result<Precision, SimError>;
    /// `bytes` bytes of `tile`'s shard of the operand's buffer, from its
    /// offset. Reading past the shard (and its access tail) is an error.
    fn read(&self, tile: TileId, at: Operand, bytes: u64) -> Result<Vec<u8>, SimError>;
    /// Checks that `bytes` bytes at the operand lie in `tile`'s shard,
    /// without touching them.
    fn extent(&self, tile: TileId, at: Operand, bytes: u64) -> Result<(), SimError>;
    /// Writes `data` into `tile`'s shard of the operand's buffer.
    fn write(&mut self, tile: TileId, at: Operand, data: &[u8]) -> Result<(), SimError>;
    /// For an FP8 `output` precision, the code of every F16 value (indexed
    /// by its bits), if the memory keeps such a table: a cache of
    /// `output.encode_into(F16 value)`, which makes FP8 casts a lookup.
    fn f16_to_fp8(&self, _output: Precision) -> Option<&[u8]> {
        None
    }
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

/// Whether a codelet reads or writes an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
    /// Zeroes padding before a buffer is filled: a write, but no result.
    Clear,
}

/// Every operand of `c` with how it is accessed.
pub(crate) fn codelet_operands(c: &Codelet) -> Vec<(Operand, Access)> {
    use Access::{Clear, Read, Write};
    match *c {
        Codelet::Gemm {
            left,
            right,
            output,
            entry,
            ..
        } => {
            let mut v = vec![(left, Read), (right, Read), (output, Write)];
            if entry.accumulate {
                v.push((output, Read));
            }
            v
        }
        Codelet::Add { a, b, out, .. } => vec![(a, Read), (b, Read), (out, Write)],
        Codelet::LayerNorm {
            input,
            scale,
            bias,
            output,
            ..
        } => vec![(input, Read), (scale, Read), (bias, Read), (output, Write)],
        Codelet::Activation { input, output, .. }
        | Codelet::Convert { input, output, .. }
        | Codelet::ReduceSum { input, output, .. } => vec![(input, Read), (output, Write)],
        Codelet::AttentionBlock {
            q,
            k,
            v,
            out,
            max,
            sum,
            workspace,
            ..
        } => vec![
            (q, Read),
            (k, Read),
            (v, Read),
            (workspace, Read),
            (out, Write),
            (max, Write),
            (sum, Write),
        ],
        Codelet::AttentionCombine {
            out,
            max,
            sum,
            output,
            ..
        } => vec![(out, Read), (max, Read), (sum, Read), (output, Write)],
        Codelet::AttentionSoftmax {
            scores,
            probs,
            max,
            sum,
            ..
        } => vec![(scores, Read), (probs, Write), (max, Write), (sum, Write)],
        Codelet::Panels { input, output, .. } => vec![(input, Read), (output, Write)],
        Codelet::Zero { target, .. } => vec![(target, Clear)],
        Codelet::Gather {
            table,
            indices,
            output,
            ..
        } => vec![(table, Read), (indices, Read), (output, Write)],
    }
}

/// The codelet's kind, as [`crate::tiles::CODELET_KINDS`] names it.
pub(crate) fn codelet_name(c: &Codelet) -> &'static str {
    match c {
        Codelet::Gemm { .. } => "gemm",
        Codelet::Add { .. } => "add",
        Codelet::LayerNorm { .. } => "layer_norm",
        Codelet::Activation { function, .. } => function.name(),
        Codelet::Convert { .. } => "convert",
        Codelet::ReduceSum { .. } => "reduce_sum",
        Codelet::AttentionBlock { .. } => "attention_block",
        Codelet::AttentionCombine { .. } => "attention_combine",
        Codelet::AttentionSoftmax { .. } => "attention_softmax",
        Codelet::Panels { .. } => "panels",
        Codelet::Zero { .. } => "zero",
        Codelet::Gather { .. } => "gather",
    }
}

/// The elements a codelet works on, counting every loop at least once (so
/// that zero-sized arguments cannot hide a long loop): multiply-accumulates
/// for a GEMM (`kernel` is its spec), scores times head columns for an
/// attention block. Saturates at `u64::MAX`.
pub(crate) fn codelet_work(c: &Codelet, kernel: Option<&GemmKernel>) -> u64 {
    let product = |xs: &[u32]| {
        xs.iter()
            .fold(1u64, |acc, &x| acc.saturating_mul(u64::from(x.max(1))))
    };
    match *c {
        Codelet::Gemm { rows, .. } => match kernel {
            Some(k) => product(&[rows, k.inner, k.columns]),
            None => product(&[rows]),
        },
        Codelet::Add { rows, cols, .. } | Codelet::LayerNorm { rows, cols, .. } => {
            product(&[rows, cols])
        }
        Codelet::Activation { elements, .. } | Codelet::Convert { elements, .. } => {
            product(&[elements])
        }
        Codelet::ReduceSum {
            count, elements, ..
        } => product(&[count, elements]),
        Codelet::AttentionBlock {
            q_rows,
            kv_rows,
            head_dim,
            ..
        } => product(&[q_rows, kv_rows, head_dim]).saturating_mul(2),
        Codelet::AttentionCombine {
            blocks,
            q_rows,
            head_dim,
            ..
        } => product(&[blocks, q_rows, head_dim]),
        Codelet::AttentionSoftmax { rows, stride, .. } => product(&[rows, stride]),
        Codelet::Panels {
            out_rows, out_cols, ..
        } => product(&[out_rows, out_cols]),
        Codelet::Zero { bytes, runs, .. } => product(&[bytes, runs]),
        Codelet::Gather { rows, cols, .. } => product(&[rows, cols]),
    }
}

/// Checked arithmetic on codelet arguments, failing with the codelet and
/// the argument named.
struct Args {
    tile: TileId,
    codelet: &'static str,
}

impl Args {
    fn fail(&self, what: &'static str) -> SimError {
        SimError::Argument {
            tile: self.tile,
            codelet: self.codelet,
            what,
        }
    }

    fn mul(&self, what: &'static str, a: u64, b: u64) -> Result<u64, SimError> {
        a.checked_mul(b).ok_or_else(|| self.fail(what))
    }

    fn add(&self, what: &'static str, a: u64, b: u64) -> Result<u64, SimError> {
        a.checked_add(b).ok_or_else(|| self.fail(what))
    }

    fn usize(&self, what: &'static str, a: u64) -> Result<usize, SimError> {
        usize::try_from(a).map_err(|_| self.fail(what))
    }

    /// The operand `elements` elements of 4 bytes further on.
    /// `at` moved on by `elements` elements of `element_bytes` each.
    fn shift(&self, at: Operand, elements: u64, element_bytes: u64) -> Result<Operand, SimError> {
        let offset = self.add(
            "block offset",
            u64::from(at.offset),
            self.mul("block offset", elements, element_bytes)?,
        )?;
        let offset = u32::try_from(offset).map_err(|_| self.fail("block offset"))?;
        Ok(Operand {
            buffer: at.buffer,
            offset,
        })
    }

    /// Elements spanned by `rows` rows of `cols` elements, `stride` apart,
    /// which must not overlap.
    fn span(&self, rows: u64, cols: u64, stride: u64) -> Result<u64, SimError> {
        if rows > 1 && stride < cols {
            return Err(self.fail("row stride (rows overlap)"));
        }
        if rows == 0 {
            return Ok(0);
        }
        self.add("row span", self.mul("row span", rows - 1, stride)?, cols)
    }
}

fn read_values(
    m: &impl CodeletMemory,
    args: &Args,
    at: Operand,
    count: u64,
) -> Result<Vec<f32>, SimError> {
    let p = m.precision(args.tile, at.buffer)?;
    let eb = p.element_bytes();
    let bytes = m.read(args.tile, at, args.mul("element count", count, eb)?)?;
    // The slice codec decodes as `decode_from` does, a vector at a time.
    let mut values = vec![0f32; bytes.len() / (eb as usize).max(1)];
    p.codec()
        .decode_slice(&bytes[..values.len() * eb as usize], &mut values);
    Ok(values)
}

/// Checks that `count` elements fit at the operand before anything is
/// allocated for them.
fn check_values(
    m: &impl CodeletMemory,
    args: &Args,
    at: Operand,
    count: u64,
) -> Result<(), SimError> {
    let eb = m.precision(args.tile, at.buffer)?.element_bytes();
    m.extent(args.tile, at, args.mul("element count", count, eb)?)
}

fn write_values(
    m: &mut impl CodeletMemory,
    args: &Args,
    at: Operand,
    values: &[f32],
) -> Result<(), SimError> {
    let p = m.precision(args.tile, at.buffer)?;
    let eb = p.element_bytes() as usize;
    let mut bytes = vec![0u8; values.len() * eb];
    // The slice codec encodes as `encode_into` does, a vector at a time.
    p.codec().encode_slice(values, &mut bytes);
    m.write(args.tile, at, &bytes)
}

/// Reads `rows` rows of `cols` elements, rows `stride` elements apart.
fn read_rows(
    m: &impl CodeletMemory,
    args: &Args,
    at: Operand,
    rows: u64,
    cols: u64,
    stride: u64,
) -> Result<Vec<f32>, SimError> {
    let span = args.span(rows, cols, stride)?;
    if rows == 0 {
        return Ok(Vec::new());
    }
    let all = read_values(m, args, at, span)?;
    // Rows do not overlap, so `rows × cols ≤ span` elements were read.
    let (cols, stride) = (
        args.usize("columns", cols)?,
        args.usize("row stride", stride)?,
    );
    let mut out = Vec::with_capacity(all.len());
    for r in 0..args.usize("rows", rows)? {
        let start = r * stride;
        out.extend_from_slice(all.get(start..start + cols).unwrap_or(&[]));
    }
    Ok(out)
}

/// Checks the extent of `rows` strided rows before they are computed.
fn check_rows(
    m: &impl CodeletMemory,
    args: &Args,
    at: Operand,
    rows: u64,
    cols: u64,
    stride: u64,
) -> Result<(), SimError> {
    let span = args.span(rows, cols, stride)?;
    check_values(m, args, at, span)
}

/// Writes rows into a strided destination, leaving the gaps as they are.
fn write_rows(
    m: &mut impl CodeletMemory,
    args: &Args,
    at: Operand,
    values: &[f32],
    cols: u64,
    stride: u64,
) -> Result<(), SimError> {
    let eb = m.precision(args.tile, at.buffer)?.element_bytes();
    let row_bytes = args.mul("row offset", stride, eb)?;
    for (r, row) in values
        .chunks(args.usize("columns", cols.max(1))?)
        .enumerate()
    {
        let offset = args.add(
            "row offset",
            u64::from(at.offset),
            args.mul("row offset", r as u64, row_bytes)?,
        )?;
        let offset = u32::try_from(offset).map_err(|_| args.fail("row offset"))?;
        write_values(
            m,
            args,
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
    run_codelet_counted(m, tile, codelet, None).map(|_| ())
}

/// Runs one codelet on `tile` and, with a vector model, says what it did
/// in the units the device's cost model counts
/// (`ipu_package::profile::Work`): the elements it wrote, the partials and
/// rows it read, the query and key rows it ran, the bytes it zeroed —
/// counted from the values it actually touched, not from its arguments.
/// A GEMM's work is the AMP program the memory runs, so it has none here.
pub fn run_codelet_counted(
    m: &mut impl CodeletMemory,
    tile: TileId,
    codelet: &Codelet,
    model: Option<&VectorModel>,
) -> Result<Option<Work>, SimError> {
    let args = Args {
        tile,
        codelet: codelet_name(codelet),
    };
    let args = &args;
    // Lanes per vector for the precisions a codelet touches, when counting.
    let lanes = |m: &mut _, buffers: &[BufferId]| -> Result<u32, SimError> {
        let Some(model) = model else {
            return Ok(1);
        };
        let m: &mut _ = m;
        let mut precisions = Vec::with_capacity(buffers.len());
        for &b in buffers {
            precisions.push(CodeletMemory::precision(m, tile, b)?);
        }
        Ok(model.lanes_of(&precisions))
    };
    let counted = |work: Work| model.map(|_| work);
    match *codelet {
        Codelet::Gemm {
            kernel,
            entry,
            rows,
            left,
            right,
            output,
        } => m
            .gemm(tile, kernel, entry, rows, left, right, output)
            .map(|()| None),
        Codelet::Add {
            a,
            b,
            out,
            rows,
            cols,
            broadcast_rows,
        } => {
            let n = args.mul("element count", u64::from(rows), u64::from(cols))?;
            check_values(m, args, out, n)?;
            let xa = read_values(m, args, a, n)?;
            let xb = read_values(m, args, b, if broadcast_rows { u64::from(cols) } else { n })?;
            let sum: Vec<f32> = if broadcast_rows {
                let cols = (cols as usize).max(1);
                xa.chunks(cols)
                    .flat_map(|row| row.iter().zip(&xb).map(|(&x, &y)| x + y))
                    .collect()
            } else {
                xa.iter().zip(&xb).map(|(&x, &y)| x + y).collect()
            };
            write_values(m, args, out, &sum)?;
            let lanes = lanes(m, &[a.buffer, b.buffer, out.buffer])?;
            Ok(counted(Work::Add {
                elements: sum.len() as u64,
                lanes,
            }))
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
            let n = args.mul("element count", u64::from(rows), u64::from(cols))?;
            check_values(m, args, output, n)?;
            let x = read_values(m, args, input, n)?;
            let g = read_values(m, args, scale, u64::from(cols))?;
            let b = read_values(m, args, bias, u64::from(cols))?;
            let y = layer_norm(&x, &g, &b, cols as usize, eps);
            write_values(m, args, output, &y)?;
            let lanes = lanes(m, &[input.buffer, output.buffer])?;
            Ok(counted(Work::LayerNorm {
                rows: x.chunks((cols as usize).max(1)).count() as u64,
                columns: u64::from(cols),
                lanes,
            }))
        }
        Codelet::Activation {
            input,
            output,
            elements,
            function,
        } => {
            check_values(m, args, output, u64::from(elements))?;
            let x = read_values(m, args, input, u64::from(elements))?;
            let y: Vec<f32> = x.into_iter().map(|v| activation(function, v)).collect();
            write_values(m, args, output, &y)?;
            let lanes = lanes(m, &[input.buffer, output.buffer])?;
            Ok(counted(Work::Activation {
                function,
                elements: y.len() as u64,
                lanes,
            }))
        }
        Codelet::Convert {
            input,
            output,
            elements,
        } => {
            check_values(m, args, output, u64::from(elements))?;
            let (from, to) = (
                m.precision(tile, input.buffer)?,
                m.precision(tile, output.buffer)?,
            );
            if from == Precision::F16
                && let Some(table) = m.f16_to_fp8(to).filter(|t| t.len() == 1 << 16)
            {
                let bytes = m.read(
                    tile,
                    input,
                    args.mul("element count", u64::from(elements), 2)?,
                )?;
                let codes: Vec<u8> = bytes
                    .chunks_exact(2)
                    .map(|h| table[usize::from(u16::from_le_bytes([h[0], h[1]]))])
                    .collect();
                m.write(tile, output, &codes)?;
                let lanes = lanes(m, &[input.buffer, output.buffer])?;
                return Ok(counted(Work::Convert {
                    elements: codes.len() as u64,
                    lanes,
                }));
            }
            let x = read_values(m, args, input, u64::from(elements))?;
            write_values(m, args, output, &x)?;
            let lanes = lanes(m, &[input.buffer, output.buffer])?;
            Ok(counted(Work::Convert {
                elements: x.len() as u64,
                lanes,
            }))
        }
        Codelet::ReduceSum {
            input,
            output,
            count,
            elements,
        } => {
            // The sums are allocated before anything is read, so their
            // extent is checked first.
            check_values(m, args, output, u64::from(elements))?;
            let n = args.mul("element count", u64::from(count), u64::from(elements))?;
            let x = read_values(m, args, input, n)?;
            let n = elements as usize;
            let mut sum = vec![0.0f32; n];
            let mut partials = 0u64;
            for part in x.chunks(n.max(1)) {
                partials += 1;
                for (s, v) in sum.iter_mut().zip(part) {
                    *s += v;
                }
            }
            write_values(m, args, output, &sum)?;
            let lanes = lanes(m, &[input.buffer, output.buffer])?;
            Ok(counted(Work::Reduce {
                partials,
                elements: sum.len() as u64,
                lanes,
            }))
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
            causal,
        } => {
            let (rq, rk, d) = (u64::from(q_rows), u64::from(kv_rows), u64::from(head_dim));
            let diagonal = causal.map(CausalRows::diagonal);
            // The scratch row must exist on the tile, as on the device, and
            // every result must fit before it is computed.
            m.extent(tile, workspace, args.mul("workspace bytes", rk, 4)?)?;
            check_rows(m, args, out, rq, d, u64::from(out_stride))?;
            check_values(m, args, max, rq)?;
            check_values(m, args, sum, rq)?;
            let qv = read_rows(m, args, q, rq, d, u64::from(q_stride))?;
            let kv_ = read_rows(m, args, k, rk, d, u64::from(kv_stride))?;
            let vv = read_rows(m, args, v, rk, d, u64::from(kv_stride))?;
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
                // A causal row computes its visible keys only; one that
                // sees none keeps maximum −∞, sum 0 and a zero output.
                let visible = AttentionMask::visible_keys(diagonal, r as u64, rk as u64) as usize;
                let s = s.get_mut(..visible).unwrap_or(&mut []);
                dot_rows(row_of(&qv, r, d), &kv_, d, s);
                for sj in s.iter_mut() {
                    *sj = round(*sj * scale);
                }
                let mx = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut l = 0.0f32;
                let orow = o.get_mut(r * d..(r + 1) * d).unwrap_or(&mut []);
                for (j, &sj) in s.iter().enumerate() {
                    let e = round((sj - mx).exp());
                    l += e;
                    for (x, &vj) in orow.iter_mut().zip(row_of(&vv, j, d)) {
                        *x += e * vj;
                    }
                }
                maxima.push(mx);
                sums.push(l);
            }
            write_rows(m, args, out, &o, d as u64, u64::from(out_stride))?;
            write_values(m, args, max, &maxima)?;
            write_values(m, args, sum, &sums)?;
            let score_lanes = model.map_or(1, |model| {
                model.lanes(if softmax_f16 {
                    Precision::F16
                } else {
                    Precision::F32
                })
            });
            Ok(counted(Work::AttentionBlock {
                q_rows: maxima.len() as u64,
                kv_rows: s.len() as u64,
                head_dim: d as u64,
                score_lanes,
                diagonal,
            }))
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
            check_rows(m, args, output, rq, d, u64::from(output_row_stride))?;
            let block_precision = m.precision(tile, out.buffer)?;
            if rq == 0 {
                return Ok(counted(Work::AttentionCombine {
                    blocks: nb,
                    q_rows: 0,
                    head_dim: d,
                    block_precision,
                }));
            }
            // Blocks must not overlap either, so that the block count cannot
            // multiply one small read into a large allocation.
            let block_span = args.span(rq, d, u64::from(out_row_stride))?;
            if nb > 1
                && (u64::from(out_block_stride) < block_span || u64::from(stat_block_stride) < rq)
            {
                return Err(args.fail("block stride (blocks overlap)"));
            }
            let eb = |o: Operand| -> Result<u64, SimError> {
                Ok(m.precision(tile, o.buffer)?.element_bytes())
            };
            let (out_eb, max_eb, sum_eb) = (eb(out)?, eb(max)?, eb(sum)?);
            let mut os = Vec::new();
            let mut ms = Vec::new();
            let mut ls = Vec::new();
            for b in 0..nb {
                let out_at = args.shift(
                    out,
                    args.mul("block offset", b, u64::from(out_block_stride))?,
                    out_eb,
                )?;
                let stat = args.mul("block offset", b, u64::from(stat_block_stride))?;
                os.push(read_rows(
                    m,
                    args,
                    out_at,
                    rq,
                    d,
                    u64::from(out_row_stride),
                )?);
                ms.push(read_values(m, args, args.shift(max, stat, max_eb)?, rq)?);
                ls.push(read_values(m, args, args.shift(sum, stat, sum_eb)?, rq)?);
            }
            let d = d as usize;
            let in_f16 = combines_in_f16(block_precision);
            let mut y = vec![0.0f32; rq as usize * d];
            for r in 0..rq as usize {
                let at = |x: &[f32]| x.get(r).copied().unwrap_or(f32::NAN);
                let mx = ms.iter().map(|m| at(m)).fold(f32::NEG_INFINITY, f32::max);
                let yr = y.get_mut(r * d..(r + 1) * d).unwrap_or(&mut []);
                let blocks = os.iter().zip(&ms).zip(&ls).map(|((o, m), l)| {
                    let weight = (at(m) - mx).exp();
                    (weight, at(l), o.get(r * d..(r + 1) * d).unwrap_or(&[]))
                });
                if in_f16 {
                    combine_row_f16(yr, blocks);
                } else {
                    combine_row_f32(yr, blocks);
                }
            }
            write_rows(m, args, output, &y, d as u64, u64::from(output_row_stride))?;
            Ok(counted(Work::AttentionCombine {
                blocks: os.len() as u64,
                q_rows: (y.len() / d.max(1)) as u64,
                head_dim: d as u64,
                block_precision,
            }))
        }
        Codelet::AttentionSoftmax {
            scores,
            probs,
            max,
            sum,
            rows,
            columns,
            stride,
            scale,
            softmax_f16,
            exponent,
        } => {
            let (rq, cols, stride) = (u64::from(rows), u64::from(columns), u64::from(stride));
            if cols > stride {
                return Err(args.fail("stride (smaller than the columns)"));
            }
            if exponent > MAX_PROB_EXPONENT {
                return Err(args.fail("probabilities' scale exponent (above 14)"));
            }
            let weight = 2f32.powi(-(exponent as i32));
            // Whole rows of probabilities are written; every result must
            // fit before anything is computed.
            check_rows(m, args, probs, rq, stride, stride)?;
            check_values(m, args, max, rq)?;
            check_values(m, args, sum, rq)?;
            let s = read_rows(m, args, scores, rq, cols, stride)?;
            let (cols, width) = (args.usize("columns", cols)?, args.usize("stride", stride)?);
            let mut p = vec![0.0f32; args.usize("rows", rq)?.saturating_mul(width)];
            let mut maxima = Vec::with_capacity(rq as usize);
            let mut sums = Vec::with_capacity(rq as usize);
            for (row, out) in s.chunks(cols.max(1)).zip(p.chunks_mut(width.max(1))) {
                let (mx, l) = softmax_row(row, scale, softmax_f16, weight, out);
                maxima.push(mx);
                sums.push(l);
            }
            write_values(m, args, probs, &p)?;
            write_values(m, args, max, &maxima)?;
            write_values(m, args, sum, &sums)?;
            let lanes = |m: &mut _, b| lanes(m, &[b]);
            let score_lanes = lanes(m, scores.buffer)?;
            let prob_lanes = lanes(m, probs.buffer)?;
            Ok(counted(Work::AttentionSoftmax {
                rows: maxima.len() as u64,
                columns: width as u64,
                score_lanes,
                prob_lanes,
            }))
        }
        Codelet::Panels {
            input,
            output,
            rows,
            cols,
            stride,
            out_rows,
            out_cols,
            transpose,
        } => {
            let (data_rows, data_cols) = if transpose {
                (cols, rows)
            } else {
                (rows, cols)
            };
            if out_rows < data_rows || out_cols < data_cols {
                return Err(args.fail("output extent (smaller than the block)"));
            }
            let (r, c) = (u64::from(rows), u64::from(cols));
            let (or, oc) = (u64::from(out_rows), u64::from(out_cols));
            let written = args.mul("element count", or, oc)?;
            check_values(m, args, output, written)?;
            let x = read_rows(m, args, input, r, c, u64::from(stride))?;
            let precision = m.precision(tile, output.buffer)?;
            let order = ElementOrder::Amp(AmpOperand::Right);
            let mut t = vec![0.0f32; args.usize("element count", written)?];
            let cu = args.usize("columns", c)?;
            for (r, row) in x.chunks(cu.max(1)).enumerate() {
                for (c, &v) in row.iter().enumerate() {
                    let (i, j) = if transpose { (c, r) } else { (r, c) };
                    // Amp order in elements: the panel arithmetic of the
                    // layout crate, divided back from bytes.
                    let at = order.byte_offset(precision, &[or, oc], &[i as u64, j as u64])
                        / precision.element_bytes();
                    if let Some(slot) = t.get_mut(at as usize) {
                        *slot = v;
                    }
                }
            }
            write_values(m, args, output, &t)?;
            Ok(counted(Work::Panels {
                out_rows: or,
                out_cols: oc,
                transpose,
            }))
        }
        Codelet::Zero {
            target,
            bytes,
            runs,
            stride,
        } => {
            let (bytes, stride) = (u64::from(bytes), u64::from(stride));
            if runs > 1 && stride < bytes {
                return Err(args.fail("stride (runs overlap)"));
            }
            // The last run reaches furthest: check it before writing any.
            let last = args.mul("run offset", u64::from(runs.saturating_sub(1)), stride)?;
            if runs > 0 {
                m.extent(tile, args.shift(target, last, 1)?, bytes)?;
            }
            let zeros = vec![0u8; args.usize("bytes", bytes)?];
            for run in 0..u64::from(runs) {
                let at = args.shift(target, args.mul("run offset", run, stride)?, 1)?;
                m.write(tile, at, &zeros)?;
            }
            Ok(counted(Work::Zero {
                bytes: zeros.len() as u64,
                runs: u64::from(runs),
            }))
        }
        Codelet::Gather {
            table,
            indices,
            output,
            rows,
            table_rows,
            first_row,
            total_rows,
            cols,
        } => {
            let picked = gather(
                m,
                args,
                GatherArgs {
                    table,
                    indices,
                    output,
                    rows,
                    table_rows,
                    first_row,
                    total_rows,
                    cols,
                },
            )?;
            let lanes = lanes(m, &[table.buffer, output.buffer])?;
            Ok(counted(Work::Gather {
                rows: picked,
                columns: u64::from(cols),
                lanes,
            }))
        }
    }
}

/// The arguments of [`Codelet::Gather`].
struct GatherArgs {
    table: Operand,
    indices: Operand,
    output: Operand,
    rows: u32,
    table_rows: u32,
    first_row: u32,
    total_rows: u32,
    cols: u32,
}

/// Runs a gather (see [`Codelet::Gather`]): every index must be a whole
/// number below `total_rows` (else [`SimError::GatherIndex`]); returns the
/// output rows written.
fn gather(m: &mut impl CodeletMemory, args: &Args, g: GatherArgs) -> Result<u64, SimError> {
    let (rows, cols) = (u64::from(g.rows), u64::from(g.cols));
    if m.precision(args.tile, g.indices.buffer)? != Precision::F32 {
        return Err(args.fail("indices precision (F32 row numbers)"));
    }
    let shard_end = u64::from(g.first_row) + u64::from(g.table_rows);
    if shard_end > u64::from(g.total_rows) {
        return Err(args.fail("table rows (past the table's end)"));
    }
    let n = args.mul("element count", rows, cols)?;
    check_values(m, args, g.output, n)?;
    check_values(
        m,
        args,
        g.table,
        args.mul("table elements", u64::from(g.table_rows), cols)?,
    )?;
    let index = read_values(m, args, g.indices, rows)?;
    let table = read_values(
        m,
        args,
        g.table,
        args.mul("table elements", u64::from(g.table_rows), cols)?,
    )?;
    let c = args.usize("columns", cols)?;
    let mut out = vec![0.0f32; args.usize("element count", n)?];
    for (r, &x) in index.iter().enumerate() {
        // A row number is a whole number in range; anything else (a
        // fraction, a negative, NaN, a row past the table) faults.
        let whole = x >= 0.0 && x.fract() == 0.0 && f64::from(x) < f64::from(g.total_rows);
        if !whole {
            return Err(SimError::GatherIndex {
                tile: args.tile,
                position: r as u64,
                value: x,
                rows: g.total_rows,
            });
        }
        let row = x as u64;
        if (u64::from(g.first_row)..shard_end).contains(&row) {
            let local = (row - u64::from(g.first_row)) as usize;
            let source = table.get(local * c..(local + 1) * c).unwrap_or(&[]);
            if let Some(dest) = out.get_mut(r * c..(r + 1) * c) {
                dest.copy_from_slice(source);
            }
        }
    }
    write_values(m, args, g.output, &out)?;
    Ok(index.len() as u64)
}
