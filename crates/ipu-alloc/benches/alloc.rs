//! Criterion benchmarks of placement: the exact search on zero-slack
//! instances, the greedy passes on a large trace-like instance, and a
//! whole-chip SigLIP-scale problem. `cargo xtask alloc bench` prints the
//! success rates and gaps to the bound that these timings go with.

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ipu_alloc::generate::{siglip_like, trace_like, zero_slack};
use ipu_alloc::{PlaceConfig, SolveConfig, place};

fn zero_slack_exact(c: &mut Criterion) {
    let mut group = c.benchmark_group("zero_slack");
    group.sample_size(10);
    for (n, seed) in [(150usize, 1u64), (300, 3), (450, 5)] {
        let (p, _) = zero_slack(seed, n, 1 << 20, 1000);
        let lb = p.lower_bound();
        group.bench_function(format!("n{n}_seed{seed}"), |b| {
            b.iter(|| black_box(p.solve(lb, &SolveConfig::default())))
        });
    }
    group.finish();
}

fn trace_greedy(c: &mut Criterion) {
    let mut group = c.benchmark_group("trace");
    group.sample_size(10);
    let p = trace_like(1, 10_000);
    let config = SolveConfig {
        max_nodes: 0,
        timeout: None,
        ..SolveConfig::default()
    };
    group.bench_function("n10000_greedy", |b| {
        b.iter(|| black_box(p.solve(u64::MAX >> 1, &config)))
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

criterion_group!(benches, zero_slack_exact, trace_greedy, siglip_scale);
criterion_main!(benches);
