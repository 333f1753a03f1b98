//! `cargo xtask run-package DIR [--inputs seed|FILE] [--seed N]` and
//! `cargo xtask inspect-package DIR`.
//!
//! `run-package` runs a package on the tile model and the reference
//! evaluation of the fixture it was built from, on the same inputs and
//! weights (generated from a seed, or inputs read from a safetensors-style
//! FILE), and prints per output the largest absolute and relative errors,
//! the normalised RMS error and pass/fail under the reference's graph
//! tolerance for the output's precision. Exit status 0 only if every output
//! passes. A `profile` line on stderr says where the tile model's time
//! went (step kinds, and per codelet kind the time summed over threads). A
//! failed run ends with an `error:` line naming the failing outputs.
//! `inspect-package` recovers, reads and validates the package exactly as
//! `run-package` does (`Package::read`, which checks every file against
//! the manifest and then `Package::validate`), prints the manifest summary
//! and `valid=true`, or one `problem:` line per validation problem, an
//! `error:` line and `valid=false` with exit status 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ipu_package::graph::{parse_fixture, safetensors, values};
use ipu_package::package::{Package, PackageIoError};
use ipu_sim::reference::compare::{Tolerance, compare};
use ipu_sim::tiles::{CODELET_KINDS, RunStats};

/// The package directory, the first argument.
fn package_dir(args: &[String]) -> Result<PathBuf, String> {
    let dir = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .ok_or("give the package directory")?;
    Ok(PathBuf::from(dir))
}

/// Recovers and reads the package at `dir`, as both commands do.
fn read_dir(dir: &Path) -> Result<Package, ReadFailure> {
    // A write that was killed may have left the earlier package aside.
    Package::recover(dir).map_err(ReadFailure::Recover)?;
    Package::read(dir).map_err(ReadFailure::Read)
}

/// Why a package could not be read.
enum ReadFailure {
    Recover(PackageIoError),
    Read(PackageIoError),
}

impl ReadFailure {
    fn message(&self, dir: &Path) -> String {
        match self {
            ReadFailure::Recover(e) => format!("recovering {}: {e}", dir.display()),
            ReadFailure::Read(e) => format!("reading {}: {e}", dir.display()),
        }
    }
}

fn read_package(args: &[String]) -> Result<(PathBuf, Package), String> {
    let dir = package_dir(args)?;
    let package = read_dir(&dir).map_err(|f| f.message(&dir))?;
    Ok((dir, package))
}

fn option<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

pub fn run(args: &[String]) -> Result<ExitCode, String> {
    let (dir, package) = read_package(args)?;
    let seed: u64 = option(args, "--seed")
        .map(str::parse)
        .transpose()
        .map_err(|e| format!("--seed: {e}"))?
        .unwrap_or(7);
    let inputs = match option(args, "--inputs").unwrap_or("seed") {
        "seed" => Inputs::Seed,
        file => Inputs::File(PathBuf::from(file)),
    };
    let checked = check(&dir, &package, seed, &inputs)?;
    for line in &checked.lines {
        println!("{line}");
    }
    eprintln!("{}", profile(&checked.stats));
    println!(
        "result={} tile_model_ms={} reference_ms={}",
        if checked.pass { "pass" } else { "fail" },
        checked.tile_model.as_millis(),
        checked.reference.as_millis()
    );
    if checked.pass {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(failure_reason(&checked.lines))
    }
}

/// Why a run failed, from its output lines: the outputs that failed.
fn failure_reason(lines: &[String]) -> String {
    let failed: Vec<&str> = lines
        .iter()
        .filter(|l| l.ends_with("result=fail") || l.ends_with(" missing"))
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|w| w.strip_prefix("output="))
        .collect();
    format!(
        "{} of {} output(s) outside the graph tolerance or missing: {}",
        failed.len(),
        lines.len(),
        failed.join(", ")
    )
}

/// Where the inputs of a run come from (weights always come from the seed).
#[derive(Debug)]
pub enum Inputs {
    /// Generated from the seed.
    Seed,
    /// Read from a safetensors-style file.
    File(PathBuf),
}

/// A package run on the tile model and compared with the reference.
#[derive(Debug)]
pub struct Checked {
    /// One line per graph output: its errors and verdict.
    pub lines: Vec<String>,
    /// Whether every output passed.
    pub pass: bool,
    /// Wall time of the tile model.
    pub tile_model: Duration,
    /// Wall time of the reference evaluation.
    pub reference: Duration,
    /// Where the tile model's time went.
    pub stats: RunStats,
}

/// Runs `package` (read from `dir`) on the tile model and the reference
/// evaluation of its stored fixture, on the same inputs and weights, and
/// compares every output under the graph tolerance of its precision.
pub fn check(dir: &Path, package: &Package, seed: u64, inputs: &Inputs) -> Result<Checked, String> {
    let fixture = package
        .fixture
        .as_deref()
        .ok_or("the package does not carry its fixture; rebuild it with build-package")?;
    let graph = parse_fixture(fixture).map_err(|e| format!("the package's fixture: {e}"))?;
    let mut values = values::generate_weights(&graph, seed);
    match inputs {
        Inputs::Seed => values.extend(values::generate_inputs(&graph, seed)),
        Inputs::File(file) => {
            let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
            values.extend(
                safetensors::read_values(&graph, &bytes)
                    .map_err(|e| format!("{}: {e}", file.display()))?,
            );
        }
    }
    let start = Instant::now();
    let (device, stats) = ipu_sim::tiles::run_package_with_stats(package, &graph, &values)
        .map_err(|e| format!("running {}: {e}", dir.display()))?;
    let tile_model = start.elapsed();
    let start = Instant::now();
    let reference = ipu_sim::evaluate(&graph, &values).map_err(|e| format!("reference: {e}"))?;
    let reference_time = start.elapsed();
    let mut pass = true;
    let mut lines = Vec::new();
    for output in graph.outputs() {
        let t = graph.tensor(output);
        let (Some(r), Some(d)) = (reference.get(output), device.get(output)) else {
            lines.push(format!("output={} missing", t.name()));
            pass = false;
            continue;
        };
        let c = compare(r, d, Tolerance::graph(t.precision()));
        pass &= c.pass;
        lines.push(format!(
            "output={} elements={} max_abs={:.6} max_rel={:.6} rms_error={:.6} tolerance=graph({:?}) result={}",
            t.name(),
            c.elements,
            c.max_abs,
            c.max_rel,
            c.rms_error,
            t.precision(),
            if c.pass { "pass" } else { "fail" }
        ));
    }
    Ok(Checked {
        lines,
        pass,
        tile_model,
        reference: reference_time,
        stats,
    })
}

/// One line saying where the tile model's time went: wall times of the
/// step kinds, and per codelet kind the calls and the time summed over
/// worker threads.
pub fn profile(s: &RunStats) -> String {
    let ms = |d: Duration| d.as_millis();
    let mut line = format!(
        "profile setup_ms={} load_ms={} compute_ms={} exchange_ms={} exchange_steps={} exchange_words={} outputs_ms={}",
        ms(s.setup),
        ms(s.load),
        ms(s.compute),
        ms(s.exchange),
        s.exchange_steps,
        s.exchange_words,
        ms(s.outputs)
    );
    for (name, k) in CODELET_KINDS.iter().zip(&s.codelets) {
        if k.calls > 0 {
            line.push_str(&format!(" {name}={}calls/{}ms", k.calls, ms(k.busy)));
        }
    }
    line
}

pub fn inspect(args: &[String]) -> Result<ExitCode, String> {
    // The same recovery, reading and validation as run-package: a package
    // it refuses is never called valid here.
    let dir = package_dir(args)?;
    let package = match read_dir(&dir) {
        Ok(package) => package,
        Err(failure) => {
            if let ReadFailure::Read(PackageIoError::Invalid { errors, .. }) = &failure {
                for e in errors {
                    println!("problem: {e}");
                }
            }
            eprintln!("error: {}", failure.message(&dir));
            println!("valid=false");
            return Ok(ExitCode::FAILURE);
        }
    };
    let s = &package.manifest.summary;
    println!(
        "package {} (format {}, target {})",
        dir.display(),
        package.manifest.format_version,
        package.manifest.target
    );
    println!(
        "model={} tiles={} requests={} kernels={}",
        package.manifest.name, s.tile_count, s.requests, s.kernels
    );
    println!(
        "peak_bytes={} min_headroom_bytes={} (tile {}) max_support_bytes={}",
        s.peak_bytes, s.min_headroom_bytes, s.min_headroom_tile, s.max_support_bytes
    );
    println!(
        "exchange phases={} horizon={} endpoint_bound={} stronger_bound={}",
        package.phases.len(),
        s.exchange_horizon,
        s.exchange_endpoint_bound,
        s.exchange_stronger_bound
    );
    for f in &package.manifest.files {
        println!("file {} {} bytes", f.name, f.bytes);
    }
    if package.fixture.is_none() {
        // Valid as a package, but run-package would refuse it.
        println!("problem: the package carries no fixture.json, which run-package needs");
        eprintln!(
            "error: {} has no fixture; rebuild it with build-package",
            dir.display()
        );
        println!("valid=false");
        return Ok(ExitCode::FAILURE);
    }
    println!("valid=true");
    Ok(ExitCode::SUCCESS)
}
