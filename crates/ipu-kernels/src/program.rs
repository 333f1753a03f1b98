//! AMP programs: the explicit op sequence a GEMM kernel performs on tile
//! memory, how a variant builds one, and its versioned binary form.
//!
//! A program has a header (precisions, dimensions, orders, mode) and one op
//! list per worker context. Ops address memory by [`Run`]s relative to an
//! operand base, so one program serves any placement: the caller passes the
//! absolute operand addresses ([`crate::KernelArgs`]) when it runs.
//!
//! Per worker, for each output-column block: the partials start at zero
//! (initialise) or are loaded from the output (accumulate); for each inner
//! block the weight block is loaded into the coefficient state and the
//! worker's left rows are streamed through the AMP; then the partials are
//! drained and stored. Workers take the cells of a grid of row ranges ×
//! column-block ranges, the grid chosen by the cost model (splitting rows
//! makes every worker load every weight block; splitting columns does not).
//!
//! The left operand's rows are streamed panel by panel in `Amp(Left)` order
//! (one run per panel an inner block touches) or row by row in row-major
//! order (one run per inner block: offset `(r0 × inner + k0) × eb`, bytes
//! `kw × eb`, stride `inner × eb`). The AMP's read tail is the same in both
//! orders: what a row-major run reads past its last byte is the rest of its
//! row, or the tail after the operand's end for the last row's last block.
//!
//! The binary form is little endian:
//!
//! ```text
//! magic "IPUAMP\0\0", version u16 (1 or 2),
//! header: left, right, output precision (tag u8, scale i8 each; tags 0 F32,
//!         1 F16, 2 F143, 3 F152), output order u8 (0 RowMajor, 1 Amp(Output)),
//!         [version 2 only: left order u8 (0 RowMajor, 1 Amp(Left))],
//!         weight class u8 (0 standard, 1 interleaved), mode u8 (0 initialise,
//!         1 accumulate), arithmetic u8, rows u32, inner u32, columns u32,
//!         k u32, c u32, left tail bytes u32, operand alignment u32,
//! workers u16, then per worker: context u8, op count u32, ops.
//! op: tag u8 (0 LoadCoefficients, 1 ZeroPartials, 2 LoadPartials,
//!     3 StreamRows, 4 StorePartials), rows-or-inner u32, columns-or-inner u32,
//!     run count u16, runs (offset, bytes, stride, count: u32 each).
//! ```
//!
//! Version 1 has no left-order byte: its left operand is in `Amp(Left)`
//! order. A program is written in the oldest version that can say what it
//! does, so a program with an `Amp(Left)` left operand is version 1, byte
//! for byte what this crate wrote before the left order existed (objects,
//! cache keys and golden files of such programs do not change), and a
//! reader that predates version 2 rejects a row-major program by its version
//! instead of misreading its runs.

use ipu_layout::{ElementOrder, MemoryClass, Precision};

use crate::variant::Arithmetic;
use crate::{KernelError, Mode, Variant, WorkerId};

mod binary;
mod listing;

/// The original program format version, which every program whose left
/// operand is in `Amp(Left)` order is still written in (see the module
/// header). The toolchain identity names this version, so existing cache
/// keys stay valid; the version of a variant's programs is
/// [`Variant::program_format_version`].
pub const PROGRAM_FORMAT_VERSION: u16 = 1;

/// The newest program format version this build writes and reads: version 1
/// plus a left-order byte, written for programs with a row-major left
/// operand. The reader accepts every version from [`PROGRAM_FORMAT_VERSION`]
/// to this one.
pub const PROGRAM_FORMAT_VERSION_LATEST: u16 = 2;

/// The format version a program with a left operand in `left_order` is
/// written in: the oldest that can express it.
pub(crate) fn format_version(left_order: ElementOrder) -> u16 {
    match left_order {
        ElementOrder::Amp(_) => PROGRAM_FORMAT_VERSION,
        ElementOrder::RowMajor => PROGRAM_FORMAT_VERSION_LATEST,
    }
}

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

/// One step of a worker's AMP sequence.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AmpOp {
    /// Loads an `inner × columns` weight block into the coefficient state.
    /// Each run has `count == inner` (repetition `i` is inner index `i` of
    /// the block); runs are concatenated along the columns.
    LoadCoefficients {
        /// Inner extent of the block.
        inner: u32,
        /// Column extent of the block.
        columns: u32,
        /// Weight runs.
        runs: Vec<Run>,
    },
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
    /// the coefficient state, accumulating into the partials. Runs have
    /// `count == rows` and are concatenated along the inner dimension.
    StreamRows {
        /// Rows streamed (the partial state's rows).
        rows: u32,
        /// Inner elements per row (the coefficient block's inner extent).
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
            AmpOp::LoadCoefficients { runs, .. }
            | AmpOp::LoadPartials { runs, .. }
            | AmpOp::StreamRows { runs, .. }
            | AmpOp::StorePartials { runs, .. } => runs,
            AmpOp::ZeroPartials { .. } => &[],
        }
    }

    fn tag(&self) -> u8 {
        match self {
            AmpOp::LoadCoefficients { .. } => 0,
            AmpOp::ZeroPartials { .. } => 1,
            AmpOp::LoadPartials { .. } => 2,
            AmpOp::StreamRows { .. } => 3,
            AmpOp::StorePartials { .. } => 4,
        }
    }

    fn dims(&self) -> (u32, u32) {
        match *self {
            AmpOp::LoadCoefficients { inner, columns, .. } => (inner, columns),
            AmpOp::ZeroPartials { rows, columns }
            | AmpOp::LoadPartials { rows, columns, .. }
            | AmpOp::StorePartials { rows, columns, .. } => (rows, columns),
            AmpOp::StreamRows { rows, inner, .. } => (rows, inner),
        }
    }
}

/// One worker context's op sequence.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WorkerProgram {
    /// The worker context that runs it.
    pub worker: WorkerId,
    /// The ops, in order.
    pub ops: Vec<AmpOp>,
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
    /// The variant's inner block.
    pub k: u32,
    /// The variant's column block.
    pub c: u32,
    /// Bytes the AMP reads past the left operand's end.
    pub left_tail_bytes: u32,
    /// Every operand address must be a multiple of this.
    pub alignment: u32,
}

impl ProgramHeader {
    /// The format version [`AmpProgram::to_bytes`] writes this header in.
    pub fn format_version(&self) -> u16 {
        format_version(self.left_order)
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

/// An AMP program: a header and one op sequence per active worker.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AmpProgram {
    /// What the program multiplies.
    pub header: ProgramHeader,
    /// One entry per active worker, in context order.
    pub workers: Vec<WorkerProgram>,
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

/// The work of one worker: a row range and a range of column blocks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WorkShare {
    pub row_start: u32,
    pub rows: u32,
    pub block_start: u32,
    pub blocks: u32,
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

/// The shares of a `row_parts × column_parts` split of `rows` rows and
/// `column_blocks` column blocks: rows and column blocks are cut into
/// [`balanced_ranges`], row ranges outermost. Empty shares are dropped.
pub(crate) fn grid_split(
    rows: u32,
    column_blocks: u32,
    row_parts: u32,
    column_parts: u32,
) -> Vec<WorkShare> {
    let mut shares = Vec::new();
    for (row_start, rows) in balanced_ranges(rows, row_parts) {
        for (block_start, blocks) in balanced_ranges(column_blocks, column_parts) {
            shares.push(WorkShare {
                row_start,
                rows,
                block_start,
                blocks,
            });
        }
    }
    shares
}

/// How a call's work splits over the worker contexts: of every grid split
/// `row_parts × column_parts <= worker_contexts` (with no more parts than
/// rows or column blocks), the one whose busiest worker has the fewest
/// instructions in the cost model; ties go to more row parts, then more
/// column parts. Splitting rows makes every worker load every weight block;
/// splitting columns divides the weight loads but needs enough column
/// blocks, so the choice depends on the shape.
pub(crate) fn split_work(variant: &Variant, rows: u32, mode: Mode) -> Vec<WorkShare> {
    best_split(variant, rows, mode).0
}

/// [`split_work`]'s split and its busiest worker's instructions.
pub(crate) fn best_split(variant: &Variant, rows: u32, mode: Mode) -> (Vec<WorkShare>, u64) {
    let column_blocks = variant.shape().columns.div_ceil(variant.c());
    let (row_parts, column_parts, busiest) =
        crate::cost::SplitCosts::new(variant, column_blocks).best(rows, mode);
    (
        grid_split(rows, column_blocks, row_parts, column_parts),
        busiest,
    )
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
    let inner_blocks = shape.inner.div_ceil(k);
    let shares = split_work(variant, rows, mode);
    let mut workers = Vec::with_capacity(shares.len());
    for (w, share) in shares.iter().enumerate() {
        let mut ops = Vec::new();
        let (r0, n) = (u64::from(share.row_start), u64::from(share.rows));
        for cb in share.block_start..share.block_start + share.blocks {
            let c0 = cb * c;
            let cw = c.min(shape.columns - c0);
            match mode {
                Mode::Initialise => ops.push(AmpOp::ZeroPartials {
                    rows: share.rows,
                    columns: cw,
                }),
                Mode::Accumulate => ops.push(AmpOp::LoadPartials {
                    rows: share.rows,
                    columns: cw,
                    runs: output_runs(&header, r0, n, u64::from(c0), u64::from(cw))
                        .map_err(overflow)?,
                }),
            }
            for kb in 0..inner_blocks {
                let k0 = kb * k;
                let kw = k.min(shape.inner - k0);
                let right = panel_runs(
                    u64::from(shape.inner),
                    u64::from(shape.columns),
                    shape.right.amp_panel_columns(),
                    shape.right.element_bytes(),
                    u64::from(k0),
                    u64::from(kw),
                    u64::from(c0),
                    u64::from(cw),
                )
                .map_err(overflow)?;
                ops.push(AmpOp::LoadCoefficients {
                    inner: kw,
                    columns: cw,
                    runs: right,
                });
                let left =
                    left_runs(&header, r0, n, u64::from(k0), u64::from(kw)).map_err(overflow)?;
                ops.push(AmpOp::StreamRows {
                    rows: share.rows,
                    inner: kw,
                    runs: left,
                });
            }
            ops.push(AmpOp::StorePartials {
                rows: share.rows,
                columns: cw,
                runs: output_runs(&header, r0, n, u64::from(c0), u64::from(cw))
                    .map_err(overflow)?,
            });
        }
        workers.push(WorkerProgram {
            worker: WorkerId::from_u32(w as u32),
            ops,
        });
    }
    Ok(AmpProgram { header, workers })
}

impl AmpProgram {
    /// Instructions of the code that runs this program in the code-size
    /// model: the supervisor entry plus the longest worker sequence (all
    /// workers run the same code on different addresses).
    pub fn code_instructions(&self, model: &crate::AmpModel) -> u64 {
        let worker = self
            .workers
            .iter()
            .map(|w| {
                w.ops
                    .iter()
                    .fold(u64::from(model.worker_setup_instructions), |acc, op| {
                        acc.saturating_add(op_code_instructions(op, model))
                    })
            })
            .max()
            .unwrap_or(0);
        let supervisor =
            u64::from(model.supervisor_instructions).saturating_add(2 * self.workers.len() as u64);
        supervisor.saturating_add(worker)
    }
}

/// Static instructions one op compiles to: its setup, one per run, and the
/// loop body of the AMP or copy loop.
pub(crate) fn op_code_instructions(op: &AmpOp, model: &crate::AmpModel) -> u64 {
    let runs = op.runs().len() as u64;
    let base = match op {
        AmpOp::LoadCoefficients { .. } => model.coefficient_setup_instructions,
        AmpOp::ZeroPartials { .. } => 2,
        AmpOp::LoadPartials { .. } | AmpOp::StorePartials { .. } => {
            model.partial_setup_instructions
        }
        AmpOp::StreamRows { .. } => model.stream_setup_instructions.saturating_add(2),
    };
    u64::from(base).saturating_add(runs)
}
