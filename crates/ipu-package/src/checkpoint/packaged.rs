//! A SigLIP model as a package carries it: `siglip.json` (the vision
//! config, the batch, the graph's name and the image preprocessing) and
//! `precision.json` (every tensor's precision, [`PrecisionReport`]). From
//! the two, [`PackagedModel::graph`] rebuilds exactly the graph the
//! package was built from, and [`PackagedModel::input_values`] turns
//! images into its input, without the checkpoint directory.
//!
//! `siglip.json`:
//!
//! ```json
//! {"format": "ipu-backend/siglip/v1", "name": "siglip-vision-head-b2", "batch": 2,
//!  "config": {"model_type": "siglip_vision_model", "hidden_size": 64, ...},
//!  "preprocessor": {"do_resize": true, "size": {"height": 16, "width": 16},
//!                   "resample": 3, "do_rescale": true, "rescale_factor": 0.00392156862745098,
//!                   "do_normalize": true, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], ...}}
//! ```
//!
//! `config` and `preprocessor` are written in transformers' own forms
//! (`config.json`, `preprocessor_config.json`) with every field present,
//! and read back by the same parsers as a checkpoint's files.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::checkpoint::config::{ConfigError, VisionConfig};
use crate::checkpoint::error::ImageError;
use crate::checkpoint::policy::PrecisionPolicy;
use crate::checkpoint::processor::{Processor, ProcessorError};
use crate::checkpoint::report::{PrecisionReport, ReportError};
use crate::checkpoint::siglip::{BuildError, GraphOptions, build_graph};
use crate::checkpoint::{Calibration, Checkpoint, PATCHES, images_to_patches, synthetic_patches};
use crate::graph::{Graph, ValueSet};
use crate::package::SiglipFiles;

/// The format tag of `siglip.json`.
pub const SIGLIP_FORMAT: &str = "ipu-backend/siglip/v1";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    format: String,
    name: String,
    batch: u64,
    config: serde_json::Value,
    preprocessor: serde_json::Value,
}

/// Why a package's SigLIP files cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackagedError {
    /// `siglip.json` is not of the expected form.
    #[error("siglip.json is not a SigLIP model description: {source}")]
    Json {
        /// The parser's finding.
        #[source]
        source: serde_json::Error,
    },
    /// `siglip.json` is of another format.
    #[error("siglip.json has format `{found}`, this reader reads `{SIGLIP_FORMAT}`")]
    Format {
        /// The format found.
        found: String,
    },
    /// The batch is 0.
    #[error("siglip.json gives batch 0; a graph needs at least one image")]
    Batch,
    /// The vision config is not usable.
    #[error("siglip.json `config`: {source}")]
    Config {
        /// Why.
        #[source]
        source: ConfigError,
    },
    /// The preprocessing is not usable.
    #[error("siglip.json `preprocessor`: {source}")]
    Processor {
        /// Why.
        #[source]
        source: ProcessorError,
    },
    /// `precision.json` is not usable.
    #[error("precision.json: {source}")]
    Report {
        /// Why.
        #[source]
        source: ReportError,
    },
    /// The graph cannot be built from the two files.
    #[error("the package's SigLIP graph cannot be built: {source}")]
    Build {
        /// Why.
        #[source]
        source: BuildError,
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

    /// Reads a package's `siglip.json` and `precision.json`.
    pub fn from_files(files: &SiglipFiles) -> Result<Self, PackagedError> {
        let file: ModelFile =
            serde_json::from_str(&files.model).map_err(|source| PackagedError::Json { source })?;
        if file.format != SIGLIP_FORMAT {
            return Err(PackagedError::Format { found: file.format });
        }
        if file.batch == 0 {
            return Err(PackagedError::Batch);
        }
        let config = VisionConfig::from_json(&file.config.to_string())
            .map_err(|source| PackagedError::Config { source })?;
        let processor = Processor::from_json(&file.preprocessor.to_string(), &config)
            .map_err(|source| PackagedError::Processor { source })?;
        let report = PrecisionReport::from_json(&files.precision)
            .map_err(|source| PackagedError::Report { source })?;
        let policy = report
            .policy()
            .map_err(|source| PackagedError::Report { source })?;
        Ok(Self {
            name: file.name,
            batch: file.batch,
            config,
            processor,
            report,
            policy,
        })
    }

    /// The package files `siglip.json` and `precision.json`.
    pub fn files(&self) -> SiglipFiles {
        let file = ModelFile {
            format: SIGLIP_FORMAT.to_owned(),
            name: self.name.clone(),
            batch: self.batch,
            config: self.config.to_json(),
            preprocessor: self.processor.to_json(),
        };
        SiglipFiles {
            // JSON values and plain fields: serialisation cannot fail.
            model: serde_json::to_string_pretty(&file).unwrap_or_default(),
            precision: self.report.to_json(),
        }
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
