//! `cargo xtask build-package`: build a model fixture into a package.
//!
//! With no arguments it builds the embedded default, SigLIP so400m at batch
//! 2 on 1472 tiles. The last lines on stderr summarise the build; the
//! build's log events appear with `-v` (`logging`). The exit status is 0 only when the package was built and written;
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
//! `--alloc-effort NODES` gives the placer's exact search that many nodes
//! on each tile no greedy pass places. A build that fails placement says
//! whether a tile was proved impossible (with the step and bytes of the
//! proof) or left undecided within that budget; `--write-failed-tile FILE`
//! then writes that tile's placement problem, which `cargo xtask alloc
//! tile FILE` places again in seconds, with as many nodes as asked.
//! `--max-replans N` lets a build whose placement fails plan again with
//! less memory up to N times instead of BuildConfig's default.
//! `--transient-budget KIB` sets the memory an operation's operands and
//! results may take on a tile while it runs (LowerConfig's 160 KiB by
//! default): where memory allows, more lets GEMMs run whole and attentions
//! in fewer passes, and where it does not, the replans cut it again.
//!
//! [`build_fixture`] is the fixture build itself, with every check above;
//! `bench-sim` and `hostile` call it too.
//!
//! `--checkpoint DIR` builds a Hugging Face checkpoint instead of a
//! fixture, SigLIP's here (`docs/SIGLIP.md`), ViT's and CLIP's in
//! `build_checkpoint` (`docs/MODELS.md`), chosen by `config.json`'s
//! `model_type`: the graph comes from its `config.json`
//! with the default fixture's precision layout, every FP8 scale is chosen
//! from data (`ipu_frontend::siglip::calibrate`: weights from their
//! values, activations from a reference run on the `--calibrate` images or
//! the built-in synthetic ones), and the package carries the quantised
//! weights (`weights.safetensors`), the graph (`fixture.json`), and the
//! model, its preprocessing and every precision decision (`model.json`). The
//! per-tensor table (precision, scale, saturated fraction, quantisation
//! error) goes to stderr; a tensor saturating beyond the threshold is a
//! warning, and with `--strict` an error (exit status 1, nothing
//! written). Calibration holds the package to a fidelity target
//! (`--min-cosine`), raising GEMM operands to F16 where FP8 misses it. If
//! the build does not fit with F16 groups kept or operands raised,
//! calibration runs again without them and the package records why
//! (`ipu_frontend::siglip::package_checkpoint`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use ipu_alloc::{BuiltinPlacer, PlaceConfig, TileProblem};
use ipu_kernels::KernelCache;
use ipu_package::build::{BuildConfig, BuildError, Stages, build_package};
use ipu_package::lower::{AttentionUnit, LowerConfig};
use ipu_target::{Target, TargetError};

use ipu_frontend::class_token::{self, family_name};
use ipu_frontend::siglip::report::PrecisionReport;
use ipu_frontend::siglip::text::{
    import_text_checkpoint, package_text, random_text_checkpoint, text_template,
};
use ipu_frontend::siglip::{
    Calibration, CalibrationInputs, CalibrationOptions, Checkpoint, GraphOptions, ImportConfig,
    PrecisionPolicy, build_graph, calibrate, import_checkpoint, package_checkpoint,
    random_checkpoint, read_config,
};
use ipu_frontend::{CheckpointKind, checkpoint_kind};
use ipu_package::PackageIoError;
use ipu_package::graph::parse_fixture;
use ipu_package::package::{ModelDescription, Package};

use crate::build_checkpoint::{build_and_write, calibrate_reported};
use crate::params::{ParamError, merge, parse_param, resolve};
use crate::record_phases::{self, Recorded, Recorder};

/// The embedded default workload.
pub(crate) const SIGLIP: &str = include_str!("../../fixtures/siglip-so400m-b2.json");

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The fixture (default: the embedded SigLIP so400m b2).
    #[arg(long, conflicts_with = "checkpoint")]
    pub(crate) fixture: Option<PathBuf>,
    /// A Hugging Face checkpoint directory (SigLIP, ViT, CLIP) to build instead of a
    /// fixture (batch 1 unless `--batch`).
    #[arg(long, value_name = "DIR", conflicts_with = "params")]
    pub(crate) checkpoint: Option<PathBuf>,
    /// Which tower of a checkpoint to build: `vision` (the default) or
    /// `text` (a full SiglipModel holds both; a SiglipTextModel only text)
    #[arg(long, value_enum, default_value = "vision", requires = "checkpoint")]
    pub(crate) tower: Tower,
    /// A checkpoint's precisions: `fp8` (FP8 weights and GEMM inputs with
    /// calibrated scales, the default fixture's layout), `fp8-values` (the
    /// same, and the encoder attention's values and probabilities in FP8:
    /// its values' product at the AMP's FP8 rate, faster at batches 1 to 3
    /// and slower from 4 on, `docs/PROFILE.md`) or `f16` (every weight F16,
    /// no FP8 cast: twice the weight bytes, for zero-shot probabilities to
    /// transformers' accuracy)
    #[arg(long, value_enum, default_value = "fp8", requires = "checkpoint")]
    pub(crate) precision: PrecisionChoice,
    /// Calibration images for a checkpoint's FP8 activation scales
    /// (default: four built-in synthetic images).
    #[arg(long, value_name = "IMAGE", num_args = 1.., requires = "checkpoint")]
    pub(crate) calibrate: Vec<PathBuf>,
    /// Calibration texts for the text tower's FP8 activation scales
    /// (repeatable; default: eight built-in captions).
    #[arg(long, value_name = "TEXT", requires = "checkpoint")]
    pub(crate) calibrate_text: Vec<String>,
    /// With `--checkpoint`: draw the weights at random with realistic
    /// spread from this seed instead of reading them (the directory needs
    /// only config.json); for checking that a configuration fits.
    #[arg(long, value_name = "SEED", requires = "checkpoint")]
    pub(crate) random_weights: Option<u64>,
    /// A checkpoint package's fidelity target: every output's cosine with
    /// the F32 model's at least this (default 0.995). Where FP8 misses it
    /// on the calibration inputs (with headroom for other inputs: they
    /// must reach 1 − (1 − COSINE)/2), GEMM operands are raised to F16 by
    /// measurement, and the precision report says which. `0` sets none.
    #[arg(long, value_name = "COSINE", requires = "checkpoint", value_parser = parse_cosine)]
    pub(crate) min_cosine: Option<f64>,
    /// Take a checkpoint's precisions from an earlier package of it (its
    /// directory or its model.json) instead of calibrating: to build the
    /// same checkpoint at another batch or on other tiles. Built as they
    /// are: a build that does not fit is not calibrated again.
    #[arg(
        long,
        value_name = "PACKAGE",
        requires = "checkpoint",
        conflicts_with_all = ["calibrate", "calibrate_text", "min_cosine", "precision"]
    )]
    pub(crate) precisions: Option<PathBuf>,
    /// Refuse to write a checkpoint package in which any tensor saturates
    /// beyond the threshold on the calibration inputs.
    #[arg(long, requires = "checkpoint")]
    pub(crate) strict: bool,
    /// The device description (default: the built-in IPU21 of the C600).
    #[arg(long, value_name = "FILE")]
    pub(crate) device: Option<PathBuf>,
    /// Tiles to use (default: every tile of the device).
    #[arg(long)]
    pub(crate) tiles: Option<u32>,
    /// Override the fixture's `batch` parameter (at least 1); short for
    /// `--param batch=B`.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) batch: Option<u64>,
    /// Override a fixture parameter, e.g. `--param layers=1` (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    pub(crate) params: Vec<(String, u64)>,
    /// Where to write the package.
    #[arg(long, default_value = "out/package")]
    pub(crate) out: PathBuf,
    /// The kernel cache root (default: $IPU_KERNEL_CACHE, then the XDG cache).
    #[arg(long)]
    pub(crate) kernel_cache: Option<PathBuf>,
    /// Worker threads (default: all cores). The package does not depend on it.
    #[arg(long)]
    pub(crate) jobs: Option<usize>,
    /// Exact-search nodes per tile that no greedy pass places (default:
    /// PlaceConfig's). A tile the search leaves undecided is reported as
    /// such, never as impossible; more nodes may place or disprove it.
    /// Counted in nodes, not time, so the package does not depend on the
    /// machine or `--jobs`.
    #[arg(long, value_name = "NODES")]
    pub(crate) alloc_effort: Option<u64>,
    /// How many times a build whose placement fails is planned again with
    /// less memory where it failed (default: BuildConfig's, 3). Each
    /// replan trades cycles for memory; a batch that needs more of them
    /// fits slowly, or not at all.
    #[arg(long, value_name = "N")]
    pub(crate) max_replans: Option<u32>,
    /// KiB an operation's operands and results may take on a tile while
    /// it runs (default: LowerConfig's, 160). More lets GEMMs run whole
    /// and attentions in fewer passes where memory allows; where it does
    /// not, the replans cut it again.
    #[arg(long, value_name = "KIB", value_parser = transient_budget_kib())]
    pub(crate) transient_budget: Option<u64>,
    /// Also write the exchange phases the build scheduled, as a snapshot
    /// for `cargo xtask exchange FILE`.
    #[arg(long, value_name = "FILE", conflicts_with = "checkpoint")]
    pub(crate) write_phases: Option<PathBuf>,
    /// If placement fails, write the failing tile's placement problem
    /// (its support reservation and every request, JSON) to FILE, for
    /// `cargo xtask alloc tile FILE`.
    #[arg(long, value_name = "FILE")]
    pub(crate) write_failed_tile: Option<PathBuf>,
    /// Where attention's products run: the AMP where its steps are
    /// estimated faster (auto), the vector unit always, or the AMP
    /// wherever it can.
    #[arg(long, value_enum, default_value_t = Attention::Auto)]
    pub(crate) attention: Attention,
}

/// `--attention`: which unit runs attention's products.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attention {
    /// The AMP where its steps are estimated faster.
    Auto,
    /// The vector unit.
    Vector,
    /// The AMP wherever it can run.
    Amp,
}

impl Attention {
    /// The lowering's choice.
    pub(crate) fn unit(self) -> AttentionUnit {
        match self {
            Attention::Auto => AttentionUnit::Auto,
            Attention::Vector => AttentionUnit::Vector,
            Attention::Amp => AttentionUnit::Amp,
        }
    }
}

/// `--min-cosine`: a number in [0, 1].
fn parse_cosine(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|e| format!("`{text}` is not a number: {e}"))?;
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{value} is not a cosine in [0, 1]"))
    }
}

impl Args {
    /// The calibration options for `template`: the defaults with
    /// `--calibrate` images and `--min-cosine`; with `--precisions`, F16
    /// refused (the precisions are given, not measured).
    pub(crate) fn calibration_options(&self, template: PrecisionPolicy) -> CalibrationOptions {
        let mut options = CalibrationOptions::new(template);
        if !self.calibrate.is_empty() {
            options.inputs = CalibrationInputs::Images(self.calibrate.clone());
        }
        if let Some(c) = self.min_cosine {
            options.min_cosine = (c > 0.0).then_some(c);
        }
        if let Some(p) = &self.precisions {
            options.f16_groups = ipu_frontend::siglip::F16Groups::Refused(format!(
                "the precisions are {}'s",
                p.display()
            ));
        }
        options
    }

    /// With `--precisions`, the calibration that package records.
    pub(crate) fn given_calibration(&self) -> Result<Option<Calibration>, String> {
        let Some(path) = &self.precisions else {
            return Ok(None);
        };
        let file = if path.is_dir() {
            path.join("model.json")
        } else {
            path.clone()
        };
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("--precisions: cannot read {}: {e}", file.display()))?;
        let model = ModelDescription::from_json(&text).map_err(|e| {
            format!(
                "--precisions: {} is not a package's model.json: {e}",
                file.display()
            )
        })?;
        let report = PrecisionReport::of_model(&model).map_err(|e| {
            format!(
                "--precisions: {} has no precision report: {e}",
                file.display()
            )
        })?;
        let calibration = Calibration::from_report(report)
            .map_err(|e| format!("--precisions: {}: {e}", file.display()))?;
        tracing::info!(file = %file.display(), "precisions taken from an earlier package");
        Ok(Some(calibration))
    }
}

/// A checkpoint's tower.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tower {
    /// The vision tower: images to embeddings.
    Vision,
    /// The text tower: texts to embeddings.
    Text,
}

/// A checkpoint package's precisions.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrecisionChoice {
    /// FP8 weights and GEMM inputs, calibrated.
    Fp8,
    /// As `fp8`, and the encoder attention's values and probabilities in
    /// FP8.
    Fp8Values,
    /// Every weight F16, no FP8 cast.
    F16,
}

pub fn run(args: &Args) -> Result<ExitCode, String> {
    if let Some(jobs) = args.jobs {
        rayon::ThreadPoolBuilder::new()
            .num_threads(jobs.max(1))
            .build_global()
            .map_err(|e| format!("cannot start {jobs} worker threads: {e}"))?;
    }
    if let Some(dir) = &args.checkpoint {
        check_out(&args.out)?;
        let target = match crate::device::read(args.device.as_deref()) {
            Ok(t) => t,
            Err(e) => return BuildFailure::Device(e).report(),
        };
        if let Err(e) = check_tiles(args.tiles, &target) {
            return BuildFailure::Usage(e).report();
        }
        return build_checkpoint(args, dir, target);
    }
    let mut overrides: Vec<(String, u64)> = args
        .batch
        .map(|b| ("batch".to_owned(), b))
        .into_iter()
        .collect();
    overrides.extend(args.params.iter().cloned());
    let request = FixtureBuild {
        fixture: args.fixture.clone(),
        overrides,
        device: args.device.clone(),
        tiles: args.tiles,
        kernel_cache: args.kernel_cache.clone(),
        out: args.out.clone(),
        write_phases: args.write_phases.clone(),
        alloc_effort: args.alloc_effort,
        max_replans: args.max_replans,
        transient_budget: args.transient_budget,
        attention: args.attention.unit(),
    };
    match build_fixture(&request) {
        Ok(built) => {
            summarise(&built.package, &request.out, &built.model, built.started);
            Ok(ExitCode::SUCCESS)
        }
        Err(failure) => {
            if let (Some(file), Some(tile)) = (&args.write_failed_tile, failure.failed_tile()) {
                write_failed_tile(file, tile);
            }
            failure.report()
        }
    }
}

/// Writes the tile problem of a failed placement to `file` as JSON, or
/// says why it could not; the build's own failure is reported either way.
pub(crate) fn write_failed_tile(file: &Path, tile: &TileProblem) {
    let written = serde_json::to_string(tile)
        .map_err(|e| e.to_string())
        .and_then(|text| std::fs::write(file, text).map_err(|e| e.to_string()));
    match written {
        Ok(()) => eprintln!(
            "wrote the placement problem of {} to {} (`cargo xtask alloc tile {}`)",
            tile.tile,
            file.display(),
            file.display()
        ),
        Err(e) => eprintln!("warning: cannot write {}: {e}", file.display()),
    }
}

/// A fixture build: what `build-package` asks for without `--checkpoint`,
/// and what `bench-sim` and the hostile campaign build.
#[derive(Debug, Clone)]
pub(crate) struct FixtureBuild {
    /// The fixture file (default: the embedded SigLIP so400m b2).
    pub fixture: Option<PathBuf>,
    /// Parameter overrides, in the order given.
    pub overrides: Vec<(String, u64)>,
    /// The device description file (default: the built-in IPU21).
    pub device: Option<PathBuf>,
    /// Tiles to use (default: every tile of the device).
    pub tiles: Option<u32>,
    /// The kernel cache root (default: $IPU_KERNEL_CACHE, then the XDG
    /// cache).
    pub kernel_cache: Option<PathBuf>,
    /// Where to write the package.
    pub out: PathBuf,
    /// Where to write the exchange phases the build scheduled, if anywhere.
    pub write_phases: Option<PathBuf>,
    /// The placer's exact-search nodes per tile (default: PlaceConfig's).
    pub alloc_effort: Option<u64>,
    /// Replans after a failed placement (default: BuildConfig's).
    pub max_replans: Option<u32>,
    /// The transient budget in KiB (default: LowerConfig's).
    pub transient_budget: Option<u64>,
    /// Where attention's products run.
    pub attention: AttentionUnit,
}

/// A package built and written.
#[derive(Debug)]
pub(crate) struct Built {
    /// The package, as written.
    pub package: Package,
    /// The model's name.
    pub model: String,
    /// When the build started (the summary's `total=`).
    pub started: Instant,
}

/// Why a build did not write a package.
#[derive(Debug)]
pub(crate) enum BuildFailure {
    /// The request is wrong, found before any work (exit status 2).
    Usage(String),
    /// The device description does not read (exit status 2).
    Device(TargetError),
    /// The parameter overrides or the fixture are refused before any work
    /// (exit status 2 when the command line is at fault).
    Params(ParamError),
    /// The pipeline refused or failed; `result` is the summary line saying
    /// so (exit status 1).
    Build {
        error: Box<BuildError>,
        result: String,
    },
    /// The built package could not be written (exit status 1).
    Write(PackageIoError),
    /// Anything else (exit status 1).
    Other(String),
}

impl BuildFailure {
    /// The placement problem of the tile that did not fit, when placement
    /// is what failed.
    pub(crate) fn failed_tile(&self) -> Option<&TileProblem> {
        match self {
            BuildFailure::Build { error, .. } => error.failed_tile(),
            _ => None,
        }
    }

    /// Prints the failure as `build-package` reports it and gives its exit
    /// status (`Err` for the task's `error:` line).
    pub(crate) fn report(self) -> Result<ExitCode, String> {
        match self {
            BuildFailure::Usage(message) => {
                eprintln!("error: {message}");
                Ok(ExitCode::from(2))
            }
            failure @ (BuildFailure::Device(_) | BuildFailure::Params(_)) if failure.is_usage() => {
                eprintln!("error: {failure}");
                Ok(ExitCode::from(2))
            }
            BuildFailure::Build { error, result } => {
                eprintln!("error: {error}");
                eprintln!("{result}");
                Ok(ExitCode::FAILURE)
            }
            BuildFailure::Other(message) => Err(message),
            failure => Err(failure.to_string()),
        }
    }

    /// Whether the command line is at fault (exit status 2).
    fn is_usage(&self) -> bool {
        match self {
            BuildFailure::Usage(_) | BuildFailure::Device(_) => true,
            BuildFailure::Params(e) => e.is_usage(),
            BuildFailure::Build { .. } | BuildFailure::Write(_) | BuildFailure::Other(_) => false,
        }
    }
}

impl std::fmt::Display for BuildFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildFailure::Usage(m) | BuildFailure::Other(m) => f.write_str(m),
            BuildFailure::Device(e) => write!(f, "{e}"),
            BuildFailure::Params(e) => write!(f, "{e}"),
            BuildFailure::Build { error, .. } => write!(f, "{error}"),
            BuildFailure::Write(e) => write!(f, "writing the package: {e}"),
        }
    }
}

/// Builds and writes the package `request` describes. Arguments the
/// device or the writer cannot take are refused before any work, and a
/// failed build leaves `out` as it was.
pub(crate) fn build_fixture(request: &FixtureBuild) -> Result<Built, BuildFailure> {
    check_out(&request.out).map_err(BuildFailure::Other)?;
    if let Some(file) = &request.write_phases {
        record_phases::check_file(file).map_err(BuildFailure::Other)?;
    }
    let (built, recorded, tiles) = build_unwritten(request)?;
    built
        .package
        .write(&request.out)
        .map_err(BuildFailure::Write)?;
    if let (Some(phases), Some(file)) = (&recorded, &request.write_phases) {
        let count = record_phases::write(phases, tiles, file).map_err(BuildFailure::Other)?;
        eprintln!("wrote {count} exchange phases to {}", file.display());
    }
    Ok(built)
}

/// The build of [`build_fixture`] without writing anything: the package,
/// the exchange phases it scheduled when `request.write_phases` asks for
/// them, and the tiles it used.
pub(crate) fn build_unwritten(
    request: &FixtureBuild,
) -> Result<(Built, Option<Recorded>, u32), BuildFailure> {
    let target = crate::device::read(request.device.as_deref()).map_err(BuildFailure::Device)?;
    check_tiles(request.tiles, &target).map_err(BuildFailure::Usage)?;
    let text = match &request.fixture {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| BuildFailure::Other(format!("cannot read {}: {e}", path.display())))?,
        None => SIGLIP.to_owned(),
    };
    let (graph, stored) = merge(&request.overrides)
        .and_then(|o| resolve(&text, &o))
        .map_err(BuildFailure::Params)?;
    let cache = kernel_cache(request.kernel_cache.as_deref()).map_err(BuildFailure::Other)?;
    let mut stages = Stages::builtin(Box::new(cache));
    set_alloc_effort(&mut stages, request.alloc_effort);
    let recorded = request.write_phases.as_ref().map(|_| {
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
    let tiles = request.tiles.unwrap_or(target.tile_count());
    let defaults = BuildConfig::default();
    let config = BuildConfig {
        target,
        tiles: Some(tiles),
        lower: lower_config(request.attention, request.transient_budget),
        max_replans: request.max_replans.unwrap_or(defaults.max_replans),
        ..defaults
    };
    let started = Instant::now();
    let package = match build_package(&graph, &config, &stages) {
        Ok(mut p) => {
            p.fixture = Some(stored);
            p
        }
        Err(error) => {
            let result = format!(
                "result=does-not-fit-or-failed fixture={} tiles={} elapsed_ms={}",
                graph.name(),
                tiles,
                started.elapsed().as_millis()
            );
            return Err(BuildFailure::Build {
                error: Box::new(error),
                result,
            });
        }
    };
    let built = Built {
        package,
        model: graph.name().to_owned(),
        started,
    };
    Ok((built, recorded, tiles))
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
    let template = match args.precision {
        PrecisionChoice::Fp8Values => template.with_fp8_attention_values(),
        _ => template,
    };
    let kind = match checkpoint_kind(dir) {
        Ok(kind) => kind,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    // CLIP's text tower goes the text tower's way below, as SigLIP's.
    let clip_text =
        kind == CheckpointKind::ClassToken(class_token::Family::Clip) && args.tower == Tower::Text;
    if let CheckpointKind::ClassToken(family) = kind
        && !clip_text
    {
        if family == class_token::Family::Clip && !args.calibrate_text.is_empty() {
            eprintln!(
                "error: --calibrate-text is for --tower text; give the vision tower --calibrate images"
            );
            return Ok(ExitCode::from(2));
        }
        if args.tower == Tower::Text || !args.calibrate_text.is_empty() {
            eprintln!(
                "error: this is a {} checkpoint; only its vision tower is imported (no --tower text, --calibrate-text)",
                family_name(family)
            );
            return Ok(ExitCode::from(2));
        }
        return crate::build_checkpoint::build_class_token(
            args,
            dir,
            family,
            target,
            class_token::template(template),
            start,
        );
    }
    if args.tower == Tower::Text {
        if !args.calibrate.is_empty() {
            eprintln!(
                "error: --calibrate takes images, for the vision tower; give the text tower --calibrate-text"
            );
            return Ok(ExitCode::from(2));
        }
        return build_text(args, dir, target, text_template(template), start);
    }
    if !args.calibrate_text.is_empty() {
        eprintln!(
            "error: --calibrate-text is for --tower text; give the vision tower --calibrate images"
        );
        return Ok(ExitCode::from(2));
    }
    let mut import = ImportConfig {
        batch,
        policy: template.clone(),
        name: None,
    };
    let template = match args.precision {
        PrecisionChoice::Fp8 | PrecisionChoice::Fp8Values => template,
        PrecisionChoice::F16 => {
            let graph = match read_config(dir) {
                Ok(config) => build_graph(
                    &config,
                    &GraphOptions {
                        name: "template".to_owned(),
                        batch: 1,
                        policy: template.clone(),
                    },
                )
                .map_err(|e| e.to_string())?,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(ExitCode::from(2));
                }
            };
            template.all_f16(&graph)
        }
    };
    import.policy = template.clone();
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
    let options = args.calibration_options(template);
    let calibration = match args.given_calibration()? {
        Some(c) => c,
        None => run_calibration(&checkpoint, &options)?,
    };
    if !report_calibration(calibration.report(), args.strict) {
        return Ok(ExitCode::FAILURE);
    }
    build_and_write(args, target, &name, start, |config, stages| {
        package_checkpoint(&checkpoint, calibration, &options, config, stages).map_err(Box::new)
    })
}

/// `build-package --checkpoint DIR --tower text`: import the text tower,
/// calibrate on the calibration texts, build, write.
fn build_text(
    args: &Args,
    dir: &Path,
    target: Target,
    template: PrecisionPolicy,
    start: Instant,
) -> Result<ExitCode, String> {
    let batch = args.batch.unwrap_or(1);
    let mut import = ImportConfig {
        batch,
        policy: template.clone(),
        name: None,
    };
    let imported = match args.random_weights {
        Some(seed) => random_text_checkpoint(dir, &import, seed),
        None => import_text_checkpoint(dir, &import),
    };
    let mut checkpoint = match imported {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let template = match args.precision {
        PrecisionChoice::Fp8 | PrecisionChoice::Fp8Values => template,
        PrecisionChoice::F16 => {
            let policy = template.all_f16(checkpoint.graph());
            import.policy = policy.clone();
            checkpoint = match args.random_weights {
                Some(seed) => random_text_checkpoint(dir, &import, seed),
                None => import_text_checkpoint(dir, &import),
            }
            .map_err(|e| e.to_string())?;
            policy
        }
    };
    let name = checkpoint.graph().name().to_owned();
    let options = args.calibration_options(template);
    let inputs = match checkpoint.calibration_inputs(&args.calibrate_text) {
        Ok(inputs) => inputs,
        Err(e) => {
            eprintln!("error: calibration text: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if checkpoint.tokenizer().is_none() {
        tracing::warn!("the checkpoint has no tokenizer; the package runs on token ids only");
    }
    let clip = matches!(
        checkpoint.config().family(),
        ipu_frontend::siglip::text::TextFamily::Clip { .. }
    );
    if checkpoint.logits().is_none() && args.random_weights.is_none() && !clip {
        tracing::warn!(
            "the checkpoint has no logit_scale and logit_bias (a text-only model); \
             the package gives embeddings but no zero-shot scores"
        );
    }
    let Some(calibration) = calibrate_reported(args, &checkpoint, &inputs, &options)? else {
        return Ok(ExitCode::FAILURE);
    };
    build_and_write(args, target, &name, start, |config, stages| {
        package_text(&checkpoint, calibration, &inputs, &options, config, stages).map_err(Box::new)
    })
}

fn run_calibration(
    checkpoint: &Checkpoint,
    options: &CalibrationOptions,
) -> Result<Calibration, String> {
    let start = Instant::now();
    let calibration = calibrate(checkpoint, options).map_err(|e| format!("calibration: {e}"))?;
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
pub(crate) fn report_calibration(report: &PrecisionReport, strict: bool) -> bool {
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
    if let Some(f) = &report.fidelity {
        for o in f.operands.iter().filter(|o| o.decision == "F16") {
            eprintln!(
                "f16 operand {} {}: cosine alone {:.6}, with the earlier ones {}",
                o.operand,
                o.role,
                o.cosine_alone,
                o.cosine_with_earlier
                    .map_or_else(|| "-".to_owned(), |c| format!("{c:.6}"))
            );
        }
        eprintln!("fidelity: {}", f.reason);
    }
    for o in &report.outputs {
        eprintln!(
            "calibration output {}: relative_rms={:.4} cosine={:.6} smallest per-input cosine={} vs the F32 graph",
            o.output,
            o.relative_rms,
            o.cosine,
            o.smallest_cosine
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.6}"))
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

/// `--alloc-effort`: the built-in placer with that node budget per tile
/// (and, as `Stages::builtin` has it, without its own check: the build
/// runs `check_placement` on every placement).
pub(crate) fn set_alloc_effort(stages: &mut Stages, nodes: Option<u64>) {
    if let Some(nodes) = nodes {
        stages.placer = Box::new(BuiltinPlacer {
            config: PlaceConfig {
                exact_node_budget: nodes,
                verify: false,
                ..PlaceConfig::default()
            },
        });
    }
}

pub(crate) fn kernel_cache(root: Option<&Path>) -> Result<KernelCache, String> {
    match root {
        Some(root) => KernelCache::open(root.to_owned()),
        None => KernelCache::from_env(),
    }
    .map_err(|e| format!("the kernel cache: {e}"))
}

/// The summary lines of a written package.
pub(crate) fn summarise(package: &Package, out: &Path, model: &str, start: Instant) {
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

/// The largest `--transient-budget`, in KiB: 64 MiB, far above any tile's
/// memory (a budget above it is as good as none).
pub(crate) const MAX_TRANSIENT_KIB: u64 = 64 * 1024;

/// The parser of a transient budget in KiB: 1 to [`MAX_TRANSIENT_KIB`].
pub(crate) fn transient_budget_kib() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..=MAX_TRANSIENT_KIB)
}

/// The lowering's configuration: attention on `attention`, and a
/// transient budget of `kib` KiB where one is given.
pub(crate) fn lower_config(attention: AttentionUnit, kib: Option<u64>) -> LowerConfig {
    let defaults = LowerConfig::default();
    LowerConfig {
        attention,
        // The parser bounds `kib`, so the product fits.
        transient_budget: kib.map_or(defaults.transient_budget, |k| k.saturating_mul(1024)),
        ..defaults
    }
}
