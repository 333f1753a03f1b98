//! A ViT or CLIP vision model as a package carries it: the graph as
//! `fixture.json` and the model description `model.json` of family
//! [`VIT_FAMILY`] or [`CLIP_FAMILY`], whose front-end part is this
//! module's, in the form of SigLIP's (`siglip::PackagedModel`):
//!
//! ```json
//! {"format": "ipu-frontend/vit/v1",
//!  "config": {"model_type": "vit", "hidden_size": 32, ..., "add_pooling_layer": true},
//!  "preprocessor": {"image_processor_type": "ViTImageProcessor", "size": {"height": 16, "width": 16}, ...},
//!  "precision": {"format": "ipu-backend/precision/v1", ...}}
//! ```
//!
//! Read back ([`PackagedClassToken::from_description`]), the description
//! must build exactly the package's graph.

use std::path::Path;

use serde::{Deserialize, Serialize};

use ipu_package::graph::{Graph, ValueSet};
use ipu_package::package::{InputSource, ModelDescription, ModelInput};

use crate::class_token::{
    ClassTokenCheckpoint, ClassTokenConfig, Family, PATCHES, build_graph, images_input,
    processor_kind, synthetic_input,
};
use crate::error::ImageError;
use crate::processor::{Processor, ProcessorError};
use crate::siglip::config::ConfigError;
use crate::siglip::graph::{BuildError, GraphOptions};
use crate::siglip::policy::PrecisionPolicy;
use crate::siglip::report::{PrecisionReport, ReportError};
use crate::siglip::{Calibration, first_difference};

/// The model family of a ViT in `model.json`.
pub const VIT_FAMILY: &str = "vit";
/// The model family of CLIP's vision tower in `model.json`.
pub const CLIP_FAMILY: &str = "clip-vision";

/// The `model.json` family of `family`.
pub fn family_name(family: Family) -> &'static str {
    match family {
        Family::Vit => VIT_FAMILY,
        Family::Clip => CLIP_FAMILY,
    }
}

/// The format tag of the front end's part of `model.json`.
fn format_of(family: Family) -> String {
    format!("ipu-frontend/{}/v1", family_name(family))
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Description {
    format: String,
    config: serde_json::Value,
    preprocessor: serde_json::Value,
    precision: PrecisionReport,
}

/// Why a package's ViT or CLIP model description cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClassTokenPackagedError {
    /// The description is of another model family.
    #[error(
        "model.json describes a `{found}` model; this front end reads `{VIT_FAMILY}` and `{CLIP_FAMILY}`"
    )]
    Family {
        /// The family found.
        found: String,
    },
    /// The front end's part is not of the expected form.
    #[error("model.json `frontend` is not a {family} model description: {source}")]
    Json {
        /// The family.
        family: &'static str,
        /// The parser's finding.
        #[source]
        source: serde_json::Error,
    },
    /// The front end's part is of another format.
    #[error("model.json `frontend` has format `{found}`, this reader reads `{expected}`")]
    Format {
        /// The format found.
        found: String,
        /// The format read.
        expected: String,
    },
    /// The batch is 0.
    #[error("the batch is 0; a graph needs at least one image")]
    Batch,
    /// The config is not usable.
    #[error("model.json `frontend.config`: {source}")]
    Config {
        /// Why.
        #[source]
        source: ConfigError,
    },
    /// The preprocessing is not usable.
    #[error("model.json `frontend.preprocessor`: {source}")]
    Processor {
        /// Why.
        #[source]
        source: ProcessorError,
    },
    /// The precision table is not usable.
    #[error("model.json `frontend.precision`: {source}")]
    Report {
        /// Why.
        #[source]
        source: ReportError,
    },
    /// The graph cannot be built from the description.
    #[error("model.json: the graph cannot be built from the description: {source}")]
    Build {
        /// Why.
        #[source]
        source: BuildError,
    },
    /// The package's graph has no `patches` input.
    #[error("the package's graph has no `{PATCHES}` input of shape [batch, tokens, patch]")]
    NoPatches,
    /// The description's inputs are not the one the model has.
    #[error("model.json's inputs must be `{PATCHES}` from images, the model's one input")]
    Inputs,
    /// The description builds another graph than the package holds.
    #[error(
        "model.json does not describe the package's graph: {what} differs from what its config and precisions build"
    )]
    Mismatch {
        /// What differs first.
        what: String,
    },
}

/// A ViT or CLIP vision model as a package carries it (module header).
#[derive(Clone, Debug)]
pub struct PackagedClassToken {
    name: String,
    batch: u64,
    config: ClassTokenConfig,
    processor: Processor,
    report: PrecisionReport,
    policy: PrecisionPolicy,
}

impl PackagedClassToken {
    /// The model of `checkpoint` at `batch` with the calibrated precisions.
    pub fn new(
        checkpoint: &ClassTokenCheckpoint,
        name: &str,
        batch: u64,
        calibration: &Calibration,
    ) -> Result<Self, ClassTokenPackagedError> {
        if batch == 0 {
            return Err(ClassTokenPackagedError::Batch);
        }
        Ok(Self {
            name: name.to_owned(),
            batch,
            config: checkpoint.config().clone(),
            processor: checkpoint.processor().clone(),
            report: calibration.report().clone(),
            policy: calibration.policy().clone(),
        })
    }

    /// Reads the description of a package whose graph is `graph` and
    /// checks that it builds exactly that graph.
    pub fn from_description(
        model: &ModelDescription,
        graph: &Graph,
    ) -> Result<Self, ClassTokenPackagedError> {
        let family = match model.family.as_str() {
            VIT_FAMILY => Family::Vit,
            CLIP_FAMILY => Family::Clip,
            other => {
                return Err(ClassTokenPackagedError::Family {
                    found: other.to_owned(),
                });
            }
        };
        if model.inputs != inputs() {
            return Err(ClassTokenPackagedError::Inputs);
        }
        let file: Description =
            serde_json::from_value(model.frontend.clone()).map_err(|source| {
                ClassTokenPackagedError::Json {
                    family: family_name(family),
                    source,
                }
            })?;
        if file.format != format_of(family) {
            return Err(ClassTokenPackagedError::Format {
                found: file.format,
                expected: format_of(family),
            });
        }
        let config = ClassTokenConfig::from_json(&file.config.to_string(), family)
            .map_err(|source| ClassTokenPackagedError::Config { source })?;
        let processor = Processor::read(
            &file.preprocessor.to_string(),
            processor_kind(family),
            config.image_size(),
        )
        .map_err(|source| ClassTokenPackagedError::Processor { source })?;
        let policy = file
            .precision
            .policy()
            .map_err(|source| ClassTokenPackagedError::Report { source })?;
        let batch = graph
            .tensor_by_name(PATCHES)
            .and_then(|id| graph.tensor(id).extents().first().copied())
            .ok_or(ClassTokenPackagedError::NoPatches)?;
        let packaged = Self {
            name: graph.name().to_owned(),
            batch,
            config,
            processor,
            report: file.precision,
            policy,
        };
        let built = packaged.graph()?;
        if let Some(what) = first_difference(&built, graph) {
            return Err(ClassTokenPackagedError::Mismatch { what });
        }
        Ok(packaged)
    }

    /// The package's `model.json`.
    pub fn description(&self) -> ModelDescription {
        let family = self.config.family();
        let file = Description {
            format: format_of(family),
            config: self.config.to_json(),
            preprocessor: self.processor.to_json(),
            precision: self.report.clone(),
        };
        ModelDescription::new(
            family_name(family),
            inputs(),
            // Strings and numbers only: serialisation cannot fail.
            serde_json::to_value(&file).unwrap_or_default(),
        )
    }

    /// The graph the package was built from.
    pub fn graph(&self) -> Result<Graph, ClassTokenPackagedError> {
        build_graph(
            &self.config,
            &GraphOptions {
                name: self.name.clone(),
                batch: self.batch,
                policy: self.policy.clone(),
            },
        )
        .map_err(|source| ClassTokenPackagedError::Build { source })
    }

    /// The `patches` input of `graph` for `images`, one per batch row.
    pub fn input_values<P: AsRef<Path>>(
        &self,
        graph: &Graph,
        images: &[P],
    ) -> Result<ValueSet, ImageError> {
        images_input(&self.config, &self.processor, graph, images)
    }

    /// The `patches` input of `graph` for the synthetic images
    /// `first..first + batch`.
    pub fn synthetic_input_values(
        &self,
        graph: &Graph,
        first: usize,
    ) -> Result<ValueSet, ImageError> {
        synthetic_input(&self.config, &self.processor, graph, first)
    }

    /// The model's family, as `model.json` names it.
    pub fn family(&self) -> &'static str {
        family_name(self.config.family())
    }

    /// The tower's shape and heads.
    pub fn config(&self) -> &ClassTokenConfig {
        &self.config
    }

    /// The precision decisions.
    pub fn report(&self) -> &PrecisionReport {
        &self.report
    }
}

/// The graph inputs a run makes from a user's data: `patches`, from images.
fn inputs() -> Vec<ModelInput> {
    vec![ModelInput {
        tensor: PATCHES.to_owned(),
        from: InputSource::Images,
    }]
}
