//! The SigLIP GEMM shards of the seed run, as data for benchmarks and the
//! `cargo xtask kernels` report.
//!
//! The seed log (`shared/seed/000_dc5e74533deb5fb9.log`, phase
//! `compile_kernels`) planned five variants for SigLIP so400m at batch 2:
//! FP8 F143 rows (in `Amp(Left)` order) and weights (in interleaved memory),
//! F16 partials and output, each shard one block (`inner = k`,
//! `columns = c`), served for two row counts.

use ipu_layout::{AmpOperand, ElementOrder, Fp8Format, MemoryClass, Precision};

use crate::{AmpModel, GemmShape, KernelError, Variant};

/// `(k, c, r_small, r_large)` of the seed's five variants, in log order.
pub const SEED_VARIANTS: [(u32, u32, u32, u32); 5] = [
    (64, 48, 240, 244),
    (96, 96, 144, 148),
    (192, 144, 160, 164),
    (192, 160, 160, 164),
    (256, 144, 120, 124),
];

/// The shard shape of a seed variant with `rows` rows.
pub fn seed_shape(k: u32, c: u32, rows: u32) -> GemmShape {
    let f143 = Precision::F8 {
        format: Fp8Format::F143,
        scale: 0,
    };
    GemmShape {
        rows,
        inner: k,
        columns: c,
        left: f143,
        right: f143,
        output: Precision::F16,
        left_order: ElementOrder::Amp(AmpOperand::Left),
        output_order: ElementOrder::Amp(AmpOperand::Output),
        right_class: MemoryClass::Ipu21Interleaved,
    }
}

/// The seed's five variants under `model`.
pub fn seed_variants(model: &AmpModel) -> Result<Vec<Variant>, KernelError> {
    SEED_VARIANTS
        .iter()
        .map(|&(k, c, rs, rl)| Variant::new(&seed_shape(k, c, rl), k, c, rs, rl, model))
        .collect()
}
