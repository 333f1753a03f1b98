//! AMP utilisation of the SigLIP GEMM shards the seed planned (printed once
//! from the cost model), and the time to estimate, plan and emulate them.

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use ipu_kernels::siglip::{seed_shape, seed_variants};
use ipu_kernels::{AmpModel, GemmProblem, Mode, PlanConfig, estimate_cycles, plan_variant};

fn utilisation(c: &mut Criterion) {
    let variants = seed_variants(&AmpModel::ipu21()).expect("seed variants are valid");
    for v in &variants {
        for rows in [v.r_small(), v.r_large()] {
            for mode in Mode::ALL {
                let e = estimate_cycles(v, rows, mode);
                eprintln!(
                    "{:<42} rows {:>3} {:<10} cycles {:>6} lower bound {:>6} utilisation {:.3}",
                    v.name(),
                    rows,
                    mode.name(),
                    e.cycles,
                    e.lower_bound_cycles(),
                    e.utilisation()
                );
            }
        }
    }
    let mut group = c.benchmark_group("siglip_shards");
    group.sample_size(10);
    group.bench_function("estimate_all", |b| {
        b.iter(|| {
            for v in &variants {
                for mode in Mode::ALL {
                    std::hint::black_box(estimate_cycles(v, v.r_large(), mode));
                }
            }
        })
    });
    group.bench_function("plan_all", |b| {
        b.iter(|| {
            for v in &variants {
                let s = v.shape();
                std::hint::black_box(
                    plan_variant(s, v.r_small(), v.r_large(), &PlanConfig::default())
                        .expect("plans"),
                );
            }
        })
    });
    // Emulating the largest seed shard: 244 x 64 x 48 FP8.
    let v = &variants[0];
    let shape = seed_shape(v.shape().inner, v.shape().columns, v.r_large());
    let n = |a: u32, b: u32| (a * b) as usize;
    let p = GemmProblem::new(
        shape,
        Mode::Initialise,
        (0..n(shape.rows, shape.inner))
            .map(|i| (i % 7) as f32 - 3.0)
            .collect(),
        (0..n(shape.inner, shape.columns))
            .map(|i| (i % 5) as f32 * 0.25)
            .collect(),
        vec![0.0; n(shape.rows, shape.columns)],
    )
    .expect("sizes");
    group.bench_function("emulate_244x64x48", |b| {
        b.iter(|| std::hint::black_box(p.run_variant(v, &Default::default()).expect("runs")))
    });
    // The emulator alone on the same shard, operands already in an image.
    let program = ipu_kernels::build_program(v, v.r_large(), Mode::Initialise).expect("builds");
    let [l, r, o] = program.header.operand_bytes();
    let align = |x: u64| x.div_ceil(32) * 32;
    let (right_at, output_at) = (align(l + 16), align(align(l + 16) + r));
    let mut image: Vec<u8> = (0..output_at + o).map(|i| (i % 113) as u8 & 0x7f).collect();
    let args = ipu_kernels::KernelArgs {
        left: ipu_kernels::image_base(),
        right: ipu_kernels::image_base() + right_at as u32,
        output: ipu_kernels::image_base() + output_at as u32,
    };
    group.bench_function("emulate_only_244x64x48", |b| {
        b.iter(|| {
            std::hint::black_box(
                ipu_kernels::emulate(&program, &mut image, ipu_kernels::image_base(), &args)
                    .expect("runs"),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, utilisation);
criterion_main!(benches);
