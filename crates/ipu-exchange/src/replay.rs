//! Executes encoded rows against real tile memory, word by word.
//!
//! The simulator calls [`replay`] with its per-tile SRAM images, so an
//! encoding, scheduling or addressing error corrupts data that the
//! end-to-end comparison then catches. Timing follows [`crate::isa`]: a word
//! is read from the sender's memory in its send cycle and written at the
//! receiver `latency` cycles later; a write in cycle `c` is visible to reads
//! in cycles after `c`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use ipu_layout::TileId;

use crate::check::ExchangeCheckError;
use crate::encode::EncodedRows;
use crate::engine::{Run, replay_rows};
use crate::fabric::Fabric;

/// A memory access outside what the memory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{tile} has no word at byte address {byte_address:#x}")]
pub struct MemoryError {
    /// The tile.
    pub tile: TileId,
    /// The byte address.
    pub byte_address: u32,
}

/// Word-addressed tile memories.
pub trait ExchangeMemory {
    /// The word at `byte_address` (4-byte aligned) on `tile`.
    fn read_word(&self, tile: TileId, byte_address: u32) -> Result<u32, MemoryError>;
    /// Stores `word` at `byte_address` (4-byte aligned) on `tile`.
    fn write_word(&mut self, tile: TileId, byte_address: u32, word: u32)
    -> Result<(), MemoryError>;
}

/// What a replay did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReplayStats {
    /// Words written at receivers.
    pub words_written: u64,
    /// Uninterrupted runs received.
    pub runs: u64,
    /// Cycles until the longest row ends.
    pub cycles: u64,
}

/// Why a replay stopped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The rows break a structural rule (the first one found is reported).
    #[error("the rows cannot be replayed: {0}")]
    Rows(#[source] ExchangeCheckError),
    /// A read or write fell outside the memory.
    #[error("replay touched missing memory: {0}")]
    Memory(#[from] MemoryError),
}

/// Replays every tile's row against `memory`.
pub fn replay(
    rows: &EncodedRows,
    fabric: &Fabric,
    memory: &mut impl ExchangeMemory,
) -> Result<ReplayStats, ReplayError> {
    let (replayed, errors) = replay_rows(rows, fabric, rows.tile_count());
    if let Some(e) = errors.into_iter().next() {
        return Err(ReplayError::Rows(e));
    }
    let runs: Vec<&Run> = replayed.runs.iter().flatten().collect();
    let mut stats = ReplayStats {
        words_written: 0,
        runs: runs.len() as u64,
        cycles: replayed.end,
    };
    let latency = u64::from(fabric.latency_cycles());
    if reads_overlap_writes(&runs) {
        ordered(&runs, latency, memory, &mut stats)?;
    } else {
        // No word read in this phase is written in it, so order is moot.
        for r in &runs {
            for k in 0..r.words() as u32 {
                let w = memory.read_word(TileId::from_u32(r.source), r.src_addr + 4 * k)?;
                memory.write_word(TileId::from_u32(r.dest), r.dst_addr + 4 * k, w)?;
                stats.words_written += 1;
            }
        }
    }
    Ok(stats)
}

/// Whether any run reads bytes that some run writes on the same tile.
fn reads_overlap_writes(runs: &[&Run]) -> bool {
    // (tile, start, end, is_write)
    let mut ranges: Vec<(u32, u64, u64, bool)> = Vec::with_capacity(runs.len() * 2);
    for r in runs {
        let bytes = r.words() * 4;
        ranges.push((
            r.source,
            u64::from(r.src_addr),
            u64::from(r.src_addr) + bytes,
            false,
        ));
        ranges.push((
            r.dest,
            u64::from(r.dst_addr),
            u64::from(r.dst_addr) + bytes,
            true,
        ));
    }
    ranges.sort_unstable();
    let mut tile = u32::MAX;
    let mut reach_read = 0u64;
    let mut reach_write = 0u64;
    for &(t, start, end, write) in &ranges {
        if t != tile {
            tile = t;
            reach_read = 0;
            reach_write = 0;
        }
        if (write && reach_read > start) || (!write && reach_write > start) {
            return true;
        }
        if write {
            reach_write = reach_write.max(end);
        } else {
            reach_read = reach_read.max(end);
        }
    }
    false
}

/// Cycle-ordered replay for phases that read words they also write.
fn ordered(
    runs: &[&Run],
    latency: u64,
    memory: &mut impl ExchangeMemory,
    stats: &mut ReplayStats,
) -> Result<(), MemoryError> {
    // (send cycle, run, item) for every item, in cycle order.
    let mut reads: Vec<(u64, u32, u32)> = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let send = r.arrival.saturating_sub(latency);
        for k in 0..r.items {
            reads.push((send + u64::from(k), i as u32, k));
        }
    }
    reads.sort_unstable();
    // Pending writes: (cycle, tile, byte address, word).
    let mut pending: BinaryHeap<Reverse<(u64, u32, u32, u32)>> = BinaryHeap::new();
    let flush = |until: u64,
                 pending: &mut BinaryHeap<Reverse<(u64, u32, u32, u32)>>,
                 memory: &mut dyn FnMut(u32, u32, u32) -> Result<(), MemoryError>|
     -> Result<(), MemoryError> {
        while let Some(&Reverse((c, t, a, w))) = pending.peek() {
            if c >= until {
                break;
            }
            pending.pop();
            memory(t, a, w)?;
        }
        Ok(())
    };
    for &(cycle, i, k) in &reads {
        {
            let mut write = |t: u32, a: u32, w: u32| memory.write_word(TileId::from_u32(t), a, w);
            flush(cycle, &mut pending, &mut write)?;
        }
        let r = runs[i as usize];
        let per = if r.wide { 2 } else { 1 };
        for h in 0..per {
            let offset = 4 * (k * per + h);
            let w = memory.read_word(TileId::from_u32(r.source), r.src_addr + offset)?;
            pending.push(Reverse((
                r.arrival + u64::from(k),
                r.dest,
                r.dst_addr + offset,
                w,
            )));
            stats.words_written += 1;
        }
    }
    let mut write = |t: u32, a: u32, w: u32| memory.write_word(TileId::from_u32(t), a, w);
    flush(u64::MAX, &mut pending, &mut write)
}
