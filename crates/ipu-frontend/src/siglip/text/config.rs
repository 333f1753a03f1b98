//! The text tower a checkpoint holds: `config.json` read into a validated
//! [`TextConfig`].
//!
//! The file is a `SiglipTextConfig` (`"model_type": "siglip_text_model"`)
//! or a full `SiglipConfig` (`"model_type": "siglip"`) whose `text_config`
//! object is used; a full config without one names no text tower, which
//! is an error ([`ConfigError::MissingTower`]), as is a vision-only config.
//! Absent fields take `SiglipTextConfig`'s defaults (vocabulary 32000,
//! hidden 768, MLP 3072, 12 layers, 12 heads, 64 positions,
//! `gelu_pytorch_tanh`, LayerNorm eps 1e-6, projection = hidden).
//!
//! CLIP's text tower (`clip_text_model`, or `clip` with its `text_config`)
//! is read by `clip.rs` into the same [`TextConfig`] with the
//! [`TextFamily::Clip`] family: the graph then has causal attention, quick
//! GELU, pooling at the end-of-text token and an optional bias-free
//! projection.

use serde::Deserialize;

use ipu_package::graph::{MAX_GATHER_ROWS, MAX_GRAPH_ITEMS};

use crate::siglip::config::{ConfigError, TANH_GELU};

/// Tensors plus ops one encoder layer adds to the graph at most.
const ITEMS_PER_LAYER: u64 = 46;

/// The longest sequence accepted: the graph holds `batch · positions`
/// rows, and a tokenizer pads every text to it.
pub const MAX_POSITIONS: u64 = 1 << 16;

/// Which model's text tower a [`TextConfig`] describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextFamily {
    /// `SiglipTextModel`: full attention, tanh GELU, the head (with bias)
    /// on the last position.
    Siglip,
    /// `CLIPTextModel`: causal attention, quick GELU, the pooled row at
    /// the end-of-text token; `projected` (`CLIPTextModelWithProjection`,
    /// `CLIPModel`) adds the bias-free `text_projection`.
    Clip {
        /// Whether `text_projection` makes `text_embeds`.
        projected: bool,
    },
}

/// A text tower's shape, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct TextConfig {
    family: TextFamily,
    vocab: u64,
    hidden: u64,
    intermediate: u64,
    layers: u32,
    heads: u32,
    positions: u64,
    layer_norm_eps: f32,
    projection: u64,
    pad_token_id: Option<u64>,
    eos_token_id: Option<u64>,
}

/// The fields of a `SiglipTextConfig`, by their transformers names.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default)]
pub struct TextParams {
    /// Rows of the token table.
    pub vocab_size: u64,
    /// Width of the residual stream.
    pub hidden_size: u64,
    /// Width of the MLP's hidden layer.
    pub intermediate_size: u64,
    /// Encoder layers.
    pub num_hidden_layers: u32,
    /// Attention heads.
    pub num_attention_heads: u32,
    /// The sequence length: positions of the position table.
    pub max_position_embeddings: u64,
    /// The MLP activation; the graph's GELU is the tanh approximation.
    pub hidden_act: String,
    /// Added to the variance in every LayerNorm.
    pub layer_norm_eps: f64,
    /// Width of the head's output; `null` means the hidden size.
    pub projection_size: Option<u64>,
    /// The padding token's id, if the config names one.
    pub pad_token_id: Option<u64>,
    /// The end-of-text token's id, if the config names one.
    pub eos_token_id: Option<u64>,
}

impl Default for TextParams {
    /// transformers' `SiglipTextConfig` defaults.
    fn default() -> Self {
        Self {
            vocab_size: 32000,
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            max_position_embeddings: 64,
            hidden_act: "gelu_pytorch_tanh".to_owned(),
            layer_norm_eps: 1e-6,
            projection_size: None,
            pad_token_id: Some(1),
            eos_token_id: Some(49407),
        }
    }
}

impl TextConfig {
    /// Validates `params` of a SigLIP text tower.
    pub fn new(params: &TextParams) -> Result<Self, ConfigError> {
        Self::of_family(params, TextFamily::Siglip)
    }

    /// Validates `params` of a `family` text tower (whose activation
    /// `hidden_act` must be the family's).
    pub(super) fn of_family(params: &TextParams, family: TextFamily) -> Result<Self, ConfigError> {
        let projection = params.projection_size.unwrap_or(params.hidden_size);
        for (field, value) in [
            ("vocab_size", params.vocab_size),
            ("hidden_size", params.hidden_size),
            ("intermediate_size", params.intermediate_size),
            ("num_hidden_layers", u64::from(params.num_hidden_layers)),
            ("num_attention_heads", u64::from(params.num_attention_heads)),
            ("max_position_embeddings", params.max_position_embeddings),
            ("projection_size", projection),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        if params.hidden_size % u64::from(params.num_attention_heads) != 0 {
            return Err(ConfigError::Heads {
                hidden: params.hidden_size,
                heads: params.num_attention_heads,
            });
        }
        let supported = match family {
            TextFamily::Siglip => TANH_GELU,
            TextFamily::Clip { .. } => super::clip::QUICK_GELU,
        };
        if !supported.contains(&params.hidden_act.as_str()) {
            return Err(ConfigError::Activation {
                activation: params.hidden_act.clone(),
                supported,
            });
        }
        let eps = params.layer_norm_eps as f32;
        if !(eps.is_finite() && eps > 0.0) {
            return Err(ConfigError::Eps {
                eps: params.layer_norm_eps,
            });
        }
        if params.vocab_size > MAX_GATHER_ROWS {
            return Err(ConfigError::TooLarge {
                what: "vocab_size (at most 2^24, so that every token id is exact in F32)",
            });
        }
        if params.max_position_embeddings > MAX_POSITIONS {
            return Err(ConfigError::TooLarge {
                what: "max_position_embeddings (at most 65536)",
            });
        }
        let items = u64::from(params.num_hidden_layers)
            .checked_mul(ITEMS_PER_LAYER)
            .filter(|&n| n <= MAX_GRAPH_ITEMS);
        let sizes = [
            params.hidden_size.checked_mul(3),
            params.hidden_size.checked_mul(params.intermediate_size),
            params.hidden_size.checked_mul(params.vocab_size),
            params.hidden_size.checked_mul(projection),
        ];
        if items.is_none() || sizes.iter().any(Option::is_none) {
            return Err(ConfigError::TooLarge {
                what: "the sizes overflow 64 bits",
            });
        }
        Ok(Self {
            family,
            vocab: params.vocab_size,
            hidden: params.hidden_size,
            intermediate: params.intermediate_size,
            layers: params.num_hidden_layers,
            heads: params.num_attention_heads,
            positions: params.max_position_embeddings,
            layer_norm_eps: eps,
            projection,
            pad_token_id: params.pad_token_id,
            eos_token_id: params.eos_token_id,
        })
    }

    /// Reads the text of a `config.json`.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|source| ConfigError::Json { source })?;
        let model_type = value.get("model_type").and_then(|m| m.as_str());
        let text_config = match model_type {
            Some("siglip") | None if value.get("text_config").is_some() => {
                value["text_config"].clone()
            }
            Some("siglip") => {
                return Err(ConfigError::MissingTower {
                    tower: "text",
                    field: "text_config",
                });
            }
            Some("siglip_text_model") => value,
            Some("clip" | "clip_text_model" | "clip_vision_model") => {
                return super::clip::clip_text_config(&value);
            }
            Some("siglip_vision_model") | None => {
                return Err(ConfigError::MissingTower {
                    tower: "text",
                    field: "text_config",
                });
            }
            Some(other) => {
                return Err(ConfigError::ModelType {
                    model_type: other.to_owned(),
                });
            }
        };
        let params: TextParams =
            serde_json::from_value(text_config).map_err(|source| ConfigError::Json { source })?;
        Self::new(&params)
    }

    /// The config as a transformers `SiglipTextConfig` JSON object, every
    /// field written; [`TextConfig::from_json`] reads it back equal.
    pub fn to_json(&self) -> serde_json::Value {
        if let TextFamily::Clip { projected } = self.family {
            return super::clip::clip_text_json(self, projected);
        }
        serde_json::json!({
            "model_type": "siglip_text_model",
            "vocab_size": self.vocab,
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "max_position_embeddings": self.positions,
            "hidden_act": "gelu_pytorch_tanh",
            "layer_norm_eps": f64::from(self.layer_norm_eps),
            "projection_size": self.projection,
            "pad_token_id": self.pad_token_id,
            "eos_token_id": self.eos_token_id,
        })
    }

    /// The CLIP config with the projection a checkpoint holds: `Some(p)`
    /// for a `text_projection.weight` of `p` rows, `None` for none (the
    /// pooled row is then the embedding). A SigLIP config is unchanged.
    pub fn with_clip_projection(mut self, projection: Option<u64>) -> Self {
        if let TextFamily::Clip { .. } = self.family {
            self.family = TextFamily::Clip {
                projected: projection.is_some(),
            };
            self.projection = projection.unwrap_or(self.hidden);
        }
        self
    }

    /// Which model's text tower it is.
    pub fn family(&self) -> TextFamily {
        self.family
    }

    /// The end-of-text token's id, if the config names one.
    pub fn eos_token_id(&self) -> Option<u64> {
        self.eos_token_id
    }

    /// Rows of the token table.
    pub fn vocab(&self) -> u64 {
        self.vocab
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

    /// The sequence length every text is padded to (the positions).
    pub fn positions(&self) -> u64 {
        self.positions
    }

    /// The LayerNorm epsilon.
    pub fn layer_norm_eps(&self) -> f32 {
        self.layer_norm_eps
    }

    /// Width of the head's output (the text embedding).
    pub fn projection(&self) -> u64 {
        self.projection
    }

    /// The padding token's id, if the config names one.
    pub fn pad_token_id(&self) -> Option<u64> {
        self.pad_token_id
    }
}
