//! Wall time of the reference evaluator: the small fixtures, and SigLIP
//! so400m at batch 2 with one encoder layer (patch embedding, one layer,
//! post-LN and the MAP head), the oracle's cost per model layer.
//!
//! Run with `cargo bench -p ipu-sim --bench reference`.

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use ipu_package::graph::{ParseOptions, parse_fixture_with, values};

fn fixture(name: &str, overrides: &[(&str, u64)]) -> ipu_package::Graph {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("fixture is readable");
    let options = ParseOptions {
        overrides: overrides
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect(),
    };
    parse_fixture_with(&text, &options).expect("fixture parses")
}

fn small(c: &mut Criterion) {
    for name in ["tiny-2l-h64.json", "micro-1l-h32.json"] {
        let graph = fixture(name, &[]);
        let inputs = values::generate(&graph, 0);
        c.bench_function(&format!("reference/{name}"), |b| {
            b.iter(|| ipu_sim::evaluate(&graph, &inputs).expect("evaluates"))
        });
    }
}

fn siglip_one_layer(c: &mut Criterion) {
    let graph = fixture("siglip-so400m-b2.json", &[("layers", 1)]);
    let inputs = values::generate(&graph, 0);
    let mut group = c.benchmark_group("reference/siglip-so400m-b2");
    group.sample_size(10);
    group.bench_function("embed+1 layer+head", |b| {
        b.iter(|| ipu_sim::evaluate(&graph, &inputs).expect("evaluates"))
    });
    group.finish();
}

criterion_group!(benches, small, siglip_one_layer);
criterion_main!(benches);
