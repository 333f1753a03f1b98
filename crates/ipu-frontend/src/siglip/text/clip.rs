//! CLIP's text tower beside SigLIP's: its config (`clip_text_model`, or a
//! full `clip` config's `text_config`) read into a [`TextConfig`] of the
//! [`TextFamily::Clip`] family, and the rule that picks the pooled
//! position from the token ids.
//!
//! transformers' `CLIPTextTransformer.forward` pools the final
//! LayerNorm's output at one position per text: with `eos_token_id == 2`
//! (configs from before transformers PR #24773) the position of the
//! largest token id (`input_ids.argmax(-1)`: CLIP's end token
//! `<|endoftext|>` has the largest id of its vocabulary), otherwise the
//! first position holding `eos_token_id`. The position depends on the
//! input, so the host computes it from the ids it tokenised
//! ([`pool_position`]) and supplies the row `b · S + position` of the
//! flattened `[B·S, H]` hidden states as the graph's `pool_rows` input,
//! which a gather reads (the same op as the token embedding).

use serde::Deserialize;

use super::config::{TextConfig, TextFamily, TextParams};
use crate::siglip::config::ConfigError;

/// The activations CLIP's graph has (`hidden_act`).
pub(crate) const QUICK_GELU: &[&str] = &["quick_gelu"];

/// `eos_token_id` of the configs that pool at the largest token id.
const LEGACY_EOS: u64 = 2;

/// The fields of a `CLIPTextConfig`, by their transformers names, with
/// its defaults.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default)]
struct ClipTextParams {
    vocab_size: u64,
    hidden_size: u64,
    intermediate_size: u64,
    projection_dim: u64,
    num_hidden_layers: u32,
    num_attention_heads: u32,
    max_position_embeddings: u64,
    hidden_act: String,
    layer_norm_eps: f64,
    pad_token_id: Option<u64>,
    eos_token_id: Option<u64>,
}

impl Default for ClipTextParams {
    /// transformers' `CLIPTextConfig` defaults.
    fn default() -> Self {
        Self {
            vocab_size: 49408,
            hidden_size: 512,
            intermediate_size: 2048,
            projection_dim: 512,
            num_hidden_layers: 12,
            num_attention_heads: 8,
            max_position_embeddings: 77,
            hidden_act: "quick_gelu".to_owned(),
            layer_norm_eps: 1e-5,
            pad_token_id: Some(1),
            eos_token_id: Some(49407),
        }
    }
}

/// Reads a CLIP `config.json` (already parsed) for its text tower: a
/// `clip` config's `text_config` with the projection to the top-level
/// `projection_dim` (`CLIPModel`), or a `clip_text_model` config, with
/// its projection when `architectures` names
/// `CLIPTextModelWithProjection`.
pub(super) fn clip_text_config(value: &serde_json::Value) -> Result<TextConfig, ConfigError> {
    let missing = ConfigError::MissingTower {
        tower: "text",
        field: "text_config",
    };
    let (text, projected, projection) = match value.get("model_type").and_then(|m| m.as_str()) {
        Some("clip") => {
            let text = value.get("text_config").ok_or(missing)?;
            let projection = match value.get("projection_dim") {
                None => ClipTextParams::default().projection_dim,
                Some(p) => p.as_u64().ok_or_else(|| ConfigError::Field {
                    field: "projection_dim",
                    found: p.to_string(),
                    expected: "a whole number",
                })?,
            };
            (text.clone(), true, Some(projection))
        }
        Some("clip_text_model") => {
            let projected = value
                .get("architectures")
                .and_then(|a| a.as_array())
                .is_some_and(|a| a.iter().any(|n| n == "CLIPTextModelWithProjection"));
            (value.clone(), projected, None)
        }
        _ => return Err(missing),
    };
    let params: ClipTextParams =
        serde_json::from_value(text).map_err(|source| ConfigError::Json { source })?;
    let eos = params.eos_token_id.ok_or_else(|| ConfigError::Field {
        field: "eos_token_id",
        found: "null".to_owned(),
        expected: "CLIP pools at the end-of-text token, so the config must name it",
    })?;
    let width = match (projected, projection) {
        (false, _) => params.hidden_size,
        (true, Some(p)) => p,
        (true, None) => params.projection_dim,
    };
    TextConfig::of_family(
        &TextParams {
            vocab_size: params.vocab_size,
            hidden_size: params.hidden_size,
            intermediate_size: params.intermediate_size,
            num_hidden_layers: params.num_hidden_layers,
            num_attention_heads: params.num_attention_heads,
            max_position_embeddings: params.max_position_embeddings,
            hidden_act: params.hidden_act,
            layer_norm_eps: params.layer_norm_eps,
            projection_size: Some(width),
            pad_token_id: params.pad_token_id,
            eos_token_id: Some(eos),
        },
        TextFamily::Clip { projected },
    )
}

/// `config` as a `clip_text_model` config JSON object that
/// [`TextConfig::from_json`] reads back equal.
pub(super) fn clip_text_json(config: &TextConfig, projected: bool) -> serde_json::Value {
    let architecture = if projected {
        "CLIPTextModelWithProjection"
    } else {
        "CLIPTextModel"
    };
    serde_json::json!({
        "model_type": "clip_text_model",
        "architectures": [architecture],
        "vocab_size": config.vocab(),
        "hidden_size": config.hidden(),
        "intermediate_size": config.intermediate(),
        "projection_dim": config.projection(),
        "num_hidden_layers": config.layers(),
        "num_attention_heads": config.heads(),
        "max_position_embeddings": config.positions(),
        "hidden_act": "quick_gelu",
        "layer_norm_eps": f64::from(config.layer_norm_eps()),
        "pad_token_id": config.pad_token_id(),
        "eos_token_id": config.eos_token_id(),
    })
}

/// The position CLIP pools one text's token `ids` at (module header):
/// the largest id's first position when `eos_token_id` is 2, else the
/// first position of `eos_token_id`; as in transformers (whose argmax of
/// an all-false comparison is 0), position 0 when the text holds none.
pub fn pool_position(ids: &[u32], eos_token_id: u64) -> usize {
    if eos_token_id == LEGACY_EOS {
        let mut best = 0;
        for (i, &id) in ids.iter().enumerate() {
            if id > ids[best] {
                best = i;
            }
        }
        best
    } else {
        ids.iter()
            .position(|&id| u64::from(id) == eos_token_id)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pooled_position_follows_transformers() {
        // The first end token, not the padding made of it.
        assert_eq!(pool_position(&[49406, 320, 49407, 49407], 49407), 2);
        // Legacy configs: the largest id's first position.
        assert_eq!(pool_position(&[49406, 320, 49407, 49407], 2), 2);
        assert_eq!(pool_position(&[5, 9, 1, 9], 2), 1);
        // No end token: position 0, as transformers' argmax gives.
        assert_eq!(pool_position(&[5, 6, 7], 49407), 0);
    }
}
