//! From the core's segments to per-tile send and receive pieces, grouped
//! by tile with counting sorts and built tile by tile in parallel.

use rayon::prelude::*;

use crate::core::CoreOutput;
use crate::encode::{RecvPiece, SendPiece, TileActivity};
use crate::model::Phase;

/// (segment, end of the source's send before it — set on the segment's
/// first piece —, start of the source's send after it — set on its last).
type QuietMark = (u32, Option<Option<u64>>, Option<Option<u64>>);

/// Segment indices grouped by tile: `order[offsets[t]..offsets[t + 1]]`
/// are tile `t`'s, in segment order.
struct Grouped {
    offsets: Vec<usize>,
    order: Vec<u32>,
}

impl Grouped {
    /// Groups `items` (tile, payload) by tile with a counting sort, keeping
    /// their order within a tile.
    fn new(tiles: usize, items: impl Iterator<Item = (u32, u32)> + Clone) -> Grouped {
        let mut offsets = vec![0usize; tiles + 1];
        for (tile, _) in items.clone() {
            offsets[tile as usize + 1] += 1;
        }
        for t in 0..tiles {
            offsets[t + 1] += offsets[t];
        }
        let mut next = offsets.clone();
        let mut order = vec![0u32; offsets[tiles]];
        for (tile, payload) in items {
            let at = &mut next[tile as usize];
            order[*at] = payload;
            *at += 1;
        }
        Grouped { offsets, order }
    }

    fn of(&self, tile: usize) -> &[u32] {
        &self.order[self.offsets[tile]..self.offsets[tile + 1]]
    }
}

/// Turns core segments into per-tile pieces sorted by start; receive
/// pieces start `latency` cycles after their send. Returns the number of
/// segments.
///
/// Segments are grouped by sending and by receiving tile first (counting
/// sorts), so that each tile's pieces are built in parallel from its own
/// segments, reading the phase's transfers of that tile together; the
/// result does not depend on the thread count.
pub(super) fn add_activity(
    phase: &Phase,
    out: &CoreOutput,
    latency: u64,
    relocatable: bool,
    activity: &mut [TileActivity],
) -> usize {
    // Structural addresses: each transfer's words in a space of their own,
    // so that pieces of different transfers are never adjacent (see
    // `ScheduleConfig::relocatable`); a gather's words, whose addresses are
    // arbitrary, each in a space of its own too.
    let structural =
        |origin: u32, word: u32| ((u128::from(origin) + 1) << 66) + 4 * u128::from(word);
    let scattered =
        |origin: u32, word: u32| ((u128::from(origin) + 1) << 66) + ((u128::from(word) + 1) << 34);
    let tiles = activity.len();
    let segments = &out.segments;
    // Each segment's sender, read from its job once and in parallel: the
    // grouping passes over the segments twice, and segments in time order
    // visit the jobs out of order (on a phase of 586,368 transfers a miss
    // per segment and pass).
    let senders: Vec<u32> = segments
        .par_iter()
        .map(|seg| out.jobs[seg.job as usize].sender)
        .collect();
    let by_source = Grouped::new(
        tiles,
        senders.iter().enumerate().map(|(i, &s)| (s, i as u32)),
    );
    // Per tile: its send pieces sorted by start, and per segment of the
    // tile the end of the tile's send before it and the start of the one
    // after it.
    let sends: Vec<(Vec<SendPiece>, Vec<QuietMark>)> = (0..tiles)
        .into_par_iter()
        .map(|tile| {
            let mut pieces: Vec<(SendPiece, u32)> = Vec::with_capacity(by_source.of(tile).len());
            for &index in by_source.of(tile) {
                let seg = &segments[index as usize];
                let job = &out.jobs[seg.job as usize];
                let t = &phase.transfers[job.origin as usize];
                let wide = !job.extra_senders.is_empty();
                let per = if wide { 2 } else { 1 };
                let first_word = seg.offset * per;
                let words = seg.len * per;
                // Source runs: contiguous pieces of the segment's words.
                let mut i = 0;
                while i < words {
                    let Some(address) = t.source_word_address(first_word + i) else {
                        break;
                    };
                    let mut n = if t.source_addresses.len() == 1 {
                        words - i
                    } else {
                        per
                    };
                    // A gather's runs depend on its addresses; relocatable
                    // rows send it word by word.
                    while !(relocatable && t.source_addresses.len() > 1)
                        && i + n < words
                        && t.source_word_address(first_word + i + n) == Some(address + 4 * n)
                    {
                        n += per;
                    }
                    let piece = SendPiece {
                        start: seg.start + u64::from(i / per),
                        items: n / per,
                        wide,
                        byte_address: address,
                        vaddr: if !relocatable {
                            u128::from(address)
                        } else if t.source_addresses.len() > 1 {
                            scattered(job.origin, first_word + i)
                        } else {
                            structural(job.origin, first_word + i)
                        },
                    };
                    pieces.push((piece, index));
                    i += n;
                }
            }
            pieces.sort_by_key(|(p, _)| p.start);
            let mut marks = Vec::with_capacity(by_source.of(tile).len());
            for (k, &(_, seg)) in pieces.iter().enumerate() {
                let first = k == 0 || pieces[k - 1].1 != seg;
                let last = pieces.get(k + 1).is_none_or(|n| n.1 != seg);
                if first {
                    let before = k
                        .checked_sub(1)
                        .map(|q| pieces[q].0.start + u64::from(pieces[q].0.items));
                    marks.push((seg, Some(before), None));
                }
                if last {
                    let after = pieces.get(k + 1).map(|n| n.0.start);
                    marks.push((seg, None, Some(after)));
                }
            }
            (pieces.into_iter().map(|(p, _)| p).collect(), marks)
        })
        .collect();
    // Per segment: the end of its source's previous send and the start of
    // its next one.
    let mut before = vec![None; segments.len()];
    let mut after = vec![None; segments.len()];
    for (_, marks) in &sends {
        for &(seg, b, a) in marks {
            if let Some(b) = b {
                before[seg as usize] = b;
            }
            if let Some(a) = a {
                after[seg as usize] = a;
            }
        }
    }
    // Receive pieces, grouped by receiving tile. One pass over the
    // segments (in parallel, in order) reads each job and transfer once and
    // lists (segment, receiving tile, destination byte address, destination
    // index); a broadcast's hundreds of receivers then read only this list.
    let receptions: Vec<(u32, u32, u32, u32)> = segments
        .par_iter()
        .enumerate()
        .flat_map_iter(|(i, seg)| {
            let job = &out.jobs[seg.job as usize];
            let t = &phase.transfers[job.origin as usize];
            job.dests.iter().map(move |&k| {
                let (d, address) = t.destinations[k as usize];
                (i as u32, d.as_u32(), address, k)
            })
        })
        .collect();
    // Per segment: what a receive piece needs of it besides its address.
    let info: Vec<(u32, bool, u32)> = segments
        .par_iter()
        .map(|seg| {
            let job = &out.jobs[seg.job as usize];
            let wide = !job.extra_senders.is_empty();
            (job.origin, wide, job.sender)
        })
        .collect();
    let by_dest = Grouped::new(
        tiles,
        receptions
            .iter()
            .enumerate()
            .map(|(p, &(_, d, _, _))| (d, p as u32)),
    );
    let recvs: Vec<Vec<RecvPiece>> = (0..tiles)
        .into_par_iter()
        .map(|tile| {
            let mut pieces: Vec<RecvPiece> = by_dest
                .of(tile)
                .iter()
                .map(|&p| {
                    let (index, _, address, dest) = receptions[p as usize];
                    let seg = &segments[index as usize];
                    let (origin, wide, source) = info[index as usize];
                    let first_word = seg.offset * if wide { 2 } else { 1 };
                    RecvPiece {
                        start: seg.start + latency,
                        items: seg.len,
                        wide,
                        source,
                        byte_address: address + 4 * first_word,
                        vaddr: if relocatable {
                            structural(origin, first_word)
                        } else {
                            u128::from(address + 4 * first_word)
                        },
                        dest,
                        source_quiet_from: before[index as usize],
                        source_next_send: after[index as usize],
                    }
                })
                .collect();
            pieces.sort_by_key(|p| p.start);
            pieces
        })
        .collect();
    for ((a, (s, _)), r) in activity.iter_mut().zip(sends).zip(recvs) {
        a.sends = s;
        a.recvs = r;
    }
    segments.len()
}
