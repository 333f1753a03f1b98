//! The resampling of a square table of position embeddings to another
//! patch grid, as DINOv2 does it when its input image is not the one the
//! table was trained for (`Dinov2Embeddings.interpolate_pos_encoding`):
//! `torch.nn.functional.interpolate(..., size=(g, g), mode="bicubic",
//! align_corners=False)` in f32, without antialiasing.
//!
//! torch's CPU kernel, reproduced here in the same f32 steps: the scale is
//! `in / out`; output index `o` reads source coordinate
//! `s = scale · (o + 0.5) − 0.5`, its integer part `i = ⌊s⌋` (at most
//! `in − 1`) and fraction `t = s − i` clamped to `[0, 1]`; the four taps
//! `i − 1 … i + 2` are clamped to the edge and weighted by Keys' cubic
//! convolution with `a = −0.75`. The two axes are separable: each output
//! is the sum over the four rows of (row weight × the sum over the four
//! columns of column weight × value), accumulated in that order. torch's
//! vectorised loops sum in an order of their own, so results agree to a
//! few units in the last place (at most 6.5e-7 of the table's largest
//! magnitude on the golden cases of `interpolate.safetensors`), not bit
//! for bit; the F32 graph is held to 1e-5.

/// Keys' cubic convolution parameter torch's bicubic mode uses.
const A: f32 = -0.75;

/// The four source indices and weights of output index `o` when
/// resampling `input` samples to `output`.
fn taps(o: usize, input: usize, output: usize) -> ([usize; 4], [f32; 4]) {
    let scale = input as f32 / output as f32;
    let source = scale * (o as f32 + 0.5) - 0.5;
    let last = input.saturating_sub(1);
    // A coordinate left of the first sample floors to -1; the taps clamp.
    let floor = source.floor();
    let index = (floor as i64).min(last as i64);
    let t = (source - index as f32).clamp(0.0, 1.0);
    let near = |x: f32| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    let far = |x: f32| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    let weights = [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)];
    let mut indices = [0usize; 4];
    for (k, slot) in indices.iter_mut().enumerate() {
        let i = index - 1 + k as i64;
        *slot = i.clamp(0, last as i64) as usize;
    }
    (indices, weights)
}

/// Resamples a `from × from` grid of rows of `width` values (row
/// `y · from + x`) to a `to × to` grid, bicubically (module header).
/// `None` when `table` does not hold `from² · width` values or a size is
/// zero.
pub fn bicubic_grid(table: &[f32], from: usize, to: usize, width: usize) -> Option<Vec<f32>> {
    let cells = from.checked_mul(from)?;
    if from == 0 || to == 0 || table.len() != cells.checked_mul(width)? {
        return None;
    }
    let out_len = to.checked_mul(to)?.checked_mul(width)?;
    let taps: Vec<_> = (0..to).map(|o| taps(o, from, to)).collect();
    let mut out = Vec::with_capacity(out_len);
    let mut row_sum = vec![0.0f32; width];
    let mut acc = vec![0.0f32; width];
    for (ys, yw) in &taps {
        for (xs, xw) in &taps {
            for (k, (&y, &wy)) in ys.iter().zip(yw).enumerate() {
                for (j, (&x, &wx)) in xs.iter().zip(xw).enumerate() {
                    let start = (y * from + x) * width;
                    let cell = &table[start..start + width];
                    for (r, &v) in row_sum.iter_mut().zip(cell) {
                        *r = if j == 0 { v * wx } else { *r + v * wx };
                    }
                }
                for (a, &r) in acc.iter_mut().zip(&row_sum) {
                    *a = if k == 0 { r * wy } else { *a + r * wy };
                }
            }
            out.extend_from_slice(&acc);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_size_is_the_identity() {
        let table: Vec<f32> = (0..5 * 5 * 3).map(|v| v as f32 * 0.37 - 4.0).collect();
        assert_eq!(bicubic_grid(&table, 5, 5, 3).unwrap(), table);
    }

    #[test]
    fn weights_sum_to_one_so_a_constant_stays_constant() {
        let table = vec![2.5f32; 8 * 8 * 2];
        for to in [1, 3, 4, 6, 11] {
            let out = bicubic_grid(&table, 8, to, 2).unwrap();
            assert_eq!(out.len(), to * to * 2);
            // The weights sum to one up to their f32 rounding.
            assert!(out.iter().all(|&v| (v - 2.5).abs() < 4e-6), "{to}: {out:?}");
        }
    }

    #[test]
    fn mismatched_tables_are_refused() {
        assert!(bicubic_grid(&[0.0; 7], 2, 3, 2).is_none());
        assert!(bicubic_grid(&[], 0, 3, 2).is_none());
        assert!(bicubic_grid(&[0.0; 8], 2, 0, 2).is_none());
    }
}
