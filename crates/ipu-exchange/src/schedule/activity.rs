//! From the core's segments to per-tile send and receive pieces, grouped
//! by tile with counting sorts and built tile by tile in parallel.

use rayon::prelude::*;

use crate::address::{scattered_address, structural_address};
use crate::core::{CoreOutput, Job, Segment};
use crate::encode::{Activity, Arrival, Made, NO_CYCLE, Received, Reception, SendPiece, recv_key};
use crate::grouped::Grouped;
use crate::model::{Phase, Transfer};

/// What a sending tile's pass makes: its send pieces in order, and the
/// receive pieces of its segments with the receiving tile of each arrival
/// and of each further reception.
struct Sent {
    sends: Vec<SendPiece>,
    arrival_tiles: Vec<u32>,
    reception_tiles: Vec<u32>,
    made: Made,
}

/// Turns core segments into per-tile pieces sorted by start; receive
/// pieces start `latency` cycles after their send.
///
/// Segments are grouped by sending tile first (a counting sort), so that
/// each tile's send pieces, and the receive pieces of its segments, are
/// built in parallel from its own segments, reading the phase's transfers
/// of that tile together; the receive pieces stay there, and each
/// receiving tile's list of them is made by another counting sort and a
/// sort per tile (see [`Activity`]). The result does not depend on the
/// thread count.
pub(super) fn add_activity(
    phase: &Phase,
    out: &CoreOutput,
    latency: u64,
    relocatable: bool,
) -> Activity {
    let tiles = phase.tile_count as usize;
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
        std::iter::once(senders.iter().enumerate().map(|(i, &s)| (s, i as u32))),
    );
    // Per sending tile: its send pieces sorted by start, and the receive
    // pieces of its segments (with each receiving tile). A receive piece
    // needs the end of its source's send before it and the start of the one
    // after it, which the tile's sorted send pieces give; it is built here,
    // while the tile's segments, jobs and transfers are in cache, rather
    // than in a pass over the segments in time order, which reads them out
    // of order.
    let sent: Vec<Sent> = (0..tiles)
        .into_par_iter()
        .map(|tile| sent_by(tile, phase, out, &by_source, latency, relocatable))
        .collect();
    // Receive pieces grouped by receiving tile, as their keys
    // (`recv_key`), then sorted per receiving tile (a tile receives one
    // piece at a time, so starts differ), each tile in parallel.
    let mut by_dest =
        Grouped::new(
            tiles,
            sent.iter().enumerate().map(|(tile, s)| {
                // `tiles` is at most `MAX_TILES`.
                let tile = tile as u32;
                let arrivals =
                    s.arrival_tiles.iter().enumerate().map(move |(i, &d)| {
                        (d, recv_key(&s.made, tile, Received::Arrival(i as u32)))
                    });
                let receptions = s.reception_tiles.iter().enumerate().map(move |(i, &d)| {
                    (d, recv_key(&s.made, tile, Received::Reception(i as u32)))
                });
                arrivals.chain(receptions)
            }),
        );
    let mut lists: Vec<&mut [u128]> = Vec::with_capacity(tiles);
    let mut rest = by_dest.order.as_mut_slice();
    for t in 0..tiles {
        let (list, tail) = rest.split_at_mut(by_dest.offsets[t + 1] - by_dest.offsets[t]);
        lists.push(list);
        rest = tail;
    }
    lists.into_par_iter().for_each(|list| list.sort_unstable());
    let mut sends = Vec::with_capacity(tiles);
    let mut made = Vec::with_capacity(tiles);
    for s in sent {
        sends.push(s.sends);
        made.push(s.made);
    }
    Activity {
        sends,
        made,
        offsets: by_dest.offsets,
        received: by_dest.order,
    }
}

/// The activity of sending tile `tile`: its segments (grouped by
/// [`add_activity`]) made into send pieces and the receive pieces they
/// cause.
fn sent_by(
    tile: usize,
    phase: &Phase,
    out: &CoreOutput,
    by_source: &Grouped<u32>,
    latency: u64,
    relocatable: bool,
) -> Sent {
    let segments = &out.segments;
    // A segment, its job and its transfer are a chain of three
    // cache misses. The segments (with their jobs' places), then
    // the jobs (for their transfers' places), then the transfers
    // are read in passes of their own, so that the misses of
    // different segments overlap: on the seed-shaped phase each
    // pass made the activity measurably faster than reading the
    // whole chain in the building loop.
    let mine: Vec<(Segment, &Job)> = by_source
        .of(tile)
        .iter()
        .map(|&index| {
            let seg = segments[index as usize];
            (seg, &out.jobs[seg.job as usize])
        })
        .collect();
    let mine: Vec<(Segment, &Job, &Transfer)> = mine
        .into_iter()
        .map(|(seg, job)| (seg, job, &phase.transfers[job.origin as usize]))
        .collect();
    // The transfers' pass: whether each one's source is one run.
    let contiguous: Vec<bool> = mine
        .iter()
        .map(|(_, _, t)| t.source_addresses.len() == 1)
        .collect();
    let (mut pieces, receptions) = send_pieces(&mine, &contiguous, relocatable);
    pieces.sort_by_key(|(p, _)| p.start);
    receive_pieces(&mine, pieces, receptions, latency, relocatable)
}

/// The send pieces of a tile's segments (`mine`, with whether each one's
/// transfer has a contiguous source), each with the index of its segment,
/// unsorted, and how many receive pieces the segments make.
fn send_pieces(
    mine: &[(Segment, &Job, &Transfer)],
    contiguous: &[bool],
    relocatable: bool,
) -> (Vec<(SendPiece, u32)>, usize) {
    let mut pieces: Vec<(SendPiece, u32)> = Vec::with_capacity(mine.len());
    // Receive pieces the tile's segments make, so that their lists
    // are allocated once.
    let mut receptions = 0;
    for (index, &(seg, job, t)) in mine.iter().enumerate() {
        receptions += job.dests.len();
        let wide = job.paired.is_some();
        let per = if wide { 2 } else { 1 };
        let first_word = seg.offset * per;
        let words = seg.len * per;
        // Source runs: contiguous pieces of the segment's words.
        let mut i = 0;
        while i < words {
            let Some(address) = t.source_word_address(first_word + i) else {
                break;
            };
            let mut n = if contiguous[index] { words - i } else { per };
            // A gather's runs depend on its addresses; relocatable
            // rows send it word by word.
            while (!relocatable || contiguous[index])
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
                } else if !contiguous[index] {
                    scattered_address(job.origin, first_word + i)
                } else {
                    structural_address(job.origin, first_word + i)
                },
            };
            pieces.push((piece, index as u32));
            i += n;
        }
    }
    (pieces, receptions)
}

/// What a tile's sorted send `pieces` make: the receive pieces of its
/// segments (`mine`) with their receiving tiles; `receptions` sizes the
/// lists.
fn receive_pieces(
    mine: &[(Segment, &Job, &Transfer)],
    pieces: Vec<(SendPiece, u32)>,
    receptions: usize,
    latency: u64,
    relocatable: bool,
) -> Sent {
    // A segment's pieces are consecutive: the tile sends one
    // segment at a time.
    let mut arrival_tiles = Vec::with_capacity(mine.len());
    let mut reception_tiles = Vec::with_capacity(receptions.saturating_sub(mine.len()));
    let mut made = Made {
        arrivals: Vec::with_capacity(mine.len()),
        receptions: Vec::with_capacity(receptions.saturating_sub(mine.len())),
        relocatable,
    };
    let mut k = 0;
    while k < pieces.len() {
        let index = pieces[k].1;
        let mut last = k;
        while pieces.get(last + 1).is_some_and(|n| n.1 == index) {
            last += 1;
        }
        let source_quiet_from = k.checked_sub(1).map_or(NO_CYCLE, |q| {
            pieces[q].0.start + u64::from(pieces[q].0.items)
        });
        let source_next_send = pieces.get(last + 1).map_or(NO_CYCLE, |n| n.0.start);
        k = last + 1;
        let (seg, job, t) = mine[index as usize];
        // A job without destinations receives nothing.
        let Some((&first, rest)) = job.dests.split_first() else {
            continue;
        };
        let wide = job.paired.is_some();
        let first_word = seg.offset * if wide { 2 } else { 1 };
        // One arrival per segment at most, and segments are
        // numbered in u32 (`by_source`).
        let arrival = made.arrivals.len() as u32;
        let (d, address) = t.destinations[first as usize];
        arrival_tiles.push(d.as_u32());
        made.arrivals.push(Arrival {
            start: seg.start + latency,
            source_quiet_from,
            source_next_send,
            items: seg.len,
            origin: job.origin,
            first_word,
            byte_address: address + 4 * first_word,
            dest: first,
            wide,
        });
        for &dest in rest {
            let (d, address) = t.destinations[dest as usize];
            reception_tiles.push(d.as_u32());
            made.receptions.push(Reception {
                arrival,
                byte_address: address + 4 * first_word,
                dest,
            });
        }
    }
    Sent {
        sends: pieces.into_iter().map(|(p, _)| p).collect(),
        arrival_tiles,
        reception_tiles,
        made,
    }
}
