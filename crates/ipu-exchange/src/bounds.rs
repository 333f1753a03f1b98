//! Lower bounds on a phase's horizon.
//!
//! All three bounds hold for every schedule the crate's model admits,
//! ordinary or paired, so `bound ≤ horizon` is a property tests can assert.
//!
//! Per cycle a tile's transmit lane carries one word and its receive port
//! takes one word. A Word32 transfer costs its tile one lane cycle per word.
//! A Paired64 transfer costs at least one cycle per two words on its own
//! tile's lane (sent wide; sent as 32-bit words it costs one per word), and
//! whichever way it goes it uses one lane cycle of the pair `{t, partner}`
//! ([`Fabric::partner`]) per word, of which the pair has two per cycle. So a
//! tile needs at least `Word32 words + Paired64 words / 2` cycles and a pair
//! at least `(words of both) / 2`; receive ports likewise. Without Paired64
//! transfers this is exactly "the largest number of words a tile sends or
//! receives".
//!
//! [`multicast_lower_bound`] adds what multicast costs (see its docs): a
//! multicast whose receivers include every receiver of another sender
//! either silences that sender while it is sent whole, or is sent in
//! several copies, which costs its own sender lane cycles.
use ipu_layout::TileId;
use rayon::prelude::*;
use smallvec::SmallVec;

use crate::fabric::Fabric;
use crate::model::{Phase, Width};

/// What the bounds need of a phase's per-tile loads.
pub(crate) struct LaneLoads {
    /// Per tile, the lane cycles it needs at least (`Word32 words +
    /// Paired64 words / 2`, rounded up).
    send: Vec<u64>,
    /// The largest per-tile or per-pair lane (or port) occupancy: the
    /// endpoint bound.
    pub endpoint: u64,
}

/// Transfers a task of [`lane_loads`]'s parallel sum takes at least: each
/// task sums into a per-tile table of its own.
const LOADS_PER_TASK: usize = 1 << 14;

/// The per-tile loads of `phase` (summed in parallel; sums do not depend
/// on the order), and the endpoint bound.
pub(crate) fn lane_loads(phase: &Phase, fabric: &Fabric) -> LaneLoads {
    let n = phase.tile_count as usize;
    // Per tile: [all words sent, Paired64 words sent, all received, Paired64 received].
    let words = phase
        .transfers
        .par_iter()
        .with_min_len(LOADS_PER_TASK)
        .fold(
            || vec![[0u64; 4]; n],
            |mut words, t| {
                let w = u64::from(t.words);
                let wide = t.width == Width::Paired64;
                if let Some(s) = words.get_mut(t.source.as_u32() as usize) {
                    s[0] += w;
                    if wide {
                        s[1] += w;
                    }
                }
                for &(d, _) in &t.destinations {
                    if let Some(r) = words.get_mut(d.as_u32() as usize) {
                        r[2] += w;
                        if wide {
                            r[3] += w;
                        }
                    }
                }
                words
            },
        )
        .reduce_with(|mut a, b| {
            for (x, y) in a.iter_mut().zip(b) {
                for k in 0..4 {
                    x[k] += y[k];
                }
            }
            a
        })
        .unwrap_or_else(|| vec![[0u64; 4]; n]);
    let mut bound = 0;
    let mut send = Vec::with_capacity(n);
    for (t, own) in words.iter().enumerate() {
        send.push(own[0] - own[1] + own[1].div_ceil(2));
        let partner = fabric.partner(TileId::from_u32(t as u32)).as_u32() as usize;
        let partner = words.get(partner).copied().unwrap_or([0; 4]);
        for (all, wide) in [(0, 1), (2, 3)] {
            let tile = own[all] - own[wide] + own[wide].div_ceil(2);
            let pair = (own[all] + partner[all]).div_ceil(2);
            bound = bound.max(tile).max(pair);
        }
    }
    LaneLoads {
        send,
        endpoint: bound,
    }
}

/// The endpoint lower bound: the largest, over tiles (and tile pairs when
/// the phase has Paired64 transfers), of cycles a transmit lane or receive
/// port must be busy. Without Paired64 transfers it is the largest number of
/// words a tile sends or receives. Ignores latency, switches and instruction
/// issue.
pub fn endpoint_lower_bound(phase: &Phase, fabric: &Fabric) -> u64 {
    lane_loads(phase, fabric).endpoint
}

/// A stronger valid bound: the endpoint bound plus the fabric latency,
/// because the last word arrives `latency` cycles after it is sent and a
/// phase ends when the last word is written. Receiver switches cost no
/// cycles on IPU21 (the fabric model rejects any other value), so they add
/// nothing; multicast conflicts are not counted beyond the per-tile loads,
/// because fanout splitting can always trade them for sender time.
pub fn stronger_lower_bound(phase: &Phase, fabric: &Fabric) -> u64 {
    if phase.transfers.is_empty() {
        return 0;
    }
    endpoint_lower_bound(phase, fabric) + u64::from(fabric.latency_cycles())
}

/// A bound that accounts for multicast: the stronger bound, raised where a
/// sender must stay silent while multicasts cover all its receivers.
///
/// Let `S_x` be the lane cycles tile `x` needs at least (as in the endpoint
/// bound) and `H` the send horizon (the horizon minus the latency). Take a
/// sender `a` with receivers `Dest(a)` (every destination of every transfer
/// from `a`), and call a Word32 transfer `t` from another tile `b`
/// *covering* when its destinations include all of `Dest(a)`.
///
/// *Claim:* `H ≥ S_a + Σ_b max(0, W_ab − (H − S_b))`, where `W_ab` is the
/// words of `b`'s covering transfers.
///
/// *Proof.* Each word of a covering transfer is sent either once, to all its
/// destinations, or in two or more copies. Let `u_b` be the words of `b`'s
/// covering transfers sent once. (1) In a cycle where such a single copy is
/// sent, every tile of `Dest(a)` listens to `b`, and a receive port listens
/// to one lane per cycle, so no word `a` sends in that cycle reaches anyone;
/// `a` needs `S_a` cycles in which something it sends is received. Two such
/// copies never share a cycle, whether from one sender (one lane, one item
/// per cycle) or from two (both are heard by the non-empty `Dest(a)`).
/// This uses the fabric's constant latency: a copy is heard by all its
/// receivers in one cycle, and `a`'s words sent in that cycle arrive then
/// too. So
/// `H ≥ S_a + Σ_b u_b`. (2) Every covering word of `b` sent in several
/// copies costs `b` a lane cycle beyond the one `S_b` counts, so
/// `H ≥ S_b + (W_ab − u_b)`, that is `u_b ≥ W_ab − (H − S_b)`, and
/// `u_b ≥ 0`. Together they give the claim. Paired64 transfers are left
/// out of `W_ab` (fewer terms only weaken the claim), and `S_x` already
/// allows for them being sent wide. ∎
///
/// The right side does not grow with `H`, so the least `H` that satisfies
/// the claim is found by bisection; the bound is the largest such `H` over
/// all senders, or the endpoint bound if larger, plus the latency. Finding
/// covering transfers costs a bit-set test per (transfer, sender whose
/// first receiver the transfer reaches and whose receivers are no more than
/// the transfer's destinations).
pub fn multicast_lower_bound(phase: &Phase, fabric: &Fabric) -> u64 {
    multicast_bound_of(phase, fabric, &lane_loads(phase, fabric))
}

/// [`multicast_lower_bound`] of `phase`, whose [`lane_loads`] are `loads`.
pub(crate) fn multicast_bound_of(phase: &Phase, fabric: &Fabric, loads: &LaneLoads) -> u64 {
    if phase.transfers.is_empty() {
        return 0;
    }
    let (send, endpoint) = (&loads.send, loads.endpoint);
    let latency = u64::from(fabric.latency_cycles());
    let n = phase.tile_count as usize;
    if n == 0 {
        // No tile can send: only the stronger bound's terms apply.
        return endpoint.saturating_add(latency);
    }
    let words_per_set = n.div_ceil(64);
    let in_range = |tile: TileId| (tile.as_u32() as usize) < n;
    // Each sender's receivers as a bit set, with their number and the first
    // (OR-ed in parallel: the sets do not depend on the order).
    let dest_bits = phase
        .transfers
        .par_iter()
        .with_min_len(LOADS_PER_TASK)
        .fold(
            || vec![0u64; n * words_per_set],
            |mut dest_bits, t| {
                if in_range(t.source) {
                    let row = t.source.as_u32() as usize * words_per_set;
                    for &(d, _) in &t.destinations {
                        if in_range(d) {
                            let d = d.as_u32() as usize;
                            dest_bits[row + d / 64] |= 1 << (d % 64);
                        }
                    }
                }
                dest_bits
            },
        )
        .reduce_with(|mut a, b| {
            a.iter_mut().zip(b).for_each(|(x, y)| *x |= y);
            a
        })
        .unwrap_or_else(|| vec![0u64; n * words_per_set]);
    let mut dest_count = vec![0u32; n];
    let mut by_first: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (a, set) in dest_bits.chunks_exact(words_per_set).enumerate() {
        dest_count[a] = set.iter().map(|w| w.count_ones()).sum();
        if let Some((k, w)) = set.iter().enumerate().find(|(_, w)| **w != 0) {
            by_first[k * 64 + w.trailing_zeros() as usize].push(a as u32);
        }
    }
    // (sender a, covering source b, words) for every covering transfer,
    // found in parallel and sorted (equal entries are interchangeable).
    let mut covers: Vec<(u32, u32, u64)> = phase
        .transfers
        .par_iter()
        .filter(|t| t.width == Width::Word32 && t.destinations.len() >= 2 && in_range(t.source))
        .map_init(
            || vec![0u64; words_per_set],
            |bits, t| {
                bits.iter_mut().for_each(|w| *w = 0);
                for &(d, _) in &t.destinations {
                    if in_range(d) {
                        let d = d.as_u32() as usize;
                        bits[d / 64] |= 1 << (d % 64);
                    }
                }
                let fanout = bits.iter().map(|w| w.count_ones()).sum::<u32>();
                let b = t.source.as_u32();
                let mut found: SmallVec<[(u32, u32, u64); 2]> = SmallVec::new();
                for &(r, _) in &t.destinations {
                    let Some(senders) = by_first.get(r.as_u32() as usize) else {
                        continue;
                    };
                    for &a in senders {
                        let row = a as usize * words_per_set;
                        let covered = a != b
                            && dest_count[a as usize] <= fanout
                            && dest_bits[row..row + words_per_set]
                                .iter()
                                .zip(bits.iter())
                                .all(|(need, have)| need & !have == 0);
                        if covered {
                            found.push((a, b, u64::from(t.words)));
                        }
                    }
                }
                found
            },
        )
        .flatten_iter()
        .collect();
    covers.sort_unstable();
    let mut best = endpoint;
    let mut terms: Vec<(u64, u64)> = Vec::new();
    for group in covers.chunk_by(|x, y| x.0 == y.0) {
        terms.clear();
        for same in group.chunk_by(|x, y| x.1 == y.1) {
            let words = same.iter().fold(0u64, |sum, c| sum.saturating_add(c.2));
            terms.push((send[same[0].1 as usize], words));
        }
        let own = send[group[0].0 as usize];
        let need = |h: u64| {
            terms.iter().fold(own, |sum, &(s_b, w)| {
                sum.saturating_add(w.saturating_sub(h.saturating_sub(s_b)))
            })
        };
        // The least h with need(h) <= h lies in [own, need(own)].
        let (mut lo, mut hi) = (own, need(own));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if need(mid) <= mid {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        best = best.max(lo);
    }
    best.saturating_add(latency)
}
