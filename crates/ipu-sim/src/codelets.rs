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
use ipu_package::graph::Activation;
use ipu_package::profile::{VectorModel, Work};
use ipu_package::program::{BufferId, Codelet, GemmEntry, GemmKernel, KernelId, Operand};

use crate::SimError;

mod attention;
mod gather;
mod io;

use gather::{GatherArgs, gather};
use io::{Args, check_values, read_rows, read_values, write_values};

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
        } => {
            let mut accesses = vec![(scores, Read), (probs, Write), (max, Write)];
            accesses.extend(sum.map(|sum| (sum, Write)));
            accesses
        }
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

/// What a codelet run counts in: the device's vector model, when the run
/// counts its work.
#[derive(Clone, Copy)]
struct Counter<'a> {
    tile: TileId,
    model: Option<&'a VectorModel>,
}

impl Counter<'_> {
    /// Lanes per vector for the precisions of `buffers` (1 when not
    /// counting).
    fn lanes(&self, m: &impl CodeletMemory, buffers: &[BufferId]) -> Result<u32, SimError> {
        let Some(model) = self.model else {
            return Ok(1);
        };
        let mut precisions = Vec::with_capacity(buffers.len());
        for &b in buffers {
            precisions.push(m.precision(self.tile, b)?);
        }
        Ok(model.lanes_of(&precisions))
    }

    /// `work`, when counting.
    fn counted(&self, work: Work) -> Option<Work> {
        self.model.map(|_| work)
    }
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
    let counter = Counter { tile, model };
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
            let lanes = counter.lanes(m, &[a.buffer, b.buffer, out.buffer])?;
            Ok(counter.counted(Work::Add {
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
            let lanes = counter.lanes(m, &[input.buffer, output.buffer])?;
            Ok(counter.counted(Work::LayerNorm {
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
            let lanes = counter.lanes(m, &[input.buffer, output.buffer])?;
            Ok(counter.counted(Work::Activation {
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
                let lanes = counter.lanes(m, &[input.buffer, output.buffer])?;
                return Ok(counter.counted(Work::Convert {
                    elements: codes.len() as u64,
                    lanes,
                }));
            }
            let x = read_values(m, args, input, u64::from(elements))?;
            write_values(m, args, output, &x)?;
            let lanes = counter.lanes(m, &[input.buffer, output.buffer])?;
            Ok(counter.counted(Work::Convert {
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
            let lanes = counter.lanes(m, &[input.buffer, output.buffer])?;
            Ok(counter.counted(Work::Reduce {
                partials,
                elements: sum.len() as u64,
                lanes,
            }))
        }
        Codelet::AttentionBlock { .. } => attention::block(m, args, counter, codelet),
        Codelet::AttentionCombine { .. } => attention::combine(m, args, counter, codelet),
        Codelet::AttentionSoftmax { .. } => attention::softmax(m, args, counter, codelet),
        Codelet::Panels {
            input,
            output,
            rows,
            cols,
            stride,
            out_rows,
            out_cols,
            transpose,
            ones,
        } => {
            let (data_rows, data_cols) = if transpose {
                (cols, rows)
            } else {
                (rows, cols)
            };
            if out_rows < data_rows || out_cols < data_cols {
                return Err(args.fail("output extent (smaller than the block)"));
            }
            if ones && (transpose || out_cols <= cols) {
                return Err(args.fail("output columns (no column for the ones)"));
            }
            let (r, c) = (u64::from(rows), u64::from(cols));
            let (or, oc) = (u64::from(out_rows), u64::from(out_cols));
            let precision = m.precision(tile, output.buffer)?;
            // The panels copy elements: no conversion, and the transpose
            // turns 16-bit elements only.
            if m.precision(tile, input.buffer)? != precision {
                return Err(args.fail("output precision (not the input's)"));
            }
            if transpose && precision.element_bytes() != 2 {
                return Err(args.fail("transposed elements (16-bit only)"));
            }
            if ones && precision.quantize(1.0) != 1.0 {
                return Err(args.fail("output precision (1 is not exact for the ones)"));
            }
            let written = args.mul("element count", or, oc)?;
            check_values(m, args, output, written)?;
            let x = read_rows(m, args, input, r, c, u64::from(stride))?;
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
            if ones {
                // Column `cols` of every source row: the values' product
                // then sums its left operand's rows there.
                for i in 0..r {
                    let at = order.byte_offset(precision, &[or, oc], &[i, c])
                        / precision.element_bytes();
                    if let Some(slot) = t.get_mut(at as usize) {
                        *slot = 1.0;
                    }
                }
            }
            write_values(m, args, output, &t)?;
            Ok(counter.counted(Work::Panels {
                out_rows: or,
                out_cols: oc,
                transpose,
                fp8: precision.is_fp8(),
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
            Ok(counter.counted(Work::Zero {
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
            let lanes = counter.lanes(m, &[table.buffer, output.buffer])?;
            Ok(counter.counted(Work::Gather {
                rows: picked,
                columns: u64::from(cols),
                lanes,
            }))
        }
    }
}
