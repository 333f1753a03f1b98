//! `validate_graph`: the shape, precision, topology and repeat rules of the
//! graph IR, and the error type that reports a broken rule.
//!
//! Validation is its own function so that a graph built by hand, parsed
//! from a fixture, or produced by a transformation is held to the same
//! rules. It stops at the first broken rule, in op order, so the message
//! points at the earliest cause; every error carries the op, operand slot
//! and tensor involved, which the fixture parser turns into a JSON path.

use ipu_layout::{EntityId, Precision};

use crate::graph::{Graph, OpId, TensorId, TensorKind};

mod op;
mod repeats;

use op::OpCheck;
use repeats::check_repeats;

/// Which operand of an op an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The `i`-th entry of the op's inputs (see [`Op::inputs`](crate::graph::Op::inputs)).
    Input(u32),
    /// The op's output.
    Output,
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::Input(i) => write!(f, "input {i}"),
            Slot::Output => f.write_str("output"),
        }
    }
}

/// Where in a graph an error is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorLocation {
    /// A tensor declaration.
    Tensor(TensorId),
    /// An operand of an op.
    Operand(OpId, Slot),
    /// An attribute of an op.
    Attribute(OpId, &'static str),
    /// The graph as a whole.
    Graph,
}

/// A broken graph rule.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// More tensors or ops than 32-bit ids can name.
    #[error("the graph has {count} {what}, more than 32-bit ids can name; split the model")]
    TooLarge {
        /// "tensors" or "ops".
        what: &'static str,
        /// How many there are.
        count: usize,
    },
    /// Two tensors share a name.
    #[error("{tensor} is named `{name}` like {first}; tensor names must be unique")]
    DuplicateName {
        /// The later tensor.
        tensor: TensorId,
        /// The earlier tensor of that name.
        first: TensorId,
        /// The name.
        name: String,
    },
    /// A tensor's element count or byte size does not fit in 64 bits.
    #[error(
        "{tensor} `{name}` with shape {extents:?} has more bytes than fit in 64 bits; shrink it"
    )]
    Overflow {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Its extents.
        extents: Vec<u64>,
    },
    /// An op names a tensor id the graph does not have.
    #[error("{op} ({kind}) {slot} names {tensor}, but the graph has only {tensor_count} tensors")]
    DanglingTensor {
        /// The op.
        op: OpId,
        /// Its kind.
        kind: &'static str,
        /// The operand.
        slot: Slot,
        /// The missing id.
        tensor: TensorId,
        /// How many tensors there are.
        tensor_count: usize,
    },
    /// An op reads a computed tensor before any op wrote it.
    #[error(
        "{op} ({kind}) {slot} reads {tensor} `{name}` before any op writes it; \
         list ops in topological order and make sure an op produces it"
    )]
    ReadBeforeWrite {
        /// The op.
        op: OpId,
        /// Its kind.
        kind: &'static str,
        /// The operand.
        slot: Slot,
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
    },
    /// An op writes an input or a weight.
    #[error(
        "{op} ({kind}) writes {tensor} `{name}`, which is a {tensor_kind}; \
         ops may only write activations and outputs"
    )]
    WritesSupplied {
        /// The op.
        op: OpId,
        /// Its kind.
        kind: &'static str,
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// The tensor's kind.
        tensor_kind: TensorKind,
    },
    /// Two ops write the same tensor.
    #[error(
        "{op} ({kind}) writes {tensor} `{name}`, which {first} already wrote; \
         every tensor has one producer"
    )]
    WrittenTwice {
        /// The later op.
        op: OpId,
        /// Its kind.
        kind: &'static str,
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// The earlier producer.
        first: OpId,
    },
    /// An op reads the tensor it writes.
    #[error("{op} ({kind}) reads its own output {tensor} `{name}`; write a new tensor instead")]
    InPlace {
        /// The op.
        op: OpId,
        /// Its kind.
        kind: &'static str,
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
    },
    /// An activation or output is never written.
    #[error("{tensor} `{name}` is a{article} {tensor_kind} but no op writes it")]
    NeverWritten {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Its kind.
        tensor_kind: TensorKind,
        /// "n" before "activation" and "output", for the sentence.
        article: &'static str,
    },
    /// An operand has the wrong shape.
    #[error("{op} ({kind}) {slot} {tensor} `{name}` has shape {found:?}, but {expected}")]
    Shape {
        /// The op.
        op: OpId,
        /// Its kind.
        kind: &'static str,
        /// The operand.
        slot: Slot,
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Its extents.
        found: Vec<u64>,
        /// What was needed and why, as a clause.
        expected: String,
    },
    /// An operand has the wrong precision.
    #[error("{op} ({kind}) {slot} {tensor} `{name}` has precision {found}, but {expected}")]
    Precision {
        /// The op.
        op: OpId,
        /// Its kind.
        kind: &'static str,
        /// The operand.
        slot: Slot,
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Its precision.
        found: Precision,
        /// What was needed, as a clause.
        expected: String,
    },
    /// An op attribute is out of range.
    #[error("{op} ({kind}) attribute `{attribute}` is invalid: {message}")]
    Attribute {
        /// The op.
        op: OpId,
        /// Its kind.
        kind: &'static str,
        /// The attribute.
        attribute: &'static str,
        /// What is wrong and what would be right.
        message: String,
    },
    /// The graph has no output.
    #[error("the graph has no output tensor; mark at least one tensor as an output")]
    NoOutputs,
    /// A tensor has an extent of zero (the build needs every extent).
    #[error("{tensor} `{name}` has extent 0 on axis {axis}; a package cannot hold an empty tensor")]
    ZeroExtent {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// The axis.
        axis: usize,
    },
    /// A tensor's rows are not whole 32-bit words (the build needs them).
    #[error(
        "{tensor} `{name}` has rows of {bytes} bytes (last extent × element bytes); the exchange moves whole 32-bit words, so make the last extent a multiple of 4 bytes"
    )]
    PartialWords {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Bytes of one row.
        bytes: u64,
    },
    /// An attention head's columns are not a multiple of 4 (the build needs
    /// them).
    #[error(
        "{op} (attention) has heads of {head_columns} columns; the build needs a multiple of 4 so that each head is whole 32-bit words in every precision"
    )]
    HeadWidth {
        /// The op.
        op: OpId,
        /// Columns per head.
        head_columns: u64,
    },
    /// A slice of the last axis does not start on a word (the build needs
    /// it to).
    #[error(
        "{op} (slice) starts {start_bytes} bytes into each row; the exchange moves whole 32-bit words, so start at a multiple of 4 bytes"
    )]
    SliceStart {
        /// The op.
        op: OpId,
        /// The start, in bytes into the row.
        start_bytes: u64,
    },
    /// An input or weight no op reads (the build holds only what is read).
    #[error("{tensor} `{name}` is a{} {tensor_kind} that no op reads; read it or remove it", if matches!(tensor_kind, TensorKind::Input) { "n" } else { "" })]
    Unread {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Its kind.
        tensor_kind: TensorKind,
    },
    /// An op after a repeat reads a value of one of its iterations other
    /// than a final carried value or a weight.
    #[error(
        "{op} {slot} reads `{name}`, a value of iteration {iteration} of repeat `{repeat}` ({count} iterations); after a repeat only its final carried values ({finals}) and its weights exist: check the repeat count against the names read"
    )]
    ReadFromRepeat {
        /// The op.
        op: OpId,
        /// The operand.
        slot: Slot,
        /// The tensor's name.
        name: String,
        /// The repeat's name.
        repeat: String,
        /// The iteration the tensor belongs to.
        iteration: u32,
        /// Iterations of the repeat.
        count: u32,
        /// The final carried values, quoted and comma-separated.
        finals: String,
    },
    /// An output inside a repeat is not a final carried value.
    #[error(
        "{tensor} `{name}` is an output inside repeat `{repeat}` but not one of its final carried values ({finals}); outputs of a repeat must be what its last iteration hands on"
    )]
    OutputInRepeat {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// The repeat's name.
        repeat: String,
        /// The final carried values, quoted and comma-separated.
        finals: String,
    },
    /// A repeat is malformed or its iterations differ.
    #[error("repeat `{repeat}` iteration {iteration}: {message}")]
    Repeat {
        /// The repeat's name.
        repeat: String,
        /// The iteration.
        iteration: u32,
        /// The op involved, if any.
        op: Option<OpId>,
        /// What is wrong.
        message: String,
    },
}

impl GraphError {
    /// Where the error is, for mapping it back to a fixture's JSON path.
    pub fn location(&self) -> ErrorLocation {
        match self {
            GraphError::TooLarge { .. } | GraphError::NoOutputs => ErrorLocation::Graph,
            GraphError::DuplicateName { tensor, .. }
            | GraphError::Overflow { tensor, .. }
            | GraphError::NeverWritten { tensor, .. }
            | GraphError::ZeroExtent { tensor, .. }
            | GraphError::PartialWords { tensor, .. }
            | GraphError::Unread { tensor, .. }
            | GraphError::OutputInRepeat { tensor, .. } => ErrorLocation::Tensor(*tensor),
            GraphError::ReadFromRepeat { op, slot, .. } => ErrorLocation::Operand(*op, *slot),
            GraphError::HeadWidth { op, .. } => ErrorLocation::Attribute(*op, "heads"),
            GraphError::SliceStart { op, .. } => ErrorLocation::Attribute(*op, "start"),
            GraphError::DanglingTensor { op, slot, .. }
            | GraphError::ReadBeforeWrite { op, slot, .. }
            | GraphError::Shape { op, slot, .. }
            | GraphError::Precision { op, slot, .. } => ErrorLocation::Operand(*op, *slot),
            GraphError::WritesSupplied { op, .. }
            | GraphError::WrittenTwice { op, .. }
            | GraphError::InPlace { op, .. } => ErrorLocation::Operand(*op, Slot::Output),
            GraphError::Attribute { op, attribute, .. } => ErrorLocation::Attribute(*op, attribute),
            GraphError::Repeat { op, .. } => match op {
                Some(op) => ErrorLocation::Operand(*op, Slot::Output),
                None => ErrorLocation::Graph,
            },
        }
    }
}

/// Checks every rule documented on [`Graph`], [`Op`](crate::graph::Op) and
/// [`Repeat`](crate::graph::Repeat); returns the first broken one.
pub fn validate_graph(graph: &Graph) -> Result<(), GraphError> {
    let tensors = graph.tensors();
    if u32::try_from(tensors.len()).is_err() {
        return Err(GraphError::TooLarge {
            what: "tensors",
            count: tensors.len(),
        });
    }
    if u32::try_from(graph.ops().len()).is_err() {
        return Err(GraphError::TooLarge {
            what: "ops",
            count: graph.ops().len(),
        });
    }
    check_tensors(graph)?;
    check_topology(graph)?;
    for (id, op) in graph.ops().iter() {
        OpCheck { graph, id, op }.run()?;
    }
    check_repeats(graph)?;
    if graph.outputs().is_empty() {
        return Err(GraphError::NoOutputs);
    }
    Ok(())
}

fn check_tensors(graph: &Graph) -> Result<(), GraphError> {
    let mut names = std::collections::HashMap::new();
    for (id, tensor) in graph.tensors().iter() {
        if let Some(first) = names.insert(tensor.name(), id) {
            return Err(GraphError::DuplicateName {
                tensor: id,
                first,
                name: tensor.name().to_owned(),
            });
        }
        let bytes = tensor
            .shape()
            .element_count()
            .ok()
            .and_then(|n| n.checked_mul(tensor.precision().element_bytes()));
        if bytes.is_none() {
            return Err(GraphError::Overflow {
                tensor: id,
                name: tensor.name().to_owned(),
                extents: tensor.extents().to_vec(),
            });
        }
    }
    Ok(())
}

fn check_topology(graph: &Graph) -> Result<(), GraphError> {
    let tensors = graph.tensors();
    let mut written: Vec<Option<OpId>> = vec![None; tensors.len()];
    for (id, op) in graph.ops().iter() {
        let kind = op.kind_name();
        let mut slots: Vec<(Slot, TensorId)> = op
            .inputs()
            .into_iter()
            .enumerate()
            .map(|(i, t)| (Slot::Input(i as u32), t))
            .collect();
        slots.push((Slot::Output, op.output()));
        for &(slot, tensor) in &slots {
            if tensor.index() >= tensors.len() {
                return Err(GraphError::DanglingTensor {
                    op: id,
                    kind,
                    slot,
                    tensor,
                    tensor_count: tensors.len(),
                });
            }
        }
        let output = op.output();
        for &(slot, tensor) in &slots[..slots.len() - 1] {
            let t = &tensors[tensor];
            if tensor == output {
                return Err(GraphError::InPlace {
                    op: id,
                    kind,
                    tensor,
                    name: t.name().to_owned(),
                });
            }
            if t.kind().is_computed() && written[tensor.index()].is_none() {
                return Err(GraphError::ReadBeforeWrite {
                    op: id,
                    kind,
                    slot,
                    tensor,
                    name: t.name().to_owned(),
                });
            }
        }
        let out = &tensors[output];
        if !out.kind().is_computed() {
            return Err(GraphError::WritesSupplied {
                op: id,
                kind,
                tensor: output,
                name: out.name().to_owned(),
                tensor_kind: out.kind(),
            });
        }
        if let Some(first) = written[output.index()] {
            return Err(GraphError::WrittenTwice {
                op: id,
                kind,
                tensor: output,
                name: out.name().to_owned(),
                first,
            });
        }
        written[output.index()] = Some(id);
    }
    for (id, tensor) in tensors.iter() {
        if tensor.kind().is_computed() && written[id.index()].is_none() {
            return Err(GraphError::NeverWritten {
                tensor: id,
                name: tensor.name().to_owned(),
                tensor_kind: tensor.kind(),
                article: "n",
            });
        }
    }
    Ok(())
}

/// The numpy broadcast of two shapes, or `None` if they do not broadcast.
pub fn broadcast_shapes(a: &[u64], b: &[u64]) -> Option<Vec<u64>> {
    let rank = a.len().max(b.len());
    let mut shape = vec![0; rank];
    for (i, extent) in shape.iter_mut().enumerate() {
        // Axis i counted from the end of the broadcast shape.
        let from_end = rank - 1 - i;
        let x = a.len().checked_sub(1 + from_end).map_or(1, |j| a[j]);
        let y = b.len().checked_sub(1 + from_end).map_or(1, |j| b[j]);
        *extent = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return None;
        };
    }
    Some(shape)
}
