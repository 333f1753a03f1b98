//! `cargo xtask kernels`: figures for SigLIP's GEMM kernels.
//!
//! Prints the cost model's cycles and fraction of the AMP's peak for the
//! SigLIP so400m b2 package's encoder shards (qkv, out, fc) in FP8 and
//! F16; then, per seed variant, the code and object sizes, the cycles and
//! utilisation of each entry, and measured compile times: the host
//! toolchain alone, a miss in an empty cache (compile, check, atomic
//! write) and a hit in a populated cache (read and check). Times are the
//! median of repeated runs on this machine.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ipu_kernels::siglip::{SIGLIP_SHARDS, seed_variants, siglip_shape};
use ipu_kernels::{
    AmpModel, HostToolchain, KernelCache, Mode, PlanConfig, Toolchain, estimate_cycles,
    fetch_kernel, plan_variant,
};
use ipu_target::Target;

/// Repetitions per timing.
const RUNS: usize = 15;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn time(mut f: impl FnMut() -> Result<(), String>) -> Result<Duration, String> {
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed());
    }
    Ok(median(times))
}

/// The SigLIP shards' cycles and fraction of peak, FP8 and F16.
fn shard_figures() -> Result<(), String> {
    println!("SigLIP so400m b2 encoder shards per tile (initialise; accumulate in brackets):");
    println!(
        "{:<5} {:>13} {:<4} {:>6} {:>7} {:>9} {:>7} {:>13}",
        "shard", "rows x k x n", "ops", "passes", "cycles", "(acc)", "bound", "peak fraction"
    );
    for (name, rows, inner, columns) in SIGLIP_SHARDS {
        for fp8 in [true, false] {
            let shape = siglip_shape(rows, inner, columns, fp8);
            let v = plan_variant(&shape, rows, rows, &PlanConfig::default())
                .map_err(|e| e.to_string())?;
            let e = estimate_cycles(&v, rows, Mode::Initialise);
            let acc = estimate_cycles(&v, rows, Mode::Accumulate);
            let passes = inner.div_ceil(v.k()) * columns.div_ceil(v.c());
            println!(
                "{:<5} {:>13} {:<4} {:>6} {:>7} {:>9} {:>7} {:>12.1}%",
                name,
                format!("{rows}x{inner}x{columns}"),
                if fp8 { "FP8" } else { "F16" },
                passes,
                e.cycles,
                format!("({})", acc.cycles),
                e.lower_bound_cycles(),
                100.0 * e.utilisation()
            );
        }
    }
    println!();
    Ok(())
}

pub fn run() -> Result<ExitCode, String> {
    shard_figures()?;
    let target = Target::ipu21();
    let variants = seed_variants(&AmpModel::ipu21()).map_err(|e| e.to_string())?;
    let warm_dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let warm = KernelCache::open(warm_dir.path()).map_err(|e| e.to_string())?;
    println!(
        "{:<42} {:>6} {:>7} {:>10} {:>10} {:>10}",
        "variant", "code", "object", "toolchain", "cold cache", "warm cache"
    );
    let mut totals = [Duration::ZERO; 3];
    for v in &variants {
        let compiled = HostToolchain
            .compile(v, target)
            .map_err(|e| e.to_string())?;
        let toolchain = time(|| {
            HostToolchain
                .compile(v, target)
                .map(drop)
                .map_err(|e| e.to_string())
        })?;
        let fetch = |cache: &KernelCache| {
            fetch_kernel(v, target, &HostToolchain, cache)
                .map(drop)
                .map_err(|e| e.to_string())
        };
        let cold = time(|| {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            fetch(&KernelCache::open(dir.path()).map_err(|e| e.to_string())?)
        })?;
        fetch(&warm)?;
        let hot = time(|| fetch(&warm))?;
        totals[0] += toolchain;
        totals[1] += cold;
        totals[2] += hot;
        println!(
            "{:<42} {:>6} {:>7} {:>8.0}us {:>8.0}us {:>8.0}us",
            v.name(),
            compiled.metadata.code_bytes,
            compiled.object.len(),
            toolchain.as_secs_f64() * 1e6,
            cold.as_secs_f64() * 1e6,
            hot.as_secs_f64() * 1e6
        );
    }
    println!(
        "{:<42} {:>6} {:>7} {:>8.0}us {:>8.0}us {:>8.0}us",
        "all five",
        "",
        "",
        totals[0].as_secs_f64() * 1e6,
        totals[1].as_secs_f64() * 1e6,
        totals[2].as_secs_f64() * 1e6
    );
    println!();
    println!(
        "{:<42} {:>4} {:<10} {:>7} {:>7} {:>11}",
        "variant", "rows", "mode", "cycles", "bound", "utilisation"
    );
    for v in &variants {
        for entry in v.entry_points() {
            let e = estimate_cycles(v, entry.rows, entry.mode);
            println!(
                "{:<42} {:>4} {:<10} {:>7} {:>7} {:>11.3}",
                v.name(),
                entry.rows,
                entry.mode.name(),
                e.cycles,
                e.lower_bound_cycles(),
                e.utilisation()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
