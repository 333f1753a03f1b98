//! `build-package --checkpoint DIR`: the steps every family's build ends
//! with ([`calibrate_reported`], [`build_and_write`]), and the build of a
//! ViT or CLIP checkpoint (`ipu_frontend::class_token`): import (or draw
//! random weights), calibrate on the `--calibrate` images or the built-in
//! synthetic ones, build with the F16-group fallback, write. The flags
//! mean what they mean for SigLIP (`build_package`).

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use ipu_frontend::class_token::{
    Family, build_graph, import_class_token, package_class_token, random_class_token, read_config,
};
use ipu_frontend::siglip::calibrate::{Calibrated, Input};
use ipu_frontend::siglip::{
    Calibration, CalibrationOptions, CheckpointPackage, GraphOptions, ImportConfig, PackageError,
    PrecisionPolicy, calibrate_inputs,
};
use ipu_package::build::{BuildConfig, Stages};
use ipu_target::Target;

use crate::build_package::{
    Args, PrecisionChoice, kernel_cache, report_calibration, set_alloc_effort, summarise,
};

/// Builds the `family` checkpoint in `dir` with `template`'s layout of
/// precisions (module header).
pub(crate) fn build_class_token(
    args: &Args,
    dir: &Path,
    family: Family,
    target: Target,
    template: PrecisionPolicy,
    start: Instant,
) -> Result<ExitCode, String> {
    let template = match args.precision {
        PrecisionChoice::Fp8 | PrecisionChoice::Fp8Values => template,
        PrecisionChoice::F16 => {
            let config = match read_config(dir, family) {
                Ok(config) => config,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(ExitCode::from(2));
                }
            };
            let options = GraphOptions {
                name: "template".to_owned(),
                batch: 1,
                policy: template.clone(),
            };
            let graph = build_graph(&config, &options).map_err(|e| e.to_string())?;
            template.all_f16(&graph)
        }
    };
    let import = ImportConfig {
        batch: args.batch.unwrap_or(1),
        policy: template.clone(),
        name: None,
    };
    let imported = match args.random_weights {
        Some(seed) => random_class_token(dir, family, &import, seed),
        None => import_class_token(dir, family, &import),
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
    let inputs = match checkpoint.calibration_inputs(&options.inputs) {
        Ok(inputs) => inputs,
        Err(e) => {
            eprintln!("error: calibration image: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let Some(calibration) = calibrate_reported(args, &checkpoint, &inputs, &options)? else {
        return Ok(ExitCode::FAILURE);
    };
    build_and_write(args, target, &name, start, |config, stages| {
        package_class_token(&checkpoint, calibration, &inputs, &options, config, stages)
            .map_err(Box::new)
    })
}

/// Builds a calibrated checkpoint's package with `package` (its family's
/// packaging, given the build's config and stages) and writes it to
/// `--out`. A build that does not fit is exit status 1 with the result
/// line; any other failure an error.
pub(crate) fn build_and_write(
    args: &Args,
    target: Target,
    name: &str,
    start: Instant,
    package: impl FnOnce(&BuildConfig, &Stages) -> Result<CheckpointPackage, Box<PackageError>>,
) -> Result<ExitCode, String> {
    let tiles = args.tiles.unwrap_or(target.tile_count());
    let mut stages = Stages::builtin(Box::new(kernel_cache(args.kernel_cache.as_deref())?));
    set_alloc_effort(&mut stages, args.alloc_effort);
    let defaults = BuildConfig::default();
    let config = BuildConfig {
        target,
        tiles: Some(tiles),
        lower: crate::build_package::lower_config(args.attention.unit(), args.transient_budget),
        max_replans: args.max_replans.unwrap_or(defaults.max_replans),
        ..defaults
    };
    let CheckpointPackage { package, graph, .. } = match package(&config, &stages).map_err(|e| *e) {
        Ok(built) => built,
        Err(e @ PackageError::Build { .. }) => {
            if let (Some(file), PackageError::Build { source }) = (&args.write_failed_tile, &e)
                && let Some(tile) = source.failed_tile()
            {
                crate::build_package::write_failed_tile(file, tile);
            }
            eprintln!("error: {e}");
            eprintln!(
                "result=does-not-fit-or-failed model={name} tiles={tiles} elapsed_ms={}",
                start.elapsed().as_millis()
            );
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => return Err(e.to_string()),
    };
    package
        .write(&args.out)
        .map_err(|e| format!("writing the package: {e}"))?;
    summarise(&package, &args.out, graph.name(), start);
    Ok(ExitCode::SUCCESS)
}

/// Calibrates `model` on `inputs` (or takes `--precisions`' calibration)
/// and prints the report; `None` when `--strict` refuses it.
pub(crate) fn calibrate_reported(
    args: &Args,
    model: &dyn Calibrated,
    inputs: &[Input],
    options: &CalibrationOptions,
) -> Result<Option<Calibration>, String> {
    let strict = args.strict;
    if let Some(given) = args.given_calibration()? {
        return Ok(report_calibration(given.report(), strict).then_some(given));
    }
    let calibrated = Instant::now();
    let calibration = calibrate_inputs(model, inputs.to_vec(), options)
        .map_err(|e| format!("calibration: {e}"))?;
    tracing::info!(
        inputs = inputs.len(),
        elapsed_ms = calibrated.elapsed().as_millis() as u64,
        "calibrated FP8 scales"
    );
    Ok(report_calibration(calibration.report(), strict).then_some(calibration))
}
