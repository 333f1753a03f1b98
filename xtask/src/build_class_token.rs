//! `build-package --checkpoint DIR` for a ViT or CLIP checkpoint
//! (`ipu_frontend::class_token`): import (or draw random weights),
//! calibrate on the `--calibrate` images or the built-in synthetic ones,
//! build with the F16-group fallback, write. The flags mean what they mean
//! for SigLIP (`build_package`).

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use ipu_frontend::class_token::{
    Family, build_graph, import_class_token, package_class_token, random_class_token, read_config,
};
use ipu_frontend::siglip::{
    CalibrationInputs, CalibrationOptions, GraphOptions, ImportConfig, PrecisionPolicy,
};
use ipu_target::Target;

use crate::build_package::{Args, PrecisionChoice, build_and_write, calibrate_reported};

/// Builds the `family` checkpoint in `dir` with `template`'s layout of
/// precisions (module header).
pub(crate) fn build(
    args: &Args,
    dir: &Path,
    family: Family,
    target: Target,
    template: PrecisionPolicy,
    start: Instant,
) -> Result<ExitCode, String> {
    let template = match args.precision {
        PrecisionChoice::Fp8 => template,
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
    let mut options = CalibrationOptions::new(template);
    if !args.calibrate.is_empty() {
        options.inputs = CalibrationInputs::Images(args.calibrate.clone());
    }
    let inputs = match checkpoint.calibration_inputs(&options.inputs) {
        Ok(inputs) => inputs,
        Err(e) => {
            eprintln!("error: calibration image: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let Some(calibration) = calibrate_reported(&checkpoint, &inputs, &options, args.strict)? else {
        return Ok(ExitCode::FAILURE);
    };
    build_and_write(args, target, &name, start, |config, stages| {
        package_class_token(&checkpoint, calibration, &inputs, &options, config, stages)
            .map_err(Box::new)
    })
}
