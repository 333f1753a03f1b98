//! Executes encoded rows against real tile memory.
//!
//! The simulator calls [`replay`] with its per-tile SRAM images, so an
//! encoding, scheduling or addressing error corrupts data that the
//! end-to-end comparison then catches. Timing follows [`crate::isa`]: a word
//! is read from the sender's memory in its send cycle and written at the
//! receiver `latency` cycles later; a write in cycle `c` is visible to reads
//! in cycles after `c`.
//!
//! Only words that the phase both reads and writes, or writes more than
//! once, depend on that timing (a valid phase has none: its writes overlap
//! neither each other nor what tiles send). Every other word is moved with
//! its run in one block copy, in any order; the items touching such
//! "conflict" words are replayed one by one in cycle order. The result is
//! the cycle-ordered replay of every item, word for word.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;

use ipu_layout::TileId;
use rayon::prelude::*;

use crate::encode::EncodedRows;
use crate::engine::{Run, replay_rows};
use crate::error::ExchangeCheckError;
use crate::fabric::Fabric;
use crate::grouped::Grouped;
use crate::words::none_meet;

/// A memory access outside what the memory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{tile} has no word at byte address {byte_address:#x}")]
pub struct MemoryError {
    /// The tile.
    pub tile: TileId,
    /// The byte address.
    pub byte_address: u32,
}

/// The byte address of word `k` of a run at `byte_address`, or an error
/// naming the run when the word lies beyond the 32-bit address space.
fn word_address(tile: TileId, byte_address: u32, k: usize) -> Result<u32, MemoryError> {
    u32::try_from(k)
        .ok()
        .and_then(|k| k.checked_mul(4))
        .and_then(|offset| byte_address.checked_add(offset))
        .ok_or(MemoryError { tile, byte_address })
}

/// Word-addressed tile memories.
///
/// Only the single-word accesses are required; a memory that holds each
/// placed range contiguously should also implement
/// [`ExchangeMemory::copy_blocks`], which replay uses for every run it can
/// move whole.
pub trait ExchangeMemory {
    /// The word at `byte_address` (4-byte aligned) on `tile`.
    fn read_word(&self, tile: TileId, byte_address: u32) -> Result<u32, MemoryError>;
    /// Stores `word` at `byte_address` (4-byte aligned) on `tile`.
    fn write_word(&mut self, tile: TileId, byte_address: u32, word: u32)
    -> Result<(), MemoryError>;

    /// Performs every copy of `copies`. Replay passes them sorted by
    /// destination tile, with no copy reading a word any copy writes and
    /// no word written twice, so any order, or all reads before all
    /// writes, gives the same memory. On error, the error of the first
    /// copy (in the given order) that fails is returned, and copies may
    /// have been made in part or whole. The default copies one after
    /// another; a memory whose tiles are independent may copy in parallel.
    fn copy_blocks(&mut self, copies: &[BlockCopy]) -> Result<(), MemoryError> {
        for c in copies {
            for k in 0..c.words as usize {
                let w = self.read_word(c.source, word_address(c.source, c.source_address, k)?)?;
                self.write_word(c.dest, word_address(c.dest, c.dest_address, k)?, w)?;
            }
        }
        Ok(())
    }
}

/// Consecutive words moved from one tile to another, in any cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockCopy {
    /// The tile read.
    pub source: TileId,
    /// The byte address of the first word read.
    pub source_address: u32,
    /// The tile written.
    pub dest: TileId,
    /// The byte address of the first word written.
    pub dest_address: u32,
    /// Words moved.
    pub words: u32,
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
    let conflicts = Conflicts::find(&replayed.runs, &runs, rows.tile_count());
    // Items touching a conflict word, as (send cycle, run, item); the
    // others as block copies in run order, so by destination tile.
    let mut timed: Vec<(u64, u32, u32)> = Vec::new();
    let mut copies: Vec<BlockCopy> = Vec::with_capacity(runs.len());
    let mut spans: Vec<Range<u32>> = Vec::new();
    let latency = u64::from(fabric.latency_cycles());
    // A valid phase has no conflicts: every run is then one copy.
    let none = conflicts.is_empty();
    for (i, r) in runs.iter().enumerate() {
        if none {
            spans.clear();
        } else {
            conflicts.items_touching(r, &mut spans);
        }
        let mut next = 0u32;
        for span in spans
            .iter()
            .cloned()
            .chain(std::iter::once(r.items..r.items))
        {
            if span.start > next {
                copies.push(block_copy(r, next..span.start)?);
            }
            let send = r.arrival.saturating_sub(latency);
            timed.extend(span.clone().map(|k| (send + u64::from(k), i as u32, k)));
            next = span.end;
        }
        stats.words_written += r.words();
    }
    memory.copy_blocks(&copies)?;
    if !timed.is_empty() {
        ordered(&runs, &mut timed, memory)?;
    }
    Ok(stats)
}

/// Items `items` of run `r` as one block copy.
fn block_copy(r: &Run, items: Range<u32>) -> Result<BlockCopy, MemoryError> {
    let per = r.item_words();
    let (source, dest) = (TileId::from_u32(r.source), TileId::from_u32(r.dest));
    let first = items.start as usize * per as usize;
    Ok(BlockCopy {
        source,
        source_address: word_address(source, r.src_addr, first)?,
        dest,
        dest_address: word_address(dest, r.dst_addr, first)?,
        words: (items.end - items.start) * per,
    })
}

/// Per tile, the byte ranges whose final contents depend on the order of
/// the phase's items: words both read and written, and words written more
/// than once. Sorted and disjoint.
struct Conflicts {
    per_tile: Vec<Vec<(u64, u64)>>,
}

impl Conflicts {
    /// The conflicts of `runs`, which `by_dest` holds grouped by
    /// receiving tile (as replay produces them).
    fn find(by_dest: &[Vec<Run>], runs: &[&Run], tile_count: u32) -> Self {
        let n = tile_count as usize;
        // Reads grouped by source tile with a counting sort (no list per
        // tile to grow); the writes of a tile are its received runs.
        let reads = by_tile(runs, n, |r| (r.source, r.src_addr));
        let per_tile = (0..n)
            .into_par_iter()
            .map_init(Vec::new, |bitmap, tile| {
                let received = by_dest.get(tile).map_or(&[][..], Vec::as_slice);
                let writes: Vec<(u64, u64)> =
                    received.iter().map(|r| byte_range(r.dst_addr, r)).collect();
                tile_conflicts(reads.of(tile), &writes, bitmap)
            })
            .collect();
        Conflicts { per_tile }
    }

    /// Whether no tile has a conflict range.
    fn is_empty(&self) -> bool {
        self.per_tile.iter().all(Vec::is_empty)
    }

    /// The items of `r` whose read or written bytes meet a conflict range,
    /// as sorted disjoint item ranges in `spans`.
    fn items_touching(&self, r: &Run, spans: &mut Vec<Range<u32>>) {
        spans.clear();
        let width = 4 * u64::from(r.item_words());
        for (tile, base) in [(r.source, r.src_addr), (r.dest, r.dst_addr)] {
            let Some(list) = self.per_tile.get(tile as usize) else {
                continue;
            };
            let (start, end) = (
                u64::from(base),
                u64::from(base) + u64::from(r.items) * width,
            );
            let first = list.partition_point(|&(_, e)| e <= start);
            for &(s, e) in list[first..].iter().take_while(|&&(s, _)| s < end) {
                // Items whose bytes [start + k·width, start + (k+1)·width)
                // meet [s, e).
                let lo = s.saturating_sub(start) / width;
                let hi = (e.min(end) - start).div_ceil(width);
                spans.push(lo as u32..hi as u32);
            }
        }
        spans.sort_unstable_by_key(|s| s.start);
        // Merge overlapping or adjacent spans.
        let mut merged: Vec<Range<u32>> = Vec::with_capacity(spans.len());
        for s in spans.drain(..) {
            match merged.last_mut() {
                Some(last) if s.start <= last.end => last.end = last.end.max(s.end),
                _ => merged.push(s),
            }
        }
        *spans = merged;
    }
}

/// One tile's conflict ranges (sorted, disjoint) from the byte ranges it
/// is read and written in.
/// `bitmap` is [`none_meet`]'s scratch.
fn tile_conflicts(
    reads: &[(u64, u64)],
    writes: &[(u64, u64)],
    bitmap: &mut Vec<u64>,
) -> Vec<(u64, u64)> {
    if writes.is_empty()
        || (reads.is_empty() && writes.len() < 2)
        || none_meet(reads, writes, bitmap)
    {
        return Vec::new();
    }
    let mut reads = reads.to_vec();
    let mut writes = writes.to_vec();
    sort_ranges(&mut reads);
    sort_ranges(&mut writes);
    let mut conflicts = written_twice(&writes);
    conflicts.extend(intersection(&union(&reads), &union(&writes)));
    conflicts.sort_unstable();
    union(&conflicts)
}

/// The byte range every run covers on the tile `side` names (tile and
/// address), grouped by that tile; runs naming a tile past `n` are left
/// out, as the validated phase has none.
fn by_tile(runs: &[&Run], n: usize, side: impl Fn(&Run) -> (u32, u32)) -> Grouped<(u64, u64)> {
    let ranges = runs.iter().filter_map(|r| {
        let (tile, addr) = side(r);
        ((tile as usize) < n).then(|| (tile, byte_range(addr, r)))
    });
    Grouped::new(n, std::iter::once(ranges))
}

/// Sorts byte ranges by start, then end: as packed `start << 32 | end`
/// keys when every end fits 32 bits (tile addresses do; sorting one word
/// per range moves half the bytes of sorting pairs), else as pairs.
fn sort_ranges(ranges: &mut [(u64, u64)]) {
    const LOW: u64 = u32::MAX as u64;
    if ranges.iter().all(|&(s, e)| s <= LOW && e <= LOW) {
        let mut keys: Vec<u64> = ranges.iter().map(|&(s, e)| (s << 32) | e).collect();
        keys.sort_unstable();
        for (range, key) in ranges.iter_mut().zip(keys) {
            *range = (key >> 32, key & LOW);
        }
    } else {
        ranges.sort_unstable();
    }
}

/// The bytes run `r` covers from byte address `addr` (its source's or its
/// destination's).
fn byte_range(addr: u32, r: &Run) -> (u64, u64) {
    let a = u64::from(addr);
    (a, a + r.words() * 4)
}

/// The union of sorted ranges, as sorted disjoint ranges.
fn union(sorted: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(s, e) in sorted.iter().filter(|(s, e)| s < e) {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Bytes covered by two or more of the sorted ranges.
fn written_twice(sorted: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut reach = 0u64;
    for &(s, e) in sorted {
        if s < reach {
            out.push((s, e.min(reach)));
        }
        reach = reach.max(e);
    }
    out
}

/// The intersection of two sets of sorted disjoint ranges.
fn intersection(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while let (Some(&(s0, e0)), Some(&(s1, e1))) = (a.get(i), b.get(j)) {
        let (s, e) = (s0.max(s1), e0.min(e1));
        if s < e {
            out.push((s, e));
        }
        if e0 <= e1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Cycle-ordered replay of the items in `timed` (send cycle, run, item):
/// each item's words are read in its send cycle and written `latency`
/// cycles later, at the run's arrival cycle for the item.
fn ordered(
    runs: &[&Run],
    timed: &mut [(u64, u32, u32)],
    memory: &mut impl ExchangeMemory,
) -> Result<(), MemoryError> {
    timed.sort_unstable();
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
    for &(cycle, i, k) in timed.iter() {
        {
            let mut write = |t: u32, a: u32, w: u32| memory.write_word(TileId::from_u32(t), a, w);
            flush(cycle, &mut pending, &mut write)?;
        }
        let r = runs[i as usize];
        let per = r.item_words();
        let (source, dest) = (TileId::from_u32(r.source), TileId::from_u32(r.dest));
        for h in 0..per {
            let word = (k * per + h) as usize;
            let w = memory.read_word(source, word_address(source, r.src_addr, word)?)?;
            pending.push(Reverse((
                r.arrival + u64::from(k),
                r.dest,
                word_address(dest, r.dst_addr, word)?,
                w,
            )));
        }
    }
    let mut write = |t: u32, a: u32, w: u32| memory.write_word(TileId::from_u32(t), a, w);
    flush(u64::MAX, &mut pending, &mut write)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use smallvec::smallvec;

    use super::*;

    /// Both ways of sorting ranges give the pairs' order.
    #[test]
    fn sorting_ranges_is_sorting_pairs() {
        let mut rng = ipu_layout::rng::SplitMix64::new(0x2545_f491_4f6c_dd1d);
        let mut draw = |limit: u64| rng.below(limit);
        for limit in [64, 1 << 20, u64::from(u32::MAX) + 2] {
            let mut ranges: Vec<(u64, u64)> = (0..500)
                .map(|_| {
                    let s = draw(limit);
                    (s, s + draw(64))
                })
                .collect();
            let mut expected = ranges.clone();
            expected.sort_unstable();
            sort_ranges(&mut ranges);
            assert_eq!(ranges, expected, "addresses below {limit}");
        }
    }
    use crate::model::{Phase, Transfer, Width};
    use crate::schedule::{ScheduleConfig, schedule};

    /// Every word readable, untouched words derived from tile and address.
    #[derive(Default, PartialEq, Debug)]
    struct Memory(HashMap<(u32, u32), u32>);

    impl ExchangeMemory for Memory {
        fn read_word(&self, tile: TileId, byte_address: u32) -> Result<u32, MemoryError> {
            let key = (tile.as_u32(), byte_address);
            Ok(self.0.get(&key).copied().unwrap_or_else(|| {
                key.0.wrapping_mul(0x9e37_79b9) ^ key.1.wrapping_mul(0x85eb_ca6b)
            }))
        }
        fn write_word(&mut self, tile: TileId, at: u32, word: u32) -> Result<(), MemoryError> {
            self.0.insert((tile.as_u32(), at), word);
            Ok(())
        }
    }

    /// The specification: every item of every run in send-cycle order.
    fn every_item_in_cycle_order(rows: &EncodedRows, fabric: &Fabric, memory: &mut Memory) {
        let (replayed, errors) = replay_rows(rows, fabric, rows.tile_count());
        assert!(errors.is_empty());
        let runs: Vec<&Run> = replayed.runs.iter().flatten().collect();
        let latency = u64::from(fabric.latency_cycles());
        let mut timed: Vec<(u64, u32, u32)> = Vec::new();
        for (i, r) in runs.iter().enumerate() {
            let send = r.arrival.saturating_sub(latency);
            timed.extend((0..r.items).map(|k| (send + u64::from(k), i as u32, k)));
        }
        ordered(&runs, &mut timed, memory).expect("every word exists");
    }

    /// A phase whose receive ranges lie 0x400 bytes above the receiving
    /// tile's own send range, so that one flipped address bit often makes a
    /// tile read words it also writes, or write words twice.
    fn close_phase() -> Phase {
        // (source, destinations, words, Paired64)
        let specs: [(u32, &[u32], u32, bool); 6] = [
            (0, &[1, 2], 24, false),
            (1, &[0], 16, false),
            (2, &[3], 20, true),
            (3, &[2, 4], 12, false),
            (4, &[5], 30, false),
            (5, &[1], 8, true),
        ];
        let send_at = |t: u32| 0x4c000 + 0x80 * t;
        let mut receive_at: Vec<u32> = (0..6).map(|t| send_at(t) + 0x400).collect();
        let transfers = specs
            .iter()
            .map(|&(source, dests, words, wide)| Transfer {
                source: TileId::from_u32(source),
                source_addresses: smallvec![send_at(source)],
                destinations: dests
                    .iter()
                    .map(|&d| {
                        let at = receive_at[d as usize];
                        receive_at[d as usize] += 4 * words;
                        (TileId::from_u32(d), at)
                    })
                    .collect(),
                words,
                width: if wide { Width::Paired64 } else { Width::Word32 },
            })
            .collect();
        Phase {
            tile_count: 6,
            transfers,
        }
    }

    #[test]
    fn block_copies_and_ordered_conflicts_match_the_cycle_ordered_replay() {
        let fabric = Fabric::ipu21().expect("the embedded device parses");
        let phase = close_phase();
        let s = schedule(&phase, &fabric, &ScheduleConfig::default()).expect("schedules");
        let rows: Vec<Vec<u32>> = (0..phase.tile_count)
            .map(|t| s.rows().row(TileId::from_u32(t)).to_vec())
            .collect();
        let (mut replayed, mut with_conflicts) = (0, 0);
        for t in 0..rows.len() {
            for w in 0..rows[t].len() {
                for bit in 2..14 {
                    let mut bad = rows.clone();
                    bad[t][w] ^= 1 << bit;
                    let bad = EncodedRows::from_tile_rows(bad);
                    let (runs, errors) = replay_rows(&bad, &fabric, bad.tile_count());
                    if !errors.is_empty() {
                        continue;
                    }
                    let flat: Vec<&Run> = runs.runs.iter().flatten().collect();
                    let conflicts = Conflicts::find(&runs.runs, &flat, bad.tile_count());
                    if conflicts.per_tile.iter().any(|c| !c.is_empty()) {
                        with_conflicts += 1;
                    }
                    let (mut fast, mut spec) = (Memory::default(), Memory::default());
                    replay(&bad, &fabric, &mut fast).expect("replays");
                    every_item_in_cycle_order(&bad, &fabric, &mut spec);
                    assert_eq!(fast, spec, "tile {t} word {w} bit {bit}");
                    replayed += 1;
                }
            }
        }
        assert!(
            with_conflicts >= 10 && replayed > with_conflicts,
            "{with_conflicts} of {replayed} replayed corruptions had conflicts"
        );
    }

    /// The bitmap check finds no conflict exactly where the sorting path
    /// finds none, on word ranges and on ranges that are not.
    #[test]
    fn the_bitmap_check_agrees_with_the_sorting_path() {
        let mut rng = ipu_layout::rng::SplitMix64::new(0x9e37_79b9_7f4a_7c15);
        let mut draw = |limit: u64| rng.below(limit);
        let (mut clean, mut dirty) = (0, 0);
        // One scratch bitmap for every case, as a worker reuses it.
        let mut bitmap = Vec::new();
        for case in 0..2000 {
            let unit = if case % 10 == 0 { 1 } else { 4 };
            let span = [256, 4096, 1 << 16][case % 3];
            let (read_count, write_count) = (draw(6), 1 + draw(6));
            let mut ranges = |n: u64| -> Vec<(u64, u64)> {
                (0..n)
                    .map(|_| {
                        let s = 0x4_0000 + unit * draw(span);
                        (s, s + unit * (1 + draw(40)))
                    })
                    .collect()
            };
            let (reads, writes) = (ranges(read_count), ranges(write_count));
            let mut sorted_reads = reads.clone();
            let mut sorted_writes = writes.clone();
            sorted_reads.sort_unstable();
            sorted_writes.sort_unstable();
            let mut exact = written_twice(&sorted_writes);
            exact.extend(intersection(&union(&sorted_reads), &union(&sorted_writes)));
            let quick = none_meet(&reads, &writes, &mut bitmap);
            assert!(
                bitmap.iter().all(|&w| w == 0),
                "case {case}: scratch left dirty"
            );
            if quick {
                assert!(exact.is_empty(), "case {case}: {reads:?} {writes:?}");
            }
            if unit == 4 {
                assert_eq!(quick, exact.is_empty(), "case {case}");
            }
            assert_eq!(
                tile_conflicts(&reads, &writes, &mut bitmap).is_empty(),
                exact.is_empty()
            );
            if exact.is_empty() {
                clean += 1
            } else {
                dirty += 1
            }
        }
        assert!(
            clean > 200 && dirty > 200,
            "{clean} clean, {dirty} with conflicts"
        );
    }

    #[test]
    fn conflicts_are_the_words_read_and_written_or_written_twice() {
        let ranges = |v: &[(u64, u64)]| v.to_vec();
        assert_eq!(
            union(&[(0, 4), (4, 8), (12, 16)]),
            ranges(&[(0, 8), (12, 16)])
        );
        assert_eq!(
            written_twice(&[(0, 8), (4, 12), (8, 16)]),
            ranges(&[(4, 8), (8, 12)])
        );
        assert_eq!(
            intersection(&[(0, 8), (16, 24)], &[(4, 20)]),
            ranges(&[(4, 8), (16, 20)])
        );
    }
}
