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
//! touches what is already on disk. `--device FILE` builds for another
//! device description (default: the built-in IPU21 of the C600 card,
//! `device/ipu21.toml`). `--param NAME=VALUE` overrides a
//! fixture parameter (`--batch B` is short for `--param batch=B`); the
//! package stores the fixture with the overridden values, so `run-package`
//! checks it against the same graph.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use ipu_kernels::KernelCache;
use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_target::Target;

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
    /// The device description (default: the built-in IPU21 of the C600).
    #[arg(long, value_name = "FILE")]
    device: Option<PathBuf>,
    /// Tiles to use (default: every tile of the device).
    #[arg(long)]
    tiles: Option<u32>,
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
    let target = match crate::device::read(args.device.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if let Err(e) = check_tiles(args.tiles, &target) {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
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
    let cache = match &args.kernel_cache {
        Some(root) => KernelCache::open(root.clone()),
        None => KernelCache::from_env(),
    }
    .map_err(|e| format!("the kernel cache: {e}"))?;
    let stages = Stages::builtin(Box::new(cache));
    let tiles = args.tiles.unwrap_or(target.tile_count());
    let config = BuildConfig {
        target,
        tiles: Some(tiles),
        ..BuildConfig::default()
    };
    let start = Instant::now();
    let package = match build_package(&graph, &config, &stages) {
        Ok(mut p) => {
            p.fixture = Some(stored);
            p
        }
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!(
                "result=does-not-fit-or-failed fixture={} tiles={} elapsed_ms={}",
                graph.name(),
                tiles,
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
        // A package exists only when every shard was placed and checked.
        "result=fits model={} tiles={} requests={} peak_bytes={} min_headroom_bytes={} (tile {}) max_support_bytes={}",
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
    if let Some(profile) = &package.profile {
        eprintln!("{}", profile.summary_line());
    }
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

/// Checks `--tiles` against the device before any work, naming the flag
/// and the limit.
fn check_tiles(tiles: Option<u32>, target: &Target) -> Result<(), String> {
    let available = target.tile_count();
    match tiles {
        Some(t) if !(1..=available).contains(&t) => Err(format!(
            "'--tiles {t}': the device {} has {available} tiles; give 1 to {available}",
            target.name()
        )),
        _ => Ok(()),
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
