//! Which Paired64 transfers go as 64-bit items.
//!
//! A 64-bit item moves two words in one cycle but holds both lanes of the
//! sender's pair and both ports of each receiver's pair. Sending every
//! Paired64 transfer wide can leave a pair's lanes busy with one tile's wide
//! items while the partner's 32-bit words wait; sending none wide costs a
//! cycle per word. Between the two: on a pair whose tiles send `A` and `B`
//! words (`N_a`, `N_b` of them 32-bit only), sending `x` and `y` of the
//! Paired64 words wide takes at least `(x + y) / 2 + max(A − x, B − y)`
//! cycles (wide cycles hold both lanes; in the others each tile sends its
//! own 32-bit words). That is `(A + B) / 2`, the pair's share of the
//! endpoint bound, once the busier tile sends wide the difference `A − B`
//! (when neither tile's 32-bit-only words exceed the other's total);
//! otherwise the larger 32-bit-only load
//! sets the floor and each tile sends wide what stands above it. The
//! receive side is the same with ports. [`balanced`] starts from nothing
//! wide and makes a transfer wide where that brings a pair above the least
//! any plan could reach closer to it without lifting another pair past it.

use ipu_layout::TileId;
use smallvec::SmallVec;

use crate::fabric::Fabric;
use crate::model::{Phase, Transfer, Width};

/// Whether a transfer can go as 64-bit items in a phase of `tiles` tiles:
/// Paired64, every partner exists, and no two destinations share a pair.
pub(super) fn goes_wide(t: &Transfer, tiles: u32, fabric: &Fabric) -> bool {
    if t.width != Width::Paired64 || fabric.partner(t.source).as_u32() >= tiles {
        return false;
    }
    let mut pairs: SmallVec<[u32; 4]> = SmallVec::new();
    for &(d, _) in &t.destinations {
        let partner = fabric.partner(d).as_u32();
        if partner >= tiles {
            return false;
        }
        // A tile and its partner form one pair: both must not be
        // destinations, as the wide item occupies both receive ports.
        let pair = d.as_u32().min(partner);
        if pairs.contains(&pair) {
            return false;
        }
        pairs.push(pair);
    }
    true
}

/// One side (lanes or ports) of every pair: each tile's words, the words
/// that could go wide, and the words chosen wide so far.
struct Side {
    total: Vec<u64>,
    can: Vec<u64>,
    wide: Vec<u64>,
}

impl Side {
    fn new(n: usize) -> Side {
        Side {
            total: vec![0; n],
            can: vec![0; n],
            wide: vec![0; n],
        }
    }

    /// Twice the least cycles tile `a`'s pair needs with `extra` more of
    /// `a`'s words wide: `(x_a + x_b) + 2 · max(A − x_a, B − x_b)`.
    fn cost2(&self, a: usize, extra: u64, fabric: &Fabric) -> u64 {
        let b = fabric.partner(TileId::from_u32(a as u32)).as_u32() as usize;
        let (xa, xb) = (self.wide[a] + extra, self.wide.get(b).copied().unwrap_or(0));
        let (ta, tb) = (self.total[a], self.total.get(b).copied().unwrap_or(0));
        xa + xb + 2 * (ta - xa).max(tb - xb)
    }

    /// Twice the least cycles any pair needs whatever goes wide (the
    /// module docs' minimum over the wide words).
    fn floor2(&self, fabric: &Fabric) -> u64 {
        let mut best = 0;
        for a in 0..self.total.len() {
            let b = fabric.partner(TileId::from_u32(a as u32)).as_u32() as usize;
            let (ta, tb) = (self.total[a], self.total.get(b).copied().unwrap_or(0));
            let narrow = (ta - self.can[a]).max(tb - self.can.get(b).copied().unwrap_or(0));
            let f2 = if narrow <= ta.min(tb) {
                ta + tb
            } else {
                ta.saturating_sub(narrow) + tb.saturating_sub(narrow) + 2 * narrow
            };
            best = best.max(f2);
        }
        best
    }
}

/// Per transfer, whether it goes wide in the balanced plan (see the module
/// docs). Transfers that can go wide are taken largest first; one goes
/// wide when that helps a pair (its sender's, or a receiver's) that is
/// above the least any plan could reach, and leaves no pair it touches
/// above both that and what it needed before.
pub(super) fn balanced(phase: &Phase, fabric: &Fabric) -> Vec<bool> {
    let n = phase.tile_count as usize;
    let can_go: Vec<bool> = phase
        .transfers
        .iter()
        .map(|t| goes_wide(t, phase.tile_count, fabric))
        .collect();
    let (mut send, mut recv) = (Side::new(n), Side::new(n));
    for (t, &can) in phase.transfers.iter().zip(&can_go) {
        let w = u64::from(t.words);
        let s = t.source.as_u32() as usize;
        send.total[s] += w;
        if can {
            send.can[s] += w;
        }
        for &(d, _) in &t.destinations {
            let d = d.as_u32() as usize;
            recv.total[d] += w;
            if can {
                recv.can[d] += w;
            }
        }
    }
    let target = send.floor2(fabric).max(recv.floor2(fabric));
    let mut order: Vec<usize> = (0..phase.transfers.len()).filter(|&i| can_go[i]).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(phase.transfers[i].words), i));
    let mut wide = vec![false; phase.transfers.len()];
    for i in order {
        let t = &phase.transfers[i];
        let w = u64::from(t.words);
        let s = t.source.as_u32() as usize;
        let ends = std::iter::once((&send, s)).chain(
            t.destinations
                .iter()
                .map(|&(d, _)| (&recv, d.as_u32() as usize)),
        );
        let mut helps = false;
        let mut harms = false;
        for (side, v) in ends {
            let (before, after) = (side.cost2(v, 0, fabric), side.cost2(v, w, fabric));
            helps |= before > target && after < before;
            harms |= after > before.max(target);
        }
        if helps && !harms {
            wide[i] = true;
            send.wide[s] += w;
            for &(d, _) in &t.destinations {
                recv.wide[d.as_u32() as usize] += w;
            }
        }
    }
    wide
}
