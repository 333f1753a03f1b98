//! What a codelet touches: every operand's byte span inside its buffer's
//! shard on the calling tile, and the work the call does.
//!
//! The spans follow the codelets' definitions on [`Codelet`] as the tile
//! model runs them (reads and writes through the operand's buffer, at the
//! buffer's precision; strided rows span `(rows − 1) · stride + columns`
//! elements; the attention combine steps blocks in F32 words). Validation
//! checks every span against the shard before a run, so that no codelet
//! argument read from a file can make a run index, multiply or allocate
//! past what the tile holds. All arithmetic is checked: an argument whose
//! span does not fit in `u64` is reported as such.
//!
//! Strided rows must not overlap (a stride of at least the row's columns,
//! and attention blocks at least a block apart): a codelet holds the rows
//! it reads as values, so overlapping rows would let a small span stand
//! for an unbounded number of values.

use ipu_layout::Precision;

use crate::program::{Codelet, GemmKernel, MAX_PROB_EXPONENT, Operand};

/// Why an access has no span.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpanError {
    /// The span does not fit in 64 bits.
    #[error("its span does not fit in 64 bits")]
    Overflow,
    /// Strided rows or blocks overlap.
    #[error("its rows or blocks, {stride} elements apart, overlap ({extent} elements each)")]
    Overlap {
        /// The stride in elements.
        stride: u64,
        /// Elements of one row or block.
        extent: u64,
    },
    /// An output extent is smaller than the data written into it.
    #[error("its {what} is {extent}, smaller than the {data} it must hold")]
    TooSmall {
        /// Which extent.
        what: &'static str,
        /// The extent given.
        extent: u64,
        /// The data it must hold.
        data: u64,
    },
    /// An attribute is beyond what the codelet supports.
    #[error("its {what} is {value}, above the largest supported, {max}")]
    TooLarge {
        /// Which attribute.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The largest supported.
        max: u64,
    },
}

/// One operand access of a codelet: `bytes` bytes from the operand's
/// offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The operand's name in [`Codelet`] (`left`, `q`, `workspace`, ...).
    pub slot: &'static str,
    /// The operand.
    pub operand: Operand,
    /// Bytes from the operand's offset.
    pub bytes: Result<u64, SpanError>,
}

impl Access {
    /// The end of the access inside the shard.
    pub fn end(&self) -> Result<u64, SpanError> {
        self.bytes?
            .checked_add(u64::from(self.operand.offset))
            .ok_or(SpanError::Overflow)
    }
}

/// `a · b` in `u64`.
fn mul(a: u64, b: u64) -> Result<u64, SpanError> {
    a.checked_mul(b).ok_or(SpanError::Overflow)
}

/// Elements spanned by `rows` rows of `cols` elements, `stride` apart;
/// rows must not overlap.
fn rows_span(rows: u32, cols: u32, stride: u32) -> Result<u64, SpanError> {
    if rows == 0 {
        return Ok(0);
    }
    if rows > 1 && stride < cols {
        return Err(SpanError::Overlap {
            stride: u64::from(stride),
            extent: u64::from(cols),
        });
    }
    mul(u64::from(rows - 1), u64::from(stride))?
        .checked_add(u64::from(cols))
        .ok_or(SpanError::Overflow)
}

/// Elements a strided write of `rows × cols` values touches: nothing when
/// there are no values.
fn write_span(rows: u32, cols: u32, stride: u32) -> Result<u64, SpanError> {
    if rows == 0 || cols == 0 {
        return Ok(0);
    }
    rows_span(rows, cols, stride)
}

/// Every operand access of `codelet` and its work in compute elements.
///
/// `precision` gives the element precision of an operand's buffer (after
/// any repeat substitution); `kernel` the GEMM kernel spec a
/// [`Codelet::Gemm`] names (`None` if it names none, when its operands get
/// no span and its work counts as zero: the caller reports the kernel).
/// The work is `Err` only when it does not fit in 64 bits.
pub fn codelet_accesses(
    codelet: &Codelet,
    precision: &dyn Fn(Operand) -> Precision,
    kernel: Option<&GemmKernel>,
) -> (Vec<Access>, Result<u64, SpanError>) {
    let bytes = |o: Operand, elements: Result<u64, SpanError>| -> Result<u64, SpanError> {
        mul(elements?, precision(o).element_bytes())
    };
    let access = |slot: &'static str, operand: Operand, elements: Result<u64, SpanError>| Access {
        slot,
        operand,
        bytes: bytes(operand, elements),
    };
    let raw = |slot: &'static str, operand: Operand, bytes: Result<u64, SpanError>| Access {
        slot,
        operand,
        bytes,
    };
    match *codelet {
        Codelet::Gemm {
            rows,
            left,
            right,
            output,
            ..
        } => {
            let Some(k) = kernel else {
                return (Vec::new(), Ok(0));
            };
            let (r, i, c) = (u64::from(rows), u64::from(k.inner), u64::from(k.columns));
            (
                vec![
                    access("left", left, mul(r, i)),
                    access("right", right, mul(i, c)),
                    access("output", output, mul(r, c)),
                ],
                mul(r, i).and_then(|x| mul(x, c)),
            )
        }
        Codelet::Add {
            a,
            b,
            out,
            rows,
            cols,
            broadcast_rows,
        } => {
            let n = mul(u64::from(rows), u64::from(cols));
            let nb = if broadcast_rows {
                Ok(u64::from(cols))
            } else {
                n
            };
            (
                vec![access("a", a, n), access("b", b, nb), access("out", out, n)],
                n,
            )
        }
        Codelet::LayerNorm {
            input,
            scale,
            bias,
            output,
            rows,
            cols,
            ..
        } => {
            let n = mul(u64::from(rows), u64::from(cols));
            let c = Ok(u64::from(cols));
            (
                vec![
                    access("input", input, n),
                    access("scale", scale, c),
                    access("bias", bias, c),
                    access("output", output, n),
                ],
                n,
            )
        }
        Codelet::Activation {
            input,
            output,
            elements,
            ..
        }
        | Codelet::Convert {
            input,
            output,
            elements,
        } => {
            let n = Ok(u64::from(elements));
            (
                vec![access("input", input, n), access("output", output, n)],
                n,
            )
        }
        Codelet::ReduceSum {
            input,
            output,
            count,
            elements,
        } => {
            let n = mul(u64::from(count), u64::from(elements));
            (
                vec![
                    access("input", input, n),
                    access("output", output, Ok(u64::from(elements))),
                ],
                n,
            )
        }
        Codelet::AttentionBlock {
            q,
            k,
            v,
            out,
            max,
            sum,
            workspace,
            q_rows,
            kv_rows,
            head_dim,
            q_stride,
            kv_stride,
            out_stride,
            ..
        } => {
            let kv = rows_span(kv_rows, head_dim, kv_stride);
            let rq = Ok(u64::from(q_rows));
            // Scores against every key, then the weighted sum of values.
            let work = mul(u64::from(q_rows), u64::from(kv_rows))
                .and_then(|x| mul(x, u64::from(head_dim)))
                .and_then(|x| mul(x, 2));
            (
                vec![
                    access("q", q, rows_span(q_rows, head_dim, q_stride)),
                    access("k", k, kv),
                    access("v", v, kv),
                    access("out", out, write_span(q_rows, head_dim, out_stride)),
                    access("max", max, rq),
                    access("sum", sum, rq),
                    // The scratch row is F32 whatever the buffer says.
                    raw("workspace", workspace, mul(u64::from(kv_rows), 4)),
                ],
                work,
            )
        }
        Codelet::AttentionCombine {
            out,
            max,
            sum,
            output,
            blocks,
            q_rows,
            head_dim,
            out_block_stride,
            out_row_stride,
            stat_block_stride,
            output_row_stride,
            sums_in_blocks,
        } => {
            let eb = |o: Operand| precision(o).element_bytes();
            // Block `b` starts `b · stride` elements after the operand; the
            // last block reaches furthest. Blocks must not overlap.
            let last =
                |o: Operand, stride: u32, span: Result<u64, SpanError>| -> Result<u64, SpanError> {
                    let span = span?;
                    if blocks == 0 {
                        return Ok(0);
                    }
                    let step = mul(u64::from(stride), eb(o))?;
                    if blocks > 1 && step < span {
                        return Err(SpanError::Overlap {
                            stride: u64::from(stride),
                            extent: span.div_ceil(eb(o).max(1)),
                        });
                    }
                    mul(u64::from(blocks - 1), step)?
                        .checked_add(span)
                        .ok_or(SpanError::Overflow)
                };
            let rq = u64::from(q_rows);
            let out_span =
                rows_span(q_rows, head_dim, out_row_stride).and_then(|n| mul(n, eb(out)));
            let stat = |o: Operand| mul(rq, eb(o));
            let work = mul(u64::from(blocks), rq).and_then(|x| mul(x, u64::from(head_dim)));
            (
                vec![
                    raw("out", out, last(out, out_block_stride, out_span)),
                    raw("max", max, last(max, stat_block_stride, stat(max))),
                    if sums_in_blocks {
                        // One element a row, laid out as the blocks' rows.
                        let span =
                            rows_span(q_rows, 1, out_row_stride).and_then(|n| mul(n, eb(sum)));
                        raw("sum", sum, last(sum, out_block_stride, span))
                    } else {
                        raw("sum", sum, last(sum, stat_block_stride, stat(sum)))
                    },
                    access(
                        "output",
                        output,
                        write_span(q_rows, head_dim, output_row_stride),
                    ),
                ],
                work,
            )
        }
        Codelet::AttentionSoftmax {
            scores,
            probs,
            max,
            sum,
            rows,
            columns,
            stride,
            exponent,
            ..
        } => {
            // Whole rows of `stride` elements are written (the scores'
            // columns, then zeros); the scores of `columns` keys are read.
            let span = if columns > stride {
                Err(SpanError::TooSmall {
                    what: "stride",
                    extent: u64::from(stride),
                    data: u64::from(columns),
                })
            } else if exponent > MAX_PROB_EXPONENT {
                Err(SpanError::TooLarge {
                    what: "probabilities' scale exponent",
                    value: u64::from(exponent),
                    max: u64::from(MAX_PROB_EXPONENT),
                })
            } else {
                write_span(rows, stride, stride)
            };
            let rq = Ok(u64::from(rows));
            let mut accesses = vec![
                access("scores", scores, span.and(rows_span(rows, columns, stride))),
                access("probs", probs, span),
                access("max", max, rq),
            ];
            accesses.extend(sum.map(|sum| access("sum", sum, rq)));
            (accesses, mul(u64::from(rows), u64::from(stride)))
        }
        Codelet::Panels {
            input,
            output,
            rows,
            cols,
            stride,
            out_rows,
            out_cols,
            transpose,
            ones,
        } => {
            let written = mul(u64::from(out_rows), u64::from(out_cols));
            let (data_rows, data_cols) = if transpose {
                (cols, rows)
            } else {
                (rows, cols)
            };
            let fits = if out_rows < data_rows {
                Err(SpanError::TooSmall {
                    what: "out_rows",
                    extent: u64::from(out_rows),
                    data: u64::from(data_rows),
                })
            } else if out_cols < data_cols {
                Err(SpanError::TooSmall {
                    what: "out_cols",
                    extent: u64::from(out_cols),
                    data: u64::from(data_cols),
                })
            } else if ones && (transpose || out_cols <= cols) {
                // The column of ones needs a column past the values'.
                Err(SpanError::TooSmall {
                    what: "out_cols (with the column of ones)",
                    extent: u64::from(out_cols),
                    data: u64::from(cols) + 1,
                })
            } else {
                Ok(())
            };
            (
                vec![
                    access("input", input, rows_span(rows, cols, stride)),
                    access("output", output, fits.and(written)),
                ],
                written,
            )
        }
        Codelet::Zero {
            target,
            bytes,
            runs,
            stride,
        } => {
            // Run `i` starts `i · stride` bytes on; runs must not overlap.
            let span = if runs > 1 && stride < bytes {
                Err(SpanError::TooSmall {
                    what: "run stride in bytes",
                    extent: u64::from(stride),
                    data: u64::from(bytes),
                })
            } else if runs == 0 {
                Ok(0)
            } else {
                mul(u64::from(runs - 1), u64::from(stride))
                    .and_then(|x| x.checked_add(u64::from(bytes)).ok_or(SpanError::Overflow))
            };
            (
                vec![raw("target", target, span)],
                mul(u64::from(bytes), u64::from(runs)),
            )
        }
        Codelet::Gather {
            table,
            indices,
            output,
            rows,
            table_rows,
            cols,
            ..
        } => {
            let n = mul(u64::from(rows), u64::from(cols));
            (
                vec![
                    access("table", table, mul(u64::from(table_rows), u64::from(cols))),
                    access("indices", indices, Ok(u64::from(rows))),
                    access("output", output, n),
                ],
                n,
            )
        }
    }
}
