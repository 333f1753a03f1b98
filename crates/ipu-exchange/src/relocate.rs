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

use crate::address::{Relocation, WordOf};
use crate::encode::EncodedRows;
use crate::error::{ReaddressMismatch, ScheduleError};
use crate::isa::Instr;
use crate::model::{Phase, Transfer};

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
