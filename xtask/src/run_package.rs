//! `cargo xtask run-package DIR [--image FILE]... [--inputs seed|FILE]
//! [--seed N] [--out OUT.safetensors] [--reference]` and
//! `cargo xtask inspect-package DIR`.
//!
//! On a terminal the progress line shows the tile model's steps done of
//! all, the elapsed time and an estimate of the time left, and then the
//! reference evaluation's elapsed time (`progress`).
//!
//! `run-package` runs a package on the tile model. Weights come from the
//! package's `weights.safetensors` when it carries one (every package
//! built from a checkpoint does, and a weight missing there is an error,
//! never a generated stand-in); a fixture package without weights runs on
//! weights generated from the seed. Inputs are generated from the seed (a
//! checkpoint package runs on the built-in synthetic images, the seed
//! choosing the first of them), read from a safetensors FILE (`--inputs`, only the graph's inputs, all
//! of them), or made from images (`--image`, one per batch row, for a
//! package built from a checkpoint, preprocessed as its `model.json`
//! says). `--out` writes every graph output as an F32 tensor to a
//! safetensors file. The reference evaluation of the package's graph runs
//! with `--reference`, and by default when neither `--image` nor `--out`
//! is given; then every output's largest absolute and relative errors,
//! normalised RMS error and pass/fail under the reference's graph
//! tolerance for the output's precision are printed. Every op is also
//! checked against the reference on the device's own inputs as the tile
//! model runs (the first op out of its tight tolerance stops the run,
//! naming the op, its tensor and the worst element). The exit status is 0
//! only if every op and every compared output passes; a failed comparison
//! ends with an `error:` line naming the failing outputs. A `profile` line
//! on stderr says where the tile model's time went (step kinds, and per
//! codelet kind the time summed over threads).
//!
//! `inspect-package` recovers, reads and validates the package exactly as
//! `run-package` does (`Package::read`, which checks every file against
//! the manifest and then `Package::validate`, and then the graph a run
//! would build from the package's fixture and model description and
//! its weights), prints the manifest summary and `valid=true`, or one
//! `problem:` line per validation problem, an `error:` line and
//! `valid=false` with exit status 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ipu_frontend::PackagedModel;
use ipu_frontend::siglip::text::Truncation;
use ipu_package::TensorKind;
use ipu_package::graph::{Graph, ValueSet, parse_fixture, safetensors, values};
use ipu_package::package::{Package, PackageIoError};
use ipu_sim::reference::compare::{Tolerance, compare};
use ipu_sim::tiles::{CODELET_KINDS, RunConfig, RunStats};

use crate::progress;

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

/// Options of `run-package`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The package directory
    #[arg(value_name = "DIR")]
    package: PathBuf,
    /// An image for one batch row, preprocessed as the package's
    /// checkpoint says (repeatable: one per row; a package built from a
    /// checkpoint)
    #[arg(long, value_name = "FILE", conflicts_with = "inputs")]
    image: Vec<PathBuf>,
    /// A text for one batch row of a SigLIP text package, tokenized as its
    /// checkpoint's tokenizer does (repeatable: one per row)
    #[arg(long, value_name = "TEXT", conflicts_with_all = ["inputs", "image"])]
    text: Vec<String>,
    /// Cut a text longer than the model's sequence to its first tokens and
    /// the end token (as transformers' truncation=True) instead of refusing it
    #[arg(long, requires = "text")]
    truncate: bool,
    /// The inputs: `seed` (generated from --seed; a checkpoint package
    /// runs on built-in synthetic images) or a safetensors FILE holding
    /// every graph input
    #[arg(long, value_name = "seed|FILE")]
    inputs: Option<PathBuf>,
    /// Seed of generated inputs and weights
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Write every graph output as an F32 tensor to this safetensors file
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Also run the reference evaluation and compare every output (the
    /// default unless --image or --out is given)
    #[arg(long)]
    reference: bool,
}

/// Options of `inspect-package`.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// The package directory
    #[arg(value_name = "DIR")]
    pub package: PathBuf,
}

/// What `run-package` was asked for.
struct RunArgs {
    seed: u64,
    inputs: Inputs,
    out: Option<PathBuf>,
    reference: bool,
}

/// What the options ask for: where the inputs come from and whether the
/// reference runs.
fn run_args(args: &Args) -> Result<RunArgs, String> {
    let truncation = if args.truncate {
        Truncation::Truncate
    } else {
        Truncation::Refuse
    };
    let inputs = match (&args.inputs, args.image.is_empty()) {
        _ if !args.text.is_empty() => Inputs::Texts(args.text.clone(), truncation),
        (_, false) => Inputs::Images(args.image.clone()),
        (Some(f), true) if f.as_os_str() != "seed" => Inputs::File(f.clone()),
        _ => Inputs::Seed,
    };
    let out = args.out.clone();
    if let Some(out) = &out
        && out.is_dir()
    {
        return Err(format!(
            "--out {}: is a directory; give the safetensors file to write",
            out.display()
        ));
    }
    // Images in, embeddings out: the reference runs when asked. A plain
    // run (seeded or file inputs, nothing written) is a check against it.
    let reference = args.reference
        || (out.is_none() && !matches!(inputs, Inputs::Images(_) | Inputs::Texts(..)));
    Ok(RunArgs {
        seed: args.seed,
        inputs,
        out,
        reference,
    })
}

/// The tile model's options for a run: the per-op check on, and the
/// progress line's hook on a terminal (its guard clears the line).
fn run_config() -> (RunConfig, progress::StepsGuard) {
    let (hook, guard) = progress::steps("tile model");
    let config = RunConfig {
        progress: hook,
        ..RunConfig::default()
    };
    (config, guard)
}

pub fn run(args: &Args) -> Result<ExitCode, String> {
    let run = run_args(args)?;
    let dir = &args.package;
    let package = read_dir(dir).map_err(|f| f.message(dir))?;
    let (graph, values) = {
        let _shown = progress::activity("preparing inputs and weights");
        prepare(&package, run.seed, &run.inputs)?
    };
    let start = Instant::now();
    let (device, stats) = {
        let (config, _shown) = run_config();
        ipu_sim::tiles::run_package_with(&package, &graph, &values, &config)
            .map_err(|e| format!("running {}: {}", dir.display(), error_chain(&e)))?
    };
    // The per-op check runs inside the tile model's run; its time is
    // reported on its own.
    let tile_model = start.elapsed().saturating_sub(stats.op_check);
    eprintln!("{}", profile(&stats));
    if let Some(out) = &run.out {
        write_outputs(out, &graph, &device)?;
    }
    if !run.reference {
        println!(
            "result=ran tile_model_ms={} op_check_ms={} ops_checked={}",
            tile_model.as_millis(),
            stats.op_check.as_millis(),
            stats.ops_checked
        );
        return Ok(ExitCode::SUCCESS);
    }
    let start = Instant::now();
    let reference = evaluate_reference(&graph, &values)?;
    let reference_time = start.elapsed();
    let (lines, pass) = comparison(&graph, &reference, &device);
    for line in &lines {
        println!("{line}");
    }
    println!(
        "result={} tile_model_ms={} op_check_ms={} ops_checked={} reference_ms={}",
        if pass { "pass" } else { "fail" },
        tile_model.as_millis(),
        stats.op_check.as_millis(),
        stats.ops_checked,
        reference_time.as_millis()
    );
    if pass {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(failure_reason(&lines))
    }
}

/// Why a run failed, from its output lines: the outputs that failed.
fn failure_reason(lines: &[String]) -> String {
    let failed: Vec<&str> = lines
        .iter()
        .filter(|l| l.contains(" result=fail") || l.ends_with(" missing"))
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

/// Writes every graph output as an F32 tensor to `out` (through a
/// temporary file beside it, so `out` is whole or untouched).
fn write_outputs(out: &Path, graph: &Graph, device: &ValueSet) -> Result<(), String> {
    let mut tensors = Vec::new();
    for id in graph.outputs() {
        let t = graph.tensor(id);
        let values = device
            .get(id)
            .ok_or_else(|| format!("the tile model produced no `{}`", t.name()))?;
        tensors.push((t.name(), t.extents(), values));
    }
    let bytes = safetensors::write_f32(&tensors).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut tmp = out.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, &bytes)
        .and_then(|()| std::fs::rename(&tmp, out))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("writing {}: {e}", out.display())
        })?;
    for (name, extents, _) in &tensors {
        println!("wrote output={name} shape={extents:?} dtype=F32");
    }
    eprintln!("outputs written to {}", out.display());
    Ok(())
}

/// Where the inputs of a run come from.
#[derive(Debug)]
pub enum Inputs {
    /// Generated from the seed.
    Seed,
    /// Read from a safetensors-style file.
    File(PathBuf),
    /// Images, one per batch row, preprocessed as a checkpoint package's
    /// `model.json` says.
    Images(Vec<PathBuf>),
    /// Texts, one per batch row, tokenized as a text package's
    /// `model.json` says.
    Texts(Vec<String>, Truncation),
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

/// The package's graph and the values of a run: every weight from the
/// package's `weights.safetensors` when it has one (a package built from a
/// checkpoint always does; a weight missing there is an error), else
/// generated from `seed` (fixture packages); inputs as `inputs` says.
pub fn prepare(package: &Package, seed: u64, inputs: &Inputs) -> Result<(Graph, ValueSet), String> {
    let (graph, model) = graph_of(package)?;
    let mut values = match &package.weights {
        Some(weights) => weights.values(&graph).map_err(|e| e.to_string())?,
        None if model.is_some() => {
            return Err(
                "the package was built from a checkpoint but carries no weights.safetensors; rebuild it"
                    .to_owned(),
            );
        }
        None => values::generate_weights(&graph, seed),
    };
    match inputs {
        // A checkpoint package's input is preprocessed pixels: random values
        // of another spread would leave the activation ranges its FP8
        // scales were calibrated for, so it runs on the built-in synthetic
        // images, chosen by the seed.
        Inputs::Seed => match &model {
            Some(model) => values.extend(
                model
                    .synthetic_input_values(&graph, synthetic_first(seed))
                    .map_err(|e| e.to_string())?,
            ),
            None => values.extend(values::generate_inputs(&graph, seed)),
        },
        Inputs::File(file) => {
            let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
            let read = safetensors::read_values(&graph, &bytes)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            for (id, v) in read.iter() {
                let t = graph.tensor(id);
                if t.kind() != TensorKind::Input {
                    return Err(format!(
                        "{}: holds {} `{}`; an inputs file holds only the graph's inputs ({})",
                        file.display(),
                        t.kind().as_str(),
                        t.name(),
                        input_names(&graph)
                    ));
                }
                values.insert(id, v.to_vec());
            }
            for id in graph.inputs() {
                if !values.contains(id) {
                    return Err(format!(
                        "{}: has no input `{}`; give every input ({})",
                        file.display(),
                        graph.tensor(id).name(),
                        input_names(&graph)
                    ));
                }
            }
        }
        Inputs::Texts(texts, truncation) => {
            let model = model.ok_or(
                "--text needs a package built from a checkpoint's text tower \
                 (build-package --checkpoint DIR --tower text)",
            )?;
            values.extend(
                model
                    .text_values(&graph, texts, *truncation)
                    .map_err(|e| error_chain(&e))?,
            );
        }
        Inputs::Images(images) => {
            let model = model.ok_or(
                "--image needs a package built from a checkpoint (build-package --checkpoint); \
                 this one was built from a fixture, give --inputs FILE",
            )?;
            values.extend(
                model
                    .input_values(&graph, images)
                    .map_err(|e| e.to_string())?,
            );
        }
    }
    Ok((graph, values))
}

/// The graph a run of `package` uses, from its fixture, checked against
/// the package's buffers before any value is generated for it; with the
/// front end's model when the package describes one (`model.json`),
/// checked to describe that graph. `inspect-package` calls it too, so
/// that it never calls valid a package whose graph a run refuses.
pub fn graph_of(package: &Package) -> Result<(Graph, Option<PackagedModel>), String> {
    let Some(fixture) = &package.fixture else {
        return Err(
            "the package carries no fixture.json with its graph; rebuild it with build-package"
                .to_owned(),
        );
    };
    let graph = parse_fixture(fixture).map_err(|e| format!("the package's fixture: {e}"))?;
    // Sizes first: an edited fixture must not make us generate values for
    // tensors the package never holds.
    ipu_sim::tiles::check_fixture(package, &graph).map_err(|e| error_chain(&e))?;
    let model = match &package.model {
        Some(description) => Some(
            PackagedModel::from_description(description, &graph).map_err(|e| error_chain(&e))?,
        ),
        None => None,
    };
    Ok((graph, model))
}

/// The first synthetic image of a seeded run of a checkpoint package: the
/// seed picks one of 16 starting images, so runs with different seeds see
/// different images while every image keeps a stripe period of several
/// pixels.
fn synthetic_first(seed: u64) -> usize {
    (seed % 16) as usize
}

fn input_names(graph: &Graph) -> String {
    graph
        .inputs()
        .iter()
        .map(|&id| format!("`{}`", graph.tensor(id).name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads the package at `dir` and runs it on the tile model with the
/// per-op check on `inputs`: its graph, the device's outputs and the
/// front end's model (`zero-shot` runs both towers' packages so).
pub(crate) fn run_checked(
    dir: &Path,
    inputs: &Inputs,
) -> Result<(Graph, ValueSet, Option<PackagedModel>), String> {
    let package = read_dir(dir).map_err(|f| f.message(dir))?;
    let (_, model) = graph_of(&package)?;
    let (graph, values) = {
        let _shown = progress::activity("preparing inputs and weights");
        prepare(&package, 0, inputs)?
    };
    let (device, stats) = {
        let (config, _shown) = run_config();
        ipu_sim::tiles::run_package_with(&package, &graph, &values, &config)
            .map_err(|e| format!("running {}: {}", dir.display(), error_chain(&e)))?
    };
    eprintln!("{}: {}", dir.display(), profile(&stats));
    Ok((graph, device, model))
}

/// Writes F32 tensors to `out` through a temporary file beside it, so
/// `out` is whole or untouched.
pub(crate) fn write_tensors(out: &Path, tensors: &[(&str, &[u64], &[f32])]) -> Result<(), String> {
    let bytes = safetensors::write_f32(tensors).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut tmp = out.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, &bytes)
        .and_then(|()| std::fs::rename(&tmp, out))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("writing {}: {e}", out.display())
        })
}

/// Runs `package` (read from `dir`) on the tile model and the reference
/// evaluation of its graph, on the same inputs and weights, and
/// compares every output under the graph tolerance of its precision.
pub fn check(dir: &Path, package: &Package, seed: u64, inputs: &Inputs) -> Result<Checked, String> {
    let (graph, values) = {
        let _shown = progress::activity("preparing inputs and weights");
        prepare(package, seed, inputs)?
    };
    let start = Instant::now();
    let (device, stats) = {
        let (config, _shown) = run_config();
        ipu_sim::tiles::run_package_with(package, &graph, &values, &config)
            .map_err(|e| format!("running {}: {}", dir.display(), error_chain(&e)))?
    };
    // The per-op check runs inside the tile model's run; its time is
    // reported on its own.
    let tile_model = start.elapsed().saturating_sub(stats.op_check);
    let start = Instant::now();
    let reference = evaluate_reference(&graph, &values)?;
    let reference_time = start.elapsed();
    let (lines, pass) = comparison(&graph, &reference, &device);
    Ok(Checked {
        lines,
        pass,
        tile_model,
        reference: reference_time,
        stats,
    })
}

/// The reference evaluation of `graph` on `values`, shown on the progress
/// line while it runs.
fn evaluate_reference(graph: &Graph, values: &ValueSet) -> Result<ValueSet, String> {
    let _shown = progress::activity("reference evaluation");
    ipu_sim::evaluate(graph, values).map_err(|e| format!("reference: {e}"))
}

/// One line per output comparing the tile model with the reference under
/// the graph tolerance of its precision, and whether all pass.
fn comparison(graph: &Graph, reference: &ValueSet, device: &ValueSet) -> (Vec<String>, bool) {
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
        // A failure names how many elements left their bound and the worst
        // one, so a user can find it in the outputs.
        let outside = match c.worst {
            Some(i) => format!(" outside={} worst_element={i}", c.violations),
            None => String::new(),
        };
        lines.push(format!(
            "output={} elements={} max_abs={:.6} max_rel={:.6} rms_error={:.6} reference_rms={:.6} tolerance=graph({:?}) result={}{outside}",
            t.name(),
            c.elements,
            c.max_abs,
            c.max_rel,
            c.rms_error,
            c.reference_rms,
            t.precision(),
            if c.pass { "pass" } else { "fail" }
        ));
    }
    (lines, pass)
}

/// An error and its causes, joined into one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        // Many errors already quote their cause in their own message; a
        // cause the line already says is not said twice.
        let text = c.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
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

pub fn inspect(dir: &Path) -> Result<ExitCode, String> {
    // The same recovery, reading and validation as run-package, and the
    // same graph: a package it refuses is never called valid here.
    let package = match read_dir(dir) {
        Ok(package) => package,
        Err(failure) => {
            if let ReadFailure::Read(PackageIoError::Invalid { errors, .. }) = &failure {
                for e in errors {
                    println!("problem: {e}");
                }
            }
            eprintln!("error: {}", failure.message(dir));
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
    if let Err(e) = graph_of(&package) {
        // Valid files, but a run would refuse the graph they describe.
        println!("problem: {e}");
        eprintln!("error: {}: {e}", dir.display());
        println!("valid=false");
        return Ok(ExitCode::FAILURE);
    }
    println!("valid=true");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    /// An error with a message and an optional cause.
    #[derive(Debug)]
    struct Layer(String, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    /// Causes a message leaves out are appended; one it quotes is not
    /// repeated.
    #[test]
    fn every_cause_is_said_once() {
        let root = Layer("bad ELF header".into(), None);
        let quoting = Layer(
            "kernel object k3: bad ELF header".into(),
            Some(Box::new(root)),
        );
        let outer = Layer("running tile 4".into(), Some(Box::new(quoting)));
        assert_eq!(
            error_chain(&outer),
            "running tile 4: kernel object k3: bad ELF header"
        );
    }
}
