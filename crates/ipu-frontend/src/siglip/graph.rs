//! The SigLIP vision graph, built from a [`VisionConfig`], a batch size and
//! a [`PrecisionPolicy`].
//!
//! This is the code form of the graph in `fixtures/siglip-so400m-b2.json`:
//! the same tensor names, declared in the same order, and the same ops, so
//! that the so400m config with the fixture's own policy builds exactly the
//! fixture's graph (a test checks it, and the same for
//! `fixtures/tiny-2l-h64.json`). Per image, with `T` tokens of patch
//! vectors of `P = 3·p²` elements (rounded up to a multiple of
//! [`PATCH_ALIGN`](crate::siglip::config::PATCH_ALIGN) with zeros),
//! hidden size `H`, MLP width `M`:
//!
//! ```text
//! patches [B,T,P] ─(cast)─ gemm embed.w [P,H] + embed.b ─ add pos [T,H] ─► x0
//! x{i} ─ layer_norm ─(cast)─ gemm qkv.w [H,3H] ─ slice q | k | v ─ attention
//!      ─(cast)─ gemm out.w ─ add x{i} ─► res ─ layer_norm ─(cast)─ gemm fc1.w [H,M]
//!      ─ gelu ─(cast)─ gemm fc2.w [M,H] ─ add res ─► x{i+1}        (repeated per layer)
//! x{L} ─ layer_norm post ─► last_hidden [B,T,H]                     (output)
//! head (when the config has one): probe [1,1,H] broadcast to [B,1,H] ─ gemm q.w;
//!      last_hidden ─(cast)─ gemm kv.w [H,2H] ─ slice k | v; attention with one query;
//!      ─(cast)─ gemm out.w ─► out; layer_norm ─(cast)─ fc1 ─ gelu ─(cast)─ fc2; add out
//!      ─ reshape ─► pooled [B,H]                                      (output)
//! ```
//!
//! `(cast)` is an FP8 cast that exists only when the policy gives the cast
//! tensor an FP8 precision. The encoder's queries carry the scores'
//! `1/√head_dim`, folded into `qkv.w` and `qkv.b` by the importer, so its
//! attention takes the scores as they are (`queries_scaled`). The encoder
//! layers form one [`Repeat`] whose carry is the hidden state `x{i}`.

use ipu_layout::Precision;

use crate::siglip::config::VisionConfig;
use crate::siglip::policy::PrecisionPolicy;
use ipu_package::graph::{
    Activation, AttentionMask, Carry, Graph, GraphBuilder, GraphError, Op, Repeat, TensorId,
    TensorKind,
};

/// Options of [`build_graph`].
#[derive(Clone, Debug, PartialEq)]
pub struct GraphOptions {
    /// The graph's name.
    pub name: String,
    /// Images per run.
    pub batch: u64,
    /// The precision of every tensor.
    pub policy: PrecisionPolicy,
}

/// Why the graph could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The batch is zero.
    #[error("the batch size is 0; it must be at least 1")]
    Batch,
    /// The policy gives no precision for a tensor.
    #[error(
        "the precision policy has no precision for tensor `{tensor}`; \
         add it with PrecisionPolicy::with_precision"
    )]
    NoPrecision {
        /// The tensor's name.
        tensor: String,
    },
    /// The policy gives a cast tensor a precision that is not FP8.
    #[error(
        "the precision policy gives cast tensor `{tensor}` precision {precision}, but a cast produces FP8"
    )]
    CastNotFp8 {
        /// The tensor's name.
        tensor: String,
        /// The precision given.
        precision: Precision,
    },
    /// An extent overflows with this batch.
    #[error("batch {batch} makes tensor extents overflow 64 bits")]
    TooLarge {
        /// The batch size.
        batch: u64,
    },
    /// The graph breaks a graph rule, which the policy's precisions can
    /// cause (for example an FP8 GEMM output).
    #[error("the SigLIP graph breaks a graph rule: {source}")]
    Graph {
        /// The rule broken.
        #[source]
        source: Box<GraphError>,
    },
}

/// Builds the SigLIP vision graph for `config` (see the module header).
pub fn build_graph(config: &VisionConfig, options: &GraphOptions) -> Result<Graph, BuildError> {
    let mut b = Builder::start(
        options,
        config.tokens(),
        config.hidden(),
        config.intermediate(),
    )?;
    let x0 = b.embed(config)?;
    let last = b.encoder(&EncoderShape::of(config), x0)?;
    let post_g = b.weight("post.g", vec![config.hidden()])?;
    let post_b = b.weight("post.b", vec![config.hidden()])?;
    let last_hidden = b.tensor("last_hidden", b.rows(config.hidden()), TensorKind::Output)?;
    b.g.op(Op::LayerNorm {
        input: last,
        scale: post_g,
        bias: post_b,
        eps: config.layer_norm_eps(),
        output: last_hidden,
    });
    if config.use_head() {
        b.head(config, last_hidden)?;
    }
    b.g.finish().map_err(|source| BuildError::Graph {
        source: Box::new(source),
    })
}

/// What the encoder layers of a tower need of its config.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct EncoderShape {
    /// The MLP activation (`hidden_act`).
    pub activation: Activation,
    /// Width of the MLP's hidden layer.
    pub intermediate: u64,
    /// Encoder layers.
    pub layers: u32,
    /// Attention heads.
    pub heads: u32,
    /// The LayerNorm epsilon.
    pub eps: f32,
    /// The self-attention's mask (causal in CLIP's text tower).
    pub mask: AttentionMask,
}

impl EncoderShape {
    fn of(config: &VisionConfig) -> Self {
        Self {
            activation: Activation::GeluTanh,
            intermediate: config.intermediate(),
            layers: config.layers(),
            heads: config.heads(),
            eps: config.layer_norm_eps(),
            mask: AttentionMask::None,
        }
    }
}

/// The graph under construction, with what every tower's part of it
/// shares: the policy and the `[batch, tokens, hidden]` rows.
pub(crate) struct Builder<'a> {
    pub(crate) g: GraphBuilder,
    pub(crate) policy: &'a PrecisionPolicy,
    pub(crate) batch: u64,
    pub(crate) tokens: u64,
    pub(crate) hidden: u64,
}

impl<'a> Builder<'a> {
    /// The builder of a graph of `options` whose rows are `tokens` of
    /// `hidden` per batch row, checked: the batch positive, and the widest
    /// activation, `[batch, tokens, max(3·hidden, intermediate)]`, within
    /// 64 bits (a config guarantees `3·hidden` fits).
    pub(crate) fn start(
        options: &'a GraphOptions,
        tokens: u64,
        hidden: u64,
        intermediate: u64,
    ) -> Result<Self, BuildError> {
        let batch = options.batch;
        if batch == 0 {
            return Err(BuildError::Batch);
        }
        let widest = (3 * hidden).max(intermediate);
        if batch
            .checked_mul(tokens)
            .and_then(|n| n.checked_mul(widest))
            .is_none()
        {
            return Err(BuildError::TooLarge { batch });
        }
        Ok(Self {
            g: GraphBuilder::new(options.name.clone()),
            policy: &options.policy,
            batch,
            tokens,
            hidden,
        })
    }

    /// `[batch, tokens, width]`.
    pub(crate) fn rows(&self, width: u64) -> Vec<u64> {
        vec![self.batch, self.tokens, width]
    }

    /// `[batch, 1, width]`: the head's single query row per image.
    fn row(&self, width: u64) -> Vec<u64> {
        vec![self.batch, 1, width]
    }

    pub(crate) fn precision(&self, name: &str) -> Result<Precision, BuildError> {
        self.policy
            .precision(name)
            .ok_or_else(|| BuildError::NoPrecision {
                tensor: name.to_owned(),
            })
    }

    /// A tensor in the policy's precision.
    pub(crate) fn tensor(
        &mut self,
        name: &str,
        shape: Vec<u64>,
        kind: TensorKind,
    ) -> Result<TensorId, BuildError> {
        let precision = self.precision(name)?;
        Ok(self.g.tensor(name, shape.as_slice(), precision, kind))
    }

    pub(crate) fn weight(&mut self, name: &str, shape: Vec<u64>) -> Result<TensorId, BuildError> {
        self.tensor(name, shape, TensorKind::Weight)
    }

    pub(crate) fn activation(
        &mut self,
        name: &str,
        shape: Vec<u64>,
    ) -> Result<TensorId, BuildError> {
        self.tensor(name, shape, TensorKind::Activation)
    }

    /// A tensor that must have `precision` (a view of another tensor).
    pub(crate) fn view(&mut self, name: &str, shape: Vec<u64>, precision: Precision) -> TensorId {
        self.g
            .tensor(name, shape.as_slice(), precision, TensorKind::Activation)
    }

    /// The FP8 cast tensor `name`, if the policy has one.
    pub(crate) fn cast(
        &mut self,
        name: &str,
        shape: Vec<u64>,
    ) -> Result<Option<TensorId>, BuildError> {
        match self.policy.precision(name) {
            None => Ok(None),
            Some(precision) if precision.is_fp8() => Ok(Some(self.g.tensor(
                name,
                shape.as_slice(),
                precision,
                TensorKind::Activation,
            ))),
            Some(precision) => Err(BuildError::CastNotFp8 {
                tensor: name.to_owned(),
                precision,
            }),
        }
    }

    /// Casts `input` into `cast` if there is one; the GEMM then reads the
    /// cast, else `input` itself.
    pub(crate) fn cast_op(&mut self, input: TensorId, cast: Option<TensorId>) -> TensorId {
        match cast {
            Some(output) => {
                self.g.op(Op::CastFp8 { input, output });
                output
            }
            None => input,
        }
    }

    pub(crate) fn gemm(
        &mut self,
        left: TensorId,
        right: TensorId,
        bias: TensorId,
        output: TensorId,
    ) {
        self.g.op(Op::Gemm {
            left,
            right,
            bias: Some(bias),
            output,
        });
    }

    /// A GEMM without a bias.
    pub(crate) fn gemm_unbiased(&mut self, left: TensorId, right: TensorId, output: TensorId) {
        self.g.op(Op::Gemm {
            left,
            right,
            bias: None,
            output,
        });
    }

    fn embed(&mut self, config: &VisionConfig) -> Result<TensorId, BuildError> {
        let (p, h) = (config.patch_width(), self.hidden);
        let patches = self.tensor("patches", self.rows(p), TensorKind::Input)?;
        let patches8 = self.cast("embed.patches8", self.rows(p))?;
        let w = self.weight("embed.w", vec![p, h])?;
        let bias = self.weight("embed.b", vec![h])?;
        let pos = self.weight("pos", vec![self.tokens, h])?;
        let y = self.activation("embed.y", self.rows(h))?;
        let x0 = self.activation("x0", self.rows(h))?;
        let left = self.cast_op(patches, patches8);
        self.gemm(left, w, bias, y);
        self.g.op(Op::Add {
            left: y,
            right: pos,
            output: x0,
        });
        Ok(x0)
    }

    /// The encoder layers as one repeat; returns the last hidden state.
    pub(crate) fn encoder(
        &mut self,
        config: &EncoderShape,
        x0: TensorId,
    ) -> Result<TensorId, BuildError> {
        let (h, m, eps) = (self.hidden, config.intermediate, config.eps);
        let first_op = self.g.next_op();
        let first_tensor = self.g.next_tensor();
        let mut x = x0;
        let mut per_iteration = (0, 0);
        for i in 0..config.layers {
            let start = (self.g.next_op(), self.g.next_tensor());
            let n = |suffix: &str| format!("enc{i}.{suffix}");
            let ln1_g = self.weight(&n("ln1.g"), vec![h])?;
            let ln1_b = self.weight(&n("ln1.b"), vec![h])?;
            let ln1_y = self.activation(&n("ln1.y"), self.rows(h))?;
            let ln1_y8 = self.cast(&n("ln1.y8"), self.rows(h))?;
            let qkv_w = self.weight(&n("qkv.w"), vec![h, 3 * h])?;
            let qkv_b = self.weight(&n("qkv.b"), vec![3 * h])?;
            let qkv = self.activation(&n("qkv"), self.rows(3 * h))?;
            let qkv_p = self.precision(&n("qkv"))?;
            let q = self.view(&n("q"), self.rows(h), qkv_p);
            let k = self.view(&n("k"), self.rows(h), qkv_p);
            let v = self.view(&n("v"), self.rows(h), qkv_p);
            let v8 = self.cast(&n("v8"), self.rows(h))?;
            let attn = self.activation(&n("attn"), self.rows(h))?;
            let attn8 = self.cast(&n("attn8"), self.rows(h))?;
            let out_w = self.weight(&n("out.w"), vec![h, h])?;
            let out_b = self.weight(&n("out.b"), vec![h])?;
            let out = self.activation(&n("out"), self.rows(h))?;
            let res = self.activation(&n("res"), self.rows(h))?;
            let ln2_g = self.weight(&n("ln2.g"), vec![h])?;
            let ln2_b = self.weight(&n("ln2.b"), vec![h])?;
            let ln2_y = self.activation(&n("ln2.y"), self.rows(h))?;
            let ln2_y8 = self.cast(&n("ln2.y8"), self.rows(h))?;
            let fc1_w = self.weight(&n("fc1.w"), vec![h, m])?;
            let fc1_b = self.weight(&n("fc1.b"), vec![m])?;
            let fc1 = self.activation(&n("fc1"), self.rows(m))?;
            let gelu = self.activation(&n("gelu"), self.rows(m))?;
            let gelu8 = self.cast(&n("gelu8"), self.rows(m))?;
            let fc2_w = self.weight(&n("fc2.w"), vec![m, h])?;
            let fc2_b = self.weight(&n("fc2.b"), vec![h])?;
            let fc2 = self.activation(&n("fc2"), self.rows(h))?;
            let next = self.activation(&format!("x{}", i + 1), self.rows(h))?;

            self.g.op(Op::LayerNorm {
                input: x,
                scale: ln1_g,
                bias: ln1_b,
                eps,
                output: ln1_y,
            });
            let left = self.cast_op(ln1_y, ln1_y8);
            self.gemm(left, qkv_w, qkv_b, qkv);
            for (start, output) in [(0, q), (h, k), (2 * h, v)] {
                self.g.op(Op::Slice {
                    input: qkv,
                    axis: 2,
                    start,
                    output,
                });
            }
            // FP8 values come with FP8 probabilities: the values' product
            // then runs at the AMP's FP8 rate.
            let values = self.cast_op(v, v8);
            self.g.op(Op::Attention {
                q,
                k,
                v: values,
                heads: config.heads,
                softmax: self.policy.softmax().with_fp8_values(v8.is_some()),
                mask: config.mask,
                // The importer folds `1/√head_dim` into the query
                // projection (`names::encoder_sources`), which saves the
                // softmax a multiply per vector of scores.
                queries_scaled: true,
                output: attn,
            });
            let left = self.cast_op(attn, attn8);
            self.gemm(left, out_w, out_b, out);
            self.g.op(Op::Add {
                left: x,
                right: out,
                output: res,
            });
            self.g.op(Op::LayerNorm {
                input: res,
                scale: ln2_g,
                bias: ln2_b,
                eps,
                output: ln2_y,
            });
            let left = self.cast_op(ln2_y, ln2_y8);
            self.gemm(left, fc1_w, fc1_b, fc1);
            self.g.op(Op::Activation {
                function: config.activation,
                input: fc1,
                output: gelu,
            });
            let left = self.cast_op(gelu, gelu8);
            self.gemm(left, fc2_w, fc2_b, fc2);
            self.g.op(Op::Add {
                left: res,
                right: fc2,
                output: next,
            });
            per_iteration = (
                self.g.next_op().as_u32() - start.0.as_u32(),
                self.g.next_tensor().as_u32() - start.1.as_u32(),
            );
            x = next;
        }
        let (ops, tensors) = per_iteration;
        self.g.repeat(
            Repeat::new(
                "encoder",
                config.layers,
                first_op,
                ops,
                first_tensor,
                tensors,
            )
            .with_carries(vec![Carry {
                initial: x0,
                // The next hidden state is the last tensor of the body.
                body_tensor: tensors - 1,
            }]),
        );
        Ok(x)
    }

    fn head(&mut self, config: &VisionConfig, last_hidden: TensorId) -> Result<(), BuildError> {
        let (h, m, eps) = (self.hidden, config.intermediate(), config.layer_norm_eps());
        let probe = self.weight("head.probe", vec![1, 1, h])?;
        let probe_p = self.precision("head.probe")?;
        let probes = self.view("head.probes", self.row(h), probe_p);
        let q_w = self.weight("head.q.w", vec![h, h])?;
        let q_b = self.weight("head.q.b", vec![h])?;
        let q = self.activation("head.q", self.row(h))?;
        let x8 = self.cast("head.x8", self.rows(h))?;
        let kv_w = self.weight("head.kv.w", vec![h, 2 * h])?;
        let kv_b = self.weight("head.kv.b", vec![2 * h])?;
        let kv = self.activation("head.kv", self.rows(2 * h))?;
        let kv_p = self.precision("head.kv")?;
        let k = self.view("head.k", self.rows(h), kv_p);
        let v = self.view("head.v", self.rows(h), kv_p);
        let attn = self.activation("head.attn", self.row(h))?;
        let attn8 = self.cast("head.attn8", self.row(h))?;
        let out_w = self.weight("head.out.w", vec![h, h])?;
        let out_b = self.weight("head.out.b", vec![h])?;
        let out = self.activation("head.out", self.row(h))?;
        let ln_g = self.weight("head.ln.g", vec![h])?;
        let ln_b = self.weight("head.ln.b", vec![h])?;
        let ln_y = self.activation("head.ln.y", self.row(h))?;
        let ln_y8 = self.cast("head.ln.y8", self.row(h))?;
        let fc1_w = self.weight("head.fc1.w", vec![h, m])?;
        let fc1_b = self.weight("head.fc1.b", vec![m])?;
        let fc1 = self.activation("head.fc1", self.row(m))?;
        let gelu = self.activation("head.gelu", self.row(m))?;
        let gelu8 = self.cast("head.gelu8", self.row(m))?;
        let fc2_w = self.weight("head.fc2.w", vec![m, h])?;
        let fc2_b = self.weight("head.fc2.b", vec![h])?;
        let fc2 = self.activation("head.fc2", self.row(h))?;
        let sum = self.activation("head.sum", self.row(h))?;
        let sum_p = self.precision("head.sum")?;
        let pooled = self
            .g
            .tensor("pooled", [self.batch, h], sum_p, TensorKind::Output);

        self.g.op(Op::Broadcast {
            input: probe,
            output: probes,
        });
        self.gemm(probes, q_w, q_b, q);
        let left = self.cast_op(last_hidden, x8);
        self.gemm(left, kv_w, kv_b, kv);
        for (start, output) in [(0, k), (h, v)] {
            self.g.op(Op::Slice {
                input: kv,
                axis: 2,
                start,
                output,
            });
        }
        self.g.op(Op::Attention {
            q,
            k,
            v,
            heads: config.heads(),
            softmax: self.policy.softmax(),
            mask: AttentionMask::None,
            // Few query rows, on the vector unit: its cost does not
            // depend on the scale.
            queries_scaled: false,
            output: attn,
        });
        let left = self.cast_op(attn, attn8);
        self.gemm(left, out_w, out_b, out);
        self.g.op(Op::LayerNorm {
            input: out,
            scale: ln_g,
            bias: ln_b,
            eps,
            output: ln_y,
        });
        let left = self.cast_op(ln_y, ln_y8);
        self.gemm(left, fc1_w, fc1_b, fc1);
        self.g.op(Op::Activation {
            function: Activation::GeluTanh,
            input: fc1,
            output: gelu,
        });
        let left = self.cast_op(gelu, gelu8);
        self.gemm(left, fc2_w, fc2_b, fc2);
        self.g.op(Op::Add {
            left: out,
            right: fc2,
            output: sum,
        });
        self.g.op(Op::Reshape {
            input: sum,
            output: pooled,
        });
        Ok(())
    }
}
