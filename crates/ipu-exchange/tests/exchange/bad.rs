//! Hand-made rows: a correct set the checker accepts, and known-bad
//! variants it must reject with the right errors.

use ipu_exchange::*;
use ipu_layout::TileId;

use crate::common::{SparseMemory, fabric};

const SRC: u32 = 0x4c000;
const DST: u32 = 0x90000;

fn tile(t: u32) -> TileId {
    TileId::from_u32(t)
}

/// Tile 0 sends 4 words to tile 1.
fn phase() -> Phase {
    Phase {
        tile_count: 4,
        transfers: vec![Transfer {
            source: tile(0),
            source_addresses: smallvec::smallvec![SRC],
            destinations: smallvec::smallvec![(tile(1), DST)],
            words: 4,
            width: Width::Word32,
        }],
    }
}

fn row(instrs: &[Instr]) -> Vec<u32> {
    let mut out = Vec::new();
    for i in instrs {
        i.encode(&mut out).expect("fields fit");
    }
    out
}

fn send(items: u32, byte_address: u32, sctl: u32) -> Instr {
    Instr::Send {
        items,
        word_address: byte_address / 4,
        sctl,
    }
}

fn listen(t: u32) -> Instr {
    Instr::DelayXpic {
        cycles: 1,
        xpic: Xpic::Listen(tile(t)),
    }
}

fn pic(cycles: u32, byte_address: u32) -> Instr {
    Instr::DelayPic {
        cycles,
        sel: 0,
        value: byte_address / 4,
    }
}

/// The correct rows with latency 12: tile 1 listens from cycle 0, sets its
/// pointer at cycle 1 and runs until the last word arrives (cycle 15).
fn good() -> Vec<Vec<u32>> {
    vec![
        row(&[send(4, SRC, 3)]),
        row(&[listen(0), pic(15, DST)]),
        Vec::new(),
        Vec::new(),
    ]
}

/// The checker's verdict, which must be the same through the entry point
/// for an already validated phase.
fn check(rows: Vec<Vec<u32>>) -> Result<CheckedRows, Vec<ExchangeCheckError>> {
    let (phase, fabric) = (phase(), fabric());
    let rows = EncodedRows::from_tile_rows(rows);
    let verdict = check_schedule(&phase, &fabric, &rows);
    let valid = ValidPhase::new(&phase).expect("the phase is valid");
    assert_eq!(check_valid_schedule(valid, &fabric, &rows), verdict);
    verdict
}

#[test]
fn hand_made_rows_pass() {
    // The phase ends when tile 1's row does, after the last arrival.
    assert_eq!(check(good()), Ok(CheckedRows { horizon: 16 }));
    assert_eq!(fabric().latency_cycles(), 12);
}

#[test]
fn wrong_pointer_is_a_stray_write_and_missing_words() {
    let mut rows = good();
    rows[1] = row(&[listen(0), pic(15, DST + 4)]);
    let errors = check(rows).unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, ExchangeCheckError::StrayWrite { .. })),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| matches!(
            e,
            ExchangeCheckError::Missing {
                first: 0,
                end: 1,
                ..
            }
        )),
        "{errors:?}"
    );
}

#[test]
fn words_split_by_the_receivers_own_instructions_are_checked_as_one_run() {
    // Tile 1's row changes window at cycle 14, while words arrive in
    // cycles 12..16: the words before and after are one run.
    let mut rows = good();
    rows[1] = row(&[listen(0), pic(13, DST), Instr::Delay { cycles: 2 }]);
    assert_eq!(check(rows.clone()), Ok(CheckedRows { horizon: 16 }));
    // One word too far along: words 1..4 get the source words 0..3, the
    // last word (arriving in cycle 15) is stray and word 0 is missing —
    // each reported once, not once per window.
    rows[1] = row(&[listen(0), pic(13, DST + 4), Instr::Delay { cycles: 2 }]);
    assert_eq!(
        check(rows).unwrap_err(),
        vec![
            ExchangeCheckError::WrongSourceAddress {
                transfer: 0,
                tile: tile(1),
                word: 1,
                expected: SRC + 4,
                got: SRC,
            },
            ExchangeCheckError::StrayWrite {
                tile: tile(1),
                sender: tile(0),
                byte_address: DST + 16,
                words: 1,
                cycle: 15,
            },
            ExchangeCheckError::Missing {
                transfer: 0,
                tile: tile(1),
                first: 0,
                end: 1,
            },
        ]
    );
}

#[test]
fn listening_to_the_wrong_tile_loses_the_words() {
    let mut rows = good();
    rows[1] = row(&[listen(2), pic(15, DST)]);
    let errors = check(rows).unwrap_err();
    assert_eq!(
        errors,
        vec![ExchangeCheckError::Missing {
            transfer: 0,
            tile: tile(1),
            first: 0,
            end: 4
        }]
    );
}

#[test]
fn a_row_that_ends_early_misses_the_last_words() {
    let mut rows = good();
    rows[1] = row(&[listen(0), pic(13, DST)]);
    let errors = check(rows).unwrap_err();
    assert_eq!(
        errors,
        vec![ExchangeCheckError::Missing {
            transfer: 0,
            tile: tile(1),
            first: 2,
            end: 4
        }]
    );
}

#[test]
fn sending_from_the_wrong_address_is_reported() {
    let mut rows = good();
    rows[0] = row(&[send(4, SRC + 8, 3)]);
    let errors = check(rows).unwrap_err();
    assert!(
        matches!(
            errors.as_slice(),
            [ExchangeCheckError::WrongSourceAddress { transfer: 0, word: 0, expected: SRC, got, .. }] if *got == SRC + 8
        ),
        "{errors:?}"
    );
}

#[test]
fn a_zero_direction_send_sends_nothing() {
    let mut rows = good();
    rows[0] = row(&[send(4, SRC, 0)]);
    let errors = check(rows).unwrap_err();
    assert!(
        matches!(
            errors.as_slice(),
            [ExchangeCheckError::Missing {
                first: 0,
                end: 4,
                ..
            }]
        ),
        "{errors:?}"
    );
}

#[test]
fn paired_send_conflicts_with_the_partner_and_word32() {
    let mut rows = good();
    // Two 64-bit items carry the four words, but tile 2 (the partner)
    // sends in the same cycles.
    rows[0] = row(&[send(2, SRC, 7)]);
    rows[1] = row(&[listen(0), pic(13, DST)]);
    rows[2] = row(&[send(2, SRC, 3)]);
    let errors = check(rows).unwrap_err();
    assert!(errors.iter().any(|e| matches!(e, ExchangeCheckError::PartnerSendConflict { tile: t, .. } if *t == tile(0))), "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, ExchangeCheckError::WideWord32 { transfer: 0, .. })),
        "{errors:?}"
    );
}

#[test]
fn paired_receive_blocks_the_partner_port() {
    let phase = Phase {
        tile_count: 4,
        transfers: vec![
            Transfer {
                source: tile(0),
                source_addresses: smallvec::smallvec![SRC],
                destinations: smallvec::smallvec![(tile(1), DST)],
                words: 4,
                width: Width::Paired64,
            },
            Transfer {
                source: tile(2),
                source_addresses: smallvec::smallvec![SRC],
                destinations: smallvec::smallvec![(tile(3), DST)],
                words: 2,
                width: Width::Word32,
            },
        ],
    };
    // Tile 0 sends wide to tile 1 while tile 2 sends to tile 3 (= 1 ^ 2):
    // the sends also clash on the lane tile 0 borrows from tile 2.
    let rows = vec![
        row(&[send(2, SRC, 7)]),
        row(&[listen(0), pic(13, DST)]),
        row(&[send(2, SRC, 3)]),
        row(&[listen(2), pic(13, DST)]),
    ];
    let errors = check_schedule(&phase, &fabric(), &EncodedRows::from_tile_rows(rows)).unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, ExchangeCheckError::PartnerReceiveConflict { .. })),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, ExchangeCheckError::PartnerSendConflict { .. })),
        "{errors:?}"
    );
}

#[test]
fn listening_to_a_missing_tile_is_reported() {
    let mut rows = good();
    rows[2] = row(&[listen(9)]);
    let errors = check(rows).unwrap_err();
    assert!(
        matches!(
            errors.as_slice(),
            [ExchangeCheckError::UnknownSource { .. }]
        ),
        "{errors:?}"
    );
}

#[test]
fn undecodable_rows_are_reported_per_tile() {
    let mut rows = good();
    rows[2] = vec![0];
    rows[3] = row(&[Instr::Delay { cycles: 1 }]);
    rows[3].extend(row(&[Instr::SendPicP {
        items: 1,
        word_address: 0,
        sctl: 0,
        xpic: None,
        pic: 0,
    }]));
    let errors = check(rows).unwrap_err();
    assert!(errors.iter().any(|e| matches!(e, ExchangeCheckError::Decode { tile: t, error: DecodeError::Unknown { .. } } if *t == tile(2))), "{errors:?}");
    assert!(errors.iter().any(|e| matches!(e, ExchangeCheckError::Decode { tile: t, error: DecodeError::Misaligned { .. } } if *t == tile(3))), "{errors:?}");
}

#[test]
fn double_writes_and_eavesdroppers_are_reported_together() {
    let mut rows = good();
    // Tile 0 sends twice; tile 1 resets its pointer and takes the copy too;
    // tile 3 listens in and writes where nothing should go.
    rows[0] = row(&[send(4, SRC, 3), send(4, SRC, 3)]);
    rows[1] = row(&[listen(0), pic(15, DST), pic(4, DST)]);
    rows[3] = row(&[listen(0), pic(15, DST)]);
    let errors = check(rows).unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, ExchangeCheckError::DoubleWrite { .. })),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, ExchangeCheckError::StrayWrite { tile: t, .. } if *t == tile(3))),
        "{errors:?}"
    );
}

#[test]
fn rows_for_another_tile_count_are_reported() {
    let mut rows = good();
    rows.pop();
    let errors = check(rows).unwrap_err();
    assert!(
        errors.contains(&ExchangeCheckError::TileCount { rows: 3, tiles: 4 }),
        "{errors:?}"
    );
}

#[test]
fn element_hazards_are_checked_when_enabled() {
    // Tile 1 sends from the element it receives into, in the same cycles.
    let phase = Phase {
        tile_count: 4,
        transfers: vec![
            phase().transfers[0].clone(),
            Transfer {
                source: tile(1),
                source_addresses: smallvec::smallvec![DST + 64],
                destinations: smallvec::smallvec![(tile(3), DST)],
                words: 4,
                width: Width::Word32,
            },
        ],
    };
    let rows = EncodedRows::from_tile_rows(vec![
        row(&[send(4, SRC, 3)]),
        row(&[listen(0), pic(11, DST), send(4, DST + 64, 3)]),
        Vec::new(),
        row(&[listen(1), pic(27, DST)]),
    ]);
    assert!(check_schedule(&phase, &fabric(), &rows).is_ok());
    let strict = fabric().with_memory_element_hazards(true);
    let errors = check_schedule(&phase, &strict, &rows).unwrap_err();
    assert!(
        matches!(
            errors.as_slice(),
            [ExchangeCheckError::ElementHazard { cycle: 12, .. }]
        ),
        "{errors:?}"
    );
}

#[test]
fn a_good_schedule_fails_once_a_word_is_flipped() {
    let phase = crate::props::build_phase(
        8,
        &[
            (0, vec![1, 2], 20, false, false),
            (3, vec![4], 30, true, false),
            (5, vec![0], 7, false, true),
        ],
    );
    let fabric = fabric();
    let s = schedule(&phase, &fabric, &ScheduleConfig::default()).expect("schedules");
    check_schedule(&phase, &fabric, s.rows()).expect("checks");
    // Flip one bit of every word of every row in turn. The checker must
    // reject every flip that changes what lands in memory; a flip it
    // accepts must replay to exactly the same memory (for example a
    // direction bit that still drives the word to every listener).
    let rows: Vec<Vec<u32>> = (0..8).map(|t| s.rows().row(tile(t)).to_vec()).collect();
    let mut reference = SparseMemory::default();
    replay(s.rows(), &fabric, &mut reference).expect("replays");
    let mut caught = 0;
    let mut total = 0;
    for t in 0..rows.len() {
        for w in 0..rows[t].len() {
            for bit in [0, 1, 3, 13, 18, 21, 27] {
                let mut bad = rows.clone();
                bad[t][w] ^= 1 << bit;
                total += 1;
                let bad = EncodedRows::from_tile_rows(bad);
                if check_schedule(&phase, &fabric, &bad).is_err() {
                    caught += 1;
                    continue;
                }
                let mut memory = SparseMemory::default();
                replay(&bad, &fabric, &mut memory).expect("accepted rows replay");
                assert_eq!(memory.words, reference.words, "tile {t} word {w} bit {bit}");
            }
        }
    }
    assert!(
        caught * 2 > total,
        "only {caught} of {total} corruptions caught"
    );
}
