//! `check_buildable`: what a package build needs of a graph beyond
//! [`validate_graph`](super::validate_graph).
//!
//! A valid graph can always be evaluated by the reference; these rules are
//! what the device build needs, checked up front so that a graph it cannot
//! build gets a user error naming the tensor or op (and, through the
//! fixture parser, the JSON path) instead of failing deep in the planner:
//!
//! 1. every extent is at least 1 (a shard of nothing has no layout);
//! 2. a row — the last extent, or one element of a scalar — is a whole
//!    number of 32-bit words: the exchange moves whole words, and rows are
//!    what layouts cut and redistribute;
//! 3. an attention head's columns are a multiple of 4 elements, so that
//!    each head's part of the result is whole words in every precision (an
//!    FP8 cast of it keeps the per-head layout);
//! 4. a slice of the last axis starts on a word;
//! 5. every input and weight is read by some op: the package holds only
//!    what the program reads, and a supplied tensor nothing reads is most
//!    likely a misspelt name;
//! 6. after a repeat, only its final carried values and its weights are
//!    read, and an output inside a repeat is a final carried value: the
//!    body runs in one set of buffers, so the values of earlier iterations
//!    (say `x2` of a repeat of three that ends at `x3`) no longer exist.

use std::collections::HashSet;

use ipu_layout::EntityId;

use super::validate::{GraphError, Slot};
use super::{Graph, Op, OpId, TensorId, TensorKind};

/// Bytes the exchange moves at a time.
pub(crate) const WORD_BYTES: u64 = 4;

/// Checks the rules of the module header; returns the first broken one.
pub fn check_buildable(graph: &Graph) -> Result<(), GraphError> {
    for (id, t) in graph.tensors().iter() {
        if let Some(axis) = t.extents().iter().position(|&e| e == 0) {
            return Err(GraphError::ZeroExtent {
                tensor: id,
                name: t.name().to_owned(),
                axis,
            });
        }
        let row = t.extents().last().copied().unwrap_or(1);
        let bytes = row.saturating_mul(t.precision().element_bytes());
        if bytes % WORD_BYTES != 0 {
            return Err(GraphError::PartialWords {
                tensor: id,
                name: t.name().to_owned(),
                bytes,
            });
        }
    }
    let mut read: HashSet<TensorId> = HashSet::new();
    for (id, op) in graph.ops().iter() {
        read.extend(op.inputs());
        match op {
            Op::Attention { q, heads, .. } => {
                let hidden = graph.tensor(*q).extents().last().copied().unwrap_or(0);
                let head = hidden / u64::from((*heads).max(1));
                if head % 4 != 0 {
                    return Err(GraphError::HeadWidth {
                        op: id,
                        head_columns: head,
                    });
                }
            }
            Op::Slice {
                input, axis, start, ..
            } => {
                let t = graph.tensor(*input);
                let last = t.extents().len().saturating_sub(1);
                let bytes = start.saturating_mul(t.precision().element_bytes());
                if *axis as usize == last && bytes % WORD_BYTES != 0 {
                    return Err(GraphError::SliceStart {
                        op: id,
                        start_bytes: bytes,
                    });
                }
            }
            _ => {}
        }
    }
    for (id, t) in graph.tensors().iter() {
        if matches!(t.kind(), TensorKind::Input | TensorKind::Weight) && !read.contains(&id) {
            return Err(GraphError::Unread {
                tensor: id,
                name: t.name().to_owned(),
                tensor_kind: t.kind(),
            });
        }
    }
    check_repeat_reads(graph)
}

/// Rule 6: what may be read after a repeat and be an output inside one.
fn check_repeat_reads(graph: &Graph) -> Result<(), GraphError> {
    for r in graph.repeats() {
        let inside = r.tensors();
        let last = r.count().saturating_sub(1);
        let finals: Vec<TensorId> = r
            .carries()
            .iter()
            .filter_map(|c| r.body_tensor(last, c.body_tensor))
            .collect();
        let allowed =
            |t: TensorId| finals.contains(&t) || graph.tensor(t).kind() == TensorKind::Weight;
        let final_names = || {
            finals
                .iter()
                .map(|&t| format!("`{}`", graph.tensor(t).name()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for t in inside.clone().map(TensorId::new) {
            if graph.tensor(t).kind() == TensorKind::Output && !finals.contains(&t) {
                return Err(GraphError::OutputInRepeat {
                    tensor: t,
                    name: graph.tensor(t).name().to_owned(),
                    repeat: r.name().to_owned(),
                    finals: final_names(),
                });
            }
        }
        for op in r.ops().end..graph.ops().len() {
            let op = OpId::new(op);
            for (i, t) in graph.op(op).inputs().into_iter().enumerate() {
                if !inside.contains(&t.index()) || allowed(t) {
                    continue;
                }
                let iteration = r.locate_tensor(t).map_or(0, |(iteration, _)| iteration);
                return Err(GraphError::ReadFromRepeat {
                    op,
                    slot: Slot::Input(i as u32),
                    name: graph.tensor(t).name().to_owned(),
                    repeat: r.name().to_owned(),
                    iteration,
                    count: r.count(),
                    finals: final_names(),
                });
            }
        }
    }
    Ok(())
}
