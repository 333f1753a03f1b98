//! Generated phases of every family, scheduled and checked.

use ipu_exchange::generate::{GenConfig, generate_phase};
use ipu_exchange::*;

use crate::common::{SparseMemory, fabric, initial_word, schedule_and_check};

fn small(transfers: u32, bound: u32, fanout: u32, paired: u32, seed: u64) -> GenConfig {
    GenConfig {
        tile_count: 64,
        transfers,
        target_bound: bound,
        max_fanout: fanout,
        paired_percent: paired,
        balanced_sources: seed % 2 == 0,
        seed,
    }
}

#[test]
fn unicast_small_phases_reach_near_the_bound() {
    let fabric = fabric();
    let mut horizon = 0;
    let mut bound = 0;
    for seed in 0..8 {
        let phase = generate_phase(&small(200 + 50 * seed as u32, 500, 1, 0, seed));
        let s = schedule_and_check(&phase, &fabric, &ScheduleConfig::default());
        horizon += s.horizon();
        bound += s.stronger_lower_bound();
    }
    eprintln!("horizon {horizon} bound {bound}");
    assert!(
        horizon * 100 <= bound * 102,
        "horizon {horizon} vs bound {bound}"
    );
}

#[test]
fn multicast_and_paired_phases_check() {
    let fabric = fabric();
    for seed in 0..6 {
        let phase = generate_phase(&small(300, 400, 4, 30, seed));
        schedule_and_check(&phase, &fabric, &ScheduleConfig::default());
    }
}

#[test]
fn replay_moves_the_right_words() {
    let fabric = fabric();
    for seed in 0..4 {
        let phase = generate_phase(&small(150, 300, 3, 40, 100 + seed));
        let s = schedule_and_check(&phase, &fabric, &ScheduleConfig::default());
        let mut memory = SparseMemory::default();
        let stats = replay(s.rows(), &fabric, &mut memory).expect("rows replay");
        let mut expected_words = 0u64;
        for t in &phase.transfers {
            for &(d, address) in &t.destinations {
                for k in 0..t.words {
                    let src = t.source_word_address(k).unwrap();
                    let got = memory.read_word(d, address + 4 * k).unwrap();
                    assert_eq!(got, initial_word(t.source.as_u32(), src));
                    expected_words += 1;
                }
            }
        }
        assert_eq!(stats.words_written, expected_words);
        assert!(stats.cycles <= s.horizon());
    }
}
