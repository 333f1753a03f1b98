//! The text tower's name mapping: which transformers tensors make each
//! graph weight (the table `docs/SIGLIP.md` documents).
//!
//! Names are those of `SiglipTextModel`'s state dict without the
//! `text_model.` prefix that a full `SiglipModel` (and transformers 4's
//! `SiglipTextModel`) stores them with. The encoder layers are named and
//! assembled exactly as in the vision tower (`encoder_sources`).
//!
//! CLIP's text tower has the same names under `text_model.`; its
//! projection `text_projection.weight` (`[P, H]`, no bias) is stored
//! outside that prefix, so CLIP's names are given whole ([`clip_names`]).

use crate::siglip::names::{
    SIGLIP_LAYER, WeightSource, copy_source, encoder_sources, encoder_tensors, transposed_source,
};
use crate::siglip::text::{TextConfig, TextFamily};

/// The prefix a full `SiglipModel` puts before every text tensor.
pub const TEXT_PREFIX: &str = "text_model.";

/// CLIP's text projection, outside the text tower's prefix.
pub const TEXT_PROJECTION: &str = "text_projection.weight";

/// Every text tensor a checkpoint with this config must hold, with its
/// shape: embeddings, layers, final LayerNorm, head.
pub fn expected_text_tensors(config: &TextConfig) -> Vec<(String, Vec<u64>)> {
    let (h, p) = (config.hidden(), config.projection());
    let mut out = vec![
        (
            "embeddings.token_embedding.weight".to_owned(),
            vec![config.vocab(), h],
        ),
        (
            "embeddings.position_embedding.weight".to_owned(),
            vec![config.positions(), h],
        ),
    ];
    out.extend(encoder_tensors(
        &SIGLIP_LAYER,
        config.layers(),
        h,
        config.intermediate(),
    ));
    out.push(("final_layer_norm.weight".to_owned(), vec![h]));
    out.push(("final_layer_norm.bias".to_owned(), vec![h]));
    if config.family() == TextFamily::Siglip {
        out.push(("head.weight".to_owned(), vec![p, h]));
        out.push(("head.bias".to_owned(), vec![p]));
    }
    out
}

/// How every graph weight of the text graph is assembled, in graph
/// declaration order.
pub fn text_weight_sources(config: &TextConfig) -> Vec<WeightSource> {
    let (h, p) = (config.hidden(), config.projection());
    let mut out = vec![
        copy_source(
            "tok".into(),
            "embeddings.token_embedding.weight".into(),
            config.vocab(),
        ),
        copy_source(
            "pos".into(),
            "embeddings.position_embedding.weight".into(),
            config.positions(),
        ),
    ];
    out.extend(encoder_sources(
        &SIGLIP_LAYER,
        config.layers(),
        h,
        config.intermediate(),
        h / u64::from(config.heads()),
    ));
    out.push(copy_source(
        "post.g".into(),
        "final_layer_norm.weight".into(),
        h,
    ));
    out.push(copy_source(
        "post.b".into(),
        "final_layer_norm.bias".into(),
        h,
    ));
    if config.family() == TextFamily::Siglip {
        out.push(transposed_source("head.w".into(), "head.weight".into(), p));
        out.push(copy_source("head.b".into(), "head.bias".into(), p));
    }
    out
}

/// CLIP's expected tensors and weight sources with whole stored names:
/// the tower's under `prefix`, and `text_projection.weight` (into
/// `head.w`, transposed) when the config is projected.
pub fn clip_names(
    config: &TextConfig,
    prefix: &str,
) -> (Vec<(String, Vec<u64>)>, Vec<WeightSource>) {
    let mut expected: Vec<(String, Vec<u64>)> = expected_text_tensors(config)
        .into_iter()
        .map(|(n, shape)| (format!("{prefix}{n}"), shape))
        .collect();
    let mut sources = text_weight_sources(config);
    for piece in sources.iter_mut().flat_map(|s| s.pieces.iter_mut()) {
        piece.name = format!("{prefix}{}", piece.name);
    }
    if config.family() == (TextFamily::Clip { projected: true }) {
        let (h, p) = (config.hidden(), config.projection());
        expected.push((TEXT_PROJECTION.to_owned(), vec![p, h]));
        sources.push(transposed_source(
            "head.w".into(),
            TEXT_PROJECTION.into(),
            p,
        ));
    }
    (expected, sources)
}

/// Whether a stored tensor of a CLIP checkpoint is outside its text
/// tower (the vision tower, its projection, the logit scale) or a
/// position-id buffer.
pub fn is_ignored_by_clip_text(name: &str) -> bool {
    name.starts_with("vision_model.")
        || name == "visual_projection.weight"
        || name == "logit_scale"
        || name.ends_with("embeddings.position_ids")
}

/// Whether a stored tensor belongs to the vision tower or the contrastive
/// logit parameters, or is a position-id buffer; the text importer does
/// not read these.
pub fn is_ignored_by_text(name: &str) -> bool {
    name.starts_with("vision_model.")
        || name == "logit_scale"
        || name == "logit_bias"
        || name.ends_with("embeddings.position_ids")
}
