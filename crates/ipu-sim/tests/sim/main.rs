//! Integration tests of ipu-sim: the reference evaluator (hand-checkable
//! ops, the small fixtures end to end, determinism, errors, the tolerance
//! rules with their calibration), the logical and tile models, the tile
//! model's cycle count against the package's estimate, the per-op check,
//! the damaged packages the tile model must refuse, and hostile packages
//! and fixtures (re-signed edits: a package that validates is never
//! refused by the tile model for its structure).

mod activations;
mod amp;
mod causal;
mod cycles;
mod fixtures;
mod hostile;
mod logical;
mod ops;
mod oracle;
mod pooling;
mod props;
mod robust;
mod tiles;
mod tolerance;
mod windows;

use ipu_layout::Precision;
use ipu_package::graph::values::ValueSet;
use ipu_package::graph::{Graph, GraphBuilder, Op, TensorId, TensorKind};

/// A graph of one op over supplied inputs, and the ids involved.
#[derive(Debug)]
pub struct OneOp {
    /// The graph.
    pub graph: Graph,
    /// Its supplied tensors, in the order given.
    pub inputs: Vec<TensorId>,
    /// The op's output.
    pub output: TensorId,
}

/// Builds a one-op graph: `inputs` are (shape, precision) of supplied
/// tensors, `output` the result's; `make` builds the op from their ids.
pub fn one_op(
    inputs: &[(&[u64], Precision)],
    output: (&[u64], Precision),
    make: impl FnOnce(&[TensorId], TensorId) -> Op,
) -> OneOp {
    let mut b = GraphBuilder::new("one-op");
    let ids: Vec<TensorId> = inputs
        .iter()
        .enumerate()
        .map(|(i, (shape, p))| b.tensor(format!("in{i}"), *shape, *p, TensorKind::Input))
        .collect();
    let out = b.tensor("out", output.0, output.1, TensorKind::Output);
    b.op(make(&ids, out));
    OneOp {
        graph: b.finish().expect("valid one-op graph"),
        inputs: ids,
        output: out,
    }
}

/// Evaluates a one-op graph on the given input values.
pub fn run(g: &OneOp, values: &[Vec<f32>]) -> Vec<f32> {
    let mut set = ValueSet::new();
    for (&id, v) in g.inputs.iter().zip(values) {
        set.insert(id, v.clone());
    }
    let out = ipu_sim::evaluate(&g.graph, &set).expect("evaluates");
    out.get(g.output).expect("output present").to_vec()
}

/// The text of `fixtures/<name>` at the workspace root.
pub fn fixture_text(name: &str) -> String {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}
