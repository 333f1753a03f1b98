//! The resampling of a square table of position embeddings to another
//! patch grid, as DINOv2 does it when its input image is not the one the
//! table was trained for (`Dinov2Embeddings.interpolate_pos_encoding`):
//! `torch.nn.functional.interpolate(..., size=(g, g), mode="bicubic",
//! align_corners=False)` in f32, without antialiasing ([`bicubic_grid`]),
//! and with it as DINOv2 with registers asks
//! ([`bicubic_grid_antialiased`], described there).
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

/// Keys' cubic convolution parameter torch's antialiased bicubic mode
/// uses (Pillow's).
const A_ANTIALIAS: f32 = -0.5;

/// Keys' cubic kernel with parameter `a` at distance `x`.
fn keys(x: f32, a: f32) -> f32 {
    let x = x.abs();
    if x < 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// The first source index and the normalised weights of output index
/// `o` of an antialiased resampling of `input` samples to `output`:
/// torch's `_compute_indices_min_size_weights_aa` in f32. The kernel
/// widens by the scale when downsampling, taps outside the input are
/// left out, and the weights are divided by their sum.
fn antialiased_taps(o: usize, input: usize, output: usize) -> (usize, Vec<f32>) {
    let scale = input as f32 / output as f32;
    let support = if scale >= 1.0 { 2.0 * scale } else { 2.0 };
    let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    let center = scale * (o as f32 + 0.5);
    // Truncation toward zero, then the first sample: torch's casts.
    let first = ((center - support + 0.5) as i64).max(0) as usize;
    let end = ((center + support + 0.5) as i64).clamp(0, input as i64) as usize;
    let mut weights: Vec<f32> = (first..end.max(first))
        .map(|j| keys((j as f32 - center + 0.5) * invscale, A_ANTIALIAS))
        .collect();
    let total: f32 = weights.iter().fold(0.0, |t, &w| t + w);
    if total != 0.0 {
        for w in &mut weights {
            *w /= total;
        }
    }
    (first, weights)
}

/// One antialiased pass along an axis: `lines` lines of `input` samples
/// (`stride` apart, each `width` values) to `output` samples, the sum of
/// each output's taps accumulated from the first.
fn antialiased_pass(
    src: &[f32],
    (lines, input, output): (usize, usize, usize),
    line_of: impl Fn(usize, usize) -> usize,
    width: usize,
) -> Vec<f32> {
    let taps: Vec<_> = (0..output)
        .map(|o| antialiased_taps(o, input, output))
        .collect();
    let mut out = vec![0.0f32; lines * output * width];
    for line in 0..lines {
        for (o, (first, weights)) in taps.iter().enumerate() {
            let dst = line_of(line, o) * width;
            for (j, &w) in weights.iter().enumerate() {
                let at = (line * input + first + j) * width;
                for (d, &v) in out[dst..dst + width].iter_mut().zip(&src[at..at + width]) {
                    *d = if j == 0 { v * w } else { *d + v * w };
                }
            }
        }
    }
    out
}

/// [`bicubic_grid`] with torch's `antialias=True` (what
/// `Dinov2WithRegistersEmbeddings` asks for): Keys' cubic with `a = −0.5`,
/// widened by the scale when downsampling, normalised weights, taps
/// outside the grid left out; the columns are resampled first, then the
/// rows, as torch's separable kernel does. `None` as for [`bicubic_grid`].
pub fn bicubic_grid_antialiased(
    table: &[f32],
    from: usize,
    to: usize,
    width: usize,
) -> Option<Vec<f32>> {
    let cells = from.checked_mul(from)?;
    if from == 0 || to == 0 || table.len() != cells.checked_mul(width)? {
        return None;
    }
    to.checked_mul(to)?.checked_mul(width)?;
    // Columns: each of the `from` rows to `to` columns, as [from, to].
    let columns = antialiased_pass(table, (from, from, to), |y, x| y * to + x, width);
    // Rows: transpose the view so that each column is a line of `from`.
    let mut by_column = vec![0.0f32; columns.len()];
    for y in 0..from {
        for x in 0..to {
            let (s, d) = ((y * to + x) * width, (x * from + y) * width);
            by_column[d..d + width].copy_from_slice(&columns[s..s + width]);
        }
    }
    Some(antialiased_pass(
        &by_column,
        (to, from, to),
        |x, y| y * to + x,
        width,
    ))
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
    fn antialiased_weights_keep_a_constant_and_the_same_size_is_the_identity() {
        let table = vec![-1.5f32; 9 * 9 * 2];
        for to in [1, 4, 7, 16] {
            let out = bicubic_grid_antialiased(&table, 9, to, 2).unwrap();
            assert!(out.iter().all(|&v| (v + 1.5).abs() < 4e-6), "{to}: {out:?}");
        }
        let table: Vec<f32> = (0..4 * 4).map(|v| v as f32 - 3.0).collect();
        assert_eq!(bicubic_grid_antialiased(&table, 4, 4, 1).unwrap(), table);
    }

    #[test]
    fn mismatched_tables_are_refused() {
        assert!(bicubic_grid(&[0.0; 7], 2, 3, 2).is_none());
        assert!(bicubic_grid(&[], 0, 3, 2).is_none());
        assert!(bicubic_grid(&[0.0; 8], 2, 0, 2).is_none());
    }
}
