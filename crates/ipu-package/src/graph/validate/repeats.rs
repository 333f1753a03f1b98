//! The rules of repeats: listed in op order without overlap and inside the
//! graph, carries from a tensor before the repeat to a body tensor of the
//! same shape and precision, and every iteration repeating the body exactly
//! (the same ops on its own tensors, of the same shapes, precisions and
//! kinds).

use ipu_layout::EntityId;

use super::GraphError;
use crate::graph::{Graph, OpId, TensorId};

pub(super) fn check_repeats(graph: &Graph) -> Result<(), GraphError> {
    let mut ops_end = 0usize;
    let mut tensors_end = 0usize;
    for repeat in graph.repeats() {
        let fail = |iteration: u32, op: Option<OpId>, message: String| GraphError::Repeat {
            repeat: repeat.name().to_owned(),
            iteration,
            op,
            message,
        };
        if repeat.count() == 0 || repeat.ops_per_iteration() == 0 {
            return Err(fail(
                0,
                None,
                "a repeat needs at least one iteration and one op".to_owned(),
            ));
        }
        let ops = repeat.ops();
        let tensors = repeat.tensors();
        if (repeat.first_op() as usize) < ops_end || (repeat.first_tensor() as usize) < tensors_end
        {
            return Err(fail(
                0,
                None,
                "repeats must not overlap and must be listed in op order".to_owned(),
            ));
        }
        if ops.end > graph.ops().len() || tensors.end > graph.tensors().len() {
            return Err(fail(
                0,
                None,
                format!(
                    "ops {ops:?} or tensors {tensors:?} run past the graph's {} ops and {} tensors",
                    graph.ops().len(),
                    graph.tensors().len()
                ),
            ));
        }
        ops_end = ops.end;
        tensors_end = tensors.end;
        for carry in repeat.carries() {
            let body = repeat.body_tensor(0, carry.body_tensor);
            let valid = carry.initial.index() < repeat.first_tensor() as usize
                && body.is_some_and(|b| {
                    let (x, y) = (graph.tensor(carry.initial), graph.tensor(b));
                    x.shape() == y.shape() && x.precision() == y.precision()
                });
            if !valid {
                return Err(fail(
                    0,
                    None,
                    format!(
                        "carry from {} to body tensor {} needs a tensor from before the repeat \
                         and a body tensor of the same shape and precision",
                        carry.initial, carry.body_tensor
                    ),
                ));
            }
        }
        let per_t = repeat.tensors_per_iteration() as usize;
        let all_ops = graph.ops().values();
        for k in 1..repeat.count() {
            // Iteration 1 is compared with iteration 0 (allowing carried
            // inputs); every later iteration with iteration 1 shifted, which
            // pins the carried tensor to the same body position each time.
            let reference = if k == 1 { 0 } else { 1 };
            let shift = (k - reference) as usize * per_t;
            let owned = if k == 1 {
                repeat.iteration_tensors(0)
            } else {
                tensors.clone()
            };
            let base = repeat.iteration_ops(reference);
            let this = repeat.iteration_ops(k);
            for (j, (b, t)) in base.zip(this).enumerate() {
                let (b_op, t_op) = (&all_ops[b], &all_ops[t]);
                let mapped = b_op.map_tensors(|id| {
                    if owned.contains(&id.index()) {
                        TensorId::new(id.index() + shift)
                    } else if k == 1 {
                        // Iteration 1 reads a carry's body tensor of
                        // iteration 0 where iteration 0 read its initial.
                        repeat
                            .carries()
                            .iter()
                            .find(|c| c.initial == id)
                            .and_then(|c| repeat.body_tensor(0, c.body_tensor))
                            .unwrap_or(id)
                    } else {
                        id
                    }
                });
                let same = mapped == *t_op;
                if !same {
                    let t_id = OpId::new(t);
                    return Err(fail(
                        k,
                        Some(t_id),
                        format!(
                            "{t_id} ({}) is not body op {j} of iteration {reference} ({}) with this iteration's tensors; \
                             every iteration must repeat the body exactly",
                            t_op.kind_name(),
                            b_op.kind_name()
                        ),
                    ));
                }
            }
            for i in repeat.iteration_tensors(0) {
                let a = &graph.tensors().values()[i];
                let b = &graph.tensors().values()[i + k as usize * per_t];
                // An activation may become an output in another iteration
                // (the last layer's result, say): the computation is the
                // same.
                let same_kind =
                    a.kind() == b.kind() || (a.kind().is_computed() && b.kind().is_computed());
                if a.shape() != b.shape() || a.precision() != b.precision() || !same_kind {
                    return Err(fail(
                        k,
                        None,
                        format!(
                            "tensor `{}` differs in shape, precision or kind from `{}` of iteration 0",
                            b.name(),
                            a.name()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}
