//! Running a program whose header was checked: the operand checks against
//! the image, then the machine that performs each pass (the supervisor's
//! coefficient load into the tile's one coefficient state, then each
//! worker's ops: block copies, decoding, the AMP steps through `kernel.rs`,
//! rounding and stores) and counts the work done.

mod pending;

use std::rc::Rc;

use ipu_layout::{ElementOrder, Precision};

use super::half::HalfRows;
use super::kernel::{self, Block};
use super::lanes::{LaneRows, LaneUpdate, Lanes, NEAREST_EVEN, finite_max_abs};
use super::rounding::{
    round_f16, round_f16_on_grid, round_f32, stochastic_f16, stochastic_f32, stored, unit_random,
};
use super::{EmulateOptions, EmulationStats, KernelArgs, Rounding, Tables, check_row_runs};
use crate::WorkerId;
use crate::error::{EmulateError, OpSite, Operand};
use crate::program::{AmpOp, AmpProgram, CoefficientLoad, ProgramHeader, Run};
use crate::variant::Arithmetic;
use pending::Pending;

/// Runs a program whose header was checked.
pub(super) fn run(
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
        lanes: None,
        left_rows: Vec::new(),
        pending: Vec::new(),
    };
    let ran = machine.run_passes(program);
    // Whatever happened, the image ends with every store written.
    let flushed = machine.flush_all();
    ran?;
    flushed?;
    Ok(machine.stats)
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
    lanes: LanesCache,
    left_rows: LeftCache,
    /// Stores not yet written to the image, mutually disjoint, oldest
    /// first (`pending.rs`).
    pending: Vec<Pending>,
}

/// The coefficient state: `inner × columns` weights in the group layout of
/// [`kernel::group_layout`], as exact values or, with a product table, as
/// codes.
enum Coefficients {
    Values(Vec<f64>),
    /// Exact values, row major, for [`kernel::Block::run_row_values`] and
    /// the F16 lane kernel, with their largest magnitude (`None` when one
    /// is not finite).
    Rows(Vec<f64>, Option<f64>),
    Codes(Vec<u8>),
    /// The gathered row-major bytes, laid out only if a stream needs them
    /// (one the lane kernel cannot run).
    Bytes(Vec<u8>),
}

impl Coefficients {
    /// The layout the table and value loops read for the row-major
    /// `k × c` block `bytes` of the header's weight precision.
    /// Sums rounded to nearest take the row-major values: F32 partials add
    /// each product in the same order either way, and an F16-partials
    /// step's sum is exact (every term is on the 2^-24 grid and far below
    /// 2^53 of it), so its order cannot change it.
    fn lay_out(
        bytes: &[u8],
        k: usize,
        c: usize,
        h: &ProgramHeader,
        tables: &Tables,
        rounding: Rounding,
    ) -> Self {
        let group = h.arithmetic.group() as usize;
        if tables.products.is_some() {
            Coefficients::Codes(kernel::group_layout(bytes, k, c, group))
        } else {
            let mut values = tables.right.decode(bytes);
            if h.arithmetic.widens_weights() {
                for v in &mut values {
                    *v = round_f16(*v);
                }
            }
            if rounding == Rounding::NearestEven {
                let max_abs = finite_max_abs(&values);
                Coefficients::Rows(values, max_abs)
            } else {
                Coefficients::Values(kernel::group_layout(&values, k, c, group))
            }
        }
    }
}

/// The last lane layout built in a run and the load it came from
/// (`inner`, `columns`, runs): the weights cannot change during a run (the
/// output overlaps no input), so a program that loads a tile again shares
/// its layout.
type LanesCache = Option<((u32, u32, Vec<Run>), Rc<Lanes>)>;

/// Left blocks decoded for the lane kernel (`None` when not finite), by
/// the stream they came from (`rows`, `inner`, runs), most recent last: a
/// worker streams the same rows of an inner slice once per column slice,
/// and the program cannot change them.
type LeftCache = Vec<((u32, u32, Vec<Run>), Option<Rc<LaneRows>>)>;

/// Decoded left blocks kept per run: every worker's slices of a few inner
/// slices (a program whose outer loop runs over columns streams each
/// worker's inner slices once per column slice).
const LEFT_CACHE: usize = 96;

/// The tile's coefficient state: the weights the supervisor loaded for
/// the current pass, shared by every worker.
struct Tile {
    coefficients: Coefficients,
    dims: (u32, u32),
    /// The coefficients for the lane kernel, when the arithmetic is FP8
    /// into F16 partials and every weight is finite.
    lanes: Option<Rc<Lanes>>,
}

/// The AMP state of one worker in one pass.
struct State {
    /// The pass, for the position of stochastic rounding draws.
    pass: usize,
    /// Partials, `rows × columns`, row major.
    partials: Vec<f64>,
    partial_dims: Option<(u32, u32)>,
    /// Inner elements accumulated into the current partials so far in this
    /// pass (the position of the next AMP step, for stochastic rounding).
    inner_done: u64,
}

impl State {
    /// The position of AMP step `g` of the current stream, for stochastic
    /// rounding: the pass in the high half, the step within it below.
    fn step(&self, group: usize, g: u64) -> u64 {
        ((self.pass as u64) << 32) | (self.inner_done / group.max(1) as u64 + g)
    }
}

impl Machine<'_> {
    /// Every pass of `program`, in order.
    fn run_passes(&mut self, program: &AmpProgram) -> Result<(), EmulateError> {
        for (p, pass) in program.passes().enumerate() {
            self.stats.ops += 1;
            let mut tile = self.load_coefficients(p, &pass.coefficients)?;
            for w in &pass.workers {
                self.run_worker(p, w.worker, &w.ops, &mut tile)?;
            }
        }
        Ok(())
    }

    fn malformed(site: OpSite, reason: impl Into<String>) -> EmulateError {
        EmulateError::Malformed {
            site,
            reason: reason.into(),
        }
    }

    /// The image range of repetition `i` of `run` of `operand`, checked.
    fn locate(
        &self,
        site: OpSite,
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
                site,
                operand,
                offset,
                bytes,
                operand_bytes: size,
            });
        }
        let address = u64::from(base) + offset;
        if address < self.start || address + bytes > self.end {
            return Err(EmulateError::OutOfBounds {
                site,
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
        site: OpSite,
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
                    site,
                    format!("run {j} repeats {} times, expected {count}", r.count),
                ));
            }
            if r.bytes == 0 || u64::from(r.bytes) % eb != 0 {
                return Err(Self::malformed(
                    site,
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
                site,
                format!("runs cover {total} elements per repetition, expected {elements}"),
            ));
        }
        Ok(per_run)
    }

    /// Copies a `count × elements` block of `eb`-byte elements through
    /// `runs` into a row-major byte block.
    fn gather(
        &self,
        site: OpSite,
        operand: Operand,
        runs: &[Run],
        count: u32,
        elements: u32,
        eb: u64,
    ) -> Result<Vec<u8>, EmulateError> {
        let per_run = Self::run_elements(site, runs, count, elements, eb)?;
        self.check_block(site, count, elements)?;
        let eb = eb as usize;
        let row_bytes = elements as usize * eb;
        let mut block = vec![0u8; count as usize * row_bytes];
        let mut column = 0usize;
        for (r, &n) in runs.iter().zip(&per_run) {
            let n = n as usize * eb;
            for (i, row) in (0..count).zip(block.chunks_exact_mut(row_bytes.max(1))) {
                let range = self.locate(site, operand, r, i)?;
                row[column..column + n].copy_from_slice(&self.memory[range]);
            }
            column += n;
        }
        Ok(block)
    }

    /// Writes an `count × elements` block through `runs`.
    fn scatter(
        &mut self,
        site: OpSite,
        runs: &[Run],
        count: u32,
        elements: u32,
        precision: Precision,
        values: &[f64],
    ) -> Result<(), EmulateError> {
        let eb = precision.element_bytes();
        let per_run = Self::run_elements(site, runs, count, elements, eb)?;
        let codec = precision.codec();
        let mut column = 0usize;
        let mut buffer = Vec::new();
        for (r, &n) in runs.iter().zip(&per_run) {
            let n = n as usize;
            for i in 0..count {
                let range = self.locate(site, Operand::Output, r, i)?;
                let row = &values[i as usize * elements as usize..][..elements as usize];
                // Partials are already in the output precision, so this
                // encoding is exact.
                buffer.clear();
                buffer.extend(row[column..column + n].iter().map(|&v| stored(v)));
                codec.encode_slice(&buffer, &mut self.memory[range]);
            }
            column += n;
        }
        Ok(())
    }

    /// Rejects blocks larger than the largest operand, which bounds every
    /// allocation by the program's own operand sizes.
    fn check_block(&self, site: OpSite, count: u32, elements: u32) -> Result<(), EmulateError> {
        let h = self.header;
        let limit = (u64::from(h.rows) * u64::from(h.inner))
            .max(u64::from(h.inner) * u64::from(h.columns))
            .max(u64::from(h.rows) * u64::from(h.columns));
        if u64::from(count) * u64::from(elements) > limit {
            return Err(Self::malformed(
                site,
                format!("a {count} x {elements} block is larger than any operand"),
            ));
        }
        Ok(())
    }

    /// The supervisor's load of pass `pass`'s weight tile.
    fn load_coefficients(
        &mut self,
        pass: usize,
        load: &CoefficientLoad,
    ) -> Result<Tile, EmulateError> {
        let h = self.header;
        let tables = self.tables;
        let site = OpSite::load(pass);
        let CoefficientLoad {
            inner,
            columns,
            runs,
        } = load;
        let bytes = self.gather(
            site,
            Operand::Right,
            runs,
            *inner,
            *columns,
            h.right.element_bytes(),
        )?;
        let (k, c) = (*inner as usize, *columns as usize);
        let mut lanes = None;
        if h.arithmetic == Arithmetic::Fp8HalfPartials {
            let key = (*inner, *columns, runs.clone());
            lanes = match &self.lanes {
                Some((cached, l)) if *cached == key => Some(Rc::clone(l)),
                _ => {
                    let l = Lanes::new(&tables.right.decode(&bytes), k, c).map(Rc::new);
                    self.lanes = l.as_ref().map(|l| (key, Rc::clone(l)));
                    l
                }
            };
        }
        let coefficients = if lanes.is_some() {
            Coefficients::Bytes(bytes)
        } else {
            Coefficients::lay_out(&bytes, k, c, h, tables, self.options.rounding)
        };
        self.stats.coefficient_bytes += load.bytes(h.right.element_bytes());
        Ok(Tile {
            coefficients,
            dims: (*inner, *columns),
            lanes,
        })
    }

    fn run_worker(
        &mut self,
        pass: usize,
        worker: WorkerId,
        ops: &[AmpOp],
        tile: &mut Tile,
    ) -> Result<(), EmulateError> {
        let h = self.header;
        let tables = self.tables;
        let mut state = State {
            pass,
            partials: Vec::new(),
            partial_dims: None,
            inner_done: 0,
        };
        for (i, op) in ops.iter().enumerate() {
            let site = OpSite::worker(pass, worker, i);
            self.stats.ops += 1;
            match op {
                AmpOp::ZeroPartials { rows, columns } => {
                    self.check_block(site, *rows, *columns)?;
                    state.partials = vec![0.0; *rows as usize * *columns as usize];
                    state.partial_dims = Some((*rows, *columns));
                    state.inner_done = 0;
                }
                AmpOp::LoadPartials {
                    rows,
                    columns,
                    runs,
                } => {
                    state.partials = match self.pending_values(*rows, *columns, runs) {
                        Some(values) => values,
                        None => {
                            self.flush_all()?;
                            let bytes = self.gather(
                                site,
                                Operand::Output,
                                runs,
                                *rows,
                                *columns,
                                h.output.element_bytes(),
                            )?;
                            tables.output.decode(&bytes)
                        }
                    };
                    self.stats.partial_bytes_read +=
                        u64::from(*rows) * u64::from(*columns) * h.output.element_bytes();
                    state.partial_dims = Some((*rows, *columns));
                    state.inner_done = 0;
                }
                AmpOp::StreamRows { rows, inner, runs } => {
                    let (k, c) = tile.dims;
                    let Some((pr, pc)) = state.partial_dims else {
                        return Err(Self::malformed(
                            site,
                            "rows streamed before the partials start",
                        ));
                    };
                    if *inner != k || *rows != pr || c != pc {
                        return Err(Self::malformed(
                            site,
                            format!(
                                "stream of {rows} rows x {inner} inner does not match coefficients \
                                 {k} x {c} and partials {pr} x {pc}"
                            ),
                        ));
                    }
                    if h.left_order == ElementOrder::RowMajor {
                        check_row_runs(site, runs, h.alignment)?;
                    }
                    let lane_left = match tile.lanes {
                        Some(_) => self.lane_left(site, runs, *rows, *inner)?,
                        None => None,
                    };
                    self.stats.left_bytes +=
                        u64::from(*rows) * u64::from(*inner) * h.left.element_bytes();
                    if !self.stream_lanes(worker, &mut state, tile, lane_left.as_deref(), *rows) {
                        let left = self.gather(
                            site,
                            Operand::Left,
                            runs,
                            *rows,
                            *inner,
                            h.left.element_bytes(),
                        )?;
                        self.stream(worker, &mut state, tile, &left, *rows);
                    }
                }
                AmpOp::StorePartials {
                    rows,
                    columns,
                    runs,
                } => {
                    if state.partial_dims != Some((*rows, *columns)) {
                        return Err(Self::malformed(
                            site,
                            format!(
                                "store of {rows} x {columns} partials does not match the partial state {:?}",
                                state.partial_dims
                            ),
                        ));
                    }
                    let partials = std::mem::take(&mut state.partials);
                    self.store_partials(site, runs, *rows, *columns, partials)?;
                    self.stats.output_bytes_written +=
                        u64::from(*rows) * u64::from(*columns) * h.output.element_bytes();
                    state.partial_dims = None;
                }
            }
        }
        Ok(())
    }

    /// The left block of a stream decoded for the lane kernel, from the
    /// cache or gathered and decoded (`None` when the left precision has
    /// no code table or a value is not finite).
    fn lane_left(
        &mut self,
        site: OpSite,
        runs: &[Run],
        rows: u32,
        inner: u32,
    ) -> Result<Option<Rc<LaneRows>>, EmulateError> {
        let key = (rows, inner, runs.to_vec());
        if let Some((_, left)) = self.left_rows.iter().find(|(cached, _)| *cached == key) {
            return Ok(left.clone());
        }
        let Some(table) = &self.tables.left.codes else {
            return Ok(None);
        };
        let eb = self.header.left.element_bytes();
        let bytes = self.gather(site, Operand::Left, runs, rows, inner, eb)?;
        let left = LaneRows::new(table, &bytes, rows as usize, inner as usize).map(Rc::new);
        if self.left_rows.len() == LEFT_CACHE {
            self.left_rows.remove(0);
        }
        self.left_rows.push((key, left.clone()));
        Ok(left)
    }

    /// Runs a stream on the lane kernel when the coefficients and `left`
    /// allow it ([`Block::lanes_apply`]); returns whether it ran.
    fn stream_lanes(
        &mut self,
        worker: WorkerId,
        state: &mut State,
        tile: &Tile,
        left: Option<&LaneRows>,
        rows: u32,
    ) -> bool {
        let (Some(left), Some(weights)) = (left, tile.lanes.as_deref()) else {
            return false;
        };
        let (k, c) = tile.dims;
        let (rows, k, c) = (rows as usize, k as usize, c as usize);
        let block = Block {
            rows,
            k,
            c,
            group: self.header.arithmetic.group() as usize,
            exact: !self.header.arithmetic.single_partials(),
        };
        if !block.lanes_apply(&state.partials, left, weights) {
            return false;
        }
        let first_step = state.step(block.group, 0);
        let partials = &mut state.partials;
        match self.options.rounding {
            // In range (`lanes_apply`), rounding is the significand's.
            Rounding::NearestEven => block.run_lanes(partials, left, weights, NEAREST_EVEN),
            Rounding::Stochastic { seed } => {
                let update = LaneUpdate::Each(|x, r, j, g| {
                    let u = unit_random(seed, worker, r as u64, j as u64, first_step + g);
                    stochastic_f16(x, u)
                });
                block.run_lanes(partials, left, weights, update);
            }
        }
        self.count_stream(state, rows, k, c);
        true
    }

    /// The AMP pipeline: every row of `left` (bytes of the left precision)
    /// against every coefficient column, in steps of the arithmetic's group.
    fn stream(
        &mut self,
        worker: WorkerId,
        state: &mut State,
        tile: &mut Tile,
        left: &[u8],
        rows: u32,
    ) {
        let h = self.header;
        let group = h.arithmetic.group() as usize;
        let (k, c) = tile.dims;
        let (rows, k, c) = (rows as usize, k as usize, c as usize);
        let first_step = state.step(group, 0);
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
        if let Coefficients::Bytes(bytes) = &tile.coefficients {
            tile.coefficients =
                Coefficients::lay_out(bytes, k, c, h, self.tables, self.options.rounding);
        }
        // One monomorphic loop per rounding choice keeps the innermost
        // operation inlined.
        match (&tile.coefficients, &self.tables.products) {
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
            (Coefficients::Rows(coefficients, weights_max), _) => {
                // Laid out so only for sums rounded to nearest.
                let left = self.tables.left.decode(left);
                // F32 partials never take the F16 lane kernel: spare them
                // the scan of the rows.
                let left_max = if single { None } else { finite_max_abs(&left) };
                let half = match (weights_max, left_max) {
                    (Some(weights_max), Some(left_max)) => Some(HalfRows {
                        block,
                        left: &left,
                        weights: coefficients,
                        left_max,
                        weights_max: *weights_max,
                    }),
                    _ => None,
                };
                if let Some(half) = half.filter(|h| h.apply(partials)) {
                    half.run(partials);
                } else if single {
                    block.run_row_values(partials, &left, coefficients, round_f32, round_f32);
                } else {
                    block.run_row_values(
                        partials,
                        &left,
                        coefficients,
                        round_f16,
                        round_f16_on_grid,
                    );
                }
            }
            // Codes are only loaded when the product table exists, and
            // bytes were laid out above.
            (Coefficients::Codes(_), None) | (Coefficients::Bytes(_), _) => {
                debug_assert!(false, "coefficients not laid out for the product table");
            }
        }
        self.count_stream(state, rows, k, c);
    }

    /// Records a stream of `rows × k` against `k × c` coefficients.
    fn count_stream(&mut self, state: &mut State, rows: usize, k: usize, c: usize) {
        let group = self.header.arithmetic.group() as usize;
        state.inner_done += k as u64;
        let steps = k.div_ceil(group) as u64;
        self.stats.macs += (rows * k * c) as u64;
        self.stats.amp_steps += (rows * c) as u64 * steps;
    }
}
