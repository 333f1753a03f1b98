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
//!
//! `--write-phases FILE` also writes the exchange phases the build
//! scheduled, for `cargo xtask exchange FILE` (`record_phases`).
//!
//! `--checkpoint DIR` builds a Hugging Face SigLIP checkpoint instead of a
//! fixture (`docs/SIGLIP.md`): the graph comes from its `config.json`
//! with the default fixture's precision layout, every FP8 scale is chosen
//! from data (`ipu_package::checkpoint::calibrate`: weights from their
//! values, activations from a reference run on the `--calibrate` images or
//! the built-in synthetic ones), and the package carries the quantised
//! weights (`weights.safetensors`), the model and preprocessing
//! (`siglip.json`) and every precision decision (`precision.json`). The
//! per-tensor table (precision, scale, saturated fraction, quantisation
//! error) goes to stderr; a tensor saturating beyond the threshold is a
//! warning, and with `--strict` an error (exit status 1, nothing
//! written). If the build does not fit with F16 groups kept, calibration
//! runs again without them and the package records why.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use ipu_kernels::KernelCache;
use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_target::Target;

use ipu_package::build::BuildError;
use ipu_package::checkpoint::report::PrecisionReport;
use ipu_package::checkpoint::{
    Calibration, CalibrationInputs, CalibrationOptions, Checkpoint, F16Groups, ImportConfig,
    PackagedModel, PrecisionPolicy, calibrate, import_checkpoint, random_checkpoint,
};
use ipu_package::graph::parse_fixture;
use ipu_package::package::{Package, PackageWeights};

use crate::params::{merge, parse_param, resolve};
use crate::record_phases::{self, Recorded, Recorder};

/// The embedded default workload.
pub(crate) const SIGLIP: &str = include_str!("../../fixtures/siglip-so400m-b2.json");

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask build-package",
    about = "Build a model fixture into an IPU21 package"
)]
struct Args {
    /// The fixture (default: the embedded SigLIP so400m b2).
    #[arg(long, conflicts_with = "checkpoint")]
    fixture: Option<PathBuf>,
    /// A Hugging Face SigLIP checkpoint directory to build instead of a
    /// fixture (batch 1 unless `--batch`).
    #[arg(long, value_name = "DIR", conflicts_with = "params")]
    checkpoint: Option<PathBuf>,
    /// Calibration images for a checkpoint's FP8 activation scales
    /// (default: four built-in synthetic images).
    #[arg(long, value_name = "IMAGE", num_args = 1.., requires = "checkpoint")]
    calibrate: Vec<PathBuf>,
    /// With `--checkpoint`: draw the weights at random with realistic
    /// spread from this seed instead of reading them (the directory needs
    /// only config.json); for checking that a configuration fits.
    #[arg(long, value_name = "SEED", requires = "checkpoint")]
    random_weights: Option<u64>,
    /// Refuse to write a checkpoint package in which any tensor saturates
    /// beyond the threshold on the calibration inputs.
    #[arg(long, requires = "checkpoint")]
    strict: bool,
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
    /// Also write the exchange phases the build scheduled, as a snapshot
    /// for `cargo xtask exchange FILE`.
    #[arg(long, value_name = "FILE")]
    write_phases: Option<PathBuf>,
}

pub fn run(args: &[String]) -> Result<ExitCode, String> {
    let args: Args = match crate::parse_args("build-package", args) {
        Ok(a) => a,
        Err(code) => return Ok(code),
    };
    check_out(&args.out)?;
    if let Some(file) = &args.write_phases {
        record_phases::check_file(file)?;
    }
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
    if let Some(dir) = &args.checkpoint {
        return build_checkpoint(&args, dir, target);
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
    let mut stages = Stages::builtin(Box::new(kernel_cache(&args)?));
    let recorded = args.write_phases.as_ref().map(|_| {
        let phases = Recorded::default();
        let inner = std::mem::replace(
            &mut stages.scheduler,
            Box::new(ipu_exchange::BuiltinScheduler::default()),
        );
        stages.scheduler = Box::new(Recorder {
            inner,
            phases: phases.clone(),
        });
        phases
    });
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
    if let (Some(phases), Some(file)) = (&recorded, &args.write_phases) {
        let count = record_phases::write(phases, tiles, file)?;
        eprintln!("wrote {count} exchange phases to {}", file.display());
    }
    summarise(&package, &args.out, graph.name(), start);
    Ok(ExitCode::SUCCESS)
}

/// `build-package --checkpoint DIR`: calibrate, build, write (module
/// header).
fn build_checkpoint(args: &Args, dir: &Path, target: Target) -> Result<ExitCode, String> {
    let start = Instant::now();
    let batch = args.batch.unwrap_or(1);
    // The default fixture's layout of precisions: FP8 weights and casts
    // before every GEMM, F16 activations and softmax; calibration chooses
    // the scales.
    let template = parse_fixture(SIGLIP)
        .map_err(|e| format!("the embedded fixture: {e}"))
        .and_then(|g| PrecisionPolicy::from_graph(&g).map_err(|e| e.to_string()))?;
    let import = ImportConfig {
        batch,
        policy: template.clone(),
        name: None,
    };
    let imported = match args.random_weights {
        Some(seed) => random_checkpoint(dir, &import, seed),
        None => import_checkpoint(dir, &import),
    };
    let checkpoint = match imported {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let name = checkpoint.graph().name().to_owned();
    let mut options = CalibrationOptions::new(template);
    if !args.calibrate.is_empty() {
        options.inputs = CalibrationInputs::Images(args.calibrate.clone());
    }
    let mut calibration = run_calibration(&checkpoint, &options)?;
    if !report_calibration(calibration.report(), args.strict) {
        return Ok(ExitCode::FAILURE);
    }
    let tiles = args.tiles.unwrap_or(target.tile_count());
    let stages = Stages::builtin(Box::new(kernel_cache(args)?));
    let config = BuildConfig {
        target,
        tiles: Some(tiles),
        ..BuildConfig::default()
    };
    let kept_f16 = |c: &Calibration| c.report().groups.iter().any(|g| g.decision == "F16");
    let (model, graph, package) = loop {
        let model = PackagedModel::new(&checkpoint, &name, batch, &calibration)
            .map_err(|e| e.to_string())?;
        let graph = model.graph().map_err(|e| e.to_string())?;
        match build_package(&graph, &config, &stages) {
            Ok(p) => break (model, graph, p),
            Err(e @ BuildError::DoesNotFit { .. }) if kept_f16(&calibration) => {
                tracing::warn!(error = %e, "does not fit with F16 groups; calibrating again without them");
                options.f16_groups = F16Groups::Refused(format!(
                    "with them the package did not fit on {tiles} tiles ({e})"
                ));
                calibration = run_calibration(&checkpoint, &options)?;
            }
            Err(e) => {
                eprintln!("error: {e}");
                eprintln!(
                    "result=does-not-fit-or-failed model={name} tiles={tiles} elapsed_ms={}",
                    start.elapsed().as_millis()
                );
                return Ok(ExitCode::FAILURE);
            }
        }
    };
    let weights = checkpoint
        .weights_for(&graph)
        .map_err(|e| format!("the checkpoint's weights: {e}"))?;
    let mut package: Package = package;
    package.weights = Some(PackageWeights::encode(&graph, &weights).map_err(|e| e.to_string())?);
    package.siglip = Some(model.files());
    package
        .write(&args.out)
        .map_err(|e| format!("writing the package: {e}"))?;
    summarise(&package, &args.out, graph.name(), start);
    Ok(ExitCode::SUCCESS)
}

fn run_calibration(
    checkpoint: &Checkpoint,
    options: &CalibrationOptions,
) -> Result<Calibration, String> {
    let start = Instant::now();
    let calibration = calibrate(checkpoint, options, &ipu_sim::ReferenceEvaluator)
        .map_err(|e| format!("calibration: {e}"))?;
    tracing::info!(
        inputs = calibration.report().calibration.inputs.len(),
        elapsed_ms = start.elapsed().as_millis() as u64,
        "calibrated FP8 scales"
    );
    Ok(calibration)
}

/// Prints the per-tensor table and the F16 group decisions to stderr and
/// the saturation warnings; `false` if `strict` and a tensor saturates
/// beyond the threshold.
fn report_calibration(report: &PrecisionReport, strict: bool) -> bool {
    eprintln!(
        "calibration inputs: {}",
        report.calibration.inputs.join(" ")
    );
    eprintln!(
        "{:<18} {:<10} {:<5} {:>5} {:>10} {:>10} {:>10}",
        "tensor", "kind", "prec", "scale", "max_abs", "saturated", "error"
    );
    for t in &report.tensors {
        if t.kind == "view" {
            continue;
        }
        eprintln!(
            "{:<18} {:<10} {:<5} {:>5} {:>10.4} {:>10.2e} {:>10}",
            t.tensor,
            t.kind,
            t.precision,
            t.scale.map_or_else(|| "-".to_owned(), |s| s.to_string()),
            t.max_abs,
            t.saturated,
            t.error
                .map_or_else(|| "-".to_owned(), |e| format!("{e:.2e}"))
        );
    }
    for g in &report.groups {
        eprintln!("f16 group {}: {} ({})", g.group, g.decision, g.reason);
    }
    for o in &report.outputs {
        eprintln!(
            "calibration output {}: relative_rms={:.4} cosine={:.6} vs the F32 graph",
            o.output, o.relative_rms, o.cosine
        );
    }
    let saturating = report.saturating();
    for t in &saturating {
        tracing::warn!(
            tensor = %t.tensor,
            saturated = t.saturated,
            threshold = report.calibration.saturation_threshold,
            "tensor saturates beyond the threshold on the calibration inputs"
        );
    }
    if strict && !saturating.is_empty() {
        eprintln!(
            "error: --strict: {} tensor(s) saturate beyond {} on the calibration inputs (first: {}); nothing written",
            saturating.len(),
            report.calibration.saturation_threshold,
            saturating[0].tensor
        );
        return false;
    }
    true
}

fn kernel_cache(args: &Args) -> Result<KernelCache, String> {
    match &args.kernel_cache {
        Some(root) => KernelCache::open(root.clone()),
        None => KernelCache::from_env(),
    }
    .map_err(|e| format!("the kernel cache: {e}"))
}

/// The summary lines of a written package.
fn summarise(package: &Package, out: &Path, model: &str, start: Instant) {
    let s = &package.manifest.summary;
    let ratio = s.exchange_horizon as f64 / s.exchange_endpoint_bound.max(1) as f64;
    eprintln!("package written to {}", out.display());
    eprintln!(
        // A package exists only when every shard was placed and checked.
        "result=fits model={} tiles={} requests={} peak_bytes={} min_headroom_bytes={} (tile {}) max_support_bytes={}",
        model,
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
