//! Per-tile row encoding: from a tile's send and receive pieces to IPU21
//! supervisor instruction words, and the shared-row container.
//!
//! A tile's row is a sequence of windows between consecutive *boundaries*:
//! the start and end of each send piece, and each cycle where the receive
//! state must change (a new source or pointer when a receive piece begins,
//! a disconnect when it ends and the source keeps sending to others). Every
//! window becomes one instruction (more when a field limit forces chunks),
//! chosen to carry the window's receive update and send (see
//! [`crate::isa`] for the semantics).

use std::collections::HashMap;

use ipu_layout::TileId;
use ipu_layout::hash::FoldBuildHasher;
use rayon::prelude::*;
use smallvec::SmallVec;

use crate::isa::{
    EncodeError, Instr, MAX_DELAY_CYCLES, MAX_DELAYPIC_CYCLES, MAX_DELAYXPIC_CYCLES,
    MAX_SEND_ITEMS, MAX_SENDOFF_ITEMS, MAX_SENDOFF_OFFSET, SCTL_BOTH, SCTL_WIDE,
};
use crate::relocate::{Relocation, WordOf, structural_address};
use crate::timeline::Xpic;

/// Items a tile sends without interruption from contiguous memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SendPiece {
    pub start: u64,
    pub items: u32,
    pub wide: bool,
    pub byte_address: u32,
    /// The address instruction choices are made on: `byte_address`, or a
    /// structural one when rows must not depend on addresses.
    pub vaddr: u128,
}

/// Items a tile receives without interruption from one source into
/// contiguous memory; `start` is the arrival cycle of the first item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecvPiece {
    pub start: u64,
    pub items: u32,
    pub wide: bool,
    pub source: u32,
    pub byte_address: u32,
    /// As [`SendPiece::vaddr`].
    pub vaddr: u128,
    /// Which of its transfer's destinations the piece is (where a
    /// relocation finds the tile's address of the transfer).
    pub dest: u32,
    /// Send cycle after the source's previous send (before this piece's),
    /// or [`NO_CYCLE`] if it did not send before.
    pub source_quiet_from: u64,
    /// Send cycle of the source's next send after this piece's, or
    /// [`NO_CYCLE`].
    pub source_next_send: u64,
}

/// A [`RecvPiece`] or [`Arrival`] cycle that does not exist: arrivals are
/// kept for every segment of a phase, and two `Option<u64>` fields would
/// make each 16 bytes larger.
pub(crate) const NO_CYCLE: u64 = u64::MAX;

const _: () = assert!(std::mem::size_of::<RecvPiece>() == 64);

impl RecvPiece {
    /// [`RecvPiece::source_quiet_from`], if the source sent before.
    fn quiet_from(&self) -> Option<u64> {
        Some(self.source_quiet_from).filter(|&c| c != NO_CYCLE)
    }

    /// [`RecvPiece::source_next_send`], if the source sends again.
    fn next_send(&self) -> Option<u64> {
        Some(self.source_next_send).filter(|&c| c != NO_CYCLE)
    }
}

/// What the receive pieces of one segment share, whatever their
/// receiving tile, with its first destination's piece: a unicast, most
/// of a large unicast phase, is one arrival and nothing more. Its source
/// is the tile whose [`Made`] holds it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival {
    pub start: u64,
    pub source_quiet_from: u64,
    pub source_next_send: u64,
    pub items: u32,
    /// The transfer and its first word: with relocatable rows, every
    /// destination's piece has their structural address (see
    /// [`SendPiece::vaddr`]); otherwise a piece's is its own
    /// `byte_address`.
    pub origin: u32,
    pub first_word: u32,
    /// The first destination's piece: where it is written, and which of
    /// the transfer's destinations it is.
    pub byte_address: u32,
    pub dest: u32,
    pub wide: bool,
}

/// The piece of an [`Arrival`] at one of its other destinations.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reception {
    /// Index of its arrival in the making tile's list.
    pub arrival: u32,
    pub byte_address: u32,
    /// As [`RecvPiece::dest`].
    pub dest: u32,
}

/// The receive pieces one tile's segments make: per segment an arrival,
/// holding its first destination's piece, and a reception of 12 bytes per
/// further destination, not a piece of 64 bytes per destination (SigLIP's
/// largest phases receive 800,000 pieces from about 100,000 transfers;
/// the seed-shaped phase's 586,368 transfers are mostly unicasts, each of
/// which a separate reception gave a second record to read).
#[derive(Debug, Default)]
pub(crate) struct Made {
    pub arrivals: Vec<Arrival>,
    pub receptions: Vec<Reception>,
    /// Whether the rows are relocatable (see [`Arrival::origin`]).
    pub relocatable: bool,
}

// Kept for every segment of a phase: 48 bytes, where a whole piece
// takes 64.
const _: () = assert!(std::mem::size_of::<Arrival>() == 48);

/// One receive piece of a [`Made`]: its arrival's own, or a further
/// reception.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Received {
    Arrival(u32),
    Reception(u32),
}

impl Made {
    /// The start of piece `which`, 0 if there is none.
    fn start(&self, which: Received) -> u64 {
        let arrival = match which {
            Received::Arrival(a) => Some(a),
            Received::Reception(r) => self.receptions.get(r as usize).map(|r| r.arrival),
        };
        arrival
            .and_then(|a| self.arrivals.get(a as usize))
            .map_or(0, |a| a.start)
    }

    /// Piece `which` as a whole piece; `source` is the making tile.
    fn piece(&self, source: u32, which: Received) -> RecvPiece {
        let (a, byte_address, dest) = match which {
            Received::Arrival(a) => {
                let a = self.arrivals[a as usize];
                (a, a.byte_address, a.dest)
            }
            Received::Reception(r) => {
                let r = self.receptions[r as usize];
                (self.arrivals[r.arrival as usize], r.byte_address, r.dest)
            }
        };
        RecvPiece {
            start: a.start,
            items: a.items,
            wide: a.wide,
            source,
            byte_address,
            vaddr: if self.relocatable {
                structural_address(a.origin, a.first_word)
            } else {
                u128::from(byte_address)
            },
            dest,
            source_quiet_from: a.source_quiet_from,
            source_next_send: a.source_next_send,
        }
    }
}

/// A receive piece's key at its receiving tile: (start, making tile,
/// which piece there) packed into one integer, which sorts a receiving
/// tile's pieces by start (a tile receives one piece at a time, so starts
/// differ). It is made when the pieces are grouped, not kept with them:
/// 16 bytes more per piece, millions on a large phase.
pub(crate) fn recv_key(made: &Made, tile: u32, which: Received) -> u128 {
    let (reception, index) = match which {
        Received::Arrival(a) => (0, a),
        Received::Reception(r) => (1, r),
    };
    (u128::from(made.start(which)) << 64)
        | (u128::from(tile) << 33)
        | (reception << 32)
        | u128::from(index)
}

/// The making tile and piece of a [`recv_key`].
fn key_piece(key: u128) -> (u32, Received) {
    let tile = (key as u64 >> 33) as u32;
    let index = key as u32;
    let which = if (key >> 32) & 1 == 0 {
        Received::Arrival(index)
    } else {
        Received::Reception(index)
    };
    (tile, which)
}

/// Everything every tile does in a phase: per tile, its send pieces and
/// its receive pieces, each sorted by start.
///
/// A receive piece is stored once, in the lists of the tile whose segment
/// made it (where it was built, see `schedule::activity`; in its
/// segment's [`Arrival`] or as a [`Reception`] of it), and each receiving
/// tile lists its own as [`recv_key`]s; a tile's pieces are gathered only
/// while the tile is encoded. A per-receiver copy of every piece, made for
/// all tiles at once, held every piece twice: the largest part of a
/// build's peak memory.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    /// Per tile, its send pieces.
    pub sends: Vec<Vec<SendPiece>>,
    /// Per tile, the receive pieces its segments make.
    pub made: Vec<Made>,
    /// Tile `t`'s receive pieces are `received[offsets[t]..offsets[t + 1]]`.
    pub offsets: Vec<usize>,
    /// Per receiving tile, the [`recv_key`]s of its pieces.
    pub received: Vec<u128>,
}

impl Activity {
    /// The number of tiles.
    pub fn tiles(&self) -> usize {
        self.sends.len()
    }

    /// Tile `tile`'s receive pieces, in start order.
    pub fn recvs(&self, tile: usize) -> Recvs<'_> {
        let keys = match (self.offsets.get(tile), self.offsets.get(tile + 1)) {
            (Some(&a), Some(&b)) => &self.received[a..b],
            _ => &[],
        };
        Recvs {
            keys,
            made: &self.made,
        }
    }
}

/// One tile's receive pieces, in start order (see [`Activity`]).
#[derive(Clone, Copy)]
pub(crate) struct Recvs<'a> {
    keys: &'a [u128],
    made: &'a [Made],
}

impl Recvs<'_> {
    /// The pieces, in start order. Every key names a piece of `made`
    /// (`schedule::activity` makes them together).
    pub fn gather(self) -> Vec<RecvPiece> {
        let mut out = Vec::with_capacity(self.keys.len());
        for &key in self.keys {
            let (tile, which) = key_piece(key);
            out.push(self.made[tile as usize].piece(tile, which));
        }
        out
    }
}

fn item_bytes(wide: bool) -> u32 {
    if wide { 8 } else { 4 }
}

/// A PIC value: the byte address the next item received is written to,
/// with what a relocation needs to compute it for other addresses — the
/// structural address (see [`SendPiece::vaddr`]; 0 before any piece, an
/// address that no relocation moves) and the piece's destination index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pic {
    pub real: u32,
    pub vaddr: u128,
    pub dest: u32,
}

/// A receive-state change at a cycle.
#[derive(Clone, Copy, Debug)]
struct RecvEvent {
    at: u64,
    xpic: Option<Xpic>,
    pic: Option<Pic>,
}

/// An emitted instruction with the state needed to re-encode it.
#[derive(Clone, Copy, Debug)]
struct Emitted {
    instr: Instr,
    /// SP before the instruction.
    sp_before: u32,
    /// The choice-making (structural) SP before it, in words.
    vsp_before: u128,
    /// The structural word address of its first item.
    vword: u128,
    /// XPIC after the instruction's update.
    xpic: Xpic,
    /// PIC after the instruction's update, at its first cycle.
    pic: Pic,
}

/// Emits a row's instructions, encoded as they come: only the last one is
/// held back, since [`Emitter::align`] may rewrite it (rows run to
/// thousands of instructions, and a list of them cost more memory traffic
/// than encoding).
struct Emitter {
    /// The words of every instruction before `last`.
    words: Vec<u32>,
    /// With relocations: the address fields of those instructions.
    relocations: Option<Vec<Relocation>>,
    /// The last instruction, not encoded yet.
    last: Option<Emitted>,
    sp: u32,
    /// SP in the address space choices are made in (see
    /// [`SendPiece::vaddr`]); equal to `sp` unless rows are relocatable.
    vsp: u128,
}

impl Emitter {
    fn sp_after(instr: &Instr, sp: u32) -> u32 {
        let per = |sctl: u32| if sctl & SCTL_WIDE != 0 { 2 } else { 1 };
        match *instr {
            Instr::Delay { .. } | Instr::DelayPic { .. } | Instr::DelayXpic { .. } => sp,
            Instr::Send {
                items,
                word_address,
                sctl,
            }
            | Instr::SendPicP {
                items,
                word_address,
                sctl,
                ..
            } => word_address + items * per(sctl),
            Instr::SendOff {
                items,
                offset,
                sctl,
            } => sp + offset + items * per(sctl),
            Instr::SendPic { items, .. } => sp + items,
        }
    }

    /// Words emitted, the held-back instruction's included.
    fn word_count(&self) -> usize {
        self.words.len() + self.last.map_or(0, |e| e.instr.words())
    }

    /// Encodes `e` after the words emitted so far, listing its address
    /// fields when relocations are kept.
    fn encode(&mut self, e: Emitted) -> Result<(), EncodeError> {
        if let Some(relocations) = &mut self.relocations {
            let at = self.words.len() as u32;
            // The fields that hold absolute addresses: a send's word address
            // (a `sendpicp` without a send names word 0) and the PIC value.
            let fields = match e.instr {
                Instr::Send { .. } => Some((e.vword, Pic::default())),
                Instr::SendPicP { sctl, .. } => Some((if sctl != 0 { e.vword } else { 0 }, e.pic)),
                Instr::SendPic { .. } | Instr::DelayPic { .. } => Some((0, e.pic)),
                Instr::Delay { .. } | Instr::DelayXpic { .. } | Instr::SendOff { .. } => None,
            };
            if let Some((send, pic)) = fields
                && (send != 0 || pic.vaddr != 0)
            {
                // Relocatable rows make every address structural (or 0).
                let word_of =
                    |vaddr: u128| WordOf::of(vaddr).ok_or(EncodeError::Unrelocatable { index: at });
                relocations.push(Relocation {
                    at,
                    send: word_of(send * 4)?,
                    pic: word_of(pic.vaddr)?,
                    pic_dest: pic.dest,
                });
            }
        }
        e.instr.encode(&mut self.words)
    }

    /// Encodes the held-back instruction; the row's words and relocations.
    fn finish(mut self) -> Result<(Vec<u32>, Vec<Relocation>), EncodeError> {
        if let Some(e) = self.last.take() {
            self.encode(e)?;
        }
        Ok((self.words, self.relocations.unwrap_or_default()))
    }

    /// Appends `instr`; `vword` is the structural word address of its
    /// first item for the kinds that name an address (`send`, `sendpicp`).
    fn push(&mut self, instr: Instr, vword: u128, xpic: Xpic, pic: Pic) -> Result<(), EncodeError> {
        if let Some(e) = self.last.take() {
            self.encode(e)?;
        }
        let sp_before = self.sp;
        let vsp_before = self.vsp;
        self.sp = Emitter::sp_after(&instr, self.sp);
        let per = |sctl: u32| if sctl & SCTL_WIDE != 0 { 2 } else { 1 };
        let (vword, vsp) = match instr {
            Instr::Delay { .. } | Instr::DelayPic { .. } | Instr::DelayXpic { .. } => {
                (vsp_before, vsp_before)
            }
            Instr::Send { items, sctl, .. } | Instr::SendPicP { items, sctl, .. } => {
                (vword, vword + u128::from(items * per(sctl)))
            }
            Instr::SendOff {
                items,
                offset,
                sctl,
            } => {
                let first = vsp_before + u128::from(offset);
                (first, first + u128::from(items * per(sctl)))
            }
            Instr::SendPic { items, .. } => (vsp_before, vsp_before + u128::from(items)),
        };
        self.vsp = vsp;
        self.last = Some(Emitted {
            instr,
            sp_before,
            vsp_before,
            vword,
            xpic,
            pic,
        });
        Ok(())
    }

    /// Makes the next word index even, so that a `sendpicp` can follow.
    fn align(&mut self) -> Result<(), EncodeError> {
        if self.word_count() % 2 == 0 {
            return Ok(());
        }
        // An odd count means the last instruction is one word long and sits
        // at an even index (a sendpicp would keep the count even).
        let Some(last) = self.last.take() else {
            return Ok(());
        };
        self.sp = last.sp_before;
        self.vsp = last.vsp_before;
        let cycles = last.instr.cycles();
        if cycles >= 2 {
            // Split it: the same instruction one cycle shorter, then one
            // cycle that only continues what it did.
            let (head, tail) = match last.instr {
                Instr::Delay { .. } => (
                    Instr::Delay { cycles: cycles - 1 },
                    Instr::Delay { cycles: 1 },
                ),
                Instr::DelayPic { sel, value, .. } => (
                    Instr::DelayPic {
                        cycles: cycles - 1,
                        sel,
                        value,
                    },
                    Instr::Delay { cycles: 1 },
                ),
                Instr::DelayXpic { xpic, .. } => (
                    Instr::DelayXpic {
                        cycles: cycles - 1,
                        xpic,
                    },
                    Instr::Delay { cycles: 1 },
                ),
                Instr::Send {
                    word_address, sctl, ..
                } => (
                    Instr::Send {
                        items: cycles - 1,
                        word_address,
                        sctl,
                    },
                    Instr::SendOff {
                        items: 1,
                        offset: 0,
                        sctl,
                    },
                ),
                Instr::SendOff { offset, sctl, .. } => (
                    Instr::SendOff {
                        items: cycles - 1,
                        offset,
                        sctl,
                    },
                    Instr::SendOff {
                        items: 1,
                        offset: 0,
                        sctl,
                    },
                ),
                Instr::SendPic { dirs, pic, .. } => (
                    Instr::SendPic {
                        items: cycles - 1,
                        dirs,
                        pic,
                    },
                    Instr::SendOff {
                        items: 1,
                        offset: 0,
                        sctl: dirs,
                    },
                ),
                // Two words long, so never last at an odd count; if it
                // were, the decoder would report the misalignment.
                Instr::SendPicP { .. } => {
                    return self.push(last.instr, last.vword, last.xpic, last.pic);
                }
            };
            self.push(head, last.vword, last.xpic, last.pic)?;
            // The tail's PIC field is never encoded; keep the head's value.
            self.push(tail, 0, last.xpic, last.pic)
        } else {
            // One cycle: re-encode as a two-word sendpicp that sets the
            // receive state to what it is anyway.
            let (word_address, sctl) = match last.instr {
                Instr::Send {
                    word_address, sctl, ..
                } => (word_address, sctl),
                Instr::SendOff { offset, sctl, .. } => (last.sp_before + offset, sctl),
                Instr::SendPic { dirs, .. } => (last.sp_before, dirs),
                _ => (0, 0),
            };
            self.push(
                Instr::SendPicP {
                    items: 1,
                    word_address,
                    sctl,
                    xpic: Some(last.xpic),
                    pic: last.pic.real / 4,
                },
                last.vword,
                last.xpic,
                last.pic,
            )
        }
    }
}

/// Encodes tile `tile`'s row. `activity` holds every tile (to know when a
/// source falls silent); `latency` is the constant fabric latency. With
/// `relocations` (rows encoded from structural addresses, see
/// `ScheduleConfig::relocatable`), also lists where the row's address
/// fields point, so that the row can be moved to other addresses without
/// encoding it again ([`crate::relocate`]).
pub(crate) fn encode_tile(
    tile: usize,
    activity: &Activity,
    latency: u64,
    relocations: bool,
) -> Result<(Vec<u32>, Vec<Relocation>), EncodeError> {
    let Some(sends) = activity.sends.get(tile) else {
        return Ok((Vec::new(), Vec::new()));
    };
    // The tile's receive pieces, gathered once: encoding passes over them
    // three times, and each piece is read from its making tile's list.
    let recvs = activity.recvs(tile).gather();
    let recvs = recvs.as_slice();
    let (events, pic_from) = plan_receive_events(sends, recvs, latency);
    // Boundaries.
    let mut bounds: Vec<u64> = Vec::with_capacity(2 * sends.len() + events.len() + 2);
    bounds.push(0);
    let mut end = 0u64;
    for s in sends {
        bounds.push(s.start);
        let e = s.start + u64::from(s.items);
        bounds.push(e);
        end = end.max(e);
    }
    for r in recvs.iter() {
        end = end.max(r.start + u64::from(r.items));
    }
    for e in &events {
        bounds.push(e.at);
    }
    bounds.push(end);
    // Two sorted runs (the sends' boundaries, then the receive events'),
    // which the stable sort finds and merges in one pass.
    bounds.sort();
    bounds.dedup();
    let mut em = Emitter {
        words: Vec::new(),
        relocations: relocations.then(Vec::new),
        last: None,
        sp: 0,
        vsp: 0,
    };
    let mut send_i = 0;
    let mut event_i = 0;
    let mut pic_next = 0;
    let mut xpic = Xpic::Disconnected;
    for pair in bounds.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a >= end {
            break;
        }
        // The update at a.
        let mut update_x = None;
        let mut update_p = None;
        if let Some(e) = events.get(event_i) {
            if e.at == a {
                update_x = e.xpic;
                update_p = e.pic;
                event_i += 1;
            }
        }
        if let Some(x) = update_x {
            xpic = x;
        }
        // The send piece covering a, if any.
        while sends
            .get(send_i)
            .is_some_and(|s| s.start + u64::from(s.items) <= a)
        {
            send_i += 1;
        }
        let send = sends.get(send_i).filter(|s| s.start <= a).map(|s| {
            let done = (a - s.start) as u32;
            let skip = done * item_bytes(s.wide);
            (s.byte_address + skip, s.vaddr + u128::from(skip), s.wide)
        });
        let mut pic_at = |c: u64| pic_at(recvs, &pic_from, c, &mut pic_next);
        emit_window(
            &mut em,
            a,
            b - a,
            send,
            update_x,
            update_p,
            xpic,
            &mut pic_at,
        )?;
    }
    em.finish()
}

/// PIC at cycle `c`: piece `i` has it set from `pic_from[i]` on (at the
/// latest at its start) and advances it by each item that arrives.
///
/// `next` is the number of pieces set before the previous call's cycle:
/// a row asks for non-decreasing cycles, so the count only moves forward
/// (an earlier cycle searches again).
fn pic_at(recvs: &[RecvPiece], pic_from: &[u64], c: u64, next: &mut usize) -> Pic {
    if pic_from[..*next].last().is_some_and(|&f| f > c) {
        *next = pic_from.partition_point(|&f| f <= c);
    }
    while pic_from.get(*next).is_some_and(|&f| f <= c) {
        *next += 1;
    }
    let i = *next;
    match i.checked_sub(1).and_then(|k| recvs.get(k)) {
        Some(r) => {
            let done = c.saturating_sub(r.start).min(u64::from(r.items)) as u32;
            let skip = done * item_bytes(r.wide);
            Pic {
                real: r.byte_address + skip,
                vaddr: r.vaddr + u128::from(skip),
                dest: r.dest,
            }
        }
        None => Pic::default(),
    }
}

/// Chooses when the tile's receive state changes.
///
/// Before piece `i` arrives, XPIC and PIC must name its source and
/// destination. They may change at any cycle `τ` between the end of the
/// previous piece and the start of this one, provided the old source sends
/// nothing that would arrive in `[end, τ)` and the new source nothing that
/// would arrive in `[τ, start)`. Within that range a cycle where the tile's
/// sends already have a boundary is preferred, so that the update rides on
/// an instruction the row has anyway. When no such `τ` exists the tile
/// disconnects first. Returns the events and, per piece, the cycle from
/// which PIC holds its address.
fn plan_receive_events(
    sends: &[SendPiece],
    recvs: &[RecvPiece],
    latency: u64,
) -> (Vec<RecvEvent>, Vec<u64>) {
    let mut send_bounds: Vec<u64> = sends
        .iter()
        .flat_map(|p| [p.start, p.start + u64::from(p.items)])
        .collect();
    send_bounds.sort_unstable();
    send_bounds.dedup();
    // A boundary in [lo, hi], else `fallback`.
    let pick = |lo: u64, hi: u64, fallback: u64| {
        let i = send_bounds.partition_point(|&b| b < lo);
        send_bounds
            .get(i)
            .copied()
            .filter(|&b| b <= hi)
            .unwrap_or(fallback)
    };
    // At most two events per piece and one after the last.
    let mut events: Vec<RecvEvent> = Vec::with_capacity(2 * recvs.len() + 1);
    let mut pic_from = Vec::with_capacity(recvs.len());
    let mut xpic = Xpic::Disconnected;
    // PIC after the previous piece, structurally (see `SendPiece::vaddr`).
    let mut vpic = 0u128;
    let mut prev_end = 0u64;
    let mut old_next: Option<u64> = None;
    for p in recvs.iter() {
        let want = Xpic::Listen(TileId::from_u32(p.source));
        let set_p = (vpic != p.vaddr).then_some(Pic {
            real: p.byte_address,
            vaddr: p.vaddr,
            dest: p.dest,
        });
        // When the current source next writes here if nothing changes.
        let quiet_old = match xpic {
            Xpic::Listen(_) => old_next.map_or(u64::MAX, |c| c + latency),
            Xpic::Disconnected => u64::MAX,
        };
        if xpic == want && set_p.is_none() && quiet_old >= p.start {
            pic_from.push(p.start);
        } else {
            // The new source must be quiet from τ until the piece, the old
            // one from the previous end until τ.
            let lo = p
                .quiet_from()
                .map_or(prev_end, |z| prev_end.max(z + latency));
            let hi = quiet_old.min(p.start);
            let mut set_x = xpic != want;
            let at = if lo <= hi {
                pick(lo, hi, hi)
            } else {
                // Disconnect while the old source is still quiet, then
                // switch once the new one is.
                let off = pick(prev_end, quiet_old, prev_end);
                events.push(RecvEvent {
                    at: off,
                    xpic: Some(Xpic::Disconnected),
                    pic: None,
                });
                set_x = true;
                pick(lo.max(off), p.start, p.start)
            };
            events.push(RecvEvent {
                at,
                xpic: set_x.then_some(want),
                pic: set_p,
            });
            pic_from.push(at.min(p.start));
        }
        xpic = want;
        vpic = p.vaddr + u128::from(p.items * item_bytes(p.wide));
        prev_end = p.start + u64::from(p.items);
        old_next = p.next_send();
    }
    // After the last piece, stop listening before the source sends again
    // (if the row lasts that long).
    if let Xpic::Listen(_) = xpic {
        if let Some(next) = old_next {
            let until = next + latency;
            events.push(RecvEvent {
                at: pick(prev_end, until, prev_end),
                xpic: Some(Xpic::Disconnected),
                pic: None,
            });
        }
    }
    // Events at one cycle merge; the later one wins per field.
    let mut merged: Vec<RecvEvent> = Vec::with_capacity(events.len());
    for e in events {
        match merged.last_mut() {
            Some(m) if m.at == e.at => {
                m.xpic = e.xpic.or(m.xpic);
                m.pic = e.pic.or(m.pic);
            }
            _ => merged.push(e),
        }
    }
    (merged, pic_from)
}

/// Emits the instructions of the window of `n` cycles starting at `start`.
#[allow(clippy::too_many_arguments)]
fn emit_window(
    em: &mut Emitter,
    start: u64,
    n: u64,
    send: Option<(u32, u128, bool)>,
    update_x: Option<Xpic>,
    update_p: Option<Pic>,
    xpic: Xpic,
    pic_at: &mut dyn FnMut(u64) -> Pic,
) -> Result<(), EncodeError> {
    let mut left = n;
    let mut address = send.map(|(a, _, _)| a / 4);
    // Choices compare the structural address; encodings use the real one.
    let mut vaddress = send.map_or(0, |(_, v, _)| v / 4);
    let wide = send.is_some_and(|(_, _, w)| w);
    let sctl = if send.is_some() {
        SCTL_BOTH | if wide { SCTL_WIDE } else { 0 }
    } else {
        0
    };
    let per = if wide { 2 } else { 1 };
    let mut first = true;
    let mut at = start;
    while left > 0 {
        let pic = pic_at(at);
        // An update's PIC is the state at its cycle, so the fields it
        // sets and the state recorded for relocation agree.
        debug_assert!(!first || update_p.is_none_or(|p| p == pic));
        let chunk = |max: u32| left.min(u64::from(max)) as u32;
        let instr = match (first, update_x, update_p, address) {
            (true, Some(x), None, None) => Instr::DelayXpic {
                cycles: chunk(MAX_DELAYXPIC_CYCLES),
                xpic: x,
            },
            (true, Some(x), _, a) => {
                em.align()?;
                Instr::SendPicP {
                    items: chunk(MAX_SEND_ITEMS),
                    word_address: a.unwrap_or(0),
                    sctl,
                    xpic: Some(x),
                    pic: pic.real / 4,
                }
            }
            (true, None, Some(p), None) => Instr::DelayPic {
                cycles: chunk(MAX_DELAYPIC_CYCLES),
                sel: 0,
                value: p.real / 4,
            },
            (true, None, Some(p), Some(_)) if !wide && vaddress == em.vsp => Instr::SendPic {
                items: chunk(MAX_SEND_ITEMS),
                dirs: SCTL_BOTH,
                pic: p.real / 4,
            },
            (true, None, Some(p), Some(a)) => {
                em.align()?;
                Instr::SendPicP {
                    items: chunk(MAX_SEND_ITEMS),
                    word_address: a,
                    sctl,
                    xpic: None,
                    pic: p.real / 4,
                }
            }
            (_, _, _, None) => Instr::Delay {
                cycles: chunk(MAX_DELAY_CYCLES),
            },
            (_, _, _, Some(_))
                if vaddress >= em.vsp && vaddress - em.vsp <= u128::from(MAX_SENDOFF_OFFSET) =>
            {
                Instr::SendOff {
                    items: chunk(MAX_SENDOFF_ITEMS),
                    offset: (vaddress - em.vsp) as u32,
                    sctl,
                }
            }
            (_, _, _, Some(a)) => Instr::Send {
                items: chunk(MAX_SEND_ITEMS),
                word_address: a,
                sctl,
            },
        };
        // Structural and real addresses agree on every relative choice.
        if let Some(a) = address {
            match instr {
                Instr::SendOff { offset, .. } => debug_assert_eq!(a, em.sp + offset),
                Instr::SendPic { .. } => debug_assert_eq!(a, em.sp),
                _ => {}
            }
        }
        let cycles = instr.cycles();
        em.push(instr, vaddress, xpic, pic)?;
        left -= u64::from(cycles);
        at += u64::from(cycles);
        if let Some(a) = address.as_mut() {
            *a += cycles * per;
            vaddress += u128::from(cycles * per);
        }
        first = false;
    }
    Ok(())
}

/// A hash of a row's words: two words at a time folded by a multiply and
/// a rotation, seeded with the length. Equal rows hash equal; rows that
/// differ are told apart by comparing them.
fn row_hash(row: &[u32]) -> u64 {
    let mut h = (row.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut pairs = row.chunks_exact(2);
    for p in &mut pairs {
        let x = u64::from(p[0]) | (u64::from(p[1]) << 32);
        h = (h.rotate_left(26) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    if let [last] = pairs.remainder() {
        h = (h.rotate_left(26) ^ u64::from(*last)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h ^ (h >> 29)
}

/// Per-tile exchange rows, with identical rows stored once.
///
/// Clones share the rows: a build keeps a phase's rows both in its package
/// and with its schedule (for a later round), tens of megabytes on SigLIP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncodedRows {
    rows: std::sync::Arc<Vec<Vec<u32>>>,
    tile_row: Vec<u32>,
}

impl EncodedRows {
    /// Rows from one instruction-word vector per tile (tile `i` gets
    /// `rows[i]`); identical rows are shared.
    pub fn from_tile_rows(rows: Vec<Vec<u32>>) -> EncodedRows {
        // Rows are found again by a hash of their words, computed for all
        // rows in parallel, and compared word for word only when hashes
        // meet: a phase's rows are megabytes, which the default SipHash of
        // a `Vec` key (and a copy of every distinct row as that key) made
        // a visible part of scheduling. Ids are handed out in tile order,
        // as before.
        let hashes: Vec<u64> = rows.par_iter().map(|row| row_hash(row)).collect();
        let mut unique: Vec<Vec<u32>> = Vec::new();
        let mut index: HashMap<u64, SmallVec<[u32; 1]>, FoldBuildHasher> = HashMap::default();
        let mut tile_row = Vec::with_capacity(rows.len());
        for (row, hash) in rows.into_iter().zip(hashes) {
            let ids = index.entry(hash).or_default();
            let id = match ids.iter().find(|&&id| unique[id as usize] == row) {
                Some(&id) => id,
                None => {
                    let id = unique.len() as u32;
                    ids.push(id);
                    unique.push(row);
                    id
                }
            };
            tile_row.push(id);
        }
        EncodedRows {
            rows: std::sync::Arc::new(unique),
            tile_row,
        }
    }

    /// Rows already shared: `tile_row[t]` is the index in `rows` of tile
    /// `t`'s row. `None` when an index is out of range. Rows are not
    /// compared, so two equal entries of `rows` stay two.
    pub fn from_shared(rows: Vec<Vec<u32>>, tile_row: Vec<u32>) -> Option<EncodedRows> {
        let count = rows.len();
        tile_row
            .iter()
            .all(|&r| (r as usize) < count)
            .then_some(EncodedRows {
                rows: std::sync::Arc::new(rows),
                tile_row,
            })
    }

    /// Number of tiles.
    pub fn tile_count(&self) -> u32 {
        self.tile_row.len() as u32
    }

    /// Tile `tile`'s row (empty for an inactive tile or a tile out of range).
    pub fn row(&self, tile: TileId) -> &[u32] {
        self.tile_row
            .get(tile.as_u32() as usize)
            .and_then(|&r| self.rows.get(r as usize))
            .map_or(&[], Vec::as_slice)
    }

    /// Which shared row tile `tile` uses.
    pub fn row_id(&self, tile: TileId) -> Option<u32> {
        self.tile_row.get(tile.as_u32() as usize).copied()
    }

    /// The distinct rows.
    pub fn unique_rows(&self) -> &[Vec<u32>] {
        &self.rows
    }

    /// Bytes of tile `tile`'s row (4 per instruction word, not counting the
    /// final return the caller appends).
    pub fn row_bytes(&self, tile: TileId) -> u64 {
        self.row(tile).len() as u64 * 4
    }

    /// Bytes of all distinct rows (each shared row counted once).
    pub fn total_bytes(&self) -> u64 {
        self.rows.iter().map(|r| r.len() as u64 * 4).sum()
    }

    /// A bound on the work a replay of these rows does, in words: every
    /// instruction word of every tile's row, plus two per item of every
    /// send (32-bit items move one). Decoding a row stops at its first word
    /// that does not decode (a replay reports that row). Used to refuse, before
    /// running it, exchange work beyond a limit.
    pub fn replay_words(&self) -> u64 {
        let per_row: Vec<u64> = self
            .rows
            .iter()
            .map(|row| {
                let mut total = row.len() as u64;
                let mut i = 0;
                while i < row.len() {
                    let Ok((instr, next)) = Instr::decode_at(row, i) else {
                        break;
                    };
                    if matches!(
                        instr,
                        Instr::Send { .. }
                            | Instr::SendOff { .. }
                            | Instr::SendPic { .. }
                            | Instr::SendPicP { .. }
                    ) {
                        total = total.saturating_add(2 * u64::from(instr.cycles()));
                    }
                    i += next.max(1);
                }
                total
            })
            .collect();
        self.tile_row
            .iter()
            .filter_map(|&r| per_row.get(r as usize))
            .fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// The cycle after the last window of the row that ends last (0 when
    /// every row is empty), the phase's horizon as the rows alone
    /// determine it; or the lowest tile whose row does not decode. Each
    /// distinct row is decoded once, in parallel.
    pub fn end(&self) -> Result<u64, (TileId, crate::isa::DecodeError)> {
        let ends: Vec<Result<u64, crate::isa::DecodeError>> = self
            .rows
            .par_iter()
            .map(|row| crate::timeline::row_end(row))
            .collect();
        let mut end = 0;
        for (t, &r) in self.tile_row.iter().enumerate() {
            match ends.get(r as usize) {
                Some(Ok(e)) => end = end.max(*e),
                Some(Err(error)) => return Err((TileId::from_u32(t as u32), *error)),
                None => {}
            }
        }
        Ok(end)
    }

    /// The tile with the longest row and its length in bytes (lowest tile
    /// id on ties).
    pub fn largest_row(&self) -> Option<(TileId, u64)> {
        (0..self.tile_count())
            .map(|t| (TileId::from_u32(t), self.row_bytes(TileId::from_u32(t))))
            .max_by_key(|&(t, b)| (b, std::cmp::Reverse(t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MAX_TILES;

    /// A key names its making tile and piece back, at the largest tile
    /// and index, whatever its start.
    #[test]
    fn a_receive_key_names_its_piece() {
        let arrival = |start| Arrival {
            start,
            source_quiet_from: NO_CYCLE,
            source_next_send: NO_CYCLE,
            items: 1,
            origin: 0,
            first_word: 0,
            byte_address: 0,
            dest: 0,
            wide: false,
        };
        let made = Made {
            arrivals: vec![arrival(u64::MAX - 1), arrival(7)],
            receptions: vec![Reception {
                arrival: 0,
                byte_address: 0,
                dest: 1,
            }],
            relocatable: false,
        };
        let tile = MAX_TILES - 1;
        for which in [
            Received::Arrival(0),
            Received::Arrival(1),
            Received::Reception(0),
            Received::Arrival(u32::MAX),
            Received::Reception(u32::MAX),
        ] {
            let key = recv_key(&made, tile, which);
            assert_eq!(key_piece(key), (tile, which));
        }
        // Keys order by start first.
        assert!(
            recv_key(&made, 0, Received::Arrival(1)) < recv_key(&made, 0, Received::Reception(0))
        );
        assert_eq!(made.piece(tile, Received::Reception(0)).start, u64::MAX - 1);
    }
}
