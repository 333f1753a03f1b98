//! The IPU21 supervisor exchange instructions: encoding and decoding.
//!
//! Encodings are the recovered ones in `shared/design/IPU21.md`. Where those
//! leave the meaning open, this crate's interpretation is (and the checker
//! and replay implement exactly this):
//!
//! - A row is executed from cycle 0 of the phase, one instruction after the
//!   other; no two instructions issue together. Every instruction occupies
//!   its event count of cycles (`e` or `w`, at least 1).
//! - Receive state is an XPIC value and a PIC. A 14-bit XPIC value is
//!   `disconnect << 13 | tile`: bit 13 set means "listen to nobody",
//!   otherwise the tile listens to the transmit lane of `tile`. PIC is a
//!   word address (18 bits) that advances by one per 32-bit word and by two
//!   per 64-bit item written. Updates carried by an instruction take effect
//!   at its first cycle, so a word arriving in that cycle already uses them.
//!   Initially XPIC is disconnected and PIC is 0.
//! - `delaypic(e, 0, v)` sets PIC = v; `delayxpic(e, sel, v)` sets XPIC =
//!   `sel << 13 | v`. Both then idle for `e` cycles. `delaypic` with sel = 1
//!   is not used by this model and does not decode.
//! - Sends use a send pointer SP (a word address, initially 0).
//!   `send(w, addr, sctl)` sets SP = addr; `sendoff(w, d, sctl)` adds `d`
//!   words to SP; `sendpic(w, dirs, v)` keeps SP, sends 32-bit items with
//!   direction bits `dirs` and sets PIC = v; `sendpicp` sets SP = addr and,
//!   when `picsel` = 1, both XPIC and PIC from its second word (with
//!   `picsel` = 0, only PIC; its XPIC field must then be 0). Each then
//!   sends `w` items from SP, one per cycle, advancing SP by one word per
//!   32-bit item and two per 64-bit item (sctl bit 2).
//! - sctl bits 0-1 select fabric directions. The model treats the fabric as
//!   one broadcast medium: any non-zero direction drives the word to every
//!   listener; zero sends nothing but still takes the `w` cycles and
//!   advances SP. The encoder always uses 3 for a send.
//! - Every tile's row starts at cycle 0 of the phase (right after the
//!   sync). A tile writes incoming words only while its own row runs; a row
//!   holds only the exchange instructions (the caller appends the return),
//!   and an inactive tile's row is empty.
//! - `sendpicp` must start at an even word index of the row (8-byte
//!   aligned when the row is 8-byte aligned in memory).

use ipu_layout::TileId;

/// The receive mux state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Xpic {
    /// Listening to nobody: nothing is written.
    Disconnected,
    /// Listening to this tile's transmit lane.
    Listen(TileId),
}

/// Largest item count of `send`, `sendpic` and `sendpicp` (6-bit field).
pub const MAX_SEND_ITEMS: u32 = 64;
/// Largest item count of `sendoff` (12-bit field).
pub const MAX_SENDOFF_ITEMS: u32 = 4096;
/// Largest word offset of `sendoff` (11-bit field).
pub const MAX_SENDOFF_OFFSET: u32 = 0x7ff;
/// Largest cycle count of `delay` (19-bit field).
pub const MAX_DELAY_CYCLES: u32 = 1 << 19;
/// Largest cycle count of `delaypic` (7-bit field).
pub const MAX_DELAYPIC_CYCLES: u32 = 128;
/// Largest cycle count of `delayxpic` (12-bit field).
pub const MAX_DELAYXPIC_CYCLES: u32 = 4096;
/// Largest word address of `send`/`sendpicp`/PIC (18-bit field).
pub const MAX_WORD_ADDRESS: u32 = 0x3ffff;

/// sctl bit 2: 64-bit items.
pub const SCTL_WIDE: u32 = 4;
/// sctl bits 0-1: both fabric directions.
pub const SCTL_BOTH: u32 = 3;

/// One decoded supervisor exchange instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Instr {
    /// Idle `cycles` cycles.
    Delay {
        /// 1..=2^19.
        cycles: u32,
    },
    /// Set PIC then idle.
    DelayPic {
        /// 1..=128.
        cycles: u32,
        /// Pointer select (must be 0 in this model).
        sel: u32,
        /// New PIC word address.
        value: u32,
    },
    /// Set XPIC then idle.
    DelayXpic {
        /// 1..=4096.
        cycles: u32,
        /// The XPIC value.
        xpic: Xpic,
    },
    /// Send `items` from `word_address`.
    Send {
        /// 1..=64.
        items: u32,
        /// Word address (SP).
        word_address: u32,
        /// Direction and width bits.
        sctl: u32,
    },
    /// Send `items` from SP + `offset` words.
    SendOff {
        /// 1..=4096.
        items: u32,
        /// 0..=2047 words.
        offset: u32,
        /// Direction and width bits.
        sctl: u32,
    },
    /// Send 32-bit `items` from SP and set PIC.
    SendPic {
        /// 1..=64.
        items: u32,
        /// Direction bits.
        dirs: u32,
        /// New PIC word address.
        pic: u32,
    },
    /// Send `items` from `word_address`, set PIC (and XPIC when `xpic` is
    /// `Some`). Two words.
    SendPicP {
        /// 1..=64.
        items: u32,
        /// Word address (SP).
        word_address: u32,
        /// Direction and width bits.
        sctl: u32,
        /// New XPIC, when picsel = 1.
        xpic: Option<Xpic>,
        /// New PIC word address.
        pic: u32,
    },
}

/// Why an instruction cannot be encoded (a bug in the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A field does not fit its encoding.
    #[error(
        "instruction field `{field}` = {value} does not fit its encoding (a bug in the encoder)"
    )]
    Field {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u32,
    },
    /// An address field of a relocatable row names no word of a transfer.
    #[error(
        "the instruction at row word {index} names an address no transfer holds, so the row cannot move (a bug in the encoder)"
    )]
    Unrelocatable {
        /// Word index of the instruction in its row.
        index: u32,
    },
}

/// Why a row does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The word is not a supervisor exchange instruction of this model.
    #[error(
        "row word {index} is {word:#010x}, which is not an exchange instruction this model knows"
    )]
    Unknown {
        /// Word index in the row.
        index: usize,
        /// The word.
        word: u32,
    },
    /// A `sendpicp` starts at an odd word index.
    #[error("row word {index} starts a sendpicp at an odd word index; it must be 8-byte aligned")]
    Misaligned {
        /// Word index in the row.
        index: usize,
    },
    /// A `sendpicp` is cut off by the end of the row.
    #[error("the row ends inside the sendpicp at word {index}")]
    Truncated {
        /// Word index in the row.
        index: usize,
    },
    /// A reserved field value.
    #[error("row word {index} ({word:#010x}) sets a reserved field: {what}")]
    Reserved {
        /// Word index in the row.
        index: usize,
        /// The word.
        word: u32,
        /// Which field.
        what: &'static str,
    },
    /// Time or an address overflows while decoding.
    #[error("row word {index}: the send pointer leaves the 18-bit word address space")]
    PointerOverflow {
        /// Word index in the row.
        index: usize,
    },
}

fn field(name: &'static str, value: u32, low: u32, high: u32) -> Result<u32, EncodeError> {
    if (low..=high).contains(&value) {
        Ok(value)
    } else {
        Err(EncodeError::Field { field: name, value })
    }
}

fn xpic_bits(xpic: Xpic) -> Result<u32, EncodeError> {
    match xpic {
        Xpic::Disconnected => Ok(1 << 13),
        Xpic::Listen(tile) => field("xpic tile", tile.as_u32(), 0, 0x1fff),
    }
}

/// The XPIC value of 14 bits, or `None` for a disconnect that names a
/// tile (reserved).
fn xpic_from_bits(bits: u32) -> Option<Xpic> {
    if bits & (1 << 13) == 0 {
        Some(Xpic::Listen(ipu_layout::TileId::from_u32(bits & 0x1fff)))
    } else if bits & 0x1fff == 0 {
        Some(Xpic::Disconnected)
    } else {
        None
    }
}

impl Instr {
    /// Cycles the instruction occupies.
    pub fn cycles(&self) -> u32 {
        match *self {
            Instr::Delay { cycles }
            | Instr::DelayPic { cycles, .. }
            | Instr::DelayXpic { cycles, .. } => cycles,
            Instr::Send { items, .. }
            | Instr::SendOff { items, .. }
            | Instr::SendPic { items, .. }
            | Instr::SendPicP { items, .. } => items,
        }
    }

    /// Words the instruction takes in a row.
    pub fn words(&self) -> usize {
        if matches!(self, Instr::SendPicP { .. }) {
            2
        } else {
            1
        }
    }

    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u32>) -> Result<(), EncodeError> {
        match *self {
            Instr::Delay { cycles } => {
                let e = field("delay cycles", cycles, 1, MAX_DELAY_CYCLES)?;
                out.push(0x40a0_0000 | ((e - 1) & 0x7ffff));
            }
            Instr::DelayPic { cycles, sel, value } => {
                let e = field("delaypic cycles", cycles, 1, MAX_DELAYPIC_CYCLES)?;
                let sel = field("delaypic sel", sel, 0, 1)?;
                let v = field("delaypic value", value, 0, MAX_WORD_ADDRESS)?;
                out.push(
                    0x6000_0000 | (((e - 1) << 19) & 0x03f8_0000) | ((sel << 18) & 0x40000) | v,
                );
            }
            Instr::DelayXpic { cycles, xpic } => {
                let e = field("delayxpic cycles", cycles, 1, MAX_DELAYXPIC_CYCLES)?;
                let bits = xpic_bits(xpic)?;
                out.push(0x6400_0000 | (((e - 1) << 14) & 0x03ff_c000) | bits);
            }
            Instr::Send {
                items,
                word_address,
                sctl,
            } => {
                let w = field("send items", items, 1, MAX_SEND_ITEMS)?;
                let a = field("send address", word_address, 0, MAX_WORD_ADDRESS)?;
                let sctl = field("send sctl", sctl, 0, 7)?;
                out.push(
                    0x7800_0000 | (((w - 1) << 21) & 0x07e0_0000) | ((a << 3) & 0x001f_fff8) | sctl,
                );
            }
            Instr::SendOff {
                items,
                offset,
                sctl,
            } => {
                let w = field("sendoff items", items, 1, MAX_SENDOFF_ITEMS)? - 1;
                let d = field("sendoff offset", offset, 0, MAX_SENDOFF_OFFSET)?;
                let sctl = field("sendoff sctl", sctl, 0, 7)?;
                out.push(
                    0x7000_0000
                        | ((w << 21) & 0x07e0_0000)
                        | (((w >> 6) << 14) & 0x000f_c000)
                        | ((d << 3) & 0x3ff8)
                        | sctl,
                );
            }
            Instr::SendPic { items, dirs, pic } => {
                let w = field("sendpic items", items, 1, MAX_SEND_ITEMS)?;
                let sel = field("sendpic dirs", dirs, 0, 3)?;
                let v = field("sendpic value", pic, 0, MAX_WORD_ADDRESS)?;
                out.push(
                    0x7010_0000 | (((w - 1) << 21) & 0x07e0_0000) | ((sel << 18) & 0x000c_0000) | v,
                );
            }
            Instr::SendPicP {
                items,
                word_address,
                sctl,
                xpic,
                pic,
            } => {
                let w = field("sendpicp items", items, 1, MAX_SEND_ITEMS)?;
                let a = field("sendpicp address", word_address, 0, MAX_WORD_ADDRESS)?;
                let sctl = field("sendpicp sctl", sctl, 0, 7)?;
                let v = field("sendpicp pic", pic, 0, MAX_WORD_ADDRESS)?;
                let (picsel, x) = match xpic {
                    Some(x) => (1, xpic_bits(x)?),
                    None => (0, 0),
                };
                out.push(
                    0xf000_0000
                        | ((picsel << 27) & 0x0800_0000)
                        | (((w - 1) << 21) & 0x07e0_0000)
                        | ((a << 3) & 0x001f_fff8)
                        | sctl,
                );
                out.push((x << 18) | v);
            }
        }
        Ok(())
    }

    /// Decodes the instruction at `row[index]`, returning it and the words
    /// it took.
    pub fn decode_at(row: &[u32], index: usize) -> Result<(Instr, usize), DecodeError> {
        let Some(&word) = row.get(index) else {
            return Err(DecodeError::Truncated { index });
        };
        let unknown = DecodeError::Unknown { index, word };
        if word >> 28 == 0xf {
            if index % 2 != 0 {
                return Err(DecodeError::Misaligned { index });
            }
            let Some(&second) = row.get(index + 1) else {
                return Err(DecodeError::Truncated { index });
            };
            let picsel = (word >> 27) & 1;
            let x = second >> 18;
            let xpic = if picsel == 1 {
                Some(xpic_from_bits(x).ok_or(DecodeError::Reserved {
                    index,
                    word: second,
                    what: "an XPIC disconnect that names a tile",
                })?)
            } else if x != 0 {
                return Err(DecodeError::Reserved {
                    index,
                    word,
                    what: "sendpicp with picsel 0 carries an XPIC value",
                });
            } else {
                None
            };
            return Ok((
                Instr::SendPicP {
                    items: ((word >> 21) & 0x3f) + 1,
                    word_address: (word >> 3) & 0x3ffff,
                    sctl: word & 7,
                    xpic,
                    pic: second & 0x3ffff,
                },
                2,
            ));
        }
        let instr = match word >> 28 {
            0x7 if word & 0x0800_0000 != 0 => Instr::Send {
                items: ((word >> 21) & 0x3f) + 1,
                word_address: (word >> 3) & 0x3ffff,
                sctl: word & 7,
            },
            0x7 if word & 0x0010_0000 != 0 => Instr::SendPic {
                items: ((word >> 21) & 0x3f) + 1,
                dirs: (word >> 18) & 3,
                pic: word & 0x3ffff,
            },
            0x7 => Instr::SendOff {
                items: (((word >> 21) & 0x3f) | (((word >> 14) & 0x3f) << 6)) + 1,
                offset: (word >> 3) & 0x7ff,
                sctl: word & 7,
            },
            0x6 if word & 0x0c00_0000 == 0x0400_0000 => Instr::DelayXpic {
                cycles: ((word >> 14) & 0xfff) + 1,
                xpic: xpic_from_bits(word & 0x3fff).ok_or(DecodeError::Reserved {
                    index,
                    word,
                    what: "an XPIC disconnect that names a tile",
                })?,
            },
            0x6 if word & 0x0c00_0000 == 0 => {
                let sel = (word >> 18) & 1;
                if sel != 0 {
                    return Err(DecodeError::Reserved {
                        index,
                        word,
                        what: "delaypic select 1",
                    });
                }
                Instr::DelayPic {
                    cycles: ((word >> 19) & 0x7f) + 1,
                    sel,
                    value: word & 0x3ffff,
                }
            }
            0x4 if word & 0xfff8_0000 == 0x40a0_0000 => Instr::Delay {
                cycles: (word & 0x7ffff) + 1,
            },
            _ => return Err(unknown),
        };
        Ok((instr, 1))
    }
}
