//! Which weight columns carry an attention's query scale.
//!
//! An attention with `queries_scaled` expects its queries to carry
//! `1/√head_dim` already. Whoever supplies weights for such a graph (an
//! importer folding a checkpoint, or a generator drawing values of a
//! realistic spread) divides the query projection's columns by `√head_dim`;
//! this module says which columns those are, from the graph alone: the
//! queries are a GEMM's output, or a slice of its last axis, and the
//! columns are the GEMM's weight and bias columns the queries take.

use std::ops::Range;

use super::{Graph, Op, TensorId};

/// Columns of a GEMM's weight (and bias) that compute an attention's
/// queries, and the head dimension they are divided by the root of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryColumns {
    /// The GEMM's right operand, `[inner, columns]`.
    pub weight: TensorId,
    /// The GEMM's bias, `[columns]`, when it has one.
    pub bias: Option<TensorId>,
    /// The columns the queries take.
    pub columns: Range<u64>,
    /// The attention's head dimension.
    pub head_dim: u64,
}

impl QueryColumns {
    /// Whether `tensor` is this entry's weight or bias.
    pub fn covers(&self, tensor: TensorId) -> bool {
        self.weight == tensor || self.bias == Some(tensor)
    }

    /// The factor the columns carry: `1/√head_dim`.
    pub fn factor(&self) -> f64 {
        1.0 / (self.head_dim.max(1) as f64).sqrt()
    }
}

/// The query columns of every attention of `graph` that takes its queries
/// scaled and whose queries a GEMM computes (through at most one slice of
/// the last axis); attentions whose queries come otherwise are left out,
/// since no weight carries their scale.
pub fn query_columns(graph: &Graph) -> Vec<QueryColumns> {
    let mut out = Vec::new();
    for (_, op) in graph.ops().iter() {
        let Op::Attention {
            q,
            heads,
            queries_scaled: true,
            ..
        } = op
        else {
            continue;
        };
        let q_tensor = graph.tensor(*q);
        let Some(&width) = q_tensor.extents().last() else {
            continue;
        };
        let Some(head_dim) = width.checked_div(u64::from(*heads)) else {
            continue;
        };
        // The queries, or the slice of the last axis they were cut from.
        let (source, start) = match graph.producer(*q).map(|id| graph.op(id)) {
            Some(Op::Slice {
                input, axis, start, ..
            }) if u64::from(*axis) + 1 == q_tensor.extents().len() as u64 => (*input, *start),
            _ => (*q, 0),
        };
        let Some(Op::Gemm { right, bias, .. }) = graph.producer(source).map(|id| graph.op(id))
        else {
            continue;
        };
        let Some(end) = start.checked_add(width) else {
            continue;
        };
        let entry = QueryColumns {
            weight: *right,
            bias: *bias,
            columns: start..end,
            head_dim,
        };
        // An op repeated per layer names other tensors each time, so an
        // entry appears once; guard against a graph naming one twice.
        if !out.contains(&entry) {
            out.push(entry);
        }
    }
    out
}

/// The factor element `index` of `tensor` (row-major, `columns` wide) is
/// multiplied by because it computes scaled queries: `1/√head_dim` in a
/// query column of a weight or bias `entries` list, else 1. Callers on a
/// per-element path pass only the entries that cover `tensor`, and skip
/// it where none do.
pub fn query_factor(entries: &[QueryColumns], tensor: TensorId, columns: u64, index: u64) -> f64 {
    let column = index % columns.max(1);
    entries
        .iter()
        .find(|e| e.covers(tensor) && e.columns.contains(&column))
        .map_or(1.0, QueryColumns::factor)
}
