//! Compile times of the seed's five variants: cold (the host toolchain
//! alone, and a miss in an empty cache including the check and the atomic
//! write) and warm (a checked hit in a populated cache).

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use ipu_kernels::siglip::seed_variants;
use ipu_kernels::{AmpModel, HostToolchain, KernelCache, Toolchain, fetch_kernel};
use ipu_target::Target;

fn compile(c: &mut Criterion) {
    let target = Target::ipu21();
    let variants = seed_variants(&AmpModel::ipu21()).expect("seed variants are valid");
    let mut group = c.benchmark_group("compile_seed_variants");
    group.sample_size(20);
    group.bench_function("toolchain_only", |b| {
        b.iter(|| {
            for v in &variants {
                std::hint::black_box(HostToolchain.compile(v, target).expect("compiles"));
            }
        })
    });
    group.bench_function("cold_cache", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("temp dir"),
            |dir| {
                let cache = KernelCache::open(dir.path()).expect("opens");
                for v in &variants {
                    std::hint::black_box(
                        fetch_kernel(v, target, &HostToolchain, &cache).expect("compiles"),
                    );
                }
                dir
            },
            criterion::BatchSize::PerIteration,
        )
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = KernelCache::open(dir.path()).expect("opens");
    for v in &variants {
        fetch_kernel(v, target, &HostToolchain, &cache).expect("compiles");
    }
    group.bench_function("warm_cache", |b| {
        b.iter(|| {
            for v in &variants {
                std::hint::black_box(
                    fetch_kernel(v, target, &HostToolchain, &cache).expect("hits"),
                );
            }
        })
    });
    group.finish();
}

criterion_group!(benches, compile);
criterion_main!(benches);
