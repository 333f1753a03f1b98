//! Per-tile row encoding: from a tile's send and receive pieces to IPU21
//! supervisor instruction words, and the shared-row container.
//!
//! A tile's row is a sequence of windows between consecutive *boundaries*:
//! the start and end of each send piece, and each cycle where the receive
//! state must change (a new source or pointer when a receive piece begins,
//! a disconnect when it ends and the source keeps sending to others). Every
//! window becomes one instruction (more when a field limit forces chunks),
//! chosen to carry the window's receive update and send (see
//! [`crate::isa`] for the semantics). The pieces the encoder reads are in
//! [`pieces`], the rows it fills in [`rows`].

use ipu_layout::TileId;

use crate::address::{Relocation, WordOf};
use crate::isa::{
    EncodeError, Instr, MAX_DELAY_CYCLES, MAX_DELAYPIC_CYCLES, MAX_DELAYXPIC_CYCLES,
    MAX_SEND_ITEMS, MAX_SENDOFF_ITEMS, MAX_SENDOFF_OFFSET, SCTL_BOTH, SCTL_WIDE, Xpic,
};

mod pieces;
mod rows;

pub(crate) use pieces::*;
pub use rows::EncodedRows;

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
