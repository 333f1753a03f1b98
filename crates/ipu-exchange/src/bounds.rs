//! Lower bounds on a phase's horizon.
//!
//! Both bounds hold for every schedule the crate's model admits, ordinary
//! or paired, so `bound ≤ horizon` is a property tests can assert.
//!
//! Per cycle a tile's transmit lane carries one word and its receive port
//! takes one word. A Word32 transfer costs its tile one lane cycle per word.
//! A Paired64 transfer costs at least one cycle per two words on its own
//! tile's lane (sent wide; sent as 32-bit words it costs one per word), and
//! whichever way it goes it uses one lane cycle of the pair `{t, partner}`
//! ([`Fabric::partner`]) per word, of which the pair has two per cycle. So a tile needs at least
//! `Word32 words + Paired64 words / 2` cycles and a pair at least
//! `(words of both) / 2`; receive ports likewise. Without Paired64
//! transfers this is exactly "the largest number of words a tile sends or
//! receives".
use ipu_layout::TileId;

use crate::fabric::Fabric;
use crate::model::{Phase, Width};

/// The largest per-tile or per-pair lane (or port) occupancy.
fn lane_bound(phase: &Phase, fabric: &Fabric) -> u64 {
    let n = phase.tile_count as usize;
    // Per tile: [all words sent, Paired64 words sent, all received, Paired64 received].
    let mut words = vec![[0u64; 4]; n];
    for t in &phase.transfers {
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
    }
    let mut bound = 0;
    for (t, own) in words.iter().enumerate() {
        let partner = fabric.partner(TileId::from_u32(t as u32)).as_u32() as usize;
        let partner = words.get(partner).copied().unwrap_or([0; 4]);
        for (all, wide) in [(0, 1), (2, 3)] {
            let tile = own[all] - own[wide] + own[wide].div_ceil(2);
            let pair = (own[all] + partner[all]).div_ceil(2);
            bound = bound.max(tile).max(pair);
        }
    }
    bound
}

/// The endpoint lower bound: the largest, over tiles (and tile pairs when
/// the phase has Paired64 transfers), of cycles a transmit lane or receive
/// port must be busy. Without Paired64 transfers it is the largest number of
/// words a tile sends or receives. Ignores latency, switches and instruction
/// issue.
pub fn endpoint_lower_bound(phase: &Phase, fabric: &Fabric) -> u64 {
    lane_bound(phase, fabric)
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
