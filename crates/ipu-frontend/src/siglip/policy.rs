//! Which precision each tensor of a SigLIP graph gets: a
//! [`PrecisionPolicy`], handed to the graph builder.
//!
//! Two kinds of policy exist:
//!
//! - [`PrecisionPolicy::all_f32`]: every tensor F32, softmax in F32, and no
//!   FP8 casts at all (each GEMM reads its activation directly). This is
//!   the graph that equals transformers' model to float rounding.
//! - [`PrecisionPolicy::from_graph`]: the precisions of a SigLIP graph
//!   built from the same template, such as the default fixture
//!   `fixtures/siglip-so400m-b2.json` (FP8 weights with their scales, F16
//!   activations, an FP8 cast before every GEMM, F16 softmax). A tensor
//!   takes the precision of the template tensor with the same name, or, if
//!   the template has none (a model with more layers), of its role: the
//!   name with the layer index replaced by `{i}` (`enc30.fc1.w` →
//!   `enc{i}.fc1.w`, `x31` → `x{i}`), when every layer of the template
//!   agrees on it. [`PrecisionPolicy::with_precision`] overrides a tensor
//!   or a role, which is how chosen FP8 scales are applied. The encoder
//!   layers are one repeat, and a repeat's iterations must agree on every
//!   precision, so encoder tensors take overrides by role
//!   (`enc{i}.fc1.w`); an override of one layer's tensor makes the graph
//!   invalid.
//!
//! The cast tensors (`embed.patches8`, `enc{i}.ln1.y8`, `enc{i}.v8` (the
//! attention's values), `enc{i}.attn8`,
//! `enc{i}.ln2.y8`, `enc{i}.gelu8`, `head.x8`, `head.attn8`,
//! `head.ln.y8`, `head.gelu8`, and the class-token families' `pool.x8`
//! and `proj.x8`) exist only where the policy gives them an FP8
//! precision.

use std::collections::BTreeMap;

use ipu_layout::Precision;

use ipu_package::graph::{Graph, Op, SoftmaxPrecision};

/// The precision of every tensor of a SigLIP graph (see the module
/// header).
#[derive(Clone, Debug, PartialEq)]
pub struct PrecisionPolicy {
    /// `None`: every tensor F32 and no casts.
    table: Option<Table>,
    /// Per-tensor overrides, consulted first.
    overrides: BTreeMap<String, Precision>,
    /// Cast roles removed: their GEMMs read the F16 (or F32) activation.
    uncast: std::collections::BTreeSet<String>,
    softmax: SoftmaxPrecision,
}

#[derive(Clone, Debug, PartialEq)]
struct Table {
    by_name: BTreeMap<String, Precision>,
    /// Roles whose template tensors all agree; `None` marks a role with
    /// conflicting precisions, which a name must then resolve.
    by_role: BTreeMap<String, Option<Precision>>,
}

/// Why a template graph cannot serve as a policy.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The template has no attention op to take the softmax precision from.
    #[error("graph `{graph}` has no attention op, so it cannot give a SigLIP precision policy")]
    NoAttention {
        /// The template's name.
        graph: String,
    },
    /// The template's attention ops disagree on the softmax precision.
    #[error(
        "graph `{graph}` computes softmax in both F16 and F32; a SigLIP policy needs one softmax precision"
    )]
    Softmax {
        /// The template's name.
        graph: String,
    },
}

impl PrecisionPolicy {
    /// Every tensor F32, no FP8 casts, softmax in F32.
    pub fn all_f32() -> Self {
        Self {
            table: None,
            overrides: BTreeMap::new(),
            uncast: Default::default(),
            softmax: SoftmaxPrecision::F32,
        }
    }

    /// The precisions of `template`, a SigLIP graph such as the default
    /// fixture (see the module header).
    pub fn from_graph(template: &Graph) -> Result<Self, PolicyError> {
        let mut softmax = None;
        for op in template.ops().values() {
            // An F16-FP8 softmax is the F16 one with FP8 values, which
            // the values' cast gives.
            if let Op::Attention { softmax: s, .. } = op {
                let s = &s.with_fp8_values(false);
                match softmax {
                    None => softmax = Some(*s),
                    Some(first) if first != *s => {
                        return Err(PolicyError::Softmax {
                            graph: template.name().to_owned(),
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        let softmax = softmax.ok_or_else(|| PolicyError::NoAttention {
            graph: template.name().to_owned(),
        })?;
        let mut by_name = BTreeMap::new();
        let mut by_role: BTreeMap<String, Option<Precision>> = BTreeMap::new();
        for tensor in template.tensors().values() {
            let precision = tensor.precision();
            by_name.insert(tensor.name().to_owned(), precision);
            by_role
                .entry(role(tensor.name()))
                .and_modify(|p| {
                    if *p != Some(precision) {
                        *p = None;
                    }
                })
                .or_insert(Some(precision));
        }
        Ok(Self {
            table: Some(Table { by_name, by_role }),
            overrides: BTreeMap::new(),
            uncast: Default::default(),
            softmax,
        })
    }

    /// The policy of a precision table by role (as the precision
    /// report lists it): a tensor takes its role's precision
    /// (its name, for tensors outside the encoder). A cast tensor exists
    /// only where its role is listed.
    pub fn from_roles(roles: BTreeMap<String, Precision>, softmax: SoftmaxPrecision) -> Self {
        Self {
            table: Some(Table {
                by_name: BTreeMap::new(),
                by_role: roles.into_iter().map(|(r, p)| (r, Some(p))).collect(),
            }),
            overrides: BTreeMap::new(),
            uncast: Default::default(),
            softmax,
        }
    }

    /// The same policy without the FP8 casts of the cast roles `roles`
    /// (`enc{i}.ln1.y8`, `head.x8`, …): their GEMMs read F16 activations
    /// against FP8 weights, which the AMP widens to F16 (half the FP8
    /// rate, and no activation rounding to FP8). Roles that are not casts
    /// are ignored.
    pub fn without_casts<'a>(mut self, roles: impl IntoIterator<Item = &'a str>) -> Self {
        self.uncast
            .extend(roles.into_iter().filter(|r| is_cast(r)).map(str::to_owned));
        self
    }

    /// The same policy with every weight of `graph` (a graph built with
    /// this policy) in F16 and no FP8 cast: an all-F16 model, for when
    /// FP8's rounding costs more accuracy than the use allows (zero-shot
    /// probabilities of a model with a large logit scale) and the weights
    /// fit twice over.
    pub fn all_f16(self, graph: &Graph) -> Self {
        let mut policy = self.without_casts(CAST_ROLES.iter().copied());
        for w in graph.weights() {
            policy = policy.with_precision(role(graph.tensor(w).name()), Precision::F16);
        }
        policy
    }

    /// The same policy with the encoder attention's values cast to FP8
    /// (F143; calibration chooses the scale, and may raise it to F16 like
    /// any cast), which makes the encoder's softmax F16-FP8: the values'
    /// product then runs at the AMP's FP8 rate.
    pub fn with_fp8_attention_values(self) -> Self {
        self.with_precision(
            FP8_VALUES_ROLE,
            Precision::F8 {
                format: ipu_layout::Fp8Format::F143,
                scale: 0,
            },
        )
    }

    /// Every cast role, as the templates name them.
    pub fn cast_roles() -> &'static [&'static str] {
        CAST_ROLES
    }

    /// The same policy with `tensor` in `precision`: a graph tensor name
    /// (`head.fc1.w`) or a role (`enc{i}.fc1.w`, every encoder layer's).
    pub fn with_precision(mut self, tensor: impl Into<String>, precision: Precision) -> Self {
        self.overrides.insert(tensor.into(), precision);
        self
    }

    /// The precision attention softmaxes are computed in.
    pub fn softmax(&self) -> SoftmaxPrecision {
        self.softmax
    }

    /// The precision of the tensor called `name`: an override of it or of
    /// its role, else the template's tensor of that name, else its role's.
    /// Under [`PrecisionPolicy::all_f32`], F32 for every tensor except the
    /// cast tensors, which do not exist (`None`).
    pub fn precision(&self, name: &str) -> Option<Precision> {
        if self.uncast.contains(&role(name)) {
            return None;
        }
        if let Some(&p) = self
            .overrides
            .get(name)
            .or_else(|| self.overrides.get(&role(name)))
        {
            return Some(p);
        }
        match &self.table {
            None => (!is_cast(name)).then_some(Precision::F32),
            Some(table) => table
                .by_name
                .get(name)
                .copied()
                .or_else(|| table.by_role.get(&role(name)).copied().flatten()),
        }
    }
}

/// The roles of the FP8 cast tensors before GEMMs.
const CAST_ROLES: &[&str] = &[
    "embed.patches8",
    "enc{i}.ln1.y8",
    "enc{i}.attn8",
    FP8_VALUES_ROLE,
    "enc{i}.ln2.y8",
    "enc{i}.gelu8",
    "head.x8",
    "head.attn8",
    "head.ln.y8",
    "head.gelu8",
    // ViT's pooler and CLIP's projection (`class_token`).
    "pool.x8",
    "proj.x8",
];

/// The cast role of the encoder attention's values: FP8 values and
/// probabilities make its values' product an FP8 GEMM
/// (`SoftmaxPrecision::F16Fp8`).
const FP8_VALUES_ROLE: &str = "enc{i}.v8";

/// Whether `name` is one of the FP8 cast tensors before a GEMM.
fn is_cast(name: &str) -> bool {
    CAST_ROLES.contains(&role(name).as_str())
}

/// The name with its layer index replaced by `{i}`: `enc12.fc1.w` →
/// `enc{i}.fc1.w`, `x3` → `x{i}`; other names are their own role.
pub fn role(name: &str) -> String {
    let digits_then = |rest: &str| {
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        (end > 0).then(|| rest[end..].to_owned())
    };
    if let Some(rest) = name.strip_prefix("enc")
        && let Some(tail) = digits_then(rest)
        && tail.starts_with('.')
    {
        return format!("enc{{i}}{tail}");
    }
    if let Some(rest) = name.strip_prefix('x')
        && digits_then(rest).is_some_and(|tail| tail.is_empty())
    {
        return "x{i}".to_owned();
    }
    name.to_owned()
}
