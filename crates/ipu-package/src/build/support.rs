//! Support memory per tile: the runtime, GEMM kernel code, the control
//! program and the exchange rows, reserved in whole memory elements at the
//! start of the target's code region.
//!
//! Before placement the rows are estimated from what every step's shape
//! makes the tile send and receive (a generous figure, and a likely one for
//! when memory is short); after scheduling they are measured, and a tile
//! whose support outgrew its reservation is placed again with a larger one.

use ipu_layout::{EntityId, TileId};
use ipu_target::RuntimeSpec;

use super::Device;
use super::exchange::StepShape;
use crate::package::PackagePhase;
use crate::package::TileSupport;
use crate::phases::TileTraffic;
use crate::program::{Codelet, GemmEntry, Program, WalkEvent};
use ipu_kernels::Variant;

/// The sizes of one plan's tile code, and the figures to reserve by.
pub(super) struct TileCode {
    runtime: RuntimeSpec,
    /// Where support starts, and its reservation unit.
    code_start: u32,
    element_bytes: u32,
    /// Per tile: GEMM kernel code bytes.
    kernel_code: Vec<u32>,
    /// Per tile: control-program bytes.
    control: Vec<u32>,
    /// Per tile: the generous estimate of its exchange-row and patch
    /// bytes.
    estimated_rows: Vec<u64>,
    /// Per tile: the likely figure, without the margin.
    likely_rows: Vec<u64>,
}

/// Which estimate of the rows to reserve by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Estimate {
    /// Above the measured rows on nearly every tile: one placement round.
    Generous,
    /// What the rows are likely to need, for when memory is short: every
    /// element it saves is data space, and the tiles whose rows outgrow it
    /// are placed again.
    Likely,
}

impl TileCode {
    /// Sizes the code of `program` on every tile: the kernels each tile
    /// calls, its control program, and the estimate of its exchange rows
    /// from what every step's shape makes it send and receive.
    pub(super) fn size(
        program: &Program,
        variants: &[Variant],
        device: &Device<'_>,
        shapes: &[StepShape],
    ) -> TileCode {
        let tiles = device.tiles;
        let runtime = device.target.runtime().clone();
        let region = device.target.code_region();
        let control = control_bytes(program, tiles, &runtime);
        let kernel_code = kernel_code(program, variants, tiles);
        let mut rows = vec![0u64; tiles as usize];
        let mut likely = vec![0u64; tiles as usize];
        let mut traffic = vec![TileTraffic::default(); tiles as usize];
        for step in shapes {
            traffic.iter_mut().for_each(|t| *t = TileTraffic::default());
            step.first().add_traffic(&mut traffic);
            for ((r, l), t) in rows.iter_mut().zip(&mut likely).zip(&traffic) {
                let (mut generous, mut like) = estimated_row_bytes(t);
                if step.patched() {
                    let (g, k) = estimated_patch_bytes(t);
                    generous += g;
                    like += k;
                }
                *r += generous;
                *l += like;
            }
        }
        TileCode {
            runtime,
            code_start: region.start,
            element_bytes: region.element_bytes,
            kernel_code,
            control,
            estimated_rows: rows,
            likely_rows: likely,
        }
    }

    /// The reservation of every tile before placement: the estimate, in
    /// whole memory elements.
    pub(super) fn reservations(&self, estimate: Estimate) -> Vec<u32> {
        let rows = match estimate {
            Estimate::Generous => &self.estimated_rows,
            Estimate::Likely => &self.likely_rows,
        };
        (0..self.control.len())
            .map(|t| {
                let total = u64::from(self.runtime.runtime_bytes)
                    + u64::from(self.kernel_code[t])
                    + u64::from(self.control[t])
                    + rows[t];
                round_up(u32::try_from(total).unwrap_or(u32::MAX), self.element_bytes)
            })
            .collect()
    }

    /// The reservation for a tile whose support measured `used` bytes:
    /// rows of phases that are not relocatable can change a little with
    /// new addresses, so a 1/32 margin is kept.
    pub(super) fn grown_reservation(&self, used: u32) -> u32 {
        round_up(used.saturating_add(used / 32), self.element_bytes)
    }

    /// How the likely row estimate compares with the measured rows and
    /// patches: the tiles where it is below them, and the mean of
    /// estimate minus measurement over all tiles (negative: too small).
    pub(super) fn likely_against(&self, support: &[TileSupport]) -> (usize, i64) {
        let mut below = 0;
        let mut margin = 0i64;
        for (s, &likely) in support.iter().zip(&self.likely_rows) {
            let used = i64::from(s.exchange_bytes) + i64::from(s.patch_bytes);
            let likely = i64::try_from(likely).unwrap_or(i64::MAX);
            if likely < used {
                below += 1;
            }
            margin = margin.saturating_add(likely.saturating_sub(used));
        }
        (
            below,
            margin / i64::try_from(support.len().max(1)).unwrap_or(1),
        )
    }

    /// The measured support of every tile, with the rows as scheduled.
    pub(super) fn measure<'a>(
        &self,
        phases: impl Iterator<Item = &'a PackagePhase>,
        reserved: &[u32],
    ) -> Vec<TileSupport> {
        let tiles = self.control.len();
        let mut rows = vec![0u64; tiles];
        let mut patches = vec![0u64; tiles];
        for p in phases {
            for (t, r) in rows.iter_mut().enumerate() {
                // One return word ends each row.
                let bytes = p.rows.row_bytes(TileId::from_u32(t as u32));
                if bytes > 0 {
                    *r += bytes + 4;
                }
            }
            // Patches are stored as (word index, delta) pairs.
            for patch in &p.info.patches {
                if let Some(b) = patches.get_mut(patch.tile.index()) {
                    *b += 8;
                }
            }
        }
        (0..tiles)
            .map(|t| TileSupport {
                start: self.code_start,
                reserved: reserved[t],
                runtime_bytes: self.runtime.runtime_bytes,
                kernel_code_bytes: self.kernel_code[t],
                control_bytes: self.control[t],
                exchange_bytes: u32::try_from(rows[t]).unwrap_or(u32::MAX),
                patch_bytes: u32::try_from(patches[t]).unwrap_or(u32::MAX),
            })
            .collect()
    }
}

/// The estimated row bytes of one tile in one phase: `(generous, likely)`.
///
/// The rows depend on the schedule, which needs the placement, so this is
/// an estimate from what the tile sends and receives: a receive costs
/// about two instruction words (receive pointer and source), a send one
/// word per transfer and per 64 words (split transfers need more), and a
/// phase two closing words. The generous figure adds a sixteenth, so that
/// a second placement round is rare. The build logs the likely figure
/// against the measured rows and patches at debug level: it was
/// calibrated above them, but on SigLIP b2 it is now below them on 1407
/// of 1472 tiles, by 705 bytes on average (b4: 1078 tiles, 325 bytes), so
/// b2's single round rests on the sixteenth and the rounding to whole
/// memory elements, and b4, which falls back to the likely figure, places
/// 2 tiles again. Summed per step over b2's tiles the error has two
/// signs: a GEMM's operand multicasts measure 1.1–1.9× the estimate
/// (up to about four words per receive, not two), and the split-K reduces and
/// attention combines 0.35–0.6× (their long sends cost far less than a
/// word per 64).
fn estimated_row_bytes(t: &TileTraffic) -> (u64, u64) {
    if t.sends == 0 && t.receives == 0 {
        return (0, 0);
    }
    let bytes = 8 + 4 * u64::from(t.sends) + 8 * u64::from(t.receives) + 4 * t.send_chunks;
    (bytes + bytes / 16, bytes)
}

/// The estimated patch bytes of one tile in a phase patched per
/// iteration, `(generous, likely)`: a patch (8 bytes) for about every
/// fourth (generous) or eighth (likely) address-holding word.
fn estimated_patch_bytes(t: &TileTraffic) -> (u64, u64) {
    if t.sends == 0 && t.receives == 0 {
        return (0, 0);
    }
    let words = u64::from(t.sends) + u64::from(t.receives);
    (8 + 2 * words, 8 + words)
}

fn round_up(value: u32, multiple: u32) -> u32 {
    value.div_ceil(multiple).saturating_mul(multiple)
}

/// Control-program bytes per tile: a header per step, one word per codelet
/// kind and argument.
fn control_bytes(program: &Program, tiles: u32, runtime: &RuntimeSpec) -> Vec<u32> {
    let mut bytes = vec![0u32; tiles as usize];
    for event in program.walk() {
        match event {
            WalkEvent::Compute(step, _) => {
                for b in bytes.iter_mut() {
                    *b += runtime.control_step_bytes;
                }
                for (tile, c) in &step.calls {
                    if let Some(b) = bytes.get_mut(tile.index()) {
                        *b += runtime.control_word_bytes * (1 + codelet_words(c));
                    }
                }
            }
            WalkEvent::Exchange(..) => {
                for b in bytes.iter_mut() {
                    *b += runtime.control_step_bytes;
                }
            }
            WalkEvent::Enter(..) | WalkEvent::Leave(..) => {}
        }
    }
    bytes
}

/// Argument words of a codelet call.
fn codelet_words(c: &Codelet) -> u32 {
    match c {
        Codelet::Gemm { .. } => 5,
        Codelet::Add { .. } => 5,
        Codelet::LayerNorm { .. } => 7,
        // The function picks the codelet, not an argument.
        Codelet::Activation { .. } | Codelet::Convert { .. } => 3,
        Codelet::ReduceSum { .. } => 4,
        // A causal block's two row indices are two more.
        Codelet::AttentionBlock { causal, .. } => 15 + if causal.is_some() { 2 } else { 0 },
        Codelet::AttentionCombine { .. } => 11,
        Codelet::AttentionSoftmax { .. } => 9,
        Codelet::Panels { .. } => 8,
        Codelet::Zero { .. } => 2,
        Codelet::Gather { .. } => 8,
    }
}

/// Kernel code bytes per tile: the block of every distinct kernel entry a
/// tile calls. An object's entries are blocks of their own (see
/// `ipu_kernels::entry_code_bytes`), so a tile links only those it calls:
/// a tile whose shard is the long one never holds the short entries, and
/// one that only initialises an output never holds the accumulating ones.
fn kernel_code(program: &Program, variants: &[Variant], tiles: u32) -> Vec<u32> {
    let mut used: Vec<Vec<(usize, GemmEntry)>> = vec![Vec::new(); tiles as usize];
    for event in program.walk() {
        let WalkEvent::Compute(step, _) = event else {
            continue;
        };
        for (tile, c) in &step.calls {
            if let Codelet::Gemm { kernel, entry, .. } = c
                && let Some(u) = used.get_mut(tile.index())
                && !u.contains(&(kernel.index(), *entry))
            {
                u.push((kernel.index(), *entry));
            }
        }
    }
    used.iter()
        .map(|u| {
            u.iter()
                .filter_map(|&(k, entry)| {
                    let (size, mode) = entry.parts();
                    let variant = variants.get(k)?;
                    Some(ipu_kernels::entry_code_bytes(variant, size, mode))
                })
                .fold(0u32, u32::saturating_add)
        })
        .collect()
}
