//! Criterion benchmarks: scheduling and encoding generated phases shaped
//! like the seed log's (1472 tiles, 10^3 to 6·10^5 transfers), and the
//! checker on the largest one. Quality figures (horizon against the bounds)
//! are printed by `cargo xtask exchange --families`.

// criterion_group! generates undocumented public items.
#![allow(missing_docs)]

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ipu_exchange::generate::{GenConfig, generate_phase, other_families, seed_families};
use ipu_exchange::{Fabric, ScheduleConfig, check_schedule, schedule};

fn family(name_part: &str) -> GenConfig {
    seed_families()
        .into_iter()
        .chain(other_families())
        .find(|(name, _)| name.contains(name_part))
        .map(|(_, c)| c)
        .expect("the family exists")
}

fn bench_schedule(c: &mut Criterion) {
    let fabric = Fabric::ipu21().expect("device description");
    let config = ScheduleConfig::default();
    let mut group = c.benchmark_group("schedule_and_encode");
    group.sample_size(10);
    for name in [
        "seed-1440x7296",
        "seed-9216x4032",
        "seed-104868x1152",
        "seed-586368x13248",
        "multicast-8-33534",
        "paired-100-17496",
    ] {
        let phase = generate_phase(&family(name));
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
    let phase = generate_phase(&family("seed-586368x13248"));
    let s = schedule(&phase, &fabric, &ScheduleConfig::default()).expect("schedules");
    let mut group = c.benchmark_group("check");
    group.sample_size(10);
    group.bench_function("seed-586368x13248", |b| {
        b.iter(|| check_schedule(&phase, &fabric, s.rows()).is_ok())
    });
    group.finish();
}

criterion_group!(benches, bench_schedule, bench_check);
criterion_main!(benches);
