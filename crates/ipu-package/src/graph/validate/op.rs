//! The rules of one op: operand shapes, precisions and attributes, each
//! broken rule reported with the op, slot and tensor involved.

use ipu_layout::Precision;

use super::{GraphError, Slot, broadcast_shapes};
use crate::graph::{AttentionMask, Graph, MAX_GATHER_ROWS, Op, OpId, TensorId, gather_table_rows};

/// The checks of one op; the topology check has already made every id
/// valid.
pub(super) struct OpCheck<'a> {
    pub(super) graph: &'a Graph,
    pub(super) id: OpId,
    pub(super) op: &'a Op,
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

    pub(super) fn run(&self) -> Result<(), GraphError> {
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
            Op::Activation { input, .. } => {
                self.expect_shape(
                    Slot::Output,
                    output,
                    self.extents(*input),
                    "to equal the input's shape",
                )?;
                self.expect_arithmetic_output()
            }
            Op::Attention {
                q,
                k,
                v,
                heads,
                mask,
                ..
            } => {
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
                let tokens_q = qs.get(1).copied().unwrap_or(0);
                if *mask == AttentionMask::Causal && tokens_q != tokens_kv {
                    return Err(self.attribute_error(
                        "mask",
                        format!(
                            "a causal mask needs as many query rows as keys, found {tokens_q} and {tokens_kv}"
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
            Op::Gather { table, indices, .. } => {
                let Some((rows, d)) = gather_table_rows(self.extents(*table)) else {
                    return Err(self.shape_error(
                        Slot::Input(0),
                        *table,
                        "a gather table must be [rows.., d] (rank at least 2)".to_owned(),
                    ));
                };
                if rows > MAX_GATHER_ROWS {
                    return Err(self.shape_error(
                        Slot::Input(0),
                        *table,
                        format!(
                            "at most {MAX_GATHER_ROWS} rows are needed, so that every row number is exact in F32"
                        ),
                    ));
                }
                let ix = self.extents(*indices);
                if ix.is_empty() {
                    return Err(self.shape_error(
                        Slot::Input(1),
                        *indices,
                        "gather indices need rank at least 1".to_owned(),
                    ));
                }
                if self.precision(*indices) != Precision::F32 {
                    return Err(self.precision_error(
                        Slot::Input(1),
                        *indices,
                        "gather indices are row numbers held exactly in F32".to_owned(),
                    ));
                }
                let mut expected = ix.to_vec();
                expected.push(d);
                self.expect_shape(
                    Slot::Output,
                    output,
                    &expected,
                    "for the indices' shape followed by the table's row length",
                )?;
                self.expect_arithmetic_output()
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
