//! `validate_graph`: the shape, precision, topology and repeat rules of the
//! graph IR, and the error type that reports a broken rule.
//!
//! Validation is its own function so that a graph built by hand, parsed
//! from a fixture, or produced by a transformation is held to the same
//! rules. It stops at the first broken rule, in op order, so the message
//! points at the earliest cause; every error carries the op, operand slot
//! and tensor involved, which the fixture parser turns into a JSON path.

use ipu_layout::{EntityId, Precision};

use crate::graph::{Graph, Op, OpId, TensorId, TensorKind};

/// Which operand of an op an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The `i`-th entry of the op's inputs (see [`Op::inputs`]).
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

/// The checks of one op; the topology check has already made every id
/// valid.
struct OpCheck<'a> {
    graph: &'a Graph,
    id: OpId,
    op: &'a Op,
}

impl OpCheck<'_> {
    fn extents(&self, tensor: TensorId) -> &[u64] {
        self.graph.tensor(tensor).extents()
    }

    fn precision(&self, tensor: TensorId) -> Precision {
        self.graph.tensor(tensor).precision()
    }

    fn shape_error(&self, slot: Slot, tensor: TensorId, expected: String) -> GraphError {
        let t = self.graph.tensor(tensor);
        GraphError::Shape {
            op: self.id,
            kind: self.op.kind_name(),
            slot,
            tensor,
            name: t.name().to_owned(),
            found: t.extents().to_vec(),
            expected,
        }
    }

    fn precision_error(&self, slot: Slot, tensor: TensorId, expected: String) -> GraphError {
        let t = self.graph.tensor(tensor);
        GraphError::Precision {
            op: self.id,
            kind: self.op.kind_name(),
            slot,
            tensor,
            name: t.name().to_owned(),
            found: t.precision(),
            expected,
        }
    }

    fn attribute_error(&self, attribute: &'static str, message: String) -> GraphError {
        GraphError::Attribute {
            op: self.id,
            kind: self.op.kind_name(),
            attribute,
            message,
        }
    }

    fn expect_shape(
        &self,
        slot: Slot,
        tensor: TensorId,
        expected: &[u64],
        why: &str,
    ) -> Result<(), GraphError> {
        if self.extents(tensor) == expected {
            Ok(())
        } else {
            Err(self.shape_error(slot, tensor, format!("{expected:?} is needed {why}")))
        }
    }

    fn expect_arithmetic_output(&self) -> Result<(), GraphError> {
        let output = self.op.output();
        match self.precision(output) {
            Precision::F16 | Precision::F32 => Ok(()),
            Precision::F8 { .. } => Err(self.precision_error(
                Slot::Output,
                output,
                "this op computes F16 or F32 results; add a cast_fp8 op after it".to_owned(),
            )),
        }
    }

    fn expect_same_precision(&self, input: TensorId) -> Result<(), GraphError> {
        let output = self.op.output();
        if self.precision(output) == self.precision(input) {
            Ok(())
        } else {
            Err(self.precision_error(
                Slot::Output,
                output,
                format!(
                    "this op moves data unchanged, so it must equal the input's {}",
                    self.precision(input)
                ),
            ))
        }
    }

    fn run(&self) -> Result<(), GraphError> {
        let output = self.op.output();
        match self.op {
            Op::Gemm {
                left, right, bias, ..
            } => {
                let l = self.extents(*left);
                let Some((&k, outer)) = l.split_last() else {
                    return Err(self.shape_error(
                        Slot::Input(0),
                        *left,
                        "the left operand needs rank at least 1".to_owned(),
                    ));
                };
                let r = self.extents(*right);
                if r.len() != 2 || r[0] != k {
                    return Err(self.shape_error(
                        Slot::Input(1),
                        *right,
                        format!(
                            "the right operand must be [{k}, n] to match the left's last extent {k}"
                        ),
                    ));
                }
                let n = r[1];
                // When the output and the bias agree on a column count that
                // the right operand lacks, the right operand is the odd one
                // out, so blame it rather than the bias.
                let out_n = self.extents(output).last().copied();
                let bias_n = bias.map(|b| self.extents(b).to_vec());
                if let Some(out_n) = out_n
                    && out_n != n
                    && bias_n.as_ref().is_none_or(|b| b.as_slice() == [out_n])
                {
                    return Err(self.shape_error(
                        Slot::Input(1),
                        *right,
                        format!("[{k}, {out_n}] is needed to give the output's {out_n} columns"),
                    ));
                }
                if let Some(bias) = bias {
                    self.expect_shape(
                        Slot::Input(2),
                        *bias,
                        &[n],
                        "to match the right operand's columns",
                    )?;
                }
                let mut expected = outer.to_vec();
                expected.push(n);
                self.expect_shape(
                    Slot::Output,
                    output,
                    &expected,
                    "for a left [.., k] × right [k, n] product",
                )?;
                self.expect_arithmetic_output()
            }
            Op::Add { left, right, .. } => {
                let (a, b) = (self.extents(*left), self.extents(*right));
                let Some(shape) = broadcast_shapes(a, b) else {
                    return Err(self.shape_error(
                        Slot::Input(1),
                        *right,
                        format!("it does not broadcast against the left operand's {a:?} (extents must be equal or 1, aligned at the last axis)"),
                    ));
                };
                self.expect_shape(
                    Slot::Output,
                    output,
                    &shape,
                    "by broadcasting the two operands",
                )?;
                self.expect_arithmetic_output()
            }
            Op::LayerNorm {
                input,
                scale,
                bias,
                eps,
                ..
            } => {
                let x = self.extents(*input);
                let Some(&d) = x.last() else {
                    return Err(self.shape_error(
                        Slot::Input(0),
                        *input,
                        "layer norm needs rank at least 1".to_owned(),
                    ));
                };
                self.expect_shape(Slot::Input(1), *scale, &[d], "to match the normalised axis")?;
                self.expect_shape(Slot::Input(2), *bias, &[d], "to match the normalised axis")?;
                self.expect_shape(Slot::Output, output, x, "to equal the input's shape")?;
                if !(eps.is_finite() && *eps > 0.0) {
                    return Err(self.attribute_error(
                        "eps",
                        format!("{eps} must be finite and positive, for example 1e-6"),
                    ));
                }
                self.expect_arithmetic_output()
            }
            Op::Gelu { input, .. } => {
                self.expect_shape(
                    Slot::Output,
                    output,
                    self.extents(*input),
                    "to equal the input's shape",
                )?;
                self.expect_arithmetic_output()
            }
            Op::Attention { q, k, v, heads, .. } => {
                let qs = self.extents(*q);
                let &[batch, _, hidden] = qs else {
                    return Err(self.shape_error(
                        Slot::Input(0),
                        *q,
                        "attention queries must be [batch, tokens_q, hidden]".to_owned(),
                    ));
                };
                let ks = self.extents(*k);
                let &[kb, tokens_kv, kh] = ks else {
                    return Err(self.shape_error(
                        Slot::Input(1),
                        *k,
                        "attention keys must be [batch, tokens_kv, hidden]".to_owned(),
                    ));
                };
                if kb != batch || kh != hidden || tokens_kv == 0 {
                    return Err(self.shape_error(
                        Slot::Input(1),
                        *k,
                        format!(
                            "keys must be [{batch}, tokens_kv ≥ 1, {hidden}] to match the queries"
                        ),
                    ));
                }
                self.expect_shape(
                    Slot::Input(2),
                    *v,
                    &[batch, tokens_kv, hidden],
                    "to match the keys",
                )?;
                self.expect_shape(Slot::Output, output, qs, "to equal the queries' shape")?;
                if *heads == 0 || hidden % u64::from(*heads) != 0 {
                    return Err(self.attribute_error(
                        "heads",
                        format!(
                            "{heads} heads must be at least 1 and divide the hidden size {hidden}"
                        ),
                    ));
                }
                self.expect_arithmetic_output()
            }
            Op::CastFp8 { input, .. } => {
                self.expect_shape(
                    Slot::Output,
                    output,
                    self.extents(*input),
                    "to equal the input's shape",
                )?;
                if self.precision(output).is_fp8() {
                    Ok(())
                } else {
                    Err(self.precision_error(
                        Slot::Output,
                        output,
                        "a cast_fp8 output must be F143 or F152 with a scale".to_owned(),
                    ))
                }
            }
            Op::Reshape { input, .. } => {
                let (a, b) = (self.graph.tensor(*input), self.graph.tensor(output));
                if a.element_count() != b.element_count() {
                    return Err(self.shape_error(
                        Slot::Output,
                        output,
                        format!(
                            "a reshape keeps the element count {} of the input {:?}",
                            a.element_count(),
                            a.extents()
                        ),
                    ));
                }
                self.expect_same_precision(*input)
            }
            Op::Transpose { input, perm, .. } => {
                let x = self.extents(*input);
                let mut seen = vec![false; x.len()];
                let valid = perm.len() == x.len()
                    && perm.iter().all(|&p| {
                        seen.get_mut(p as usize)
                            .is_some_and(|s| !std::mem::replace(s, true))
                    });
                if !valid {
                    return Err(self.attribute_error(
                        "perm",
                        format!(
                            "{perm:?} must be a permutation of 0..{} (the input's rank)",
                            x.len()
                        ),
                    ));
                }
                let expected: Vec<u64> = perm.iter().map(|&p| x[p as usize]).collect();
                self.expect_shape(
                    Slot::Output,
                    output,
                    &expected,
                    "by permuting the input's axes",
                )?;
                self.expect_same_precision(*input)
            }
            Op::Slice {
                input, axis, start, ..
            } => {
                let x = self.extents(*input);
                let y = self.extents(output);
                let a = *axis as usize;
                if a >= x.len() {
                    return Err(self.attribute_error(
                        "axis",
                        format!("{axis} must name an axis of the rank-{} input", x.len()),
                    ));
                }
                if y.len() != x.len()
                    || x.iter()
                        .zip(y)
                        .enumerate()
                        .any(|(i, (p, q))| i != a && p != q)
                {
                    return Err(self.shape_error(
                        Slot::Output,
                        output,
                        format!("a slice on axis {axis} keeps the input's other extents {x:?}"),
                    ));
                }
                if start.checked_add(y[a]).is_none_or(|end| end > x[a]) {
                    return Err(self.attribute_error(
                        "start",
                        format!(
                            "{start} plus the output extent {} must not exceed the input extent {}",
                            y[a], x[a]
                        ),
                    ));
                }
                self.expect_same_precision(*input)
            }
            Op::Broadcast { input, .. } => {
                let (x, y) = (self.extents(*input), self.extents(output));
                if broadcast_shapes(x, y).as_deref() != Some(y) {
                    return Err(self.shape_error(
                        Slot::Output,
                        output,
                        format!("the input {x:?} must broadcast to it (extents equal or 1, aligned at the last axis)"),
                    ));
                }
                self.expect_same_precision(*input)
            }
        }
    }
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

fn check_repeats(graph: &Graph) -> Result<(), GraphError> {
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
