//! The name mappings of ViT, CLIP's vision tower and DINOv2: which transformers
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
//! position embeddings, the class token and (ViT, DINOv2) the convolution
//! bias. DINOv2's names are ViT's with its own layer modules (`norm1`,
//! `mlp.fc1`, ...) and prefix `dinov2.`; its table is interpolated when
//! its grid is not the input's, and its layer scales are read with the
//! GEMM each scales ([`Layout::RowScaled`]).

use crate::class_token::config::{ClassTokenConfig, Family};
use crate::siglip::names::{
    LayerNames, Layout, Piece, Resample, SIGLIP_LAYER, WeightSource, copy_source, encoder_sources,
    encoder_tensors, transposed_source,
};

/// The prefix of ViT's tensors in a task model's checkpoint.
pub const VIT_PREFIX: &str = "vit.";
/// The prefix of CLIP's vision tensors.
pub const CLIP_PREFIX: &str = "vision_model.";
/// The prefix of DINOv2's tensors in a task model's checkpoint
/// (`Dinov2ForImageClassification`).
pub const DINOV2_PREFIX: &str = "dinov2.";

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
            out.extend(encoder_tensors(
                layer_names(Family::Vit),
                config.layers(),
                h,
                m,
            ));
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
            out.extend(encoder_tensors(
                layer_names(Family::Clip),
                config.layers(),
                h,
                m,
            ));
            out.push(own("post_layernorm.weight", vec![h]));
            out.push(own("post_layernorm.bias", vec![h]));
            let mut out = named(out);
            if let Some(d) = config.projection() {
                out.push(own(PROJECTION, vec![d, h]));
            }
            out
        }
        Family::Dinov2 => {
            let n = config.table_grid();
            let mut out = vec![
                own("embeddings.cls_token", vec![1, 1, h]),
                own("embeddings.position_embeddings", vec![1, n * n + 1, h]),
                own(
                    "embeddings.patch_embeddings.projection.weight",
                    vec![h, 3, p, p],
                ),
                own("embeddings.patch_embeddings.projection.bias", vec![h]),
            ];
            if let Some(r) = config.registers() {
                out.push(own(REGISTER_TOKENS, vec![1, r, h]));
            }
            for (i, layer) in encoder_tensors(&DINOV2_LAYER, config.layers(), h, m)
                .chunks(LAYER_TENSORS)
                .enumerate()
            {
                out.extend_from_slice(layer);
                for scale in LAYER_SCALES {
                    out.push((layer_scale(i, scale), vec![h]));
                }
            }
            out.push(own("layernorm.weight", vec![h]));
            out.push(own("layernorm.bias", vec![h]));
            named(out)
        }
    }
}

/// DINOv2 with registers: the register tokens `[1, R, H]`.
const REGISTER_TOKENS: &str = "embeddings.register_tokens";

/// Stored tensors of one encoder layer in `encoder_tensors`' list: a
/// weight and a bias for each of its eight modules.
const LAYER_TENSORS: usize = 16;

/// DINOv2's layer scales, after the attention and after the MLP.
const LAYER_SCALES: [&str; 2] = ["layer_scale1", "layer_scale2"];

/// The stored name of layer `i`'s `scale` (`layer_scale1` or
/// `layer_scale2`).
fn layer_scale(i: usize, scale: &str) -> String {
    format!("{}{i}.{scale}.lambda1", DINOV2_LAYER.layer)
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
        divide_by_sqrt: None,
    };
    let (conv, pos, class, bias) = match config.family() {
        Family::Vit | Family::Dinov2 => (
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
    let (from, to) = (config.table_grid(), config.grid());
    let resample = (from != to).then_some(Resample {
        from,
        to,
        antialias: config.registers().is_some(),
    });
    let registers = config.registers().unwrap_or(0);
    let register_piece = (registers > 0).then(|| whole(name(REGISTER_TOKENS), 1));
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
            pieces: [pos, class]
                .into_iter()
                .chain(bias)
                .chain(register_piece)
                .collect(),
            layout: Layout::ClassFold {
                bias: fold_bias,
                resample,
                registers,
            },
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
            out.extend(prefixed(encoder_sources(
                layer_names(Family::Vit),
                config.layers(),
                h,
                m,
                h / u64::from(config.heads()),
            )));
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
            out.extend(prefixed(encoder_sources(
                layer_names(Family::Clip),
                config.layers(),
                h,
                m,
                h / u64::from(config.heads()),
            )));
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
        Family::Dinov2 => {
            let encoder = encoder_sources(
                &DINOV2_LAYER,
                config.layers(),
                h,
                m,
                h / u64::from(config.heads()),
            );
            out.extend(prefixed(with_layer_scale(encoder, h)));
            out.push(copy_source("post.g".into(), name("layernorm.weight"), h));
            out.push(copy_source("post.b".into(), name("layernorm.bias"), h));
        }
    }
    out
}

/// DINOv2's layer scales folded into the GEMMs before them: the
/// attention's output projection (`enc{i}.out.*`) takes `layer_scale1`,
/// the MLP's second layer (`enc{i}.fc2.*`) `layer_scale2`. transformers
/// computes `(x·Wᵀ + b) · λ` per output column; the graph computes
/// `x·(W·λ)ᵀ + b·λ`, each weight and bias multiplied by its column's
/// scale once in f32 at import, so no op is added. The two differ only
/// by where the rounding of the scaling falls (one rounding of each
/// scaled weight instead of one of each output), a relative 2⁻²⁴ per
/// term.
fn with_layer_scale(mut sources: Vec<WeightSource>, h: u64) -> Vec<WeightSource> {
    for source in &mut sources {
        let Some((layer, part)) = source
            .weight
            .strip_prefix("enc")
            .and_then(|rest| rest.split_once('.'))
        else {
            continue;
        };
        let scale = match part {
            "out.w" | "out.b" => LAYER_SCALES[0],
            "fc2.w" | "fc2.b" => LAYER_SCALES[1],
            _ => continue,
        };
        let Ok(i) = layer.parse::<usize>() else {
            continue;
        };
        source.pieces.push(Piece {
            name: layer_scale(i, scale),
            rows: 0..h,
            divide_by_sqrt: None,
        });
        source.layout = Layout::RowScaled {
            transposed: part.ends_with(".w"),
        };
    }
    sources
}

/// ViT's encoder layer names.
const VIT_LAYER: LayerNames = LayerNames {
    layer: "encoder.layer.",
    ln1: "layernorm_before",
    qkv: [
        "attention.attention.query",
        "attention.attention.key",
        "attention.attention.value",
    ],
    out: "attention.output.dense",
    ln2: "layernorm_after",
    fc1: "intermediate.dense",
    fc2: "output.dense",
};

/// DINOv2's encoder layer names (its layer scales are read beside them,
/// `LAYER_SCALES`).
const DINOV2_LAYER: LayerNames = LayerNames {
    layer: "encoder.layer.",
    ln1: "norm1",
    qkv: [
        "attention.attention.query",
        "attention.attention.key",
        "attention.attention.value",
    ],
    out: "attention.output.dense",
    ln2: "norm2",
    fc1: "mlp.fc1",
    fc2: "mlp.fc2",
};

/// The encoder layer names of `family` (CLIP's are SigLIP's).
fn layer_names(family: Family) -> &'static LayerNames {
    match family {
        Family::Vit => &VIT_LAYER,
        Family::Clip => &SIGLIP_LAYER,
        Family::Dinov2 => &DINOV2_LAYER,
    }
}

/// Whether a stored tensor of a `family` checkpoint is one the importer
/// does not read: a task model's classifier, ViT's mask token, a full
/// CLIP model's text tower and logit scale, position-id buffers.
pub fn is_ignored(family: Family, name: &str) -> bool {
    let common = name.ends_with("position_ids");
    common
        || match family {
            Family::Vit | Family::Dinov2 => {
                name.starts_with("classifier.") || name.ends_with("embeddings.mask_token")
            }
            Family::Clip => {
                name.starts_with("text_model.")
                    || name == "text_projection.weight"
                    || name == "logit_scale"
            }
        }
}
