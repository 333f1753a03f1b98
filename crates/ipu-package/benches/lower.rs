//! Wall time of lowering SigLIP so400m b2 to a program on 1472 tiles with
//! the default configuration: choosing every GEMM's and attention's grid
//! (each candidate's kernel planned and costed) and emitting the steps.
//! The first phase of every build.
//!
//! Run with `cargo bench -p ipu-package --bench lower`.

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use ipu_package::lower::{LowerConfig, lower};

mod common;
use common::siglip;

fn lowering(c: &mut Criterion) {
    let graph = siglip();
    let config = LowerConfig::default();
    let mut group = c.benchmark_group("lower");
    group.sample_size(10);
    group.bench_function("siglip-so400m-b2", |b| {
        b.iter(|| lower(&graph, &config).expect("lowers").steps.len())
    });
    group.finish();
}

criterion_group!(benches, lowering);
criterion_main!(benches);
