//! Byte ranges of tile memory as bitmaps of 32-bit words: the quick proof
//! that no two writes share a byte and no read meets a write, which the
//! phase validation and the exchange replay both need (and which, for a
//! valid phase, is the usual answer; the sorting paths that find exactly
//! which bytes meet run only when it fails).

use std::ops::Range;

/// The most words [`none_meet`] marks in its bitmap (4 MiB of tile
/// memory; an IPU21 tile has 624 KiB).
const BITMAP_WORDS: u64 = 1 << 20;

/// Whether no two `writes` share a byte and no read meets a write, shown
/// with a bitmap of the words written, in one pass over the ranges and
/// without sorting them: the case of every valid phase. `false` means a
/// range met another, or that the ranges are not whole words within
/// [`BITMAP_WORDS`] of each other; the sorting path then finds exactly
/// which bytes conflict. `bitmap` is scratch, all zeros before and after,
/// so that a caller checking tile after tile neither allocates nor clears
/// a tile's worth of bits each time.
pub(crate) fn none_meet(
    reads: &[(u64, u64)],
    writes: &[(u64, u64)],
    bitmap: &mut Vec<u64>,
) -> bool {
    let all = || reads.iter().chain(writes);
    let (Some(low), Some(high)) = (all().map(|r| r.0).min(), all().map(|r| r.1).max()) else {
        return true;
    };
    if all().any(|&(s, e)| s % 4 != 0 || e % 4 != 0 || s > e) || high - low > 4 * BITMAP_WORDS {
        return false;
    }
    let words = |&(s, e): &(u64, u64)| ((s - low) / 4) as usize..((e - low) / 4) as usize;
    let needed = ((high - low) / 4).div_ceil(64) as usize;
    if bitmap.len() < needed {
        bitmap.resize(needed, 0);
    }
    // Each write is tested and marked in one pass over its words; the
    // first that meets an earlier one stops the marking (its own words may
    // be partly marked), and every word the writes so far touch is cleared.
    let mut marked = 0;
    let mut clean = true;
    for range in writes.iter().map(words) {
        marked += 1;
        let mut hit = false;
        for_each_mask(range, |i, mask| {
            hit |= bitmap[i] & mask != 0;
            bitmap[i] |= mask;
        });
        if hit {
            clean = false;
            break;
        }
    }
    clean = clean && !reads.iter().map(words).any(|range| any_set(bitmap, range));
    for range in writes[..marked].iter().map(words) {
        for_each_mask(range, |i, _| bitmap[i] = 0);
    }
    clean
}

/// Whether any bit of `range` is set in `bits`.
fn any_set(bits: &[u64], range: Range<usize>) -> bool {
    let mut hit = false;
    for_each_mask(range, |i, mask| hit |= bits[i] & mask != 0);
    hit
}

/// Calls `f(index, mask)` for each 64-bit word of a bitmap that `range`
/// (of bit positions) covers, with the mask of its bits in `range`.
/// Inlined: a call per range, of a few words each, cost more than the
/// masks (millions of calls per SigLIP build).
#[inline]
fn for_each_mask(range: Range<usize>, mut f: impl FnMut(usize, u64)) {
    let mut at = range.start;
    while at < range.end {
        let (i, first) = (at / 64, at % 64);
        let last = (range.end - i * 64).min(64);
        let mask = (u64::MAX >> (64 - (last - first))) << first;
        f(i, mask);
        at = (i + 1) * 64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit masks cover exactly the range, across word boundaries.
    #[test]
    fn masks_cover_the_range() {
        for (start, end) in [
            (0, 0),
            (0, 1),
            (3, 64),
            (0, 64),
            (63, 65),
            (5, 200),
            (64, 128),
        ] {
            let mut bits = [0u64; 4];
            for_each_mask(start..end, |i, m| bits[i] |= m);
            for b in 0..256 {
                let set = bits[b / 64] >> (b % 64) & 1 == 1;
                assert_eq!(set, (start..end).contains(&b), "{start}..{end} bit {b}");
            }
        }
    }
}
