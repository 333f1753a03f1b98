//! Replays decoded rows of all tiles into the word runs each tile receives.
//!
//! Shared by the checker and by [`replay`](crate::replay); it knows nothing
//! of the scheduler. The checker replays one receiving tile at a time
//! ([`decode_rows`], then [`Receiver::receive`] per tile), so a phase's
//! runs never exist all at once; `replay` takes them all
//! ([`replay_rows`]). It follows the semantics in [`crate::isa`]: a tile
//! listening to tile `s` in arrival cycle `c` writes whatever `s` sent in
//! cycle `c - latency` at its PIC; it writes only while its own row runs.
//! Structural faults (undecodable rows, lane and port conflicts of paired
//! items, listening to a tile that does not exist, PIC overflow, memory
//! element hazards) are collected as [`ExchangeCheckError`]s.

use ipu_layout::TileId;
use rayon::prelude::*;

use crate::encode::EncodedRows;
use crate::error::ExchangeCheckError;
use crate::fabric::Fabric;
use crate::isa::Xpic;
use crate::isa::{DecodeError, MAX_WORD_ADDRESS};
use crate::model::ADDRESS_LIMIT;
use crate::timeline::windows;

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
    /// Words per item: two for 64-bit items.
    pub fn item_words(&self) -> u32 {
        if self.wide { 2 } else { 1 }
    }

    pub fn words(&self) -> u64 {
        u64::from(self.items) * u64::from(self.item_words())
    }
}

/// The arrival cycles of the 64-bit items of `runs`, a run at a time.
pub(crate) fn wide_cycles(runs: &[Run]) -> Vec<(u64, u64)> {
    runs.iter()
        .filter(|r| r.wide)
        .map(|r| (r.arrival, r.arrival + u64::from(r.items)))
        .collect()
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

/// What receiving reads of one window of a tile's row: when it runs and
/// the receive-state updates at its start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StateWin {
    start: u64,
    set_xpic: Option<Xpic>,
    cycles: u32,
    /// PIC update as a byte address, or [`NO_PIC`].
    set_pic: u32,
}

/// No PIC update: no PIC value's byte address reaches it.
const NO_PIC: u32 = u32::MAX;
const _: () = assert!((MAX_WORD_ADDRESS as u64) * 4 < NO_PIC as u64);

// A phase's windows are kept for all its tiles at once (millions on a
// large phase): 24 bytes each, not the 40 of a decoded `Window`.
const _: () = assert!(std::mem::size_of::<StateWin>() == 24);

/// Every tile's send windows and receive-state windows.
pub(crate) struct Decoded {
    /// Per tile, the windows in which it listens or changes its receive
    /// state, in time order (none if its row did not decode: its fault is
    /// already reported). A window that does neither writes nothing.
    pub states: Vec<Vec<StateWin>>,
    pub sends: Vec<Vec<SendWin>>,
    /// The latest end of a row that decoded.
    pub end: u64,
}

impl Decoded {
    /// Whether any tile sends 64-bit items (only then can a tile receive
    /// them).
    pub fn any_wide(&self) -> bool {
        self.sends.iter().flatten().any(|w| w.wide)
    }
}

/// One tile's decoded row.
type TileWindows = (Vec<StateWin>, Vec<SendWin>, u64);

/// Decodes a row into its receive-state windows, its send windows and its
/// end.
fn decode_tile(row: &[u32]) -> Result<TileWindows, DecodeError> {
    let mut states = Vec::new();
    let mut sends = Vec::new();
    let mut end = 0;
    let mut listening = false;
    for w in windows(row) {
        let w = w?;
        end = w.start + u64::from(w.cycles);
        if let Some(x) = w.set_xpic {
            listening = matches!(x, Xpic::Listen(_));
        }
        if listening || w.set_xpic.is_some() || w.set_pic.is_some() {
            states.push(StateWin {
                start: w.start,
                set_xpic: w.set_xpic,
                cycles: w.cycles,
                set_pic: w.set_pic.unwrap_or(NO_PIC),
            });
        }
        if let Some(s) = w.send {
            sends.push(SendWin {
                start: w.start,
                end,
                byte_address: s.byte_address,
                wide: s.wide,
            });
        }
    }
    Ok((states, sends, end))
}

/// Decodes every row (in parallel, results in tile order) and checks that
/// no paired send borrows a lane its partner uses; the errors are the
/// undecodable rows, then the send conflicts, each in tile order.
pub(crate) fn decode_rows(
    rows: &EncodedRows,
    fabric: &Fabric,
    tile_count: u32,
    errors: &mut Vec<ExchangeCheckError>,
) -> Decoded {
    let n = tile_count as usize;
    let decoded: Vec<Result<TileWindows, ExchangeCheckError>> = (0..tile_count)
        .into_par_iter()
        .map(|t| {
            let tile = TileId::from_u32(t);
            decode_tile(rows.row(tile)).map_err(|error| ExchangeCheckError::Decode { tile, error })
        })
        .collect();
    let mut states = Vec::with_capacity(n);
    let mut sends = Vec::with_capacity(n);
    let mut end = 0;
    for d in decoded {
        match d {
            Ok((s, list, e)) => {
                states.push(s);
                sends.push(list);
                end = end.max(e);
            }
            Err(e) => {
                errors.push(e);
                states.push(Vec::new());
                sends.push(Vec::new());
            }
        }
    }
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
    Decoded { states, sends, end }
}

/// Replays `rows` on `tile_count` tiles.
pub(crate) fn replay_rows(
    rows: &EncodedRows,
    fabric: &Fabric,
    tile_count: u32,
) -> (Replayed, Vec<ExchangeCheckError>) {
    let mut errors = Vec::new();
    let n = tile_count as usize;
    let decoded = decode_rows(rows, fabric, tile_count, &mut errors);
    let latency = u64::from(fabric.latency_cycles());
    let per_tile: Vec<(Vec<Run>, Vec<ExchangeCheckError>)> = (0..tile_count)
        .into_par_iter()
        .map_init(
            || Receiver::new(n, latency, false),
            |receiver, d| {
                let mut runs = Vec::new();
                let mut errors = Vec::new();
                let states = &decoded.states[d as usize];
                receiver.receive(d, states, &decoded.sends, &mut runs, &mut errors);
                (runs, errors)
            },
        )
        .collect();
    let mut runs = Vec::with_capacity(n);
    for (r, e) in per_tile {
        runs.push(r);
        errors.extend(e);
    }
    // Paired items occupy the partner's receive port.
    let any_wide = runs.iter().flatten().any(|r| r.wide);
    let busy: Vec<Vec<(u64, u64)>> = if any_wide {
        runs.iter().map(|list| busy_cycles(list)).collect()
    } else {
        Vec::new()
    };
    for (d, list) in runs.iter().enumerate().filter(|_| any_wide) {
        partner_receive_conflicts(d as u32, &wide_cycles(list), &busy, fabric, &mut errors);
    }
    if fabric.memory_element_hazards() {
        for (t, list) in runs.iter().enumerate() {
            element_hazards(t as u32, list, &decoded.sends[t], fabric, &mut errors);
        }
    }
    (
        Replayed {
            runs,
            end: decoded.end,
        },
        errors,
    )
}

/// The arrival cycles of `runs` (in arrival order) as disjoint intervals
/// in order, adjacent runs joined.
pub(crate) fn busy_cycles(runs: &[Run]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for r in runs {
        let end = r.arrival + u64::from(r.items);
        match out.last_mut() {
            Some(last) if last.1 == r.arrival => last.1 = end,
            _ => out.push((r.arrival, end)),
        }
    }
    out
}

/// Reports each interval of `wide` (cycles in which tile `d` receives
/// 64-bit items) during which its partner receives too, at the first such
/// cycle; `busy` holds every tile's receiving cycles ([`busy_cycles`]).
pub(crate) fn partner_receive_conflicts(
    d: u32,
    wide: &[(u64, u64)],
    busy: &[Vec<(u64, u64)>],
    fabric: &Fabric,
    errors: &mut Vec<ExchangeCheckError>,
) {
    let tile = TileId::from_u32(d);
    for &(start, end) in wide {
        let partner = fabric.partner(tile).as_u32() as usize;
        match busy.get(partner) {
            None => errors.push(ExchangeCheckError::PartnerMissing {
                tile,
                partner: TileId::from_u32(partner as u32),
            }),
            Some(other) => {
                let i = other.partition_point(|o| o.1 <= start);
                if let Some(o) = other.get(i).filter(|o| o.0 < end) {
                    errors.push(ExchangeCheckError::PartnerReceiveConflict {
                        tile,
                        partner: TileId::from_u32(partner as u32),
                        cycle: o.0.max(start),
                    });
                }
            }
        }
    }
}

/// The first cycle in `[start, end)` covered by a window of `list`.
fn first_overlap(list: &[SendWin], start: u64, end: u64) -> Option<u64> {
    let i = list.partition_point(|w| w.end <= start);
    list.get(i)
        .filter(|w| w.start < end)
        .map(|w| w.start.max(start))
}

/// Replays what tiles receive, one tile at a time ([`Receiver::receive`]),
/// with the scratch that needs: per source tile, a position in its send
/// windows. Each worker keeps one across the tiles it replays (a dense
/// table reset where it was written, not a map hashed at every window).
pub(crate) struct Receiver {
    latency: u64,
    join: bool,
    at: Vec<usize>,
    written: Vec<u32>,
}

impl Receiver {
    /// A receiver for phases on `tiles` tiles with `latency`; with `join`,
    /// a run that continues the previous one extends it (see
    /// [`Receiver::receive`]).
    pub(crate) fn new(tiles: usize, latency: u64, join: bool) -> Receiver {
        Receiver {
            latency,
            join,
            at: vec![0; tiles],
            written: Vec::new(),
        }
    }

    fn clear(&mut self) {
        for &s in &self.written {
            if let Some(at) = self.at.get_mut(s as usize) {
                *at = 0;
            }
        }
        self.written.clear();
    }

    fn cursor(&self, source: u32) -> usize {
        self.at.get(source as usize).copied().unwrap_or(0)
    }

    fn set_cursor(&mut self, source: u32, i: usize) {
        if let Some(at) = self.at.get_mut(source as usize) {
            if *at == 0 {
                self.written.push(source);
            }
            *at = i;
        }
    }

    /// Appends the runs tile `d` receives to `runs` (in arrival order) and
    /// its faults to `errors`. With `join`, a run that continues the
    /// previous one (same source and width, next cycle, next source and
    /// destination words) extends it: the words and cycles are the same,
    /// in fewer runs.
    pub(crate) fn receive(
        &mut self,
        d: u32,
        states: &[StateWin],
        sends: &[Vec<SendWin>],
        runs: &mut Vec<Run>,
        errors: &mut Vec<ExchangeCheckError>,
    ) {
        let (latency, join) = (self.latency, self.join);
        let tile = TileId::from_u32(d);
        let mut xpic = Xpic::Disconnected;
        let mut pic: u64 = 0;
        // Per source listened to so far, the first of its send windows
        // that could still arrive: windows come in time order, so a
        // source's search only moves forward from where it last stopped.
        self.clear();
        for w in states {
            if let Some(x) = w.set_xpic {
                xpic = x;
            }
            if w.set_pic != NO_PIC {
                pic = u64::from(w.set_pic);
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
            let mut i = first_arriving(list, self.cursor(source.as_u32()), from);
            self.set_cursor(source.as_u32(), i);
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
                let run = Run {
                    dest: d,
                    arrival: a + latency,
                    items: items as u32,
                    wide: s.wide,
                    source: source.as_u32(),
                    src_addr: src as u32,
                    dst_addr: pic as u32,
                };
                match runs.last_mut() {
                    Some(last) if join && continues(last, &run) => last.items += run.items,
                    _ => runs.push(run),
                }
                pic += bytes;
                i += 1;
            }
        }
    }
}

/// The first window of `list` (sorted by time) that ends after `from`,
/// known to be at `lo` or later: a galloping search from `lo`, so a
/// search that moves little costs little.
fn first_arriving(list: &[SendWin], lo: usize, from: u64) -> usize {
    let before = |i: usize| list.get(i).is_some_and(|s| s.end <= from);
    let mut lo = lo;
    let mut step = 1;
    // Invariant: every window before `lo` ends by `from`.
    while before(lo) {
        let probe = lo.saturating_add(step);
        if probe >= list.len() || !before(probe) {
            let end = probe.min(list.len());
            return lo + 1 + list[lo + 1..end].partition_point(|s| s.end <= from);
        }
        lo = probe + 1;
        step *= 2;
    }
    lo
}

/// Whether `next` carries on where `run` stops: same source and width,
/// the next arrival cycle, the next source and destination words.
fn continues(run: &Run, next: &Run) -> bool {
    let bytes = run.words() * 4;
    run.source == next.source
        && run.wide == next.wide
        && run.arrival + u64::from(run.items) == next.arrival
        && u64::from(run.src_addr) + bytes == u64::from(next.src_addr)
        && u64::from(run.dst_addr) + bytes == u64::from(next.dst_addr)
        && run.items.checked_add(next.items).is_some()
}

/// Reports cycles where tile `t` reads and writes one memory element.
pub(crate) fn element_hazards(
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

#[cfg(test)]
mod tests {
    use ipu_layout::TileId;

    use super::{NO_PIC, SendWin, decode_tile, first_arriving};
    use crate::isa::Instr;
    use crate::isa::Xpic;
    use crate::timeline::decode;

    #[test]
    fn a_tile_keeps_the_windows_it_listens_in_or_changes_state_in() {
        let listen = Xpic::Listen(TileId::from_u32(2));
        let program = [
            Instr::DelayPic {
                cycles: 3,
                sel: 0,
                value: 10,
            },
            // Sends while disconnected: a send window only.
            Instr::Send {
                items: 4,
                word_address: 100,
                sctl: 1,
            },
            Instr::DelayXpic {
                cycles: 2,
                xpic: listen,
            },
            Instr::Delay { cycles: 5 },
            Instr::DelayXpic {
                cycles: 1,
                xpic: Xpic::Disconnected,
            },
            // Idle and disconnected: nothing to keep.
            Instr::Delay { cycles: 4 },
        ];
        let mut row = Vec::new();
        for i in &program {
            i.encode(&mut row).expect("encodes");
        }
        let (states, sends, end) = decode_tile(&row).expect("decodes");
        let kept: Vec<(u64, u32, Option<Xpic>, u32)> = states
            .iter()
            .map(|w| (w.start, w.cycles, w.set_xpic, w.set_pic))
            .collect();
        assert_eq!(
            kept,
            [
                (0, 3, None, 40),
                (7, 2, Some(listen), NO_PIC),
                (9, 5, None, NO_PIC),
                (14, 1, Some(Xpic::Disconnected), NO_PIC),
            ]
        );
        assert_eq!(sends.len(), 1);
        assert_eq!(
            (sends[0].start, sends[0].end, sends[0].byte_address),
            (3, 7, 400)
        );
        assert_eq!(end, decode(&row).expect("decodes").end());
        assert_eq!(end, 19);
    }

    #[test]
    fn the_galloping_search_finds_what_a_binary_search_finds() {
        // Windows [3k, 3k + 2) for k < 40: ends 2, 5, 8, ...
        let list: Vec<SendWin> = (0..40u64)
            .map(|k| SendWin {
                start: 3 * k,
                end: 3 * k + 2,
                byte_address: 0,
                wide: false,
            })
            .collect();
        for from in 0..130 {
            let expected = list.partition_point(|s| s.end <= from);
            for lo in 0..=expected {
                assert_eq!(
                    first_arriving(&list, lo, from),
                    expected,
                    "lo {lo} from {from}"
                );
            }
        }
        assert_eq!(first_arriving(&[], 0, 5), 0);
    }
}
