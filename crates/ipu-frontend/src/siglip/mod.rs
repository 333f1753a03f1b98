//! The SigLIP vision tower (`SiglipVisionModel`, or the vision half of a
//! `SiglipModel`): the graph, its weights and its input from a Hugging
//! Face checkpoint directory and images, the FP8 calibration of the graph,
//! and the model as a package describes it.
//!
//! ```text
//! checkpoint dir ── config.json ──VisionConfig::from_json──► VisionConfig       (config.rs)
//!    │                              │ + batch + PrecisionPolicy               (policy.rs)
//!    │                              ▼
//!    │                           build_graph ──► Graph (the SigLIP fixture's graph)  (graph.rs)
//!    ├── model.safetensors | model.safetensors.index.json + shards
//!    │      TensorStore (headers only) ──read_weights (name mapping)──► ValueSet (f32 weights)
//!    │                                                          (hf, names.rs, weights.rs)
//!    └── preprocessor_config.json ──► Processor                 (crate::processor, processor.rs)
//! images ──read_rgb8──► Rgb8 ──resize (Pillow-exact), rescale, normalise──► pixel_values
//!        ──patchify──► ValueSet { patches }              (imaging, crate::processor)
//! Checkpoint + calibration images ──calibrate (reference evaluator)──► Calibration
//!        ──package_checkpoint (build, F16 groups dropped if it does not fit)──► Package
//!                                                   (calibrate.rs, report.rs, package.rs)
//! Package's fixture.json + model.json ──PackagedModel──► images → patches  (packaged.rs)
//! ```
//!
//! [`import_checkpoint`] does the top half; [`Checkpoint::input_values`]
//! the bottom. The conventions a user needs (patch order, weight layouts,
//! the name mapping table, preprocessing, output names) are in
//! `docs/SIGLIP.md`. Weights are returned as read (F32, F16 or BF16
//! decoded to f32), not rounded to the graph's precisions: the reference
//! evaluator rounds supplied tensors itself, and FP8 scales are for a
//! calibration step to choose from these values.

pub mod calibrate;
pub(crate) mod config;
pub(crate) mod graph;
pub mod names;
pub(crate) mod package;
pub(crate) mod packaged;
pub(crate) mod policy;
mod processor;
mod random;
pub mod report;
pub mod text;
pub(crate) mod weights;
pub mod zero_shot;

use std::path::Path;

pub use crate::processor::{Processor, ProcessorError};
pub use calibrate::{
    Calibrated, Calibration, CalibrationError, CalibrationInputs, CalibrationOptions, F16Groups,
    FIDELITY_HEADROOM, Input, MIN_COSINE, calibrate, calibrate_inputs,
};
pub use config::{ConfigError, MAX_IMAGE_SIDE, VisionConfig, VisionParams};
pub use graph::{BuildError, GraphOptions, build_graph};
pub use package::{CheckpointPackage, PackageError, package_checkpoint};
pub(crate) use packaged::first_difference;
pub use packaged::{FAMILY, PackagedError, PackagedModel};
pub use policy::{PolicyError, PrecisionPolicy, role};
pub use processor::patchify;
pub use random::{MAX_RANDOM_WEIGHT_ELEMENTS, OUTLIER_CHANNELS, TooManyWeights, random_weights};

use crate::error::{ImageError, ImportError};
use crate::hf::{CONFIG_FILE, PROCESSOR_FILE, TensorStore};
use crate::imaging;

use ipu_package::graph::{Graph, TensorId, ValueSet};

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

impl ImportConfig {
    /// The graph's name: the one given, else the checkpoint directory's
    /// name, `tower` (`""`, `"-text"`) and the batch, such as
    /// `siglip-so400m-patch14-384-b2`.
    pub(crate) fn graph_name(&self, dir: &Path, tower: &str) -> String {
        self.name.clone().unwrap_or_else(|| {
            let stem = dir
                .file_name()
                .map_or_else(|| "model".into(), |n| n.to_string_lossy());
            format!("{stem}{tower}-b{}", self.batch)
        })
    }
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

    /// The weights for `graph`, another SigLIP graph of the same config
    /// (another batch or policy), matched by tensor name; f32 as stored.
    pub fn weights_for(&self, graph: &Graph) -> Result<ValueSet, ImportError> {
        weights_by_name(&self.graph, &self.weights, graph)
    }

    /// The graph, the weights and the processor, by value.
    pub fn into_parts(self) -> (VisionConfig, Graph, ValueSet, Processor) {
        (self.config, self.graph, self.weights, self.processor)
    }

    /// The `patches` input for `images`, one per batch row in order.
    pub fn input_values<P: AsRef<Path>>(&self, images: &[P]) -> Result<ValueSet, ImageError> {
        images_to_patches(
            &self.config,
            &self.processor,
            &self.graph,
            self.patches,
            images,
        )
    }
}

/// The batch of `graph`: the first extent of its input `input`, if it
/// has that input.
pub(crate) fn input_batch(graph: &Graph, input: &str) -> Option<u64> {
    graph
        .tensor_by_name(input)
        .and_then(|id| graph.tensor(id).extents().first().copied())
}

/// The weights for `graph` from `weights` of `own` (another graph of the
/// same tower and config), matched by tensor name.
pub(crate) fn weights_by_name(
    own: &Graph,
    weights: &ValueSet,
    graph: &Graph,
) -> Result<ValueSet, ImportError> {
    let mut set = ValueSet::new();
    for id in graph.weights() {
        let name = graph.tensor(id).name();
        let values = own
            .tensor_by_name(name)
            .and_then(|o| weights.get(o))
            .ok_or_else(|| ImportError::Internal {
                what: format!(
                    "graph `{}` has weight `{name}`, which the checkpoint's graph lacks",
                    graph.name()
                ),
            })?;
        if values.len() as u64 != graph.tensor(id).element_count() {
            return Err(ImportError::Internal {
                what: format!(
                    "weight `{name}` has another shape in graph `{}`",
                    graph.name()
                ),
            });
        }
        set.insert(id, values.to_vec());
    }
    Ok(set)
}

/// The `patches` input (`patches`, of `graph`) for `images`, one per batch
/// row in order, preprocessed by `processor`.
pub(crate) fn images_to_patches<P: AsRef<Path>>(
    config: &VisionConfig,
    processor: &Processor,
    graph: &Graph,
    patches: TensorId,
    images: &[P],
) -> Result<ValueSet, ImageError> {
    let batch = graph.tensor(patches).extents()[0];
    if images.len() as u64 != batch {
        return Err(ImageError::Count {
            batch,
            found: images.len(),
        });
    }
    let mut values = Vec::new();
    for path in images {
        let pixels = processor.pixel_values(path.as_ref())?;
        patchify(config, &pixels, &mut values)?;
    }
    let mut set = ValueSet::new();
    set.insert(patches, values);
    Ok(set)
}

/// The `patches` input (`patches`, of `graph`) for the built-in synthetic
/// images `first..first + batch` ([`imaging::synthetic_image`]),
/// preprocessed by `processor` like a user's image.
pub(crate) fn synthetic_patches(
    config: &VisionConfig,
    processor: &Processor,
    graph: &Graph,
    patches: TensorId,
    first: usize,
) -> Result<ValueSet, ImageError> {
    let batch = graph.tensor(patches).extents()[0];
    let side = usize::try_from(config.image_size()).unwrap_or(usize::MAX);
    let mut values = Vec::new();
    for row in 0..batch {
        let k = first.saturating_add(usize::try_from(row).unwrap_or(usize::MAX));
        let label = format!("synthetic-{k}");
        let image = imaging::synthetic_image(k, side);
        let pixels = processor.pixel_values_of(&image, Path::new(&label))?;
        patchify(config, &pixels, &mut values)?;
    }
    let mut set = ValueSet::new();
    set.insert(patches, values);
    Ok(set)
}

/// Reads the config, weights and processor of the checkpoint in `dir`
/// and builds its graph (see the module header).
pub fn import_checkpoint(dir: &Path, options: &ImportConfig) -> Result<Checkpoint, ImportError> {
    let mut checkpoint = checkpoint_without_weights(dir, options)?;
    let store = TensorStore::open(dir)?;
    checkpoint.weights = weights::read_weights(&store, &checkpoint.config, &checkpoint.graph)?;
    tracing::info!(
        dir = %dir.display(),
        layers = checkpoint.config.layers(),
        hidden = checkpoint.config.hidden(),
        head = checkpoint.config.use_head(),
        batch = options.batch,
        weights = checkpoint.weights.len(),
        "imported SigLIP checkpoint"
    );
    Ok(checkpoint)
}

/// A checkpoint of the config (and processor) in `dir` with weights of
/// realistic spread drawn from `seed` ([`random_weights`])
/// instead of read: for checking that a configuration whose weights are
/// not at hand builds and fits. `dir` needs only `config.json`.
pub fn random_checkpoint(
    dir: &Path,
    options: &ImportConfig,
    seed: u64,
) -> Result<Checkpoint, ImportError> {
    let mut checkpoint = checkpoint_without_weights(dir, options)?;
    checkpoint.weights = random_weights(checkpoint.config.hidden(), &checkpoint.graph, seed)
        .map_err(|source| ImportError::RandomWeights {
            dir: dir.to_path_buf(),
            source,
        })?;
    tracing::info!(
        dir = %dir.display(),
        seed,
        parameters = checkpoint.graph.parameter_count(),
        "drew random SigLIP weights of realistic spread"
    );
    Ok(checkpoint)
}

/// The config, processor and graph of the checkpoint in `dir`, with no
/// weights yet.
fn checkpoint_without_weights(
    dir: &Path,
    options: &ImportConfig,
) -> Result<Checkpoint, ImportError> {
    let config = read_config(dir)?;
    let processor = read_processor(dir, &config)?;
    let name = options.graph_name(dir, "");
    let graph = build_graph(
        &config,
        &GraphOptions {
            name,
            batch: options.batch,
            policy: options.policy.clone(),
        },
    )
    .map_err(|source| ImportError::Build { source })?;
    let patches = graph
        .tensor_by_name(PATCHES)
        .ok_or_else(|| ImportError::Internal {
            what: "the graph has no `patches` input".to_owned(),
        })?;
    Ok(Checkpoint {
        config,
        graph,
        weights: Default::default(),
        processor,
        patches,
    })
}

/// Reads `config.json` of the checkpoint in `dir`.
pub fn read_config(dir: &Path) -> Result<VisionConfig, ImportError> {
    let path = dir.join(CONFIG_FILE);
    let text = crate::hf::read_text(&path)?;
    VisionConfig::from_json(&text).map_err(|source| ImportError::Config { path, source })
}

/// Reads `preprocessor_config.json` of the checkpoint in `dir`, or the
/// SigLIP defaults for `config` when there is none.
pub fn read_processor(dir: &Path, config: &VisionConfig) -> Result<Processor, ImportError> {
    match crate::hf::read_optional(dir, PROCESSOR_FILE)? {
        None => Ok(Processor::default_for(config)),
        Some(text) => {
            Processor::from_json(&text, config).map_err(|source| ImportError::Processor {
                path: dir.join(PROCESSOR_FILE),
                source,
            })
        }
    }
}
