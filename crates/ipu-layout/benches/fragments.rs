//! Redistribution fragments between realistic SigLIP layouts on 1472 tiles.
//!
//! Criterion reports throughput in fragments per second (`elem/s`): each
//! benchmark's throughput is set to the number of fragments it produces.

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ipu_layout::*;

fn tensor(shape: &[u64], order: ElementOrder, replicas: u32, axes: Vec<AxisTiling>) -> TensorType {
    let tiling = TensorTiling::new(1472, replicas, axes).expect("valid tiling");
    let format = TensorFormat {
        precision: Precision::F16,
        layout: Layout {
            order,
            tiling,
            memory_class: MemoryClass::Ipu21Standard,
        },
    };
    TensorType::new(TensorShape::from(shape), format).expect("valid type")
}

fn cases() -> Vec<(&'static str, TensorType, TensorType)> {
    let left = ElementOrder::Amp(AmpOperand::Left);
    let hidden = [2, 729, 1152];
    let mlp = [2, 729, 4304];
    vec![
        (
            "hidden_rowmajor_to_amp_left",
            tensor(
                &hidden,
                ElementOrder::RowMajor,
                1,
                vec![
                    AxisTiling::new(Axis::FromEnd(2), 46).with_block(2),
                    AxisTiling::new(Axis::FromEnd(1), 32).with_block(36),
                ],
            ),
            tensor(
                &hidden,
                left,
                2,
                vec![
                    AxisTiling::new(Axis::FromEnd(1), 8).with_block(16),
                    AxisTiling::new(Axis::FromEnd(2), 92).with_block(2),
                ],
            ),
        ),
        (
            "hidden_amp_left_to_rowmajor",
            tensor(
                &hidden,
                left,
                2,
                vec![
                    AxisTiling::new(Axis::FromEnd(1), 8).with_block(16),
                    AxisTiling::new(Axis::FromEnd(2), 92).with_block(2),
                ],
            ),
            tensor(
                &hidden,
                ElementOrder::RowMajor,
                1,
                vec![
                    AxisTiling::new(Axis::FromEnd(2), 46).with_block(2),
                    AxisTiling::new(Axis::FromEnd(1), 32).with_block(36),
                ],
            ),
        ),
        (
            "mlp_replicated8_to_partitioned",
            tensor(
                &mlp,
                ElementOrder::RowMajor,
                1,
                vec![
                    AxisTiling::new(Axis::FromEnd(1), 23).with_block(192),
                    AxisTiling::new(Axis::FromEnd(2), 64).with_block(2),
                ],
            ),
            tensor(
                &mlp,
                ElementOrder::RowMajor,
                8,
                vec![
                    AxisTiling::new(Axis::FromEnd(1), 23).with_block(192),
                    AxisTiling::new(Axis::FromEnd(2), 8).with_block(2),
                ],
            ),
        ),
        (
            "mlp_rowmajor_to_amp_left",
            tensor(
                &mlp,
                ElementOrder::RowMajor,
                8,
                vec![
                    AxisTiling::new(Axis::FromEnd(1), 23).with_block(192),
                    AxisTiling::new(Axis::FromEnd(2), 8).with_block(2),
                ],
            ),
            tensor(
                &mlp,
                left,
                1,
                vec![
                    AxisTiling::new(Axis::FromEnd(1), 16).with_block(16),
                    AxisTiling::new(Axis::FromEnd(2), 92).with_block(2),
                ],
            ),
        ),
    ]
}

fn fragments(c: &mut Criterion) {
    let mut group = c.benchmark_group("redistribute");
    group.sample_size(20);
    let config = RedistributeConfig::default();
    for (name, src, dst) in cases() {
        let r = redistribute(&src, &dst, &config).expect("same shape and precision");
        println!(
            "{name}: fragments={} exchanged_bytes={} local_bytes={}",
            r.fragments().len(),
            r.exchanged_bytes(),
            r.local_bytes()
        );
        group.throughput(Throughput::Elements(r.fragments().len() as u64));
        group.bench_function(name, |b| b.iter(|| redistribute(&src, &dst, &config)));
    }
    group.finish();
}

criterion_group!(benches, fragments);
criterion_main!(benches);
