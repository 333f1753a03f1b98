//! What the tile model checks before it allocates or runs anything: every
//! id a step names exists, every tile is in range, and the whole run's work
//! is inside [`Limits`].
//!
//! The work is counted without running: the step tree is walked once, each
//! repeat body with its iteration count multiplied in (saturating), so 40
//! nested repeats of count 2 or one repeat of count 2^32 − 1 cost a walk of
//! the program's size and are refused before the first step runs.

use std::collections::HashMap;

use ipu_layout::EntityId;
use ipu_package::graph::Graph;
use ipu_package::package::Package;
use ipu_package::program::{
    BufferId, BufferRole, Codelet, ComputeStep, ExchangeStep, Program, RepeatStep, WalkEvent,
};

use super::Limits;
use crate::SimError;
use crate::codelets::{codelet_operands, codelet_work};

/// The work a run will do, counted before it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Work {
    /// Step executions (a repeat's steps once per iteration, and each
    /// iteration itself).
    pub steps: u64,
    /// Compute and exchange step executions alone (what a run's progress
    /// counts).
    pub step_runs: u64,
    /// Codelet elements (GEMM multiply-accumulates, elements of the
    /// element-wise codelets, attention scores times head columns).
    pub compute_elements: u64,
    /// Words the exchange rows send (two per item, an upper bound for
    /// 64-bit items) plus words of on-tile copies.
    pub exchange_words: u64,
}

/// Checks the ids and tiles `package`'s steps name and counts the run's
/// work against `limits`.
pub(crate) fn validate(package: &Package, limits: &Limits) -> Result<Work, SimError> {
    let tiles = package.manifest.tile_count;
    if tiles > limits.max_tiles {
        return Err(SimError::TooManyTiles {
            tiles,
            limit: limits.max_tiles,
        });
    }
    let p = &package.program;
    for (phase, rows) in package.phases.iter().map(|p| &p.rows).enumerate() {
        if rows.tile_count() != tiles {
            return Err(SimError::RowTiles {
                phase,
                rows: rows.tile_count(),
                tiles,
            });
        }
    }
    let mut walk = WorkCount {
        package,
        limits,
        work: Work::default(),
        phase: 0,
        phase_words: vec![None; package.phases.len()],
    };
    walk.steps(p)?;
    Ok(walk.work)
}

struct WorkCount<'a> {
    package: &'a Package,
    limits: &'a Limits,
    work: Work,
    phase: usize,
    /// Words each phase sends, counted once.
    phase_words: Vec<Option<u64>>,
}

impl WorkCount<'_> {
    fn buffer(&self, b: BufferId, context: &str) -> Result<(), SimError> {
        let buffers = self.package.program.buffers.len();
        if b.index() < buffers {
            Ok(())
        } else {
            Err(SimError::UnknownBuffer {
                buffer: b,
                buffers,
                context: context.to_owned(),
            })
        }
    }

    fn add(&mut self, what: &'static str, amount: u64, times: u64) -> Result<(), SimError> {
        let (total, limit) = match what {
            STEPS => (&mut self.work.steps, self.limits.max_steps),
            COMPUTE => (
                &mut self.work.compute_elements,
                self.limits.max_compute_elements,
            ),
            _ => (
                &mut self.work.exchange_words,
                self.limits.max_exchange_words,
            ),
        };
        *total = total.saturating_add(amount.saturating_mul(times));
        if *total > limit {
            return Err(SimError::WorkLimit {
                what,
                needed: *total,
                limit,
            });
        }
        Ok(())
    }

    fn steps(&mut self, program: &Program) -> Result<(), SimError> {
        for event in program.walk() {
            match event {
                WalkEvent::Compute(step, at) => {
                    self.add(STEPS, 1, at.runs)?;
                    self.work.step_runs = self.work.step_runs.saturating_add(at.runs);
                    self.compute(step, at.runs)?;
                }
                WalkEvent::Exchange(step, at) => {
                    self.add(STEPS, 1, at.runs)?;
                    self.work.step_runs = self.work.step_runs.saturating_add(at.runs);
                    self.exchange(step, at.runs)?;
                }
                WalkEvent::Enter(repeat, at) => {
                    self.add(STEPS, 1, at.runs)?;
                    let RepeatStep {
                        name,
                        count,
                        iteration_buffers,
                        ..
                    } = repeat;
                    for (b, list) in iteration_buffers {
                        self.buffer(*b, &format!("repeat `{name}`"))?;
                        for &bi in list {
                            self.buffer(bi, &format!("repeat `{name}`"))?;
                        }
                    }
                    // Each iteration is a step execution of its own, so a
                    // long repeat of an empty body is bounded too.
                    self.add(STEPS, 1, at.runs.saturating_mul(u64::from(*count)))?;
                }
                WalkEvent::Leave(..) => {}
            }
        }
        Ok(())
    }

    fn compute(&mut self, step: &ComputeStep, times: u64) -> Result<(), SimError> {
        let p = &self.package.program;
        let tiles = self.package.manifest.tile_count;
        let name = &step.label;
        let kernels = p.kernels.len().min(self.package.kernels.len());
        for (tile, c) in &step.calls {
            if tile.as_u32() >= tiles {
                return Err(SimError::UnknownTile {
                    tile: *tile,
                    tiles,
                    what: format!("a codelet of step `{name}`"),
                });
            }
            for (operand, _) in codelet_operands(c) {
                self.buffer(operand.buffer, &format!("step `{name}`"))?;
            }
            let spec = match c {
                Codelet::Gemm { kernel, .. } => {
                    if kernel.index() >= kernels {
                        return Err(SimError::UnknownKernel {
                            kernel: *kernel,
                            kernels,
                        });
                    }
                    p.kernels.get(*kernel)
                }
                _ => None,
            };
            self.add(COMPUTE, codelet_work(c, spec), times)?;
        }
        Ok(())
    }

    fn exchange(&mut self, step: &ExchangeStep, times: u64) -> Result<(), SimError> {
        let tiles = self.package.manifest.tile_count;
        let name = &step.label;
        for c in &step.copies {
            self.buffer(c.source, &format!("exchange step `{name}`"))?;
            self.buffer(c.destination, &format!("exchange step `{name}`"))?;
        }
        let phase = self.phase;
        let Some((info, rows)) = self.package.phases.get(phase).map(|p| (&p.info, &p.rows)) else {
            return Err(SimError::MissingPhase {
                step: name.to_string(),
                phase,
                phases: self.package.phases.len(),
                rows: self.package.phases.len(),
            });
        };
        let words = match self.phase_words.get(phase).copied().flatten() {
            Some(w) => w,
            None => {
                let local: u64 = info
                    .local
                    .iter()
                    .map(|c| u64::from(c.bytes).div_ceil(4))
                    .fold(0, u64::saturating_add);
                // All of a phase's copies are read before it writes, so
                // their bytes are held at once: no more than the images
                // hold.
                let memory = self.package.target.memory();
                let images =
                    u64::from(tiles).saturating_mul(u64::from(memory.sram_end - memory.sram_start));
                if local.saturating_mul(4) > images {
                    return Err(SimError::WorkLimit {
                        what: "bytes of on-tile copies in one phase",
                        needed: local.saturating_mul(4),
                        limit: images,
                    });
                }
                let w = rows.replay_words().saturating_add(local);
                if let Some(slot) = self.phase_words.get_mut(phase) {
                    *slot = Some(w);
                }
                w
            }
        };
        self.add(EXCHANGE, words, times)?;
        self.phase += 1;
        Ok(())
    }
}

const STEPS: &str = "step executions";
const COMPUTE: &str = "codelet elements";
const EXCHANGE: &str = "exchange words";

/// Checks that `graph` is the graph `package` was built from, as far as the
/// host sees it: every input, weight and output of the graph has a buffer
/// of the same name and element count, and every input and weight buffer
/// has a tensor. Only sizes are compared, so it is cheap and allocates
/// nothing per element: call it before generating values for `graph`. A
/// package whose stored fixture lost the parameter overrides it was built
/// with (say 27 layers against a 1-layer package), or was edited, would
/// otherwise run (or generate values for sizes it never holds) and fail
/// with no hint why.
pub fn check_fixture(package: &Package, graph: &Graph) -> Result<(), SimError> {
    let buffers = &package.program.buffers;
    let by_name: HashMap<&str, BufferId> =
        buffers.iter().map(|(i, b)| (b.name.as_str(), i)).collect();
    for (_, t) in graph.tensors().iter() {
        if t.kind().is_computed() && t.kind() != ipu_package::TensorKind::Output {
            continue;
        }
        let Some(b) = by_name.get(t.name()).and_then(|&i| buffers.get(i)) else {
            return Err(SimError::FixtureMissingBuffer {
                tensor: t.name().to_owned(),
                kind: t.kind().as_str(),
            });
        };
        let count =
            b.ty.shape()
                .element_count()
                .map_err(|source| SimError::Layout {
                    what: b.name.clone(),
                    source,
                })?;
        if count != t.element_count() {
            return Err(SimError::FixtureSize {
                tensor: t.name().to_owned(),
                fixture: t.element_count(),
                package: count,
            });
        }
    }
    for b in buffers.values() {
        if matches!(b.role, BufferRole::Input | BufferRole::Weight)
            && graph.tensor_by_name(&b.name).is_none()
        {
            return Err(SimError::FixtureMissingTensor {
                buffer: b.name.clone(),
            });
        }
    }
    Ok(())
}
