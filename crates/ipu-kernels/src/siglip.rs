//! SigLIP GEMM shards as data, for tests, benchmarks and the
//! `cargo xtask kernels` report.
//!
//! The seed log (`shared/seed/000_dc5e74533deb5fb9.log`, phase
//! `compile_kernels`) planned five variants for SigLIP so400m at batch 2:
//! FP8 F143 rows (in `Amp(Left)` order) and weights (in interleaved memory),
//! F16 partials and output, served for two row counts. Their shard shapes
//! are [`SEED_VARIANTS`]; [`seed_variants`] gives the variants of those
//! shards under a model (the pass shape is the AMP's, not the seed's
//! blocks).
//!
//! [`SIGLIP_SHARDS`] are the largest per-tile shards of the SigLIP so400m
//! b2 package's three kinds of encoder GEMM (`cargo xtask build-package`):
//! the attention input projection (qkv), its output projection (out) and
//! the MLP's (fc), whose figures `cargo xtask kernels` prints in FP8 and
//! F16.

use ipu_layout::{AmpOperand, ElementOrder, Fp8Format, MemoryClass, Precision};

use crate::{AmpModel, GemmShape, KernelError, Variant, pass_shape};

/// `(inner, columns, r_small, r_large)` of the seed's five shards, in log
/// order.
pub const SEED_VARIANTS: [(u32, u32, u32, u32); 5] = [
    (64, 48, 240, 244),
    (96, 96, 144, 148),
    (192, 144, 160, 164),
    (192, 160, 160, 164),
    (256, 144, 120, 124),
];

/// The seed's shard shape `inner × columns` with `rows` rows.
pub fn seed_shape(inner: u32, columns: u32, rows: u32) -> GemmShape {
    let f143 = Precision::F8 {
        format: Fp8Format::F143,
        scale: 0,
    };
    GemmShape {
        rows,
        inner,
        columns,
        left: f143,
        right: f143,
        output: Precision::F16,
        left_order: ElementOrder::Amp(AmpOperand::Left),
        output_order: ElementOrder::Amp(AmpOperand::Output),
        right_class: MemoryClass::Ipu21Interleaved,
    }
}

/// The variants of the seed's five shards under `model`.
pub fn seed_variants(model: &AmpModel) -> Result<Vec<Variant>, KernelError> {
    SEED_VARIANTS
        .iter()
        .map(|&(inner, columns, rs, rl)| {
            let shape = seed_shape(inner, columns, rl);
            let (k, c) = pass_shape(&shape, model)?;
            Variant::new(&shape, k, c, rs, rl, model)
        })
        .collect()
}

/// `(name, rows, inner, columns)` of the SigLIP so400m b2 package's
/// largest encoder GEMM shards per tile.
pub const SIGLIP_SHARDS: [(&str, u32, u32, u32); 3] = [
    ("qkv", 146, 288, 96),
    ("out", 74, 192, 96),
    ("fc", 184, 288, 96),
];

/// A SigLIP shard as the package lays it out: row-major left rows and
/// output, weights in interleaved memory; FP8 F143 rows and weights (`fp8`)
/// or F16 ones, F16 partials either way.
pub fn siglip_shape(rows: u32, inner: u32, columns: u32, fp8: bool) -> GemmShape {
    let operand = if fp8 {
        Precision::F8 {
            format: Fp8Format::F143,
            scale: 0,
        }
    } else {
        Precision::F16
    };
    GemmShape {
        rows,
        inner,
        columns,
        left: operand,
        right: operand,
        output: Precision::F16,
        left_order: ElementOrder::RowMajor,
        output_order: ElementOrder::RowMajor,
        right_class: MemoryClass::Ipu21Interleaved,
    }
}
