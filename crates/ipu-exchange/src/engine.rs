//! Replays decoded rows of all tiles into the word runs each tile receives.
//!
//! Shared by the checker and by [`replay`](crate::replay); it knows nothing
//! of the scheduler. It follows the semantics in [`crate::isa`]: a tile
//! listening to tile `s` in arrival cycle `c` writes whatever `s` sent in
//! cycle `c - latency` at its PIC; it writes only while its own row runs.
//! Structural faults (undecodable rows, lane and port conflicts of paired
//! items, listening to a tile that does not exist, PIC overflow, memory
//! element hazards) are collected as [`ExchangeCheckError`]s.

use ipu_layout::TileId;
use rayon::prelude::*;

use crate::check::ExchangeCheckError;
use crate::encode::EncodedRows;
use crate::fabric::Fabric;
use crate::model::ADDRESS_LIMIT;
use crate::timeline::{Timeline, Xpic, decode};

/// A send window of a tile: cycles `[start, end)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendWin {
    pub start: u64,
    pub end: u64,
    pub byte_address: u32,
    pub wide: bool,
}

/// Words a tile received without interruption from one source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    /// Receiving tile.
    pub dest: u32,
    /// Arrival cycle of the first item.
    pub arrival: u64,
    /// Items (each one or two words).
    pub items: u32,
    /// 64-bit items.
    pub wide: bool,
    /// Sending tile.
    pub source: u32,
    /// Byte address the first word was read from.
    pub src_addr: u32,
    /// Byte address the first word was written to.
    pub dst_addr: u32,
}

impl Run {
    pub fn words(&self) -> u64 {
        u64::from(self.items) * if self.wide { 2 } else { 1 }
    }
}

/// The replayed phase.
#[derive(Debug, Default)]
pub(crate) struct Replayed {
    /// Runs per receiving tile, in arrival order.
    pub runs: Vec<Vec<Run>>,
    /// Latest row end over all tiles.
    pub end: u64,
}

fn item_bytes(wide: bool) -> u64 {
    if wide { 8 } else { 4 }
}

/// Replays `rows` on `tile_count` tiles.
pub(crate) fn replay_rows(
    rows: &EncodedRows,
    fabric: &Fabric,
    tile_count: u32,
) -> (Replayed, Vec<ExchangeCheckError>) {
    let mut errors = Vec::new();
    let n = tile_count as usize;
    let decoded: Vec<Result<Timeline, ExchangeCheckError>> = (0..tile_count)
        .into_par_iter()
        .map(|t| {
            let tile = TileId::from_u32(t);
            decode(rows.row(tile)).map_err(|error| ExchangeCheckError::Decode { tile, error })
        })
        .collect();
    let mut timelines = Vec::with_capacity(n);
    for d in decoded {
        match d {
            Ok(t) => timelines.push(t),
            Err(e) => {
                errors.push(e);
                timelines.push(Timeline::default());
            }
        }
    }
    let sends: Vec<Vec<SendWin>> = timelines
        .par_iter()
        .map(|tl| {
            tl.windows
                .iter()
                .filter_map(|w| {
                    w.send.map(|s| SendWin {
                        start: w.start,
                        end: w.start + u64::from(w.cycles),
                        byte_address: s.byte_address,
                        wide: s.wide,
                    })
                })
                .collect()
        })
        .collect();
    // Paired sends borrow the partner's lane.
    for (t, list) in sends.iter().enumerate() {
        for w in list.iter().filter(|w| w.wide) {
            let tile = TileId::from_u32(t as u32);
            let partner = fabric.partner(tile).as_u32() as usize;
            match sends.get(partner) {
                None => errors.push(ExchangeCheckError::PartnerMissing {
                    tile,
                    partner: TileId::from_u32(partner as u32),
                }),
                Some(other) => {
                    if let Some(o) = first_overlap(other, w.start, w.end) {
                        errors.push(ExchangeCheckError::PartnerSendConflict {
                            tile,
                            partner: TileId::from_u32(partner as u32),
                            cycle: o,
                        });
                    }
                }
            }
        }
    }
    let latency = u64::from(fabric.latency_cycles());
    let per_tile: Vec<(Vec<Run>, Vec<ExchangeCheckError>)> = timelines
        .par_iter()
        .enumerate()
        .map(|(d, tl)| receive(d as u32, tl, &sends, latency))
        .collect();
    let mut runs = Vec::with_capacity(n);
    for (r, e) in per_tile {
        runs.push(r);
        errors.extend(e);
    }
    // Paired items occupy the partner's receive port.
    for (d, list) in runs.iter().enumerate() {
        for r in list.iter().filter(|r| r.wide) {
            let tile = TileId::from_u32(d as u32);
            let partner = fabric.partner(tile).as_u32() as usize;
            match runs.get(partner) {
                None => errors.push(ExchangeCheckError::PartnerMissing {
                    tile,
                    partner: TileId::from_u32(partner as u32),
                }),
                Some(other) => {
                    let end = r.arrival + u64::from(r.items);
                    let i = other.partition_point(|o| o.arrival + u64::from(o.items) <= r.arrival);
                    if let Some(o) = other.get(i).filter(|o| o.arrival < end) {
                        errors.push(ExchangeCheckError::PartnerReceiveConflict {
                            tile,
                            partner: TileId::from_u32(partner as u32),
                            cycle: o.arrival.max(r.arrival),
                        });
                    }
                }
            }
        }
    }
    if fabric.memory_element_hazards() {
        for (t, list) in runs.iter().enumerate() {
            element_hazards(t as u32, list, &sends[t], fabric, &mut errors);
        }
    }
    let end = timelines.iter().map(Timeline::end).max().unwrap_or(0);
    (Replayed { runs, end }, errors)
}

/// The first cycle in `[start, end)` covered by a window of `list`.
fn first_overlap(list: &[SendWin], start: u64, end: u64) -> Option<u64> {
    let i = list.partition_point(|w| w.end <= start);
    list.get(i)
        .filter(|w| w.start < end)
        .map(|w| w.start.max(start))
}

/// The runs tile `d` receives.
fn receive(
    d: u32,
    tl: &Timeline,
    sends: &[Vec<SendWin>],
    latency: u64,
) -> (Vec<Run>, Vec<ExchangeCheckError>) {
    let tile = TileId::from_u32(d);
    let mut runs = Vec::new();
    let mut errors = Vec::new();
    let mut xpic = Xpic::Disconnected;
    let mut pic: u64 = 0;
    for w in &tl.windows {
        if let Some(x) = w.set_xpic {
            xpic = x;
        }
        if let Some(p) = w.set_pic {
            pic = u64::from(p);
        }
        let Xpic::Listen(source) = xpic else {
            continue;
        };
        let Some(list) = sends.get(source.as_u32() as usize) else {
            errors.push(ExchangeCheckError::UnknownSource {
                tile,
                sender: source,
                cycle: w.start,
            });
            continue;
        };
        let end = w.start + u64::from(w.cycles);
        if end <= latency {
            continue;
        }
        // Send cycles whose words arrive in this window.
        let from = w.start.saturating_sub(latency);
        let to = end - latency;
        let mut i = list.partition_point(|s| s.end <= from);
        while let Some(s) = list.get(i) {
            if s.start >= to {
                break;
            }
            let a = s.start.max(from);
            let b = s.end.min(to);
            let items = b - a;
            let src = u64::from(s.byte_address) + (a - s.start) * item_bytes(s.wide);
            let bytes = items * item_bytes(s.wide);
            if pic + bytes > ADDRESS_LIMIT {
                errors.push(ExchangeCheckError::PointerOverflow {
                    tile,
                    cycle: a + latency,
                });
                break;
            }
            runs.push(Run {
                dest: d,
                arrival: a + latency,
                items: items as u32,
                wide: s.wide,
                source: source.as_u32(),
                src_addr: src as u32,
                dst_addr: pic as u32,
            });
            pic += bytes;
            i += 1;
        }
    }
    (runs, errors)
}

/// Reports cycles where tile `t` reads and writes one memory element.
fn element_hazards(
    t: u32,
    runs: &[Run],
    sends: &[SendWin],
    fabric: &Fabric,
    errors: &mut Vec<ExchangeCheckError>,
) {
    for r in runs {
        let end = r.arrival + u64::from(r.items);
        let mut i = sends.partition_point(|s| s.end <= r.arrival);
        while let Some(s) = sends.get(i) {
            if s.start >= end {
                break;
            }
            for c in s.start.max(r.arrival)..s.end.min(end) {
                let read = u64::from(s.byte_address) + (c - s.start) * item_bytes(s.wide);
                let write = u64::from(r.dst_addr) + (c - r.arrival) * item_bytes(r.wide);
                let (Ok(read), Ok(write)) = (u32::try_from(read), u32::try_from(write)) else {
                    continue;
                };
                let er = fabric.memory_element(read);
                if er.is_some() && er == fabric.memory_element(write) {
                    errors.push(ExchangeCheckError::ElementHazard {
                        tile: TileId::from_u32(t),
                        cycle: c,
                        read_address: read,
                        write_address: write,
                    });
                    break;
                }
            }
            i += 1;
        }
    }
}
