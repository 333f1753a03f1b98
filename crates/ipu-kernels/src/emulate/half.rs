//! The F16 lane kernel: F16 rows through F16 weights (or FP8 weights
//! widened to F16) into F16 partials, rounded to nearest, eight columns
//! at a time. This is the arithmetic of attention's two AMP products,
//! which the scalar loop of [`Block::run_row_values`] ran one product at a
//! time, its rounding a chain of branches.
//!
//! It performs, on every element, the operations of that loop in the same
//! order: the partial, plus each product rounded to F16 in increasing
//! inner order, one f64 addition at a time, then the step's rounding. The
//! product of two F16 values is exact in f64; [`Eight::round_f16`] rounds
//! it as `round_f16` does, bit for bit, for finite values below 65520;
//! and a partial that stays finite and below 65520 is rounded by its
//! significand as `round_f16_on_grid` rounds it. [`HalfRows::apply`]
//! checks those conditions before a stream; a stream that could overflow
//! or meets a non-finite value takes the scalar loop.

use super::kernel::Block;
use super::lanes::{F16_OVERFLOW, finite_max_abs};
use super::rounding::{round_f16, round_f16_significand};
use super::vector::{self, Eight};

/// One stream for the F16 lane kernel: its shape, decoded rows and
/// row-major weights with their largest magnitudes.
pub(super) struct HalfRows<'a> {
    pub(super) block: Block,
    /// `rows × k`, row major.
    pub(super) left: &'a [f64],
    /// `k × c`, row major.
    pub(super) weights: &'a [f64],
    /// The largest magnitude of `left` (finite).
    pub(super) left_max: f64,
    /// The largest magnitude of `weights` (finite).
    pub(super) weights_max: f64,
}

impl HalfRows<'_> {
    /// Whether [`HalfRows::run`] gives the bytes of the scalar loop on
    /// `partials`: F16 partials (exact steps), every product below the
    /// overflow threshold, and every partial, through every addition of
    /// the stream, finite and below it, so that the step's rounding is
    /// the significand's.
    ///
    /// The bound is per row: a partial starts at most at the row's
    /// largest `|p|` and each product adds at most `|a_t| · max|w|`,
    /// grown by its rounding to F16 (at most `2^-11` of itself, or `2^-25`
    /// below the normal range), and each step's rounding adds at most
    /// half of F16's largest spacing below 65536 (16). The row's sum of
    /// `|a_t|` is taken, not `k` times the largest: attention's scores
    /// would fail the coarser bound where its rows are far from it. The
    /// products' growth is allowed `2^-10`, twice their rounding's, which
    /// also covers the rounding of the bound's own f64 arithmetic (below
    /// `k · 2^-53` of it).
    pub(super) fn apply(&self, partials: &[f64]) -> bool {
        let Block {
            rows, k, c, group, ..
        } = self.block;
        let max_product = self.left_max * self.weights_max;
        if !self.block.exact
            || group == 0
            || k == 0
            || self.left.len() < rows * k
            || self.weights.len() < k * c
            || partials.len() < rows * c
            || max_product >= F16_OVERFLOW
        {
            return false;
        }
        let steps = k.div_ceil(group) as f64;
        let rounding = k as f64 * 2f64.powi(-25) + steps * 16.0;
        let rows = self
            .left
            .chunks_exact(k)
            .zip(partials.chunks_exact(c.max(1)));
        rows.take(self.block.rows).all(|(a, p)| {
            let Some(start) = finite_max_abs(p) else {
                return false;
            };
            let growth: f64 = a.iter().map(|v| v.abs()).sum::<f64>() * self.weights_max;
            start + growth * (1.0 + 2f64.powi(-10)) + rounding < F16_OVERFLOW
        })
    }

    /// Runs the stream into `partials`, when [`HalfRows::apply`] holds.
    pub(super) fn run(&self, partials: &mut [f64]) {
        vector::dispatch(HalfRun {
            rows: self,
            partials,
        });
    }
}

/// One call of the kernel, bundled for [`vector::dispatch`].
struct HalfRun<'s, 'a> {
    rows: &'s HalfRows<'a>,
    partials: &'s mut [f64],
}

impl vector::WithEight for HalfRun<'_, '_> {
    #[inline(always)]
    fn run<E: Eight>(self, e: E) {
        let HalfRun { rows, partials } = self;
        let Block {
            rows: n,
            k,
            c,
            group,
            ..
        } = rows.block;
        if n == 0 || k == 0 || c == 0 || group == 0 {
            return;
        }
        let weights = &rows.weights[..k * c];
        let whole = c / 8 * 8;
        let row_pairs = rows.left.chunks_exact(k).zip(partials.chunks_exact_mut(c));
        for (lrow, prow) in row_pairs.take(n) {
            // Eight columns at a time, each chunk's partials in registers
            // through the whole inner dimension.
            for j0 in (0..whole).step_by(8) {
                let Some(p) = prow[j0..].first_chunk_mut::<8>() else {
                    continue;
                };
                let mut sums = e.load(p);
                for (g, a) in lrow.chunks(group).enumerate() {
                    for (t, &at) in a.iter().enumerate() {
                        let row = (g * group + t) * c + j0;
                        let Some(w) = weights[row..].first_chunk::<8>() else {
                            continue;
                        };
                        let product = e.mul(e.splat(at), e.load(w));
                        sums = e.add(sums, e.round_f16(product));
                    }
                    sums = e.round_f16_significand(sums);
                }
                *p = e.store(sums);
            }
            // The columns past the last whole chunk, one at a time.
            for (j, p) in prow.iter_mut().enumerate().skip(whole) {
                for (g, a) in lrow.chunks(group).enumerate() {
                    for (t, &at) in a.iter().enumerate() {
                        *p += round_f16(at * weights[(g * group + t) * c + j]);
                    }
                    *p = round_f16_significand(*p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ipu_layout::rng::SplitMix64;

    use super::*;
    use crate::emulate::rounding::round_f16_on_grid;

    /// A random F16 value: sign, an exponent from `low` to `high` (the
    /// subnormal exponent 0 included if `low` is 0) and any fraction.
    fn f16(rng: &mut SplitMix64, low: u64, high: u64) -> f64 {
        let r = rng.next_u64();
        let exponent = low + r % (high - low + 1);
        let bits = ((r >> 20) & 0x8000) as u16 | (exponent << 10) as u16 | (r >> 40) as u16 & 0x3ff;
        half::f16::from_bits(bits).to_f64()
    }

    /// The scalar loop of `run_row_values` for F16 partials.
    fn scalar(block: Block, left: &[f64], weights: &[f64], partials: &mut [f64]) {
        block.run_row_values(partials, left, weights, round_f16, round_f16_on_grid);
    }

    /// Each lane set rounds products as `round_f16` does: ties, carries,
    /// subnormals and signed zeros.
    #[test]
    fn lane_rounding_is_round_f16() {
        struct Check(Vec<[f64; 8]>);
        impl vector::WithEight for &Check {
            fn run<E: Eight>(self, e: E) {
                for x in &self.0 {
                    let got = e.store(e.round_f16(e.load(x)));
                    let expected = x.map(round_f16);
                    assert_eq!(got.map(f64::to_bits), expected.map(f64::to_bits), "{x:?}");
                }
            }
        }
        let mut rng = SplitMix64::new(0x05ee_df16);
        let mut values = Vec::new();
        for _ in 0..4000 {
            // Exact products of two F16 values, across the whole range.
            values.push(std::array::from_fn(|_| {
                let p = f16(&mut rng, 0, 30) * f16(&mut rng, 0, 30);
                if p.abs() < F16_OVERFLOW {
                    p
                } else {
                    p / 65536.0
                }
            }));
        }
        let tie = 2f64.powi(-25);
        values.push([tie, -tie, 3.0 * tie, 0.0, -0.0, 65504.0, 65519.0, -65519.9]);
        values.push([
            2047.5,
            2048.0 + 1.0,
            -(2048.0 + 3.0),
            6.103_515_625e-5 * (1.0 - 2f64.powi(-12)),
            -1e-300,
            f64::MIN_POSITIVE / 4.0,
            1.0 + 2f64.powi(-11),
            1.0 + 3.0 * 2f64.powi(-11),
        ]);
        vector::on_every_lane_set(&Check(values));
    }

    /// On random F16 streams the kernel gives the scalar loop's bits,
    /// on every lane set, with column counts that leave a tail.
    #[test]
    fn streams_match_the_scalar_loop() {
        let mut rng = SplitMix64::new(0x00f1_6a77);
        for case in 0..24 {
            let (rows, k, c) = [(3, 16, 16), (5, 20, 13), (2, 7, 8), (4, 32, 24)][case % 4];
            let group = [4, 8][case % 2];
            let block = Block {
                rows,
                k,
                c,
                group,
                exact: true,
            };
            let high = [12, 15, 17][case % 3];
            let left: Vec<f64> = (0..rows * k).map(|_| f16(&mut rng, 0, high)).collect();
            let weights: Vec<f64> = (0..k * c).map(|_| f16(&mut rng, 0, high)).collect();
            let partials: Vec<f64> = (0..rows * c).map(|_| f16(&mut rng, 1, 18)).collect();
            let stream = HalfRows {
                block,
                left: &left,
                weights: &weights,
                left_max: finite_max_abs(&left).unwrap(),
                weights_max: finite_max_abs(&weights).unwrap(),
            };
            assert!(stream.apply(&partials), "case {case} is in range");
            let mut expected = partials.clone();
            scalar(block, &left, &weights, &mut expected);
            struct Each<'s, 'a>(&'s HalfRows<'a>, &'s [f64], &'s [f64]);
            impl vector::WithEight for &Each<'_, '_> {
                fn run<E: Eight>(self, e: E) {
                    let mut got = self.1.to_vec();
                    vector::WithEight::run(
                        HalfRun {
                            rows: self.0,
                            partials: &mut got,
                        },
                        e,
                    );
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(self.2));
                }
            }
            vector::on_every_lane_set(&Each(&stream, &partials, &expected));
        }
    }

    /// Operands whose products could overflow, non-finite operands and
    /// partials near the top of the range are left to the scalar loop.
    #[test]
    fn out_of_range_streams_are_refused() {
        let block = Block {
            rows: 1,
            k: 8,
            c: 8,
            group: 4,
            exact: true,
        };
        let ones = vec![1.0; 64];
        let stream = |left_max: f64, weights_max: f64| HalfRows {
            block,
            left: &ones,
            weights: &ones,
            left_max,
            weights_max,
        };
        assert!(stream(1.0, 1.0).apply(&[0.0; 8]));
        assert!(!stream(256.0, 256.0).apply(&[0.0; 8]));
        // Rows of small values against the largest weight: a bound of
        // `k · max|a| · max|w|` would refuse them, the row sums do not.
        let mut left = vec![0.0; 64];
        left[0] = 100.0;
        left[8] = 100.0;
        let weights = vec![200.0; 64 * 8];
        let row_sums = HalfRows {
            block: Block { k: 64, ..block },
            left: &left,
            weights: &weights,
            left_max: 100.0,
            weights_max: 200.0,
        };
        assert!(row_sums.apply(&[0.0; 8]));
        // 8 products of at most 1 and two roundings on top of the start.
        assert!(stream(1.0, 1.0).apply(&[65000.0; 8]));
        assert!(!stream(1.0, 1.0).apply(&[65500.0; 8]));
        assert!(!stream(1.0, 1.0).apply(&[f64::NAN; 8]));
        // A −0 partial is added to as the scalar loop adds to it.
        assert!(stream(1.0, 1.0).apply(&[-0.0; 8]));
        let single = HalfRows {
            block: Block {
                exact: false,
                ..block
            },
            ..stream(1.0, 1.0)
        };
        assert!(!single.apply(&[0.0; 8]));
        assert_eq!(finite_max_abs(&[1.0, -3.0, 2.0]), Some(3.0));
        assert_eq!(finite_max_abs(&[1.0, f64::INFINITY]), None);
        assert_eq!(finite_max_abs(&[f64::NAN]), None);
    }
}
