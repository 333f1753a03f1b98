//! Model front ends for the IPU21 backend: from a model as its authors
//! publish it (a Hugging Face checkpoint directory) to the backend's graph
//! with its weights, from a user's data (images) to the graph's inputs,
//! and the FP8 precisions of the graph chosen from data.
//!
//! ```text
//!              ┌──────────────── ipu-frontend ─────────────────┐
//! checkpoint ──┤ hf (files, safetensors store)                 │
//!              │ <family>: config → Graph, names → weights,    ├──► Graph + weights ──► ipu_package::build_package
//! images ──────┤ imaging (decode, Pillow resize) + family's    │                       (Package + fixture.json
//!              │   preprocessing → the graph's inputs          │                        + model.json)
//!              │ <family>::calibrate ──ipu_sim::evaluate_with──┤
//!              └───────────────────────────────────────────────┘
//! package's fixture.json + model.json ──PackagedModel──► images → inputs (run-package)
//! ```
//!
//! A model family is a module: [`siglip`] (SigLIP's vision and text
//! towers) and [`class_token`] (ViT, CLIP's vision tower and DINOv2, which reuse
//! SigLIP's encoder builder, precision policy, weight reader, calibration
//! and packaging). A family reads its checkpoint's config and builds its
//! graph in code (`config.rs`, `graph.rs`), maps the checkpoint's tensor
//! names to the graph's weights (`names.rs`, `weights.rs`), chooses its
//! precisions (`calibrate.rs`, `policy.rs`, `report.rs`), builds its
//! package (`package.rs`) and reads back what its packages record
//! (`packaged.rs`). What every family shares is at the crate root: [`hf`]
//! (a checkpoint directory's files and its safetensors weights, decoded
//! by ipu-package's one decoder of stored elements), [`imaging`] (image
//! decoding, Pillow's resize, the synthetic calibration images),
//! [`processor`] (transformers' image processors with each family's
//! defaults, and the patch order), [`checkpoint_kind`] (which family reads
//! a checkpoint) and the errors of import and preprocessing.
//!
//! A package records the family and the front end's own description of
//! the model in `model.json`, beside the graph itself in `fixture.json`
//! (`docs/FORMAT.md`); ipu-package validates a package without this crate,
//! and [`PackagedModel::from_description`] turns a package's description
//! back into what a run needs, checked against the stored graph.

#![forbid(unsafe_code)]

pub mod class_token;
mod error;
pub mod hf;
pub mod imaging;
pub mod processor;
pub mod siglip;

use std::path::Path;

use ipu_package::graph::{Graph, ValueSet};
use ipu_package::package::ModelDescription;

pub use error::{ImageError, ImportError};

/// The model families this crate reads, by their `model.json` names.
pub const FAMILIES: &[&str] = &[
    siglip::FAMILY,
    siglip::text::TEXT_FAMILY,
    siglip::text::CLIP_TEXT_FAMILY,
    class_token::VIT_FAMILY,
    class_token::CLIP_FAMILY,
    class_token::DINOV2_FAMILY,
];

/// The `model_type`s of `config.json` this crate reads.
pub const MODEL_TYPES: &[&str] = &[
    "siglip",
    "siglip_vision_model",
    "siglip_text_model",
    "vit",
    "clip",
    "clip_vision_model",
    "clip_text_model",
    "dinov2",
    "dinov2_with_registers",
];

/// Which importer reads a checkpoint, by its config's `model_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointKind {
    /// SigLIP (`siglip`, `siglip_vision_model`, `siglip_text_model`, or
    /// no `model_type`, as SigLIP's first exports had).
    Siglip,
    /// ViT, CLIP or DINOv2: the vision tower by [`class_token`]; CLIP's
    /// text tower (`clip_text_model`, or `clip` with `--tower text`) by
    /// [`siglip::text`].
    ClassToken(class_token::Family),
}

/// The importer of the checkpoint in `dir`, from its `config.json`'s
/// `model_type`; an unsupported type is an error naming the supported
/// ones.
pub fn checkpoint_kind(dir: &Path) -> Result<CheckpointKind, ImportError> {
    let path = dir.join(hf::CONFIG_FILE);
    let value: serde_json::Value = hf::read_json(&path)?;
    match value.get("model_type").and_then(|m| m.as_str()) {
        None | Some("siglip" | "siglip_vision_model" | "siglip_text_model") => {
            Ok(CheckpointKind::Siglip)
        }
        Some("vit") => Ok(CheckpointKind::ClassToken(class_token::Family::Vit)),
        Some("clip" | "clip_vision_model" | "clip_text_model") => {
            Ok(CheckpointKind::ClassToken(class_token::Family::Clip))
        }
        Some("dinov2" | "dinov2_with_registers") => {
            Ok(CheckpointKind::ClassToken(class_token::Family::Dinov2))
        }
        Some(other) => Err(ImportError::Config {
            path,
            source: siglip::ConfigError::ModelType {
                model_type: other.to_owned(),
            },
        }),
    }
}

/// A packaged model of one of the families: what a run of its package
/// needs of the front end.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum PackagedModel {
    /// SigLIP's vision tower.
    Siglip(Box<siglip::PackagedModel>),
    /// SigLIP's text tower.
    SiglipText(Box<siglip::text::PackagedText>),
    /// ViT or CLIP's vision tower.
    ClassToken(Box<class_token::PackagedClassToken>),
}

/// Why a package's `model.json` cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DescriptionError {
    /// No front end of this build reads the family.
    #[error("model.json describes a `{found}` model; this build reads {}", FAMILIES.join(", "))]
    Family {
        /// The family named.
        found: String,
    },
    /// The SigLIP front end refuses the description.
    #[error(transparent)]
    Siglip(siglip::PackagedError),
    /// The SigLIP text front end refuses the description.
    #[error(transparent)]
    SiglipText(siglip::text::TextPackagedError),
    /// The ViT or CLIP front end refuses the description.
    #[error(transparent)]
    ClassToken(siglip::PackagedError),
}

impl PackagedModel {
    /// The front end of `description`'s family, reading its description
    /// of the package whose graph is `graph` and checking it against it.
    pub fn from_description(
        description: &ModelDescription,
        graph: &Graph,
    ) -> Result<Self, DescriptionError> {
        match description.family.as_str() {
            siglip::FAMILY => siglip::PackagedModel::from_description(description, graph)
                .map(|m| Self::Siglip(Box::new(m)))
                .map_err(DescriptionError::Siglip),
            siglip::text::TEXT_FAMILY | siglip::text::CLIP_TEXT_FAMILY => {
                siglip::text::PackagedText::from_description(description, graph)
                    .map(|m| Self::SiglipText(Box::new(m)))
                    .map_err(DescriptionError::SiglipText)
            }
            class_token::VIT_FAMILY | class_token::CLIP_FAMILY | class_token::DINOV2_FAMILY => {
                class_token::PackagedClassToken::from_description(description, graph)
                    .map(|m| Self::ClassToken(Box::new(m)))
                    .map_err(DescriptionError::ClassToken)
            }
            other => Err(DescriptionError::Family {
                found: other.to_owned(),
            }),
        }
    }

    /// The inputs of `graph` (the package's) for `images`, one per batch
    /// row, preprocessed as the description says.
    pub fn input_values<P: AsRef<Path>>(
        &self,
        graph: &Graph,
        images: &[P],
    ) -> Result<ValueSet, ImageError> {
        match self {
            Self::Siglip(model) => model.input_values(graph, images),
            Self::ClassToken(model) => model.input_values(graph, images),
            Self::SiglipText(_) => Err(ImageError::Kind {
                given: "images",
                takes: "texts (--text)",
            }),
        }
    }

    /// The model's family, as `model.json` names it.
    pub fn family(&self) -> &'static str {
        match self {
            Self::Siglip(_) => siglip::FAMILY,
            Self::SiglipText(model) => model.family(),
            Self::ClassToken(model) => model.family(),
        }
    }

    /// SigLIP's `logit_scale` and `logit_bias`, which a text package of a
    /// full checkpoint records.
    pub fn logits(&self) -> Option<siglip::text::LogitParams> {
        match self {
            Self::SiglipText(model) => model.logits(),
            Self::Siglip(_) | Self::ClassToken(_) => None,
        }
    }

    /// The inputs of `graph` (the package's) for `texts`, one per batch
    /// row, tokenized as the description says.
    pub fn text_values(
        &self,
        graph: &Graph,
        texts: &[String],
        truncation: siglip::text::Truncation,
    ) -> Result<ValueSet, ImageError> {
        match self {
            Self::SiglipText(model) => model.text_values(graph, texts, truncation),
            Self::Siglip(_) | Self::ClassToken(_) => Err(ImageError::Kind {
                given: "texts",
                takes: "images (--image)",
            }),
        }
    }

    /// The inputs of `graph` for the built-in synthetic images
    /// `first..first + batch`, preprocessed like a user's images: what a
    /// run that is given no images runs on, so that the model sees the
    /// activation ranges its FP8 scales were chosen for.
    pub fn synthetic_input_values(
        &self,
        graph: &Graph,
        first: usize,
    ) -> Result<ValueSet, ImageError> {
        match self {
            Self::Siglip(model) => model.synthetic_input_values(graph, first),
            Self::SiglipText(model) => model.synthetic_text_values(graph, first),
            Self::ClassToken(model) => model.synthetic_input_values(graph, first),
        }
    }
}
