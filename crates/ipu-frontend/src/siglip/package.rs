//! A calibrated checkpoint built into a package, with the front end's
//! policy for F16 exceptions: calibration keeps a group of small weights
//! in F16 where it lowers the outputs' error, and raises GEMM operands to
//! F16 where FP8 misses the fidelity target, without knowing whether the
//! memory allows it; when the build does not fit with them, calibration
//! runs again with both refused ([`F16Groups::Refused`], the reason
//! recorded in the precision report: the target may then be missed) and
//! the build is tried once more. The package then carries the checkpoint's weights in the graph's
//! precisions (`weights.safetensors`), the graph (`fixture.json`, written
//! by `write_fixture`) and the model description (`model.json`).

use std::time::Instant;

use ipu_package::build::{BuildConfig, BuildError, Stages, build_package};
use ipu_package::graph::{Graph, ValueSet, WriteError, write_fixture};
use ipu_package::package::{ModelDescription, Package, PackageWeights, WeightsError};

use crate::error::ImportError;
use crate::siglip::calibrate::{Calibration, CalibrationError, CalibrationOptions, F16Groups};
use crate::siglip::packaged::{PackagedError, PackagedModel};
use crate::siglip::{Checkpoint, PATCHES, calibrate};

/// What [`package_checkpoint`] built.
#[derive(Debug)]
pub struct CheckpointPackage {
    /// The package, with its weights, graph and model description.
    pub package: Package,
    /// The graph the package was built from.
    pub graph: Graph,
    /// The calibration the graph's precisions come from: the one given,
    /// or the one without F16 groups when the build did not fit with them.
    pub calibration: Calibration,
}

/// Why a checkpoint could not be packaged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackageError {
    /// Calibrating again without F16 groups failed.
    #[error("calibrating again without F16 groups: {source}")]
    Calibration {
        /// Why.
        #[source]
        source: CalibrationError,
    },
    /// The build failed (and dropping the F16 groups could not help).
    #[error(transparent)]
    Build {
        /// Why.
        source: BuildError,
    },
    /// The model description could not be made.
    #[error(transparent)]
    Model {
        /// Why.
        source: PackagedError,
    },
    /// The text model description could not be made.
    #[error(transparent)]
    TextModel {
        /// Why.
        source: crate::siglip::text::TextPackagedError,
    },
    /// The checkpoint's weights do not fit the built graph: a bug here.
    #[error("the checkpoint's weights: {source}")]
    Weights {
        /// Why.
        #[source]
        source: ImportError,
    },
    /// The weights could not be encoded in the graph's precisions.
    #[error("encoding the weights: {source}")]
    Encode {
        /// Why.
        #[source]
        source: WeightsError,
    },
    /// The graph could not be stored as a fixture: a bug here.
    #[error("storing the graph: {source}")]
    Fixture {
        /// Why.
        #[source]
        source: WriteError,
    },
}

/// Builds `checkpoint` with the precisions of `calibration` (made with
/// `options`) into a package for `config` with `stages`, calibrating
/// again without F16 groups if the build does not fit with them (module
/// header). The package's name and batch are the checkpoint graph's.
pub fn package_checkpoint(
    checkpoint: &Checkpoint,
    calibration: Calibration,
    options: &CalibrationOptions,
    config: &BuildConfig,
    stages: &Stages,
) -> Result<CheckpointPackage, PackageError> {
    let graph = checkpoint.graph();
    let name = graph.name();
    // The importer's graph always has its `patches` input.
    let batch = crate::siglip::input_batch(graph, PATCHES).unwrap_or(0);
    build_with_fallback(
        Tower {
            model: &|calibration| {
                let model = PackagedModel::new(checkpoint, name, batch, calibration)
                    .map_err(|source| PackageError::Model { source })?;
                let graph = model
                    .graph()
                    .map_err(|source| PackageError::Model { source })?;
                Ok((graph, model.description()))
            },
            recalibrate: &|options| calibrate(checkpoint, options),
            weights_for: &|graph| checkpoint.weights_for(graph),
        },
        calibration,
        options,
        config,
        stages,
    )
}

/// A tower's graph and `model.json` under a calibration's precisions.
pub(crate) type ModelOf<'a> =
    &'a dyn Fn(&Calibration) -> Result<(Graph, ModelDescription), PackageError>;

/// What [`build_with_fallback`] needs of a tower: its graph and
/// description under a calibration, a calibration under other options,
/// and its weights for a graph.
pub(crate) struct Tower<'a> {
    /// The graph and `model.json` of the tower with a calibration's
    /// precisions.
    pub model: ModelOf<'a>,
    /// Calibrates the tower with other options.
    pub recalibrate: &'a dyn Fn(&CalibrationOptions) -> Result<Calibration, CalibrationError>,
    /// The tower's weights for a graph of it.
    pub weights_for: &'a dyn Fn(&Graph) -> Result<ValueSet, ImportError>,
}

/// Builds `tower` with `calibration`'s precisions, calibrating again
/// without F16 groups if the build does not fit with them (module header),
/// and fills the package's weights, graph and description: what every
/// family's packaging does.
pub(crate) fn build_with_fallback(
    tower: Tower<'_>,
    calibration: Calibration,
    options: &CalibrationOptions,
    config: &BuildConfig,
    stages: &Stages,
) -> Result<CheckpointPackage, PackageError> {
    let tiles = config.tiles.unwrap_or(config.target.tile_count());
    let mut calibration = calibration;
    let (description, graph, mut package) = loop {
        let (graph, description) = (tower.model)(&calibration)?;
        match build_package(&graph, config, stages) {
            Ok(p) => break (description, graph, p),
            // With F16 refused by the options, the precisions were given
            // (not measured here) and are built as they are.
            Err(e @ BuildError::DoesNotFit { .. })
                if kept_f16(&calibration) && options.f16_groups == F16Groups::Measure =>
            {
                tracing::warn!(
                    error = %e,
                    "does not fit with F16 groups or raised operands; calibrating again without them"
                );
                let mut without = options.clone();
                without.f16_groups = F16Groups::Refused(format!(
                    "with F16 exceptions the package did not fit on {tiles} tiles ({e})"
                ));
                let start = Instant::now();
                calibration = (tower.recalibrate)(&without)
                    .map_err(|source| PackageError::Calibration { source })?;
                tracing::info!(
                    inputs = calibration.report().calibration.inputs.len(),
                    elapsed_ms = start.elapsed().as_millis() as u64,
                    "calibrated FP8 scales"
                );
            }
            Err(source) => return Err(PackageError::Build { source }),
        }
    };
    let weights = (tower.weights_for)(&graph).map_err(|source| PackageError::Weights { source })?;
    package.weights = Some(
        PackageWeights::encode(&graph, &weights)
            .map_err(|source| PackageError::Encode { source })?,
    );
    package.fixture =
        Some(write_fixture(&graph).map_err(|source| PackageError::Fixture { source })?);
    package.model = Some(description);
    Ok(CheckpointPackage {
        package,
        graph,
        calibration,
    })
}

/// Whether `calibration` kept any group of weights in F16 or raised any
/// GEMM operand to F16 for the fidelity target.
pub(crate) fn kept_f16(calibration: &Calibration) -> bool {
    let report = calibration.report();
    report.groups.iter().any(|g| g.decision == "F16")
        || report
            .fidelity
            .as_ref()
            .is_some_and(|f| f.operands.iter().any(|o| o.decision == "F16"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::siglip::report::{
        CalibrationRecord, FidelityRecord, GroupRecord, OperandRecord, PRECISION_FORMAT,
        PrecisionReport,
    };

    /// A report whose one group and one operand have these decisions.
    fn calibration(group: &str, operand: &str) -> Calibration {
        let report = PrecisionReport {
            format: PRECISION_FORMAT.to_owned(),
            softmax: "F16".to_owned(),
            calibration: CalibrationRecord {
                inputs: vec!["synthetic-0".to_owned()],
                saturation_threshold: 1e-3,
                activation_headroom: 2.0,
                f16_min_gain: 0.01,
            },
            outputs: Vec::new(),
            groups: vec![GroupRecord {
                group: "bias".to_owned(),
                roles: vec!["enc{i}.fc1.b".to_owned()],
                extra_bytes: 64,
                error_fp8: 0.1,
                error_f16: Some(0.1),
                decision: group.to_owned(),
                reason: "a test".to_owned(),
            }],
            fidelity: Some(FidelityRecord {
                min_cosine: Some(0.995),
                required: Some(0.9975),
                before: 0.99,
                after: 0.998,
                met: true,
                operands: vec![OperandRecord {
                    operand: "weights".to_owned(),
                    role: "enc{i}.fc2.w".to_owned(),
                    extra_bytes: 4096,
                    cosine_alone: 0.998,
                    cosine_with_earlier: Some(0.998),
                    decision: operand.to_owned(),
                }],
                reason: "a test".to_owned(),
            }),
            tensors: Vec::new(),
        };
        Calibration::from_report(report).expect("an empty table reads back")
    }

    /// A build that does not fit is calibrated again when the calibration
    /// kept a group or raised an operand, either alone, and not when it
    /// did neither.
    #[test]
    fn raised_operands_count_as_f16_exceptions_as_groups_do() {
        assert!(kept_f16(&calibration("F16", "FP8")));
        assert!(kept_f16(&calibration("FP8", "F16")));
        assert!(kept_f16(&calibration("F16", "F16")));
        assert!(!kept_f16(&calibration("FP8", "FP8")));
    }
}
