//! The F16 groups: small weights (GEMM biases, layer-norm gains and
//! offsets, weights added to activations, token tables) that may stay in
//! F16 where that lowers the outputs' error enough (`calibrate`'s module
//! header), each measured alone against the all-FP8 graph.

use std::collections::BTreeMap;

use ipu_layout::Precision;
use ipu_package::graph::{Graph, Op};

use super::measure::finite;
use super::{
    CalibrationError, CalibrationOptions, F16_MIN_GAIN, F16Groups, Roles, Runner, WeightScales,
    worst,
};
use crate::siglip::policy::PrecisionPolicy;
use crate::siglip::report::GroupRecord;

/// The F16 candidate group of a weight, by how the graph uses it.
fn group_of(graph: &Graph, name: &str) -> Option<&'static str> {
    let id = graph.tensor_by_name(name)?;
    graph.ops().values().iter().find_map(|op| match op {
        Op::Gemm { bias: Some(b), .. } if *b == id => Some("bias"),
        Op::LayerNorm { scale, bias, .. } if *scale == id || *bias == id => Some("layer_norm"),
        Op::Add { left, right, .. } if *left == id || *right == id => Some("position"),
        Op::Gather { table, .. } if *table == id => Some("token"),
        _ => None,
    })
}

/// The F16 decisions: the policy with the kept groups in F16, a record
/// per group, and the roles kept with their group.
pub(super) struct GroupChoice {
    pub(super) policy: PrecisionPolicy,
    pub(super) records: Vec<GroupRecord>,
    pub(super) kept: BTreeMap<String, &'static str>,
}

/// An F16 candidate group: its FP8 weight roles and the bytes F16 adds.
pub(super) struct Candidate {
    pub(super) group: &'static str,
    pub(super) roles: Vec<String>,
    pub(super) extra_bytes: u64,
}

/// The F16 candidate groups of the template's FP8 weight roles, by name.
pub(super) fn f16_candidates(
    template: &Graph,
    roles: &Roles,
    weight_stats: &WeightScales,
) -> Vec<Candidate> {
    let mut groups: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for (r, (precision, _)) in weight_stats {
        if precision.is_fp8()
            && let Some(g) = group_of(template, &roles.members[r][0])
        {
            groups.entry(g).or_default().push(r.clone());
        }
    }
    groups
        .into_iter()
        .map(|(group, group_roles)| {
            let extra_bytes: u64 = group_roles
                .iter()
                .flat_map(|r| &roles.members[r])
                .filter_map(|n| template.tensor_by_name(n))
                .map(|id| template.tensor(id).element_count())
                .sum();
            Candidate {
                group,
                roles: group_roles,
                extra_bytes,
            }
        })
        .collect()
}

/// F16 groups: each alone against the all-FP8 graph, whose largest
/// output error is `baseline_error`.
pub(super) fn choose_f16_groups(
    runner: &Runner<'_>,
    options: &CalibrationOptions,
    candidates: &[Candidate],
    all_fp8: &PrecisionPolicy,
    baseline_error: f64,
    f32_outputs: &[BTreeMap<String, Vec<f32>>],
) -> Result<GroupChoice, CalibrationError> {
    let mut final_policy = all_fp8.clone();
    let mut group_records = Vec::new();
    let mut kept: BTreeMap<String, &'static str> = BTreeMap::new();
    for candidate in candidates {
        let (group, group_roles, extra_bytes) =
            (candidate.group, &candidate.roles, candidate.extra_bytes);
        if let F16Groups::Refused(why) = &options.f16_groups {
            group_records.push(GroupRecord {
                group: group.to_owned(),
                roles: group_roles.clone(),
                extra_bytes,
                error_fp8: finite(baseline_error),
                error_f16: None,
                decision: "FP8".to_owned(),
                reason: format!("F16 not considered: {why}"),
            });
            continue;
        }
        let mut policy = all_fp8.clone();
        for r in group_roles {
            policy = policy.with_precision(r.clone(), Precision::F16);
        }
        let error = worst(&runner.outputs_against(&policy, "F16-group", f32_outputs)?);
        let gain = if baseline_error > 0.0 {
            (baseline_error - error) / baseline_error
        } else {
            0.0
        };
        let (decision, reason) = if gain < F16_MIN_GAIN {
            (
                "FP8",
                format!(
                    "F16 changes the largest output error from {baseline_error:.4} to {error:.4} \
                     ({:.1} % lower; less than {:.0} %)",
                    gain * 100.0,
                    F16_MIN_GAIN * 100.0
                ),
            )
        } else {
            for r in group_roles {
                final_policy = final_policy.with_precision(r.clone(), Precision::F16);
                kept.insert(r.clone(), group);
            }
            (
                "F16",
                format!(
                    "F16 lowers the largest output error from {baseline_error:.4} to {error:.4} \
                     ({:.1} %) for {extra_bytes} bytes",
                    gain * 100.0
                ),
            )
        };
        group_records.push(GroupRecord {
            group: group.to_owned(),
            roles: group_roles.clone(),
            extra_bytes,
            error_fp8: finite(baseline_error),
            error_f16: Some(finite(error)),
            decision: decision.to_owned(),
            reason,
        });
    }

    Ok(GroupChoice {
        policy: final_policy,
        records: group_records,
        kept,
    })
}
