//! The cycle and code-size model of a variant.
//!
//! A call is a sequence of passes (see `program.rs`): per pass the
//! supervisor loads one weight tile into the coefficient registers, starts
//! the workers and syncs with them, and each worker streams its rows. A
//! worker context issues one instruction every `worker_contexts` tile
//! cycles, and one AMP instruction of one worker does 64 (F16) or 128 (FP8)
//! MACs, so six busy workers reach the tile's peak of 64 or 128 MACs per
//! cycle (`shared/design/IPU21.md`). A call takes
//!
//! ```text
//! call + groups × group
//!      + Σ over passes ( pass + ⌈tile bytes / load bytes⌉
//!                        + max(contexts × busiest worker, contexts × least busy + tail) )
//! ```
//!
//! tile cycles, with the constants of the arithmetic's path (F16 rows or
//! FP8 rows, `device/ipu21.toml` `[amp]`, each with its source in poplibs'
//! ConvPartial1x1Out estimator). A group is one iteration of the
//! supervisor's outer loop (an inner slice on the F16 path, a column slice
//! on the FP8 path); the load reads the tile's bytes at 16 bytes a cycle
//! from interleaved memory (`ld128putcs`) or 8 from standard memory
//! (`ld64putcs`). A worker's instructions in a pass are, per op:
//!
//! - start of partials: nothing from zero (the AMP's accumulators are
//!   cleared as the stream starts), `partial_load` from the output (the
//!   partials then move in load bundles co-issued with the AMP);
//! - row stream: `stream` (setup, pipeline fill and drain) plus
//!   `rows × micro_inner × 16 / MACs per instruction` AMP instructions
//!   from three rows on (a row takes the whole tile, whatever part of it a
//!   narrow last slice uses), poplibs' own figures for one and two rows;
//! - store of partials: nothing (co-issued with the stream's AMP work).
//!
//! The runs of an op cost nothing of their own: the loads and stores that
//! follow them are strided bundles of the same loop, whatever the order.
//!
//! Workers take balanced row ranges (`program::worker_rows`), of two
//! lengths at most, the same in every pass; the least busy worker matters
//! through the tail (a context without work counts as least busy).
//!
//! Code size: the kernel is loops, so an entry's code is the supervisor's
//! (`supervisor_code_instructions`, plus its longest unrolled coefficient
//! load, one instruction per load) and the workers' (one copy, all workers
//! run it); `code_bytes` sums the four entries and multiplies by
//! `instruction_bytes`.
//!
//! The estimate is computed in closed form by [`estimate_cycles`] and,
//! independently, from a built program's passes and ops by
//! [`program_cycles`]; tests keep them equal.

use ipu_layout::MemoryClass;
use serde::{Deserialize, Serialize};

use crate::program::{AmpOp, AmpProgram, OuterLoop};
use crate::variant::Arithmetic;
use crate::{AmpModel, Mode, RowSize, Variant};

/// The cost of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CycleEstimate {
    /// Tile cycles of the call.
    pub cycles: u64,
    /// Multiply-accumulates of the (padded) shard: rows × inner × columns.
    pub macs: u64,
    /// The tile's peak MACs per cycle for this arithmetic.
    pub peak_macs_per_cycle: u64,
    /// Instructions of the busiest worker, over all passes.
    pub worker_instructions: u64,
    /// Worker contexts with work.
    pub active_workers: u32,
}

impl CycleEstimate {
    /// `macs / (cycles × peak)`: the fraction of the AMP's peak the call
    /// reaches, between 0 and 1.
    pub fn utilisation(&self) -> f64 {
        let denominator = self.cycles as f64 * self.peak_macs_per_cycle as f64;
        if denominator == 0.0 {
            0.0
        } else {
            self.macs as f64 / denominator
        }
    }

    /// Cycles a perfect kernel would need at the AMP's peak, a lower bound
    /// on [`CycleEstimate::cycles`].
    pub fn lower_bound_cycles(&self) -> u64 {
        self.macs.div_ceil(self.peak_macs_per_cycle.max(1))
    }
}

/// Bytes one coefficient load instruction reads from `class`.
pub(crate) fn load_bytes(class: MemoryClass, model: &AmpModel) -> u64 {
    u64::from(match class {
        MemoryClass::Ipu21Interleaved => model.interleaved_load_bytes,
        MemoryClass::Ipu21Standard => model.standard_load_bytes,
    })
    .max(1)
}

/// `(width, count)` of the slices of `total` cut into `block`-wide slices:
/// the full ones and a narrower last one.
fn slices(total: u32, block: u32) -> [(u64, u64); 2] {
    let block = block.max(1);
    let full = u64::from(total / block);
    let tail = total % block;
    [
        (u64::from(block), full),
        (u64::from(tail), u64::from(tail > 0)),
    ]
}

/// Estimated cycles of one call of `variant` on `rows` rows in `mode`,
/// computed in closed form.
pub fn estimate_cycles(variant: &Variant, rows: u32, mode: Mode) -> CycleEstimate {
    let model = variant.model();
    let s = variant.shape();
    let a = variant.arithmetic();
    let path = a.path(model);
    let inner = slices(s.inner, variant.k());
    let columns = slices(s.columns, variant.c());
    let inner_slices: u64 = inner.iter().map(|&(_, n)| n).sum();
    let column_slices: u64 = columns.iter().map(|&(_, n)| n).sum();
    let passes = inner_slices * column_slices;
    let groups = match a.outer_loop() {
        OuterLoop::Inner => inner_slices,
        OuterLoop::Columns => column_slices,
    };
    // The weight loads, one per pass.
    let load = load_bytes(s.right_class, model);
    let weight_eb = s.right.element_bytes();
    let mut load_cycles = 0u64;
    for &(kw, kn) in &inner {
        for &(cw, cn) in &columns {
            load_cycles += kn * cn * (kw * cw * weight_eb).div_ceil(load);
        }
    }
    // Every pass splits the rows alike: balanced ranges of two lengths
    // at most. Streams start from the output except the first inner slice
    // of an initialise call.
    let contexts = model.worker_contexts.max(1);
    let started = rows.min(contexts);
    let lengths: Vec<u64> = if rows == 0 {
        Vec::new()
    } else {
        let (q, r) = (rows / started, rows % started);
        let mut l = vec![u64::from(q)];
        if r > 0 {
            l.push(u64::from(q) + 1);
        }
        l
    };
    let row_instructions = a.row_instructions(model);
    let zeroed = match mode {
        Mode::Initialise => column_slices,
        Mode::Accumulate => 0,
    };
    let mut workers = 0u64;
    let mut busiest_total = 0u64;
    for (loaded, count) in [(false, zeroed), (true, passes - zeroed)] {
        let costs = lengths
            .iter()
            .map(|&n| path.stream(n, row_instructions, loaded));
        let (least, busiest) = costs.fold((u64::MAX, 0u64), |(lo, hi), c| (lo.min(c), hi.max(c)));
        let per_pass = pass_worker_cycles(path, contexts, started as usize, busiest, least);
        workers = workers.saturating_add(count.saturating_mul(per_pass));
        busiest_total = busiest_total.saturating_add(count.saturating_mul(busiest));
    }
    let supervisor = u64::from(path.call_cycles)
        + groups * u64::from(path.group_cycles)
        + passes * u64::from(path.pass_cycles)
        + load_cycles;
    finish(
        variant,
        rows,
        supervisor.saturating_add(workers),
        busiest_total,
        started,
    )
}

/// Tile cycles of one pass's workers: each worker issues one instruction
/// every `contexts` cycles, and the pass ends when the busiest has, or
/// `tail` cycles after the least busy has (poplibs' tag cost; a context
/// without work counts as least busy, at zero). `busiest` and `least` are
/// instructions of the `started` workers.
fn pass_worker_cycles(
    path: &crate::PathCosts,
    contexts: u32,
    started: usize,
    busiest: u64,
    least: u64,
) -> u64 {
    if started == 0 {
        return 0;
    }
    let w = u64::from(contexts);
    let least = if (started as u64) < w { 0 } else { least };
    w.saturating_mul(busiest).max(
        w.saturating_mul(least)
            .saturating_add(u64::from(path.tail_cycles)),
    )
}

fn finish(variant: &Variant, rows: u32, cycles: u64, busiest: u64, active: u32) -> CycleEstimate {
    let model = variant.model();
    let s = variant.shape();
    let peak = peak_macs_per_cycle(variant.arithmetic(), model);
    CycleEstimate {
        cycles,
        macs: u64::from(rows)
            .saturating_mul(u64::from(s.inner))
            .saturating_mul(u64::from(s.columns)),
        peak_macs_per_cycle: peak,
        worker_instructions: busiest,
        active_workers: active,
    }
}

/// The tile's peak MACs per cycle: one worker's AMP instruction per cycle.
pub fn peak_macs_per_cycle(arithmetic: Arithmetic, model: &AmpModel) -> u64 {
    u64::from(arithmetic.macs_per_instruction(model))
}

/// The same estimate as [`estimate_cycles`], computed from the passes and
/// ops of a built program (used to cross-check the closed form, and by the
/// tile model to count what it runs).
pub fn program_cycles(variant: &Variant, program: &AmpProgram) -> CycleEstimate {
    let model = variant.model();
    let h = &program.header;
    let path = h.arithmetic.path(model);
    let row_instructions = h.arithmetic.row_instructions(model);
    let load = load_bytes(h.right_class, model);
    let weight_eb = h.right.element_bytes();
    let mut supervisor = u64::from(path.call_cycles)
        .saturating_add((program.groups.len() as u64).saturating_mul(u64::from(path.group_cycles)));
    let contexts = model.worker_contexts.max(1);
    let mut busiest_total = 0u64;
    let mut active = 0u32;
    for pass in program.passes() {
        supervisor = supervisor
            .saturating_add(u64::from(path.pass_cycles))
            .saturating_add(pass.coefficients.bytes(weight_eb).div_ceil(load));
        let (mut busiest, mut least) = (0u64, u64::MAX);
        for w in &pass.workers {
            let total = w.ops.iter().fold(0u64, |total, op| {
                let cost = match op {
                    AmpOp::ZeroPartials { .. } | AmpOp::StorePartials { .. } => 0,
                    AmpOp::LoadPartials { .. } => u64::from(path.partial_load_instructions),
                    AmpOp::StreamRows { rows, .. } => {
                        path.stream(u64::from(*rows), row_instructions, false)
                    }
                };
                total.saturating_add(cost)
            });
            busiest = busiest.max(total);
            least = least.min(total);
        }
        supervisor = supervisor.saturating_add(pass_worker_cycles(
            path,
            contexts,
            pass.workers.len(),
            busiest,
            least,
        ));
        busiest_total = busiest_total.saturating_add(busiest);
        active = active.max(pass.workers.len() as u32);
    }
    finish(variant, h.rows, supervisor, busiest_total, active)
}

/// Static code instructions of one entry, in closed form (the same count as
/// [`AmpProgram::code_instructions`] of the built program): the
/// supervisor's code with the load of the largest tile, and the workers'.
/// Every entry runs the same loops, whatever its rows and mode (they
/// change only the loop counts and the first pass's start).
pub fn entry_code_instructions(variant: &Variant, _rows: u32, _mode: Mode) -> u64 {
    let model = variant.model();
    let s = variant.shape();
    let tile = u64::from(variant.k().min(s.inner))
        * u64::from(variant.c().min(s.columns))
        * s.right.element_bytes();
    u64::from(model.supervisor_code_instructions)
        + tile.div_ceil(load_bytes(s.right_class, model))
        + u64::from(model.worker_code_instructions)
}

/// Code bytes of one entry's block in the object: its static instruction
/// count times the instruction size (closed form). Each entry is a block
/// of its own, so a tile's code holds the blocks it calls.
pub fn entry_code_bytes(variant: &Variant, size: RowSize, mode: Mode) -> u32 {
    let instructions = entry_code_instructions(variant, variant.rows(size), mode);
    u32::try_from(instructions.saturating_mul(u64::from(variant.model().instruction_bytes)))
        .unwrap_or(u32::MAX)
}

/// Code bytes of a variant's object: its four entries' blocks.
pub fn code_bytes(variant: &Variant) -> u32 {
    variant
        .entry_points()
        .iter()
        .map(|e| entry_code_bytes(variant, e.size, e.mode))
        .fold(0u32, u32::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::slices;

    #[test]
    fn slices_cover_the_total() {
        for total in 0u32..100 {
            for block in 1u32..40 {
                let [(w, n), (t, m)] = slices(total, block);
                assert_eq!(w * n + t * m, u64::from(total), "{total} / {block}");
                assert!(t < u64::from(block) && m <= 1);
            }
        }
    }
}
