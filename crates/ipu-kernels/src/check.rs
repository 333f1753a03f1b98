//! The independent checker of built AMP programs.
//!
//! What it checks, from the variant, the row count, the mode and the program
//! alone (it shares no code with the builder: it maps every element of each
//! operand to its byte offset from the definition of `ElementOrder`, and
//! decodes the program's runs back to coordinates through those maps, where
//! the builder generates runs from panel ranges):
//!
//! 1. the header states the variant's precisions, orders (left and output),
//!    dimensions, mode, arithmetic, blocks and left read tail;
//! 2. workers are distinct contexts below the model's worker count;
//! 3. every run is element aligned and inside its operand, and decodes to a
//!    rectangular block: a coefficient load to inner indices `k0..k0+kw` ×
//!    columns `c0..c0+cw` in order, a row stream to rows `r0..r0+n` × inner
//!    indices `k0..k0+kw`, a partial load or store to rows × columns;
//! 4. a row stream matches the coefficient block (same inner range) and the
//!    partials (same rows and columns), and the inner ranges streamed into a
//!    set of partials are `0..inner` in increasing order without gaps;
//! 5. initialise programs start partials at zero and accumulate programs
//!    load them from the very output block they later store;
//! 6. every output element is stored exactly once over all workers.
//!
//! It collects every error instead of stopping at the first.

use ipu_layout::{AmpOperand, ElementOrder, Precision};

use crate::program::{AmpOp, AmpProgram, Run};
use crate::{Mode, Variant, WorkerId};

/// One problem the checker found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// A header field differs from the variant.
    #[error("program header {field} is {found} but the variant needs {expected}")]
    Header {
        /// The field.
        field: &'static str,
        /// What the variant implies.
        expected: String,
        /// What the header says.
        found: String,
    },
    /// A worker context is out of range or repeated.
    #[error("{worker} is invalid: {reason}")]
    Worker {
        /// The worker.
        worker: WorkerId,
        /// What is wrong.
        reason: String,
    },
    /// An op is inconsistent.
    #[error("{worker} op {op}: {reason}")]
    Op {
        /// The worker.
        worker: WorkerId,
        /// The op index.
        op: usize,
        /// What is wrong.
        reason: String,
    },
    /// An output element is stored twice.
    #[error("{worker} op {op} stores output element ({row}, {column}) a second time")]
    DoubleStore {
        /// The worker.
        worker: WorkerId,
        /// The op index.
        op: usize,
        /// Output row.
        row: u32,
        /// Output column.
        column: u32,
    },
    /// Output elements are never stored.
    #[error("{count} output elements are never stored, the first at ({row}, {column})")]
    Uncovered {
        /// How many.
        count: u64,
        /// Row of the first.
        row: u32,
        /// Column of the first.
        column: u32,
    },
    /// The checker could not describe an operand.
    #[error("operand {operand} cannot be described: {reason}")]
    Layout {
        /// Which operand.
        operand: &'static str,
        /// The layout error.
        reason: String,
    },
}

/// Element slot → (row, column) of one operand, from ipu-layout.
struct OperandMap {
    precision: Precision,
    bytes: u64,
    /// For each element slot, `(row, column)`.
    slots: Vec<(u32, u32)>,
}

impl OperandMap {
    /// Maps every element slot of a `rows × columns` operand in `order` to
    /// its coordinates, element by element from the definition of the
    /// order: row major, or AMP panels of `amp_panel_columns` columns (the
    /// last one narrower) each holding every row of its columns.
    fn new(
        name: &'static str,
        rows: u32,
        columns: u32,
        precision: Precision,
        order: ElementOrder,
    ) -> Result<Self, CheckError> {
        let eb = precision.element_bytes();
        let count = u64::from(rows) * u64::from(columns);
        let slots_len = usize::try_from(count).map_err(|_| CheckError::Layout {
            operand: name,
            reason: format!("{rows} x {columns} elements do not fit in memory"),
        })?;
        let mut slots = vec![(u32::MAX, u32::MAX); slots_len];
        let (rows64, columns64) = (u64::from(rows), u64::from(columns));
        let panel = precision.amp_panel_columns();
        for r in 0..rows64 {
            for c in 0..columns64 {
                let slot = match order {
                    ElementOrder::RowMajor => r * columns64 + c,
                    ElementOrder::Amp(_) => {
                        let start = c / panel * panel;
                        let width = panel.min(columns64 - start);
                        start * rows64 + r * width + (c - start)
                    }
                };
                if let Some(entry) = slots.get_mut(slot as usize) {
                    *entry = (r as u32, c as u32);
                }
            }
        }
        Ok(Self {
            precision,
            bytes: count * eb,
            slots,
        })
    }

    /// Decodes `runs` (each with `count` repetitions) into a rectangle: the
    /// repetition index must advance the first coordinate by one and the
    /// elements of the runs, concatenated, must advance the second by one.
    /// Returns `(first0, second0, second_len)`.
    fn decode(&self, runs: &[Run], count: u32) -> Result<(u32, u32, u32), String> {
        let eb = self.precision.element_bytes();
        let mut origin: Option<(u32, u32)> = None;
        let mut cursor = 0u32;
        if runs.is_empty() {
            return Err("no runs".to_owned());
        }
        for (j, run) in runs.iter().enumerate() {
            if run.count != count {
                return Err(format!(
                    "run {j} repeats {} times, expected {count}",
                    run.count
                ));
            }
            if u64::from(run.offset) % eb != 0
                || u64::from(run.stride) % eb != 0
                || u64::from(run.bytes) % eb != 0
                || run.bytes == 0
            {
                return Err(format!("run {j} is not aligned to {eb}-byte elements"));
            }
            let n = (u64::from(run.bytes) / eb) as u32;
            for i in 0..count {
                let start = u64::from(run.offset) + u64::from(i) * u64::from(run.stride);
                if start + u64::from(run.bytes) > self.bytes {
                    return Err(format!(
                        "run {j} repetition {i} ends at {} beyond the operand's {} bytes",
                        start + u64::from(run.bytes),
                        self.bytes
                    ));
                }
                for e in 0..n {
                    let slot = (start / eb + u64::from(e)) as usize;
                    let found = self
                        .slots
                        .get(slot)
                        .copied()
                        .unwrap_or((u32::MAX, u32::MAX));
                    let (a0, b0) = *origin.get_or_insert(found);
                    let expected = (a0.wrapping_add(i), b0.wrapping_add(cursor.wrapping_add(e)));
                    if found != expected {
                        return Err(format!(
                            "run {j} repetition {i} element {e} is ({}, {}), expected ({}, {})",
                            found.0, found.1, expected.0, expected.1
                        ));
                    }
                }
            }
            cursor = cursor.wrapping_add(n);
        }
        let (a0, b0) = origin.unwrap_or((0, 0));
        Ok((a0, b0, cursor))
    }
}

/// The partials a worker is accumulating.
struct Partials {
    rows: u32,
    columns: u32,
    /// First output row, once known.
    row0: Option<u32>,
    /// First output column, once known.
    column0: Option<u32>,
    /// The next inner index a stream must start at.
    next_inner: u32,
}

/// Checks a built program against its variant, row count and mode.
pub fn check_program(
    variant: &Variant,
    rows: u32,
    mode: Mode,
    program: &AmpProgram,
) -> Result<(), Vec<CheckError>> {
    let mut errors = Vec::new();
    let s = variant.shape();
    let h = &program.header;
    let mut header = |field: &'static str, expected: String, found: String| {
        if expected != found {
            errors.push(CheckError::Header {
                field,
                expected,
                found,
            });
        }
    };
    header("left", s.left.to_string(), h.left.to_string());
    header("right", s.right.to_string(), h.right.to_string());
    header("output", s.output.to_string(), h.output.to_string());
    header(
        "left_order",
        format!("{:?}", s.left_order),
        format!("{:?}", h.left_order),
    );
    header(
        "output_order",
        format!("{:?}", s.output_order),
        format!("{:?}", h.output_order),
    );
    header(
        "right_class",
        s.right_class.to_string(),
        h.right_class.to_string(),
    );
    header("mode", mode.name().to_owned(), h.mode.name().to_owned());
    header(
        "arithmetic",
        format!("{:?}", variant.arithmetic()),
        format!("{:?}", h.arithmetic),
    );
    header("rows", rows.to_string(), h.rows.to_string());
    header("inner", s.inner.to_string(), h.inner.to_string());
    header("columns", s.columns.to_string(), h.columns.to_string());
    header("k", variant.k().to_string(), h.k.to_string());
    header("c", variant.c().to_string(), h.c.to_string());
    header(
        "left_tail_bytes",
        variant.left_tail_bytes().to_string(),
        h.left_tail_bytes.to_string(),
    );
    header(
        "alignment",
        variant.model().operand_alignment.to_string(),
        h.alignment.to_string(),
    );
    if !errors.is_empty() {
        // The operand maps below would describe the wrong operands.
        return Err(errors);
    }

    let maps = (
        // The variant's left order, not the header's: the two are equal
        // once the header checks pass, and the variant is what the caller
        // lays the operand out by.
        OperandMap::new("left", rows, s.inner, s.left, s.left_order),
        OperandMap::new(
            "right",
            s.inner,
            s.columns,
            s.right,
            ElementOrder::Amp(AmpOperand::Right),
        ),
        OperandMap::new("output", rows, s.columns, s.output, s.output_order),
    );
    let (left, right, output) = match maps {
        (Ok(l), Ok(r), Ok(o)) => (l, r, o),
        (l, r, o) => {
            errors.extend([l.err(), r.err(), o.err()].into_iter().flatten());
            return Err(errors);
        }
    };

    let mut stored = vec![false; rows as usize * s.columns as usize];
    let mut seen = vec![false; variant.model().worker_contexts as usize];
    for w in &program.workers {
        let id = w.worker;
        match seen.get_mut(id.as_u32() as usize) {
            None => errors.push(CheckError::Worker {
                worker: id,
                reason: format!(
                    "the target has {} worker contexts",
                    variant.model().worker_contexts
                ),
            }),
            Some(true) => errors.push(CheckError::Worker {
                worker: id,
                reason: "it appears twice".to_owned(),
            }),
            Some(flag) => *flag = true,
        }
        let mut coefficients: Option<(u32, u32, u32, u32)> = None;
        let mut partials: Option<Partials> = None;
        for (i, op) in w.ops.iter().enumerate() {
            let mut fail = |reason: String| {
                errors.push(CheckError::Op {
                    worker: id,
                    op: i,
                    reason,
                })
            };
            match op {
                AmpOp::LoadCoefficients {
                    inner,
                    columns,
                    runs,
                } => match right.decode(runs, *inner) {
                    Ok((k0, c0, cw)) if cw == *columns => {
                        coefficients = Some((k0, *inner, c0, cw));
                    }
                    Ok((_, _, cw)) => {
                        fail(format!("runs cover {cw} columns, the op says {columns}"));
                        coefficients = None;
                    }
                    Err(e) => {
                        fail(format!("weight runs: {e}"));
                        coefficients = None;
                    }
                },
                AmpOp::ZeroPartials { rows: n, columns } => {
                    if mode != Mode::Initialise {
                        fail("an accumulate program must load its partials, not zero them".into());
                    }
                    if partials.is_some() {
                        fail("partials restarted before they were stored".into());
                    }
                    partials = Some(Partials {
                        rows: *n,
                        columns: *columns,
                        row0: None,
                        column0: None,
                        next_inner: 0,
                    });
                }
                AmpOp::LoadPartials {
                    rows: n,
                    columns,
                    runs,
                } => {
                    if mode != Mode::Accumulate {
                        fail("an initialise program must not read the output".into());
                    }
                    if partials.is_some() {
                        fail("partials restarted before they were stored".into());
                    }
                    match output.decode(runs, *n) {
                        Ok((r0, c0, cw)) if cw == *columns => {
                            partials = Some(Partials {
                                rows: *n,
                                columns: *columns,
                                row0: Some(r0),
                                column0: Some(c0),
                                next_inner: 0,
                            });
                        }
                        Ok((_, _, cw)) => {
                            fail(format!("runs cover {cw} columns, the op says {columns}"))
                        }
                        Err(e) => fail(format!("output runs: {e}")),
                    }
                }
                AmpOp::StreamRows {
                    rows: n,
                    inner,
                    runs,
                } => {
                    let Some((k0, kw, c0, cw)) = coefficients else {
                        fail("rows streamed without a valid coefficient block".into());
                        continue;
                    };
                    let Some(p) = partials.as_mut() else {
                        fail("rows streamed without partials".into());
                        continue;
                    };
                    let (r0, lk0, lkw) = match left.decode(runs, *n) {
                        Ok(v) => v,
                        Err(e) => {
                            fail(format!("left runs: {e}"));
                            continue;
                        }
                    };
                    if lkw != *inner || *inner != kw || lk0 != k0 {
                        fail(format!(
                            "left inner range {lk0}..{} does not match the coefficients' {k0}..{}",
                            lk0 + lkw,
                            k0 + kw
                        ));
                    }
                    if *n != p.rows || cw != p.columns {
                        fail(format!(
                            "stream {n} rows x {cw} columns does not match partials {} x {}",
                            p.rows, p.columns
                        ));
                    }
                    if *p.row0.get_or_insert(r0) != r0 {
                        fail(format!(
                            "stream starts at row {r0}, the partials' rows differ"
                        ));
                    }
                    if *p.column0.get_or_insert(c0) != c0 {
                        fail(format!(
                            "coefficients start at column {c0}, the partials' columns differ"
                        ));
                    }
                    if p.next_inner != k0 {
                        fail(format!(
                            "stream adds inner {k0}..{} but the partials hold 0..{}",
                            k0 + kw,
                            p.next_inner
                        ));
                    }
                    p.next_inner = k0 + kw;
                }
                AmpOp::StorePartials {
                    rows: n,
                    columns,
                    runs,
                } => {
                    let Some(p) = partials.take() else {
                        fail("partials stored before they started".into());
                        continue;
                    };
                    let (r0, c0, cw) = match output.decode(runs, *n) {
                        Ok(v) => v,
                        Err(e) => {
                            fail(format!("output runs: {e}"));
                            continue;
                        }
                    };
                    if *n != p.rows || *columns != p.columns || cw != p.columns {
                        fail(format!(
                            "store {n} x {cw} does not match partials {} x {}",
                            p.rows, p.columns
                        ));
                        continue;
                    }
                    if p.row0.is_some_and(|x| x != r0) || p.column0.is_some_and(|x| x != c0) {
                        fail(format!(
                            "store at ({r0}, {c0}) is not where the partials were computed"
                        ));
                    }
                    if p.next_inner != s.inner {
                        fail(format!(
                            "partials hold inner 0..{} of {}",
                            p.next_inner, s.inner
                        ));
                    }
                    for r in r0..r0.saturating_add(*n) {
                        for c in c0..c0.saturating_add(cw) {
                            let index = r as usize * s.columns as usize + c as usize;
                            match stored.get_mut(index) {
                                Some(flag) if !*flag => *flag = true,
                                _ => errors.push(CheckError::DoubleStore {
                                    worker: id,
                                    op: i,
                                    row: r,
                                    column: c,
                                }),
                            }
                        }
                    }
                }
            }
        }
        if partials.is_some() {
            errors.push(CheckError::Worker {
                worker: id,
                reason: "its last partials are never stored".to_owned(),
            });
        }
    }
    let missing = stored.iter().filter(|&&s| !s).count() as u64;
    if let Some(first) = stored.iter().position(|&s| !s) {
        let columns = s.columns.max(1) as usize;
        errors.push(CheckError::Uncovered {
            count: missing,
            row: (first / columns) as u32,
            column: (first % columns) as u32,
        });
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}
