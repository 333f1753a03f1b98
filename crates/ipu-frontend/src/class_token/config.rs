//! The model a ViT, CLIP vision or DINOv2 checkpoint holds: `config.json`
//! read into a validated [`ClassTokenConfig`].
//!
//! ViT: a `ViTConfig` (`"model_type": "vit"`). CLIP: a
//! `CLIPVisionConfig` (`"clip_vision_model"`) or a full `CLIPConfig`
//! (`"clip"`), whose `vision_config` object is used, with the top level's
//! `projection_dim` for the image projection. transformers leaves out
//! fields equal to their defaults, so an absent field takes the class's
//! default (ViT: hidden 768, MLP 3072, 12 layers, 12 heads, image 224,
//! patch 16, `gelu`, eps 1e-12; CLIP vision: the same sizes but patch 32,
//! `quick_gelu`, eps 1e-5, projection 512; DINOv2: hidden 768, `mlp_ratio`
//! 4 (the MLP's width is `hidden · mlp_ratio`, there is no
//! `intermediate_size`), 12 layers, 12 heads, image 224, patch 14,
//! `gelu`, eps 1e-6). Each field is read on its own,
//! so a value of the wrong type is an error naming the field; unknown
//! fields are ignored.
//!
//! Which output heads exist is a property of the checkpoint's weights,
//! not of transformers' config: ViT's pooler (`ViTModel(...,
//! add_pooling_layer=False)` has none) and CLIP's `visual_projection`
//! (in `CLIPVisionModelWithProjection` and a full `CLIPModel`, not in
//! `CLIPVisionModel`). The importer decides them from the stored tensors;
//! a config alone (random weights, a package's `model.json`) says them
//! with two fields of this importer's own, `add_pooling_layer` (ViT,
//! default true) and `with_projection` (CLIP, default true for a full
//! `clip` config, else false), which [`ClassTokenConfig::to_json`] writes.
//!
//! DINOv2 (`"model_type": "dinov2"`) has no head to decide: its pooled
//! output is the final LayerNorm's class row. Its `image_size` is the side
//! its position table was trained for (518 for the published models),
//! while its processor crops to another (224); transformers interpolates
//! the table to the input's patch grid on every call. The graph takes the
//! processor's side, which the importer reads from
//! `preprocessor_config.json` and a config alone gives in this importer's
//! field `input_size` (default `image_size`). `use_swiglu_ffn: true` and
//! `qkv_bias: false` are refused by name; `layerscale_value` is only an
//! initial value (the checkpoint holds the scales) and is not read.
//! `"model_type": "dinov2_with_registers"` is the same family with
//! `num_register_tokens` (default 4) and `Dinov2WithRegistersConfig`'s
//! default patch 16.

use serde_json::{Map, Value};

use crate::siglip::config::{ConfigError, Shape, check_shape};
use ipu_package::graph::Activation;

/// The families of this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `ViTModel`.
    Vit,
    /// CLIP's vision tower.
    Clip,
    /// `Dinov2Model` and `Dinov2WithRegistersModel`: no pooler (the
    /// pooled output is the final LayerNorm's class row), layer scale, a
    /// position table interpolated to the processor's image size, and
    /// (with registers) register tokens after the class token.
    Dinov2,
}

/// A ViT or CLIP vision tower's shape, validated like SigLIP's
/// (`siglip::VisionConfig`), with its activation and output heads.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassTokenConfig {
    family: Family,
    hidden: u64,
    intermediate: u64,
    layers: u32,
    heads: u32,
    /// The side the position table was made for (`image_size`).
    image_size: u64,
    /// The side of the images the graph takes: `image_size` for ViT and
    /// CLIP; for DINOv2 the processor's crop (module header).
    input_size: u64,
    patch_size: u64,
    layer_norm_eps: f32,
    activation: Activation,
    /// ViT: the pooler's output width (`pooler_output_size`, default the
    /// hidden size); CLIP: the projection's (`projection_dim`).
    head_width: u64,
    /// Whether the model has the head: ViT's pooler, CLIP's projection.
    head: bool,
    /// DINOv2 with registers (`dinov2_with_registers`): its register
    /// tokens, placed after the class token; `None` for every other model.
    registers: Option<u64>,
}

/// The JSON object a config's fields are read from, naming each field in
/// its errors.
struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn error(field: &'static str, found: &Value, expected: &'static str) -> ConfigError {
        ConfigError::Field {
            field,
            found: found.to_string(),
            expected,
        }
    }

    fn u64(&self, field: &'static str, default: u64) -> Result<u64, ConfigError> {
        match self.0.get(field) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| Self::error(field, v, "it must be a whole number of 0 or more")),
        }
    }

    fn u32(&self, field: &'static str, default: u32) -> Result<u32, ConfigError> {
        let v = self.u64(field, u64::from(default))?;
        u32::try_from(v).map_err(|_| ConfigError::TooLarge { what: field })
    }

    fn optional_u64(&self, field: &'static str) -> Result<Option<u64>, ConfigError> {
        match self.0.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.u64(field, 0).map(Some),
        }
    }

    fn f64(&self, field: &'static str, default: f64) -> Result<f64, ConfigError> {
        match self.0.get(field) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| Self::error(field, v, "it must be a number")),
        }
    }

    fn bool(&self, field: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.0.get(field) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| Self::error(field, v, "it must be true or false")),
        }
    }

    fn str(&self, field: &'static str, default: &'static str) -> Result<String, ConfigError> {
        match self.0.get(field) {
            None => Ok(default.to_owned()),
            Some(v) => v
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| Self::error(field, v, "it must be a string")),
        }
    }
}

/// transformers' defaults of one family's config.
struct Defaults {
    patch_size: u64,
    hidden_act: &'static str,
    layer_norm_eps: f64,
}

const VIT_DEFAULTS: Defaults = Defaults {
    patch_size: 16,
    hidden_act: "gelu",
    layer_norm_eps: 1e-12,
};

const CLIP_DEFAULTS: Defaults = Defaults {
    patch_size: 32,
    hidden_act: "quick_gelu",
    layer_norm_eps: 1e-5,
};

const DINOV2_DEFAULTS: Defaults = Defaults {
    patch_size: 14,
    hidden_act: "gelu",
    layer_norm_eps: 1e-6,
};

/// `Dinov2WithRegistersConfig`'s defaults: DINOv2's, but patch 16.
const DINOV2_REGISTERS_DEFAULTS: Defaults = Defaults {
    patch_size: 16,
    ..DINOV2_DEFAULTS
};

/// `Dinov2WithRegistersConfig`'s default `num_register_tokens`.
const DINOV2_REGISTERS: u64 = 4;

/// `Dinov2Config`'s default `mlp_ratio`: the MLP is this many times wider
/// than the residual stream.
const DINOV2_MLP_RATIO: u64 = 4;

/// CLIP's default `projection_dim`.
const CLIP_PROJECTION: u64 = 512;

impl ClassTokenConfig {
    /// Reads the text of a `config.json` of `family`.
    pub fn from_json(text: &str, family: Family) -> Result<Self, ConfigError> {
        let value: Value =
            serde_json::from_str(text).map_err(|source| ConfigError::Json { source })?;
        let empty = Map::new();
        let top = value.as_object().unwrap_or(&empty);
        let model_type = top.get("model_type").and_then(Value::as_str);
        match (family, model_type) {
            (Family::Vit, Some("vit") | None) => Self::vit(&Fields(top)),
            (Family::Clip, Some("clip_vision_model")) => {
                let fields = Fields(top);
                let projection = fields.u64("projection_dim", CLIP_PROJECTION)?;
                let with = fields.bool("with_projection", false)?;
                Self::clip(&fields, projection, with)
            }
            (Family::Clip, Some("clip") | None) => {
                let outer = Fields(top);
                let projection = outer.u64("projection_dim", CLIP_PROJECTION)?;
                let with = outer.bool("with_projection", true)?;
                let vision = match top.get("vision_config") {
                    None => &empty,
                    Some(Value::Object(v)) => v,
                    Some(other) => {
                        return Err(Fields::error(
                            "vision_config",
                            other,
                            "it must be an object",
                        ));
                    }
                };
                Self::clip(&Fields(vision), projection, with)
            }
            (Family::Dinov2, Some("dinov2") | None) => Self::dinov2(&Fields(top), None),
            (Family::Dinov2, Some("dinov2_with_registers")) => {
                let fields = Fields(top);
                let registers = fields.u64("num_register_tokens", DINOV2_REGISTERS)?;
                Self::dinov2(&fields, Some(registers))
            }
            (_, Some("clip_text_model")) => Err(ConfigError::MissingTower {
                tower: "vision",
                field: "vision_config",
            }),
            (_, other) => Err(ConfigError::ModelType {
                model_type: other.unwrap_or("").to_owned(),
            }),
        }
    }

    fn vit(fields: &Fields<'_>) -> Result<Self, ConfigError> {
        check_qkv_bias(fields)?;
        let act = fields.str("pooler_act", "tanh")?;
        if act != "tanh" {
            return Err(ConfigError::Field {
                field: "pooler_act",
                found: format!("\"{act}\""),
                expected: "the graph's pooler activation is tanh",
            });
        }
        let intermediate = fields.u64("intermediate_size", 3072)?;
        let mut config = Self::common(fields, Family::Vit, &VIT_DEFAULTS, intermediate)?;
        let width = fields.optional_u64("pooler_output_size")?;
        if width == Some(0) {
            return Err(ConfigError::Zero {
                field: "pooler_output_size",
            });
        }
        config.head = fields.bool("add_pooling_layer", true)?;
        config.head_width = width.unwrap_or(config.hidden);
        config.check_head()
    }

    fn clip(fields: &Fields<'_>, projection: u64, with: bool) -> Result<Self, ConfigError> {
        if projection == 0 {
            return Err(ConfigError::Zero {
                field: "projection_dim",
            });
        }
        let intermediate = fields.u64("intermediate_size", 3072)?;
        let mut config = Self::common(fields, Family::Clip, &CLIP_DEFAULTS, intermediate)?;
        config.head_width = projection;
        config.head = with;
        config.check_head()
    }

    fn dinov2(fields: &Fields<'_>, registers: Option<u64>) -> Result<Self, ConfigError> {
        check_qkv_bias(fields)?;
        if fields.bool("use_swiglu_ffn", false)? {
            return Err(ConfigError::Field {
                field: "use_swiglu_ffn",
                found: "true".to_owned(),
                expected: "the graph's MLP is fc1, GELU, fc2 (false); SwiGLU is not supported",
            });
        }
        // transformers: `int(hidden_size * mlp_ratio)`; the published
        // models' ratio is a whole number.
        let ratio = fields.u64("mlp_ratio", DINOV2_MLP_RATIO)?;
        if ratio == 0 {
            return Err(ConfigError::Zero { field: "mlp_ratio" });
        }
        let hidden = fields.u64("hidden_size", 768)?;
        let intermediate = hidden
            .checked_mul(ratio)
            .ok_or(ConfigError::TooLarge { what: "mlp_ratio" })?;
        let defaults = if registers.is_some() {
            &DINOV2_REGISTERS_DEFAULTS
        } else {
            &DINOV2_DEFAULTS
        };
        let mut config = Self::common(fields, Family::Dinov2, defaults, intermediate)?;
        // At most one per patch of the largest image: the token count
        // stays computable.
        if registers.is_some_and(|r| r > crate::siglip::MAX_IMAGE_SIDE.pow(2)) {
            return Err(ConfigError::TooLarge {
                what: "num_register_tokens",
            });
        }
        config.registers = registers;
        let input = fields.u64("input_size", config.image_size)?;
        config = config.with_input_size(input)?;
        Ok(config)
    }

    /// The same config for images of `side × side` pixels: DINOv2's
    /// position table is interpolated to their patch grid. ViT and CLIP
    /// take only their `image_size`.
    pub fn with_input_size(mut self, side: u64) -> Result<Self, ConfigError> {
        if side == self.input_size {
            return Ok(self);
        }
        if self.family != Family::Dinov2 {
            return Err(ConfigError::Field {
                field: "input_size",
                found: side.to_string(),
                expected: "only DINOv2 takes images of another size than image_size",
            });
        }
        check_side(side, self.patch_size)?;
        let grid = side / self.patch_size;
        // grid ≤ MAX_IMAGE_SIDE, so grid² + 1 fits; the table must too.
        if (grid * grid + self.class_rows())
            .checked_mul(self.hidden)
            .is_none()
        {
            return Err(ConfigError::TooLarge {
                what: "input_size's position table",
            });
        }
        self.input_size = side;
        Ok(self)
    }

    /// The head's weight, `hidden · head_width`, must be computable.
    fn check_head(self) -> Result<Self, ConfigError> {
        match self.hidden.checked_mul(self.head_width) {
            Some(_) => Ok(self),
            None => Err(ConfigError::TooLarge {
                what: "the head's width",
            }),
        }
    }

    fn common(
        fields: &Fields<'_>,
        family: Family,
        defaults: &Defaults,
        intermediate: u64,
    ) -> Result<Self, ConfigError> {
        let shape = Shape {
            hidden: fields.u64("hidden_size", 768)?,
            intermediate,
            layers: fields.u32("num_hidden_layers", 12)?,
            heads: fields.u32("num_attention_heads", 12)?,
            channels: fields.u64("num_channels", 3)?,
            image_size: fields.u64("image_size", 224)?,
            patch_size: fields.u64("patch_size", defaults.patch_size)?,
            eps: fields.f64("layer_norm_eps", defaults.layer_norm_eps)?,
        };
        let layer_norm_eps = check_shape(&shape)?;
        let name = fields.str("hidden_act", defaults.hidden_act)?;
        let activation = crate::hf::activation(&name).ok_or(ConfigError::Activation {
            activation: name,
            supported: &crate::hf::ACTIVATION_NAMES,
        })?;
        Ok(Self {
            family,
            hidden: shape.hidden,
            intermediate: shape.intermediate,
            layers: shape.layers,
            heads: shape.heads,
            image_size: shape.image_size,
            input_size: shape.image_size,
            patch_size: shape.patch_size,
            layer_norm_eps,
            activation,
            head_width: 0,
            head: false,
            registers: None,
        })
    }

    /// The config as a transformers config JSON object of its family
    /// (`vit` or `clip_vision_model`), every field written, with the
    /// output heads in this importer's own fields (module header);
    /// [`ClassTokenConfig::from_json`] reads it back to an equal config.
    pub fn to_json(&self) -> Value {
        let mut out = serde_json::json!({
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_channels": 3,
            "image_size": self.image_size,
            "patch_size": self.patch_size,
            // Read from a `hidden_act`, so it has a name.
            "hidden_act": crate::hf::activation_name(self.activation).unwrap_or_default(),
            "layer_norm_eps": f64::from(self.layer_norm_eps),
        });
        match self.family {
            Family::Vit => {
                out["model_type"] = "vit".into();
                out["qkv_bias"] = true.into();
                out["pooler_act"] = "tanh".into();
                out["add_pooling_layer"] = self.head.into();
                out["pooler_output_size"] = self.head_width.into();
            }
            Family::Clip => {
                out["model_type"] = "clip_vision_model".into();
                out["with_projection"] = self.head.into();
                out["projection_dim"] = self.head_width.into();
            }
            Family::Dinov2 => {
                let map = out.as_object_mut();
                if let Some(map) = map {
                    map.remove("intermediate_size");
                }
                out["model_type"] = "dinov2".into();
                if let Some(r) = self.registers {
                    out["model_type"] = "dinov2_with_registers".into();
                    out["num_register_tokens"] = r.into();
                }
                out["mlp_ratio"] = (self.intermediate / self.hidden).into();
                out["qkv_bias"] = true.into();
                out["use_swiglu_ffn"] = false.into();
                out["input_size"] = self.input_size.into();
            }
        }
        out
    }

    /// The same config with or without its output head (ViT's pooler,
    /// CLIP's projection), as the checkpoint's tensors have it; the
    /// head's width stays the config's.
    pub(crate) fn with_head(mut self, head: bool) -> Self {
        self.head = head;
        self
    }

    /// The family.
    pub fn family(&self) -> Family {
        self.family
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

    /// Side of the square input image in pixels.
    pub fn image_size(&self) -> u64 {
        self.image_size
    }

    /// Side of a square patch in pixels.
    pub fn patch_size(&self) -> u64 {
        self.patch_size
    }

    /// Side of the square images the graph takes: the processor's output
    /// (`image_size` except for DINOv2).
    pub fn input_size(&self) -> u64 {
        self.input_size
    }

    /// Patches per image side (the convolution's "valid" padding).
    pub fn grid(&self) -> u64 {
        self.input_size / self.patch_size
    }

    /// Patches per side of the stored position table: `image_size /
    /// patch_size` (transformers' `num_patches`).
    pub fn table_grid(&self) -> u64 {
        self.image_size / self.patch_size
    }

    /// Tokens per image: the class token, DINOv2's register tokens and
    /// `grid²` patches.
    pub fn tokens(&self) -> u64 {
        self.grid() * self.grid() + self.class_rows()
    }

    /// The tokens before the patches: the class token and DINOv2's
    /// register tokens.
    pub fn class_rows(&self) -> u64 {
        1 + self.registers.unwrap_or(0)
    }

    /// DINOv2 with registers: its register tokens (`None` for a model
    /// without, DINOv2 or another family).
    pub fn registers(&self) -> Option<u64> {
        self.registers
    }

    /// Elements of one patch vector: `3 · patch_size²`.
    pub fn patch_dim(&self) -> u64 {
        3 * self.patch_size * self.patch_size
    }

    /// Elements of one patch row as the graph holds it: [`patch_dim`]
    /// rounded up to a multiple of `PATCH_ALIGN` (4) with zeros.
    ///
    /// [`patch_dim`]: ClassTokenConfig::patch_dim
    pub fn patch_width(&self) -> u64 {
        self.patch_dim()
            .next_multiple_of(crate::siglip::config::PATCH_ALIGN)
    }

    /// The LayerNorm epsilon.
    pub fn layer_norm_eps(&self) -> f32 {
        self.layer_norm_eps
    }

    /// The MLP activation.
    pub fn activation(&self) -> Activation {
        self.activation
    }

    /// ViT: the pooler's output width, if the model has a pooler.
    pub fn pooler(&self) -> Option<u64> {
        (self.family == Family::Vit && self.head).then_some(self.head_width)
    }

    /// Whether the model has a pooled output: ViT only with its pooler;
    /// CLIP (the post-LayerNorm class row) and DINOv2 (the final
    /// LayerNorm's class row) always.
    pub fn has_pooled(&self) -> bool {
        self.family != Family::Vit || self.head
    }

    /// CLIP: the image projection's width, if the model has one.
    pub fn projection(&self) -> Option<u64> {
        (self.family == Family::Clip && self.head).then_some(self.head_width)
    }
}

/// ViT and DINOv2 read query, key and value biases.
fn check_qkv_bias(fields: &Fields<'_>) -> Result<(), ConfigError> {
    if fields.bool("qkv_bias", true)? {
        return Ok(());
    }
    Err(ConfigError::Field {
        field: "qkv_bias",
        found: "false".to_owned(),
        expected: "the importer reads query, key and value biases (true)",
    })
}

/// An input image side: at least one patch, at most `MAX_IMAGE_SIDE`.
fn check_side(side: u64, patch: u64) -> Result<(), ConfigError> {
    if side == 0 {
        return Err(ConfigError::Zero {
            field: "input_size",
        });
    }
    if side > crate::siglip::MAX_IMAGE_SIDE {
        return Err(ConfigError::TooLarge {
            what: "input_size (at most MAX_IMAGE_SIDE = 4096)",
        });
    }
    if patch > side {
        return Err(ConfigError::Patch { patch, image: side });
    }
    Ok(())
}
