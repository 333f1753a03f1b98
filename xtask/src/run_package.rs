//! `cargo xtask run-package DIR [--inputs seed|FILE] [--seed N]` and
//! `cargo xtask inspect-package DIR`.
//!
//! `run-package` runs a package on the tile model and the reference
//! evaluation of the fixture it was built from, on the same inputs and
//! weights (generated from a seed, or inputs read from a safetensors-style
//! FILE), and prints per output the largest absolute and relative errors,
//! the normalised RMS error and pass/fail under the reference's graph
//! tolerance for the output's precision. Every op is also checked against
//! the reference on the device's own inputs as the tile model runs (the
//! first op out of its tight tolerance stops the run, naming the op, its
//! tensor and the worst element). Exit status 0 only if every op and
//! output passes. A `profile` line on stderr says where the tile model's time
//! went (step kinds, and per codelet kind the time summed over threads). `inspect-package` prints the manifest summary and validates the
//! package (every file at its recorded size, every buffer placed inside tile
//! memory, phases and rows agree).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ipu_package::graph::{parse_fixture, safetensors, values};
use ipu_package::package::Package;
use ipu_sim::reference::compare::{Tolerance, compare};
use ipu_sim::tiles::{CODELET_KINDS, RunStats};

fn read_package(args: &[String]) -> Result<(PathBuf, Package), String> {
    let dir = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .ok_or("give the package directory")?;
    let dir = PathBuf::from(dir);
    // A write that was killed may have left the earlier package aside.
    Package::recover(&dir).map_err(|e| format!("recovering {}: {e}", dir.display()))?;
    let package = Package::read(&dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
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
        "result={} tile_model_ms={} op_check_ms={} ops_checked={} reference_ms={}",
        if checked.pass { "pass" } else { "fail" },
        checked.tile_model.as_millis(),
        checked.stats.op_check.as_millis(),
        checked.stats.ops_checked,
        checked.reference.as_millis()
    );
    Ok(if checked.pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
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
    /// Wall time of the tile model, without the per-op check.
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
    // Sizes first: an edited fixture must not make us generate values for
    // tensors the package never holds.
    ipu_sim::tiles::check_fixture(package, &graph)
        .map_err(|e| format!("running {}: {e}", dir.display()))?;
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
        .map_err(|e| format!("running {}: {}", dir.display(), error_chain(&e)))?;
    // The per-op check runs inside the tile model's run; its time is
    // reported on its own.
    let tile_model = start.elapsed().saturating_sub(stats.op_check);
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

/// An error and its causes, joined into one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line
}

/// One line saying where the tile model's time went: wall times of the
/// step kinds, and per codelet kind the calls and the time summed over
/// worker threads.
pub fn profile(s: &RunStats) -> String {
    let ms = |d: Duration| d.as_millis();
    let mut line = format!(
        "profile setup_ms={} load_ms={} compute_ms={} exchange_ms={} exchange_steps={} exchange_words={} outputs_ms={} op_check_ms={} ops_checked={}",
        ms(s.setup),
        ms(s.load),
        ms(s.compute),
        ms(s.exchange),
        s.exchange_steps,
        s.exchange_words,
        ms(s.outputs),
        ms(s.op_check),
        s.ops_checked
    );
    for (name, k) in CODELET_KINDS.iter().zip(&s.codelets) {
        if k.calls > 0 {
            line.push_str(&format!(" {name}={}calls/{}ms", k.calls, ms(k.busy)));
        }
    }
    line
}

pub fn inspect(args: &[String]) -> Result<ExitCode, String> {
    // The same reading and validation as run-package: a package it refuses
    // is never called valid here.
    let (dir, package) = match read_package(args) {
        Ok(read) => read,
        Err(e) => {
            eprintln!("error: {e}");
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
    println!("valid=true");
    Ok(ExitCode::SUCCESS)
}
