//! Wall time of GEMM emulation on the shard shapes the tile model runs for
//! SigLIP so400m (FP8 rows and weights into F16 partials, row-major left
//! operand; and the attention's F16 products), through [`emulate_with`]
//! (decoded values) and through a [`PreparedProgram`] (the product table),
//! with throughput in MACs.
//!
//! Run with `cargo bench -p ipu-kernels --bench emulate`.

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ipu_kernels::{
    AmpModel, EmulateOptions, GemmShape, KernelArgs, Mode, PreparedProgram, Variant, build_program,
    emulate_prepared, emulate_with, image_base, pass_shape,
};
use ipu_layout::{ElementOrder, Fp8Format, MemoryClass, Precision};

/// `(rows, inner, columns)` of shards the SigLIP package uses (the
/// QKV/out/fc1 and fc2 GEMMs on 1472 tiles), FP8 × FP8.
const SHARDS: [(u32, u32, u32); 3] = [(162, 192, 64), (182, 288, 16), (72, 128, 32)];

/// `(rows, inner, columns)` of the attention's two F16 × F16 products on
/// one tile of the SigLIP b2 package: a pass of 105 query rows against a
/// block of 128 keys (head dimension 72, padded to 80).
const ATTENTION: [(u32, u32, u32); 2] = [(105, 80, 128), (105, 128, 80)];

fn emulation(c: &mut Criterion) {
    let model = AmpModel::ipu21();
    let f8 = |scale| Precision::F8 {
        format: Fp8Format::F143,
        scale,
    };
    let mut group = c.benchmark_group("emulate");
    let fp8 = SHARDS.map(|(r, k, c)| (r, k, c, f8(-4), f8(-11), ""));
    let f16 = ATTENTION.map(|(r, k, c)| (r, k, c, Precision::F16, Precision::F16, "/f16"));
    for (rows, inner, columns, left, right, suffix) in fp8.into_iter().chain(f16) {
        let shape = GemmShape {
            rows,
            inner,
            columns,
            left,
            right,
            output: Precision::F16,
            left_order: ElementOrder::RowMajor,
            output_order: ElementOrder::RowMajor,
            right_class: MemoryClass::Ipu21Interleaved,
        };
        let (k, cb) = pass_shape(&shape, &model).expect("a supported shape");
        let variant = Variant::new(&shape, k, cb, rows, rows, &model).expect("legal variant");
        let program = build_program(&variant, rows, Mode::Accumulate).expect("builds");
        let [lb, rb, ob] = program.header.operand_bytes();
        let align = |x: u64| x.div_ceil(32) * 32;
        let right_at = align(lb + u64::from(program.header.left_tail_bytes));
        let output_at = align(right_at + rb);
        let size = align(output_at + ob) as usize;
        // Finite FP8 codes (or F16 values of magnitude in [0.5, 2)) and small
        // F16 partials, from a fixed LCG.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut image: Vec<u8> = (0..size)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let b = (state >> 56) as u8;
                if b == 0x80 { 0 } else { b }
            })
            .collect();
        if left == Precision::F16 {
            for e in image[..output_at as usize].chunks_exact_mut(2) {
                e[1] = (e[1] & 0x87) | 0x38;
            }
        }
        for e in image[output_at as usize..].chunks_exact_mut(2) {
            e[1] &= 0x3b;
        }
        let args = KernelArgs {
            left: image_base(),
            right: image_base() + right_at as u32,
            output: image_base() + output_at as u32,
        };
        let options = EmulateOptions::default();
        let macs = u64::from(rows) * u64::from(inner) * u64::from(columns);
        group.throughput(Throughput::Elements(macs));
        let name = format!("{rows}x{inner}x{columns}{suffix}");
        group.bench_function(format!("{name}/values"), |b| {
            let mut memory = image.clone();
            b.iter(|| emulate_with(&program, &mut memory, image_base(), &args, &options).unwrap())
        });
        let prepared = PreparedProgram::new(program.clone()).expect("valid header");
        group.bench_function(format!("{name}/prepared"), |b| {
            let mut memory = image.clone();
            b.iter(|| {
                emulate_prepared(&prepared, &mut memory, image_base(), &args, &options).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, emulation);
criterion_main!(benches);
