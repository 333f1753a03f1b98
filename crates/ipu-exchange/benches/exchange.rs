//! Criterion benchmarks: scheduling and encoding generated phases shaped
//! like the seed log's (1472 tiles, 10^3 to 6·10^5 transfers), the
//! multicast families with fanouts up to 400, the split-K reduce phases
//! and the GEMM operand grids of the SigLIP builds, and the checker on the largest unicast and reduce
//! phases (its time against the scheduler's). Quality figures (horizon
//! against the bounds) are printed by `cargo xtask exchange --families`.

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ipu_exchange::generate::{
    GenConfig, generate_phase, grid_families, grid_phase, multicast_families, other_families,
    reduce_families, reduce_phase, seed_families,
};
use ipu_exchange::{Fabric, Phase, ScheduleConfig, check_schedule, schedule};

fn family(name_part: &str) -> Phase {
    let generated = seed_families()
        .into_iter()
        .chain(other_families())
        .chain(multicast_families())
        .find(|(name, _)| name.contains(name_part))
        .map(|(_, c): (String, GenConfig)| generate_phase(&c));
    let grid = || {
        grid_families()
            .into_iter()
            .find(|(name, _)| name.contains(name_part))
            .map(|(_, c)| grid_phase(&c))
    };
    generated.or_else(grid).unwrap_or_else(|| {
        reduce_families()
            .into_iter()
            .find(|(name, _)| name.contains(name_part))
            .map(|(_, c)| reduce_phase(&c))
            .expect("the family exists")
    })
}

fn config() -> ScheduleConfig {
    ScheduleConfig {
        verify: false,
        ..ScheduleConfig::default()
    }
}

fn bench_schedule(c: &mut Criterion) {
    let fabric = Fabric::ipu21().expect("device description");
    let config = config();
    let mut group = c.benchmark_group("schedule_and_encode");
    group.sample_size(10);
    for name in [
        "seed-1440x7296",
        "seed-9216x4032",
        "seed-104868x1152",
        "seed-586368x13248",
        "multicast-8-33534",
        "multicast-400-4000",
        "reduce-mlp",
        "paired-100-17496",
        "grid-gemm-12x8",
    ] {
        let phase = family(name);
        group.bench_function(name, |b| {
            b.iter_batched(
                || (),
                |()| schedule(&phase, &fabric, &config).expect("schedules"),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

fn bench_check(c: &mut Criterion) {
    let fabric = Fabric::ipu21().expect("device description");
    let mut group = c.benchmark_group("check");
    group.sample_size(10);
    for name in ["seed-586368x13248", "reduce-mlp"] {
        let phase = family(name);
        let s = schedule(&phase, &fabric, &config()).expect("schedules");
        group.bench_function(name, |b| {
            b.iter(|| check_schedule(&phase, &fabric, s.rows()).is_ok())
        });
    }
    group.finish();
}

criterion_group!(benches, bench_schedule, bench_check);
criterion_main!(benches);
