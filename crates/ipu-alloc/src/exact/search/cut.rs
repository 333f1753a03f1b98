//! The cut test: a fixed-capacity knapsack below a window boundary.
//!
//! A *cut* is an address `B` that no window of any free item spans (a
//! memory region boundary: windows are split there), so no item crosses
//! it. In a section at level `h < B`, the unblocked bytes of `[h, B)` are
//! either covered by items placed wholly below `B` or left empty, and a
//! section leaves at most its slack empty. So some subset of the items
//! still to place in the section that may sit below `B` must have a total
//! size in `[F - slack, F]`, where `F` is the unblocked bytes of `[h, B)`.
//! The totals a set of sizes reaches are a bit set (in grains, the greatest
//! common divisor of the sizes); a section where none lands in that range
//! fails the node. Tiles whose live bytes nearly fill both regions are
//! where this bites: which requests share the lower region is a knapsack
//! the other rules do not see.

use super::Search;
use crate::arena::Arena;
use crate::greedy::UNPLACED;

/// `dst |= src << by` over `dst.len()` words.
fn or_shifted_left(dst: &mut [u64], src: &[u64], by: usize) {
    let (w, b) = (by / 64, by % 64);
    for i in (w..dst.len()).rev() {
        let lo = src[i - w] << b;
        let hi = if b > 0 && i > w {
            src[i - w - 1] >> (64 - b)
        } else {
            0
        };
        dst[i] |= lo | hi;
    }
}

/// Whether any bit in `from..=to` is set.
fn any_in(set: &[u64], from: usize, to: usize) -> bool {
    (from..=to).any(|x| set.get(x / 64).is_some_and(|w| w & (1u64 << (x % 64)) != 0))
}

/// Static data of the cut test.
#[derive(Debug)]
pub(in crate::exact) struct Cut {
    /// The cut address.
    pub at: u64,
    /// The grain of the sizes, in bytes.
    pub grain: u64,
    /// Per section: the free items live in it that may sit below the cut.
    pub live: Vec<Vec<u32>>,
}

/// The most grains below a cut the test works with.
const MAX_GRAINS: u64 = 1 << 16;

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Cut {
    /// The lowest cut strictly inside `[base, limit)` with room below it,
    /// if there is one and its knapsack is small enough.
    pub(in crate::exact) fn find(
        arena: &Arena,
        windows: &[u32],
        size: &[u64],
        start: &[u32],
        end: &[u32],
    ) -> Option<Cut> {
        let (window_sets, base, limit) = (&arena.window_sets, arena.base, arena.limit);
        let sections = arena.sections as usize;
        let mut ends: Vec<u64> = windows
            .iter()
            .flat_map(|&w| window_sets[w as usize].iter().map(|w| w.1))
            .filter(|&e| e > base && e < limit)
            .collect();
        ends.sort_unstable();
        ends.dedup();
        let spans = |b: u64| {
            windows
                .iter()
                .any(|&w| window_sets[w as usize].iter().any(|w| w.0 < b && b < w.1))
        };
        let at = ends.into_iter().find(|&b| !spans(b))?;
        let below: Vec<bool> = windows
            .iter()
            .map(|&w| window_sets[w as usize].iter().any(|w| w.0 < at))
            .collect();
        let grain = size
            .iter()
            .zip(&below)
            .filter(|p| *p.1)
            .fold(0, |g, p| gcd(g, *p.0));
        if grain == 0 || (at - base) / grain > MAX_GRAINS {
            return None;
        }
        let mut live = vec![Vec::new(); sections];
        for k in 0..size.len() {
            if below[k] {
                for s in start[k]..end[k] {
                    live[s as usize].push(k as u32);
                }
            }
        }
        Some(Cut { at, grain, live })
    }
}

impl Search<'_> {
    /// The cut test over the open sections of `lo..hi` below the cut.
    pub(super) fn cut_ok(&mut self, lo: usize, hi: usize) -> bool {
        let Some(cut) = self.p.cut.as_ref() else {
            return true;
        };
        let mut sums = std::mem::take(&mut self.cut_sums);
        let mut spare = std::mem::take(&mut self.cut_spare);
        let mut ok = true;
        for s in lo..hi {
            if self.rem[s] == 0 {
                continue;
            }
            let h = self.sky[s].max(self.last);
            if h >= cut.at {
                continue;
            }
            let room = (cut.at - h).saturating_sub(self.blocked_between(s, h, cut.at));
            let slack = self.free_above(s, h).saturating_sub(self.rem[s]);
            let top = (room / cut.grain) as usize;
            let bottom = room.saturating_sub(slack).div_ceil(cut.grain) as usize;
            if bottom == 0 {
                continue;
            }
            let words = top / 64 + 1;
            sums.clear();
            sums.resize(words, 0);
            spare.resize(words, 0);
            sums[0] = 1;
            let mut total = 0usize;
            for &k in &cut.live[s] {
                let k = k as usize;
                if self.offsets[k] != UNPLACED {
                    continue;
                }
                let by = (self.p.size[k] / cut.grain) as usize;
                if by > top {
                    continue;
                }
                total += by;
                spare[..words].copy_from_slice(&sums[..words]);
                or_shifted_left(&mut sums[..words], &spare[..words], by);
            }
            if total < bottom || !any_in(&sums, bottom, top) {
                ok = false;
                break;
            }
        }
        self.cut_sums = sums;
        self.cut_spare = spare;
        ok
    }
}
