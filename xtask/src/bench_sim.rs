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
//! program's layer repeat), and the whole model's time extrapolated from
//! it. Not part of the test suite: a run takes minutes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use ipu_package::package::Package;

use crate::build_package::SIGLIP;
use crate::params::resolve;
use crate::run_package::{Inputs, check, profile};

/// The tile count of the benchmark: the whole IPU21.
const TILES: u32 = 1472;

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask bench-sim",
    about = "Time the tile model and the reference on SigLIP so400m b2 at 1472 tiles"
)]
struct Args {
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

pub fn run(args: &[String]) -> Result<ExitCode, String> {
    let argv = std::iter::once("bench-sim".to_owned()).chain(args.iter().cloned());
    let args = match Args::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return Ok(if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            });
        }
    };
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
        let code = build(&out, args.layers, args.kernel_cache.as_deref())?;
        if code != ExitCode::SUCCESS {
            eprintln!("error: building SigLIP with layers={} failed", args.layers);
            return Ok(code);
        }
        Some(start.elapsed())
    };
    let package = Package::read(&out).map_err(|e| format!("reading {}: {e}", out.display()))?;
    let checked = check(&out, &package, args.seed, &Inputs::Seed)?;
    eprintln!("{}", profile(&checked.stats));

    println!(
        "bench-sim model=SigLIP-so400m-b2 tiles={TILES} layers={} seed={}",
        args.layers, args.seed
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
        "tile_model_s={} reference_s={}",
        secs(checked.tile_model),
        secs(checked.reference)
    );
    match per_layer(&checked.stats.iterations) {
        Some((name, count, each)) => {
            let layers_time = each * count;
            let rest = checked.tile_model.saturating_sub(layers_time);
            let whole = rest + each * full_layers;
            println!(
                "tile_model_per_layer_s={} (mean of {count} iteration(s) of repeat `{name}`; outside the layers {} s)",
                secs(each),
                secs(rest)
            );
            println!(
                "EXTRAPOLATED whole model ({full_layers} layers), tile model: {} s = {} s outside the layers + {full_layers} x {} s per layer (not measured)",
                secs(whole),
                secs(rest),
                secs(each)
            );
        }
        None => println!(
            "tile_model_per_layer_s=n/a (the program has no layer repeat); no extrapolation"
        ),
    }
    println!("result={}", if checked.pass { "pass" } else { "fail" });
    Ok(if checked.pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
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

/// Whether `dir` holds a package for `TILES` tiles built from exactly the
/// fixture text `stored`.
fn reusable(dir: &Path, stored: &str) -> bool {
    if !dir.join("manifest.json").is_file() {
        return false;
    }
    match Package::read(dir) {
        Ok(p) => p.fixture.as_deref() == Some(stored) && p.manifest.tile_count == TILES,
        Err(_) => false,
    }
}

/// Builds SigLIP with `layers` layers into `out` through `build-package`.
fn build(out: &Path, layers: u64, cache: Option<&Path>) -> Result<ExitCode, String> {
    let mut argv = vec![
        "--tiles".to_owned(),
        TILES.to_string(),
        "--param".to_owned(),
        format!("layers={layers}"),
        "--out".to_owned(),
        out.to_string_lossy().into_owned(),
    ];
    if let Some(cache) = cache {
        argv.push("--kernel-cache".to_owned());
        argv.push(cache.to_string_lossy().into_owned());
    }
    eprintln!("bench-sim: build-package {}", argv.join(" "));
    crate::build_package::run(&argv)
}

/// The layer repeat's name, iteration count and mean iteration time: the
/// outermost repeat with the most iterations.
fn per_layer(iterations: &[(String, u32, Duration)]) -> Option<(String, u32, Duration)> {
    let mut totals: Vec<(String, u32, Duration)> = Vec::new();
    for (name, _, d) in iterations {
        match totals.iter_mut().find(|(n, _, _)| n == name) {
            Some((_, count, total)) => {
                *count += 1;
                *total += *d;
            }
            None => totals.push((name.clone(), 1, *d)),
        }
    }
    let (name, count, total) = totals.into_iter().max_by_key(|(_, count, _)| *count)?;
    Some((name, count, total / count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_has_27_layers() {
        assert_eq!(fixture_layers(SIGLIP), Ok(27));
    }

    #[test]
    fn per_layer_takes_the_longest_repeat() {
        let s = Duration::from_secs;
        let iterations = vec![
            ("head".to_owned(), 0, s(5)),
            ("layers".to_owned(), 0, s(2)),
            ("layers".to_owned(), 1, s(4)),
        ];
        assert_eq!(per_layer(&iterations), Some(("layers".to_owned(), 2, s(3))));
        assert_eq!(per_layer(&[]), None);
    }
}
