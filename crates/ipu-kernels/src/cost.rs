//! The cycle and code-size model of a variant.
//!
//! A worker context issues one instruction every `worker_contexts` tile
//! cycles, and one AMP instruction of one worker does 64 (F16) or 128 (FP8)
//! MACs, so six busy workers reach the tile's peak of 64 or 128 MACs per
//! cycle (`shared/design/IPU21.md`). A call therefore takes
//!
//! ```text
//! call_cycles + worker_contexts × max over workers (worker instructions)
//! ```
//!
//! tile cycles, where a worker's instructions are its prologue and, per op:
//!
//! - coefficient load: setup + 1 per run + weight bytes / load width (16
//!   bytes from interleaved memory, 8 from standard memory);
//! - partial load or store: setup + 1 per run; the partial data moves in
//!   load/store bundles co-issued with the AMP instructions, and zeroing is
//!   free (the first AMP pass starts from zero);
//! - row stream: setup + 1 per run + pipeline fill/drain + AMP instructions,
//!   `rows × round_up(inner, group) × round_up(columns, 16) / MACs per instruction`.
//!
//! The left order changes only the runs of a row stream: an `Amp(Left)`
//! left operand is read with one run per panel the inner block touches, a
//! row-major one with a single run (every row's inner block is contiguous,
//! the rows a constant stride apart). Both feed the AMP the same rows, and
//! the left bytes move in the load bundles co-issued with the AMP
//! instructions whatever their stride, so the AMP instructions, the
//! pipeline and the setup are the same; a row-major left costs
//! `panels touched − 1` fewer instructions per row stream, in cycles and in
//! code.
//!
//! The work split over the workers is the grid with the least busy worker
//! (see `program.rs`), so the estimate and the built program agree on it.
//!
//! Code size: each entry's code is the supervisor entry (plus two
//! instructions per worker it starts) and one worker's op sequence (all
//! workers run the same code on different addresses), each op costing its
//! setup, one instruction per run and its loop body; `code_bytes` is the
//! sum over the four entries times `instruction_bytes`.
//!
//! Every constant is in `device/ipu21.toml` `[amp]` with its source; the
//! overheads are estimates of this project, not measurements. The estimate
//! is computed in closed form by [`estimate_cycles`] and, independently,
//! from a built program's ops by [`program_cycles`]; tests keep them equal.

use serde::{Deserialize, Serialize};

use crate::program::{AmpOp, AmpProgram, best_split, op_code_instructions, split_work};
use crate::variant::{Arithmetic, round_up};
use crate::{AmpModel, Mode, Variant};

/// The cost of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CycleEstimate {
    /// Tile cycles of the call.
    pub cycles: u64,
    /// Multiply-accumulates of the (padded) shard: rows × inner × columns.
    pub macs: u64,
    /// The tile's peak MACs per cycle for this arithmetic.
    pub peak_macs_per_cycle: u64,
    /// Instructions of the busiest worker.
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

fn load_bytes(variant_class: ipu_layout::MemoryClass, model: &AmpModel) -> u64 {
    u64::from(match variant_class {
        ipu_layout::MemoryClass::Ipu21Interleaved => model.interleaved_load_bytes,
        ipu_layout::MemoryClass::Ipu21Standard => model.standard_load_bytes,
    })
    .max(1)
}

/// Panels of width `panel` that columns `start..start + len` touch.
fn panels_touched(start: u64, len: u64, panel: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let panel = panel.max(1);
    (start + len - 1) / panel - start / panel + 1
}

/// Σ of [`panels_touched`] over `n` consecutive blocks of width `w`, the
/// first starting at column `first · w`, in closed form: a block touches
/// one panel more than the panel boundaries strictly inside it, and the
/// boundaries inside all of them are those between their ends, less the
/// ones falling exactly on a block start (multiples of `panel / gcd(w,
/// panel)` blocks).
fn block_runs(first: u64, n: u64, w: u64, panel: u64) -> u64 {
    if n == 0 || w == 0 {
        return 0;
    }
    let panel = panel.max(1);
    let Some(end) = first.checked_add(n) else {
        return block_runs_wide(first, n, w, panel);
    };
    // The planner's operands fit in u64 products by far; the u128 path
    // (a library call per division) is for callers' extreme arguments.
    let Some(end_w) = end.checked_mul(w) else {
        return block_runs_wide(first, n, w, panel);
    };
    // Every block inside the first panel (a row-major operand's only one):
    // one run each.
    if end_w <= panel {
        return n;
    }
    // Panel boundaries p·panel with first·w < p·panel < end·w ...
    let inside = (end_w - 1) / panel - (first * w) / panel;
    // ... of which those at a block start are not inside a block.
    let step = panel / gcd(w, panel);
    let at_starts = (end - 1) / step - first / step;
    (n + inside).saturating_sub(at_starts)
}

/// [`block_runs`] in u128, for arguments whose products leave u64.
fn block_runs_wide(first: u64, n: u64, w: u64, panel: u64) -> u64 {
    if n == 0 || w == 0 {
        return 0;
    }
    let panel = panel.max(1);
    let divisor = u128::from(gcd(w, panel));
    let panel = u128::from(panel);
    let (first, n, w) = (u128::from(first), u128::from(n), u128::from(w));
    let end = first + n;
    let inside = (end * w - 1) / panel - (first * w) / panel;
    let step = panel / divisor;
    let at_starts = (end - 1) / step - first / step;
    u64::try_from(n + inside - at_starts).unwrap_or(u64::MAX)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Per-share sums the closed forms share: panel runs of every column block
/// and inner block, and how many blocks of each width there are.
struct ShareSums {
    /// Column blocks of the share.
    nc: u64,
    /// Inner blocks.
    nk: u64,
    /// Σ over the share's column blocks of weight runs.
    right_runs: u64,
    /// Σ over the share's column blocks of output runs.
    out_runs: u64,
    /// Σ over inner blocks of left runs.
    left_runs: u64,
    /// (width, count) of the share's column blocks.
    column_widths: [(u64, u64); 2],
    /// (width, count) of the inner blocks.
    inner_widths: [(u64, u64); 2],
}

fn share_sums(variant: &Variant, block_start: u32, blocks: u32) -> ShareSums {
    let s = variant.shape();
    let (k, c) = (u64::from(variant.k()), u64::from(variant.c()));
    let (inner, columns) = (u64::from(s.inner), u64::from(s.columns));
    // A row-major operand is one "panel" as wide as the matrix: one run
    // per block.
    let out_panel = match s.output_order {
        ipu_layout::ElementOrder::RowMajor => u64::MAX,
        ipu_layout::ElementOrder::Amp(_) => s.output.amp_panel_columns(),
    };
    let left_panel = match s.left_order {
        ipu_layout::ElementOrder::RowMajor => u64::MAX,
        ipu_layout::ElementOrder::Amp(_) => s.left.amp_panel_columns(),
    };
    let mut sums = ShareSums {
        nc: u64::from(blocks),
        nk: inner.div_ceil(k),
        right_runs: 0,
        out_runs: 0,
        left_runs: 0,
        column_widths: [(c, 0), (0, 0)],
        inner_widths: [(k, inner / k), (inner % k, u64::from(inner % k != 0))],
    };
    // Every block but the matrix's last is `c` wide; the last may be
    // narrower. The runs of the full blocks are summed in closed form.
    let (first, end) = (
        u64::from(block_start),
        u64::from(block_start) + u64::from(blocks),
    );
    let full_end = end.min(columns / c.max(1));
    let full = full_end.saturating_sub(first);
    sums.column_widths[0].1 = full;
    sums.right_runs = block_runs(first, full, c, s.right.amp_panel_columns());
    sums.out_runs = block_runs(first, full, c, out_panel);
    for cb in first.max(full_end)..end {
        let c0 = cb * c;
        let cw = c.min(columns.saturating_sub(c0));
        sums.right_runs += panels_touched(c0, cw, s.right.amp_panel_columns());
        sums.out_runs += panels_touched(c0, cw, out_panel);
        sums.column_widths[1] = (cw, 1);
    }
    // Inner blocks: every one but a narrower last is `k` wide.
    let full_inner = inner / k.max(1);
    sums.left_runs = block_runs(0, full_inner, k, left_panel);
    if inner % k.max(1) != 0 {
        let k0 = full_inner * k;
        sums.left_runs += panels_touched(k0, inner - k0, left_panel);
    }
    sums
}

/// Estimated cycles of one call of `variant` on `rows` rows in `mode`,
/// computed in closed form (time linear in the number of blocks per split
/// considered).
pub fn estimate_cycles(variant: &Variant, rows: u32, mode: Mode) -> CycleEstimate {
    let (shares, busiest) = best_split(variant, rows, mode);
    finish(variant, rows, busiest, shares.len() as u32)
}

/// Instructions of one worker whose share is `n` rows by the column blocks
/// summed in `sums`, in closed form. Never falls as `n` grows.
fn share_instructions(variant: &Variant, sums: &ShareSums, n: u64, mode: Mode) -> u64 {
    let model = variant.model();
    let s = variant.shape();
    let a = variant.arithmetic();
    let rate = u64::from(a.macs_per_instruction(model));
    let group = a.group();
    let weight_eb = s.right.element_bytes();
    let load = load_bytes(s.right_class, model);
    let mut total = u64::from(model.worker_setup_instructions);
    // Partial stores, and loads in accumulate mode.
    let partial_ops = if mode == Mode::Accumulate { 2 } else { 1 };
    let partial = sums.nc * u64::from(model.partial_setup_instructions) + sums.out_runs;
    total += partial_ops * partial;
    // Coefficient loads and row streams, one of each per block pair.
    let per_pair = u64::from(model.coefficient_setup_instructions)
        + u64::from(model.stream_setup_instructions)
        + u64::from(model.pipeline_instructions);
    total += sums.nc * sums.nk * per_pair + sums.nk * sums.right_runs + sums.nc * sums.left_runs;
    for &(cw, cn) in &sums.column_widths {
        for &(kw, kn) in &sums.inner_widths {
            if cn == 0 || kn == 0 {
                continue;
            }
            let load_instructions = (kw * cw * weight_eb).div_ceil(load);
            // Saturating: `rows` is the caller's and may be anything.
            let amp = n
                .saturating_mul(u64::from(round_up(kw as u32, group)))
                .saturating_mul(u64::from(round_up(cw as u32, model.column_multiple)))
                .div_ceil(rate);
            total = total
                .saturating_add((cn * kn).saturating_mul(load_instructions.saturating_add(amp)));
        }
    }
    total
}

/// The split search of one variant (`program::best_split`), costed in
/// closed form. A split's busiest worker is one with the first row range
/// (the longest: a worker's instructions never fall as its rows grow), so
/// a split costs one share per column range; the column ranges' sums are
/// computed once, for every column part count, whatever the rows.
pub(crate) struct SplitCosts<'a> {
    variant: &'a Variant,
    column_blocks: u32,
    /// The sums of `p` column parts' ranges start at `p (p − 1) / 2`, for
    /// `p` up to the worker count and the column blocks.
    sums: Vec<ShareSums>,
}

impl<'a> SplitCosts<'a> {
    pub(crate) fn new(variant: &'a Variant, column_blocks: u32) -> Self {
        let workers = variant.model().worker_contexts.max(1);
        let mut sums = Vec::new();
        for parts in 1..=workers.min(column_blocks) {
            sums.extend(
                crate::program::balanced_ranges(column_blocks, parts)
                    .map(|(start, blocks)| share_sums(variant, start, blocks)),
            );
        }
        SplitCosts {
            variant,
            column_blocks,
            sums,
        }
    }

    /// The split `(row_parts, column_parts)` of `rows` rows whose busiest
    /// worker has the fewest instructions in `mode`, and that figure: of
    /// every grid `row_parts × column_parts <= worker_contexts` with no
    /// more parts than rows or column blocks, ties going to more row parts,
    /// then more column parts.
    pub(crate) fn best(&self, rows: u32, mode: Mode) -> (u32, u32, u64) {
        let workers = self.variant.model().worker_contexts.max(1);
        let mut best: Option<(u64, u32, u32)> = None;
        for row_parts in (1..=workers.min(rows.max(1))).rev() {
            let n = u64::from(rows.div_ceil(row_parts));
            for column_parts in (1..=(workers / row_parts).min(self.column_blocks.max(1))).rev() {
                // Only a strictly cheaper split replaces the best, so
                // costing stops once a share reaches the best's figure.
                let below = best.map_or(u64::MAX, |(b, _, _)| b);
                let cost = if rows == 0 || self.column_blocks == 0 {
                    0
                } else {
                    let parts = column_parts as usize;
                    let first = parts * (parts - 1) / 2;
                    let mut busiest = 0u64;
                    for sums in &self.sums[first..first + parts] {
                        busiest = busiest.max(share_instructions(self.variant, sums, n, mode));
                        if busiest >= below {
                            break;
                        }
                    }
                    busiest
                };
                if best.is_none() || cost < below {
                    best = Some((cost, row_parts, column_parts));
                }
            }
        }
        let (cost, row_parts, column_parts) = best.unwrap_or((0, 1, 1));
        (row_parts, column_parts, cost)
    }
}

/// Static code instructions of one entry, in closed form (the same count as
/// [`AmpProgram::code_instructions`] of the built program).
pub fn entry_code_instructions(variant: &Variant, rows: u32, mode: Mode) -> u64 {
    let model = variant.model();
    let shares = split_work(variant, rows, mode);
    let mut worker = 0u64;
    for share in &shares {
        let sums = share_sums(variant, share.block_start, share.blocks);
        let partial = sums.nc * u64::from(model.partial_setup_instructions) + sums.out_runs;
        let start = match mode {
            Mode::Initialise => 2 * sums.nc,
            Mode::Accumulate => partial,
        };
        let pairs = sums.nc
            * sums.nk
            * (u64::from(model.coefficient_setup_instructions)
                + u64::from(model.stream_setup_instructions)
                + 2)
            + sums.nk * sums.right_runs
            + sums.nc * sums.left_runs;
        worker = worker.max(u64::from(model.worker_setup_instructions) + start + partial + pairs);
    }
    u64::from(model.supervisor_instructions) + 2 * shares.len() as u64 + worker
}

fn finish(variant: &Variant, rows: u32, busiest: u64, active: u32) -> CycleEstimate {
    let model = variant.model();
    let s = variant.shape();
    let peak = peak_macs_per_cycle(variant.arithmetic(), model);
    CycleEstimate {
        cycles: u64::from(model.call_cycles)
            .saturating_add(u64::from(model.worker_contexts).saturating_mul(busiest)),
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

/// The same estimate as [`estimate_cycles`], computed from the ops of a
/// built program (used to cross-check the closed form).
pub fn program_cycles(variant: &Variant, program: &AmpProgram) -> CycleEstimate {
    let model = variant.model();
    let h = &program.header;
    let macs_per_instruction = u64::from(h.arithmetic.macs_per_instruction(model));
    let load = load_bytes(h.right_class, model);
    let weight_eb = h.right.element_bytes();
    let mut busiest = 0u64;
    for w in &program.workers {
        let mut total = u64::from(model.worker_setup_instructions);
        let mut columns = 0u64;
        for op in &w.ops {
            let runs = op.runs().len() as u64;
            let cost = match *op {
                AmpOp::LoadCoefficients {
                    inner, columns: cw, ..
                } => {
                    columns = u64::from(cw);
                    u64::from(model.coefficient_setup_instructions)
                        + runs
                        + u64::from(inner)
                            .saturating_mul(u64::from(cw))
                            .saturating_mul(weight_eb)
                            .div_ceil(load)
                }
                AmpOp::ZeroPartials { .. } => 0,
                AmpOp::LoadPartials { .. } | AmpOp::StorePartials { .. } => {
                    u64::from(model.partial_setup_instructions) + runs
                }
                AmpOp::StreamRows { rows, inner, .. } => {
                    let amp = u64::from(rows)
                        .saturating_mul(u64::from(round_up(inner, h.arithmetic.group())))
                        .saturating_mul(u64::from(round_up(columns as u32, model.column_multiple)))
                        .div_ceil(macs_per_instruction);
                    u64::from(model.stream_setup_instructions)
                        + runs
                        + u64::from(model.pipeline_instructions)
                        + amp
                }
            };
            total = total.saturating_add(cost);
        }
        busiest = busiest.max(total);
    }
    finish(variant, h.rows, busiest, program.workers.len() as u32)
}

/// Code bytes of a variant's object: the static instruction count of its
/// four entry programs times the instruction size (closed form, so the
/// planner can afford it for every candidate).
pub fn code_bytes(variant: &Variant) -> u32 {
    let model = variant.model();
    let instructions = variant
        .entry_points()
        .iter()
        .map(|e| entry_code_instructions(variant, e.rows, e.mode))
        .fold(0u64, u64::saturating_add);
    u32::try_from(instructions.saturating_mul(u64::from(model.instruction_bytes)))
        .unwrap_or(u32::MAX)
}

/// Static instructions of one op (re-exported for listings and tests).
pub fn op_instructions(op: &AmpOp, model: &AmpModel) -> u64 {
    op_code_instructions(op, model)
}

#[cfg(test)]
mod tests {
    use super::{
        SplitCosts, block_runs, block_runs_wide, panels_touched, share_instructions, share_sums,
    };
    use crate::program::{WorkShare, grid_split};
    use crate::{AmpModel, Mode, Variant};

    /// Instructions of the busiest worker of `shares`, share by share: the
    /// definition [`SplitCosts`] shortens, for tests.
    fn busiest_instructions(variant: &Variant, shares: &[WorkShare], mode: Mode) -> u64 {
        shares
            .iter()
            .map(|share| {
                let sums = share_sums(variant, share.block_start, share.blocks);
                share_instructions(variant, &sums, u64::from(share.rows), mode)
            })
            .max()
            .unwrap_or(0)
    }

    /// The search over every split, each costed share by share: what
    /// [`SplitCosts::best`] must choose.
    fn best_by_every_share(variant: &Variant, rows: u32, mode: Mode) -> (u32, u32, u64) {
        let workers = variant.model().worker_contexts.max(1);
        let column_blocks = variant.shape().columns.div_ceil(variant.c());
        let mut best: Option<(u64, u32, u32)> = None;
        for row_parts in (1..=workers.min(rows.max(1))).rev() {
            for column_parts in (1..=(workers / row_parts).min(column_blocks.max(1))).rev() {
                let shares = grid_split(rows, column_blocks, row_parts, column_parts);
                let cost = busiest_instructions(variant, &shares, mode);
                if best.is_none_or(|(b, _, _)| cost < b) {
                    best = Some((cost, row_parts, column_parts));
                }
            }
        }
        let (cost, r, c) = best.expect("one split at least");
        (r, c, cost)
    }

    #[test]
    fn split_costs_choose_the_split_every_share_would() {
        let model = AmpModel::ipu21();
        let mut orders = 0;
        for (inner, columns) in [(32, 16), (64, 48), (96, 100), (288, 96), (64, 400)] {
            for (k, c) in [(32, 16), (32, 48), (64, 32), (96, 96)] {
                for rows in [1, 2, 5, 7, 13, 64, 244] {
                    let shape = crate::siglip::seed_shape(inner, columns, rows);
                    let Ok(v) = Variant::new(&shape, k, c, rows, rows, &model) else {
                        continue;
                    };
                    for mode in Mode::ALL {
                        let column_blocks = columns.div_ceil(c);
                        let quick = SplitCosts::new(&v, column_blocks).best(rows, mode);
                        assert_eq!(
                            quick,
                            best_by_every_share(&v, rows, mode),
                            "{inner}×{columns} k {k} c {c} rows {rows} {mode:?}"
                        );
                        orders += 1;
                    }
                }
            }
        }
        assert!(orders > 100, "{orders} cases");
    }

    #[test]
    fn block_runs_equal_the_sum_over_blocks() {
        for panel in [1u64, 2, 3, 16, 32, 48, 100, u64::MAX] {
            for w in 1u64..70 {
                for first in 0u64..9 {
                    for n in 0u64..12 {
                        let looped: u64 = (first..first + n)
                            .map(|b| panels_touched(b * w, w, panel))
                            .sum();
                        assert_eq!(
                            block_runs(first, n, w, panel),
                            looped,
                            "panel {panel} width {w} first {first} n {n}"
                        );
                        assert_eq!(
                            block_runs_wide(first, n, w, panel),
                            looped,
                            "wide: panel {panel} width {w} first {first} n {n}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn block_runs_leave_u64_products_to_the_wide_path() {
        // end · w overflows u64: the u64 path must hand over, not wrap.
        let (first, n, w, panel) = (u64::MAX / 4, 3, 16, 48);
        assert_eq!(
            block_runs(first, n, w, panel),
            block_runs_wide(first, n, w, panel)
        );
        assert_eq!(block_runs(7, 5, 16, u64::MAX), 5);
    }
}
