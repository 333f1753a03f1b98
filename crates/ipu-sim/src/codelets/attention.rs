//! The attention codelets: the vector attention's blocks, the softmax
//! between the AMP products and the combine of key blocks in F32 or in
//! F16, and the row arithmetic each computes as the device does.

use ipu_kernels::round_f16;
use ipu_layout::Precision;
use ipu_package::graph::{AttentionMask, FP8_PROBABILITIES};
use ipu_package::profile::{Work, combines_in_f16};
use ipu_package::program::{CausalRows, Codelet, MAX_PROB_EXPONENT, Operand};

use super::io::{Args, check_rows, check_values, read_rows, read_values, write_rows, write_values};
use super::{CodeletMemory, Counter};
use crate::SimError;

/// One row of an attention combine of F32 blocks, in F32: each block's
/// row `o` weighed by `weight` and added, then divided by the sum of the
/// weighed row sums `l`.
fn combine_row_f32<'a>(y: &mut [f32], blocks: impl Iterator<Item = (f32, f32, &'a [f32])>) {
    let mut total = 0.0f32;
    for (weight, l, o) in blocks {
        total += weight * l;
        for (x, &o) in y.iter_mut().zip(o) {
            *x += weight * o;
        }
    }
    for x in y.iter_mut() {
        *x /= total;
    }
}

/// One row of an attention combine of F16 blocks, in F16 as the codelet
/// computes it: each block's weight is rounded to F16, every product and
/// every sum of the row is rounded to F16 (`f16v4mul`, `f16v4add`), and
/// the row is multiplied by the reciprocal of its total, rounded to F16.
/// The total of the weighed row sums stays F32 (one scalar a row). The
/// products and sums of F16 values are exact in f64, so each is rounded
/// once.
fn combine_row_f16<'a>(y: &mut [f32], blocks: impl Iterator<Item = (f32, f32, &'a [f32])>) {
    let mut total = 0.0f32;
    let mut sums = vec![0.0f64; y.len()];
    for (weight, l, o) in blocks {
        total += weight * l;
        let weight = round_f16(f64::from(weight));
        for (x, &o) in sums.iter_mut().zip(o) {
            *x = round_f16(*x + round_f16(weight * f64::from(o)));
        }
    }
    let reciprocal = round_f16(f64::from(1.0 / total));
    for (x, &sum) in y.iter_mut().zip(&sums) {
        // An F16 value, exact in f32.
        *x = round_f16(sum * reciprocal) as f32;
    }
}

/// Row `j` of `d` elements of a row-major block (empty past its end).
fn row_of(x: &[f32], j: usize, d: usize) -> &[f32] {
    x.get(j * d..(j + 1) * d).unwrap_or(&[])
}

/// The dot products of `q` with the rows of `keys` (`d` values each) into
/// `out`, each summed from 0 left to right in f32, as a fold over the
/// pairs gives. Eight sums run side by side, so that each waits only on its
/// own previous addition: the same operations in the same order per sum.
fn dot_rows(q: &[f32], keys: &[f32], d: usize, out: &mut [f32]) {
    let dot = |j: usize| {
        q.iter()
            .zip(row_of(keys, j, d))
            .fold(0.0f32, |acc, (&a, &b)| acc + a * b)
    };
    let mut done = 0;
    for (block, chunk) in out.chunks_exact_mut(8).enumerate() {
        let rows: [&[f32]; 8] = std::array::from_fn(|i| row_of(keys, block * 8 + i, d));
        if q.len() != d || rows.iter().any(|r| r.len() != d) {
            break;
        }
        let mut acc = [0.0f32; 8];
        for (l, &a) in q.iter().enumerate() {
            for (s, row) in acc.iter_mut().zip(&rows) {
                *s += a * row[l];
            }
        }
        chunk.copy_from_slice(&acc);
        done += 8;
    }
    for (j, o) in out.iter_mut().enumerate().skip(done) {
        *o = dot(j);
    }
}

/// One row of [`ipu_package::program::Codelet::AttentionSoftmax`]: the probabilities of the
/// scores `row`, scaled by `weight` (a power of two) and rounded to F16,
/// then to `probs` where it is FP8, into `out` (zeros after them) and the
/// row's `(max, sum)`, the sum of the rounded probabilities.
fn softmax_row(
    row: &[f32],
    scale: f32,
    softmax_f16: bool,
    (weight, probs): (f32, Precision),
    out: &mut [f32],
) -> (f32, f32) {
    let f16 = Precision::F16;
    let round = |x: f32| if softmax_f16 { f16.quantize(x) } else { x };
    let mut mx = f32::NEG_INFINITY;
    // A scale of exactly 1 (queries that carry `1/√d`) is the device's
    // loop without the multiply; `x · 1` is `x`, so one loop models both.
    for (o, &x) in out.iter_mut().zip(row) {
        *o = round(x * scale);
        mx = mx.max(*o);
    }
    let mut l = 0.0f32;
    for o in out.iter_mut().take(row.len()) {
        // The device lowers the exponential's argument by `e · ln 2`; the
        // model applies the power of two exactly, once, before the F16
        // rounding.
        *o = f16.quantize((*o - mx).exp() * weight);
        if probs.is_fp8() {
            *o = probs.quantize(*o);
        }
        l += *o;
    }
    for o in out.iter_mut().skip(row.len()) {
        *o = 0.0;
    }
    (mx, l)
}

/// Runs [`Codelet::AttentionBlock`]: one vector attention block.
pub(super) fn block(
    m: &mut impl CodeletMemory,
    args: &Args,
    counter: Counter<'_>,
    codelet: &Codelet,
) -> Result<Option<Work>, SimError> {
    let Codelet::AttentionBlock {
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
        probs_fp8,
    } = *codelet
    else {
        return Err(args.fail("codelet kind"));
    };
    let tile = args.tile;
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
            let mut e = round((sj - mx).exp());
            if probs_fp8 {
                e = FP8_PROBABILITIES.quantize(e);
            }
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
    let score_lanes = counter.model.map_or(1, |model| {
        model.lanes(if softmax_f16 {
            Precision::F16
        } else {
            Precision::F32
        })
    });
    Ok(counter.counted(Work::AttentionBlock {
        q_rows: maxima.len() as u64,
        kv_rows: s.len() as u64,
        head_dim: d as u64,
        score_lanes,
        diagonal,
        probs_fp8,
    }))
}

/// Runs [`Codelet::AttentionCombine`]: the flash-style combine of key blocks.
pub(super) fn combine(
    m: &mut impl CodeletMemory,
    args: &Args,
    counter: Counter<'_>,
    codelet: &Codelet,
) -> Result<Option<Work>, SimError> {
    let Codelet::AttentionCombine {
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
        sums_in_blocks,
    } = *codelet
    else {
        return Err(args.fail("codelet kind"));
    };
    let tile = args.tile;
    let (nb, rq, d) = (u64::from(blocks), u64::from(q_rows), u64::from(head_dim));
    check_rows(m, args, output, rq, d, u64::from(output_row_stride))?;
    let block_precision = m.precision(tile, out.buffer)?;
    if rq == 0 {
        return Ok(counter.counted(Work::AttentionCombine {
            blocks: nb,
            q_rows: 0,
            head_dim: d,
            block_precision,
        }));
    }
    // Blocks must not overlap either, so that the block count cannot
    // multiply one small read into a large allocation.
    let block_span = args.span(rq, d, u64::from(out_row_stride))?;
    if nb > 1 && (u64::from(out_block_stride) < block_span || u64::from(stat_block_stride) < rq) {
        return Err(args.fail("block stride (blocks overlap)"));
    }
    let eb =
        |o: Operand| -> Result<u64, SimError> { Ok(m.precision(tile, o.buffer)?.element_bytes()) };
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
        ls.push(if sums_in_blocks {
            // One element of each block row, where the AMP summed them.
            let at = args.mul("block offset", b, u64::from(out_block_stride))?;
            read_rows(
                m,
                args,
                args.shift(sum, at, sum_eb)?,
                rq,
                1,
                u64::from(out_row_stride),
            )?
        } else {
            read_values(m, args, args.shift(sum, stat, sum_eb)?, rq)?
        });
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
    Ok(counter.counted(Work::AttentionCombine {
        blocks: os.len() as u64,
        q_rows: (y.len() / d.max(1)) as u64,
        head_dim: d as u64,
        block_precision,
    }))
}

/// Runs [`Codelet::AttentionSoftmax`]: the softmax between the AMP products.
pub(super) fn softmax(
    m: &mut impl CodeletMemory,
    args: &Args,
    counter: Counter<'_>,
    codelet: &Codelet,
) -> Result<Option<Work>, SimError> {
    let Codelet::AttentionSoftmax {
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
    } = *codelet
    else {
        return Err(args.fail("codelet kind"));
    };
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
    if let Some(sum) = sum {
        check_values(m, args, sum, rq)?;
    }
    let s = read_rows(m, args, scores, rq, cols, stride)?;
    let probs_precision = m.precision(args.tile, probs.buffer)?;
    let (cols, width) = (args.usize("columns", cols)?, args.usize("stride", stride)?);
    let mut p = vec![0.0f32; args.usize("rows", rq)?.saturating_mul(width)];
    let mut maxima = Vec::with_capacity(rq as usize);
    let mut sums = Vec::with_capacity(rq as usize);
    for (row, out) in s.chunks(cols.max(1)).zip(p.chunks_mut(width.max(1))) {
        let (mx, l) = softmax_row(row, scale, softmax_f16, (weight, probs_precision), out);
        maxima.push(mx);
        sums.push(l);
    }
    write_values(m, args, probs, &p)?;
    write_values(m, args, max, &maxima)?;
    // Without a sum operand the values' product sums the probabilities.
    if let Some(sum) = sum {
        write_values(m, args, sum, &sums)?;
    }
    let score_lanes = counter.lanes(m, &[scores.buffer])?;
    let prob_lanes = counter.lanes(m, &[probs.buffer])?;
    Ok(counter.counted(Work::AttentionSoftmax {
        rows: maxima.len() as u64,
        columns: width as u64,
        keys: cols as u64,
        score_lanes,
        prob_lanes,
        unscaled: scale == 1.0,
        sums_on_amp: sum.is_none(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks `(weight, row sum, row)` for the combine helpers.
    fn blocks(b: &[(f32, f32, Vec<f32>)]) -> impl Iterator<Item = (f32, f32, &[f32])> {
        b.iter().map(|(w, l, o)| (*w, *l, o.as_slice()))
    }

    /// With weights of 1 the F16 combine is the F16 sum of the rows times
    /// the F16 reciprocal of the total, each step rounded once.
    #[test]
    fn the_f16_combine_rounds_every_step_to_f16() {
        let b = vec![
            (1.0, 3.0, vec![1.0, 2048.0, -0.25]),
            (1.0, 5.0, vec![2.0, 3.0, 0.5]),
        ];
        let mut y = vec![0.0f32; 3];
        combine_row_f16(&mut y, blocks(&b));
        // 1/8 is exact; 2048 + 3 = 2051, a tie between F16's 2050 and 2052,
        // rounds to the even 2052.
        assert_eq!(y, vec![3.0 / 8.0, 2052.0 / 8.0, 0.25 / 8.0]);
        let mut exact = vec![0.0f32; 3];
        combine_row_f32(&mut exact, blocks(&b));
        assert_eq!(exact, vec![3.0 / 8.0, 2051.0 / 8.0, 0.25 / 8.0]);
    }

    /// On random blocks the F16 combine stays within a few F16 steps of
    /// the F32 one, relative to the largest weighed term, and every value
    /// it gives is an F16.
    #[test]
    fn the_f16_combine_stays_near_the_f32_one() {
        let mut rng = ipu_layout::rng::SplitMix64::new(0x00c0_ffee);
        let mut unit = move || (rng.next_u64() >> 11) as f32 / (1u64 << 53) as f32;
        for _ in 0..200 {
            let n = 1 + (unit() * 6.0) as usize;
            let b: Vec<(f32, f32, Vec<f32>)> = (0..n)
                .map(|_| {
                    let o = (0..8)
                        .map(|_| Precision::F16.quantize(unit() * 8.0 - 4.0))
                        .collect();
                    ((-unit() * 4.0).exp(), 1.0 + unit() * 100.0, o)
                })
                .collect();
            let (mut half, mut single) = (vec![0.0f32; 8], vec![0.0f32; 8]);
            combine_row_f16(&mut half, blocks(&b));
            combine_row_f32(&mut single, blocks(&b));
            let total: f32 = b.iter().map(|(w, l, _)| w * l).sum();
            for (j, (h, s)) in half.iter().zip(&single).enumerate() {
                assert_eq!(Precision::F16.quantize(*h), *h);
                let scale: f32 = b.iter().map(|(w, _, o)| (w * o[j]).abs()).sum::<f32>() / total;
                let bound = (n as f32 + 3.0) * 2f32.powi(-11) * (scale + h.abs());
                assert!((h - s).abs() <= bound, "{h} vs {s} (bound {bound})");
            }
        }
    }
}
