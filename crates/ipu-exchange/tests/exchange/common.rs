//! Helpers shared by the test modules: small phases and a memory model.

use std::collections::HashMap;

use ipu_exchange::*;
use ipu_layout::TileId;

/// The IPU21 fabric.
pub fn fabric() -> Fabric {
    Fabric::ipu21().expect("the embedded device description parses")
}

/// Replays `s`'s rows and asserts that every destination holds its
/// transfer's words and that the replay ends by the horizon. Returns the
/// words written.
pub fn replay_moves_every_word(phase: &Phase, fabric: &Fabric, s: &Schedule) -> u64 {
    let mut memory = SparseMemory::default();
    let stats = replay(s.rows(), fabric, &mut memory).expect("rows replay");
    for t in &phase.transfers {
        for &(d, address) in &t.destinations {
            for k in 0..t.words {
                let src = t.source_word_address(k).unwrap();
                let got = memory.read_word(d, address + 4 * k).unwrap();
                assert_eq!(got, initial_word(t.source.as_u32(), src));
            }
        }
    }
    assert!(stats.cycles <= s.horizon());
    stats.words_written
}

/// Schedules, checks with the checker, and asserts the bounds.
pub fn schedule_and_check(phase: &Phase, fabric: &Fabric, config: &ScheduleConfig) -> Schedule {
    let s = schedule(phase, fabric, config).expect("valid phases schedule");
    assert!(
        s.endpoint_lower_bound() <= s.horizon(),
        "endpoint bound above horizon"
    );
    if s.stronger_lower_bound() > s.horizon() {
        eprintln!(
            "SNAP {}",
            Snapshot::from_phases(phase.tile_count, std::slice::from_ref(phase)).to_json()
        );
    }
    assert!(
        s.stronger_lower_bound() <= s.horizon(),
        "stronger bound above horizon: {} > {} ({:?}, ordinary {}, paired {:?}, endpoint {})",
        s.stronger_lower_bound(),
        s.horizon(),
        s.kind(),
        s.ordinary_horizon(),
        s.paired_horizon(),
        s.endpoint_lower_bound()
    );
    assert!(s.endpoint_lower_bound() <= s.stronger_lower_bound());
    assert!(
        s.stronger_lower_bound() <= s.multicast_lower_bound()
            && s.multicast_lower_bound() <= s.horizon(),
        "multicast bound {} outside [stronger {}, horizon {}]",
        s.multicast_lower_bound(),
        s.stronger_lower_bound(),
        s.horizon()
    );
    assert_eq!(
        s.multicast_lower_bound(),
        multicast_lower_bound(phase, fabric).max(s.stronger_lower_bound())
    );
    match check_schedule(phase, fabric, s.rows()) {
        // The horizon the rows run to is the one the scheduler reports.
        Ok(checked) => assert_eq!(checked.horizon, s.horizon()),
        Err(errors) => panic!(
            "checker rejects the schedule: {:#?}",
            &errors[..errors.len().min(10)]
        ),
    }
    s
}

/// Tile memories as a sparse map, with every untouched word reading as a
/// value derived from its tile and address.
#[derive(Debug, Default)]
pub struct SparseMemory {
    pub words: HashMap<(u32, u32), u32>,
}

pub fn initial_word(tile: u32, address: u32) -> u32 {
    tile.wrapping_mul(0x9e37_79b9) ^ address.wrapping_mul(0x85eb_ca6b)
}

impl ExchangeMemory for SparseMemory {
    fn read_word(&self, tile: TileId, byte_address: u32) -> Result<u32, MemoryError> {
        Ok(self
            .words
            .get(&(tile.as_u32(), byte_address))
            .copied()
            .unwrap_or_else(|| initial_word(tile.as_u32(), byte_address)))
    }
    fn write_word(
        &mut self,
        tile: TileId,
        byte_address: u32,
        word: u32,
    ) -> Result<(), MemoryError> {
        self.words.insert((tile.as_u32(), byte_address), word);
        Ok(())
    }
}
