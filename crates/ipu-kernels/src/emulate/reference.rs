//! The plain emulator this crate had before the fast loops: every element
//! decoded where it is read, every product computed where it is used, one
//! output element at a time. Kept for tests only, as the independent
//! statement of the arithmetic that the fast emulator must match bit for bit.

use ipu_layout::{ElementOrder, Precision};

use super::rounding::{round_f16, round_f32, stochastic_f16, stochastic_f32, stored, unit_random};
use super::{EmulateOptions, EmulationStats, KernelArgs, Rounding, check_header, check_row_runs};
use crate::WorkerId;
use crate::error::{EmulateError, OpSite, Operand};
use crate::program::{AmpOp, AmpProgram, CoefficientLoad, ProgramHeader, Run};

/// Runs `program` as the plain emulator did.
pub(super) fn emulate_reference(
    program: &AmpProgram,
    memory: &mut [u8],
    memory_base: u32,
    args: &KernelArgs,
    options: &EmulateOptions,
) -> Result<EmulationStats, EmulateError> {
    let h = &program.header;
    check_header(h)?;
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
        stats: EmulationStats::default(),
        operand_bytes: [left_bytes, right_bytes, output_bytes],
    };
    for (p, pass) in program.passes().enumerate() {
        machine.stats.ops += 1;
        let tile = machine.load_coefficients(p, &pass.coefficients)?;
        for w in &pass.workers {
            machine.run_worker(p, w.worker, &w.ops, &tile)?;
        }
    }
    Ok(machine.stats)
}

struct Machine<'a> {
    memory: &'a mut [u8],
    start: u64,
    end: u64,
    header: &'a ProgramHeader,
    args: &'a KernelArgs,
    options: &'a EmulateOptions,
    stats: EmulationStats,
    operand_bytes: [u64; 3],
}

/// The tile's coefficient state for one pass: `inner × columns`, row
/// major, as exact values.
struct Tile {
    coefficients: Vec<f64>,
    dims: (u32, u32),
}

/// The AMP state of one worker in one pass.
struct State {
    /// The pass, for the position of stochastic rounding draws.
    pass: usize,
    /// Partials, `rows × columns`, row major.
    partials: Vec<f64>,
    partial_dims: Option<(u32, u32)>,
    /// Inner elements accumulated into the current partials so far in
    /// this pass (the position of the next AMP step, for stochastic
    /// rounding).
    inner_done: u64,
}

impl Machine<'_> {
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

    /// Reads an `count × elements` block through `runs` as exact values.
    #[allow(clippy::too_many_arguments)]
    fn gather(
        &mut self,
        site: OpSite,
        operand: Operand,
        runs: &[Run],
        count: u32,
        elements: u32,
        precision: Precision,
    ) -> Result<Vec<f64>, EmulateError> {
        let eb = precision.element_bytes();
        let per_run = Self::run_elements(site, runs, count, elements, eb)?;
        self.check_block(site, count, elements)?;
        let mut values = vec![0.0f64; count as usize * elements as usize];
        let mut column = 0usize;
        for (r, &n) in runs.iter().zip(&per_run) {
            for i in 0..count {
                let range = self.locate(site, operand, r, i)?;
                let row = &mut values[i as usize * elements as usize..][..elements as usize];
                for (e, chunk) in self.memory[range].chunks_exact(eb as usize).enumerate() {
                    row[column + e] = f64::from(precision.decode_from(chunk));
                }
            }
            column += n as usize;
        }
        Ok(values)
    }

    /// Writes an `count × elements` block through `runs`.
    #[allow(clippy::too_many_arguments)]
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
        let mut column = 0usize;
        for (r, &n) in runs.iter().zip(&per_run) {
            for i in 0..count {
                let range = self.locate(site, Operand::Output, r, i)?;
                let row = &values[i as usize * elements as usize..][..elements as usize];
                for (e, chunk) in self.memory[range].chunks_exact_mut(eb as usize).enumerate() {
                    // Partials are already in the output precision, so this
                    // encoding is exact.
                    precision.encode_into(stored(row[column + e]), chunk);
                }
            }
            column += n as usize;
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

    fn load_coefficients(
        &mut self,
        pass: usize,
        load: &CoefficientLoad,
    ) -> Result<Tile, EmulateError> {
        let h = self.header;
        let CoefficientLoad {
            inner,
            columns,
            runs,
        } = load;
        let mut values = self.gather(
            OpSite::load(pass),
            Operand::Right,
            runs,
            *inner,
            *columns,
            h.right,
        )?;
        if h.arithmetic.widens_weights() {
            for v in &mut values {
                *v = round_f16(*v);
            }
        }
        self.stats.coefficient_bytes +=
            u64::from(*inner) * u64::from(*columns) * h.right.element_bytes();
        Ok(Tile {
            coefficients: values,
            dims: (*inner, *columns),
        })
    }

    fn run_worker(
        &mut self,
        pass: usize,
        worker: WorkerId,
        ops: &[AmpOp],
        tile: &Tile,
    ) -> Result<(), EmulateError> {
        let h = self.header;
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
                    state.partials =
                        self.gather(site, Operand::Output, runs, *rows, *columns, h.output)?;
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
                    let left = self.gather(site, Operand::Left, runs, *rows, *inner, h.left)?;
                    self.stats.left_bytes +=
                        u64::from(*rows) * u64::from(*inner) * h.left.element_bytes();
                    self.stream(worker, &mut state, tile, &left, *rows);
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
                    self.scatter(site, runs, *rows, *columns, h.output, &partials)?;
                    self.stats.output_bytes_written +=
                        u64::from(*rows) * u64::from(*columns) * h.output.element_bytes();
                    state.partial_dims = None;
                }
            }
        }
        Ok(())
    }

    /// The AMP pipeline: every row of `left` against every coefficient
    /// column, in steps of the arithmetic's group.
    fn stream(
        &mut self,
        worker: WorkerId,
        state: &mut State,
        tile: &Tile,
        left: &[f64],
        rows: u32,
    ) {
        let h = self.header;
        let group = h.arithmetic.group() as usize;
        let (k, c) = tile.dims;
        let (rows, k, c) = (rows as usize, k as usize, c as usize);
        // The pass in the high half, the step within it below.
        let first_step = ((state.pass as u64) << 32) | (state.inner_done / group as u64);
        let shape = Stream {
            left,
            coefficients: &tile.coefficients,
            rows,
            k,
            c,
            group,
        };
        let partials = &mut state.partials;
        // One monomorphic loop per rounding choice keeps the innermost
        // operation inlined.
        match (h.arithmetic.single_partials(), self.options.rounding) {
            (false, Rounding::NearestEven) => {
                shape.run(partials, round_f16, |x, _, _, _| round_f16(x))
            }
            (true, Rounding::NearestEven) => {
                shape.run(partials, round_f32, |x, _, _, _| round_f32(x))
            }
            (false, Rounding::Stochastic { seed }) => {
                shape.run(partials, round_f16, |x, r, j, g| {
                    stochastic_f16(
                        x,
                        unit_random(seed, worker, r as u64, j as u64, first_step + g),
                    )
                })
            }
            (true, Rounding::Stochastic { seed }) => {
                shape.run(partials, round_f32, |x, r, j, g| {
                    stochastic_f32(
                        x,
                        unit_random(seed, worker, r as u64, j as u64, first_step + g),
                    )
                })
            }
        }
        state.inner_done += k as u64;
        let steps = k.div_ceil(group) as u64;
        self.stats.macs += (rows * k * c) as u64;
        self.stats.amp_steps += (rows * c) as u64 * steps;
    }
}

/// One stream of rows through the AMP against a coefficient tile.
struct Stream<'a> {
    /// `rows × k` left values.
    left: &'a [f64],
    /// `k × c` coefficients.
    coefficients: &'a [f64],
    rows: usize,
    k: usize,
    c: usize,
    group: usize,
}

impl Stream<'_> {
    /// Accumulates into `partials` (`rows × c`): each product rounded by
    /// `product`, each step's sum rounded by `update(sum, row, column, step)`.
    fn run(
        &self,
        partials: &mut [f64],
        product: impl Fn(f64) -> f64,
        update: impl Fn(f64, usize, usize, u64) -> f64,
    ) {
        let (k, c) = (self.k, self.c);
        let mut column = vec![0.0f64; k];
        for j in 0..c {
            for (kk, v) in column.iter_mut().enumerate() {
                *v = self.coefficients[kk * c + j];
            }
            for r in 0..self.rows {
                let row = &self.left[r * k..(r + 1) * k];
                let mut partial = partials[r * c + j];
                let chunks = row.chunks(self.group).zip(column.chunks(self.group));
                for (step, (a_chunk, b_chunk)) in chunks.enumerate() {
                    let mut sum = partial;
                    for (&a, &b) in a_chunk.iter().zip(b_chunk) {
                        // Operands have at most 11 significant bits each, so
                        // the f64 product is exact before rounding.
                        sum += product(a * b);
                    }
                    partial = update(sum, r, j, step as u64);
                }
                partials[r * c + j] = partial;
            }
        }
    }
}

/// The fast emulator (with and without the product table) against the plain
/// one on random programs, memory contents (NaN, infinities and subnormals
/// included) and damaged programs: the same bytes, statistics and errors,
/// byte for byte.
#[cfg(test)]
mod tests;
