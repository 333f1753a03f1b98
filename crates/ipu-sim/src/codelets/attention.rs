//! The row arithmetic of the attention codelets: the vector attention's
//! dot products, the softmax between the AMP products, and the combine of
//! blocks in F32 or in F16, each as the codelet computes it.

use ipu_kernels::round_f16;
use ipu_layout::Precision;

/// One row of an attention combine of F32 blocks, in F32: each block's
/// row `o` weighed by `weight` and added, then divided by the sum of the
/// weighed row sums `l`.
pub(super) fn combine_row_f32<'a>(
    y: &mut [f32],
    blocks: impl Iterator<Item = (f32, f32, &'a [f32])>,
) {
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
pub(super) fn combine_row_f16<'a>(
    y: &mut [f32],
    blocks: impl Iterator<Item = (f32, f32, &'a [f32])>,
) {
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
pub(super) fn row_of(x: &[f32], j: usize, d: usize) -> &[f32] {
    x.get(j * d..(j + 1) * d).unwrap_or(&[])
}

/// The dot products of `q` with the rows of `keys` (`d` values each) into
/// `out`, each summed from 0 left to right in f32, as a fold over the
/// pairs gives. Eight sums run side by side, so that each waits only on its
/// own previous addition: the same operations in the same order per sum.
pub(super) fn dot_rows(q: &[f32], keys: &[f32], d: usize, out: &mut [f32]) {
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
/// scores `row`, scaled by `weight` (a power of two), into `out` (zeros
/// after them) and the row's `(max, sum)`.
pub(super) fn softmax_row(
    row: &[f32],
    scale: f32,
    softmax_f16: bool,
    weight: f32,
    out: &mut [f32],
) -> (f32, f32) {
    let f16 = Precision::F16;
    let round = |x: f32| if softmax_f16 { f16.quantize(x) } else { x };
    let mut mx = f32::NEG_INFINITY;
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
        l += *o;
    }
    for o in out.iter_mut().skip(row.len()) {
        *o = 0.0;
    }
    (mx, l)
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
