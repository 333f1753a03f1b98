//! A calibrated ViT or CLIP vision checkpoint built into a package, with
//! the F16-group fallback every family's packaging shares
//! (`siglip::package`).

use ipu_package::build::{BuildConfig, Stages};

use crate::class_token::{ClassTokenCheckpoint, PATCHES, PackagedClassToken};
use crate::siglip::calibrate::{Calibration, CalibrationOptions, Input, calibrate_inputs};
use crate::siglip::package::{CheckpointPackage, PackageError, Tower, build_with_fallback};

/// Builds `checkpoint` with the precisions of `calibration` (made with
/// `options` on `inputs`) into a package, calibrating again without F16
/// groups if the build does not fit with them.
pub fn package_class_token(
    checkpoint: &ClassTokenCheckpoint,
    calibration: Calibration,
    inputs: &[Input],
    options: &CalibrationOptions,
    config: &BuildConfig,
    stages: &Stages,
) -> Result<CheckpointPackage, PackageError> {
    let graph = checkpoint.graph();
    let name = graph.name();
    let batch = crate::siglip::input_batch(graph, PATCHES).unwrap_or(0);
    build_with_fallback(
        Tower {
            model: &|calibration| {
                let model = PackagedClassToken::new(checkpoint, name, batch, calibration)
                    .map_err(|source| PackageError::Model { source })?;
                let graph = model
                    .graph()
                    .map_err(|source| PackageError::Model { source })?;
                Ok((graph, model.description()))
            },
            recalibrate: &|options| calibrate_inputs(checkpoint, inputs.to_vec(), options),
            weights_for: &|graph| checkpoint.weights_for(graph),
        },
        calibration,
        options,
        config,
        stages,
    )
}
