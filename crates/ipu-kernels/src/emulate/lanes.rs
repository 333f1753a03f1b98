//! The lane kernel: streams of FP8 rows through FP8 weights into F16
//! partials, computed as vector-friendly f64 and integer arithmetic
//! instead of product-table loads, with the same bytes as the table loop
//! of `kernel.rs` wherever [`Block::lanes_apply`] holds (the argument is
//! on [`Block::run_lanes`]). Streams outside those conditions (non-finite
//! operands, partials that could overflow, a −0 partial) take the table
//! loop.

use super::kernel::Block;
use super::rounding::round_f16_significand;
use super::vector::{self, Eight};

/// `1.5 · 2^52`: adding it to an f64 below `2^51` in magnitude rounds the
/// value to an integer, ties to even, and leaves that integer in the low
/// bits of the sum (every f64 in `[2^52, 2^53)` is an integer, one unit
/// apart).
const MAGIC: f64 = 6_755_399_441_055_744.0;
/// `2^24`: F16 partials and the rounded products of FP8 values are
/// multiples of `2^-24`, so scaled by it they are integers.
const GRID: f64 = 16_777_216.0;
/// The largest product magnitude below which rounding an FP8 product to
/// F16 cannot overflow (halfway between 65504 and 65536).
pub(super) const F16_OVERFLOW: f64 = 65520.0;

/// The weights of an FP8 × FP8 block with F16 partials, for the lane
/// kernel ([`Block::run_lanes`]), scaled by `2^24`: for each step `g` and
/// each 8 columns from `j0`, the `8 × 8` block of inner elements
/// `g·8 + t` and columns `j0 + l` at `[t][l]`, zero past the inner
/// dimension and past `c` (columns are padded to a multiple of 8). Only
/// finite blocks have one.
#[derive(Clone, Debug)]
pub(super) struct Lanes {
    values: Vec<[[f64; 8]; 8]>,
    columns: usize,
    /// The largest weight magnitude, unscaled.
    max_abs: f64,
}

impl Lanes {
    /// The lane layout of the row-major `k × c` weight values, or `None`
    /// when one is not finite.
    pub(super) fn new(block: &[f64], k: usize, c: usize) -> Option<Self> {
        if block.len() != k.checked_mul(c)? {
            return None;
        }
        let columns = c.next_multiple_of(8);
        let chunks = columns / 8;
        let mut values = vec![[[0.0; 8]; 8]; k.div_ceil(8) * chunks];
        if c > 0 {
            for (i, row) in block.chunks(8 * c).enumerate() {
                let step = &mut values[i * chunks..][..chunks];
                for (t, row) in row.chunks_exact(c).enumerate() {
                    for (target, source) in step.iter_mut().zip(row.chunks(8)) {
                        for (w, &v) in target[t].iter_mut().zip(source) {
                            *w = v * GRID;
                        }
                    }
                }
            }
        }
        let max_abs = finite_max_abs(block)?;
        Some(Self {
            values,
            columns,
            max_abs,
        })
    }
}

/// The largest magnitude of `values`, or `None` when one is not finite;
/// in separate passes, without a chain of dependent maxima.
pub(super) fn finite_max_abs(values: &[f64]) -> Option<f64> {
    let finite = values.iter().all(|v| v.is_finite());
    finite.then(|| largest_magnitude(values))
}

/// The largest magnitude in `values` (NaN ignored), over eight running
/// maxima so that they do not wait on each other.
fn largest_magnitude(values: &[f64]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (m, v) in lanes.iter_mut().zip(chunk) {
            *m = m.max(v.abs());
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()));
    lanes.iter().fold(tail, |m, &v| m.max(v))
}

/// A block of FP8 rows decoded for the lane kernel: `rows × k` values,
/// each row padded with zeros to a multiple of 8, with their largest
/// magnitude; `None` when one is not finite.
#[derive(Clone, Debug)]
pub(super) struct LaneRows {
    values: Vec<f64>,
    max_abs: f64,
}

impl LaneRows {
    /// Decodes `rows × k` one-byte codes through `table`.
    pub(super) fn new(table: &[f64; 256], codes: &[u8], rows: usize, k: usize) -> Option<Self> {
        let padded = k.next_multiple_of(8);
        let mut values = vec![0.0; rows * padded];
        // Which codes occur, rather than a running maximum: the loop then
        // has no chain of dependent operations.
        let mut seen = [false; 256];
        if k > 0 {
            for (row, target) in codes.chunks_exact(k).zip(values.chunks_exact_mut(padded)) {
                for (t, &code) in target.iter_mut().zip(row) {
                    *t = table[usize::from(code)];
                    seen[usize::from(code)] = true;
                }
            }
        }
        let mut max_abs = 0.0f64;
        for (&v, _) in table.iter().zip(&seen).filter(|(_, seen)| **seen) {
            if !v.is_finite() {
                return None;
            }
            max_abs = max_abs.max(v.abs());
        }
        Some(Self { values, max_abs })
    }
}

impl Block {
    /// Whether [`Block::run_lanes`] gives the bytes of [`Block::run_codes`]
    /// for these operands and `partials` (the conditions its proof needs).
    pub(super) fn lanes_apply(&self, partials: &[f64], left: &LaneRows, weights: &Lanes) -> bool {
        self.exact
            && self.group == 8
            && weights.columns == self.c.next_multiple_of(8)
            && left.values.len() == self.rows * self.k.next_multiple_of(8)
            && weights.values.len() == self.k.div_ceil(8) * weights.columns / 8
            && partials.len() >= self.rows * self.c
            && left.max_abs * weights.max_abs < F16_OVERFLOW
            && partials_stay_in_range(
                &partials[..self.rows * self.c],
                self.k.div_ceil(8),
                left.max_abs * weights.max_abs,
            )
    }

    /// [`Block::run_codes`] for FP8 rows and weights into F16 partials,
    /// as vector arithmetic instead of table loads, when
    /// [`Block::lanes_apply`] holds.
    ///
    /// Why it gives the same bytes: every product `a × w` of two FP8
    /// values has at most 8 significant bits, so f64 computes it exactly,
    /// and below 65520 in magnitude (which `lanes_apply` checks) rounding
    /// it to F16 is rounding it to the grid of multiples of `2^-24` (a
    /// product of 2^-17 or more is already on that grid, and F16 keeps its
    /// 8 bits). So the rounded product scaled by `2^24` is `a × (w · 2^24)`
    /// rounded to an integer, ties to even, which [`MAGIC`] does, leaving
    /// the integer in the low bits of the f64. The step's eight integers
    /// (below `2^43` together) are summed as integers, exactly, and the
    /// sum is added to the partial: the same exact sum as the table loop,
    /// so the same value after `update`. Zeros are where the two could
    /// differ in sign (rounding keeps a tiny negative product's sign,
    /// [`MAGIC`] gives +0, and padding adds +0), but a sum with a partial
    /// that is not −0 is never −0, and no partial starts as −0
    /// (`lanes_apply`) or becomes one (a rounded non-zero sum on the grid
    /// stays non-zero). Operands are finite, so the special values come
    /// only from partials, where f64 addition treats them as before.
    ///
    /// The loops are compiled for the host's vector extensions, chosen
    /// when they run (`vector`); every choice computes the same values.
    pub(super) fn run_lanes<U: Fn(f64, usize, usize, u64) -> f64>(
        &self,
        partials: &mut [f64],
        left: &LaneRows,
        weights: &Lanes,
        update: LaneUpdate<U>,
    ) {
        vector::dispatch(LaneRun {
            block: *self,
            partials,
            left,
            weights,
            update,
        });
    }

    /// The partials after [`Block::run_lanes`] on each lane set the host
    /// has, the baseline's first: the tests hold all to the table loop.
    #[cfg(test)]
    fn run_lanes_on_every_set(
        &self,
        partials: &[f64],
        left: &LaneRows,
        weights: &Lanes,
    ) -> Vec<Vec<f64>> {
        /// Runs of one stream, one result per lane set.
        #[derive(Clone, Copy)]
        struct Each<'a> {
            block: Block,
            partials: &'a [f64],
            left: &'a LaneRows,
            weights: &'a Lanes,
            results: &'a std::cell::RefCell<Vec<Vec<f64>>>,
        }
        impl vector::WithEight for Each<'_> {
            fn run<E: Eight>(self, e: E) {
                let mut partials = self.partials.to_vec();
                let run = LaneRun {
                    block: self.block,
                    partials: &mut partials,
                    left: self.left,
                    weights: self.weights,
                    update: NEAREST_EVEN,
                };
                run.run(e);
                self.results.borrow_mut().push(partials);
            }
        }
        let results = std::cell::RefCell::new(Vec::new());
        vector::on_every_lane_set(Each {
            block: *self,
            partials,
            left,
            weights,
            results: &results,
        });
        results.into_inner()
    }
}

/// How the lane kernel rounds a partial after each step.
#[derive(Clone, Copy, Debug)]
pub(super) enum LaneUpdate<U> {
    /// To the nearest F16, ties to even: in range (`lanes_apply`), the
    /// significand's rounding, eight partials at a time.
    NearestEven,
    /// Through `U(value, row, column, step)`, one partial at a time.
    Each(U),
}

/// A rounding of one partial: `(value, row, column, step)` to the rounded
/// value.
pub(super) type RoundEach = fn(f64, usize, usize, u64) -> f64;

/// [`LaneUpdate::NearestEven`], with a type for the function it has none of.
pub(super) const NEAREST_EVEN: LaneUpdate<RoundEach> = LaneUpdate::NearestEven;

/// One call of the lane kernel, bundled so that [`vector::dispatch`] can
/// compile it for the vector extension the host has.
struct LaneRun<'a, U> {
    block: Block,
    partials: &'a mut [f64],
    left: &'a LaneRows,
    weights: &'a Lanes,
    update: LaneUpdate<U>,
}

impl<U: Fn(f64, usize, usize, u64) -> f64> vector::WithEight for LaneRun<'_, U> {
    /// The loops of [`Block::run_lanes`] on the lane set `e`. Each rounded
    /// product is one [`Eight::mul_add`]: the product is exact, so
    /// rounding `a × w + MAGIC` once or twice gives the same value.
    #[inline(always)]
    fn run<E: Eight>(self, e: E) {
        let LaneRun {
            block,
            partials,
            left,
            weights,
            update,
        } = self;
        let Block { rows, k, c, .. } = block;
        if rows == 0 || k == 0 || c == 0 {
            return;
        }
        let padded = k.next_multiple_of(8);
        let chunks = weights.columns / 8;
        let magic = e.splat(MAGIC);
        let offset = e.splat_u(7u64.wrapping_mul(MAGIC.to_bits()));
        // Multiplying by a power of two is exact, as dividing is.
        let unscale = e.splat(1.0 / GRID);
        let rows_iter = left
            .values
            .chunks_exact(padded)
            .zip(partials.chunks_exact_mut(c));
        // One row at a time, so one row's accumulators stay in registers.
        // (Sharing weight loads between rows was measured to gain nothing
        // on the baseline build; it was not measured again with vectors.)
        for (r, (lrow, prow)) in rows_iter.take(rows).enumerate() {
            let steps = lrow
                .chunks_exact(8)
                .zip(weights.values.chunks_exact(chunks));
            for (g, (a, step)) in steps.enumerate() {
                for (jc, w) in step.iter().enumerate() {
                    let mut acc = e.splat_u(0);
                    for (&at, w) in a.iter().zip(w) {
                        let rounded = e.mul_add(e.splat(at), e.load(w), magic);
                        acc = e.add_u(acc, e.bits(rounded));
                    }
                    // The step's integer sums, back as exact f64s.
                    let sums = e.with_bits(e.sub_u(acc, offset));
                    let sums = e.mul(e.sub(sums, magic), unscale);
                    let j0 = jc * 8;
                    let tail = &mut prow[j0..];
                    match &update {
                        LaneUpdate::NearestEven => {
                            if let Some(p) = tail.first_chunk_mut::<8>() {
                                // A whole chunk: the rounding in lanes too.
                                let x = e.add(e.load(p), sums);
                                *p = e.store(e.round_f16_significand(x));
                            } else {
                                for (p, sum) in tail.iter_mut().zip(e.store(sums)) {
                                    *p = round_f16_significand(*p + sum);
                                }
                            }
                        }
                        LaneUpdate::Each(update) => {
                            let sums = e.store(sums);
                            let n = (c - j0).min(8);
                            let columns = prow[j0..][..n].iter_mut().zip(sums);
                            for (l, (p, sum)) in columns.enumerate() {
                                *p = update(*p + sum, r, j0 + l, g as u64);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Whether partials starting as `partials` stay finite, below 65520 in
/// magnitude and never −0 through `steps` AMP steps of eight products of
/// at most `max_product` each: none is −0 or not finite, and the largest
/// can grow by at most `8 · max_product` and a rounding (at most one F16
/// unit, 32 below 65536) per step.
fn partials_stay_in_range(partials: &[f64], steps: usize, max_product: f64) -> bool {
    // One pass, eight lanes at a time: every stream of every pass checks
    // its partials. A NaN fails the bound (`NaN < x` is false), and −0 is
    // flagged by its bits.
    let mut largest = [0.0f64; 8];
    let mut negative_zero = false;
    let mut nan = false;
    let mut chunks = partials.chunks_exact(8);
    for chunk in &mut chunks {
        for (m, &p) in largest.iter_mut().zip(chunk) {
            *m = m.max(p.abs());
            negative_zero |= p.to_bits() == (-0.0f64).to_bits();
            nan |= p.is_nan();
        }
    }
    for &p in chunks.remainder() {
        largest[0] = largest[0].max(p.abs());
        negative_zero |= p.to_bits() == (-0.0f64).to_bits();
        nan |= p.is_nan();
    }
    let largest = largest.iter().fold(0.0f64, |m, &v| m.max(v));
    let growth = steps as f64 * (8.0 * max_product + 32.0);
    !negative_zero && !nan && largest + growth < F16_OVERFLOW
}

#[cfg(test)]
mod tests {
    use ipu_layout::rng::SplitMix64;
    use ipu_layout::{Fp8Format, Precision};

    use super::*;
    use crate::emulate::kernel::{ProductTable, group_layout};
    use crate::emulate::rounding::{round_f16, round_f16_on_grid};

    fn table(format: Fp8Format, scale: i8) -> [f64; 256] {
        let precision = Precision::F8 { format, scale };
        std::array::from_fn(|code| f64::from(precision.decode_from(&[code as u8])))
    }

    /// A splitmix64 stream with the draws these tests need.
    struct Rng(SplitMix64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0.next_u64()
        }

        /// A finite FP8 code, small magnitudes (the subnormal end, where
        /// products fall off the F16 grid) as often as any.
        fn code(&mut self) -> u8 {
            let r = self.next();
            let code = if r & 1 == 0 {
                (r >> 8) as u8
            } else {
                ((r >> 8) as u8) & 0x87
            };
            if code == 0x80 { 0 } else { code }
        }
    }

    struct Stream {
        rows: usize,
        k: usize,
        c: usize,
        left: Vec<u8>,
        weights: Vec<u8>,
        partials: Vec<f64>,
    }

    impl Stream {
        fn random(rng: &mut Rng, rows: usize, k: usize, c: usize, partial_scale: f64) -> Self {
            let left = (0..rows * k).map(|_| rng.code()).collect();
            let weights = (0..k * c).map(|_| rng.code()).collect();
            // F16 partials spread around `partial_scale`, +0 among them.
            let partials = (0..rows * c)
                .map(|_| {
                    let r = rng.next();
                    let v = ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * partial_scale;
                    if r & 7 == 0 { 0.0 } else { round_f16(v) }
                })
                .collect();
            Self {
                rows,
                k,
                c,
                left,
                weights,
                partials,
            }
        }

        fn block(&self) -> Block {
            Block {
                rows: self.rows,
                k: self.k,
                c: self.c,
                group: 8,
                exact: true,
            }
        }

        /// The partials after the table loop, and after the lane kernel
        /// when it applies.
        fn run(&self, l: &[f64; 256], w: &[f64; 256]) -> (Vec<f64>, Option<Vec<f64>>) {
            let products = ProductTable::new(l, w, |a, w| round_f16(a * w));
            let block = self.block();
            let mut expected = self.partials.clone();
            let codes = group_layout(&self.weights, self.k, self.c, 8);
            block.run_codes(
                &products,
                &mut expected,
                &self.left,
                &codes,
                |x, _, _, _| round_f16_on_grid(x),
            );
            let rows = LaneRows::new(l, &self.left, self.rows, self.k);
            let decoded: Vec<f64> = self.weights.iter().map(|&c| w[usize::from(c)]).collect();
            let lanes = Lanes::new(&decoded, self.k, self.c);
            let got = match (rows, lanes) {
                (Some(rows), Some(lanes)) if block.lanes_apply(&self.partials, &rows, &lanes) => {
                    let mut got = self.partials.clone();
                    block.run_lanes(&mut got, &rows, &lanes, NEAREST_EVEN);
                    // Every lane set the host has gives the same bits.
                    for other in block.run_lanes_on_every_set(&self.partials, &rows, &lanes) {
                        assert_eq!(bits(&other), bits(&got));
                    }
                    // And rounding one partial at a time, as stochastic
                    // rounding does, is the same rounding.
                    let mut each = self.partials.clone();
                    let update = LaneUpdate::Each(|x, _, _, _| round_f16_significand(x));
                    block.run_lanes(&mut each, &rows, &lanes, update);
                    assert_eq!(bits(&each), bits(&got));
                    Some(got)
                }
                _ => None,
            };
            (expected, got)
        }
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Whether a product of these tables needs rounding to reach F16.
    fn off_grid(l: &[f64; 256], w: &[f64; 256], s: &Stream) -> bool {
        s.left.iter().any(|&a| {
            s.weights.iter().any(|&b| {
                let p = l[usize::from(a)] * w[usize::from(b)];
                round_f16(p) != p
            })
        })
    }

    /// On streams the lane kernel takes, it gives the table loop's bits:
    /// ragged inner dimensions and column counts, one to five rows, both
    /// FP8 formats, scales that push products off the F16 grid, partials
    /// near zero and near the overflow margin.
    #[test]
    fn lanes_give_the_table_loops_bits() {
        let mut rng = Rng(SplitMix64::new(0x5eed));
        let (mut ran, mut rounded) = (0, 0);
        for case in 0..400 {
            let format = if case % 2 == 0 {
                Fp8Format::F143
            } else {
                Fp8Format::F152
            };
            let ls = (rng.next() % 12) as i8 - 10;
            let ws = (rng.next() % 12) as i8 - 14;
            let (l, w) = (table(format, ls), table(format, ws));
            let rows = 1 + (rng.next() % 5) as usize;
            let k = 1 + (rng.next() % 40) as usize;
            let c = 1 + (rng.next() % 20) as usize;
            let partial_scale = [1.0, 100.0, 4.0e4][case % 3];
            let stream = Stream::random(&mut rng, rows, k, c, partial_scale);
            let (expected, got) = stream.run(&l, &w);
            if let Some(got) = got {
                ran += 1;
                rounded += usize::from(off_grid(&l, &w, &stream));
                assert_eq!(bits(&got), bits(&expected), "case {case}");
            }
        }
        // The kernel ran on most streams, and on many whose products
        // needed rounding (the case the magic constant exists for).
        assert!(ran > 200, "the lane kernel ran on {ran} streams");
        assert!(rounded > 100, "{rounded} streams had off-grid products");
    }

    /// The conditions that send a stream to the table loop.
    #[test]
    fn lanes_refuse_what_they_cannot_prove() {
        let mut rng = Rng(SplitMix64::new(7));
        let (l, w) = (table(Fp8Format::F143, -4), table(Fp8Format::F143, -11));
        let stream = Stream::random(&mut rng, 3, 24, 16, 10.0);
        let rows = LaneRows::new(&l, &stream.left, 3, 24).unwrap();
        let decoded: Vec<f64> = stream.weights.iter().map(|&c| w[usize::from(c)]).collect();
        let lanes = Lanes::new(&decoded, 24, 16).unwrap();
        let block = stream.block();
        assert!(block.lanes_apply(&stream.partials, &rows, &lanes));
        for bad in [-0.0, f64::NAN, f64::INFINITY, 65504.0] {
            let mut partials = stream.partials.clone();
            partials[5] = bad;
            assert!(!block.lanes_apply(&partials, &rows, &lanes), "{bad}");
        }
        // A NaN code in the rows or the weights.
        let mut left = stream.left.clone();
        left[0] = 0x80;
        assert!(LaneRows::new(&l, &left, 3, 24).is_none());
        let mut decoded_nan = decoded.clone();
        decoded_nan[3] = f64::NAN;
        assert!(Lanes::new(&decoded_nan, 24, 16).is_none());
        // Products that could round to infinity.
        let big = table(Fp8Format::F143, 6);
        let rows = LaneRows::new(&big, &stream.left, 3, 24).unwrap();
        let decoded: Vec<f64> = stream
            .weights
            .iter()
            .map(|&c| big[usize::from(c)])
            .collect();
        let lanes = Lanes::new(&decoded, 24, 16).unwrap();
        assert!(!block.lanes_apply(&stream.partials, &rows, &lanes));
        // Partials of the table loop's overflow region are left to it.
        let mut near = Stream::random(&mut rng, 3, 24, 16, 10.0);
        near.partials[0] = 65400.0;
        let (_, got) = near.run(&l, &w);
        assert!(got.is_none());
    }
}
