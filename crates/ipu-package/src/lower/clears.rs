//! Padding clears: which padding of a buffer its codelets read is zeroed,
//! and in which step.
//!
//! A kernel reads the padding of its operands' inner dimension, which
//! meets the other operand's data, so that padding must be zero; the
//! lowering clears it per shard ([`Lowerer::clear_padding`]). A clear that
//! covers data as well (the span from the first run to the last, where
//! the runs would take too many calls) must run before the exchange fills
//! the buffer. A clear of padding alone may run after the fill: it waits
//! for the first compute step after the exchange and joins it, in front
//! of the step's calls on its tile, where that tile has the time to spare
//! (its calls and the clear take no longer than the step's busiest tile),
//! so that the clear costs no step and no sync of its own. Where a tile
//! has no time to spare, the clears run in a step of their own just
//! before that compute step, as they ran before the exchange.
//!
//! On SigLIP at b2 this moves fc2's left-operand clear (its 4,304 inner
//! elements do not split into whole AMP blocks, so the tiles of the last
//! inner block hold padding) into fc2's GEMM step, where those tiles run
//! the fewest AMP passes.

use std::collections::HashMap;

use ipu_kernels::{Variant, estimate_cycles};
use ipu_layout::TileId;

use super::Lowerer;
use crate::profile::{Work, codelet_work};
use crate::program::{
    BufferId, Codelet, ComputeStep, KernelId, Operand, Step, StepLabel, StepRole,
};

/// Clear calls per shard at most: padding whose runs take more calls (after
/// equal, equally spaced runs are joined into strided calls) is cleared as
/// the one span from the first run to the last (data bytes in between are
/// zeroed too, before the fill writes them), as it is where that is cheaper.
const MAX_CLEAR_RUNS: usize = 4;

/// A clear call's runs: `runs` runs of `bytes` bytes from `offset`,
/// `stride` bytes apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ClearRuns {
    offset: u64,
    bytes: u64,
    runs: u64,
    stride: u64,
}

/// `runs` (`(offset, bytes)`, ascending and disjoint) joined into strided
/// calls: each call takes the next runs while they have its length and
/// its spacing.
fn strided_runs(runs: &[(u64, u64)]) -> Vec<ClearRuns> {
    let mut out: Vec<ClearRuns> = Vec::new();
    for &(offset, bytes) in runs {
        if let Some(call) = out.last_mut() {
            let last = call
                .offset
                .saturating_add(call.runs.saturating_sub(1).saturating_mul(call.stride));
            let step = offset.saturating_sub(last);
            if call.bytes == bytes && step >= bytes && (call.runs == 1 || step == call.stride) {
                call.stride = step;
                call.runs += 1;
                continue;
            }
        }
        out.push(ClearRuns {
            offset,
            bytes,
            runs: 1,
            stride: 0,
        });
    }
    out
}

impl Lowerer<'_> {
    /// Zeroes the padding of `b` that its codelets read (along the axis
    /// they asked for, where it meets data along the others) on every
    /// tile: at most [`MAX_CLEAR_RUNS`] runs a shard, else the span
    /// covering them. A span covers data, so it is cleared before the
    /// buffer is filled (the data is written over it); runs of padding
    /// alone are cleared after the fill, in the first compute step that
    /// follows it ([`Self::compute`]), where the tile may have time to
    /// spare (fc2's left operand is padded only on the tiles of its last
    /// inner block, which have the fewest AMP passes of its GEMM step).
    pub(super) fn clear_padding(&mut self, b: BufferId) {
        let Some(&axis) = self.read_axis.get(&b) else {
            return;
        };
        let ty = &self.program.buffers[b].ty;
        let vector = &self.config.cost.steps.vector;
        let cycles = |calls: &[ClearRuns]| -> u64 {
            calls
                .iter()
                .map(|c| {
                    vector.cycles(&Work::Zero {
                        bytes: c.bytes,
                        runs: c.runs,
                    })
                })
                .fold(0, u64::saturating_add)
        };
        let (mut clears, mut late) = (Vec::new(), Vec::new());
        for s in ty.shards() {
            let mut runs: Vec<(u64, u64)> = Vec::new();
            // The shard's own tile: no error is possible.
            let _ = ty.for_each_axis_padding_run(s.tile, axis, |o, n| runs.push((o, n)));
            let (Some(&first), Some(&last)) = (runs.first(), runs.last()) else {
                continue;
            };
            let span = [ClearRuns {
                offset: first.0,
                bytes: last.0 + last.1 - first.0,
                runs: 1,
                stride: 0,
            }];
            let strided = strided_runs(&runs);
            // A span of one run is that run, padding alone.
            let (calls, padding_only): (&[ClearRuns], bool) =
                if strided.len() <= MAX_CLEAR_RUNS && cycles(&strided) <= cycles(&span) {
                    (&strided, true)
                } else {
                    (&span, runs.len() == 1)
                };
            for c in calls {
                // Offsets, sizes and strides are below the shard's bytes,
                // which placement holds to 32 bits.
                let (Ok(offset), Ok(bytes), Ok(runs), Ok(stride)) = (
                    u32::try_from(c.offset),
                    u32::try_from(c.bytes),
                    u32::try_from(c.runs),
                    u32::try_from(c.stride),
                ) else {
                    continue;
                };
                let call = (
                    s.tile,
                    Codelet::Zero {
                        target: Operand { buffer: b, offset },
                        bytes,
                        runs,
                        stride,
                    },
                );
                if padding_only {
                    late.push(call);
                } else {
                    clears.push(call);
                }
            }
        }
        self.clears.extend(clears);
        self.late_clears.extend(late);
    }

    /// Flushes the pending clears and redistributions ([`Self::flush`])
    /// and then emits the clears still waiting for a compute step after
    /// their fill as a step of their own: on entering or leaving a
    /// repeat's body and at the end of the program, where no compute step
    /// of the same steps follows.
    pub(super) fn close(&mut self, label: &StepLabel) {
        self.flush(label);
        let calls = std::mem::take(&mut self.filled_clears);
        self.clear_step(label, calls);
    }

    /// Appends `calls` (clears) as a compute step of `label`'s operation
    /// in the role of a clear, unless there are none.
    pub(super) fn clear_step(&mut self, label: &StepLabel, calls: Vec<(TileId, Codelet)>) {
        if calls.is_empty() {
            return;
        }
        let label = StepLabel {
            role: StepRole::Clear,
            ..label.clone()
        };
        self.steps.push(Step::Compute(ComputeStep { label, calls }));
    }

    /// Joins the clears waiting for a compute step after their fill to
    /// `calls`, in front, when no tile then takes longer than the step's
    /// busiest did; else emits them as a clear step of their own before
    /// it (after the fill either way).
    pub(super) fn place_filled_clears(
        &mut self,
        label: &StepLabel,
        calls: Vec<(TileId, Codelet)>,
    ) -> Vec<(TileId, Codelet)> {
        let clears = std::mem::take(&mut self.filled_clears);
        if clears.is_empty() {
            return calls;
        }
        let joined = match (self.tile_cycles(&calls), self.tile_cycles(&clears)) {
            (Some(step), Some(clear)) => {
                let busiest = step.values().copied().max().unwrap_or(0);
                clear.iter().all(|(tile, c)| {
                    step.get(tile).copied().unwrap_or(0).saturating_add(*c) <= busiest
                })
            }
            _ => false,
        };
        if joined {
            let mut all = clears;
            all.extend(calls);
            return all;
        }
        self.clear_step(label, clears);
        calls
    }

    /// Each tile's cycles of `calls`, by the models the package estimate
    /// uses (the kernel cost model for a GEMM call, the vector model for
    /// the rest), or `None` where a GEMM kernel cannot be planned.
    fn tile_cycles(&mut self, calls: &[(TileId, Codelet)]) -> Option<HashMap<TileId, u64>> {
        let mut out: HashMap<TileId, u64> = HashMap::new();
        for (tile, c) in calls {
            let cycles = match *c {
                Codelet::Gemm {
                    kernel,
                    entry,
                    rows,
                    ..
                } => {
                    let (_, mode) = entry.parts();
                    estimate_cycles(self.kernel_variant(kernel)?, rows, mode).cycles
                }
                ref other => {
                    let buffers = &self.program.buffers;
                    // Every codelet but the GEMM has a work.
                    let work =
                        codelet_work(&self.config.cost.steps.vector, other, |b: BufferId| {
                            buffers[b].ty.precision()
                        })?;
                    self.config.cost.steps.vector.cycles(&work)
                }
            };
            let slot = out.entry(*tile).or_insert(0);
            *slot = slot.saturating_add(cycles);
        }
        Some(out)
    }

    /// The AMP variant the build will plan for `kernel` (`None` where it
    /// cannot), planned once.
    fn kernel_variant(&mut self, kernel: KernelId) -> Option<&Variant> {
        if !self.variants.contains_key(&kernel) {
            let config = self.config.cost.steps.plan_config();
            let planned = (self.program.kernels.get(kernel)).and_then(|k| k.plan(&config).ok());
            self.variants.insert(kernel, planned);
        }
        self.variants.get(&kernel)?.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::{ClearRuns, strided_runs};

    fn call(offset: u64, bytes: u64, runs: u64, stride: u64) -> ClearRuns {
        ClearRuns {
            offset,
            bytes,
            runs,
            stride,
        }
    }

    #[test]
    fn equal_equally_spaced_runs_join_into_one_strided_call() {
        // The last 16 bytes of five 160-byte rows.
        let rows: Vec<(u64, u64)> = (0..5).map(|r| (r * 160 + 144, 16)).collect();
        assert_eq!(strided_runs(&rows), vec![call(144, 16, 5, 160)]);
        // A run of another length, or at another spacing, starts a call.
        let mixed = [(0, 8), (32, 8), (64, 8), (80, 8), (100, 4)];
        assert_eq!(
            strided_runs(&mixed),
            vec![call(0, 8, 3, 32), call(80, 8, 1, 0), call(100, 4, 1, 0)]
        );
        assert_eq!(strided_runs(&[]), vec![]);
    }
}
