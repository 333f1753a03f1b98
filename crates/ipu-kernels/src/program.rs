//! AMP programs: the explicit sequence of passes a GEMM kernel performs on
//! tile memory, how a variant builds one, and its versioned binary form.
//!
//! The AMP has one set of coefficient (weight) registers per tile, which
//! only the supervisor may write (`$CWEI_*`, loaded from memory by
//! `ld128putcs`/`ld64putcs`), shared by the six workers. A call is
//! therefore a sequence of *passes*: in each, the supervisor loads one
//! weight tile of up to `k × c` elements (the variant's pass shape: the
//! arithmetic's micro inner extent by 16 columns), starts the workers and
//! syncs with them; each worker streams its own range of rows through the
//! AMP against that tile, its partials starting at zero (the first inner
//! pass of an initialise call) or loaded from the output, and stores them
//! back to the output. The output therefore holds the running partials
//! between passes; partials are in the output precision, so storing and
//! reloading them changes no bit. Passes are grouped as the supervisor's
//! outer loop runs (see [`OuterLoop`]): the F16-row path loops over inner
//! slices outermost, the FP8 path over column slices.
//!
//! A program has a header (precisions, dimensions, orders, mode) and its
//! groups of passes. Ops address memory by [`Run`]s relative to an operand
//! base, so one program serves any placement: the caller passes the
//! absolute operand addresses ([`crate::KernelArgs`]) when it runs.
//!
//! The left operand's rows are streamed panel by panel in `Amp(Left)` order
//! (a pass's inner slice is one panel wide, so one run) or row by row in
//! row-major order (one run: offset `(r0 × inner + k0) × eb`, bytes
//! `kw × eb`, stride `inner × eb`). The AMP's read tail is the same in both
//! orders: what a row-major run reads past its last byte is the rest of its
//! row, or the tail after the operand's end for the last row's last slice.
//!
//! The binary form is little endian:
//!
//! ```text
//! magic "IPUAMP\0\0", version u16 (3),
//! header: left, right, output precision (tag u8, scale i8 each; tags 0 F32,
//!         1 F16, 2 F143, 3 F152), output order u8 (0 RowMajor, 1 Amp(Output)),
//!         left order u8 (0 RowMajor, 1 Amp(Left)), weight class u8
//!         (0 standard, 1 interleaved), mode u8 (0 initialise, 1 accumulate),
//!         arithmetic u8, rows u32, inner u32, columns u32, k u32, c u32,
//!         left tail bytes u32, operand alignment u32,
//! groups u32, per group: passes u32, per pass:
//!     coefficient load: inner u32, columns u32, run count u16, runs,
//!     workers u8, per worker: context u8, op count u8, ops.
//! op: tag u8 (1 ZeroPartials, 2 LoadPartials, 3 StreamRows, 4 StorePartials),
//!     rows u32, columns-or-inner u32, run count u16,
//! run: offset, bytes, stride, count (u32 each).
//! ```
//!
//! Versions 1 and 2 described a different machine (each worker loading a
//! private weight block of its own, which the AMP does not have); this
//! build reads neither.

use ipu_layout::{ElementOrder, MemoryClass, Precision};

use crate::variant::Arithmetic;
use crate::{KernelError, Mode, Variant, WorkerId};

mod binary;
mod listing;

/// The program format version this build writes and reads.
pub const PROGRAM_FORMAT_VERSION: u16 = 3;

/// `count` repetitions of `bytes` contiguous bytes, the `i`-th at
/// `operand base + offset + i × stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    /// Offset of the first repetition from the operand base.
    pub offset: u32,
    /// Bytes per repetition.
    pub bytes: u32,
    /// Distance between repetitions.
    pub stride: u32,
    /// Repetitions.
    pub count: u32,
}

/// The supervisor's load of one weight tile into the coefficient
/// registers: `inner × columns` weights. Each run has `count == inner`
/// (repetition `i` is inner index `i` of the tile); runs are concatenated
/// along the columns.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CoefficientLoad {
    /// Inner extent of the tile.
    pub inner: u32,
    /// Column extent of the tile.
    pub columns: u32,
    /// Weight runs.
    pub runs: Vec<Run>,
}

impl CoefficientLoad {
    /// Bytes the load reads, for `element_bytes`-byte weights.
    pub fn bytes(&self, element_bytes: u64) -> u64 {
        u64::from(self.inner)
            .saturating_mul(u64::from(self.columns))
            .saturating_mul(element_bytes)
    }
}

/// One step of a worker's part of a pass.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AmpOp {
    /// Starts `rows × columns` partials at zero.
    ZeroPartials {
        /// Rows of the partial state.
        rows: u32,
        /// Columns of the partial state.
        columns: u32,
    },
    /// Starts `rows × columns` partials from the output's bytes. Runs have
    /// `count == rows` and are concatenated along the columns.
    LoadPartials {
        /// Rows of the partial state.
        rows: u32,
        /// Columns of the partial state.
        columns: u32,
        /// Output runs.
        runs: Vec<Run>,
    },
    /// Streams `rows` left rows of `inner` elements through the AMP against
    /// the pass's coefficients, accumulating into the partials. Runs have
    /// `count == rows` and are concatenated along the inner dimension.
    StreamRows {
        /// Rows streamed (the partial state's rows).
        rows: u32,
        /// Inner elements per row (the coefficient tile's inner extent).
        inner: u32,
        /// Left runs.
        runs: Vec<Run>,
    },
    /// Drains the partials and stores them to the output; runs as for
    /// [`AmpOp::LoadPartials`].
    StorePartials {
        /// Rows of the partial state.
        rows: u32,
        /// Columns of the partial state.
        columns: u32,
        /// Output runs.
        runs: Vec<Run>,
    },
}

impl AmpOp {
    /// The op's runs (empty for [`AmpOp::ZeroPartials`]).
    pub fn runs(&self) -> &[Run] {
        match self {
            AmpOp::LoadPartials { runs, .. }
            | AmpOp::StreamRows { runs, .. }
            | AmpOp::StorePartials { runs, .. } => runs,
            AmpOp::ZeroPartials { .. } => &[],
        }
    }

    fn tag(&self) -> u8 {
        match self {
            AmpOp::ZeroPartials { .. } => 1,
            AmpOp::LoadPartials { .. } => 2,
            AmpOp::StreamRows { .. } => 3,
            AmpOp::StorePartials { .. } => 4,
        }
    }

    fn dims(&self) -> (u32, u32) {
        match *self {
            AmpOp::ZeroPartials { rows, columns }
            | AmpOp::LoadPartials { rows, columns, .. }
            | AmpOp::StorePartials { rows, columns, .. } => (rows, columns),
            AmpOp::StreamRows { rows, inner, .. } => (rows, inner),
        }
    }
}

/// One worker context's part of a pass.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WorkerProgram {
    /// The worker context that runs it.
    pub worker: WorkerId,
    /// The ops, in order.
    pub ops: Vec<AmpOp>,
}

/// One pass: the supervisor loads the coefficients, then every listed
/// worker runs its ops against them, and the supervisor syncs with the
/// workers before the next pass changes the coefficients.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pass {
    /// The weight tile the supervisor loads.
    pub coefficients: CoefficientLoad,
    /// The workers started in this pass, in context order.
    pub workers: Vec<WorkerProgram>,
}

/// The passes of one iteration of the supervisor's outer loop.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PassGroup {
    /// The passes, in order.
    pub passes: Vec<Pass>,
}

/// Which slice the supervisor's outer loop runs over: each group of a
/// program is one such slice, and its passes share it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OuterLoop {
    /// One group per inner slice (`k` wide), its passes over the column
    /// slices (poplibs' F16 ConvPartial1x1Out: input-channel groups
    /// outermost).
    Inner,
    /// One group per column slice (`c` wide), its passes over the inner
    /// slices (poplibs' FP8 ConvPartial1x1Out: output-channel groups
    /// outermost).
    Columns,
}

/// What a program multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProgramHeader {
    /// Left precision.
    pub left: Precision,
    /// Weight precision.
    pub right: Precision,
    /// Output and partial precision.
    pub output: Precision,
    /// Left order: `Amp(Left)` or `RowMajor`.
    pub left_order: ElementOrder,
    /// Output order.
    pub output_order: ElementOrder,
    /// Where the weights live.
    pub right_class: MemoryClass,
    /// Initialise or accumulate.
    pub mode: Mode,
    /// The AMP arithmetic.
    pub arithmetic: Arithmetic,
    /// Left rows (and output rows).
    pub rows: u32,
    /// Inner dimension.
    pub inner: u32,
    /// Output columns.
    pub columns: u32,
    /// The variant's pass inner extent.
    pub k: u32,
    /// The variant's pass column extent.
    pub c: u32,
    /// Bytes the AMP reads past the left operand's end.
    pub left_tail_bytes: u32,
    /// Every operand address must be a multiple of this.
    pub alignment: u32,
}

impl ProgramHeader {
    /// The format version [`AmpProgram::to_bytes`] writes this header in.
    pub fn format_version(&self) -> u16 {
        PROGRAM_FORMAT_VERSION
    }

    /// Bytes of the left, right and output operands, if they fit in `u64`.
    pub fn operand_bytes(&self) -> [u64; 3] {
        let m = |a: u32, b: u32, p: Precision| {
            u64::from(a)
                .saturating_mul(u64::from(b))
                .saturating_mul(p.element_bytes())
        };
        [
            m(self.rows, self.inner, self.left),
            m(self.inner, self.columns, self.right),
            m(self.rows, self.columns, self.output),
        ]
    }
}

/// An AMP program: a header and the supervisor's groups of passes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AmpProgram {
    /// What the program multiplies.
    pub header: ProgramHeader,
    /// The groups of passes, in order.
    pub groups: Vec<PassGroup>,
}

impl AmpProgram {
    /// Every pass, in order.
    pub fn passes(&self) -> impl Iterator<Item = &Pass> + '_ {
        self.groups.iter().flat_map(|g| &g.passes)
    }
}

/// Builds the program of `variant` for `rows` rows (which must be
/// `r_small` or `r_large`) in `mode`.
pub fn build_program(variant: &Variant, rows: u32, mode: Mode) -> Result<AmpProgram, KernelError> {
    if rows != variant.r_small() && rows != variant.r_large() {
        return Err(KernelError::RowsNotServed {
            variant: variant.name().to_owned(),
            rows,
            rows_small: variant.r_small(),
            rows_large: variant.r_large(),
        });
    }
    build_for_rows(variant, rows, mode)
}

/// `total` items cut into `parts` balanced contiguous ranges, the first
/// ones one longer, as `(start, len)`; empty ranges are dropped.
pub(crate) fn balanced_ranges(total: u32, parts: u32) -> impl Iterator<Item = (u32, u32)> {
    let parts = parts.max(1);
    let (base, extra) = (total / parts, total % parts);
    (0..parts)
        .map(move |p| {
            // Ranges before `p`: `base` each, one more for the first `extra`.
            let start = base * p + p.min(extra);
            (start, base + u32::from(p < extra))
        })
        .filter(|&(_, n)| n > 0)
}

/// The row ranges of the workers: `rows` cut into balanced ranges over
/// every worker context (fewer when there are fewer rows), the first
/// worker's the longest.
pub(crate) fn worker_rows(rows: u32, workers: u32) -> impl Iterator<Item = (u32, u32)> {
    balanced_ranges(rows, workers.max(1).min(rows.max(1)))
}

/// Runs covering rows `row0..row0 + nrows` and columns `col0..col0 + ncols`
/// of a `total_rows × width` matrix stored in AMP panels of `panel` columns
/// with `eb`-byte elements. Arguments are bounded by the variant's checked
/// operand sizes, so the u64 arithmetic cannot overflow and the results fit
/// in u32.
#[allow(clippy::too_many_arguments)]
pub(crate) fn panel_runs(
    total_rows: u64,
    width: u64,
    panel: u64,
    eb: u64,
    row0: u64,
    nrows: u64,
    col0: u64,
    ncols: u64,
) -> Result<Vec<Run>, &'static str> {
    let mut runs = Vec::new();
    let end = col0 + ncols;
    let mut p = col0 / panel;
    while p * panel < end {
        let ps = p * panel;
        let pw = panel.min(width - ps);
        let a = col0.max(ps);
        let b = end.min(ps + pw);
        let offset = (ps * total_rows + row0 * pw + (a - ps)) * eb;
        runs.push(run(offset, (b - a) * eb, pw * eb, nrows)?);
        p += 1;
    }
    Ok(runs)
}

fn run(offset: u64, bytes: u64, stride: u64, count: u64) -> Result<Run, &'static str> {
    let f = |v: u64| u32::try_from(v).map_err(|_| "run field");
    Ok(Run {
        offset: f(offset)?,
        bytes: f(bytes)?,
        stride: f(stride)?,
        count: f(count)?,
    })
}

/// Runs covering left rows `row0..row0 + nrows` and inner indices
/// `k0..k0 + kw` in the shape's left order.
fn left_runs(
    s: &ProgramHeader,
    row0: u64,
    nrows: u64,
    k0: u64,
    kw: u64,
) -> Result<Vec<Run>, &'static str> {
    let eb = s.left.element_bytes();
    match s.left_order {
        ElementOrder::Amp(_) => panel_runs(
            u64::from(s.rows),
            u64::from(s.inner),
            s.left.amp_panel_columns(),
            eb,
            row0,
            nrows,
            k0,
            kw,
        ),
        // One run per block: each row's inner range is contiguous, and the
        // rows are `inner` elements apart.
        ElementOrder::RowMajor => {
            let w = u64::from(s.inner);
            Ok(vec![run((row0 * w + k0) * eb, kw * eb, w * eb, nrows)?])
        }
    }
}

/// Runs covering an output block in the shape's output order.
fn output_runs(
    s: &ProgramHeader,
    row0: u64,
    nrows: u64,
    col0: u64,
    ncols: u64,
) -> Result<Vec<Run>, &'static str> {
    let eb = s.output.element_bytes();
    match s.output_order {
        ElementOrder::Amp(_) => panel_runs(
            u64::from(s.rows),
            u64::from(s.columns),
            s.output.amp_panel_columns(),
            eb,
            row0,
            nrows,
            col0,
            ncols,
        ),
        ElementOrder::RowMajor => {
            let w = u64::from(s.columns);
            Ok(vec![run(
                (row0 * w + col0) * eb,
                ncols * eb,
                w * eb,
                nrows,
            )?])
        }
    }
}

/// Builds the program for any row count up to `r_large`.
pub(crate) fn build_for_rows(
    variant: &Variant,
    rows: u32,
    mode: Mode,
) -> Result<AmpProgram, KernelError> {
    let overflow = |what: &'static str| KernelError::AddressOverflow {
        what,
        variant: variant.name().to_owned(),
    };
    variant.operand_bytes(rows)?;
    let shape = variant.shape();
    let header = ProgramHeader {
        left: shape.left,
        right: shape.right,
        output: shape.output,
        left_order: shape.left_order,
        output_order: shape.output_order,
        right_class: shape.right_class,
        mode,
        arithmetic: variant.arithmetic(),
        rows,
        inner: shape.inner,
        columns: shape.columns,
        k: variant.k(),
        c: variant.c(),
        left_tail_bytes: variant.left_tail_bytes(),
        alignment: variant.model().operand_alignment,
    };
    let (k, c) = (variant.k(), variant.c());
    let inner_slices = shape.inner.div_ceil(k);
    let column_slices = shape.columns.div_ceil(c);
    let shares: Vec<(u32, u32)> = worker_rows(rows, variant.model().worker_contexts).collect();
    let pass = |kb: u32, cb: u32| -> Result<Pass, KernelError> {
        let (k0, c0) = (kb * k, cb * c);
        let kw = k.min(shape.inner - k0);
        let cw = c.min(shape.columns - c0);
        let coefficients = CoefficientLoad {
            inner: kw,
            columns: cw,
            runs: panel_runs(
                u64::from(shape.inner),
                u64::from(shape.columns),
                shape.right.amp_panel_columns(),
                shape.right.element_bytes(),
                u64::from(k0),
                u64::from(kw),
                u64::from(c0),
                u64::from(cw),
            )
            .map_err(overflow)?,
        };
        let mut workers = Vec::with_capacity(shares.len());
        for (w, &(r0, n)) in shares.iter().enumerate() {
            let (r0, n64) = (u64::from(r0), u64::from(n));
            let output =
                output_runs(&header, r0, n64, u64::from(c0), u64::from(cw)).map_err(overflow)?;
            // The first inner slice of an initialise call starts from
            // zero; every other pass adds to what the output holds.
            let start = if kb == 0 && mode == Mode::Initialise {
                AmpOp::ZeroPartials {
                    rows: n,
                    columns: cw,
                }
            } else {
                AmpOp::LoadPartials {
                    rows: n,
                    columns: cw,
                    runs: output.clone(),
                }
            };
            let left =
                left_runs(&header, r0, n64, u64::from(k0), u64::from(kw)).map_err(overflow)?;
            workers.push(WorkerProgram {
                worker: WorkerId::from_u32(w as u32),
                ops: vec![
                    start,
                    AmpOp::StreamRows {
                        rows: n,
                        inner: kw,
                        runs: left,
                    },
                    AmpOp::StorePartials {
                        rows: n,
                        columns: cw,
                        runs: output,
                    },
                ],
            });
        }
        Ok(Pass {
            coefficients,
            workers,
        })
    };
    let mut groups = Vec::new();
    match variant.arithmetic().outer_loop() {
        OuterLoop::Inner => {
            for kb in 0..inner_slices {
                let passes = (0..column_slices)
                    .map(|cb| pass(kb, cb))
                    .collect::<Result<_, _>>()?;
                groups.push(PassGroup { passes });
            }
        }
        OuterLoop::Columns => {
            for cb in 0..column_slices {
                let passes = (0..inner_slices)
                    .map(|kb| pass(kb, cb))
                    .collect::<Result<_, _>>()?;
                groups.push(PassGroup { passes });
            }
        }
    }
    Ok(AmpProgram { header, groups })
}

impl AmpProgram {
    /// Instructions of the code that runs this program in the code-size
    /// model: the supervisor's code with its longest unrolled coefficient
    /// load, and the worker code (every worker, in every pass, runs the
    /// same code on different addresses; the passes are loop iterations).
    pub fn code_instructions(&self, model: &crate::AmpModel) -> u64 {
        let weight_eb = self.header.right.element_bytes();
        let load = crate::cost::load_bytes(self.header.right_class, model);
        let loads = self
            .passes()
            .map(|p| p.coefficients.bytes(weight_eb).div_ceil(load))
            .max()
            .unwrap_or(0);
        u64::from(model.supervisor_code_instructions)
            .saturating_add(loads)
            .saturating_add(u64::from(model.worker_code_instructions))
    }
}
