//! `cargo xtask build-package`: build a model fixture into a package.
//!
//! With no arguments it builds the embedded default, SigLIP so400m at batch
//! 2 on 1472 tiles. Logs go to stderr in tracing-subscriber's fmt layout
//! (`RUST_LOG` honoured, `info` by default); the last lines summarise the
//! build. The exit status is 0 only when the package was built and written;
//! arguments the device or the writer cannot take (`--tiles` outside the
//! device, `--batch 0`, an `--out` that is not a package directory, a
//! `--param` the fixture does not have or rejects) are refused before any
//! work with exit status 2, so a mistake costs no build time and never
//! touches what is already on disk. `--param NAME=VALUE` overrides a
//! fixture parameter (`--batch B` is short for `--param batch=B`); the
//! package stores the fixture with the overridden values, so `run-package`
//! checks it against the same graph.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use ipu_exchange::Fabric;
use ipu_package::build::{BuildConfig, build_package};

use crate::params::{merge, parse_param, resolve};

/// The embedded default workload.
pub(crate) const SIGLIP: &str = include_str!("../../fixtures/siglip-so400m-b2.json");

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask build-package",
    about = "Build a model fixture into an IPU21 package"
)]
struct Args {
    /// The fixture (default: the embedded SigLIP so400m b2).
    #[arg(long)]
    fixture: Option<PathBuf>,
    /// Tiles of the target (1 to the device's 1472).
    #[arg(long, default_value_t = 1472, value_parser = parse_tiles)]
    tiles: u32,
    /// Override the fixture's `batch` parameter (at least 1); short for
    /// `--param batch=B`.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    batch: Option<u64>,
    /// Override a fixture parameter, e.g. `--param layers=1` (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    params: Vec<(String, u64)>,
    /// Where to write the package.
    #[arg(long, default_value = "out/package")]
    out: PathBuf,
    /// The kernel cache root (default: $IPU_KERNEL_CACHE, then the XDG cache).
    #[arg(long)]
    kernel_cache: Option<PathBuf>,
    /// Worker threads (default: all cores). The package does not depend on it.
    #[arg(long)]
    jobs: Option<usize>,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

pub fn run(args: &[String]) -> Result<ExitCode, String> {
    let args: Args = match crate::parse_args("build-package", args) {
        Ok(a) => a,
        Err(code) => return Ok(code),
    };
    check_out(&args.out)?;
    crate::logging::init(&args.log_format);
    if let Some(jobs) = args.jobs {
        rayon::ThreadPoolBuilder::new()
            .num_threads(jobs.max(1))
            .build_global()
            .map_err(|e| format!("cannot start {jobs} worker threads: {e}"))?;
    }
    let text = match &args.fixture {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        None => SIGLIP.to_owned(),
    };
    let mut overrides: Vec<(String, u64)> = args
        .batch
        .map(|b| ("batch".to_owned(), b))
        .into_iter()
        .collect();
    overrides.extend(args.params.iter().cloned());
    let (graph, stored) = match merge(&overrides).and_then(|o| resolve(&text, &o)) {
        Ok(resolved) => resolved,
        Err(e) if e.is_usage() => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
        Err(e) => return Err(e.to_string()),
    };
    let config = BuildConfig {
        tiles: args.tiles,
        kernel_cache: args.kernel_cache.clone(),
        ..BuildConfig::default()
    };
    let start = Instant::now();
    let package = match build_package(&graph, &config) {
        Ok(mut p) => {
            p.fixture = Some(stored);
            p
        }
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!(
                "result=does-not-fit-or-failed fixture={} tiles={} elapsed_ms={}",
                graph.name(),
                args.tiles,
                start.elapsed().as_millis()
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    package
        .write(&args.out)
        .map_err(|e| format!("writing the package: {e}"))?;
    let s = &package.manifest.summary;
    let ratio = s.exchange_horizon as f64 / s.exchange_endpoint_bound.max(1) as f64;
    eprintln!("package written to {}", args.out.display());
    eprintln!(
        "result={} model={} tiles={} requests={} peak_bytes={} min_headroom_bytes={} (tile {}) max_support_bytes={}",
        if s.fits { "fits" } else { "does-not-fit" },
        graph.name(),
        s.tile_count,
        s.requests,
        s.peak_bytes,
        s.min_headroom_bytes,
        s.min_headroom_tile,
        s.max_support_bytes
    );
    eprintln!(
        "exchange horizon={} endpoint_bound={} stronger_bound={} ratio={ratio:.4} kernels={} transient_budget={}",
        s.exchange_horizon,
        s.exchange_endpoint_bound,
        s.exchange_stronger_bound,
        s.kernels,
        s.transient_budget
    );
    let phases: Vec<String> = s
        .phase_ms
        .iter()
        .map(|(p, ms)| format!("{p}={ms}ms"))
        .collect();
    eprintln!(
        "phases {} total={}ms",
        phases.join(" "),
        start.elapsed().as_millis()
    );
    Ok(ExitCode::SUCCESS)
}

/// Parses `--tiles`. The pipeline rejects a tile count above the device's
/// only when it schedules the first exchange phase, after lowering and
/// placement, and then in terms of phases; checking here names the flag and
/// the limit before any work.
fn parse_tiles(text: &str) -> Result<u32, String> {
    let tiles: u32 = text.parse().map_err(|e| format!("{e}"))?;
    let device = Fabric::ipu21()
        .map_err(|e| format!("cannot read the IPU21 description: {e}"))?
        .tile_count();
    if (1..=device).contains(&tiles) {
        Ok(tiles)
    } else {
        Err(format!("the IPU21 has {device} tiles; give 1 to {device}"))
    }
}

/// Refuses an `--out` the package writer must not replace. The writer swaps
/// the new package in by renaming whatever is at `out` aside and deleting
/// it, so a mistyped `--out` naming a directory of other things would be
/// deleted; a file is renamed aside and left there, and the command fails
/// after the package has taken its place; and a path without a final name
/// (`.`, `/`) fails the rename and leaves the staging directory behind.
/// Only a missing path, an empty directory or an earlier package (it has a
/// manifest) may be replaced. Checked before the build, so a mistake costs
/// no build time.
fn check_out(out: &Path) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            "--out {}: {why}; give a new directory, an empty one or an earlier package",
            out.display()
        ))
    };
    if out.file_name().is_none() {
        return refuse("it has no final name (`.`, `..` or a root) to swap a package in under");
    }
    let meta = match std::fs::metadata(out) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("--out {}: {e}", out.display())),
    };
    if !meta.is_dir() {
        return refuse("it exists and is not a directory");
    }
    let empty = std::fs::read_dir(out)
        .map_err(|e| format!("--out {}: {e}", out.display()))?
        .next()
        .is_none();
    if empty || out.join("manifest.json").is_file() {
        Ok(())
    } else {
        refuse("it holds no package (no manifest.json) and the build would replace it")
    }
}
