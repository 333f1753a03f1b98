//! Lower bounds on a phase's horizon.
//!
//! Both bounds hold for every schedule the crate's model admits, ordinary
//! or paired, so `bound ≤ horizon` is a property tests can assert.
//!
//! Per cycle a tile's transmit lane carries one word and its receive port
//! takes one word. An ordinary schedule sends everything as 32-bit words, so
//! a tile needs at least (words it sends) cycles and (words it receives)
//! cycles. A paired schedule may send Paired64 transfers as 64-bit items,
//! which occupy the lanes of both tiles of a pair `{t, t ^ 2}` for one cycle
//! per two words; then each tile's lane is busy at least for its Word32
//! words plus half the Paired64 words of the pair, and likewise for receive
//! ports. The endpoint bound is the smaller of the two maxima (the
//! scheduler keeps the better kind).

use crate::fabric::Fabric;
use crate::model::{Phase, Width};

/// Per-tile lane loads for both schedule kinds.
struct Loads {
    ordinary: u64,
    paired: Option<u64>,
}

fn loads(phase: &Phase) -> Loads {
    let n = phase.tile_count as usize;
    let mut sent = vec![0u64; n];
    let mut received = vec![0u64; n];
    let mut sent64 = vec![0u64; n];
    let mut received64 = vec![0u64; n];
    let mut any_paired = false;
    for t in &phase.transfers {
        let words = u64::from(t.words);
        let wide = t.width == Width::Paired64;
        any_paired |= wide;
        if let Some(s) = sent.get_mut(t.source.as_u32() as usize) {
            *s += words;
            if wide {
                sent64[t.source.as_u32() as usize] += words;
            }
        }
        for &(d, _) in &t.destinations {
            if let Some(r) = received.get_mut(d.as_u32() as usize) {
                *r += words;
                if wide {
                    received64[d.as_u32() as usize] += words;
                }
            }
        }
    }
    let ordinary = sent.iter().chain(&received).copied().max().unwrap_or(0);
    let paired = any_paired.then(|| {
        let lane = |all: &[u64], wide: &[u64], t: usize| {
            let partner = t ^ 2;
            let partner_wide = wide.get(partner).copied().unwrap_or(0);
            // Word32 words of t, plus one cycle per two Paired64 words of
            // either tile of the pair (rounded up).
            (all[t] - wide[t]) + (wide[t] + partner_wide).div_ceil(2)
        };
        (0..n)
            .map(|t| lane(&sent, &sent64, t).max(lane(&received, &received64, t)))
            .max()
            .unwrap_or(0)
    });
    Loads { ordinary, paired }
}

/// The endpoint lower bound: the largest, over tiles, of cycles its
/// transmit lane or receive port must be busy, in the better of the
/// ordinary and paired models. Ignores latency, switches and instruction
/// issue.
pub fn endpoint_lower_bound(phase: &Phase) -> u64 {
    let l = loads(phase);
    l.paired.map_or(l.ordinary, |p| p.min(l.ordinary))
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
    endpoint_lower_bound(phase) + u64::from(fabric.latency_cycles())
}
