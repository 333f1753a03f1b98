//! The fidelity target: GEMM operands raised from FP8 to F16, by
//! measurement, until every output of the calibration inputs is close
//! enough to the F32 graph's.
//!
//! FP8 (F143) keeps three mantissa bits: a weight or activation rounds by
//! up to 1/16 of its magnitude. Through a whole encoder that leaves the
//! pooled embedding near a cosine of 0.995 with the F32 model, sometimes
//! above and sometimes below (`docs/MODELS.md`), and the scales cannot
//! move it: with a power-of-two scale the grid of normal values is the
//! same relative grid at any scale. What does move it is F16 for some
//! GEMM operands. So when the package's precisions miss the target on the
//! calibration inputs, calibration raises operand roles to F16:
//!
//! ```text
//! smallest per-input output cosine ≥ target? ── yes ──► done (no run beyond the one measured)
//!   no: each candidate alone, on the worst input ──► its cosine
//!       every candidate, best alone first ──► the shortest prefix that
//!       meets the target, by bisection, measured on every input
//! ```
//!
//! A candidate is an FP8 cast role (removed: the GEMM reads the F16
//! activation against FP8 weights, which the AMP widens) or a GEMM weight
//! role (stored in F16, twice its FP8 bytes, with the FP8 left operands
//! of its GEMMs in F16 too: the AMP has no FP8-activation, F16-weight
//! product).
//! Either halves the AMP's rate on its GEMMs, so the search stops as soon
//! as the target is met. The F16 groups that their own test left in FP8
//! (biases, layer-norm parameters, the position table: each gained too
//! little alone) are candidates too, so that raising every candidate
//! gives the all-F16 graph. When no set of raised
//! roles meets it, every candidate is kept if that gains at all, and the
//! report says the target was missed. For `n` candidates that is `n` runs
//! of one input and `1 + ⌈log2 n⌉` of all; none when the target is met to
//! begin with.
//!
//! The measurement is the smallest cosine, over the calibration inputs
//! and the graph's outputs, between one input's output and the F32
//! graph's: the per-image cosine of a pooled embedding, the whole-tensor
//! cosine of `last_hidden`.

use std::collections::BTreeMap;

use ipu_layout::Precision;
use ipu_package::graph::{Graph, Op, TensorId};

use super::measure::{OutputStats, finite};
use super::{CalibrationError, Candidate, F16Groups, Roles, Runner, WeightScales, view_source};
use crate::siglip::policy::{PrecisionPolicy, role};
use crate::siglip::report::{FidelityRecord, OperandRecord};

/// The default target: the pooled cosine every family's FP8 package is
/// meant to keep against transformers (`docs/MODELS.md`).
pub const MIN_COSINE: f64 = 0.995;

/// The calibration inputs must meet the target with this factor to
/// spare: `1 − cosine ≤ (1 − target) / FIDELITY_HEADROOM`. Images the
/// package later runs on are not the calibration images, and on the
/// golden checkpoints their cosines fall below the calibration inputs'
/// smallest by up to the error budget itself (`docs/MODELS.md`).
pub const FIDELITY_HEADROOM: f64 = 2.0;

/// The cosine the calibration inputs must reach for `target`.
pub(super) fn required(target: f64) -> f64 {
    1.0 - (1.0 - target) / FIDELITY_HEADROOM
}

/// The group name a weight role raised for the target is recorded
/// under in the tensor table.
pub(super) const GROUP: &str = "fidelity";

/// The smallest per-input cosine over every output, and that input.
pub(super) fn smallest_cosine(stats: &BTreeMap<String, OutputStats>) -> (f64, usize) {
    stats
        .values()
        .map(|s| s.worst.unwrap_or((0.0, 0)))
        .fold((1.0, 0), |a, b| if b.0 < a.0 { b } else { a })
}

/// An operand role that may be raised to F16.
#[derive(Clone, Debug)]
enum Operand {
    /// A GEMM weight role, F16 instead of FP8, with the weight bytes F16
    /// adds and its GEMMs' FP8 left operands, which go to F16 too.
    Weights {
        role: String,
        extra_bytes: u64,
        partners: Vec<Partner>,
    },
    /// An FP8 cast role, removed.
    Activations(String),
    /// An F16 candidate group the groups' own test left in FP8 (it gained
    /// too little alone), with its roles, the weight bytes F16 adds, and
    /// the FP8 left operands of the GEMMs that multiply any of its roles.
    Group {
        group: &'static str,
        roles: Vec<String>,
        extra_bytes: u64,
        partners: Vec<Partner>,
    },
}

/// The FP8 left operand of a GEMM whose weights go to F16: the AMP
/// multiplies F16 weights only by F16 activations, so it goes to F16 too.
#[derive(Clone, Debug, PartialEq)]
enum Partner {
    /// A cast role, removed.
    Cast(String),
    /// A weight role (the SigLIP head's probe), stored in F16.
    Weight(String),
}

/// `policy` with every partner in F16.
fn with_partners(policy: PrecisionPolicy, partners: &[Partner]) -> PrecisionPolicy {
    partners.iter().fold(policy, |p, partner| match partner {
        Partner::Cast(r) => p.without_casts([r.as_str()]),
        Partner::Weight(r) => p.with_precision(r.clone(), Precision::F16),
    })
}

impl Operand {
    fn apply(&self, policy: PrecisionPolicy) -> PrecisionPolicy {
        match self {
            Self::Weights { role, partners, .. } => with_partners(
                policy.with_precision(role.clone(), Precision::F16),
                partners,
            ),
            Self::Activations(role) => policy.without_casts([role.as_str()]),
            Self::Group {
                roles, partners, ..
            } => with_partners(
                roles
                    .iter()
                    .fold(policy, |p, r| p.with_precision(r.clone(), Precision::F16)),
                partners,
            ),
        }
    }

    /// The weight roles it stores in F16.
    fn weight_roles(&self) -> Vec<String> {
        let (mut out, partners) = match self {
            Self::Weights { role, partners, .. } => (vec![role.clone()], partners.as_slice()),
            Self::Activations(_) => (Vec::new(), &[][..]),
            Self::Group {
                roles, partners, ..
            } => (roles.clone(), partners.as_slice()),
        };
        out.extend(partners.iter().filter_map(|p| match p {
            Partner::Weight(r) => Some(r.clone()),
            Partner::Cast(_) => None,
        }));
        out
    }

    fn record(&self, cosine_alone: f64) -> OperandRecord {
        let (operand, role, extra_bytes) = match self {
            Self::Weights {
                role, extra_bytes, ..
            } => ("weights", role.clone(), *extra_bytes),
            Self::Activations(role) => ("activations", role.clone(), 0),
            Self::Group {
                group, extra_bytes, ..
            } => ("group", (*group).to_owned(), *extra_bytes),
        };
        OperandRecord {
            operand: operand.to_owned(),
            role,
            extra_bytes,
            cosine_alone: finite(cosine_alone),
            cosine_with_earlier: None,
            decision: "FP8".to_owned(),
        }
    }
}

/// The candidates: FP8 GEMM weight roles (not kept in F16 by a group)
/// and FP8 cast roles, in graph order, then the F16 groups left in FP8.
fn candidates(start: &Start<'_>) -> Vec<Operand> {
    let Start {
        template,
        roles,
        weight_stats,
        kept,
        groups,
        ..
    } = *start;
    // GEMM weight role → the FP8 left operands of its GEMMs.
    let mut gemm_weights: BTreeMap<String, Vec<Partner>> = BTreeMap::new();
    for op in template.ops().values() {
        if let Op::Gemm { left, right, .. } = op {
            let partners = gemm_weights
                .entry(role(template.tensor(*right).name()))
                .or_default();
            let left = role(template.tensor(viewed(template, *left)).name());
            let partner = if roles.cast_inputs.contains_key(&left) {
                Partner::Cast(left)
            } else if weight_stats.get(&left).is_some_and(|(p, _)| p.is_fp8()) {
                Partner::Weight(left)
            } else {
                continue;
            };
            if !partners.contains(&partner) {
                partners.push(partner);
            }
        }
    }
    // Bytes F16 adds to a role: one a weight element.
    let bytes_of = |r: &String| -> u64 {
        roles.members[r]
            .iter()
            .filter_map(|n| template.tensor_by_name(n))
            .map(|id| template.tensor(id).element_count())
            .sum()
    };
    let partner_bytes = |partners: &[Partner]| -> u64 {
        partners
            .iter()
            .map(|p| match p {
                Partner::Weight(r) => bytes_of(r),
                Partner::Cast(_) => 0,
            })
            .sum()
    };
    let partners_of = |weight_roles: &[String]| {
        let mut out: Vec<Partner> = Vec::new();
        for p in weight_roles
            .iter()
            .filter_map(|r| gemm_weights.get(r))
            .flatten()
        {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    };
    let mut out = Vec::new();
    for r in &roles.order {
        if roles.cast_inputs.contains_key(r) {
            out.push(Operand::Activations(r.clone()));
        } else if gemm_weights.contains_key(r)
            && !kept.contains_key(r)
            && weight_stats.get(r).is_some_and(|(p, _)| p.is_fp8())
        {
            let partners = partners_of(std::slice::from_ref(r));
            out.push(Operand::Weights {
                role: r.clone(),
                extra_bytes: bytes_of(r) + partner_bytes(&partners),
                partners,
            });
        }
    }
    for g in groups {
        if g.roles.iter().all(|r| !kept.contains_key(r)) {
            let partners = partners_of(&g.roles);
            out.push(Operand::Group {
                group: g.group,
                roles: g.roles.clone(),
                extra_bytes: g.extra_bytes + partner_bytes(&partners),
                partners,
            });
        }
    }
    out
}

/// The tensor `id` is a view of through any chain of view ops, or `id`.
fn viewed(graph: &Graph, mut id: TensorId) -> TensorId {
    while let Some(source) = view_source(graph, id) {
        id = source;
    }
    id
}

/// What the target decided: the policy, the weight roles raised (for the
/// tensor table) and the record.
pub(super) struct Raised {
    pub(super) policy: PrecisionPolicy,
    pub(super) weights: Vec<String>,
    pub(super) record: FidelityRecord,
}

/// What [`raise`] starts from.
pub(super) struct Start<'a> {
    pub(super) template: &'a Graph,
    pub(super) roles: &'a Roles,
    pub(super) weight_stats: &'a WeightScales,
    /// Weight roles the F16 groups already keep in F16.
    pub(super) kept: &'a BTreeMap<String, &'static str>,
    /// The F16 candidate groups.
    pub(super) groups: &'a [Candidate],
    /// The policy after the F16 groups.
    pub(super) policy: &'a PrecisionPolicy,
    /// That policy's smallest per-input output cosine, and the input.
    pub(super) cosine: f64,
    pub(super) worst_input: usize,
}

/// Raises operands to F16 until the target is met (module header).
pub(super) fn raise(
    runner: &Runner<'_>,
    start: &Start<'_>,
    min_cosine: Option<f64>,
    f16: &F16Groups,
    f32_outputs: &[BTreeMap<String, Vec<f32>>],
) -> Result<Raised, CalibrationError> {
    let before = start.cosine;
    let unchanged = |reason: String| Raised {
        policy: start.policy.clone(),
        weights: Vec::new(),
        record: FidelityRecord {
            min_cosine,
            required: min_cosine.map(required),
            before: finite(before),
            after: finite(before),
            met: min_cosine.is_none_or(|t| before >= required(t)),
            operands: Vec::new(),
            reason,
        },
    };
    let Some(target) = min_cosine else {
        return Ok(unchanged("no target set".to_owned()));
    };
    let target = required(target);
    if before >= target {
        return Ok(unchanged(format!(
            "met with FP8: smallest output cosine {before:.5} ≥ {target}"
        )));
    }
    if let F16Groups::Refused(why) = f16 {
        return Ok(unchanged(format!(
            "missed ({before:.5} < {target}); raising operands to F16 not considered: {why}"
        )));
    }
    let measure = |policy: &PrecisionPolicy| -> Result<f64, CalibrationError> {
        Ok(smallest_cosine(&runner.outputs_against(policy, "raised-operand", f32_outputs)?).0)
    };
    // Candidates are ranked on the worst calibration input alone, a
    // quarter of the runs with the default four inputs; every set that
    // is kept is measured on all of them.
    let worst = Runner {
        model: runner.model,
        inputs: vec![runner.inputs[start.worst_input].clone()],
        softmax: runner.softmax,
    };
    let worst_outputs = &f32_outputs[start.worst_input..=start.worst_input];
    let operands = candidates(start);
    let mut alone = Vec::with_capacity(operands.len());
    for operand in &operands {
        let policy = operand.apply(start.policy.clone());
        let stats = worst.outputs_against(&policy, "raised-operand", worst_outputs)?;
        alone.push(smallest_cosine(&stats).0);
    }
    let mut records: Vec<OperandRecord> = operands
        .iter()
        .zip(&alone)
        .map(|(o, &c)| o.record(c))
        .collect();
    // Best alone first; among equals, fewer extra bytes, then graph order.
    // Every candidate is in the order, those that lose alone last: on a
    // small model one rounding changes every later one, so a role that
    // loses alone can gain beside others, and raising every operand
    // gives the all-F16 graph.
    let mut order: Vec<usize> = (0..operands.len()).collect();
    order.sort_by(|&a, &b| {
        alone[b]
            .total_cmp(&alone[a])
            .then(records[a].extra_bytes.cmp(&records[b].extra_bytes))
            .then(a.cmp(&b))
    });
    // The shortest prefix of that order that meets the target, found by
    // bisection (the error falls roughly monotonically as operands are
    // raised; whatever is kept is measured): `1 + ⌈log2 n⌉` runs.
    let prefix = |k: usize| {
        order[..k]
            .iter()
            .fold(start.policy.clone(), |p, &i| operands[i].apply(p))
    };
    let mut measured: BTreeMap<usize, f64> = BTreeMap::new();
    let full = order.len();
    let full_cosine = measure(&prefix(full))?;
    measured.insert(full, full_cosine);
    let kept = if full_cosine >= target {
        let (mut lo, mut hi) = (0, full);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let c = measure(&prefix(mid))?;
            measured.insert(mid, c);
            if c >= target {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    } else if full_cosine > before {
        full
    } else {
        0
    };
    for (&k, &c) in &measured {
        if k > 0 {
            records[order[k - 1]].cosine_with_earlier = Some(finite(c));
        }
    }
    let policy = prefix(kept);
    let mut weights = Vec::new();
    for &i in &order[..kept] {
        records[i].decision = "F16".to_owned();
        weights.extend(operands[i].weight_roles());
    }
    let after = measured.get(&kept).copied().unwrap_or(before);
    let met = after >= target;
    let raised: Vec<&str> = order[..kept]
        .iter()
        .map(|&i| records[i].role.as_str())
        .collect();
    let reason = if met {
        format!(
            "FP8 gave a smallest output cosine of {before:.5} < {target}; F16 for {raised:?} gives {after:.5}"
        )
    } else {
        format!(
            "missed: FP8 gave {before:.5}; with every candidate in F16 {full_cosine:.5}, below {target}; \
             kept {raised:?}"
        )
    };
    let ordered: Vec<OperandRecord> = order.iter().map(|&i| records[i].clone()).collect();
    Ok(Raised {
        policy,
        weights,
        record: FidelityRecord {
            min_cosine,
            required: Some(target),
            before: finite(before),
            after: finite(after),
            met,
            operands: ordered,
            reason,
        },
    })
}
