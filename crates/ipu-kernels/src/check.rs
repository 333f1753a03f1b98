//! The independent checker of built AMP programs.
//!
//! What it checks, from the variant, the row count, the mode and the program
//! alone (it shares no code with the builder: it maps every element of each
//! operand to its byte offset from the definition of `ElementOrder`, and
//! decodes the program's runs back to coordinates through those maps, where
//! the builder generates runs from panel ranges):
//!
//! 1. the header states the variant's precisions, orders (left and output),
//!    dimensions, mode, arithmetic, pass shape and left read tail;
//! 2. each pass's coefficient load decodes to one tile of at most `k × c`
//!    weights, and the passes of a group share the slice of the
//!    arithmetic's outer loop (the inner slice on the F16 path, the column
//!    slice on the FP8 path), which consecutive groups change;
//! 3. a pass's workers are distinct contexts below the model's worker
//!    count, and no two of them touch the same output element;
//! 4. every run is element aligned and inside its operand, and decodes to a
//!    rectangular block: a coefficient load to inner indices `k0..k0+kw` ×
//!    columns `c0..c0+cw` in order, a row stream to rows `r0..r0+n` × inner
//!    indices `k0..k0+kw`, a partial load or store to rows × columns;
//! 5. a worker's part of a pass starts partials (zero or loaded), streams
//!    rows into them and stores them, in that order: the stream matches the
//!    pass's coefficients (same inner range) and the partials (same rows and
//!    columns), and partials are loaded from the very output block they are
//!    stored to;
//! 6. every output element's passes add the inner slices `0..inner` in
//!    increasing order without gaps or repeats: the first starts from zero
//!    (initialise) or from the output (accumulate), every later one from
//!    the output the one before stored; at the end every element holds
//!    `0..inner`.
//!
//! It collects every error instead of stopping at the first.

use ipu_layout::{AmpOperand, ElementOrder, Precision};

use crate::program::{AmpOp, AmpProgram, OuterLoop, Pass, Run};
use crate::{Mode, OpSite, Variant, WorkerId};

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
    /// A group's passes do not share its outer-loop slice.
    #[error("group {group}: {reason}")]
    Group {
        /// The group index.
        group: usize,
        /// What is wrong.
        reason: String,
    },
    /// A worker context of a pass is out of range or repeated.
    #[error("pass {pass} {worker} is invalid: {reason}")]
    Worker {
        /// The pass, counted over the program.
        pass: usize,
        /// The worker.
        worker: WorkerId,
        /// What is wrong.
        reason: String,
    },
    /// An op (or a pass's coefficient load) is inconsistent.
    #[error("{site}: {reason}")]
    Op {
        /// Where it is.
        site: OpSite,
        /// What is wrong.
        reason: String,
    },
    /// Two workers of one pass touch the same output element.
    #[error(
        "{site} touches output element ({row}, {column}), which another worker of the pass also touches"
    )]
    Overlap {
        /// The later op.
        site: OpSite,
        /// Output row.
        row: u32,
        /// Output column.
        column: u32,
    },
    /// Output elements do not end holding the whole inner dimension.
    #[error(
        "{count} output elements do not end holding inner 0..{inner}, the first at ({row}, {column})"
    )]
    Uncovered {
        /// How many.
        count: u64,
        /// The inner dimension.
        inner: u32,
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

/// The partials a worker is accumulating in a pass.
struct Partials {
    rows: u32,
    columns: u32,
    /// `(first row, first column)`, once known (a zero start has none).
    origin: Option<(u32, u32)>,
    /// Whether they were loaded from the output.
    loaded: bool,
    /// Whether rows were streamed into them.
    streamed: bool,
}

/// What the output holds, element by element, as the checker follows the
/// passes: the inner elements summed into each so far.
struct Progress {
    columns: u32,
    /// Per element, row major: `None` before any pass stored it, else the
    /// end of the inner range it holds (`0..end`).
    done: Vec<Option<u32>>,
    /// Per element, one more than the last pass that stored it (0: none),
    /// to find two workers of one pass on one element.
    stored_in: Vec<usize>,
}

impl Progress {
    fn cells(
        &self,
        r0: u32,
        n: u32,
        c0: u32,
        cw: u32,
    ) -> impl Iterator<Item = (u32, u32, usize)> + '_ {
        let columns = self.columns as usize;
        (r0..r0.saturating_add(n)).flat_map(move |r| {
            (c0..c0.saturating_add(cw)).map(move |c| (r, c, r as usize * columns + c as usize))
        })
    }
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

    let mut progress = Progress {
        columns: s.columns,
        done: vec![None; rows as usize * s.columns as usize],
        stored_in: vec![0; rows as usize * s.columns as usize],
    };
    let outer = variant.arithmetic().outer_loop();
    let mut index = 0usize;
    let mut previous_slice: Option<u32> = None;
    for (g, group) in program.groups.iter().enumerate() {
        let mut slice: Option<u32> = None;
        if group.passes.is_empty() {
            errors.push(CheckError::Group {
                group: g,
                reason: "it has no passes".to_owned(),
            });
        }
        for pass in &group.passes {
            let tile = check_pass(
                variant,
                mode,
                &(&left, &right, &output),
                pass,
                index,
                &mut progress,
                &mut errors,
            );
            if let Some((k0, c0)) = tile {
                let this = match outer {
                    OuterLoop::Inner => k0,
                    OuterLoop::Columns => c0,
                };
                if *slice.get_or_insert(this) != this {
                    errors.push(CheckError::Group {
                        group: g,
                        reason: format!(
                            "pass {index} is outside the group's {} slice",
                            outer_name(outer)
                        ),
                    });
                }
            }
            index += 1;
        }
        if slice.is_some() && slice == previous_slice {
            errors.push(CheckError::Group {
                group: g,
                reason: format!(
                    "it repeats the {} slice of the group before it",
                    outer_name(outer)
                ),
            });
        }
        previous_slice = slice;
    }
    let unfinished: Vec<usize> = progress
        .done
        .iter()
        .enumerate()
        .filter(|&(_, &d)| d != Some(s.inner))
        .map(|(i, _)| i)
        .collect();
    if let Some(&first) = unfinished.first() {
        let columns = s.columns.max(1) as usize;
        errors.push(CheckError::Uncovered {
            count: unfinished.len() as u64,
            inner: s.inner,
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

fn outer_name(outer: OuterLoop) -> &'static str {
    match outer {
        OuterLoop::Inner => "inner",
        OuterLoop::Columns => "column",
    }
}

/// Checks one pass (number `index` of the program), advancing `progress`
/// by its stores; returns the tile's `(k0, c0)` when its load decodes.
fn check_pass(
    variant: &Variant,
    mode: Mode,
    (left, right, output): &(&OperandMap, &OperandMap, &OperandMap),
    pass: &Pass,
    index: usize,
    progress: &mut Progress,
    errors: &mut Vec<CheckError>,
) -> Option<(u32, u32)> {
    let load = &pass.coefficients;
    let site = OpSite::load(index);
    let tile = match right.decode(&load.runs, load.inner) {
        Ok((k0, c0, cw)) if cw == load.columns => {
            if load.inner > variant.k() || cw > variant.c() {
                errors.push(CheckError::Op {
                    site,
                    reason: format!(
                        "a {} x {cw} tile is larger than the {} x {} the coefficient registers hold",
                        load.inner,
                        variant.k(),
                        variant.c()
                    ),
                });
            }
            Some((k0, load.inner, c0, cw))
        }
        Ok((_, _, cw)) => {
            errors.push(CheckError::Op {
                site,
                reason: format!("runs cover {cw} columns, the load says {}", load.columns),
            });
            None
        }
        Err(e) => {
            errors.push(CheckError::Op {
                site,
                reason: format!("weight runs: {e}"),
            });
            None
        }
    };
    let workers = variant.model().worker_contexts;
    let mut seen = vec![false; workers as usize];
    for w in &pass.workers {
        let id = w.worker;
        match seen.get_mut(id.as_u32() as usize) {
            None => errors.push(CheckError::Worker {
                pass: index,
                worker: id,
                reason: format!("the target has {workers} worker contexts"),
            }),
            Some(true) => errors.push(CheckError::Worker {
                pass: index,
                worker: id,
                reason: "it appears twice in the pass".to_owned(),
            }),
            Some(flag) => *flag = true,
        }
        let mut partials: Option<Partials> = None;
        for (i, op) in w.ops.iter().enumerate() {
            let site = OpSite::worker(index, id, i);
            let mut fail = |reason: String| errors.push(CheckError::Op { site, reason });
            match op {
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
                        origin: None,
                        loaded: false,
                        streamed: false,
                    });
                }
                AmpOp::LoadPartials {
                    rows: n,
                    columns,
                    runs,
                } => {
                    if partials.is_some() {
                        fail("partials restarted before they were stored".into());
                    }
                    match output.decode(runs, *n) {
                        Ok((r0, c0, cw)) if cw == *columns => {
                            partials = Some(Partials {
                                rows: *n,
                                columns: *columns,
                                origin: Some((r0, c0)),
                                loaded: true,
                                streamed: false,
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
                    let Some((k0, kw, c0, cw)) = tile else {
                        fail("rows streamed without a valid coefficient tile".into());
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
                    if *p.origin.get_or_insert((r0, c0)) != (r0, c0) {
                        fail(format!(
                            "stream at ({r0}, {c0}) is not where the partials were loaded"
                        ));
                    }
                    if p.streamed {
                        fail("a second stream into the same partials in one pass".into());
                    }
                    p.streamed = true;
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
                    if p.origin.is_some_and(|o| o != (r0, c0)) {
                        fail(format!(
                            "store at ({r0}, {c0}) is not where the partials were computed"
                        ));
                    }
                    let Some((k0, kw, _, _)) = tile.filter(|_| p.streamed) else {
                        fail("partials stored without a stream of rows into them".into());
                        continue;
                    };
                    // What each element must hold before this pass: nothing
                    // (an initialise call's first slice, from zero), the
                    // output's own value (an accumulate call's first slice,
                    // loaded), or the slices before `k0` (loaded).
                    let mut wrong = None;
                    let cells: Vec<_> = progress.cells(r0, *n, c0, cw).collect();
                    for (r, c, cell) in cells {
                        if let Some(stamp) = progress.stored_in.get_mut(cell) {
                            if *stamp == index + 1 {
                                errors.push(CheckError::Overlap {
                                    site: OpSite::worker(index, id, i),
                                    row: r,
                                    column: c,
                                });
                                continue;
                            }
                            *stamp = index + 1;
                        }
                        let before = progress.done.get(cell).copied().flatten();
                        let ok = match (p.loaded, before) {
                            (false, None) => k0 == 0 && mode == Mode::Initialise,
                            (true, None) => k0 == 0 && mode == Mode::Accumulate,
                            (true, Some(end)) => end == k0 && k0 > 0,
                            (false, Some(_)) => false,
                        };
                        if !ok && wrong.is_none() {
                            wrong = Some((r, c, before));
                        }
                        if let Some(d) = progress.done.get_mut(cell) {
                            *d = Some(k0 + kw);
                        }
                    }
                    if let Some((r, c, before)) = wrong {
                        let held = match before {
                            None => "nothing this call stored".to_owned(),
                            Some(end) => format!("inner 0..{end}"),
                        };
                        errors.push(CheckError::Op {
                            site: OpSite::worker(index, id, i),
                            reason: format!(
                                "adds inner {k0}..{} to ({r}, {c}) {} partials, which hold {held}",
                                k0 + kw,
                                if p.loaded { "loaded" } else { "zero" }
                            ),
                        });
                    }
                }
            }
        }
        if partials.is_some() {
            errors.push(CheckError::Worker {
                pass: index,
                worker: id,
                reason: "its partials are never stored".to_owned(),
            });
        }
    }
    tile.map(|(k0, _, c0, _)| (k0, c0))
}
