//! Runs an AMP program on a byte image of tile memory, faithful to the
//! arithmetic the AMP performs.
//!
//! Arithmetic (the model this crate commits to; tests compare it with a
//! plain reference under a derived error bound):
//!
//! - Operands are decoded exactly: F16 as IEEE binary16, FP8 (F143/F152)
//!   through `ipu_layout::numeric` with the tensor's power-of-two scale.
//!   With F16 rows and FP8 weights the weights are widened to F16 when the
//!   coefficient block loads (rounded to nearest even if the scale pushes a
//!   value outside F16's range).
//! - Each product `left × weight` is computed exactly and rounded to the
//!   partial precision (F16 for `f16v4hihov4amp` / `f8v8hihov4amp`, F32 for
//!   `f16v4sisoamp`), round to nearest, ties to even.
//! - The AMP sums the products of one step — 4 inner elements for the `v4`
//!   instructions, 8 for `f8v8` — together with the running partial exactly
//!   and rounds once into the partial: round to nearest, ties to even, or
//!   stochastic rounding with a seeded generator when asked. Steps follow the
//!   inner dimension in increasing order and step boundaries are multiples of
//!   the group from inner index 0, so the result does not depend on `k` or
//!   `c`. Overflow gives ±infinity as IEEE arithmetic does.
//! - In accumulate mode the partials start from the output's bytes, in
//!   initialise mode from zero; the final partials are the output. A NaN
//!   partial is stored as the canonical quiet NaN (`f32::NAN` encoded in
//!   the output precision).
//!
//! Operand addresses must be multiples of the header's alignment (32 on
//! IPU21; the AMP's 128-bit loads fault otherwise). With a row-major left
//! operand every left run must also start, and repeat, at multiples of it,
//! because each repetition is a row the AMP loads from (the planner keeps
//! `inner × element bytes` and `k × element bytes` aligned so built programs
//! always pass; an `Amp(Left)` left operand is not checked run by run, as
//! before). Every access is bounds checked against the image and against
//! its operand's extent; the AMP's read of `left_tail_bytes` past the left
//! operand must also lie in the image; the output may not overlap an input.
//! Workers write disjoint outputs (the program checker proves it for built
//! programs), so running them in order gives the same bytes as any
//! interleaving.
//!
//! # How it runs fast
//!
//! The arithmetic above is a sequence of f64 operations per output
//! element; the emulator performs exactly that sequence, in that order, for
//! every element, so its bytes are those of the plain formulation (a test
//! compares it with the plain, element-by-element emulator on random
//! programs and memory). What changes is the data movement around it:
//! operand blocks are copied out of the image once per op, a run at a
//! time, and decoded once (FP8 through a 256-entry table of
//! `decode × 2^scale`); the coefficient block is stored group by group
//! with each column's `group` coefficients together, so that one pass over
//! the columns does a whole AMP step per element with no bounds checks in
//! the loop. A [`PreparedProgram`] with FP8 rows and weights also holds
//! the table of all 65,536 rounded products `round(a × w)`, so the
//! innermost loop is one table load and one add per product.

mod kernel;
#[cfg(test)]
mod reference;
mod rounding;

use std::sync::Arc;

use ipu_layout::{AmpOperand, ElementOrder, Precision};

use crate::WorkerId;
use crate::error::{EmulateError, Operand};
use crate::program::{AmpOp, AmpProgram, ProgramHeader, Run};
use crate::variant::Arithmetic;

use kernel::{Block, ProductTable};
pub use rounding::{round_f16, round_f32};
use rounding::{round_f16_on_grid, stochastic_f16, stochastic_f32, stored, unit_random};

/// Absolute tile byte addresses of a call's operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelArgs {
    /// The left operand's first byte.
    pub left: u32,
    /// The weights' first byte.
    pub right: u32,
    /// The output's first byte.
    pub output: u32,
}

/// How partials are rounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// Round to nearest, ties to even (the AMP's default).
    #[default]
    NearestEven,
    /// Stochastic rounding of every partial update, driven by a generator
    /// seeded from `seed` and the update's position in the program (worker,
    /// row and column of the stream, step), so a program and seed give the
    /// same bytes on every run whatever order workers run in (a different
    /// blocking of the same GEMM draws different numbers).
    Stochastic {
        /// The generator seed.
        seed: u64,
    },
}

/// Options of [`emulate_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EmulateOptions {
    /// How partials are rounded.
    pub rounding: Rounding,
}

/// What an emulated call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EmulationStats {
    /// Multiply-accumulates performed.
    pub macs: u64,
    /// AMP steps (group sums rounded into a partial).
    pub amp_steps: u64,
    /// Weight bytes loaded into the coefficient state.
    pub coefficient_bytes: u64,
    /// Left bytes streamed.
    pub left_bytes: u64,
    /// Output bytes read as starting partials.
    pub partial_bytes_read: u64,
    /// Output bytes written.
    pub output_bytes_written: u64,
    /// Ops executed.
    pub ops: u64,
}

/// Exact values of every code of a one-byte precision, or the precision's
/// own decoder for wider ones.
#[derive(Clone, Debug)]
struct Decoder {
    precision: Precision,
    /// `f64::from(precision.decode_from(&[code]))` for every code, when the
    /// precision is one byte wide.
    codes: Option<Box<[f64; 256]>>,
}

impl Decoder {
    fn new(precision: Precision) -> Self {
        let codes = (precision.element_bytes() == 1).then(|| {
            let mut table = Box::new([0.0f64; 256]);
            for (code, v) in (0u8..=255).zip(table.iter_mut()) {
                *v = f64::from(precision.decode_from(&[code]));
            }
            table
        });
        Self { precision, codes }
    }

    /// The exact values of `bytes`, element by element.
    fn decode(&self, bytes: &[u8]) -> Vec<f64> {
        match &self.codes {
            Some(table) => bytes.iter().map(|&b| table[usize::from(b)]).collect(),
            None => bytes
                .chunks_exact(self.precision.element_bytes() as usize)
                .map(|chunk| f64::from(self.precision.decode_from(chunk)))
                .collect(),
        }
    }
}

/// The tables a program's runs share: decoders of the three precisions and,
/// when built, the rounded products of FP8 rows and weights.
#[derive(Clone, Debug)]
struct Tables {
    left: Decoder,
    right: Decoder,
    output: Decoder,
    products: Option<Arc<ProductTable>>,
}

impl Tables {
    /// The decoders of `h` and, when `products` holds (or may add) one,
    /// the product table of its precisions.
    fn new(h: &ProgramHeader, products: Option<&mut ProductTables>) -> Self {
        let left = Decoder::new(h.left);
        let right = Decoder::new(h.right);
        let output = Decoder::new(h.output);
        let products = match (products, &left.codes, &right.codes) {
            (Some(cache), Some(l), Some(r)) => {
                let key = (h.left, h.right, h.arithmetic);
                match cache.tables.get(&key) {
                    Some(t) => Some(Arc::clone(t)),
                    None if cache.tables.len() < ProductTables::LIMIT => {
                        let widen = h.arithmetic.widens_weights();
                        let single = h.arithmetic.single_partials();
                        let table = Arc::new(ProductTable::new(l, r, |a, w| {
                            let w = if widen { round_f16(w) } else { w };
                            if single {
                                round_f32(a * w)
                            } else {
                                round_f16(a * w)
                            }
                        }));
                        cache.tables.insert(key, Arc::clone(&table));
                        Some(table)
                    }
                    // Past the limit a program runs on decoded values:
                    // the same bytes, more slowly.
                    None => None,
                }
            }
            _ => None,
        };
        Self {
            left,
            right,
            output,
            products,
        }
    }
}

/// Product tables shared by the [`PreparedProgram`]s of one run, one per
/// combination of row and weight precision and arithmetic, at most
/// [`ProductTables::LIMIT`] of them (512 KiB each): programs past the limit
/// run without a table, so a package with many precisions cannot make the
/// tables grow without bound.
#[derive(Clone, Debug, Default)]
pub struct ProductTables {
    tables: std::collections::HashMap<(Precision, Precision, Arithmetic), Arc<ProductTable>>,
}

impl ProductTables {
    /// The most tables kept (32 MiB).
    pub const LIMIT: usize = 64;

    /// No tables yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tables built so far.
    pub fn len(&self) -> usize {
        self.tables.len()
    }

    /// Whether none was built.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }
}

/// An AMP program made ready to run many times: its header checked once,
/// its decode tables built and, when rows and weights are both FP8, the
/// table of every product rounded to the partial precision (512 KiB),
/// which makes the innermost loop a table load and an add. Runs through
/// [`emulate_prepared`] give the same bytes as [`emulate_with`].
#[derive(Clone, Debug)]
pub struct PreparedProgram {
    program: AmpProgram,
    tables: Tables,
}

impl PreparedProgram {
    /// Checks `program`'s header and builds its tables.
    pub fn new(program: AmpProgram) -> Result<Self, EmulateError> {
        Self::with_tables(program, &mut ProductTables::new())
    }

    /// [`PreparedProgram::new`], taking its product table from `tables`
    /// (or adding it there), so that programs of the same precisions share
    /// one.
    pub fn with_tables(
        program: AmpProgram,
        tables: &mut ProductTables,
    ) -> Result<Self, EmulateError> {
        check_header(&program.header)?;
        let tables = Tables::new(&program.header, Some(tables));
        Ok(Self { program, tables })
    }

    /// The program.
    pub fn program(&self) -> &AmpProgram {
        &self.program
    }
}

/// Runs `program` on the tile memory image `memory`, whose first byte is at
/// address `memory_base`, with round to nearest even.
pub fn emulate(
    program: &AmpProgram,
    memory: &mut [u8],
    memory_base: u32,
    args: &KernelArgs,
) -> Result<EmulationStats, EmulateError> {
    emulate_with(
        program,
        memory,
        memory_base,
        args,
        &EmulateOptions::default(),
    )
}

/// [`emulate`] with options (stochastic rounding).
pub fn emulate_with(
    program: &AmpProgram,
    memory: &mut [u8],
    memory_base: u32,
    args: &KernelArgs,
    options: &EmulateOptions,
) -> Result<EmulationStats, EmulateError> {
    check_header(&program.header)?;
    let tables = Tables::new(&program.header, None);
    run(program, &tables, memory, memory_base, args, options)
}

/// [`emulate_with`] for a prepared program (the same bytes, faster when the
/// program runs many times).
pub fn emulate_prepared(
    prepared: &PreparedProgram,
    memory: &mut [u8],
    memory_base: u32,
    args: &KernelArgs,
    options: &EmulateOptions,
) -> Result<EmulationStats, EmulateError> {
    run(
        &prepared.program,
        &prepared.tables,
        memory,
        memory_base,
        args,
        options,
    )
}

/// Runs a program whose header was checked.
fn run(
    program: &AmpProgram,
    tables: &Tables,
    memory: &mut [u8],
    memory_base: u32,
    args: &KernelArgs,
    options: &EmulateOptions,
) -> Result<EmulationStats, EmulateError> {
    let h = &program.header;
    let start = u64::from(memory_base);
    let end = start + memory.len() as u64;
    let [left_bytes, right_bytes, output_bytes] = h.operand_bytes();
    // Header sizes saturate at u64::MAX, so the sums below saturate too.
    let left_end = u64::from(args.left).saturating_add(left_bytes);
    let tail_end = left_end.saturating_add(u64::from(h.left_tail_bytes));
    for (operand, address) in [
        (Operand::Left, args.left),
        (Operand::Right, args.right),
        (Operand::Output, args.output),
    ] {
        if h.alignment == 0 || address % h.alignment != 0 {
            return Err(EmulateError::Misaligned {
                operand,
                address,
                alignment: h.alignment,
            });
        }
    }
    if u64::from(args.left) < start || tail_end > end {
        return Err(EmulateError::LeftTailOutOfBounds {
            end: left_end,
            tail: u64::from(h.left_tail_bytes),
            memory_end: end,
        });
    }
    // Whole operands must lie in the image; this also bounds every block
    // the program can ask for by the image size.
    for (operand, base, bytes) in [
        (Operand::Left, args.left, left_bytes),
        (Operand::Right, args.right, right_bytes),
        (Operand::Output, args.output, output_bytes),
    ] {
        let (a, b) = (u64::from(base), u64::from(base).saturating_add(bytes));
        if a < start || b > end {
            return Err(EmulateError::OperandOutOfBounds {
                operand,
                start: a,
                end: b,
                memory_start: start,
                memory_end: end,
            });
        }
    }
    let out = (
        u64::from(args.output),
        u64::from(args.output) + output_bytes,
    );
    for (operand, base, bytes) in [
        (Operand::Left, args.left, left_bytes),
        (Operand::Right, args.right, right_bytes),
    ] {
        let (a, b) = (u64::from(base), u64::from(base) + bytes);
        if a < out.1 && out.0 < b && bytes > 0 && output_bytes > 0 {
            return Err(EmulateError::OperandsOverlap {
                operand,
                start: a,
                end: b,
                output_start: out.0,
                output_end: out.1,
            });
        }
    }
    let mut machine = Machine {
        memory,
        start,
        end,
        header: h,
        args,
        options,
        tables,
        stats: EmulationStats::default(),
        operand_bytes: [left_bytes, right_bytes, output_bytes],
    };
    for w in &program.workers {
        machine.run_worker(w.worker, &w.ops)?;
    }
    Ok(machine.stats)
}

fn check_header(h: &ProgramHeader) -> Result<(), EmulateError> {
    if !matches!(
        h.left_order,
        ElementOrder::RowMajor | ElementOrder::Amp(AmpOperand::Left)
    ) {
        return Err(EmulateError::MalformedHeader {
            reason: format!(
                "left order {:?} is neither RowMajor nor Amp(Left)",
                h.left_order
            ),
        });
    }
    let expected = Arithmetic::select(h.left, h.right, h.output);
    if expected != Some(h.arithmetic) {
        return Err(EmulateError::MalformedHeader {
            reason: format!(
                "arithmetic {:?} does not match left {}, right {}, output {}",
                h.arithmetic, h.left, h.right, h.output
            ),
        });
    }
    Ok(())
}

struct Machine<'a> {
    memory: &'a mut [u8],
    start: u64,
    end: u64,
    header: &'a ProgramHeader,
    args: &'a KernelArgs,
    options: &'a EmulateOptions,
    tables: &'a Tables,
    stats: EmulationStats,
    operand_bytes: [u64; 3],
}

/// The coefficient state: `inner × columns` weights in the group layout of
/// [`kernel::group_layout`], as exact values or, with a product table, as
/// codes.
enum Coefficients {
    Values(Vec<f64>),
    Codes(Vec<u8>),
}

/// The AMP state of one worker.
struct State {
    coefficients: Coefficients,
    coefficient_dims: Option<(u32, u32)>,
    /// Partials, `rows × columns`, row major.
    partials: Vec<f64>,
    partial_dims: Option<(u32, u32)>,
    /// Inner elements accumulated into the current partials so far (the
    /// position of the next AMP step, for stochastic rounding).
    inner_done: u64,
}

impl Machine<'_> {
    fn malformed(worker: WorkerId, op: usize, reason: impl Into<String>) -> EmulateError {
        EmulateError::Malformed {
            worker,
            op,
            reason: reason.into(),
        }
    }

    /// The image range of repetition `i` of `run` of `operand`, checked.
    fn locate(
        &self,
        worker: WorkerId,
        op: usize,
        operand: Operand,
        run: &Run,
        i: u32,
    ) -> Result<std::ops::Range<usize>, EmulateError> {
        let (base, size) = match operand {
            Operand::Left => (self.args.left, self.operand_bytes[0]),
            Operand::Right => (self.args.right, self.operand_bytes[1]),
            Operand::Output => (self.args.output, self.operand_bytes[2]),
        };
        let offset = u64::from(run.offset) + u64::from(i) * u64::from(run.stride);
        let bytes = u64::from(run.bytes);
        if offset + bytes > size {
            return Err(EmulateError::OperandOverrun {
                worker,
                op,
                operand,
                offset,
                bytes,
                operand_bytes: size,
            });
        }
        let address = u64::from(base) + offset;
        if address < self.start || address + bytes > self.end {
            return Err(EmulateError::OutOfBounds {
                worker,
                op,
                operand,
                address,
                bytes,
                memory_start: self.start,
                memory_end: self.end,
            });
        }
        let first = (address - self.start) as usize;
        Ok(first..first + bytes as usize)
    }

    /// Checks that `runs` cover `count` repetitions of `elements` elements of
    /// `eb` bytes in total, returning the elements per run.
    fn run_elements(
        worker: WorkerId,
        op: usize,
        runs: &[Run],
        count: u32,
        elements: u32,
        eb: u64,
    ) -> Result<Vec<u32>, EmulateError> {
        let mut per_run = Vec::with_capacity(runs.len());
        let mut total = 0u64;
        for (j, r) in runs.iter().enumerate() {
            if r.count != count {
                return Err(Self::malformed(
                    worker,
                    op,
                    format!("run {j} repeats {} times, expected {count}", r.count),
                ));
            }
            if r.bytes == 0 || u64::from(r.bytes) % eb != 0 {
                return Err(Self::malformed(
                    worker,
                    op,
                    format!(
                        "run {j} is {} bytes, not a positive multiple of {eb}",
                        r.bytes
                    ),
                ));
            }
            let n = (u64::from(r.bytes) / eb) as u32;
            total += u64::from(n);
            per_run.push(n);
        }
        if total != u64::from(elements) {
            return Err(Self::malformed(
                worker,
                op,
                format!("runs cover {total} elements per repetition, expected {elements}"),
            ));
        }
        Ok(per_run)
    }

    /// Copies a `count × elements` block of `eb`-byte elements through
    /// `runs` into a row-major byte block.
    #[allow(clippy::too_many_arguments)]
    fn gather(
        &self,
        worker: WorkerId,
        op: usize,
        operand: Operand,
        runs: &[Run],
        count: u32,
        elements: u32,
        eb: u64,
    ) -> Result<Vec<u8>, EmulateError> {
        let per_run = Self::run_elements(worker, op, runs, count, elements, eb)?;
        self.check_block(worker, op, count, elements)?;
        let eb = eb as usize;
        let row_bytes = elements as usize * eb;
        let mut block = vec![0u8; count as usize * row_bytes];
        let mut column = 0usize;
        for (r, &n) in runs.iter().zip(&per_run) {
            let n = n as usize * eb;
            for (i, row) in (0..count).zip(block.chunks_exact_mut(row_bytes.max(1))) {
                let range = self.locate(worker, op, operand, r, i)?;
                row[column..column + n].copy_from_slice(&self.memory[range]);
            }
            column += n;
        }
        Ok(block)
    }

    /// Writes an `count × elements` block through `runs`.
    #[allow(clippy::too_many_arguments)]
    fn scatter(
        &mut self,
        worker: WorkerId,
        op: usize,
        runs: &[Run],
        count: u32,
        elements: u32,
        precision: Precision,
        values: &[f64],
    ) -> Result<(), EmulateError> {
        let eb = precision.element_bytes();
        let per_run = Self::run_elements(worker, op, runs, count, elements, eb)?;
        let mut column = 0usize;
        for (r, &n) in runs.iter().zip(&per_run) {
            for i in 0..count {
                let range = self.locate(worker, op, Operand::Output, r, i)?;
                let row = &values[i as usize * elements as usize..][..elements as usize];
                for (chunk, &v) in self.memory[range]
                    .chunks_exact_mut(eb as usize)
                    .zip(&row[column..])
                {
                    // Partials are already in the output precision, so this
                    // encoding is exact.
                    precision.encode_into(stored(v), chunk);
                }
            }
            column += n as usize;
        }
        Ok(())
    }

    /// Rejects blocks larger than the largest operand, which bounds every
    /// allocation by the program's own operand sizes.
    fn check_block(
        &self,
        worker: WorkerId,
        op: usize,
        count: u32,
        elements: u32,
    ) -> Result<(), EmulateError> {
        let h = self.header;
        let limit = (u64::from(h.rows) * u64::from(h.inner))
            .max(u64::from(h.inner) * u64::from(h.columns))
            .max(u64::from(h.rows) * u64::from(h.columns));
        if u64::from(count) * u64::from(elements) > limit {
            return Err(Self::malformed(
                worker,
                op,
                format!("a {count} x {elements} block is larger than any operand"),
            ));
        }
        Ok(())
    }

    fn run_worker(&mut self, worker: WorkerId, ops: &[AmpOp]) -> Result<(), EmulateError> {
        let h = self.header;
        let tables = self.tables;
        let group = h.arithmetic.group() as usize;
        let mut state = State {
            coefficients: Coefficients::Values(Vec::new()),
            coefficient_dims: None,
            partials: Vec::new(),
            partial_dims: None,
            inner_done: 0,
        };
        for (i, op) in ops.iter().enumerate() {
            self.stats.ops += 1;
            match op {
                AmpOp::LoadCoefficients {
                    inner,
                    columns,
                    runs,
                } => {
                    let bytes = self.gather(
                        worker,
                        i,
                        Operand::Right,
                        runs,
                        *inner,
                        *columns,
                        h.right.element_bytes(),
                    )?;
                    let (k, c) = (*inner as usize, *columns as usize);
                    state.coefficients = if tables.products.is_some() {
                        Coefficients::Codes(kernel::group_layout(&bytes, k, c, group))
                    } else {
                        let mut values = tables.right.decode(&bytes);
                        if h.arithmetic.widens_weights() {
                            for v in &mut values {
                                *v = round_f16(*v);
                            }
                        }
                        Coefficients::Values(kernel::group_layout(&values, k, c, group))
                    };
                    self.stats.coefficient_bytes +=
                        u64::from(*inner) * u64::from(*columns) * h.right.element_bytes();
                    state.coefficient_dims = Some((*inner, *columns));
                }
                AmpOp::ZeroPartials { rows, columns } => {
                    self.check_block(worker, i, *rows, *columns)?;
                    state.partials = vec![0.0; *rows as usize * *columns as usize];
                    state.partial_dims = Some((*rows, *columns));
                    state.inner_done = 0;
                }
                AmpOp::LoadPartials {
                    rows,
                    columns,
                    runs,
                } => {
                    let bytes = self.gather(
                        worker,
                        i,
                        Operand::Output,
                        runs,
                        *rows,
                        *columns,
                        h.output.element_bytes(),
                    )?;
                    state.partials = tables.output.decode(&bytes);
                    self.stats.partial_bytes_read +=
                        u64::from(*rows) * u64::from(*columns) * h.output.element_bytes();
                    state.partial_dims = Some((*rows, *columns));
                    state.inner_done = 0;
                }
                AmpOp::StreamRows { rows, inner, runs } => {
                    let Some((k, c)) = state.coefficient_dims else {
                        return Err(Self::malformed(
                            worker,
                            i,
                            "rows streamed before any coefficient load",
                        ));
                    };
                    let Some((pr, pc)) = state.partial_dims else {
                        return Err(Self::malformed(
                            worker,
                            i,
                            "rows streamed before the partials start",
                        ));
                    };
                    if *inner != k || *rows != pr || c != pc {
                        return Err(Self::malformed(
                            worker,
                            i,
                            format!(
                                "stream of {rows} rows x {inner} inner does not match coefficients \
                                 {k} x {c} and partials {pr} x {pc}"
                            ),
                        ));
                    }
                    if h.left_order == ElementOrder::RowMajor {
                        check_row_runs(worker, i, runs, h.alignment)?;
                    }
                    let left = self.gather(
                        worker,
                        i,
                        Operand::Left,
                        runs,
                        *rows,
                        *inner,
                        h.left.element_bytes(),
                    )?;
                    self.stats.left_bytes +=
                        u64::from(*rows) * u64::from(*inner) * h.left.element_bytes();
                    self.stream(worker, &mut state, &left, *rows, k, c);
                }
                AmpOp::StorePartials {
                    rows,
                    columns,
                    runs,
                } => {
                    if state.partial_dims != Some((*rows, *columns)) {
                        return Err(Self::malformed(
                            worker,
                            i,
                            format!(
                                "store of {rows} x {columns} partials does not match the partial state {:?}",
                                state.partial_dims
                            ),
                        ));
                    }
                    let partials = std::mem::take(&mut state.partials);
                    self.scatter(worker, i, runs, *rows, *columns, h.output, &partials)?;
                    self.stats.output_bytes_written +=
                        u64::from(*rows) * u64::from(*columns) * h.output.element_bytes();
                    state.partial_dims = None;
                }
            }
        }
        Ok(())
    }

    /// The AMP pipeline: every row of `left` (bytes of the left precision)
    /// against every coefficient column, in steps of the arithmetic's group.
    fn stream(
        &mut self,
        worker: WorkerId,
        state: &mut State,
        left: &[u8],
        rows: u32,
        k: u32,
        c: u32,
    ) {
        let h = self.header;
        let group = h.arithmetic.group() as usize;
        let (rows, k, c) = (rows as usize, k as usize, c as usize);
        let first_step = state.inner_done / group as u64;
        let single = h.arithmetic.single_partials();
        let block = Block {
            rows,
            k,
            c,
            group,
            exact: !single,
        };
        let partials = &mut state.partials;
        let rounding = self.options.rounding;
        let random = move |r: usize, j: usize, g: u64, seed: u64| {
            unit_random(seed, worker, r as u64, j as u64, first_step + g)
        };
        // One monomorphic loop per rounding choice keeps the innermost
        // operation inlined.
        match (&state.coefficients, &self.tables.products) {
            (Coefficients::Codes(codes), Some(products)) => match (single, rounding) {
                // F16 partials: every step's sum is exact, on the 2^-24 grid.
                (false, Rounding::NearestEven) => {
                    block.run_codes(products, partials, left, codes, |x, _, _, _| {
                        round_f16_on_grid(x)
                    })
                }
                (true, Rounding::NearestEven) => {
                    block.run_codes(products, partials, left, codes, |x, _, _, _| round_f32(x))
                }
                (false, Rounding::Stochastic { seed }) => {
                    block.run_codes(products, partials, left, codes, |x, r, j, g| {
                        stochastic_f16(x, random(r, j, g, seed))
                    })
                }
                (true, Rounding::Stochastic { seed }) => {
                    block.run_codes(products, partials, left, codes, |x, r, j, g| {
                        stochastic_f32(x, random(r, j, g, seed))
                    })
                }
            },
            (Coefficients::Values(coefficients), _) => {
                let left = self.tables.left.decode(left);
                match (single, rounding) {
                    (false, Rounding::NearestEven) => {
                        block.run_values(partials, &left, coefficients, round_f16, |x, _, _, _| {
                            round_f16_on_grid(x)
                        })
                    }
                    (true, Rounding::NearestEven) => {
                        block.run_values(partials, &left, coefficients, round_f32, |x, _, _, _| {
                            round_f32(x)
                        })
                    }
                    (false, Rounding::Stochastic { seed }) => {
                        block.run_values(partials, &left, coefficients, round_f16, |x, r, j, g| {
                            stochastic_f16(x, random(r, j, g, seed))
                        })
                    }
                    (true, Rounding::Stochastic { seed }) => {
                        block.run_values(partials, &left, coefficients, round_f32, |x, r, j, g| {
                            stochastic_f32(x, random(r, j, g, seed))
                        })
                    }
                }
            }
            // Codes are only loaded when the product table exists.
            (Coefficients::Codes(_), None) => {
                debug_assert!(false, "coefficient codes without a product table");
            }
        }
        state.inner_done += k as u64;
        let steps = k.div_ceil(group) as u64;
        self.stats.macs += (rows * k * c) as u64;
        self.stats.amp_steps += (rows * c) as u64 * steps;
    }
}

/// Checks that every repetition of row-major left `runs` starts at a
/// multiple of `alignment` from the (aligned) operand base. The stride
/// matters only when a run repeats: a single repetition never uses it.
fn check_row_runs(
    worker: WorkerId,
    op: usize,
    runs: &[Run],
    alignment: u32,
) -> Result<(), EmulateError> {
    // The operand bases were checked against a non-zero alignment already.
    let a = alignment.max(1);
    for (j, r) in runs.iter().enumerate() {
        if r.offset % a != 0 || (r.count > 1 && r.stride % a != 0) {
            return Err(EmulateError::MisalignedLeftRun {
                worker,
                op,
                run: j,
                offset: r.offset,
                stride: r.stride,
                alignment,
            });
        }
    }
    Ok(())
}
