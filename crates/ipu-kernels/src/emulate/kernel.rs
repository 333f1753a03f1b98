//! The emulator's inner loops: one stream of rows through a coefficient
//! block, on decoded values or, with a product table, on FP8 codes.
//!
//! Both loops perform, for every output element and AMP step, exactly the
//! operation sequence of the arithmetic in the parent module: start from the
//! partial, add each rounded product of the step in increasing inner order,
//! round the sum with `update`. Only the order in which *different* elements
//! are processed changes (row by row, step by step, all columns of a step
//! in one pass), which cannot change any element's bits.
//!
//! The coefficient block is kept in the group layout ([`group_layout`]):
//! step `g`'s coefficients of column `j` are adjacent, so one pass over the
//! columns reads each column's coefficients of the step as one small array,
//! and the loop has no bounds checks. F32 partials, whose step sums are
//! not exact, instead keep the coefficients row major and run column by
//! column ([`Block::run_row_values`]).

use super::vector;

/// Every product of a one-byte left code and a one-byte weight code,
/// already rounded to the partial precision: `table[a][w]`.
#[derive(Clone, Debug)]
pub(super) struct ProductTable {
    /// 256 rows, one per left code (built so; `row` relies on it).
    table: Box<[[f64; 256]]>,
}

impl ProductTable {
    /// `product(left[a], right[w])` for every pair of codes.
    pub(super) fn new(
        left: &[f64; 256],
        right: &[f64; 256],
        product: impl Fn(f64, f64) -> f64,
    ) -> Self {
        let mut table = vec![[0.0f64; 256]; 256].into_boxed_slice();
        for (row, &a) in table.iter_mut().zip(left) {
            for (v, &w) in row.iter_mut().zip(right) {
                *v = product(a, w);
            }
        }
        Self { table }
    }

    fn row(&self, code: u8) -> &[f64; 256] {
        &self.table[usize::from(code)]
    }
}

/// Rearranges a row-major `k × c` block into the group layout: for each
/// step `g` (inner elements `g·group ..`, the last step possibly shorter,
/// of length `len`), the `c × len` block whose column `j` holds its `len`
/// coefficients in inner order, at `g·group·c + j·len`.
pub(super) fn group_layout<T: Copy + Default>(
    block: &[T],
    k: usize,
    c: usize,
    group: usize,
) -> Vec<T> {
    let mut out = vec![T::default(); block.len()];
    if c == 0 || group == 0 {
        return out;
    }
    for (g, (rows, target)) in block
        .chunks(group * c)
        .zip(out.chunks_mut(group * c))
        .enumerate()
    {
        let len = group.min(k - g * group);
        for (t, row) in rows.chunks_exact(c).enumerate() {
            for (j, &v) in row.iter().enumerate() {
                target[j * len + t] = v;
            }
        }
    }
    out
}

/// The shape of one stream: `rows` left rows of `k` inner elements against
/// `k × c` coefficients, in AMP steps of `group` inner elements.
#[derive(Clone, Copy, Debug)]
pub(super) struct Block {
    pub(super) rows: usize,
    pub(super) k: usize,
    pub(super) c: usize,
    pub(super) group: usize,
    /// Whether every step's sum is exact in f64 whatever the order of its
    /// terms (F16 partials: see [`tree`]).
    pub(super) exact: bool,
}

impl Block {
    /// Accumulates `left` codes (`rows × k`, row major) times coefficient
    /// codes (group layout) into `partials` (`rows × c`), each product read
    /// from `products`, each step's sum rounded by
    /// `update(sum, row, column, step)`.
    pub(super) fn run_codes(
        &self,
        products: &ProductTable,
        partials: &mut [f64],
        left: &[u8],
        coefficients: &[u8],
        update: impl Fn(f64, usize, usize, u64) -> f64,
    ) {
        let Block {
            rows, k, c, group, ..
        } = *self;
        if rows == 0 || k == 0 || c == 0 || group == 0 {
            return;
        }
        let left = left.get(..rows * k).unwrap_or(left);
        let partials_len = partials.len().min(rows * c);
        let partials = &mut partials[..partials_len];
        // Full eight-wide steps of exact sums run two rows at a time: the
        // rows share every coefficient load and their sums are independent.
        let paired = if self.exact && group == 8 && k % 8 == 0 {
            let pairs = left
                .chunks_exact(2 * k)
                .zip(partials.chunks_exact_mut(2 * c));
            let mut done = 0;
            for (i, (lrows, prows)) in pairs.enumerate() {
                let (la, lb) = lrows.split_at(k);
                let (pa, pb) = prows.split_at_mut(c);
                let (ra, rb) = (2 * i, 2 * i + 1);
                let steps = la
                    .chunks_exact(8)
                    .zip(lb.chunks_exact(8))
                    .zip(coefficients.chunks(8 * c));
                for (g, ((a, b), w)) in steps.enumerate() {
                    let g = g as u64;
                    if let (Ok(a), Ok(b)) = (<&[u8; 8]>::try_from(a), <&[u8; 8]>::try_from(b)) {
                        codes_step_pair(
                            products,
                            [&mut *pa, &mut *pb],
                            [a, b],
                            w,
                            |x, j| update(x, ra, j, g),
                            |x, j| update(x, rb, j, g),
                        );
                    }
                }
                done += 2;
            }
            done
        } else {
            0
        };
        let rows_iter = left.chunks_exact(k).zip(partials.chunks_exact_mut(c));
        for (r, (lrow, prow)) in rows_iter.enumerate().skip(paired) {
            let steps = lrow.chunks(group).zip(coefficients.chunks(group * c));
            for (g, (a, w)) in steps.enumerate() {
                let g = g as u64;
                let step_update = |x, j| update(x, r, j, g);
                if let Ok(a) = <&[u8; 8]>::try_from(a) {
                    if self.exact {
                        codes_step::<8, true>(products, prow, a, w, step_update);
                    } else {
                        codes_step::<8, false>(products, prow, a, w, step_update);
                    }
                } else if let Ok(a) = <&[u8; 4]>::try_from(a) {
                    if self.exact {
                        codes_step::<4, true>(products, prow, a, w, step_update);
                    } else {
                        codes_step::<4, false>(products, prow, a, w, step_update);
                    }
                } else {
                    let len = a.len();
                    for (j, (p, w)) in prow.iter_mut().zip(w.chunks_exact(len)).enumerate() {
                        let mut sum = *p;
                        for (&a, &w) in a.iter().zip(w) {
                            sum += products.row(a)[usize::from(w)];
                        }
                        *p = update(sum, r, j, g);
                    }
                }
            }
        }
    }

    /// As [`Block::run_codes`], on exact values: each product is
    /// `product(left × coefficient)`.
    pub(super) fn run_values(
        &self,
        partials: &mut [f64],
        left: &[f64],
        coefficients: &[f64],
        product: impl Fn(f64) -> f64,
        update: impl Fn(f64, usize, usize, u64) -> f64,
    ) {
        let Block {
            rows, k, c, group, ..
        } = *self;
        if rows == 0 || k == 0 || c == 0 || group == 0 {
            return;
        }
        let rows_iter = left.chunks_exact(k).zip(partials.chunks_exact_mut(c));
        for (r, (lrow, prow)) in rows_iter.take(rows).enumerate() {
            let steps = lrow.chunks(group).zip(coefficients.chunks(group * c));
            for (g, (a, w)) in steps.enumerate() {
                let g = g as u64;
                let step_update = |x, j| update(x, r, j, g);
                if let Ok(a) = <&[f64; 8]>::try_from(a) {
                    if self.exact {
                        values_step::<8, true>(prow, a, w, &product, step_update);
                    } else {
                        values_step::<8, false>(prow, a, w, &product, step_update);
                    }
                } else if let Ok(a) = <&[f64; 4]>::try_from(a) {
                    if self.exact {
                        values_step::<4, true>(prow, a, w, &product, step_update);
                    } else {
                        values_step::<4, false>(prow, a, w, &product, step_update);
                    }
                } else {
                    let len = a.len();
                    for (j, (p, w)) in prow.iter_mut().zip(w.chunks_exact(len)).enumerate() {
                        let mut sum = *p;
                        for (&a, &w) in a.iter().zip(w) {
                            sum += product(a * w);
                        }
                        *p = update(sum, r, j, g);
                    }
                }
            }
        }
    }

    /// As [`Block::run_values`] for a rounding that depends only on the
    /// value, with the coefficients row major (`k × c`) instead of in the
    /// group layout. For exact sums (F16 partials) the order of a step's
    /// additions cannot change them, so the pairwise tree of
    /// [`Block::run_values`] and the running sum here agree.
    ///
    /// Every element sees the same operations in the same order as in
    /// [`Block::run_values`]: its partial, plus each rounded product of
    /// the step in increasing inner order, one f64 addition at a time,
    /// then `update`. Only the order across *columns* changes — a step's
    /// products are added to every column of a row before the next inner
    /// element — so that the loops run over contiguous columns.
    pub(super) fn run_row_values(
        &self,
        partials: &mut [f64],
        left: &[f64],
        coefficients: &[f64],
        product: impl Fn(f64) -> f64,
        update: impl Fn(f64) -> f64,
    ) {
        if self.rows == 0 || self.k == 0 || self.c == 0 || self.group == 0 {
            return;
        }
        vector::dispatch(RowValues {
            block: *self,
            partials,
            left,
            coefficients,
            product,
            update,
        });
    }
}

/// The loop of [`Block::run_row_values`], bundled so that
/// [`vector::dispatch`] can compile it for the host's vector extension
/// (the loops over columns are plain slices, which the compiler turns
/// into vector instructions of whatever width the extension has).
struct RowValues<'a, P, U> {
    block: Block,
    partials: &'a mut [f64],
    left: &'a [f64],
    coefficients: &'a [f64],
    product: P,
    update: U,
}

impl<P: Fn(f64) -> f64, U: Fn(f64) -> f64> vector::WithEight for RowValues<'_, P, U> {
    #[inline(always)]
    fn run<E: vector::Eight>(self, _lanes: E) {
        let RowValues {
            block,
            partials,
            left,
            coefficients,
            product,
            update,
        } = self;
        let Block {
            rows, k, c, group, ..
        } = block;
        let Some(coefficients) = coefficients.get(..k * c) else {
            return;
        };
        let rows_iter = left.chunks_exact(k).zip(partials.chunks_exact_mut(c));
        for (lrow, prow) in rows_iter.take(rows) {
            let steps = lrow.chunks(group).zip(coefficients.chunks(group * c));
            for (a, w) in steps {
                // Each column's running sum lives in its partial; the
                // products are added in increasing inner order.
                for (&a, wrow) in a.iter().zip(w.chunks_exact(c)) {
                    for (p, &w) in prow.iter_mut().zip(wrow) {
                        *p += product(a * w);
                    }
                }
                for p in prow.iter_mut() {
                    *p = update(*p);
                }
            }
        }
    }
}

/// One full AMP step of `G` inner elements for every column of a row;
/// `EXACT` when the step's sum is exact (see [`tree`]).
#[inline(always)]
fn codes_step<const G: usize, const EXACT: bool>(
    products: &ProductTable,
    prow: &mut [f64],
    a: &[u8; G],
    w: &[u8],
    update: impl Fn(f64, usize) -> f64,
) {
    let rows: [&[f64; 256]; G] = std::array::from_fn(|t| products.row(a[t]));
    let columns = w
        .chunks_exact(G)
        .filter_map(|w| <&[_; G]>::try_from(w).ok());
    for (j, (p, w)) in prow.iter_mut().zip(columns).enumerate() {
        let v: [f64; G] = std::array::from_fn(|t| rows[t][usize::from(w[t])]);
        let mut sum = *p;
        if EXACT {
            sum += tree(&v);
        } else {
            for x in v {
                sum += x;
            }
        }
        *p = update(sum, j);
    }
}

/// [`codes_step`] for two rows of exact sums (`EXACT` and eight wide),
/// sharing the coefficient codes.
#[inline(always)]
fn codes_step_pair(
    products: &ProductTable,
    [pa, pb]: [&mut [f64]; 2],
    [a, b]: [&[u8; 8]; 2],
    w: &[u8],
    update_a: impl Fn(f64, usize) -> f64,
    update_b: impl Fn(f64, usize) -> f64,
) {
    let rows_a: [&[f64; 256]; 8] = std::array::from_fn(|t| products.row(a[t]));
    let rows_b: [&[f64; 256]; 8] = std::array::from_fn(|t| products.row(b[t]));
    let columns = w
        .chunks_exact(8)
        .filter_map(|w| <&[u8; 8]>::try_from(w).ok());
    for (j, ((x, y), w)) in pa.iter_mut().zip(pb.iter_mut()).zip(columns).enumerate() {
        let u: [f64; 8] = std::array::from_fn(|t| rows_a[t][usize::from(w[t])]);
        let v: [f64; 8] = std::array::from_fn(|t| rows_b[t][usize::from(w[t])]);
        *x = update_a(*x + tree(&u), j);
        *y = update_b(*y + tree(&v), j);
    }
}

/// [`codes_step`] on exact values.
#[inline(always)]
fn values_step<const G: usize, const EXACT: bool>(
    prow: &mut [f64],
    a: &[f64; G],
    w: &[f64],
    product: &impl Fn(f64) -> f64,
    update: impl Fn(f64, usize) -> f64,
) {
    let columns = w
        .chunks_exact(G)
        .filter_map(|w| <&[_; G]>::try_from(w).ok());
    for (j, (p, w)) in prow.iter_mut().zip(columns).enumerate() {
        let v: [f64; G] = std::array::from_fn(|t| product(a[t] * w[t]));
        let mut sum = *p;
        if EXACT {
            sum += tree(&v);
        } else {
            for x in v {
                sum += x;
            }
        }
        *p = update(sum, j);
    }
}

/// The sum of one step's rounded products, added pairwise.
///
/// Used only when the step's sum is exact: with F16 partials every product
/// is rounded to an F16 value (a multiple of 2^-24 below 2^16 in
/// magnitude) and so is the partial, so any sum of the partial and up to
/// eight products is a multiple of 2^-24 below 2^20 in magnitude, which an
/// f64 holds exactly (44 significant bits). An exact sum has the same value
/// in every order and association; so do the special cases: the result is
/// −0 only when every term is −0, +∞ and −∞ together give NaN, and NaN
/// stays NaN. The pairwise form shortens the chain of dependent adds.
#[inline(always)]
fn tree(v: &[f64]) -> f64 {
    match *v {
        [a, b, c, d, e, f, g, h] => ((a + b) + (c + d)) + ((e + f) + (g + h)),
        [a, b, c, d] => (a + b) + (c + d),
        // −0 is the identity of addition (it keeps +0 and −0 alike).
        _ => v.iter().fold(-0.0, |s, &x| s + x),
    }
}
