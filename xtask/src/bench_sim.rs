//! `cargo xtask bench-sim [--layers N] [--keep DIR] [--seed S]`: how long
//! the tile model takes on SigLIP so400m b2 at 1472 tiles, and whether it
//! matches the reference.
//!
//! It builds the embedded SigLIP fixture with `layers=N` (default 1) on
//! 1472 tiles into a temporary directory, or into `--keep DIR`, where a
//! package built earlier from the same fixture and parameters is reused
//! instead of rebuilt. Then it runs the package on the tile model and the
//! reference, as `run-package` does, and prints per output the errors and
//! verdict, the wall times of the build, the tile model and the reference,
//! the tile model's time per encoder layer (the iterations of the
//! program's layer repeat), and the whole model's time: measured when
//! `--layers` is the fixture's full 27, otherwise extrapolated from the
//! time per layer and labelled so. The tile model's times exclude the
//! per-op check, which runs on by default and is reported as
//! `op_check_s`. Not part of the test suite: a run takes minutes.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ipu_package::graph::{Graph, TensorId};
use ipu_package::package::Package;
use ipu_sim::tiles::RunStats;

use crate::build_package::{FixtureBuild, SIGLIP, build_fixture, summarise};
use crate::params::resolve;
use crate::run_package::{Inputs, check, profile};

/// Options of `bench-sim`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Encoder layers to build and run (the fixture has 27).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    layers: u64,
    /// Build into DIR and keep the package there; a package already in DIR
    /// built from the same fixture and parameters is reused.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Seed of the inputs and weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The kernel cache root (default: $IPU_KERNEL_CACHE, then the XDG cache).
    #[arg(long)]
    kernel_cache: Option<PathBuf>,
}

pub fn run(args: &Args) -> Result<ExitCode, String> {
    let full_layers = fixture_layers(SIGLIP)?;
    let (_, stored) =
        resolve(SIGLIP, &[("layers".to_owned(), args.layers)]).map_err(|e| e.to_string())?;
    // The temporary directory lives until the end of the run.
    let temporary;
    let out = match &args.keep {
        Some(dir) => dir.clone(),
        None => {
            temporary = tempfile::tempdir()
                .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
            temporary.path().join("package")
        }
    };
    let build = if reusable(&out, &stored) {
        eprintln!("bench-sim: reusing the package in {}", out.display());
        None
    } else {
        let start = Instant::now();
        build(&out, args.layers, args.kernel_cache.as_deref())
            .map_err(|e| format!("building SigLIP with layers={}: {e}", args.layers))?;
        Some(start.elapsed())
    };
    let package = Package::read(&out).map_err(|e| format!("reading {}: {e}", out.display()))?;
    let checked = check(&out, &package, args.seed, &Inputs::Seed)?;
    eprintln!("{}", profile(&checked.stats));

    println!(
        "bench-sim model=SigLIP-so400m-b2 tiles={} layers={} seed={}",
        tiles(),
        args.layers,
        args.seed
    );
    for line in &checked.lines {
        println!("{line}");
    }
    let secs = |d: Duration| format!("{:.1}", d.as_secs_f64());
    match build {
        Some(d) => println!("build_s={} package={}", secs(d), out.display()),
        None => println!("build_s=reused package={}", out.display()),
    }
    println!(
        "tile_model_s={} op_check_s={} ops_checked={} reference_s={}",
        secs(checked.tile_model),
        secs(checked.stats.op_check),
        checked.stats.ops_checked,
        secs(checked.reference)
    );
    // CPU time does not grow with other processes' load: on an idle
    // two-core machine the wall time approaches half of it.
    if let Some(cpu) = checked.stats.cpu {
        let check = checked.stats.op_check_cpu.unwrap_or_default();
        println!(
            "tile_model_cpu_s={} op_check_cpu_s={} (all threads; load average at the end {})",
            secs(cpu.saturating_sub(check)),
            secs(check),
            std::fs::read_to_string("/proc/loadavg")
                .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|_| "unknown".to_owned())
        );
    }
    let graph = ipu_package::graph::parse_fixture(&stored).map_err(|e| format!("fixture: {e}"))?;
    match per_layer(&graph, &checked.stats) {
        Some(layer) => {
            let layers_time = layer.each * layer.count;
            let rest = checked.tile_model.saturating_sub(layers_time);
            println!(
                "tile_model_per_layer_s={} ({}; outside the layers {} s)",
                secs(layer.each),
                layer.how,
                secs(rest)
            );
            println!(
                "{}",
                whole_model_line(
                    args.layers,
                    full_layers,
                    checked.tile_model,
                    rest,
                    layer.each
                )
            );
        }
        None => println!(
            "tile_model_per_layer_s=n/a (neither a layer repeat in the program nor layer steps found); no extrapolation"
        ),
    }
    println!("result={}", if checked.pass { "pass" } else { "fail" });
    if checked.pass {
        Ok(ExitCode::SUCCESS)
    } else {
        Err("an output is outside the graph tolerance (see the output lines)".to_owned())
    }
}

/// The whole model's tile-model time: measured when the run had every
/// layer, otherwise extrapolated from the time per layer (and labelled so).
fn whole_model_line(
    layers: u64,
    full_layers: u32,
    measured: Duration,
    rest: Duration,
    each: Duration,
) -> String {
    let secs = |d: Duration| format!("{:.1}", d.as_secs_f64());
    if layers == u64::from(full_layers) {
        format!(
            "MEASURED whole model ({full_layers} layers), tile model: {} s (per-op check excluded)",
            secs(measured)
        )
    } else {
        format!(
            "EXTRAPOLATED whole model ({full_layers} layers), tile model: {} s = {} s outside the layers + {full_layers} x {} s per layer (not measured)",
            secs(rest + each * full_layers),
            secs(rest),
            secs(each)
        )
    }
}

/// The fixture's own `params.layers`.
fn fixture_layers(text: &str) -> Result<u32, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("the SigLIP fixture: {e}"))?;
    value
        .pointer("/params/layers")
        .and_then(serde_json::Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| "the SigLIP fixture has no integer params.layers".to_owned())
}

/// Whether `dir` holds a package for every tile of the built-in target built from exactly the
/// fixture text `stored`.
fn reusable(dir: &Path, stored: &str) -> bool {
    if !dir.join("manifest.json").is_file() {
        return false;
    }
    match Package::read(dir) {
        Ok(p) => p.fixture.as_deref() == Some(stored) && p.manifest.tile_count == tiles(),
        Err(_) => false,
    }
}

/// Builds SigLIP with `layers` layers on every tile of the IPU21 into
/// `out`, as `build-package` does, and prints the build's summary.
fn build(out: &Path, layers: u64, cache: Option<&Path>) -> Result<(), String> {
    let request = FixtureBuild {
        fixture: None,
        overrides: vec![("layers".to_owned(), layers)],
        device: None,
        tiles: Some(tiles()),
        kernel_cache: cache.map(Path::to_owned),
        out: out.to_owned(),
        write_phases: None,
        alloc_effort: None,
        max_replans: None,
        transient_budget: None,
        attention: ipu_package::lower::AttentionUnit::Auto,
    };
    eprintln!(
        "bench-sim: building SigLIP with layers={layers} on {} tiles into {}",
        tiles(),
        out.display()
    );
    let built = build_fixture(&request).map_err(|e| e.to_string())?;
    summarise(&built.package, out, &built.model, built.started);
    Ok(())
}

/// The tile model's time per encoder layer.
#[derive(Debug, PartialEq, Eq)]
struct LayerTime {
    /// Layers measured.
    count: u32,
    /// Mean time of one.
    each: Duration,
    /// How it was measured.
    how: String,
}

/// The tile model's time per layer: the mean iteration of the program's
/// outermost repeat with the most iterations when the program has one;
/// otherwise (a single layer is not lowered as a repeat) the steps whose
/// names mention a tensor of the graph's layer repeat, summed, over its
/// iteration count.
fn per_layer(graph: &Graph, stats: &RunStats) -> Option<LayerTime> {
    let mut totals: Vec<(&str, u32, Duration)> = Vec::new();
    for (name, _, d) in &stats.iterations {
        match totals.iter_mut().find(|(n, _, _)| n == name) {
            Some((_, count, total)) => {
                *count += 1;
                *total += *d;
            }
            None => totals.push((name, 1, *d)),
        }
    }
    if let Some((name, count, total)) = totals.into_iter().max_by_key(|(_, count, _)| *count) {
        return Some(LayerTime {
            count,
            each: total / count,
            how: format!("mean of {count} iteration(s) of repeat `{name}`"),
        });
    }
    let repeat = graph.repeats().iter().max_by_key(|r| r.count())?;
    let names: HashSet<&str> = repeat
        .tensors()
        .filter_map(|i| u32::try_from(i).ok())
        .map(|i| graph.tensor(TensorId::from_u32(i)).name())
        .collect();
    // A step is named `<what> <tensor>` or several such parts joined by
    // ` + `; the tensor is each part's last word.
    let in_layer = |step: &str| {
        step.split(" + ")
            .filter_map(|part| part.split_whitespace().last())
            .any(|t| names.contains(t))
    };
    let (steps, total) = stats
        .steps
        .iter()
        .filter(|(name, _)| in_layer(name))
        .fold((0usize, Duration::ZERO), |(n, t), (_, d)| (n + 1, t + *d));
    if steps == 0 || repeat.count() == 0 {
        return None;
    }
    Some(LayerTime {
        count: repeat.count(),
        each: total / repeat.count(),
        how: format!(
            "sum of the {steps} steps naming tensors of layer repeat `{}`, over its {} iteration(s)",
            repeat.name(),
            repeat.count()
        ),
    })
}

/// The tile count of the built-in target, which the benchmark builds for.
fn tiles() -> u32 {
    ipu_target::Target::ipu21().tile_count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_run_is_measured_and_a_partial_one_extrapolated() {
        let s = Duration::from_secs;
        let full = whole_model_line(27, 27, s(100), s(10), s(3));
        assert!(
            full.starts_with("MEASURED") && full.contains("100.0 s"),
            "{full}"
        );
        let partial = whole_model_line(2, 27, s(16), s(10), s(3));
        assert!(
            partial.starts_with("EXTRAPOLATED") && partial.contains("91.0 s"),
            "{partial}"
        );
    }

    #[test]
    fn the_fixture_has_27_layers() {
        assert_eq!(fixture_layers(SIGLIP), Ok(27));
    }

    #[test]
    fn per_layer_prefers_the_repeat_then_the_layer_steps() {
        let ms = Duration::from_millis;
        let text = include_str!("../../fixtures/micro-1l-h32.json");
        let graph = ipu_package::graph::parse_fixture(text).unwrap();
        let layer = graph.repeats().iter().max_by_key(|r| r.count()).unwrap();
        let tensor = graph
            .tensor(TensorId::from_u32(layer.tensors().start as u32))
            .name()
            .to_owned();
        let mut stats = RunStats {
            steps: vec![
                ("gemm embed.y".to_owned(), ms(5)),
                (format!("reduce {tensor} + add x9"), ms(7)),
                (format!("layer_norm {tensor}"), ms(3)),
                ("outputs".to_owned(), ms(1)),
            ],
            ..RunStats::default()
        };
        let by_steps = per_layer(&graph, &stats).unwrap();
        assert_eq!(
            (by_steps.count, by_steps.each),
            (layer.count(), ms(10) / layer.count())
        );
        stats.iterations = vec![
            ("head".to_owned(), 0, ms(50)),
            ("enc".to_owned(), 0, ms(20)),
            ("enc".to_owned(), 1, ms(40)),
        ];
        let by_repeat = per_layer(&graph, &stats).unwrap();
        assert_eq!((by_repeat.count, by_repeat.each), (2, ms(30)));
        assert!(per_layer(&graph, &RunStats::default()).is_none());
    }
}
