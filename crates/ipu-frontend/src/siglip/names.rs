//! The name mapping: which transformers tensors make each graph weight,
//! and how (the table `docs/SIGLIP.md` documents).
//!
//! Names are those of transformers' `SiglipVisionModel` state dict without
//! its `vision_model.` prefix (a full `SiglipModel`, and transformers 4's
//! `SiglipVisionModel`, store them with the prefix; transformers 5's
//! `SiglipVisionModel` without it). A graph weight is assembled from one or
//! more *pieces*: row ranges of stored tensors (the first axis; a vector's
//! elements are its rows), concatenated in order into a matrix of
//! `[rows, row length]`, then either kept as is or transposed, because
//! torch stores linear weights as `[out, in]` and the graph's GEMM weights
//! are `[in, out]`. The patch convolution's `[H, C, p, p]` weight is a
//! `[H, C·p·p]` matrix whose rows flatten each filter in (channel, row,
//! column) order, the order of the graph's patch vectors.

use std::ops::Range;

use crate::siglip::config::VisionConfig;

/// The prefix a full `SiglipModel` puts before every vision tensor.
pub const VISION_PREFIX: &str = "vision_model.";

/// How the concatenated pieces become the graph weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// The row-major elements as they are.
    AsIs,
    /// The `[rows, row length]` matrix transposed to `[row length, rows]`
    /// (`[out, in]` to `[in, out]`).
    Transposed,
    /// [`Layout::Transposed`], then zero rows appended up to `rows` rows:
    /// the patch embedding, whose input vector the graph pads.
    TransposedPadded {
        /// Rows of the graph weight.
        rows: u64,
    },
    /// The position table of a model with a class token, its pieces the
    /// position embeddings (`tokens · width` values), the class token
    /// (`width`) and, when `bias`, the patch convolution's bias
    /// (`width`): row 0 is class token + position 0, every other row
    /// position + bias (`class_token` module header).
    ClassFold {
        /// Whether a convolution bias is folded into the patch rows.
        bias: bool,
        /// How the stored table's patch rows are resampled to the graph's
        /// grid first, when the grids differ (DINOv2).
        resample: Option<Resample>,
        /// Rows placed after row 0 as they are stored, with no position
        /// added: DINOv2's register tokens, the last piece.
        registers: u64,
    },
    /// A linear layer's `[out, in]` weight transposed to `[in, out]` (or,
    /// when not `transposed`, its bias `[out]` as it is), its last piece
    /// `out` per-output scales each output row is multiplied by first:
    /// DINOv2's layer scale folded into the GEMM before it.
    RowScaled {
        /// Whether the scaled rows are then transposed (a weight).
        transposed: bool,
    },
}

/// A square position table's resampling (`class_token::interpolate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resample {
    /// The stored table's patch grid side.
    pub from: u64,
    /// The graph's patch grid side.
    pub to: u64,
    /// torch's `antialias=True` (DINOv2 with registers) rather than plain
    /// bicubic (DINOv2).
    pub antialias: bool,
}

/// Rows of a stored tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The transformers name (without the `vision_model.` prefix).
    pub name: String,
    /// The rows taken (first-axis indices).
    pub rows: Range<u64>,
    /// When set, every value taken is divided by the square root of it,
    /// once, in f32: the head dimension, for the query projection of an
    /// attention whose queries carry the scores' `1/√head_dim`
    /// (`Op::Attention::queries_scaled`).
    pub divide_by_sqrt: Option<u64>,
}

/// How one graph weight is assembled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightSource {
    /// The graph tensor's name.
    pub weight: String,
    /// Its pieces, concatenated along the first axis in this order.
    pub pieces: Vec<Piece>,
    /// What happens to the concatenation.
    pub layout: Layout,
}

/// Every vision tensor a checkpoint with this config must hold, with its
/// shape, in a fixed order (embeddings, layers, post-LayerNorm, head).
pub fn expected_tensors(config: &VisionConfig) -> Vec<(String, Vec<u64>)> {
    let h = config.hidden();
    let m = config.intermediate();
    let p = config.patch_size();
    let mut out = vec![
        (
            "embeddings.patch_embedding.weight".to_owned(),
            vec![h, config.channels(), p, p],
        ),
        ("embeddings.patch_embedding.bias".to_owned(), vec![h]),
        (
            "embeddings.position_embedding.weight".to_owned(),
            vec![config.tokens(), h],
        ),
    ];
    out.extend(encoder_tensors(&SIGLIP_LAYER, config.layers(), h, m));
    out.push(("post_layernorm.weight".to_owned(), vec![h]));
    out.push(("post_layernorm.bias".to_owned(), vec![h]));
    if config.use_head() {
        for (name, shape) in [
            ("head.probe", vec![1, 1, h]),
            ("head.attention.in_proj_weight", vec![3 * h, h]),
            ("head.attention.in_proj_bias", vec![3 * h]),
            ("head.attention.out_proj.weight", vec![h, h]),
            ("head.attention.out_proj.bias", vec![h]),
            ("head.layernorm.weight", vec![h]),
            ("head.layernorm.bias", vec![h]),
            ("head.mlp.fc1.weight", vec![m, h]),
            ("head.mlp.fc1.bias", vec![m]),
            ("head.mlp.fc2.weight", vec![h, m]),
            ("head.mlp.fc2.bias", vec![h]),
        ] {
            out.push((name.to_owned(), shape));
        }
    }
    out
}

/// How every graph weight of the config's graph is assembled, in graph
/// declaration order.
pub fn weight_sources(config: &VisionConfig) -> Vec<WeightSource> {
    let h = config.hidden();
    let m = config.intermediate();
    let whole = |name: String, rows: u64| Piece {
        name,
        rows: 0..rows,
        divide_by_sqrt: None,
    };
    let copy = |weight: String, name: String, rows: u64| WeightSource {
        weight,
        pieces: vec![whole(name, rows)],
        layout: Layout::AsIs,
    };
    let transposed = |weight: String, name: String, rows: u64| WeightSource {
        weight,
        pieces: vec![whole(name, rows)],
        layout: Layout::Transposed,
    };
    let mut out = vec![
        WeightSource {
            weight: "embed.w".into(),
            pieces: vec![whole("embeddings.patch_embedding.weight".into(), h)],
            layout: Layout::TransposedPadded {
                rows: config.patch_width(),
            },
        },
        copy(
            "embed.b".into(),
            "embeddings.patch_embedding.bias".into(),
            h,
        ),
        copy(
            "pos".into(),
            "embeddings.position_embedding.weight".into(),
            config.tokens(),
        ),
    ];
    out.extend(encoder_sources(
        &SIGLIP_LAYER,
        config.layers(),
        h,
        m,
        h / u64::from(config.heads()),
    ));
    out.push(copy("post.g".into(), "post_layernorm.weight".into(), h));
    out.push(copy("post.b".into(), "post_layernorm.bias".into(), h));
    if config.use_head() {
        let in_proj = |kind: &str, rows: Range<u64>| Piece {
            name: format!("head.attention.in_proj_{kind}"),
            rows,
            divide_by_sqrt: None,
        };
        out.push(copy("head.probe".into(), "head.probe".into(), 1));
        // torch's MultiheadAttention packs the query, key and value
        // projections in this order along the output axis.
        out.push(WeightSource {
            weight: "head.q.w".into(),
            pieces: vec![in_proj("weight", 0..h)],
            layout: Layout::Transposed,
        });
        out.push(WeightSource {
            weight: "head.q.b".into(),
            pieces: vec![in_proj("bias", 0..h)],
            layout: Layout::AsIs,
        });
        out.push(WeightSource {
            weight: "head.kv.w".into(),
            pieces: vec![in_proj("weight", h..3 * h)],
            layout: Layout::Transposed,
        });
        out.push(WeightSource {
            weight: "head.kv.b".into(),
            pieces: vec![in_proj("bias", h..3 * h)],
            layout: Layout::AsIs,
        });
        out.push(transposed(
            "head.out.w".into(),
            "head.attention.out_proj.weight".into(),
            h,
        ));
        out.push(copy(
            "head.out.b".into(),
            "head.attention.out_proj.bias".into(),
            h,
        ));
        out.push(copy("head.ln.g".into(), "head.layernorm.weight".into(), h));
        out.push(copy("head.ln.b".into(), "head.layernorm.bias".into(), h));
        out.push(transposed(
            "head.fc1.w".into(),
            "head.mlp.fc1.weight".into(),
            m,
        ));
        out.push(copy("head.fc1.b".into(), "head.mlp.fc1.bias".into(), m));
        out.push(transposed(
            "head.fc2.w".into(),
            "head.mlp.fc2.weight".into(),
            h,
        ));
        out.push(copy("head.fc2.b".into(), "head.mlp.fc2.bias".into(), h));
    }
    out
}

/// How a family's checkpoints name one encoder layer's tensors: the
/// layer prefix (before the index) and each module's name (before
/// `.weight` / `.bias`). The graph's names (`enc{i}.…`) are the same in
/// every family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LayerNames {
    /// Before the layer index: `encoder.layers.`.
    pub layer: &'static str,
    /// The LayerNorm before attention.
    pub ln1: &'static str,
    /// The query, key and value projections, in this order.
    pub qkv: [&'static str; 3],
    /// The attention's output projection.
    pub out: &'static str,
    /// The LayerNorm before the MLP.
    pub ln2: &'static str,
    /// The MLP's first linear layer.
    pub fc1: &'static str,
    /// The MLP's second linear layer.
    pub fc2: &'static str,
}

/// SigLIP's (and CLIP's) encoder layer names.
pub(crate) const SIGLIP_LAYER: LayerNames = LayerNames {
    layer: "encoder.layers.",
    ln1: "layer_norm1",
    qkv: ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
    out: "self_attn.out_proj",
    ln2: "layer_norm2",
    fc1: "mlp.fc1",
    fc2: "mlp.fc2",
};

/// The tensors of `layers` encoder layers of width `h` and MLP width `m`
/// named as `names` says, with their shapes, in a fixed order.
pub(crate) fn encoder_tensors(
    names: &LayerNames,
    layers: u32,
    h: u64,
    m: u64,
) -> Vec<(String, Vec<u64>)> {
    let mut out = Vec::new();
    for i in 0..layers {
        let l = |module: &str, kind: &str| format!("{}{i}.{module}.{kind}", names.layer);
        let mut add = |module: &str, weight: Vec<u64>, bias: u64| {
            out.push((l(module, "weight"), weight));
            out.push((l(module, "bias"), vec![bias]));
        };
        add(names.ln1, vec![h], h);
        for module in names.qkv {
            add(module, vec![h, h], h);
        }
        add(names.out, vec![h, h], h);
        add(names.ln2, vec![h], h);
        add(names.fc1, vec![m, h], m);
        add(names.fc2, vec![h, m], h);
    }
    out
}

/// A graph weight copied whole from one stored tensor of `rows` rows.
pub(crate) fn copy_source(weight: String, name: String, rows: u64) -> WeightSource {
    WeightSource {
        weight,
        pieces: vec![Piece {
            name,
            rows: 0..rows,
            divide_by_sqrt: None,
        }],
        layout: Layout::AsIs,
    }
}

/// A graph weight that is one stored `[out, in]` linear weight of `rows`
/// rows, transposed.
pub(crate) fn transposed_source(weight: String, name: String, rows: u64) -> WeightSource {
    WeightSource {
        layout: Layout::Transposed,
        ..copy_source(weight, name, rows)
    }
}

/// How the graph weights of `layers` encoder layers (`enc{i}.…`) are
/// assembled from tensors named as `names` says.
pub(crate) fn encoder_sources(
    names: &LayerNames,
    layers: u32,
    h: u64,
    m: u64,
    head_dim: u64,
) -> Vec<WeightSource> {
    let (copy, transposed) = (copy_source, transposed_source);
    let mut out = Vec::new();
    for i in 0..layers {
        let g = |s: &str| format!("enc{i}.{s}");
        let l = |module: &str, kind: &str| format!("{}{i}.{module}.{kind}", names.layer);
        // The query projection (the first module) carries the scores'
        // `1/√head_dim`: the graph's attention takes the scores as they are.
        let qkv = |kind: &str| {
            names
                .qkv
                .iter()
                .enumerate()
                .map(|(j, module)| Piece {
                    name: l(module, kind),
                    rows: 0..h,
                    divide_by_sqrt: (j == 0).then_some(head_dim),
                })
                .collect::<Vec<_>>()
        };
        out.push(copy(g("ln1.g"), l(names.ln1, "weight"), h));
        out.push(copy(g("ln1.b"), l(names.ln1, "bias"), h));
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
        out.push(transposed(g("out.w"), l(names.out, "weight"), h));
        out.push(copy(g("out.b"), l(names.out, "bias"), h));
        out.push(copy(g("ln2.g"), l(names.ln2, "weight"), h));
        out.push(copy(g("ln2.b"), l(names.ln2, "bias"), h));
        out.push(transposed(g("fc1.w"), l(names.fc1, "weight"), m));
        out.push(copy(g("fc1.b"), l(names.fc1, "bias"), m));
        out.push(transposed(g("fc2.w"), l(names.fc2, "weight"), h));
        out.push(copy(g("fc2.b"), l(names.fc2, "bias"), h));
    }
    out
}

/// Whether a stored tensor belongs to the text tower or the contrastive
/// logit parameters of a full `SiglipModel`, or is the position-id buffer
/// some converters save; the importer ignores these.
pub fn is_ignored(name: &str) -> bool {
    name.starts_with("text_model.")
        || name == "logit_scale"
        || name == "logit_bias"
        || name == "embeddings.position_ids"
        || name == "vision_model.embeddings.position_ids"
}
