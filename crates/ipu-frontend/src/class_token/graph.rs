//! The graph of a ViT, CLIP vision or DINOv2 tower, built from a
//! [`ClassTokenConfig`], a batch and a [`PrecisionPolicy`], with SigLIP's
//! encoder builder and tensor names (so a SigLIP precision template
//! applies, [`template`]). Per image, with `T` patches, hidden size `H`:
//!
//! ```text
//! patches [B,1+T,P] ─(cast)─ gemm embed.w [P,H] (no bias) ─► embed.y; add pos [1+T,H] ─► x0
//! CLIP: the sum is embed.x ─ layer_norm pre ─► x0
//! x{i} ─ encoder layer (SigLIP's, with the family's activation) ─► x{i+1}   (per layer)
//! ViT:  x{L} ─ layer_norm post ─► last_hidden [B,1+T,H]                          (output)
//!       last_hidden ─ slice token 0 ─(cast)─ gemm pool.w + pool.b ─ tanh ─ reshape ─► pooled
//! DINOv2: x{L} ─ layer_norm post ─► last_hidden; slice token 0 ─ reshape ─► pooled (outputs)
//! CLIP: x{L} ─ reshape ─► last_hidden (transformers' is before post_layernorm)   (output)
//!       last_hidden ─ slice token 0 ─ layer_norm post ─► post.y ─ reshape ─► pooled  (output)
//!       post.y ─(cast)─ gemm proj.w (no bias) ─ reshape ─► image_embeds               (output)
//! ```
//!
//! Row 0 of every image's `patches` is zeros: the class token's place
//! (`class_token` module header). The encoder's activation op keeps the
//! name `enc{i}.gelu` whatever the activation, so precision roles are
//! the same in every family.

use ipu_layout::Precision;
use ipu_package::graph::{Activation, Graph, Op, TensorId, TensorKind};

use crate::class_token::config::{ClassTokenConfig, Family};
use crate::class_token::{IMAGE_EMBEDS, LAST_HIDDEN, PATCHES, POOLED};
use crate::siglip::graph::{BuildError, Builder, EncoderShape, GraphOptions};
use crate::siglip::policy::PrecisionPolicy;

/// Builds the graph of `config` (see the module header).
pub fn build_graph(config: &ClassTokenConfig, options: &GraphOptions) -> Result<Graph, BuildError> {
    let mut b = Builder::start(
        options,
        config.tokens(),
        config.hidden(),
        config.intermediate(),
    )?;
    // The encoder's first carry is `x0` in both families (the fixture
    // writer names a repeat's carries by iteration); CLIP's embedding sum
    // before its pre-LayerNorm is `embed.x`.
    let x0 = match config.family() {
        Family::Vit | Family::Dinov2 => embed(&mut b, config, "x0")?,
        Family::Clip => {
            let sum = embed(&mut b, config, "embed.x")?;
            let rows = b.rows(config.hidden());
            layer_norm(&mut b, ("pre", "x0"), sum, rows, config)?
        }
    };
    let shape = EncoderShape {
        activation: config.activation(),
        intermediate: config.intermediate(),
        layers: config.layers(),
        heads: config.heads(),
        eps: config.layer_norm_eps(),
        mask: ipu_package::graph::AttentionMask::None,
    };
    let last = b.encoder(&shape, x0)?;
    match config.family() {
        Family::Vit => vit_outputs(&mut b, config, last)?,
        Family::Clip => clip_outputs(&mut b, config, last)?,
        Family::Dinov2 => {
            let last_hidden = final_layer_norm(&mut b, config, last)?;
            let precision = b.precision(LAST_HIDDEN)?;
            let cls = class_row(&mut b, last_hidden, precision);
            flat_output(&mut b, POOLED, (cls, LAST_HIDDEN), config.hidden())?;
        }
    }
    b.g.finish().map_err(|source| BuildError::Graph {
        source: Box::new(source),
    })
}

/// The patch embedding with the class token folded into the position
/// table: `output = patches · embed.w + pos`.
fn embed(
    b: &mut Builder<'_>,
    config: &ClassTokenConfig,
    output: &str,
) -> Result<TensorId, BuildError> {
    let (p, h) = (config.patch_width(), config.hidden());
    let patches = b.tensor(PATCHES, b.rows(p), TensorKind::Input)?;
    let patches8 = b.cast("embed.patches8", b.rows(p))?;
    let w = b.weight("embed.w", vec![p, h])?;
    let pos = b.weight("pos", vec![config.tokens(), h])?;
    let y = b.activation("embed.y", b.rows(h))?;
    let sum = b.activation(output, b.rows(h))?;
    let left = b.cast_op(patches, patches8);
    b.gemm_unbiased(left, w, y);
    b.g.op(Op::Add {
        left: y,
        right: pos,
        output: sum,
    });
    Ok(sum)
}

/// `output = layer_norm(input; name.g, name.b)`, `input` of `shape`.
fn layer_norm(
    b: &mut Builder<'_>,
    (name, output): (&str, &str),
    input: TensorId,
    shape: Vec<u64>,
    config: &ClassTokenConfig,
) -> Result<TensorId, BuildError> {
    let h = config.hidden();
    let g = b.weight(&format!("{name}.g"), vec![h])?;
    let bias = b.weight(&format!("{name}.b"), vec![h])?;
    let y = b.activation(output, shape)?;
    b.g.op(Op::LayerNorm {
        input,
        scale: g,
        bias,
        eps: config.layer_norm_eps(),
        output: y,
    });
    Ok(y)
}

/// The class token's row of `input` (`[B,1,H]`, a view of `input`'s
/// `precision`).
fn class_row(b: &mut Builder<'_>, input: TensorId, precision: Precision) -> TensorId {
    let shape = vec![b.batch, 1, b.hidden];
    let row = b.view("cls.row", shape, precision);
    b.g.op(Op::Slice {
        input,
        axis: 1,
        start: 0,
        output: row,
    });
    row
}

/// `[B,1,W]` `input` (tensor `from` of the policy) as the `[B,W]` output
/// `name`.
fn flat_output(
    b: &mut Builder<'_>,
    name: &str,
    (input, from): (TensorId, &str),
    width: u64,
) -> Result<(), BuildError> {
    let precision = b.precision(from)?;
    let output =
        b.g.tensor(name, [b.batch, width], precision, TensorKind::Output);
    b.g.op(Op::Reshape { input, output });
    Ok(())
}

/// ViT's and DINOv2's `last_hidden`: the final LayerNorm of the encoder's
/// output.
fn final_layer_norm(
    b: &mut Builder<'_>,
    config: &ClassTokenConfig,
    last: TensorId,
) -> Result<TensorId, BuildError> {
    let h = config.hidden();
    let post_g = b.weight("post.g", vec![h])?;
    let post_b = b.weight("post.b", vec![h])?;
    let last_hidden = b.tensor(LAST_HIDDEN, b.rows(h), TensorKind::Output)?;
    b.g.op(Op::LayerNorm {
        input: last,
        scale: post_g,
        bias: post_b,
        eps: config.layer_norm_eps(),
        output: last_hidden,
    });
    Ok(last_hidden)
}

fn vit_outputs(
    b: &mut Builder<'_>,
    config: &ClassTokenConfig,
    last: TensorId,
) -> Result<(), BuildError> {
    let h = config.hidden();
    let last_hidden = final_layer_norm(b, config, last)?;
    let Some(width) = config.pooler() else {
        return Ok(());
    };
    let batch = b.batch;
    let row = |w: u64| vec![batch, 1, w];
    let precision = b.precision(LAST_HIDDEN)?;
    let cls = class_row(b, last_hidden, precision);
    let x8 = b.cast("pool.x8", row(h))?;
    let w = b.weight("pool.w", vec![h, width])?;
    let bias = b.weight("pool.b", vec![width])?;
    let y = b.activation("pool.y", row(width))?;
    let t = b.activation("pool.tanh", row(width))?;
    let left = b.cast_op(cls, x8);
    b.gemm(left, w, bias, y);
    b.g.op(Op::Activation {
        function: Activation::Tanh,
        input: y,
        output: t,
    });
    flat_output(b, POOLED, (t, "pool.tanh"), width)?;
    Ok(())
}

fn clip_outputs(
    b: &mut Builder<'_>,
    config: &ClassTokenConfig,
    last: TensorId,
) -> Result<(), BuildError> {
    let h = config.hidden();
    // transformers' last_hidden_state is the encoder's output itself.
    let precision = b.precision(&format!("x{}", config.layers()))?;
    let rows = b.rows(h);
    let last_hidden =
        b.g.tensor(LAST_HIDDEN, rows.as_slice(), precision, TensorKind::Output);
    b.g.op(Op::Reshape {
        input: last,
        output: last_hidden,
    });
    let cls = class_row(b, last_hidden, precision);
    let shape = vec![b.batch, 1, h];
    let post = layer_norm(b, ("post", "post.y"), cls, shape, config)?;
    flat_output(b, POOLED, (post, "post.y"), h)?;
    if let Some(d) = config.projection() {
        let batch = b.batch;
        let row = |w: u64| vec![batch, 1, w];
        let x8 = b.cast("proj.x8", row(h))?;
        let w = b.weight("proj.w", vec![h, d])?;
        let y = b.activation("proj.y", row(d))?;
        let left = b.cast_op(post, x8);
        b.gemm_unbiased(left, w, y);
        flat_output(b, IMAGE_EMBEDS, (y, "proj.y"), d)?;
    }
    Ok(())
}

/// The precisions of the class-token graphs' own tensors added to a SigLIP
/// template (the default fixture's): `pre.*` like `post.*`, the pooler
/// and the projection like the SigLIP head's first GEMM (FP8 weights, an
/// FP8 cast before, F16 results), the tanh like the GELU.
pub fn template(siglip: PrecisionPolicy) -> PrecisionPolicy {
    use ipu_layout::Fp8Format;
    let fp8 = Precision::F8 {
        format: Fp8Format::F143,
        scale: 0,
    };
    let like = |name: &str, fallback: Precision| siglip.precision(name).unwrap_or(fallback);
    let activation = like("x0", Precision::F16);
    let cast = like("enc{i}.ln1.y8", fp8);
    let weight = like("enc{i}.fc1.w", fp8);
    let bias = like("enc{i}.fc1.b", fp8);
    let gelu = like("enc{i}.gelu", activation);
    siglip
        .clone()
        .with_precision("pre.g", like("post.g", fp8))
        .with_precision("pre.b", like("post.b", fp8))
        .with_precision("embed.x", activation)
        .with_precision("post.y", activation)
        .with_precision("pool.x8", cast)
        .with_precision("pool.w", weight)
        .with_precision("pool.b", bias)
        .with_precision("pool.y", activation)
        .with_precision("pool.tanh", gelu)
        .with_precision("proj.x8", cast)
        .with_precision("proj.w", weight)
        .with_precision("proj.y", activation)
}
