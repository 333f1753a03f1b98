//! Moving relocatable rows to other addresses without encoding them again.
//!
//! Rows encoded with `ScheduleConfig::relocatable` make every instruction
//! choice from structural addresses (a transfer's words in a space of
//! their own), so the same schedule with other addresses has the same
//! instructions, and only the fields that hold absolute addresses differ:
//! a send's word address and the PIC value. The encoder lists those
//! fields per tile ([`Relocation`]), each with the structural address it
//! names; for a phase whose transfers moved, a field's new value is that
//! structural address looked up in the phase — the source word of a
//! transfer, or the word of one destination's range — and the instruction
//! is decoded, given the value and encoded again in place, by the one
//! codec (`crate::isa`). A readdress then costs a pass over the address
//! fields instead of building pieces and encoding every row.

use ipu_layout::TileId;
use rayon::prelude::*;

use crate::encode::EncodedRows;
use crate::isa::Instr;
use crate::model::{Phase, Transfer};
use crate::schedule::{ReaddressMismatch, ScheduleError};

/// A word of a transfer, [`WordOf::NONE`] for a field no relocation moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WordOf {
    pub transfer: u32,
    pub word: u32,
}

impl WordOf {
    /// No word: the field keeps its value (a `sendpicp` without a send, a
    /// PIC value before any piece).
    pub const NONE: WordOf = WordOf {
        transfer: u32::MAX,
        word: 0,
    };

    /// The word a structural address names, [`WordOf::NONE`] for 0 (an
    /// address that is not structural).
    pub fn of(vaddr: u128) -> Option<WordOf> {
        if vaddr == 0 {
            return Some(WordOf::NONE);
        }
        structural(vaddr).map(|(transfer, word)| WordOf { transfer, word })
    }
}

/// One instruction's absolute address fields, by the words they name.
/// Rows hold millions of them at SigLIP scale, so they are kept small.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Relocation {
    /// Word index of the instruction in its row.
    pub at: u32,
    /// The source word of the first item sent.
    pub send: WordOf,
    /// The destination word the PIC value names (one past a range once
    /// it is received) ...
    pub pic: WordOf,
    /// ... in this destination of the transfer.
    pub pic_dest: u32,
}

/// The structural address of word `word` of transfer `origin`: each
/// transfer's words in a space of their own, starting at
/// `(origin + 1) << 66` bytes, 4 bytes apart, so that pieces of different
/// transfers are never adjacent (see `ScheduleConfig::relocatable`).
pub(crate) fn structural_address(origin: u32, word: u32) -> u128 {
    ((u128::from(origin) + 1) << 66) + 4 * u128::from(word)
}

/// The structural address of word `word` of gather `origin`, whose
/// addresses are arbitrary: each word alone, at offset `(word + 1) << 34`
/// of the transfer's space.
pub(crate) fn scattered_address(origin: u32, word: u32) -> u128 {
    ((u128::from(origin) + 1) << 66) + ((u128::from(word) + 1) << 34)
}

/// A structural address's transfer and 32-bit word (the inverse of
/// [`structural_address`] and [`scattered_address`]).
fn structural(vaddr: u128) -> Option<(u32, u32)> {
    let origin = u32::try_from((vaddr >> 66).checked_sub(1)?).ok()?;
    let offset = vaddr & ((1u128 << 66) - 1);
    let word = if offset >> 34 != 0 {
        if offset & ((1 << 34) - 1) != 0 {
            return None;
        }
        (offset >> 34) - 1
    } else {
        if offset % 4 != 0 {
            return None;
        }
        offset / 4
    };
    Some((origin, u32::try_from(word).ok()?))
}

/// `rows` moved to the addresses of `phase` by `relocations` (per tile, as
/// the encoder listed them). `phase` must hold the scheduled transfers at
/// other addresses, which the caller has checked.
pub(crate) fn relocate_rows(
    rows: &EncodedRows,
    relocations: &[Vec<Relocation>],
    phase: &Phase,
    label: u32,
) -> Result<EncodedRows, ScheduleError> {
    let moved: Vec<Vec<u32>> = (0..rows.tile_count())
        .into_par_iter()
        .map(|t| {
            let tile = TileId::from_u32(t);
            let mut row = rows.row(tile).to_vec();
            let list = relocations.get(t as usize).map_or(&[][..], Vec::as_slice);
            let mut words = Vec::with_capacity(2);
            for r in list {
                let at = r.at as usize;
                let (instr, len) =
                    Instr::decode_at(&row, at).map_err(|source| ScheduleError::Relocate {
                        phase: label,
                        tile,
                        source,
                    })?;
                let instr = relocated(instr, r, phase, label)?;
                words.clear();
                instr
                    .encode(&mut words)
                    .map_err(|source| ScheduleError::Encode {
                        phase: label,
                        tile,
                        source,
                    })?;
                // Same instruction, other field values: the same length.
                debug_assert_eq!(words.len(), len);
                for (slot, &w) in row[at..at + len].iter_mut().zip(&words) {
                    *slot = w;
                }
            }
            Ok(row)
        })
        .collect::<Result<_, ScheduleError>>()?;
    Ok(EncodedRows::from_tile_rows(moved))
}

/// `instr` with its address fields computed for `phase` from `r`.
fn relocated(
    mut instr: Instr,
    r: &Relocation,
    phase: &Phase,
    label: u32,
) -> Result<Instr, ScheduleError> {
    // A field's new word address: `byte` of its transfer in `phase`, or
    // a readdress error naming the transfer when the phase has no such
    // word (the caller compared the transfers already).
    let word_address = |of: WordOf, byte: &dyn Fn(&Transfer, u32) -> Option<u32>| {
        if of == WordOf::NONE {
            return Ok(None);
        }
        phase
            .transfers
            .get(of.transfer as usize)
            .and_then(|t| byte(t, of.word))
            .map(|b| Some(b / 4))
            .ok_or(ScheduleError::Readdress {
                phase: label,
                transfer: Some(of.transfer),
                reason: ReaddressMismatch::Transfer,
            })
    };
    let send = word_address(r.send, &|t, word| t.source_word_address(word))?;
    // PIC may stand one past the range's last word once it is received.
    let pic = word_address(r.pic, &|t, word| {
        let &(_, base) = t.destinations.get(r.pic_dest as usize)?;
        base.checked_add(word.checked_mul(4)?)
    })?;
    match &mut instr {
        Instr::Send { word_address, .. } => {
            if let Some(a) = send {
                *word_address = a;
            }
        }
        Instr::SendPicP {
            word_address,
            pic: p,
            ..
        } => {
            if let Some(a) = send {
                *word_address = a;
            }
            if let Some(v) = pic {
                *p = v;
            }
        }
        Instr::SendPic { pic: p, .. } | Instr::DelayPic { value: p, .. } => {
            if let Some(v) = pic {
                *p = v;
            }
        }
        Instr::Delay { .. } | Instr::DelayXpic { .. } | Instr::SendOff { .. } => {}
    }
    Ok(instr)
}

#[cfg(test)]
mod tests {
    use super::structural;

    #[test]
    fn structural_addresses_name_their_transfer_and_word() {
        let plain = |origin: u128, word: u128| ((origin + 1) << 66) + 4 * word;
        let gather = |origin: u128, word: u128| ((origin + 1) << 66) + ((word + 1) << 34);
        assert_eq!(structural(plain(0, 0)), Some((0, 0)));
        assert_eq!(structural(plain(7, 1000)), Some((7, 1000)));
        assert_eq!(structural(gather(3, 0)), Some((3, 0)));
        assert_eq!(structural(gather(3, 41)), Some((3, 41)));
        // Not a structural address: below every space, inside a word, or
        // inside a gather's word.
        assert_eq!(structural(12), None);
        assert_eq!(structural(plain(2, 5) + 2), None);
        assert_eq!(structural(gather(2, 5) + 4), None);
    }
}
