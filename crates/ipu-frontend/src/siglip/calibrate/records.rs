//! The report's tensor table: every role of the final graph in graph
//! order, with its precision, why, and what calibration measured for it.

use std::collections::BTreeMap;

use ipu_layout::Precision;
use ipu_package::graph::{Graph, TensorKind, ValueSet};

use super::measure::{Stats, finite, quantised};
use super::{ACTIVATION_HEADROOM, Roles, WeightScales, view_source};
use crate::siglip::policy::role;
use crate::siglip::report::{TensorRecord, precision_name};

/// What the tensor table is made from.
pub(super) struct Measured<'a> {
    /// The graph with the chosen precisions.
    pub(super) final_graph: &'a Graph,
    /// The template's graph, whose weights `weights` holds.
    pub(super) template: &'a Graph,
    pub(super) weights: &'a ValueSet,
    pub(super) roles: &'a Roles,
    pub(super) weight_stats: &'a WeightScales,
    /// Roles kept in F16, with their group.
    pub(super) kept: &'a BTreeMap<String, &'static str>,
    pub(super) cast_precision: &'a BTreeMap<String, Precision>,
    /// Per cast role, the largest magnitude its input reached (F32 graph).
    pub(super) cast_max: &'a BTreeMap<String, f64>,
    /// Per role, the final graph's statistics.
    pub(super) measured: &'a BTreeMap<String, Stats>,
}

/// Every role of the final graph, in graph order.
pub(super) fn tensor_records(m: &Measured<'_>) -> Vec<TensorRecord> {
    let Measured {
        final_graph,
        template,
        weights,
        roles,
        weight_stats,
        kept,
        cast_precision,
        cast_max,
        measured,
    } = *m;
    let mut tensors = Vec::new();
    for r in &roles.order {
        let Some(id) = final_graph.tensor_by_name(&roles.members[r][0]) else {
            continue;
        };
        let t = final_graph.tensor(id);
        let precision = t.precision();
        let (name, scale) = precision_name(precision);
        let layers = if r.contains("{i}") {
            " (one scale for every layer, from the union of their values)"
        } else {
            ""
        };
        let record = |kind: &str,
                      stats: Stats,
                      error: Option<f64>,
                      fp8_error: Option<f64>,
                      reason: String| TensorRecord {
            tensor: r.clone(),
            kind: kind.to_owned(),
            precision: name.to_owned(),
            scale,
            elements: stats.elements,
            max_abs: finite(stats.max_abs),
            saturated: stats.saturation(),
            error: error.map(finite),
            fp8_error: fp8_error.map(finite),
            reason,
        };
        let view_of = view_source(final_graph, id).map(|v| final_graph.tensor(v).name().to_owned());
        let entry = match t.kind() {
            _ if view_of.is_some() => record(
                "view",
                Stats::default(),
                None,
                None,
                format!(
                    "a view of `{}`, in its precision",
                    view_of.as_deref().map(role).unwrap_or_default()
                ),
            ),
            TensorKind::Weight => {
                let fp8_stats = weight_stats.get(r).map(|w| w.1).unwrap_or_default();
                if let Some(group) = kept.get(r) {
                    let mut f16 = Stats::default();
                    for n in &roles.members[r] {
                        let v = template
                            .tensor_by_name(n)
                            .and_then(|id| weights.get(id))
                            .unwrap_or(&[]);
                        f16.add(v, &quantised(Precision::F16, v), Precision::F16.max_value());
                    }
                    record(
                        "weight",
                        f16,
                        Some(f16.error()),
                        Some(fp8_stats.error()),
                        if *group == super::fidelity::GROUP {
                            "F16: raised from FP8 for the fidelity target (see fidelity)".to_owned()
                        } else {
                            format!("F16: group `{group}` kept in F16 (see groups)")
                        },
                    )
                } else if precision.is_fp8() {
                    record(
                        "weight",
                        fp8_stats,
                        Some(fp8_stats.error()),
                        None,
                        format!(
                            "FP8 {name}: the smallest scale with which the largest magnitude \
                             fits{layers}"
                        ),
                    )
                } else {
                    record(
                        "weight",
                        fp8_stats,
                        Some(fp8_stats.error()),
                        None,
                        format!("{name}: the template's precision"),
                    )
                }
            }
            kind => {
                let stats = measured.get(r).copied().unwrap_or_default();
                if let Some(&cast) = cast_precision.get(r) {
                    let mut s = stats;
                    // The largest magnitude the scale was chosen from.
                    s.max_abs = cast_max.get(r).copied().unwrap_or(0.0);
                    debug_assert_eq!(cast, precision);
                    record(
                        "activation",
                        s,
                        Some(stats.error()),
                        None,
                        format!(
                            "FP8 {name} cast before a GEMM: the smallest scale with which \
                             {ACTIVATION_HEADROOM} × the largest magnitude of its input on \
                             the calibration inputs (F32 graph) fits{layers}; saturation and \
                             error measured in the final graph"
                        ),
                    )
                } else {
                    let kind = match kind {
                        TensorKind::Input => "input",
                        TensorKind::Output => "output",
                        _ => "activation",
                    };
                    record(
                        kind,
                        stats,
                        None,
                        None,
                        format!("{name}: the template's precision"),
                    )
                }
            }
        };
        tensors.push(entry);
    }
    tensors
}
