//! Vision transformers with a class token: ViT (`ViTModel`,
//! `"model_type": "vit"`), CLIP's vision tower (`CLIPVisionModel`,
//! `CLIPVisionModelWithProjection`, or the vision half of a `CLIPModel`)
//! and DINOv2 (`Dinov2Model`, `"dinov2"`; `Dinov2WithRegistersModel`,
//! `"dinov2_with_registers"`), imported from a Hugging Face
//! checkpoint as SigLIP's tower is
//! (`siglip`), sharing its encoder builder, precision policy, weight
//! reader, calibration and packaging; what differs is here.
//!
//! ```text
//! checkpoint dir ── config.json ──ClassTokenConfig::from_json──► config      (config.rs)
//!    │                + the heads the stored tensors have (pooler, projection)
//!    │                              ▼
//!    │                       build_graph ──► Graph                            (graph.rs)
//!    ├── model.safetensors (+ shards) ──name mapping──► ValueSet            (names.rs)
//!    └── preprocessor_config.json ──► Processor (ViT's or CLIP's steps)    (crate::processor)
//! images ──► pixel_values ──patchify (a zero row first)──► patches
//! Checkpoint ──calibrate_inputs──► Calibration ──package_class_token──► Package (package.rs)
//! Package's model.json ──PackagedClassToken──► images → patches        (packaged.rs)
//! ```
//!
//! **The class token.** transformers prepends a learned class token to the
//! patch embeddings (`torch.cat`) and then adds the position embeddings.
//! The graph has no concatenation op, and needs none: the `patches` input
//! has one more row per image, row 0, all zeros, and the patch-embedding
//! GEMM has no bias, so row 0 of its result is exactly zero; the position
//! table `pos` added next carries `class token + position 0` on row 0 and
//! `position t + convolution bias` on every patch row (CLIP's
//! convolution has no bias). Row 0 of `x0` is then `0 + (cls + pos₀)`,
//! the same single F32 rounding as transformers' `cls + pos₀`, bit for
//! bit; a patch row is `conv + (bias + pos_t)` where transformers computes
//! `(conv + bias) + pos_t`: the same two f32 additions in another order,
//! a unit or two in the last place apart (relative ~1e-7), far inside the
//! 1e-5 the F32 graph is held to.
//! The other fold that suggests itself, an extra input column of ones
//! meeting an extra weight row holding the class token, computes the same
//! but widens every patch row (and with it the FP8 cast and the GEMM's
//! inner extent) by one element padded to four, and rounds the class token
//! with the convolution weights' FP8 scale; folding it into the position
//! table costs nothing and keeps the class token with the tensor that is
//! already added per row, whose precision calibration decides on its own
//! (the `position` F16 group).
//!
//! **DINOv2** adds two folds at import, so that its graph is ViT's with
//! another output: its layer scales multiply the columns of the GEMM
//! before them (`names::with_layer_scale`), and its position table, made
//! for `image_size` but used at the processor's crop, is resampled to the
//! input's patch grid as transformers does on every call ([`interpolate`]).
//! DINOv2 with registers puts its register tokens after the class token,
//! without positions: more zero rows in `patches` (`class_rows`), and
//! the stored tokens as their rows of `pos`.

mod config;
mod graph;
pub mod interpolate;
pub mod names;
mod package;
mod packaged;

use std::path::Path;

pub use config::{ClassTokenConfig, Family};
pub use graph::{build_graph, template};
pub use package::package_class_token;
pub use packaged::{CLIP_FAMILY, DINOV2_FAMILY, PackagedClassToken, VIT_FAMILY, family_name};

use ipu_package::graph::{Graph, TensorId, ValueSet};

use crate::error::{ImageError, ImportError};
use crate::hf::{CONFIG_FILE, PROCESSOR_FILE, TensorStore};
use crate::imaging;
use crate::processor::{
    BIT_CROP, CLIP_PROCESSOR, DINOV2_PROCESSOR, PatchGrid, Processor, ProcessorKind, VIT_PROCESSOR,
    patchify,
};
use crate::siglip::calibrate::{Calibrated, CalibrationInputs, Input};
use crate::siglip::graph::{BuildError, GraphOptions};
use crate::siglip::policy::PrecisionPolicy;
use crate::siglip::weights::{Mapping, read_mapped};
use crate::siglip::{ImportConfig, random_weights};

/// The graph's image input: `[batch, 1 + patches, patch width]`.
pub const PATCHES: &str = "patches";
/// The output that is transformers' `last_hidden_state`.
pub const LAST_HIDDEN: &str = "last_hidden";
/// The output that is transformers' `pooler_output` (ViT with a pooler;
/// CLIP and DINOv2 always).
pub const POOLED: &str = "pooled";
/// The output that is transformers' `image_embeds` (CLIP with
/// `visual_projection`).
pub const IMAGE_EMBEDS: &str = "image_embeds";

/// The image processor of `family`.
pub fn processor_kind(family: Family) -> ProcessorKind {
    match family {
        Family::Vit => VIT_PROCESSOR,
        Family::Clip => CLIP_PROCESSOR,
        Family::Dinov2 => DINOV2_PROCESSOR,
    }
}

/// An imported ViT or CLIP vision checkpoint: config, graph, weights and
/// processor.
#[derive(Clone, Debug)]
pub struct ClassTokenCheckpoint {
    config: ClassTokenConfig,
    graph: Graph,
    weights: ValueSet,
    processor: Processor,
    patches: TensorId,
}

impl ClassTokenCheckpoint {
    /// The tower's shape and heads.
    pub fn config(&self) -> &ClassTokenConfig {
        &self.config
    }

    /// The graph for the config, batch and policy.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Every graph weight, f32 as stored (the position table folded), by
    /// graph tensor id.
    pub fn weights(&self) -> &ValueSet {
        &self.weights
    }

    /// The image preprocessing.
    pub fn processor(&self) -> &Processor {
        &self.processor
    }

    /// The graph's image input.
    pub fn patches(&self) -> TensorId {
        self.patches
    }

    /// The weights for `graph`, another graph of the same config, matched
    /// by tensor name.
    pub fn weights_for(&self, graph: &Graph) -> Result<ValueSet, ImportError> {
        crate::siglip::weights_by_name(&self.graph, &self.weights, graph)
    }

    /// The `patches` input for `images`, one per batch row in order.
    pub fn input_values<P: AsRef<Path>>(&self, images: &[P]) -> Result<ValueSet, ImageError> {
        images_input(&self.config, &self.processor, &self.graph, images)
    }

    /// The calibration inputs at batch 1: `inputs`' images through the
    /// processor and cut into patches.
    pub fn calibration_inputs(&self, inputs: &CalibrationInputs) -> Result<Vec<Input>, ImageError> {
        let grid = patch_grid(&self.config);
        let mut out = Vec::new();
        let mut add = |label: String, pixels: Vec<f32>| -> Result<(), ImageError> {
            let mut values = Vec::new();
            patchify(&grid, &pixels, &mut values)?;
            out.push(Input { label, values });
            Ok(())
        };
        match inputs {
            CalibrationInputs::Images(paths) => {
                for path in paths {
                    let pixels = self.processor.pixel_values(path)?;
                    let label = path.file_name().map_or_else(
                        || path.display().to_string(),
                        |n| n.to_string_lossy().into(),
                    );
                    add(label, pixels)?;
                }
            }
            CalibrationInputs::Synthetic(count) => {
                for k in 0..*count {
                    let label = format!("synthetic-{k}");
                    let image = imaging::synthetic_image(k, synthetic_side(&self.config));
                    add(
                        label.clone(),
                        self.processor.pixel_values_of(&image, Path::new(&label))?,
                    )?;
                }
            }
        }
        Ok(out)
    }
}

impl Calibrated for ClassTokenCheckpoint {
    fn calibration_graph(&self, policy: &PrecisionPolicy) -> Result<Graph, BuildError> {
        build_graph(
            &self.config,
            &GraphOptions {
                name: "calibration".to_owned(),
                batch: 1,
                policy: policy.clone(),
            },
        )
    }

    fn weights_for(&self, graph: &Graph) -> Result<ValueSet, ImportError> {
        ClassTokenCheckpoint::weights_for(self, graph)
    }

    fn input_name(&self) -> &'static str {
        PATCHES
    }
}

/// The patch grid of `config`'s graph input: a class row, then patches.
pub(crate) fn patch_grid(config: &ClassTokenConfig) -> PatchGrid {
    PatchGrid {
        side: config.input_size(),
        patch: config.patch_size(),
        width: config.patch_width(),
        class_rows: config.class_rows(),
    }
}

/// The side of the synthetic images: the model's, which every processor
/// maps to itself (a shortest-edge resize of a square to its side and a
/// center crop of the whole).
fn synthetic_side(config: &ClassTokenConfig) -> usize {
    usize::try_from(config.input_size()).unwrap_or(usize::MAX)
}

/// The `patches` input of `graph` for `images`, one per batch row.
pub(crate) fn images_input<P: AsRef<Path>>(
    config: &ClassTokenConfig,
    processor: &Processor,
    graph: &Graph,
    images: &[P],
) -> Result<ValueSet, ImageError> {
    let patches = input_tensor(graph)?;
    let batch = graph.tensor(patches).extents()[0];
    if images.len() as u64 != batch {
        return Err(ImageError::Count {
            batch,
            found: images.len(),
        });
    }
    let grid = patch_grid(config);
    let mut values = Vec::new();
    for path in images {
        patchify(&grid, &processor.pixel_values(path.as_ref())?, &mut values)?;
    }
    let mut set = ValueSet::new();
    set.insert(patches, values);
    Ok(set)
}

/// The `patches` input of `graph` for the synthetic images
/// `first..first + batch`.
pub(crate) fn synthetic_input(
    config: &ClassTokenConfig,
    processor: &Processor,
    graph: &Graph,
    first: usize,
) -> Result<ValueSet, ImageError> {
    let patches = input_tensor(graph)?;
    let batch = graph.tensor(patches).extents()[0];
    let grid = patch_grid(config);
    let mut values = Vec::new();
    for row in 0..batch {
        let k = first.saturating_add(usize::try_from(row).unwrap_or(usize::MAX));
        let label = format!("synthetic-{k}");
        let image = imaging::synthetic_image(k, synthetic_side(config));
        let pixels = processor.pixel_values_of(&image, Path::new(&label))?;
        patchify(&grid, &pixels, &mut values)?;
    }
    let mut set = ValueSet::new();
    set.insert(patches, values);
    Ok(set)
}

fn input_tensor(graph: &Graph) -> Result<TensorId, ImageError> {
    graph
        .tensor_by_name(PATCHES)
        .ok_or_else(|| ImageError::Internal {
            what: format!("graph `{}` has no `{PATCHES}` input", graph.name()),
        })
}

/// Reads `config.json` of the checkpoint in `dir` as `family`'s. DINOv2
/// takes the images its processor makes: the side of
/// `preprocessor_config.json`'s `crop_size` (`BitImageProcessor`'s 224
/// when it gives none, or there is no such file).
pub fn read_config(dir: &Path, family: Family) -> Result<ClassTokenConfig, ImportError> {
    let path = dir.join(CONFIG_FILE);
    let text = crate::hf::read_text(&path)?;
    let config =
        ClassTokenConfig::from_json(&text, family).map_err(|source| ImportError::Config {
            path: path.clone(),
            source,
        })?;
    if family != Family::Dinov2 {
        return Ok(config);
    }
    let side = match crate::hf::read_optional(dir, PROCESSOR_FILE)? {
        None => None,
        Some(text) => Processor::crop_side(&text).map_err(|source| ImportError::Processor {
            path: dir.join(PROCESSOR_FILE),
            source,
        })?,
    };
    config
        .with_input_size(side.unwrap_or(BIT_CROP))
        .map_err(|source| ImportError::Config { path, source })
}

/// Reads `preprocessor_config.json` of the checkpoint in `dir`, or the
/// family's defaults when there is none.
pub fn read_processor(dir: &Path, config: &ClassTokenConfig) -> Result<Processor, ImportError> {
    let kind = processor_kind(config.family());
    match crate::hf::read_optional(dir, PROCESSOR_FILE)? {
        None => Ok(Processor::defaults(kind, config.input_size())),
        Some(text) => Processor::read(&text, kind, config.input_size()).map_err(|source| {
            ImportError::Processor {
                path: dir.join(PROCESSOR_FILE),
                source,
            }
        }),
    }
}

/// The prefix of the tower's tensors in `store`.
fn prefix(store: &TensorStore, family: Family) -> &'static str {
    let prefix = match family {
        Family::Vit => names::VIT_PREFIX,
        Family::Clip => names::CLIP_PREFIX,
        Family::Dinov2 => names::DINOV2_PREFIX,
    };
    if store.tensors().keys().any(|n| n.starts_with(prefix)) {
        prefix
    } else {
        ""
    }
}

/// Reads the config, weights and processor of the `family` checkpoint in
/// `dir` and builds its graph (module header); the output heads are the
/// ones its tensors have.
pub fn import_class_token(
    dir: &Path,
    family: Family,
    options: &ImportConfig,
) -> Result<ClassTokenCheckpoint, ImportError> {
    let config = read_config(dir, family)?;
    let store = TensorStore::open(dir)?;
    let prefix = prefix(&store, family);
    let stored = store.tensors();
    let head = match family {
        Family::Vit => stored.contains_key(&format!("{prefix}pooler.dense.weight")),
        Family::Clip => stored.contains_key(names::PROJECTION),
        Family::Dinov2 => false,
    };
    let config = config.with_head(head);
    let mut checkpoint = without_weights(dir, config, options)?;
    let mapping = Mapping {
        prefix: "",
        expected: names::expected_tensors(&checkpoint.config, prefix),
        sources: names::weight_sources(&checkpoint.config, prefix),
        ignored: match family {
            Family::Vit => |n| names::is_ignored(Family::Vit, n),
            Family::Clip => |n| names::is_ignored(Family::Clip, n),
            Family::Dinov2 => |n| names::is_ignored(Family::Dinov2, n),
        },
        head_disabled: false,
        tower: match family {
            Family::Vit => "ViT",
            Family::Clip => "CLIP vision",
            Family::Dinov2 => "DINOv2",
        },
    };
    checkpoint.weights = read_mapped(&store, &mapping, &checkpoint.graph)?;
    tracing::info!(
        dir = %dir.display(),
        family = ?family,
        layers = checkpoint.config.layers(),
        hidden = checkpoint.config.hidden(),
        batch = options.batch,
        weights = checkpoint.weights.len(),
        "imported class-token vision checkpoint"
    );
    Ok(checkpoint)
}

/// A checkpoint of the config (and processor) in `dir` with weights of
/// realistic spread drawn from `seed`; `dir` needs only `config.json`, and
/// the heads are the config's (module header of `config.rs`).
pub fn random_class_token(
    dir: &Path,
    family: Family,
    options: &ImportConfig,
    seed: u64,
) -> Result<ClassTokenCheckpoint, ImportError> {
    let config = read_config(dir, family)?;
    let mut checkpoint = without_weights(dir, config, options)?;
    checkpoint.weights = random_weights(checkpoint.config.hidden(), &checkpoint.graph, seed)
        .map_err(|source| ImportError::RandomWeights {
            dir: dir.to_path_buf(),
            source,
        })?;
    Ok(checkpoint)
}

fn without_weights(
    dir: &Path,
    config: ClassTokenConfig,
    options: &ImportConfig,
) -> Result<ClassTokenCheckpoint, ImportError> {
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
    Ok(ClassTokenCheckpoint {
        config,
        graph,
        weights: ValueSet::new(),
        processor,
        patches,
    })
}
