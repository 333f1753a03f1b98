//! The precision report: every precision decision of a package built from
//! a checkpoint, with what calibration measured for it (`precision` in
//! the front end's part of the package's `model.json`).
//!
//! The report is both the record a user reads (why each tensor has its
//! precision and scale, how many of its values saturate and its
//! quantisation error) and the precision table the graph is built from
//! ([`PrecisionReport::policy`]), so the two cannot disagree. It lists
//! every tensor role of the graph: encoder tensors once for all layers
//! (`enc{i}.fc1.w`, `x{i}`), since the encoder is one repeat whose
//! iterations share precisions; figures for a role are over the union of
//! its layers' values.
//!
//! ```json
//! {"format": "ipu-backend/precision/v1", "softmax": "F16",
//!  "calibration": {"inputs": ["a.png", ...], "saturation_threshold": 0.001, ...},
//!  "outputs": [{"output": "pooled", "relative_rms": 0.02, "cosine": 0.9998, ...}],
//!  "groups": [{"group": "bias", "roles": [...], "decision": "F16", ...}],
//!  "fidelity": {"min_cosine": 0.995, "required": 0.9975, "before": 0.9941, "after": 0.9978, "met": true,
//!               "operands": [{"operand": "weights", "role": "embed.w", ...}], ...},
//!  "tensors": [{"tensor": "enc{i}.fc1.w", "kind": "weight", "precision": "F143",
//!               "scale": -9, "elements": 32768, "max_abs": 0.41, "saturated": 0.0,
//!               "error": 0.021, "fp8_error": null, "reason": "..."}]}
//! ```

use std::collections::BTreeMap;

use ipu_layout::{Fp8Format, Precision};
use serde::{Deserialize, Serialize};

use crate::siglip::policy::PrecisionPolicy;
use ipu_package::graph::SoftmaxPrecision;
use ipu_package::package::ModelDescription;

/// The format tag of the precision report.
pub const PRECISION_FORMAT: &str = "ipu-backend/precision/v1";

/// The whole precision report (see the module header).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrecisionReport {
    /// [`PRECISION_FORMAT`].
    pub format: String,
    /// The precision attention softmaxes are computed in: `F16` or `F32`.
    pub softmax: String,
    /// How the calibration was run.
    pub calibration: CalibrationRecord,
    /// Each graph output on the calibration inputs, against the same graph
    /// with every tensor in F32.
    pub outputs: Vec<OutputRecord>,
    /// The F16 candidates and what keeping each group in F16 measured.
    pub groups: Vec<GroupRecord>,
    /// The fidelity target and the GEMM operands raised to F16 to meet
    /// it (absent in reports written before the target existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<FidelityRecord>,
    /// Every tensor role of the graph, in graph order.
    pub tensors: Vec<TensorRecord>,
}

/// The calibration run behind the figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationRecord {
    /// The calibration images: file names, or `synthetic-K` for the
    /// built-in synthetic images.
    pub inputs: Vec<String>,
    /// The fraction of saturated values above which a tensor is reported
    /// (and refused under `--strict`).
    pub saturation_threshold: f64,
    /// Activation scales leave this factor between the calibration
    /// maximum and the largest FP8 value.
    pub activation_headroom: f64,
    /// The least relative drop of the outputs' error that keeps a group
    /// of small weights in F16.
    pub f16_min_gain: f64,
}

/// One graph output on the calibration inputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputRecord {
    /// The output's name.
    pub output: String,
    /// `‖ours − f32‖₂ / ‖f32‖₂` with the package's precisions.
    pub relative_rms: f64,
    /// Cosine similarity with the F32 graph's output (whole tensor).
    pub cosine: f64,
    /// The relative RMS error with every F16 candidate in FP8.
    pub all_fp8_relative_rms: f64,
    /// The smallest cosine of one calibration input's output (absent in
    /// reports written before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smallest_cosine: Option<f64>,
}

/// A group of small weights that may stay in F16.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupRecord {
    /// `bias` (GEMM biases), `layer_norm` (gains and offsets) or
    /// `position` (weights added to activations: the position embedding).
    pub group: String,
    /// The roles in the group.
    pub roles: Vec<String>,
    /// Bytes the group takes beyond FP8 when kept in F16.
    pub extra_bytes: u64,
    /// The largest output relative RMS error with every candidate in FP8.
    pub error_fp8: f64,
    /// The same with this group alone in F16 (`null` when not measured).
    pub error_f16: Option<f64>,
    /// `F16` or `FP8`.
    pub decision: String,
    /// Why.
    pub reason: String,
}

/// The fidelity target: every output's cosine with the F32 graph's, on
/// each calibration input, at least `required`; and the GEMM operand
/// roles raised from FP8 to F16 to reach it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FidelityRecord {
    /// The target for images the package runs on; `null` when none was
    /// set.
    pub min_cosine: Option<f64>,
    /// What the calibration inputs must reach for it, with headroom for
    /// unseen images: `1 − (1 − min_cosine) /`
    /// [`FIDELITY_HEADROOM`](crate::siglip::FIDELITY_HEADROOM).
    pub required: Option<f64>,
    /// The smallest per-input output cosine before any operand was raised
    /// (FP8 with the F16 groups decided).
    pub before: f64,
    /// The same with the package's precisions.
    pub after: f64,
    /// Whether `after` meets the target.
    pub met: bool,
    /// Each candidate, in the order tried.
    pub operands: Vec<OperandRecord>,
    /// What was done, in a sentence.
    pub reason: String,
}

/// A GEMM operand role that may be raised from FP8 to F16.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperandRecord {
    /// `weights` (a GEMM weight role stored in F16, the casts its GEMMs
    /// read removed), `activations` (an FP8 cast role removed: the GEMM
    /// reads the F16 activation) or `group` (an F16 group's roles).
    pub operand: String,
    /// The role (`enc{i}.fc2.w`, `enc{i}.ln1.y8`), or the group's name.
    pub role: String,
    /// Weight bytes F16 adds, its GEMMs' weight operands raised with it
    /// included (0 for activations).
    pub extra_bytes: u64,
    /// The smallest per-input output cosine with this role alone raised.
    pub cosine_alone: f64,
    /// The same with it and every role raised before it; `null` when not
    /// tried.
    pub cosine_with_earlier: Option<f64>,
    /// `F16` or `FP8`.
    pub decision: String,
}

/// One tensor role's precision and what calibration measured for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorRecord {
    /// The tensor's name, or its role for encoder tensors (`enc{i}.fc1.w`).
    pub tensor: String,
    /// `input`, `weight`, `activation` (FP8 casts included) or `output`.
    pub kind: String,
    /// `F32`, `F16`, `F143` or `F152`.
    pub precision: String,
    /// The FP8 scale (value = code · 2^scale); `null` otherwise.
    pub scale: Option<i8>,
    /// Values measured (over every layer, and for activations every
    /// calibration input).
    pub elements: u64,
    /// The largest magnitude measured (for FP8 casts, in the F32 graph the
    /// scale was chosen from).
    pub max_abs: f64,
    /// The fraction of values beyond the precision's largest finite value.
    pub saturated: f64,
    /// The quantisation error `‖q(x) − x‖₂ / ‖x‖₂`; `null` where nothing
    /// is quantised against a wider value (computed activations, inputs).
    pub error: Option<f64>,
    /// For a weight kept in F16: the error FP8 would have given.
    pub fp8_error: Option<f64>,
    /// Why the tensor has this precision.
    pub reason: String,
}

/// Why a precision report cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// Another format.
    #[error("its format is `{found}`, this reader reads `{PRECISION_FORMAT}`")]
    Format {
        /// The format found.
        found: String,
    },
    /// A precision or scale is not one the graph knows.
    #[error("tensor `{tensor}`: precision `{precision}` with scale {scale:?} is not valid")]
    Precision {
        /// The role.
        tensor: String,
        /// The precision string.
        precision: String,
        /// The scale.
        scale: Option<i8>,
    },
    /// The softmax precision is none of F16, F32 and F16-FP8.
    #[error("softmax precision `{found}` is not F16, F32 or F16-FP8")]
    Softmax {
        /// What was found.
        found: String,
    },
}

/// `(name, scale)` of a precision, as the report writes it.
pub fn precision_name(precision: Precision) -> (&'static str, Option<i8>) {
    match precision {
        Precision::F32 => ("F32", None),
        Precision::F16 => ("F16", None),
        Precision::F8 {
            format: Fp8Format::F143,
            scale,
        } => ("F143", Some(scale)),
        Precision::F8 {
            format: Fp8Format::F152,
            scale,
        } => ("F152", Some(scale)),
    }
}

fn parse_precision(name: &str, scale: Option<i8>) -> Option<Precision> {
    match (name, scale) {
        ("F32", None) => Some(Precision::F32),
        ("F16", None) => Some(Precision::F16),
        ("F143", Some(scale)) => Some(Precision::F8 {
            format: Fp8Format::F143,
            scale,
        }),
        ("F152", Some(scale)) => Some(Precision::F8 {
            format: Fp8Format::F152,
            scale,
        }),
        _ => None,
    }
}

impl PrecisionReport {
    /// The report a package's `model.json` carries: every family's part
    /// of it holds the report under `precision`.
    pub fn of_model(model: &ModelDescription) -> Result<Self, serde_json::Error> {
        Self::deserialize(&model.frontend["precision"])
    }

    /// The precision policy the report's table gives.
    pub fn policy(&self) -> Result<PrecisionPolicy, ReportError> {
        if self.format != PRECISION_FORMAT {
            return Err(ReportError::Format {
                found: self.format.clone(),
            });
        }
        let softmax =
            SoftmaxPrecision::from_name(&self.softmax).ok_or_else(|| ReportError::Softmax {
                found: self.softmax.clone(),
            })?;
        let mut roles = BTreeMap::new();
        for t in &self.tensors {
            let precision =
                parse_precision(&t.precision, t.scale).ok_or_else(|| ReportError::Precision {
                    tensor: t.tensor.clone(),
                    precision: t.precision.clone(),
                    scale: t.scale,
                })?;
            roles.insert(t.tensor.clone(), precision);
        }
        Ok(PrecisionPolicy::from_roles(roles, softmax))
    }

    /// The tensors whose saturated fraction exceeds the threshold.
    pub fn saturating(&self) -> Vec<&TensorRecord> {
        self.tensors
            .iter()
            .filter(|t| t.saturated > self.calibration.saturation_threshold)
            .collect()
    }
}
