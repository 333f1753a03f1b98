//! Criterion benchmarks of placement: the exact search on zero-slack
//! instances of the benchmark suite, the heuristics on a 60k-buffer
//! ML-shaped trace, and a whole-chip SigLIP-scale problem. `cargo xtask
//! alloc bench` prints the success rates and gaps to the bound that these
//! timings go with.

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ipu_alloc::generate::{ml_trace, siglip_like, zero_slack_suite};
use ipu_alloc::{PlaceConfig, SolveConfig, place};

fn zero_slack_exact(c: &mut Criterion) {
    let mut group = c.benchmark_group("zero_slack");
    group.sample_size(10);
    let config = SolveConfig {
        parallel_search: false,
        ..SolveConfig::default()
    };
    for inst in zero_slack_suite().into_iter().take(6) {
        group.bench_function(inst.name.clone(), |b| {
            b.iter(|| black_box(inst.problem.solve(inst.capacity, &config)))
        });
    }
    group.finish();
}

fn trace_heuristics(c: &mut Criterion) {
    let mut group = c.benchmark_group("trace");
    group.sample_size(10);
    let p = ml_trace(4, 60_000);
    let config = SolveConfig {
        max_nodes: 0,
        timeout: None,
        ..SolveConfig::default()
    };
    group.bench_function("ml_n60000_heuristics", |b| {
        b.iter(|| black_box(p.solve(u64::MAX, &config)))
    });
    group.finish();
}

fn siglip_scale(c: &mut Criterion) {
    let mut group = c.benchmark_group("siglip");
    group.sample_size(10);
    let problem = siglip_like(1, 1472, 340, 250);
    let config = PlaceConfig {
        verify: false,
        ..PlaceConfig::default()
    };
    group.bench_function("1472_tiles_340_requests", |b| {
        b.iter(|| black_box(place(&problem, &config)))
    });
    group.finish();
}

criterion_group!(benches, zero_slack_exact, trace_heuristics, siglip_scale);
criterion_main!(benches);
