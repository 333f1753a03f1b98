//! Hugging Face SigLIP checkpoints: the graph, its weights and its input
//! from a checkpoint directory and images.
//!
//! ```text
//! checkpoint dir ── config.json ──VisionConfig::from_json──► VisionConfig
//!    │                              │ + batch + PrecisionPolicy
//!    │                              ▼
//!    │                           build_graph ──► Graph (the SigLIP fixture's graph)
//!    ├── model.safetensors | model.safetensors.index.json + shards
//!    │      TensorStore (headers only) ──read_weights (name mapping)──► ValueSet (f32 weights)
//!    └── preprocessor_config.json ──► Processor
//! images ──read_rgb8──► Rgb8 ──resize (Pillow-exact), rescale, normalise──► pixel_values
//!        ──patchify──► ValueSet { patches }
//! ```
//!
//! [`import_checkpoint`] does the top half; [`Checkpoint::input_values`]
//! the bottom. The conventions a user needs (patch order, weight layouts,
//! the name mapping table, preprocessing, output names) are in
//! `docs/SIGLIP.md`. Weights are returned as read (F32, F16 or BF16
//! decoded to f32), not rounded to the graph's precisions: the reference
//! evaluator rounds supplied tensors itself, and FP8 scales are for a
//! calibration step to choose from these values.

mod config;
mod error;
mod image;
pub mod names;
mod policy;
mod processor;
mod resample;
mod siglip;
mod store;
mod weights;

use std::path::Path;

pub use config::{ConfigError, MAX_IMAGE_SIDE, VisionConfig, VisionParams};
pub use error::{ImageError, ImportError};
pub use image::{over_white, read_rgb8};
pub use policy::{PolicyError, PrecisionPolicy};
pub use processor::{Processor, ProcessorError, patchify};
pub use resample::{Filter, Rgb8};
pub use siglip::{BuildError, GraphOptions, build_graph};
pub use store::{INDEX_FILE, WEIGHTS_FILE};

use store::TensorStore;

use crate::graph::{Graph, TensorId, ValueSet};

/// The model description file of a checkpoint.
pub const CONFIG_FILE: &str = "config.json";
/// The image processor description file of a checkpoint.
pub const PROCESSOR_FILE: &str = "preprocessor_config.json";
/// The graph's image input.
pub const PATCHES: &str = "patches";
/// The graph output that is transformers' `last_hidden_state`.
pub const LAST_HIDDEN: &str = "last_hidden";
/// The graph output that is transformers' `pooler_output` (with a head).
pub const POOLED: &str = "pooled";

/// Options of [`import_checkpoint`].
#[derive(Clone, Debug, PartialEq)]
pub struct ImportConfig {
    /// Images per run.
    pub batch: u64,
    /// The precision of every graph tensor.
    pub policy: PrecisionPolicy,
    /// The graph's name; by default the directory's name and the batch,
    /// such as `siglip-so400m-patch14-384-b2`.
    pub name: Option<String>,
}

/// An imported checkpoint: its config, graph, weights and processor.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    config: VisionConfig,
    graph: Graph,
    weights: ValueSet,
    processor: Processor,
    patches: TensorId,
}

impl Checkpoint {
    /// The vision tower's shape.
    pub fn config(&self) -> &VisionConfig {
        &self.config
    }

    /// The SigLIP graph for the config, batch and policy.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Every graph weight, f32 as stored, by graph tensor id.
    pub fn weights(&self) -> &ValueSet {
        &self.weights
    }

    /// The image preprocessing.
    pub fn processor(&self) -> &Processor {
        &self.processor
    }

    /// The graph's image input tensor.
    pub fn patches(&self) -> TensorId {
        self.patches
    }

    /// The graph, the weights and the processor, by value.
    pub fn into_parts(self) -> (VisionConfig, Graph, ValueSet, Processor) {
        (self.config, self.graph, self.weights, self.processor)
    }

    /// The `patches` input for `images`, one per batch row in order.
    pub fn input_values<P: AsRef<Path>>(&self, images: &[P]) -> Result<ValueSet, ImageError> {
        let batch = self.graph.tensor(self.patches).extents()[0];
        if images.len() as u64 != batch {
            return Err(ImageError::Count {
                batch,
                found: images.len(),
            });
        }
        let mut patches = Vec::new();
        for path in images {
            let pixels = self.processor.pixel_values(path.as_ref())?;
            patchify(&self.config, &pixels, &mut patches)?;
        }
        let mut set = ValueSet::new();
        set.insert(self.patches, patches);
        Ok(set)
    }
}

/// Reads the config, weights and processor of the checkpoint in `dir`
/// and builds its graph (see the module header).
pub fn import_checkpoint(dir: &Path, options: &ImportConfig) -> Result<Checkpoint, ImportError> {
    let config = read_config(dir)?;
    let processor = read_processor(dir, &config)?;
    let name = options.name.clone().unwrap_or_else(|| {
        let stem = dir
            .file_name()
            .map_or_else(|| "siglip".into(), |n| n.to_string_lossy());
        format!("{stem}-b{}", options.batch)
    });
    let graph = build_graph(
        &config,
        &GraphOptions {
            name,
            batch: options.batch,
            policy: options.policy.clone(),
        },
    )
    .map_err(|source| ImportError::Build { source })?;
    let store = TensorStore::open(dir)?;
    let weights = weights::read_weights(&store, &config, &graph)?;
    let patches = graph
        .tensor_by_name(PATCHES)
        .ok_or_else(|| ImportError::Internal {
            what: "the graph has no `patches` input".to_owned(),
        })?;
    tracing::info!(
        dir = %dir.display(),
        layers = config.layers(),
        hidden = config.hidden(),
        head = config.use_head(),
        batch = options.batch,
        weights = weights.len(),
        "imported SigLIP checkpoint"
    );
    Ok(Checkpoint {
        config,
        graph,
        weights,
        processor,
        patches,
    })
}

/// Reads `config.json` of the checkpoint in `dir`.
pub fn read_config(dir: &Path) -> Result<VisionConfig, ImportError> {
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|source| ImportError::Io {
        path: path.clone(),
        source,
    })?;
    VisionConfig::from_json(&text).map_err(|source| ImportError::Config { path, source })
}

/// Reads `preprocessor_config.json` of the checkpoint in `dir`, or the
/// SigLIP defaults for `config` when there is none.
pub fn read_processor(dir: &Path, config: &VisionConfig) -> Result<Processor, ImportError> {
    let path = dir.join(PROCESSOR_FILE);
    if !path.is_file() {
        return Ok(Processor::default_for(config));
    }
    let text = std::fs::read_to_string(&path).map_err(|source| ImportError::Io {
        path: path.clone(),
        source,
    })?;
    Processor::from_json(&text, config).map_err(|source| ImportError::Processor { path, source })
}
