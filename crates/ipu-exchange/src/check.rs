//! The independent checker of encoded exchange rows.
//!
//! It checks only the rows against the original phase, sharing nothing with
//! the scheduler: it decodes every tile's row, then replays what each tile
//! receives ([`crate::engine`]) and verifies it at once, tile by tile in
//! parallel (errors in a fixed order whatever the thread count),
//! collecting every error:
//!
//! - every row decodes, and the rows are for the phase's tile count;
//! - a paired (64-bit) send never overlaps a send of the partner tile, and a
//!   paired receive never overlaps a receive of the partner tile;
//! - no tile listens to a tile that does not exist, and no PIC runs past
//!   the address space;
//! - every word a tile writes falls inside a destination range of a
//!   transfer to that tile, comes from that transfer's source tile, was read
//!   from the source address of the same word of the transfer, and is sent
//!   as 64-bit items only if the transfer is Paired64;
//! - every destination range is written exactly once, word for word;
//! - with memory-element hazards on, no tile reads and writes one memory
//!   element in the same cycle.
//!
//! "One item per cycle" per lane and port holds by construction of a row
//! (instructions run one after another), so replay cannot produce two.

use ipu_layout::TileId;
use rayon::prelude::*;

use crate::encode::EncodedRows;
use crate::engine::{
    Receiver, Run, busy_cycles, decode_rows, element_hazards, partner_receive_conflicts,
    wide_cycles,
};
use crate::error::ExchangeCheckError;
use crate::fabric::Fabric;
use crate::model::{Phase, ValidPhase, Width};

/// What the checker measured of rows it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckedRows {
    /// The cycle after the last window of the longest row: when the phase
    /// ends. Every received word was written before it (a tile writes only
    /// while its row runs), so this is the phase's horizon as the rows
    /// alone determine it, whatever a scheduler says.
    pub horizon: u64,
}

/// A destination range of the phase on one tile.
#[derive(Clone, Copy)]
struct Expect {
    start: u32,
    words: u32,
    transfer: u32,
}

/// Checks `rows` against `phase` (see the module docs for the rules).
///
/// The work is proportional to the phase and the rows: one pass over the
/// transfers to list each tile's destination ranges, then per receiving
/// tile (in parallel, results in tile order) its runs are replayed and
/// checked at once — a binary search per received run and one sort of the
/// word intervals it wrote. A run is as long as the words stay contiguous
/// (the receiver's own instruction boundaries do not cut it), so a
/// destination range received without interruption is one run.
///
/// Rows that pass are measured: [`CheckedRows::horizon`] is read from the
/// decoded rows, so a caller need not trust the horizon a scheduler
/// reports.
pub fn check_schedule(
    phase: &Phase,
    fabric: &Fabric,
    rows: &EncodedRows,
) -> Result<CheckedRows, Vec<ExchangeCheckError>> {
    match ValidPhase::new(phase) {
        Ok(valid) => check_valid_schedule(valid, fabric, rows),
        Err(e) => Err(vec![ExchangeCheckError::Phase(e)]),
    }
}

/// [`check_schedule`] of a phase already validated: every rule but the
/// phase's own.
pub fn check_valid_schedule(
    phase: ValidPhase<'_>,
    fabric: &Fabric,
    rows: &EncodedRows,
) -> Result<CheckedRows, Vec<ExchangeCheckError>> {
    let phase = phase.phase();
    let mut errors = Vec::new();
    if rows.tile_count() != phase.tile_count {
        errors.push(ExchangeCheckError::TileCount {
            rows: rows.tile_count(),
            tiles: phase.tile_count,
        });
    }
    let decoded = decode_rows(rows, fabric, phase.tile_count, &mut errors);
    let n = phase.tile_count as usize;
    // Destination ranges per tile, in one flat array ordered by tile.
    let mut offsets = vec![0usize; n + 1];
    for t in &phase.transfers {
        for &(d, _) in &t.destinations {
            offsets[d.as_u32() as usize + 1] += 1;
        }
    }
    for d in 0..n {
        offsets[d + 1] += offsets[d];
    }
    let mut next = offsets.clone();
    let mut ranges = vec![
        Expect {
            start: 0,
            words: 0,
            transfer: 0,
        };
        offsets[n]
    ];
    for (index, t) in phase.transfers.iter().enumerate() {
        for &(d, address) in &t.destinations {
            let at = &mut next[d.as_u32() as usize];
            ranges[*at] = Expect {
                start: address,
                words: t.words,
                transfer: index as u32,
            };
            *at += 1;
        }
    }
    let mut lists: Vec<&mut [Expect]> = Vec::with_capacity(n);
    let mut rest = ranges.as_mut_slice();
    for d in 0..n {
        let (list, tail) = rest.split_at_mut(offsets[d + 1] - offsets[d]);
        lists.push(list);
        rest = tail;
    }
    let latency = u64::from(fabric.latency_cycles());
    // Receive ports are compared between partners only when some tile
    // sends 64-bit items at all.
    let any_wide = decoded.any_wide();
    // Each tile's runs live only while that tile is checked.
    let mut per_tile: Vec<TileVerdict> = lists
        .into_par_iter()
        .enumerate()
        .map_init(
            // The runs list is kept across a worker's tiles: allocated
            // once, not grown again for every tile.
            || (Receiver::new(n, latency, true), Vec::new()),
            |(receiver, runs), (d, list)| {
                list.sort_unstable_by_key(|e| e.start);
                let mut verdict = TileVerdict::default();
                runs.clear();
                receiver.receive(
                    d as u32,
                    decoded.states.get(d).map_or(&[], Vec::as_slice),
                    &decoded.sends,
                    runs,
                    &mut verdict.receive,
                );
                if fabric.memory_element_hazards() {
                    element_hazards(
                        d as u32,
                        runs,
                        &decoded.sends[d],
                        fabric,
                        &mut verdict.hazards,
                    );
                }
                if any_wide {
                    verdict.busy = busy_cycles(runs);
                    verdict.wide = wide_cycles(runs);
                }
                (verdict.runs, verdict.coverage) =
                    check_tile(phase, TileId::from_u32(d as u32), runs, list);
                verdict
            },
        )
        .collect();
    // Errors by kind, each kind in tile order.
    for v in &per_tile {
        errors.extend_from_slice(&v.receive);
    }
    if any_wide {
        let busy: Vec<Vec<(u64, u64)>> = per_tile
            .iter_mut()
            .map(|v| std::mem::take(&mut v.busy))
            .collect();
        for (d, v) in per_tile.iter().enumerate() {
            partner_receive_conflicts(d as u32, &v.wide, &busy, fabric, &mut errors);
        }
    }
    for v in &per_tile {
        errors.extend_from_slice(&v.hazards);
    }
    for v in &per_tile {
        errors.extend_from_slice(&v.runs);
    }
    for v in per_tile {
        errors.extend(v.coverage);
    }
    if errors.is_empty() {
        Ok(CheckedRows {
            horizon: decoded.end,
        })
    } else {
        Err(errors)
    }
}

/// What checking one receiving tile found.
#[derive(Default)]
struct TileVerdict {
    /// Faults of its receive state (unknown sources, pointer overflow).
    receive: Vec<ExchangeCheckError>,
    /// Memory-element hazards.
    hazards: Vec<ExchangeCheckError>,
    /// Faults of the runs it received.
    runs: Vec<ExchangeCheckError>,
    /// Destination words written twice or never.
    coverage: Vec<ExchangeCheckError>,
    /// Cycles in which it receives (only when some tile sends 64-bit
    /// items).
    busy: Vec<(u64, u64)>,
    /// Cycles in which it receives 64-bit items.
    wide: Vec<(u64, u64)>,
}

/// Checks the runs one tile received against its destination ranges
/// (sorted by start): the errors of the runs themselves, then the words
/// written twice or never.
fn check_tile(
    phase: &Phase,
    tile: TileId,
    runs: &[Run],
    list: &[Expect],
) -> (Vec<ExchangeCheckError>, Vec<ExchangeCheckError>) {
    let mut errors = Vec::new();
    // (range index, first word, end word) written.
    let mut got: Vec<(u32, u32, u32)> = Vec::with_capacity(runs.len());
    for run in runs {
        check_run(phase, run, list, &mut got, &mut errors);
    }
    // A transfer's words arrive in order, so in rows without faults each
    // range's pieces follow one another from its first word to its last in
    // arrival order, which one pass shows without sorting. Anything else
    // (pieces out of order, gaps, words written twice) is sorted and walked
    // below, which finds exactly which words.
    if covered_in_order(&got, list) {
        return (errors, Vec::new());
    }
    got.sort_unstable();
    let mut coverage = Vec::new();
    let mut g = 0;
    for (i, e) in list.iter().enumerate() {
        let transfer = e.transfer as usize;
        let mut next = 0u32;
        while let Some(&(_, a, b)) = got.get(g).filter(|x| x.0 as usize == i) {
            if a < next {
                coverage.push(ExchangeCheckError::DoubleWrite {
                    transfer,
                    tile,
                    word: a,
                });
            } else if a > next {
                coverage.push(ExchangeCheckError::Missing {
                    transfer,
                    tile,
                    first: next,
                    end: a,
                });
            }
            next = next.max(b);
            g += 1;
        }
        if next < e.words {
            coverage.push(ExchangeCheckError::Missing {
                transfer,
                tile,
                first: next,
                end: e.words,
            });
        }
    }
    (errors, coverage)
}

/// Whether the pieces in `got` (range index, first word, end word), in
/// arrival order, cover every range of `list` from its first word to its
/// last, each piece starting where the range's previous one ended.
fn covered_in_order(got: &[(u32, u32, u32)], list: &[Expect]) -> bool {
    let mut next = vec![0u32; list.len()];
    got.iter().all(|&(i, first, end)| {
        let at = &mut next[i as usize];
        let follows = first == *at;
        *at = end;
        follows
    }) && next.iter().zip(list).all(|(&n, e)| n == e.words)
}

/// Checks one received run; a run may span several destination ranges
/// that happen to be contiguous on both tiles.
fn check_run(
    phase: &Phase,
    run: &Run,
    list: &[Expect],
    got: &mut Vec<(u32, u32, u32)>,
    errors: &mut Vec<ExchangeCheckError>,
) {
    let tile = TileId::from_u32(run.dest);
    let total = run.words();
    let mut done = 0u64;
    while done < total {
        let dst = u64::from(run.dst_addr) + 4 * done;
        let src = u64::from(run.src_addr) + 4 * done;
        let stray = ExchangeCheckError::StrayWrite {
            tile,
            sender: TileId::from_u32(run.source),
            byte_address: dst as u32,
            words: total - done,
            // The cycle the first stray word arrives in.
            cycle: run.arrival + done / if run.wide { 2 } else { 1 },
        };
        let i = list.partition_point(|e| u64::from(e.start) <= dst);
        let Some((index, e)) = i.checked_sub(1).and_then(|k| list.get(k).map(|e| (k, e))) else {
            errors.push(stray);
            return;
        };
        let transfer = e.transfer as usize;
        let t = &phase.transfers[transfer];
        let first = (dst - u64::from(e.start)) / 4;
        if t.source.as_u32() != run.source || first >= u64::from(e.words) {
            errors.push(stray);
            return;
        }
        let words = (total - done).min(u64::from(e.words) - first) as u32;
        let first = first as u32;
        if run.wide && t.width == Width::Word32 {
            errors.push(ExchangeCheckError::WideWord32 { transfer, tile });
        }
        if let [start] = t.source_addresses.as_slice() {
            // A contiguous source only needs its first word compared.
            let expected = start.checked_add(4 * first).unwrap_or(u32::MAX);
            if u64::from(expected) != src {
                errors.push(ExchangeCheckError::WrongSourceAddress {
                    transfer,
                    tile,
                    word: first,
                    expected,
                    got: src as u32,
                });
            }
        } else {
            for k in 0..words {
                let expected = t.source_word_address(first + k).unwrap_or(u32::MAX);
                let got = (src + 4 * u64::from(k)) as u32;
                if expected != got {
                    errors.push(ExchangeCheckError::WrongSourceAddress {
                        transfer,
                        tile,
                        word: first + k,
                        expected,
                        got,
                    });
                    break;
                }
            }
        }
        got.push((index as u32, first, first + words));
        done += u64::from(words);
    }
}

#[cfg(test)]
mod tests {
    use super::{Expect, covered_in_order};

    /// The one-pass coverage test says yes only to pieces that tile every
    /// range in arrival order; everything else goes to the sorting walk.
    #[test]
    fn only_ranges_covered_in_arrival_order_skip_the_sort() {
        let list = [
            Expect {
                start: 0,
                words: 4,
                transfer: 0,
            },
            Expect {
                start: 64,
                words: 2,
                transfer: 1,
            },
        ];
        let whole = [(0, 0, 2), (1, 0, 2), (0, 2, 4)];
        assert!(covered_in_order(&whole, &list));
        // Complete but out of order: sorted and walked instead.
        assert!(!covered_in_order(&[(0, 2, 4), (1, 0, 2), (0, 0, 2)], &list));
        // A gap, a word written twice, a range never written.
        assert!(!covered_in_order(&[(0, 0, 1), (0, 2, 4), (1, 0, 2)], &list));
        assert!(!covered_in_order(&[(0, 0, 3), (0, 2, 4), (1, 0, 2)], &list));
        assert!(!covered_in_order(&[(0, 0, 4)], &list));
    }
}
