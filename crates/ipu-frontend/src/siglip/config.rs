//! The model a checkpoint holds: `config.json` read into a validated
//! [`VisionConfig`].
//!
//! The file is what transformers writes: either a `SiglipVisionConfig`
//! (`"model_type": "siglip_vision_model"`) or a full `SiglipConfig`
//! (`"model_type": "siglip"`) whose `vision_config` object is used and
//! whose text tower is ignored. Without a `model_type`, a config with a
//! `vision_config` object is read as a full config, any other as a vision
//! config. transformers leaves out fields equal to
//! their defaults, so an absent field takes `SiglipVisionConfig`'s default
//! (hidden 768, MLP 3072, 12 layers, 12 heads, 3 channels, image 224,
//! patch 16, `gelu_pytorch_tanh`, LayerNorm eps 1e-6, with the head).
//! Unknown fields (dropout, dtype, architectures, …) are ignored.

use serde::Deserialize;

use ipu_package::graph::MAX_GRAPH_ITEMS;

/// Tensors plus ops one encoder layer adds to the graph at most; bounds
/// the layer count so that building never exhausts memory.
const ITEMS_PER_LAYER: u64 = 46;

/// The largest image side accepted: preprocessing holds a resized image
/// of `3 · side²` f32 values (192 MiB at this side).
pub const MAX_IMAGE_SIDE: u64 = 4096;

/// The multiple a patch vector is padded to. Patches are cast to FP8 (one
/// byte an element) and tiled by rows, and every row of a tensor must be
/// whole 32-bit words to be exchanged and stored; an odd patch size (7 gives
/// `3·49 = 147` elements) would break that, so the vector is padded with
/// zeros, which the patch embedding's padded zero weight rows ignore.
pub const PATCH_ALIGN: u64 = 4;

/// A SigLIP vision tower's shape, validated: every extent positive, heads
/// dividing the hidden size, at least one whole patch per image side, and
/// a graph small enough to build.
#[derive(Clone, Debug, PartialEq)]
pub struct VisionConfig {
    hidden: u64,
    intermediate: u64,
    layers: u32,
    heads: u32,
    channels: u64,
    image_size: u64,
    patch_size: u64,
    layer_norm_eps: f32,
    use_head: bool,
}

/// The fields of a `SiglipVisionConfig`, by their transformers names, as
/// plain data; [`VisionConfig::new`] validates them.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default)]
pub struct VisionParams {
    /// Width of the residual stream.
    pub hidden_size: u64,
    /// Width of the MLP's hidden layer.
    pub intermediate_size: u64,
    /// Encoder layers.
    pub num_hidden_layers: u32,
    /// Attention heads (in the encoder and the head).
    pub num_attention_heads: u32,
    /// Image channels; the image path is RGB, so 3.
    pub num_channels: u64,
    /// Side of the square input image in pixels.
    pub image_size: u64,
    /// Side of a square patch in pixels.
    pub patch_size: u64,
    /// The MLP activation; the graph's GELU is the tanh approximation.
    pub hidden_act: String,
    /// Added to the variance in every LayerNorm.
    pub layer_norm_eps: f64,
    /// Whether the multi-head attention pooling head is present.
    pub vision_use_head: bool,
}

impl Default for VisionParams {
    /// transformers' `SiglipVisionConfig` defaults.
    fn default() -> Self {
        Self {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_channels: 3,
            image_size: 224,
            patch_size: 16,
            hidden_act: "gelu_pytorch_tanh".to_owned(),
            layer_norm_eps: 1e-6,
            vision_use_head: true,
        }
    }
}

/// Why a model config cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The text is not JSON of the expected form.
    #[error("it is not a model config of the expected form: {source}")]
    Json {
        /// The parser's finding, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// The model type is not SigLIP's.
    #[error(
        "model_type `{model_type}` is not supported; the model types read are {}",
        crate::MODEL_TYPES.join(", ")
    )]
    ModelType {
        /// The model type found.
        model_type: String,
    },
    /// A size is zero.
    #[error("`{field}` is 0; it must be at least 1")]
    Zero {
        /// The field, by its transformers name.
        field: &'static str,
    },
    /// The heads do not divide the hidden size.
    #[error("hidden_size {hidden} is not a multiple of num_attention_heads {heads}")]
    Heads {
        /// The hidden size.
        hidden: u64,
        /// The head count.
        heads: u32,
    },
    /// The patch is larger than the image.
    #[error("patch_size {patch} is larger than image_size {image}")]
    Patch {
        /// The patch side.
        patch: u64,
        /// The image side.
        image: u64,
    },
    /// The image path only produces RGB.
    #[error("num_channels is {channels}; only RGB models (3 channels) are supported")]
    Channels {
        /// The channel count.
        channels: u64,
    },
    /// The activation is not the graph's tanh GELU.
    #[error(
        "hidden_act `{activation}` is not supported; this family's graph takes {}",
        supported.join(", ")
    )]
    Activation {
        /// The activation found.
        activation: String,
        /// The activations the family's graph has.
        supported: &'static [&'static str],
    },
    /// A field has a value of the wrong type or one this importer does
    /// not support.
    #[error("`{field}` is {found}; {expected}")]
    Field {
        /// The field, by its transformers name.
        field: &'static str,
        /// The value found, as JSON.
        found: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// The LayerNorm epsilon is not a positive finite f32.
    #[error("layer_norm_eps {eps} is not a positive finite number representable in f32")]
    Eps {
        /// The value found.
        eps: f64,
    },
    /// The config describes no such tower.
    #[error(
        "it describes no {tower} tower (no `{field}`); build the tower the checkpoint holds \
         (--tower vision or --tower text)"
    )]
    MissingTower {
        /// The tower asked for.
        tower: &'static str,
        /// The field that would describe it.
        field: &'static str,
    },
    /// The sizes overflow or the graph would be too large to build.
    #[error("the model is too large to build: {what}")]
    TooLarge {
        /// Which quantity is too large.
        what: &'static str,
    },
}

impl VisionConfig {
    /// Validates `params`.
    pub fn new(params: &VisionParams) -> Result<Self, ConfigError> {
        let layer_norm_eps = check_shape(&Shape {
            hidden: params.hidden_size,
            intermediate: params.intermediate_size,
            layers: params.num_hidden_layers,
            heads: params.num_attention_heads,
            channels: params.num_channels,
            image_size: params.image_size,
            patch_size: params.patch_size,
            eps: params.layer_norm_eps,
        })?;
        if !TANH_GELU.contains(&params.hidden_act.as_str()) {
            return Err(ConfigError::Activation {
                activation: params.hidden_act.clone(),
                supported: TANH_GELU,
            });
        }
        Ok(Self {
            hidden: params.hidden_size,
            intermediate: params.intermediate_size,
            layers: params.num_hidden_layers,
            heads: params.num_attention_heads,
            channels: params.num_channels,
            image_size: params.image_size,
            patch_size: params.patch_size,
            layer_norm_eps,
            use_head: params.vision_use_head,
        })
    }

    /// Reads the text of a `config.json`.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|source| ConfigError::Json { source })?;
        let model_type = value.get("model_type").and_then(|m| m.as_str());
        let vision = match model_type {
            // A full config; without a model type, one that nests a
            // vision config is taken for a full config too.
            Some("siglip") => value
                .get("vision_config")
                .cloned()
                .unwrap_or_else(|| serde_json::Value::Object(serde_json::Map::new())),
            None if value.get("vision_config").is_some() => value["vision_config"].clone(),
            Some("siglip_vision_model") | None => value,
            Some("siglip_text_model") => {
                return Err(ConfigError::MissingTower {
                    tower: "vision",
                    field: "vision_config",
                });
            }
            Some(other) => {
                return Err(ConfigError::ModelType {
                    model_type: other.to_owned(),
                });
            }
        };
        let params: VisionParams =
            serde_json::from_value(vision).map_err(|source| ConfigError::Json { source })?;
        Self::new(&params)
    }

    /// The config as a transformers `SiglipVisionConfig` JSON object,
    /// every field written; [`VisionConfig::from_json`] reads it back to
    /// an equal config.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "model_type": "siglip_vision_model",
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_channels": self.channels,
            "image_size": self.image_size,
            "patch_size": self.patch_size,
            "hidden_act": "gelu_pytorch_tanh",
            "layer_norm_eps": f64::from(self.layer_norm_eps),
            "vision_use_head": self.use_head,
        })
    }

    /// Width of the residual stream.
    pub fn hidden(&self) -> u64 {
        self.hidden
    }

    /// Width of the MLP's hidden layer.
    pub fn intermediate(&self) -> u64 {
        self.intermediate
    }

    /// Encoder layers.
    pub fn layers(&self) -> u32 {
        self.layers
    }

    /// Attention heads.
    pub fn heads(&self) -> u32 {
        self.heads
    }

    /// Image channels (3).
    pub fn channels(&self) -> u64 {
        self.channels
    }

    /// Side of the square input image in pixels.
    pub fn image_size(&self) -> u64 {
        self.image_size
    }

    /// Side of a square patch in pixels.
    pub fn patch_size(&self) -> u64 {
        self.patch_size
    }

    /// Patches per image side: `image_size / patch_size`, rounded down as
    /// the convolution's "valid" padding does (pixels past the last whole
    /// patch are not read).
    pub fn grid(&self) -> u64 {
        self.image_size / self.patch_size
    }

    /// Tokens per image: `grid²`.
    pub fn tokens(&self) -> u64 {
        self.grid() * self.grid()
    }

    /// Elements of one patch vector: `channels · patch_size²`.
    pub fn patch_dim(&self) -> u64 {
        self.channels * self.patch_size * self.patch_size
    }

    /// Elements of one patch vector as the graph holds it: [`patch_dim`]
    /// rounded up to a multiple of `PATCH_ALIGN` (4), the padding zeros.
    ///
    /// [`patch_dim`]: VisionConfig::patch_dim
    pub fn patch_width(&self) -> u64 {
        self.patch_dim().next_multiple_of(PATCH_ALIGN)
    }

    /// The LayerNorm epsilon.
    pub fn layer_norm_eps(&self) -> f32 {
        self.layer_norm_eps
    }

    /// Whether the multi-head attention pooling head is present.
    pub fn use_head(&self) -> bool {
        self.use_head
    }
}

/// The names transformers gives the tanh GELU, SigLIP's activation.
pub(crate) const TANH_GELU: &[&str] = &["gelu_pytorch_tanh", "gelu_new"];

/// What every vision tower's config gives: the encoder and the patch grid.
pub(crate) struct Shape {
    pub hidden: u64,
    pub intermediate: u64,
    pub layers: u32,
    pub heads: u32,
    pub channels: u64,
    pub image_size: u64,
    pub patch_size: u64,
    pub eps: f64,
}

/// Checks `shape` as every vision family needs it (every extent positive,
/// heads dividing the hidden size, RGB, at least one whole patch per
/// side, a graph small enough to build, sizes whose products fit 64
/// bits) and returns the LayerNorm epsilon as f32.
pub(crate) fn check_shape(shape: &Shape) -> Result<f32, ConfigError> {
    for (field, value) in [
        ("hidden_size", shape.hidden),
        ("intermediate_size", shape.intermediate),
        ("num_hidden_layers", u64::from(shape.layers)),
        ("num_attention_heads", u64::from(shape.heads)),
        ("image_size", shape.image_size),
        ("patch_size", shape.patch_size),
    ] {
        if value == 0 {
            return Err(ConfigError::Zero { field });
        }
    }
    if shape.channels != 3 {
        return Err(ConfigError::Channels {
            channels: shape.channels,
        });
    }
    if shape.hidden % u64::from(shape.heads) != 0 {
        return Err(ConfigError::Heads {
            hidden: shape.hidden,
            heads: shape.heads,
        });
    }
    if shape.image_size > MAX_IMAGE_SIDE {
        return Err(ConfigError::TooLarge {
            what: "image_size (at most MAX_IMAGE_SIDE = 4096)",
        });
    }
    if shape.patch_size > shape.image_size {
        return Err(ConfigError::Patch {
            patch: shape.patch_size,
            image: shape.image_size,
        });
    }
    let eps = shape.eps as f32;
    if !(eps.is_finite() && eps > 0.0) {
        return Err(ConfigError::Eps { eps: shape.eps });
    }
    // Every extent the graph and the weights use must be computable.
    let items = u64::from(shape.layers)
        .checked_mul(ITEMS_PER_LAYER)
        .filter(|&n| n <= MAX_GRAPH_ITEMS);
    if items.is_none() {
        return Err(ConfigError::TooLarge {
            what: "num_hidden_layers",
        });
    }
    let grid = shape.image_size / shape.patch_size;
    let checks = [
        shape.hidden.checked_mul(4),
        shape.patch_size.checked_mul(shape.patch_size),
        grid.checked_mul(grid).and_then(|t| t.checked_add(1)),
        shape
            .patch_size
            .checked_mul(shape.patch_size)
            .and_then(|p| p.checked_mul(shape.channels))
            .and_then(|p| p.checked_add(PATCH_ALIGN)),
        shape.hidden.checked_mul(shape.intermediate),
    ];
    if checks.iter().any(Option::is_none) {
        return Err(ConfigError::TooLarge {
            what: "the sizes overflow 64 bits",
        });
    }
    Ok(eps)
}
