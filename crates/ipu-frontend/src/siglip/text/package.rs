//! A calibrated text tower built into a package, with the vision tower's
//! policy for F16 groups (`siglip::package`): when the build does not fit
//! with F16 groups kept, calibration runs again with them refused and the
//! build is tried once more. The package carries the weights in the
//! graph's precisions, the graph and the model description (with the
//! tokenizer and the contrastive parameters).

use ipu_package::build::{BuildConfig, Stages};

use crate::siglip::calibrate::{Calibration, CalibrationOptions, Input, calibrate_inputs};
use crate::siglip::package::{CheckpointPackage, PackageError, Tower, build_with_fallback};
use crate::siglip::text::{INPUT_IDS, PackagedText, TextCheckpoint};

/// Builds `checkpoint` with the precisions of `calibration` (made with
/// `options` on `inputs`) into a package, calibrating again without F16
/// groups if the build does not fit with them.
pub fn package_text(
    checkpoint: &TextCheckpoint,
    calibration: Calibration,
    inputs: &[Input],
    options: &CalibrationOptions,
    config: &BuildConfig,
    stages: &Stages,
) -> Result<CheckpointPackage, PackageError> {
    let graph = checkpoint.graph();
    let name = graph.name();
    let batch = crate::siglip::input_batch(graph, INPUT_IDS).unwrap_or(0);
    build_with_fallback(
        Tower {
            model: &|calibration| {
                let model = PackagedText::new(checkpoint, name, batch, calibration);
                let graph = model
                    .graph()
                    .map_err(|source| PackageError::TextModel { source })?;
                let description = model
                    .description()
                    .map_err(|source| PackageError::TextModel { source })?;
                Ok((graph, description))
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
