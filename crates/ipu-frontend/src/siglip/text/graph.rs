//! The SigLIP text graph, built from a [`TextConfig`], a batch (texts per
//! run) and a [`PrecisionPolicy`].
//!
//! transformers' `SiglipTextModel`: token embeddings plus position
//! embeddings, the same pre-LayerNorm encoder as the vision tower (GELU
//! tanh, attention over every position, no mask), a final LayerNorm, and
//! the head, a linear layer on the last position's hidden state (which
//! may be padding: SigLIP pads every text to the sequence length). Per
//! text, with `S` positions, hidden size `H`, projection `P`:
//!
//! ```text
//! input_ids [B,S] (F32 token ids) ─ gather tok [V,H] ─ add pos [S,H] ─► x0
//! x{i} ─ encoder layer (the vision tower's) ─► x{i+1}           (repeated per layer)
//! x{L} ─ layer_norm post ─► last_hidden [B,S,H]                  (output)
//! last_hidden ─ slice position S−1 ─► [B,1,H] ─(cast)─ gemm head.w [H,P] + head.b
//!      ─► head.y [B,1,P] ─ reshape ─► pooled [B,P]                (output)
//! ```
//!
//! The graph names follow the vision graph's (`enc{i}.…`, `pos`, `post.g`,
//! `x{i}`), so the two towers share precision roles and the encoder
//! builder; `(cast)` exists only when the policy gives `head.x8` an FP8
//! precision.
//!
//! CLIP's text tower (`CLIPTextModel`, [`TextFamily::Clip`]) has the same
//! embeddings and final LayerNorm around causal attention and quick GELU,
//! and pools at the end-of-text token, whose row the host supplies
//! (`clip.rs`):
//!
//! ```text
//! pool_rows [B] (F32 row b·S + position) ─ gather last_hidden ─► pooled [B,H]  (output)
//! pooled ─(cast head.x8)─ gemm head.w [H,P] (no bias) ─► text_embeds [B,P]    (output,
//!                                                        when projected)
//! ```

use ipu_layout::Precision;
use ipu_package::graph::{Activation, AttentionMask, Graph, Op, TensorId, TensorKind};

use crate::siglip::graph::{BuildError, Builder, EncoderShape, GraphOptions};
use crate::siglip::text::{TextConfig, TextFamily};

/// The graph's token-id input.
pub const INPUT_IDS: &str = "input_ids";

/// A CLIP text graph's input of pooled rows: per text, `b · S + p` with
/// `p` its end-of-text position.
pub const POOL_ROWS: &str = "pool_rows";

/// A projected CLIP text graph's embedding output.
pub const TEXT_EMBEDS: &str = "text_embeds";

/// Builds the SigLIP text graph for `config` (see the module header).
pub fn build_text_graph(config: &TextConfig, options: &GraphOptions) -> Result<Graph, BuildError> {
    let mut b = Builder::start(
        options,
        config.positions(),
        config.hidden(),
        config.intermediate(),
    )?;
    let batch = b.batch;
    let (s, h) = (config.positions(), config.hidden());
    // Token ids are row numbers, exact in F32 whatever the policy.
    let ids =
        b.g.tensor(INPUT_IDS, [batch, s], Precision::F32, TensorKind::Input);
    let tok = b.weight("tok", vec![config.vocab(), h])?;
    let tok_y = b.activation("tok.y", b.rows(h))?;
    let pos = b.weight("pos", vec![s, h])?;
    let x0 = b.activation("x0", b.rows(h))?;
    b.g.op(Op::Gather {
        table: tok,
        indices: ids,
        output: tok_y,
    });
    b.g.op(Op::Add {
        left: tok_y,
        right: pos,
        output: x0,
    });
    let (activation, mask) = match config.family() {
        TextFamily::Siglip => (Activation::GeluTanh, AttentionMask::None),
        TextFamily::Clip { .. } => (Activation::QuickGelu, AttentionMask::Causal),
    };
    let shape = EncoderShape {
        activation,
        intermediate: config.intermediate(),
        layers: config.layers(),
        heads: config.heads(),
        eps: config.layer_norm_eps(),
        mask,
    };
    let last = b.encoder(&shape, x0)?;
    let post_g = b.weight("post.g", vec![h])?;
    let post_b = b.weight("post.b", vec![h])?;
    let last_hidden = b.tensor("last_hidden", b.rows(h), TensorKind::Output)?;
    b.g.op(Op::LayerNorm {
        input: last,
        scale: post_g,
        bias: post_b,
        eps: config.layer_norm_eps(),
        output: last_hidden,
    });
    match config.family() {
        TextFamily::Siglip => siglip_head(&mut b, config, last_hidden)?,
        TextFamily::Clip { projected } => clip_pooling(&mut b, config, last_hidden, projected)?,
    }
    b.g.finish().map_err(|source| BuildError::Graph {
        source: Box::new(source),
    })
}

/// SigLIP's head on the last position (module header).
fn siglip_head(
    b: &mut Builder<'_>,
    config: &TextConfig,
    last_hidden: TensorId,
) -> Result<(), BuildError> {
    let batch = b.batch;
    let (s, h, p) = (config.positions(), config.hidden(), config.projection());
    let last_p = b.precision("last_hidden")?;
    let row = |w: u64| vec![batch, 1, w];
    let last_row = b.view("head.last", row(h), last_p);
    let x8 = b.cast("head.x8", row(h))?;
    let head_w = b.weight("head.w", vec![h, p])?;
    let head_b = b.weight("head.b", vec![p])?;
    let head_y = b.activation("head.y", row(p))?;
    let y_p = b.precision("head.y")?;
    let pooled = b.g.tensor("pooled", [batch, p], y_p, TensorKind::Output);
    b.g.op(Op::Slice {
        input: last_hidden,
        axis: 1,
        start: s - 1,
        output: last_row,
    });
    let left = b.cast_op(last_row, x8);
    b.gemm(left, head_w, head_b, head_y);
    // The reshape comes last, on the head's result: the GEMM reads the
    // slice in place, and the reshape of a buffer costs no copy.
    b.g.op(Op::Reshape {
        input: head_y,
        output: pooled,
    });
    Ok(())
}

/// CLIP's pooling at the end-of-text rows the host supplies, and the
/// projection when the checkpoint has one (module header).
fn clip_pooling(
    b: &mut Builder<'_>,
    config: &TextConfig,
    last_hidden: TensorId,
    projected: bool,
) -> Result<(), BuildError> {
    let batch = b.batch;
    let (h, p) = (config.hidden(), config.projection());
    let last_p = b.precision("last_hidden")?;
    // Row numbers of the `[B, S, H]` hidden states as a table of `B·S`
    // rows, exact in F32 (at most 2^24 rows is the gather's own check).
    let pool_rows = b.g.tensor(
        POOL_ROWS,
        [batch],
        ipu_layout::Precision::F32,
        TensorKind::Input,
    );
    let pooled = b.g.tensor("pooled", [batch, h], last_p, TensorKind::Output);
    b.g.op(Op::Gather {
        table: last_hidden,
        indices: pool_rows,
        output: pooled,
    });
    if projected {
        let x8 = b.cast("head.x8", vec![batch, h])?;
        let head_w = b.weight("head.w", vec![h, p])?;
        let y_p = b.precision(TEXT_EMBEDS)?;
        let embeds = b.g.tensor(TEXT_EMBEDS, [batch, p], y_p, TensorKind::Output);
        let left = b.cast_op(pooled, x8);
        b.gemm_unbiased(left, head_w, embeds);
    }
    Ok(())
}
