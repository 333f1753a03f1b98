//! Shared fixtures: the seed's five variants, shape and problem generators.

use ipu_kernels::{AmpModel, GemmProblem, GemmShape, Mode, Variant, pass_shape};
use ipu_layout::{AmpOperand, ElementOrder, Fp8Format, MemoryClass, Precision};
use proptest::prelude::*;

pub use ipu_kernels::siglip::{SEED_VARIANTS, seed_shape};

/// The seed's five variants.
pub fn seed_variants() -> Vec<Variant> {
    ipu_kernels::siglip::seed_variants(&AmpModel::ipu21()).expect("seed variants are valid")
}

/// The variant of `shape` (its pass shape) serving `r_small` and `r_large`
/// rows under the IPU21 model.
pub fn variant(shape: &GemmShape, r_small: u32, r_large: u32) -> Variant {
    let model = AmpModel::ipu21();
    let (k, c) = pass_shape(shape, &model).expect("a supported shape");
    Variant::new(shape, k, c, r_small, r_large, &model).expect("a valid variant")
}

/// The precision combinations the AMP supports: (left, right, output).
pub fn combination(
    index: usize,
    left_scale: i8,
    right_scale: i8,
    format: Fp8Format,
) -> (Precision, Precision, Precision) {
    let f8 = |scale| Precision::F8 { format, scale };
    match index % 5 {
        0 => (Precision::F16, Precision::F16, Precision::F16),
        1 => (Precision::F16, Precision::F16, Precision::F32),
        2 => (f8(left_scale), f8(right_scale), Precision::F16),
        3 => (Precision::F16, f8(right_scale), Precision::F16),
        _ => (Precision::F16, f8(right_scale), Precision::F32),
    }
}

/// A small deterministic generator (splitmix64) for operand values, so that
/// proptest shrinks over a seed instead of every value.
pub struct Values(u64);

impl Values {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `n` values uniform in `[-range, range]`.
    pub fn take(&mut self, n: usize, range: f32) -> Vec<f32> {
        (0..n)
            .map(|_| ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * range)
            .collect()
    }
}

/// A problem with random values of a shape.
pub fn problem(shape: GemmShape, mode: Mode, seed: u64) -> GemmProblem {
    let mut v = Values::new(seed);
    let (m, k, n) = (
        shape.rows as usize,
        shape.inner as usize,
        shape.columns as usize,
    );
    let left = v.take(m * k, 2.0);
    let right = v.take(k * n, 2.0);
    let initial = v.take(m * n, 4.0);
    GemmProblem::new(shape, mode, left, right, initial).expect("sizes match")
}

/// Shapes over every supported precision combination, both left orders,
/// both output orders, both weight classes and both modes. A row-major left
/// operand gets its inner dimension rounded up to a whole panel (32 bytes),
/// as row-major rows must start aligned.
pub fn shapes() -> impl Strategy<Value = (GemmShape, Mode)> {
    (
        (1u32..=20, 1u32..=130, 1u32..=70),
        0usize..5,
        -2i8..=2,
        -2i8..=2,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(
                (rows, inner, columns),
                combo,
                ls,
                rs,
                f152,
                row_major,
                interleaved,
                acc,
                row_left,
            )| {
                let format = if f152 {
                    Fp8Format::F152
                } else {
                    Fp8Format::F143
                };
                let (left, right, output) = combination(combo, ls, rs, format);
                let (inner, left_order) = if row_left {
                    let panel = left.amp_panel_columns() as u32;
                    (inner.div_ceil(panel) * panel, ElementOrder::RowMajor)
                } else {
                    (inner, ElementOrder::Amp(AmpOperand::Left))
                };
                let shape = GemmShape {
                    rows,
                    inner,
                    columns,
                    left,
                    right,
                    output,
                    left_order,
                    output_order: if row_major {
                        ElementOrder::RowMajor
                    } else {
                        ElementOrder::Amp(AmpOperand::Output)
                    },
                    right_class: if interleaved {
                        MemoryClass::Ipu21Interleaved
                    } else {
                        MemoryClass::Ipu21Standard
                    },
                };
                let mode = if acc {
                    Mode::Accumulate
                } else {
                    Mode::Initialise
                };
                (shape, mode)
            },
        )
}
