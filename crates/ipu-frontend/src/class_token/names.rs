//! The name mappings of ViT and CLIP's vision tower: which transformers
//! tensors make each graph weight (the tables of `docs/MODELS.md`), in the
//! form SigLIP's mapping uses ([`WeightSource`]).
//!
//! Names are full state-dict names: ViT's with the `vit.` prefix that
//! task models (`ViTForImageClassification`) and transformers 4's
//! saved `ViTModel`s may put before them, CLIP's with `vision_model.`
//! (a `CLIPVisionModel`, or a full `CLIPModel`) where the checkpoint has
//! it; CLIP's `visual_projection.weight` is never prefixed. Both patch
//! convolutions are `[H, 3, p, p]` filters flattened as SigLIP's; the
//! position table `pos` is assembled by [`Layout::ClassFold`] from the
//! position embeddings, the class token and (ViT) the convolution bias.

use crate::class_token::config::{ClassTokenConfig, Family};
use crate::siglip::names::{
    Layout, Piece, WeightSource, copy_source, encoder_sources, encoder_tensors, transposed_source,
};

/// The prefix of ViT's tensors in a task model's checkpoint.
pub const VIT_PREFIX: &str = "vit.";
/// The prefix of CLIP's vision tensors.
pub const CLIP_PREFIX: &str = "vision_model.";

/// Every tensor a checkpoint of `config` must hold (full names, `prefix`
/// before the tower's own), with its shape, in a fixed order.
pub fn expected_tensors(config: &ClassTokenConfig, prefix: &str) -> Vec<(String, Vec<u64>)> {
    let (h, p, t) = (config.hidden(), config.patch_size(), config.tokens());
    let m = config.intermediate();
    let named = |list: Vec<(String, Vec<u64>)>| {
        list.into_iter()
            .map(|(n, s)| (format!("{prefix}{n}"), s))
            .collect::<Vec<_>>()
    };
    let own = |n: &str, s: Vec<u64>| (n.to_owned(), s);
    match config.family() {
        Family::Vit => {
            let mut out = vec![
                own("embeddings.cls_token", vec![1, 1, h]),
                own("embeddings.position_embeddings", vec![1, t, h]),
                own(
                    "embeddings.patch_embeddings.projection.weight",
                    vec![h, 3, p, p],
                ),
                own("embeddings.patch_embeddings.projection.bias", vec![h]),
            ];
            out.extend(vit_encoder_tensors(config.layers(), h, m));
            out.push(own("layernorm.weight", vec![h]));
            out.push(own("layernorm.bias", vec![h]));
            if let Some(w) = config.pooler() {
                out.push(own("pooler.dense.weight", vec![w, h]));
                out.push(own("pooler.dense.bias", vec![w]));
            }
            named(out)
        }
        Family::Clip => {
            let mut out = vec![
                own("embeddings.class_embedding", vec![h]),
                own("embeddings.patch_embedding.weight", vec![h, 3, p, p]),
                own("embeddings.position_embedding.weight", vec![t, h]),
                own("pre_layrnorm.weight", vec![h]),
                own("pre_layrnorm.bias", vec![h]),
            ];
            out.extend(encoder_tensors(config.layers(), h, m));
            out.push(own("post_layernorm.weight", vec![h]));
            out.push(own("post_layernorm.bias", vec![h]));
            let mut out = named(out);
            if let Some(d) = config.projection() {
                out.push(own(PROJECTION, vec![d, h]));
            }
            out
        }
    }
}

/// CLIP's image projection, outside the vision tower's prefix.
pub const PROJECTION: &str = "visual_projection.weight";

/// How every graph weight of `config`'s graph is assembled from the
/// tensors of [`expected_tensors`], in graph declaration order.
pub fn weight_sources(config: &ClassTokenConfig, prefix: &str) -> Vec<WeightSource> {
    let (h, m) = (config.hidden(), config.intermediate());
    let name = |n: &str| format!("{prefix}{n}");
    let whole = |n: String, rows: u64| Piece {
        name: n,
        rows: 0..rows,
    };
    let (conv, pos, class, bias) = match config.family() {
        Family::Vit => (
            "embeddings.patch_embeddings.projection.weight",
            whole(name("embeddings.position_embeddings"), 1),
            whole(name("embeddings.cls_token"), 1),
            Some(whole(
                name("embeddings.patch_embeddings.projection.bias"),
                h,
            )),
        ),
        Family::Clip => (
            "embeddings.patch_embedding.weight",
            whole(
                name("embeddings.position_embedding.weight"),
                config.tokens(),
            ),
            whole(name("embeddings.class_embedding"), h),
            None,
        ),
    };
    let fold_bias = bias.is_some();
    let mut out = vec![
        WeightSource {
            weight: "embed.w".into(),
            pieces: vec![whole(name(conv), h)],
            layout: Layout::TransposedPadded {
                rows: config.patch_width(),
            },
        },
        WeightSource {
            weight: "pos".into(),
            pieces: [pos, class].into_iter().chain(bias).collect(),
            layout: Layout::ClassFold { bias: fold_bias },
        },
    ];
    let prefixed = |list: Vec<WeightSource>| {
        list.into_iter().map(move |mut s| {
            for piece in &mut s.pieces {
                piece.name = format!("{prefix}{}", piece.name);
            }
            s
        })
    };
    match config.family() {
        Family::Vit => {
            out.extend(prefixed(vit_encoder_sources(config.layers(), h, m)));
            out.push(copy_source("post.g".into(), name("layernorm.weight"), h));
            out.push(copy_source("post.b".into(), name("layernorm.bias"), h));
            if let Some(w) = config.pooler() {
                out.push(transposed_source(
                    "pool.w".into(),
                    name("pooler.dense.weight"),
                    w,
                ));
                out.push(copy_source("pool.b".into(), name("pooler.dense.bias"), w));
            }
        }
        Family::Clip => {
            out.push(copy_source("pre.g".into(), name("pre_layrnorm.weight"), h));
            out.push(copy_source("pre.b".into(), name("pre_layrnorm.bias"), h));
            out.extend(prefixed(encoder_sources(config.layers(), h, m)));
            out.push(copy_source(
                "post.g".into(),
                name("post_layernorm.weight"),
                h,
            ));
            out.push(copy_source("post.b".into(), name("post_layernorm.bias"), h));
            if let Some(d) = config.projection() {
                out.push(transposed_source("proj.w".into(), PROJECTION.into(), d));
            }
        }
    }
    out
}

/// ViT's tensors of `layers` encoder layers (`encoder.layer.{i}.…`) of
/// width `h` and MLP width `m`, with their shapes.
fn vit_encoder_tensors(layers: u32, h: u64, m: u64) -> Vec<(String, Vec<u64>)> {
    let mut out = Vec::new();
    for i in 0..layers {
        for (name, shape) in [
            ("layernorm_before.weight", vec![h]),
            ("layernorm_before.bias", vec![h]),
            ("attention.attention.query.weight", vec![h, h]),
            ("attention.attention.query.bias", vec![h]),
            ("attention.attention.key.weight", vec![h, h]),
            ("attention.attention.key.bias", vec![h]),
            ("attention.attention.value.weight", vec![h, h]),
            ("attention.attention.value.bias", vec![h]),
            ("attention.output.dense.weight", vec![h, h]),
            ("attention.output.dense.bias", vec![h]),
            ("layernorm_after.weight", vec![h]),
            ("layernorm_after.bias", vec![h]),
            ("intermediate.dense.weight", vec![m, h]),
            ("intermediate.dense.bias", vec![m]),
            ("output.dense.weight", vec![h, m]),
            ("output.dense.bias", vec![h]),
        ] {
            out.push((format!("encoder.layer.{i}.{name}"), shape));
        }
    }
    out
}

/// How the graph weights of ViT's encoder layers (`enc{i}.…`, the names
/// SigLIP's layers have) are assembled.
fn vit_encoder_sources(layers: u32, h: u64, m: u64) -> Vec<WeightSource> {
    let mut out = Vec::new();
    for i in 0..layers {
        let g = |s: &str| format!("enc{i}.{s}");
        let l = |s: &str| format!("encoder.layer.{i}.{s}");
        let qkv = |kind: &str| {
            ["query", "key", "value"]
                .iter()
                .map(|x| Piece {
                    name: l(&format!("attention.attention.{x}.{kind}")),
                    rows: 0..h,
                })
                .collect::<Vec<_>>()
        };
        out.push(copy_source(g("ln1.g"), l("layernorm_before.weight"), h));
        out.push(copy_source(g("ln1.b"), l("layernorm_before.bias"), h));
        out.push(WeightSource {
            weight: g("qkv.w"),
            pieces: qkv("weight"),
            layout: Layout::Transposed,
        });
        out.push(WeightSource {
            weight: g("qkv.b"),
            pieces: qkv("bias"),
            layout: Layout::AsIs,
        });
        out.push(transposed_source(
            g("out.w"),
            l("attention.output.dense.weight"),
            h,
        ));
        out.push(copy_source(g("out.b"), l("attention.output.dense.bias"), h));
        out.push(copy_source(g("ln2.g"), l("layernorm_after.weight"), h));
        out.push(copy_source(g("ln2.b"), l("layernorm_after.bias"), h));
        out.push(transposed_source(
            g("fc1.w"),
            l("intermediate.dense.weight"),
            m,
        ));
        out.push(copy_source(g("fc1.b"), l("intermediate.dense.bias"), m));
        out.push(transposed_source(g("fc2.w"), l("output.dense.weight"), h));
        out.push(copy_source(g("fc2.b"), l("output.dense.bias"), h));
    }
    out
}

/// Whether a stored tensor of a `family` checkpoint is one the importer
/// does not read: a task model's classifier, ViT's mask token, a full
/// CLIP model's text tower and logit scale, position-id buffers.
pub fn is_ignored(family: Family, name: &str) -> bool {
    let common = name.ends_with("position_ids");
    common
        || match family {
            Family::Vit => {
                name.starts_with("classifier.") || name.ends_with("embeddings.mask_token")
            }
            Family::Clip => {
                name.starts_with("text_model.")
                    || name == "text_projection.weight"
                    || name == "logit_scale"
            }
        }
}
