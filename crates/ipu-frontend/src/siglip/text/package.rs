//! A calibrated text tower built into a package, with the vision tower's
//! policy for F16 groups (`siglip::package`): when the build does not fit
//! with F16 groups kept, calibration runs again with them refused and the
//! build is tried once more. The package carries the weights in the
//! graph's precisions, the graph and the model description (with the
//! tokenizer and the contrastive parameters).

use std::time::Instant;

use ipu_package::build::{BuildConfig, BuildError, Stages, build_package};
use ipu_package::graph::write_fixture;
use ipu_package::package::PackageWeights;

use crate::siglip::calibrate::{
    Calibration, CalibrationOptions, F16Groups, Input, calibrate_inputs,
};
use crate::siglip::package::{CheckpointPackage, PackageError, kept_f16};
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
    let batch = graph
        .tensor_by_name(INPUT_IDS)
        .and_then(|id| graph.tensor(id).extents().first().copied())
        .unwrap_or(0);
    let tiles = config.tiles.unwrap_or(config.target.tile_count());
    let mut calibration = calibration;
    let (model, graph, mut package) = loop {
        let model = PackagedText::new(checkpoint, name, batch, &calibration);
        let graph = model
            .graph()
            .map_err(|source| PackageError::TextModel { source })?;
        match build_package(&graph, config, stages) {
            Ok(p) => break (model, graph, p),
            Err(e @ BuildError::DoesNotFit { .. }) if kept_f16(&calibration) => {
                tracing::warn!(
                    error = %e,
                    "does not fit with F16 groups; calibrating again without them"
                );
                let mut without = options.clone();
                without.f16_groups = F16Groups::Refused(format!(
                    "with them the package did not fit on {tiles} tiles ({e})"
                ));
                let start = Instant::now();
                calibration = calibrate_inputs(checkpoint, inputs.to_vec(), &without)
                    .map_err(|source| PackageError::Calibration { source })?;
                tracing::info!(
                    elapsed_ms = start.elapsed().as_millis() as u64,
                    "calibrated FP8 scales"
                );
            }
            Err(source) => return Err(PackageError::Build { source }),
        }
    };
    let weights = checkpoint
        .weights_for(&graph)
        .map_err(|source| PackageError::Weights { source })?;
    package.weights = Some(
        PackageWeights::encode(&graph, &weights)
            .map_err(|source| PackageError::Encode { source })?,
    );
    package.fixture =
        Some(write_fixture(&graph).map_err(|source| PackageError::Fixture { source })?);
    package.model = Some(
        model
            .description()
            .map_err(|source| PackageError::TextModel { source })?,
    );
    Ok(CheckpointPackage {
        package,
        graph,
        calibration,
    })
}
