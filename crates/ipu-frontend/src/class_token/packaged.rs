//! A ViT, CLIP vision or DINOv2 model as a package carries it: the graph
//! as `fixture.json` and the model description `model.json` of family
//! [`VIT_FAMILY`], [`CLIP_FAMILY`] or [`DINOV2_FAMILY`], whose front-end part is this
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

use ipu_package::graph::{Graph, ValueSet};
use ipu_package::package::ModelDescription;

use crate::class_token::{
    ClassTokenCheckpoint, ClassTokenConfig, Family, build_graph, images_input, processor_kind,
    synthetic_input,
};
use crate::error::ImageError;
use crate::processor::Processor;
use crate::siglip::graph::GraphOptions;
use crate::siglip::packaged::{read_image_description, same_graph, write_image_description};
use crate::siglip::policy::PrecisionPolicy;
use crate::siglip::report::PrecisionReport;
use crate::siglip::{Calibration, PackagedError};

/// The model family of a ViT in `model.json`.
pub const VIT_FAMILY: &str = "vit";
/// The model family of CLIP's vision tower in `model.json`.
pub const CLIP_FAMILY: &str = "clip-vision";
/// The model family of DINOv2 in `model.json`.
pub const DINOV2_FAMILY: &str = "dinov2";

/// The `model.json` family of `family`.
pub fn family_name(family: Family) -> &'static str {
    match family {
        Family::Vit => VIT_FAMILY,
        Family::Clip => CLIP_FAMILY,
        Family::Dinov2 => DINOV2_FAMILY,
    }
}

/// The format tag of the front end's part of `model.json`.
fn format_of(family: Family) -> &'static str {
    match family {
        Family::Vit => "ipu-frontend/vit/v1",
        Family::Clip => "ipu-frontend/clip-vision/v1",
        Family::Dinov2 => "ipu-frontend/dinov2/v1",
    }
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

    /// Reads the description of a package whose graph is `graph` and
    /// checks that it builds exactly that graph.
    pub fn from_description(
        model: &ModelDescription,
        graph: &Graph,
    ) -> Result<Self, PackagedError> {
        let family = match model.family.as_str() {
            CLIP_FAMILY => Family::Clip,
            DINOV2_FAMILY => Family::Dinov2,
            _ => Family::Vit,
        };
        let read = read_image_description(model, graph, family_name(family), format_of(family))?;
        let config = ClassTokenConfig::from_json(&read.config.to_string(), family)
            .map_err(|source| PackagedError::Config { source })?;
        let processor = Processor::read(
            &read.preprocessor.to_string(),
            processor_kind(family),
            config.input_size(),
        )
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
        let family = self.config.family();
        write_image_description(
            family_name(family),
            format_of(family),
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
