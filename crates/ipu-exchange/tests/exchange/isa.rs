//! Instruction encodings: the recovered bit layouts, and encode/decode
//! round trips for every instruction.

use ipu_exchange::isa::*;
use ipu_exchange::{Instr, Xpic, decode, row_end};
use ipu_layout::TileId;
use proptest::prelude::*;

fn encode(i: Instr) -> Vec<u32> {
    let mut out = Vec::new();
    i.encode(&mut out).expect("fields fit");
    out
}

#[test]
fn encodings_match_the_recovered_layouts() {
    assert_eq!(encode(Instr::Delay { cycles: 1 }), [0x40a0_0000]);
    assert_eq!(encode(Instr::Delay { cycles: 0x80000 }), [0x40a7_ffff]);
    // delaypic(e=3, sel=0, v=0x1234)
    assert_eq!(
        encode(Instr::DelayPic {
            cycles: 3,
            sel: 0,
            value: 0x1234
        }),
        [0x6000_0000 | (2 << 19) | 0x1234]
    );
    // delayxpic(e=5, sel=1 (disconnect), v=0)
    assert_eq!(
        encode(Instr::DelayXpic {
            cycles: 5,
            xpic: Xpic::Disconnected
        }),
        [0x6400_0000 | (4 << 14) | 0x2000]
    );
    assert_eq!(
        encode(Instr::DelayXpic {
            cycles: 1,
            xpic: Xpic::Listen(TileId::from_u32(1471))
        }),
        [0x6400_0000 | 1471]
    );
    // send(w=64, addr=0x13000 words, sctl=3)
    assert_eq!(
        encode(Instr::Send {
            items: 64,
            word_address: 0x13000,
            sctl: 3
        }),
        [0x7800_0000 | (63 << 21) | (0x13000 << 3) | 3]
    );
    // sendoff(w=4096, d=5, sctl=7): the high six bits of w-1 go to 14..19.
    assert_eq!(
        encode(Instr::SendOff {
            items: 4096,
            offset: 5,
            sctl: 7
        }),
        [0x7000_0000 | (63 << 21) | (63 << 14) | (5 << 3) | 7]
    );
    assert_eq!(
        encode(Instr::SendPic {
            items: 2,
            dirs: 3,
            pic: 0x24000
        }),
        [0x7010_0000 | (1 << 21) | (3 << 18) | 0x24000]
    );
    assert_eq!(
        encode(Instr::SendPicP {
            items: 1,
            word_address: 0x13000,
            sctl: 3,
            xpic: Some(Xpic::Listen(TileId::from_u32(9))),
            pic: 0x24000,
        }),
        [0xf800_0000 | (0x13000 << 3) | 3, (9 << 18) | 0x24000]
    );
}

#[test]
fn out_of_range_fields_are_refused() {
    let mut out = Vec::new();
    assert!(
        Instr::Send {
            items: 65,
            word_address: 0,
            sctl: 3
        }
        .encode(&mut out)
        .is_err()
    );
    assert!(Instr::Delay { cycles: 0 }.encode(&mut out).is_err());
    assert!(
        Instr::SendOff {
            items: 1,
            offset: 2048,
            sctl: 3
        }
        .encode(&mut out)
        .is_err()
    );
    assert!(
        Instr::DelayXpic {
            cycles: 1,
            xpic: Xpic::Listen(TileId::from_u32(8192))
        }
        .encode(&mut out)
        .is_err()
    );
    assert!(out.is_empty());
}

#[test]
fn sendpicp_must_be_aligned_and_complete() {
    let pair = encode(Instr::SendPicP {
        items: 1,
        word_address: 0,
        sctl: 0,
        xpic: None,
        pic: 0,
    });
    let mut row = encode(Instr::Delay { cycles: 1 });
    row.extend(&pair);
    assert!(matches!(
        decode(&row),
        Err(DecodeError::Misaligned { index: 1 })
    ));
    assert!(matches!(
        decode(&pair[..1]),
        Err(DecodeError::Truncated { index: 0 })
    ));
}

fn xpic() -> impl Strategy<Value = Xpic> {
    prop_oneof![
        Just(Xpic::Disconnected),
        (0u32..8192).prop_map(|t| Xpic::Listen(TileId::from_u32(t))),
    ]
}

fn instr() -> impl Strategy<Value = Instr> {
    prop_oneof![
        (1u32..=MAX_DELAY_CYCLES).prop_map(|cycles| Instr::Delay { cycles }),
        (1u32..=MAX_DELAYPIC_CYCLES, 0u32..=MAX_WORD_ADDRESS).prop_map(|(cycles, value)| {
            Instr::DelayPic {
                cycles,
                sel: 0,
                value,
            }
        }),
        (1u32..=MAX_DELAYXPIC_CYCLES, xpic())
            .prop_map(|(cycles, xpic)| Instr::DelayXpic { cycles, xpic }),
        (1u32..=MAX_SEND_ITEMS, 0u32..=MAX_WORD_ADDRESS, 0u32..8).prop_map(
            |(items, word_address, sctl)| Instr::Send {
                items,
                word_address,
                sctl
            }
        ),
        (1u32..=MAX_SENDOFF_ITEMS, 0u32..=MAX_SENDOFF_OFFSET, 0u32..8).prop_map(
            |(items, offset, sctl)| Instr::SendOff {
                items,
                offset,
                sctl
            }
        ),
        (1u32..=MAX_SEND_ITEMS, 0u32..4, 0u32..=MAX_WORD_ADDRESS)
            .prop_map(|(items, dirs, pic)| Instr::SendPic { items, dirs, pic }),
        (
            1u32..=MAX_SEND_ITEMS,
            0u32..=MAX_WORD_ADDRESS,
            0u32..8,
            proptest::option::of(xpic()),
            0u32..=MAX_WORD_ADDRESS
        )
            .prop_map(|(items, word_address, sctl, xpic, pic)| Instr::SendPicP {
                items,
                word_address,
                sctl,
                xpic,
                pic
            }),
    ]
}

proptest! {
    #[test]
    fn every_instruction_round_trips(i in instr()) {
        let words = encode(i);
        prop_assert_eq!(words.len(), i.words());
        let (back, used) = Instr::decode_at(&words, 0).expect("decodes");
        prop_assert_eq!(back, i);
        prop_assert_eq!(used, words.len());
    }

    #[test]
    fn decodable_words_re_encode_to_themselves(w in any::<u32>(), w2 in any::<u32>()) {
        let row = [w, w2];
        if let Ok((i, used)) = Instr::decode_at(&row, 0) {
            prop_assert_eq!(&encode(i)[..], &row[..used]);
        }
    }

    #[test]
    fn arbitrary_rows_never_panic_the_decoder(row in proptest::collection::vec(any::<u32>(), 0..32)) {
        if let Ok(t) = decode(&row) {
            let cycles: u64 = t.windows.iter().map(|w| u64::from(w.cycles)).sum();
            prop_assert_eq!(cycles, t.end());
        }
        prop_assert_eq!(row_end(&row), decode(&row).map(|t| t.end()));
    }

    #[test]
    fn a_row_ends_where_its_timeline_does(instrs in proptest::collection::vec(instr(), 0..24)) {
        // Rows of valid instructions (a sendpicp at an odd word, or a
        // pointer running past memory, fails both ways alike).
        let row: Vec<u32> = instrs.into_iter().flat_map(encode).collect();
        prop_assert_eq!(row_end(&row), decode(&row).map(|t| t.end()));
    }
}
