//! Wall time of the seeded value generator on SigLIP so400m: one encoder
//! layer's weights, and every weight of the model generated tensor by
//! tensor (each dropped after use, as a package writer would stream them).
//!
//! Run with `cargo bench -p ipu-package --bench values`.

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use ipu_package::graph::{parse_fixture, values};

mod common;
use common::siglip;

fn generate(c: &mut Criterion) {
    let graph = siglip();
    let layer = graph.weights_read_by(graph.repeats()[0].iteration_ops(0));
    let mut group = c.benchmark_group("values/siglip-so400m-b2");
    group.sample_size(10);
    group.bench_function("one layer (15.2 M weights)", |b| {
        b.iter(|| {
            layer
                .iter()
                .map(|&t| values::tensor_values(&graph, t, 0).len())
                .sum::<usize>()
        })
    });
    group.bench_function("one layer (15.2 M weights), encoded to bytes", |b| {
        b.iter(|| {
            layer
                .iter()
                .map(|&t| {
                    let v = values::tensor_values(&graph, t, 0);
                    values::encode(graph.tensor(t).precision(), &v).len()
                })
                .sum::<usize>()
        })
    });
    let all = graph.weights();
    group.bench_function("all weights (428 M)", |b| {
        b.iter(|| {
            all.iter()
                .map(|&t| values::tensor_values(&graph, t, 0).len())
                .sum::<usize>()
        })
    });
    group.bench_function("all weights (428 M), encoded to bytes", |b| {
        b.iter(|| {
            all.iter()
                .map(|&t| {
                    let v = values::tensor_values(&graph, t, 0);
                    values::encode(graph.tensor(t).precision(), &v).len()
                })
                .sum::<usize>()
        })
    });
    group.bench_function("parse fixture", |b| {
        let text = std::fs::read_to_string(
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../fixtures/siglip-so400m-b2.json"),
        )
        .expect("readable");
        b.iter(|| parse_fixture(&text).expect("parses").ops().len())
    });
    group.finish();
}

criterion_group!(benches, generate);
criterion_main!(benches);
