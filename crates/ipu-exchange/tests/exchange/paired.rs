//! Paired64 transfers: the plan that sends only some of them wide.

use ipu_exchange::*;
use ipu_layout::TileId;

use crate::common::{fabric, schedule_and_check};

/// Tile 0 receives 1200 Paired64 words and its partner, tile 2, 600 32-bit
/// words. All wide, the wide items hold both ports for 600 cycles and tile
/// 2's words wait (1200); none wide, tile 0 takes 1200 cycles. Half of
/// tile 0's words wide, beside tile 2's, meets the pair bound: 900.
#[test]
fn some_paired_transfers_go_wide_to_balance_a_pair() {
    let fabric = fabric();
    assert_eq!(fabric.partner(TileId::from_u32(0)), TileId::from_u32(2));
    let mut transfers = Vec::new();
    for k in 0..6u32 {
        transfers.push(Transfer {
            source: TileId::from_u32(4),
            source_addresses: smallvec::smallvec![0x4c000 + k * 800],
            destinations: smallvec::smallvec![(TileId::from_u32(0), 0x90000 + k * 800)],
            words: 200,
            width: Width::Paired64,
        });
    }
    transfers.push(Transfer {
        source: TileId::from_u32(5),
        source_addresses: smallvec::smallvec![0x4c000],
        destinations: smallvec::smallvec![(TileId::from_u32(2), 0x90000)],
        words: 600,
        width: Width::Word32,
    });
    let phase = Phase {
        tile_count: 8,
        transfers,
    };
    let s = schedule_and_check(&phase, &fabric, &ScheduleConfig::default());
    let latency = u64::from(fabric.latency_cycles());
    assert_eq!(s.endpoint_lower_bound(), 900);
    assert_eq!(s.ordinary_horizon(), 1200 + latency);
    assert_eq!(s.kind(), ScheduleKind::Paired);
    assert!(s.horizon() <= 900 + latency + 9, "{}", s.horizon());
}
