//! The steps: ids, tiles, repeats, codelet operand spans, GEMM calls, and
//! the run's work.
//!
//! The step tree is walked once, each repeat body once with its iteration
//! count multiplied into the work (saturating), so that forty nested
//! repeats of count two or one repeat of 2^32 − 1 iterations cost a walk of
//! the program's size and are refused before anything runs. Inside a
//! repeat an operand stands for the buffers its innermost substitution
//! table lists (one per iteration, as the tile model resolves it), and
//! every one of them is checked.

use std::collections::HashMap;

use ipu_layout::{EntityId, Precision, TileId};

use super::access::{Access, codelet_accesses};
use super::kernels::KernelPrograms;
use super::placement::shard_range;
use super::{Errors, ValidationError};
use crate::package::{Limits, Package};
use crate::program::{BufferId, Codelet, Operand, Program, RepeatStep, WalkEvent};
use crate::storage::codelet_buffers;

/// How an exchange step runs: which phase it uses is its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PhaseUse {
    /// Iterations of the innermost repeat around it (which its patches and
    /// copy strides count), 1 outside every repeat.
    pub iterations: u32,
    /// Whether a repeat runs it.
    pub in_repeat: bool,
    /// Times it runs in all.
    pub times: u64,
}

/// Work counted so far.
#[derive(Default)]
struct Work {
    steps: u64,
    calls: u64,
    compute: u64,
}

struct StepCheck<'a> {
    package: &'a Package,
    tiles: u32,
    limits: &'a Limits,
    programs: &'a KernelPrograms,
    errors: &'a mut Errors,
    work: Work,
    phases: Vec<PhaseUse>,
    /// The substitution tables of the repeats around the current step,
    /// outermost first.
    tables: Vec<HashMap<BufferId, &'a [BufferId]>>,
    /// Per tile, the kernel entries it calls (kernel and entry index).
    entries: Vec<Vec<(usize, usize)>>,
}

/// Checks the steps; returns how each phase is used when nothing failed.
pub(super) fn check(
    package: &Package,
    tiles: u32,
    limits: &Limits,
    programs: &KernelPrograms,
    errors: &mut Errors,
) -> Option<Vec<PhaseUse>> {
    let mut walk = StepCheck {
        package,
        tiles,
        limits,
        programs,
        errors,
        work: Work::default(),
        phases: Vec::new(),
        tables: Vec::new(),
        entries: vec![Vec::new(); tiles as usize],
    };
    let finished = walk.steps(&package.program);
    if finished {
        walk.kernel_code();
    }
    let phases = walk.phases;
    (finished && errors.is_empty()).then_some(phases)
}

impl<'a> StepCheck<'a> {
    /// Each tile's support memory must count the code of every kernel
    /// entry the tile calls (a tile holds the blocks it calls, see
    /// `ipu_kernels::entry_code_bytes`).
    fn kernel_code(&mut self) {
        let support = &self.package.placement.support;
        for (t, used) in self.entries.iter().enumerate() {
            let needed = used
                .iter()
                .filter_map(|&(k, e)| self.programs.get(k)?.get(e)?.as_ref())
                .map(|p| p.code_bytes)
                .fold(0u64, u64::saturating_add);
            let counted = support.get(t).map_or(0, |s| s.kernel_code_bytes);
            if needed > u64::from(counted) {
                self.errors.push(ValidationError::KernelCode {
                    tile: TileId::from_u32(t as u32),
                    counted,
                    needed,
                });
            }
        }
    }

    /// Adds `amount` run `times` times to a total; `false` (with the error
    /// recorded) when the total passes its limit.
    fn add(&mut self, what: &'static str, amount: u64, times: u64) -> bool {
        let (total, limit) = match what {
            STEPS => (&mut self.work.steps, self.limits.max_step_executions),
            CALLS => (&mut self.work.calls, self.limits.max_codelet_calls),
            _ => (&mut self.work.compute, self.limits.max_compute_elements),
        };
        *total = total.saturating_add(amount.saturating_mul(times));
        let found = *total;
        self.errors.within(what, found, limit)
    }

    fn buffer_ok(&mut self, step: &str, buffer: BufferId) -> bool {
        let buffers = self.package.program.buffers.len();
        if buffer.index() < buffers {
            true
        } else {
            self.errors.push(ValidationError::UnknownBuffer {
                step: step.to_owned(),
                buffer,
                buffers,
            });
            false
        }
    }

    /// The buffers `b` stands for in the current repeat context.
    fn candidates(&self, b: BufferId) -> &'a [BufferId] {
        for table in self.tables.iter().rev() {
            if let Some(list) = table.get(&b) {
                return list;
            }
        }
        &[]
    }

    /// Walks the program's steps; `false` stops the walk (an error was
    /// recorded, or the work passed its limit).
    fn steps(&mut self, program: &'a Program) -> bool {
        for event in program.walk() {
            let times = match event {
                WalkEvent::Compute(_, at)
                | WalkEvent::Exchange(_, at)
                | WalkEvent::Enter(_, at) => at.runs,
                WalkEvent::Leave(..) => {
                    self.tables.pop();
                    continue;
                }
            };
            if self.errors.full() || !self.add(STEPS, 1, times) {
                return false;
            }
            match event {
                WalkEvent::Compute(step, _) => {
                    if !self.add(CALLS, step.calls.len() as u64, times) {
                        return false;
                    }
                    let name = step.label.to_string();
                    for (tile, codelet) in &step.calls {
                        if self.errors.full() {
                            return false;
                        }
                        let Some(work) = self.codelet(&name, *tile, codelet) else {
                            continue;
                        };
                        if !self.add(COMPUTE, work, times) {
                            return false;
                        }
                    }
                }
                WalkEvent::Exchange(step, at) => {
                    let name = step.label.to_string();
                    for c in &step.copies {
                        self.buffer_ok(&name, c.source);
                        self.buffer_ok(&name, c.destination);
                    }
                    self.phases.push(PhaseUse {
                        iterations: at.repeat.map_or(1, |r| r.count),
                        in_repeat: at.repeat.is_some(),
                        times,
                    });
                }
                WalkEvent::Enter(repeat, at) => {
                    if !self.enter(repeat, at.depth, times) {
                        return false;
                    }
                }
                WalkEvent::Leave(..) => {}
            }
        }
        true
    }

    /// Checks a repeat about to be entered, `depth` repeats deep, started
    /// `times` times, and opens its substitution table.
    fn enter(&mut self, repeat: &'a RepeatStep, depth: usize, times: u64) -> bool {
        let RepeatStep {
            name,
            count,
            iteration_buffers,
            ..
        } = repeat;
        if depth + 1 > self.limits.max_repeat_depth {
            self.errors.push(ValidationError::RepeatDepth {
                repeat: name.clone(),
                depth: depth + 1,
                limit: self.limits.max_repeat_depth,
            });
            return false;
        }
        if *count == 0 || *count > self.limits.max_repeat_count {
            self.errors.push(ValidationError::RepeatCount {
                repeat: name.clone(),
                count: *count,
                limit: self.limits.max_repeat_count,
            });
            return false;
        }
        let mut table = HashMap::with_capacity(iteration_buffers.len());
        let mut ok = true;
        for (b, list) in iteration_buffers {
            ok &= self.buffer_ok(name, *b);
            for &bi in list {
                ok &= self.buffer_ok(name, bi);
            }
            if list.len() != *count as usize {
                self.errors.push(ValidationError::IterationBuffers {
                    repeat: name.clone(),
                    buffer: *b,
                    found: list.len(),
                    count: *count,
                });
                ok = false;
            }
            table.insert(*b, list.as_slice());
        }
        if !ok {
            return false;
        }
        // Each iteration counts as a step execution, so that a long
        // repeat of an empty body is bounded too.
        if !self.add(STEPS, 1, times.saturating_mul(u64::from(*count))) {
            return false;
        }
        self.tables.push(table);
        true
    }

    /// Checks one call; returns its work in compute elements when its ids
    /// are in range.
    fn codelet(&mut self, step: &str, tile: TileId, codelet: &Codelet) -> Option<u64> {
        let p = &self.package.program;
        if tile.as_u32() >= self.tiles {
            self.errors.push(ValidationError::CodeletTile {
                step: step.to_owned(),
                tile,
                tiles: self.tiles,
            });
            return None;
        }
        let mut ok = true;
        for b in codelet_buffers(codelet) {
            ok &= self.buffer_ok(step, b);
        }
        let kernel = match codelet {
            Codelet::Gemm { kernel, .. } => match p.kernels.get(*kernel) {
                Some(k) => Some((*kernel, k)),
                None => {
                    self.errors.push(ValidationError::UnknownKernel {
                        step: step.to_owned(),
                        kernel: *kernel,
                        kernels: p.kernels.len(),
                    });
                    return None;
                }
            },
            _ => None,
        };
        if !ok {
            return None;
        }
        // Every operand is checked with each buffer it stands for: round
        // `r` takes the `r`-th of every operand's list (or its only one).
        // An operand's span depends on its own buffer alone, so every
        // (operand, buffer) pair is checked once over the rounds.
        let lists: Vec<(BufferId, &'a [BufferId])> = codelet_buffers(codelet)
            .into_iter()
            .map(|b| (b, self.candidates(b)))
            .collect();
        let rounds = lists.iter().map(|(_, l)| l.len()).max().unwrap_or(0).max(1);
        let mut work = 0;
        for round in 0..rounds {
            let resolve = |b: BufferId| -> BufferId {
                lists
                    .iter()
                    .find(|(x, _)| *x == b)
                    .and_then(|(_, l)| l.get(round.min(l.len().saturating_sub(1))))
                    .copied()
                    .unwrap_or(b)
            };
            let precision = |o: Operand| -> Precision {
                p.buffers
                    .get(resolve(o.buffer))
                    .map_or(Precision::F32, |b| b.ty.precision())
            };
            let (accesses, w) = codelet_accesses(codelet, &precision, kernel.map(|k| k.1));
            work = w.unwrap_or(u64::MAX);
            let mut spans: Vec<Option<(u64, u64)>> = Vec::with_capacity(accesses.len());
            for a in &accesses {
                spans.push(self.access(step, tile, a, resolve(a.operand.buffer)));
            }
            if let (Some((id, _)), Codelet::Gemm { entry, rows, .. }) = (kernel, codelet) {
                self.gemm(step, tile, (id, *entry, *rows), &accesses, &spans, &resolve);
            }
            if let Codelet::Gather {
                indices,
                table_rows,
                first_row,
                total_rows,
                ..
            } = *codelet
            {
                // The tile model faults on these; a valid package has neither.
                let what = if u64::from(first_row) + u64::from(table_rows) > u64::from(total_rows) {
                    Some(format!(
                        "reads rows {first_row}..{} of a {total_rows}-row table",
                        u64::from(first_row) + u64::from(table_rows)
                    ))
                } else if precision(indices) != Precision::F32 {
                    Some(format!(
                        "reads its indices as {}; row numbers are F32",
                        precision(indices)
                    ))
                } else {
                    None
                };
                if let Some(what) = what {
                    self.errors.push(ValidationError::GatherArguments {
                        step: step.to_owned(),
                        tile,
                        what,
                    });
                }
            }
        }
        Some(work)
    }

    /// Checks one access of `buffer` on `tile`; returns its address range.
    fn access(
        &mut self,
        step: &str,
        tile: TileId,
        a: &Access,
        buffer: BufferId,
    ) -> Option<(u64, u64)> {
        let name = || {
            self.package
                .program
                .buffers
                .get(buffer)
                .map_or_else(|| buffer.to_string(), |b| b.name.clone())
        };
        let Some((address, limit)) = shard_range(self.package, buffer, tile) else {
            self.errors.push(ValidationError::OperandUnplaced {
                step: step.to_owned(),
                tile,
                slot: a.slot,
                buffer: name(),
            });
            return None;
        };
        let end = match a.end() {
            Ok(end) => end,
            Err(source) => {
                self.errors.push(ValidationError::OperandSpan {
                    step: step.to_owned(),
                    tile,
                    slot: a.slot,
                    buffer: name(),
                    source,
                });
                return None;
            }
        };
        if end > limit {
            self.errors.push(ValidationError::OperandOutside {
                step: step.to_owned(),
                tile,
                slot: a.slot,
                buffer: name(),
                offset: a.operand.offset,
                end,
                limit,
            });
            return None;
        }
        let start = u64::from(address) + u64::from(a.operand.offset);
        Some((start, u64::from(address) + end))
    }

    /// Checks a GEMM call against its entry's program: rows, operand
    /// precisions, alignment, the output clear of the inputs, and the left
    /// operand's read tail inside tile memory.
    fn gemm(
        &mut self,
        step: &str,
        tile: TileId,
        (kernel, entry, rows): (crate::program::KernelId, crate::program::GemmEntry, u32),
        accesses: &[Access],
        spans: &[Option<(u64, u64)>],
        resolve: &dyn Fn(BufferId) -> BufferId,
    ) {
        let index = entry.index();
        let Some(program) = self
            .programs
            .get(kernel.index())
            .and_then(|e| e.get(index))
            .copied()
            .flatten()
        else {
            // The kernel check has reported it.
            return;
        };
        if let Some(used) = self.entries.get_mut(tile.index())
            && !used.contains(&(kernel.index(), index))
        {
            used.push((kernel.index(), index));
        }
        let h = program.header;
        let p = &self.package.program;
        let kernel_name = self
            .package
            .kernels
            .get(kernel.index())
            .map_or_else(|| kernel.to_string(), |k| k.name.clone());
        if rows != h.rows {
            self.errors.push(ValidationError::GemmRows {
                step: step.to_owned(),
                tile,
                kernel: kernel_name.clone(),
                rows,
                entry_rows: h.rows,
            });
        }
        let expected = [h.left, h.right, h.output];
        for ((a, span), want) in accesses.iter().zip(spans).zip(expected) {
            let buffer = resolve(a.operand.buffer);
            if let Some(b) = p.buffers.get(buffer)
                && b.ty.precision() != want
            {
                self.errors.push(ValidationError::GemmPrecision {
                    step: step.to_owned(),
                    tile,
                    kernel: kernel_name.clone(),
                    slot: a.slot,
                    buffer: b.name.clone(),
                    found: b.ty.precision(),
                    expected: want,
                });
            }
            if let Some((start, _)) = span
                && (h.alignment == 0 || start % u64::from(h.alignment) != 0)
            {
                self.errors.push(ValidationError::GemmMisaligned {
                    step: step.to_owned(),
                    tile,
                    slot: a.slot,
                    address: *start,
                    alignment: h.alignment,
                });
            }
        }
        if let [Some(left), Some(right), Some(out)] = spans {
            for (slot, (s, e)) in [("left", left), ("right", right)] {
                if s < &out.1 && &out.0 < e && e > s && out.1 > out.0 {
                    self.errors.push(ValidationError::GemmOverlap {
                        step: step.to_owned(),
                        tile,
                        slot,
                    });
                }
            }
            let end = left.1.saturating_add(u64::from(h.left_tail_bytes));
            let memory_end = self.package.target.memory().sram_end;
            if end > u64::from(memory_end) {
                self.errors.push(ValidationError::GemmTail {
                    step: step.to_owned(),
                    tile,
                    end,
                    memory_end,
                });
            }
        }
    }
}

const STEPS: &str = "step executions";
const CALLS: &str = "codelet calls";
const COMPUTE: &str = "compute elements";
