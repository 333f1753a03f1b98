//! Structural addresses: each transfer's words in an address space of
//! their own, and the address fields of an encoded row named by the words
//! they hold. The encoder makes relocatable rows from them and
//! [`relocate`](crate::relocate) moves those rows to a phase's real
//! addresses; both read this one definition.

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
