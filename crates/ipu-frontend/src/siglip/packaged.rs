//! A SigLIP model as a package carries it: the graph as `fixture.json`
//! (generic, written by `write_fixture`) and the model description
//! `model.json` ([`ModelDescription`]) of family [`FAMILY`], whose
//! front-end part is this module's:
//!
//! ```json
//! {"format": "ipu-frontend/siglip-vision/v1",
//!  "config": {"model_type": "siglip_vision_model", "hidden_size": 64, ...},
//!  "preprocessor": {"do_resize": true, "size": {"height": 16, "width": 16},
//!                   "resample": 3, "do_rescale": true, "rescale_factor": 0.00392156862745098,
//!                   "do_normalize": true, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], ...},
//!  "precision": {"format": "ipu-backend/precision/v1", ...}}
//! ```
//!
//! `config` and `preprocessor` are written in transformers' own forms
//! (`config.json`, `preprocessor_config.json`) with every field present,
//! and read back by the same parsers as a checkpoint's files; `precision`
//! is the calibration's [`PrecisionReport`]. Read back
//! ([`PackagedModel::from_description`]), the description must build
//! exactly the package's graph (its name and batch from the graph, its
//! precisions from the report), so a run preprocesses images for the
//! graph the package holds and nothing else.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::ImageError;
use crate::processor::{Processor, ProcessorError};
use crate::siglip::config::{ConfigError, VisionConfig};
use crate::siglip::graph::{BuildError, GraphOptions, build_graph};
use crate::siglip::policy::PrecisionPolicy;
use crate::siglip::report::{PrecisionReport, ReportError};
use crate::siglip::{Calibration, Checkpoint, PATCHES, images_to_patches, synthetic_patches};
use ipu_package::graph::{Graph, ValueSet};
use ipu_package::package::{InputSource, ModelDescription, ModelInput};

/// The model family of a SigLIP vision tower in `model.json`.
pub const FAMILY: &str = "siglip-vision";
/// The format tag of the front end's part of `model.json`.
pub const SIGLIP_FORMAT: &str = "ipu-frontend/siglip-vision/v1";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Description {
    format: String,
    config: serde_json::Value,
    preprocessor: serde_json::Value,
    precision: PrecisionReport,
}

/// Why a package's model description cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackagedError {
    /// The description is of another model family.
    #[error("model.json describes a `{found}` model; this front end reads `{expected}`")]
    Family {
        /// The family found.
        found: String,
        /// The family read.
        expected: &'static str,
    },
    /// The front end's part is not of the expected form.
    #[error("model.json `frontend` is not a `{family}` model description: {source}")]
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
        expected: &'static str,
    },
    /// The batch is 0.
    #[error("the batch is 0; a graph needs at least one image")]
    Batch,
    /// The vision config is not usable.
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
    /// The package's graph has no `patches` input, or one without a batch
    /// axis.
    #[error("the package's graph has no `{PATCHES}` input of shape [batch, tokens, patch]")]
    NoPatches,
    /// The description's inputs are not the one an image model has.
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

/// A SigLIP model as a package carries it (see the module header).
#[derive(Clone, Debug)]
pub struct PackagedModel {
    name: String,
    batch: u64,
    config: VisionConfig,
    processor: Processor,
    report: PrecisionReport,
    policy: PrecisionPolicy,
}

impl PackagedModel {
    /// The model of `checkpoint` at `batch` with the calibrated
    /// precisions; `name` is the graph's (and so the package's) name.
    pub fn new(
        checkpoint: &Checkpoint,
        name: &str,
        batch: u64,
        calibration: &Calibration,
    ) -> Result<Self, PackagedError> {
        if batch == 0 {
            return Err(PackagedError::Batch);
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

    /// Reads the description of a package whose graph is `graph`, and
    /// checks that it builds exactly that graph (see the module header).
    pub fn from_description(
        model: &ModelDescription,
        graph: &Graph,
    ) -> Result<Self, PackagedError> {
        let read = read_image_description(model, graph, FAMILY, SIGLIP_FORMAT)?;
        let config = VisionConfig::from_json(&read.config.to_string())
            .map_err(|source| PackagedError::Config { source })?;
        let processor = Processor::from_json(&read.preprocessor.to_string(), &config)
            .map_err(|source| PackagedError::Processor { source })?;
        let packaged = Self {
            name: read.name,
            batch: read.batch,
            config,
            processor,
            report: read.report,
            policy: read.policy,
        };
        same_graph(&packaged.graph()?, graph)?;
        Ok(packaged)
    }

    /// The package's `model.json`.
    pub fn description(&self) -> ModelDescription {
        write_image_description(
            FAMILY,
            SIGLIP_FORMAT,
            self.config.to_json(),
            self.processor.to_json(),
            &self.report,
        )
    }

    /// The graph the package was built from.
    pub fn graph(&self) -> Result<Graph, PackagedError> {
        build_graph(
            &self.config,
            &GraphOptions {
                name: self.name.clone(),
                batch: self.batch,
                policy: self.policy.clone(),
            },
        )
        .map_err(|source| PackagedError::Build { source })
    }

    /// The `patches` input of `graph` (from [`PackagedModel::graph`]) for
    /// `images`, one per batch row, preprocessed as the checkpoint's
    /// processor says.
    pub fn input_values<P: AsRef<Path>>(
        &self,
        graph: &Graph,
        images: &[P],
    ) -> Result<ValueSet, ImageError> {
        let patches = graph
            .tensor_by_name(PATCHES)
            .ok_or_else(|| ImageError::Internal {
                what: format!("graph `{}` has no `{PATCHES}` input", graph.name()),
            })?;
        images_to_patches(&self.config, &self.processor, graph, patches, images)
    }

    /// The `patches` input of `graph` for the built-in synthetic images
    /// `first..first + batch` (the calibration images when `first` is 0),
    /// for a run that is given no images: they drive the model as
    /// photographs do, so the run checks the device in the activation
    /// ranges its FP8 scales were chosen for.
    pub fn synthetic_input_values(
        &self,
        graph: &Graph,
        first: usize,
    ) -> Result<ValueSet, ImageError> {
        let patches = graph
            .tensor_by_name(PATCHES)
            .ok_or_else(|| ImageError::Internal {
                what: format!("graph `{}` has no `{PATCHES}` input", graph.name()),
            })?;
        synthetic_patches(&self.config, &self.processor, graph, patches, first)
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Images per run.
    pub fn batch(&self) -> u64 {
        self.batch
    }

    /// The vision tower's shape.
    pub fn config(&self) -> &VisionConfig {
        &self.config
    }

    /// The image preprocessing.
    pub fn processor(&self) -> &Processor {
        &self.processor
    }

    /// The precision decisions.
    pub fn report(&self) -> &PrecisionReport {
        &self.report
    }
}

/// What an image model's `model.json` says besides its family's config
/// and processor (which the family parses), read by
/// [`read_image_description`].
pub(crate) struct ImageDescription {
    /// The package graph's name.
    pub name: String,
    /// The package graph's batch.
    pub batch: u64,
    /// The family's config, in transformers' form.
    pub config: serde_json::Value,
    /// The family's processor, in transformers' form.
    pub preprocessor: serde_json::Value,
    /// The precision decisions.
    pub report: PrecisionReport,
    /// The precisions they give.
    pub policy: PrecisionPolicy,
}

/// Reads the description (`family`, `format`) of an image model's package
/// whose graph is `graph`: its inputs must be `patches` from images and its
/// precision table usable; the name and batch are the graph's.
pub(crate) fn read_image_description(
    model: &ModelDescription,
    graph: &Graph,
    family: &'static str,
    format: &'static str,
) -> Result<ImageDescription, PackagedError> {
    if model.family != family {
        return Err(PackagedError::Family {
            found: model.family.clone(),
            expected: family,
        });
    }
    if model.inputs != image_inputs() {
        return Err(PackagedError::Inputs);
    }
    let file: Description = serde_json::from_value(model.frontend.clone())
        .map_err(|source| PackagedError::Json { family, source })?;
    if file.format != format {
        return Err(PackagedError::Format {
            found: file.format,
            expected: format,
        });
    }
    let policy = file
        .precision
        .policy()
        .map_err(|source| PackagedError::Report { source })?;
    let batch = crate::siglip::input_batch(graph, PATCHES).ok_or(PackagedError::NoPatches)?;
    Ok(ImageDescription {
        name: graph.name().to_owned(),
        batch,
        config: file.config,
        preprocessor: file.preprocessor,
        report: file.precision,
        policy,
    })
}

/// The `model.json` of an image model (`family`, `format`) with its
/// config, processor and precision decisions.
pub(crate) fn write_image_description(
    family: &str,
    format: &str,
    config: serde_json::Value,
    preprocessor: serde_json::Value,
    report: &PrecisionReport,
) -> ModelDescription {
    let file = Description {
        format: format.to_owned(),
        config,
        preprocessor,
        precision: report.clone(),
    };
    ModelDescription::new(
        family,
        image_inputs(),
        // JSON values, strings and numbers: serialisation cannot fail
        // (a non-finite figure becomes null).
        serde_json::to_value(&file).unwrap_or_default(),
    )
}

/// The graph inputs a run of an image model makes from a user's data:
/// `patches`, from images.
fn image_inputs() -> Vec<ModelInput> {
    vec![ModelInput {
        tensor: PATCHES.to_owned(),
        from: InputSource::Images,
    }]
}

/// `Ok` when `built` (from a description) is the package's `graph`.
pub(crate) fn same_graph(built: &Graph, graph: &Graph) -> Result<(), PackagedError> {
    match first_difference(built, graph) {
        Some(what) => Err(PackagedError::Mismatch { what }),
        None => Ok(()),
    }
}

/// The first way `a` and `b` differ, if they do: name, tensors, ops or
/// repeats, by id.
pub(crate) fn first_difference(a: &Graph, b: &Graph) -> Option<String> {
    if a.name() != b.name() {
        return Some("the name".to_owned());
    }
    if a.tensors().len() != b.tensors().len() {
        return Some("the tensor count".to_owned());
    }
    if let Some((_, t)) = a
        .tensors()
        .values()
        .iter()
        .zip(b.tensors().values())
        .find(|(x, y)| x != y)
    {
        return Some(format!("tensor `{}`", t.name()));
    }
    if a.ops().values() != b.ops().values() {
        return Some("an op".to_owned());
    }
    (a.repeats() != b.repeats()).then(|| "the repeat".to_owned())
}
