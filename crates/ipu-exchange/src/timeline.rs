//! A tile's exchange timeline: what its row does, cycle by cycle.
//!
//! [`decode`] turns a row of instruction words into windows with absolute
//! cycles, resolved send addresses and receive-state updates ([`row_end`]
//! only finds where they end). The checker
//! and [`replay`](crate::replay) read timelines, never the scheduler's data.

use crate::isa::{DecodeError, Instr, MAX_WORD_ADDRESS, SCTL_WIDE, Xpic};

/// Words sent during a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendRun {
    /// Byte address of the first word.
    pub byte_address: u32,
    /// Whether items are 64-bit (two words per cycle, borrowing the
    /// partner's lane).
    pub wide: bool,
}

/// One instruction's window on the tile's timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// First cycle.
    pub start: u64,
    /// Cycles (at least 1).
    pub cycles: u32,
    /// XPIC update at `start`.
    pub set_xpic: Option<Xpic>,
    /// PIC update at `start`, as a byte address.
    pub set_pic: Option<u32>,
    /// Items sent, one per cycle, if the window sends.
    pub send: Option<SendRun>,
}

/// A decoded row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// Windows in time order, back to back from cycle 0.
    pub windows: Vec<Window>,
}

impl Timeline {
    /// The cycle after the last window.
    pub fn end(&self) -> u64 {
        self.windows
            .last()
            .map_or(0, |w| w.start + u64::from(w.cycles))
    }
}

/// Decodes a row into its timeline (see [`crate::isa`] for the semantics).
pub fn decode(row: &[u32]) -> Result<Timeline, DecodeError> {
    let windows = windows(row).collect::<Result<Vec<_>, _>>()?;
    Ok(Timeline { windows })
}

/// The cycle after a row's last window, `decode(row)?.end()`, without
/// keeping the windows (the package profile needs only the end).
pub fn row_end(row: &[u32]) -> Result<u64, DecodeError> {
    windows(row).try_fold(0, |_, w| w.map(|w| w.start + u64::from(w.cycles)))
}

/// A row's windows in time order, decoded as they are read (the checker
/// keeps only what it needs of each, not a phase's timelines at 40 bytes a
/// window). After an error it yields nothing more.
pub(crate) fn windows(row: &[u32]) -> Windows<'_> {
    Windows {
        decoder: Decoder::new(row),
        failed: false,
    }
}

/// The iterator of [`windows`].
pub(crate) struct Windows<'a> {
    decoder: Decoder<'a>,
    failed: bool,
}

impl Iterator for Windows<'_> {
    type Item = Result<Window, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.decoder.done() {
            return None;
        }
        let window = self.decoder.window();
        self.failed = window.is_err();
        Some(window)
    }
}

/// Decodes a row's windows in order, one instruction at a time.
struct Decoder<'a> {
    row: &'a [u32],
    index: usize,
    /// The cycle the next window starts at.
    cycle: u64,
    sp: u32,
}

impl<'a> Decoder<'a> {
    fn new(row: &'a [u32]) -> Self {
        Decoder {
            row,
            index: 0,
            cycle: 0,
            sp: 0,
        }
    }

    /// Whether every word was decoded.
    fn done(&self) -> bool {
        self.index >= self.row.len()
    }

    /// The next window; after an error the row must not be read on.
    // Inlined into the two loops: decoding every row is a large part of
    // checking a phase.
    #[inline(always)]
    fn window(&mut self) -> Result<Window, DecodeError> {
        let (row, index) = (self.row, self.index);
        let (instr, used) = Instr::decode_at(row, index)?;
        let overflow = DecodeError::PointerOverflow { index };
        let mut window = Window {
            start: self.cycle,
            cycles: instr.cycles(),
            set_xpic: None,
            set_pic: None,
            send: None,
        };
        // Where the send starts and its sctl, if the instruction sends.
        let mut send: Option<(u32, u32)> = None;
        match instr {
            Instr::Delay { .. } => {}
            Instr::DelayPic { value, .. } => window.set_pic = Some(value * 4),
            Instr::DelayXpic { xpic, .. } => window.set_xpic = Some(xpic),
            Instr::Send {
                word_address, sctl, ..
            } => send = Some((word_address, sctl)),
            Instr::SendOff { offset, sctl, .. } => {
                send = Some((self.sp.checked_add(offset).ok_or(overflow)?, sctl));
            }
            Instr::SendPic { dirs, pic, .. } => {
                window.set_pic = Some(pic * 4);
                send = Some((self.sp, dirs));
            }
            Instr::SendPicP {
                word_address,
                sctl,
                xpic,
                pic,
                ..
            } => {
                window.set_pic = Some(pic * 4);
                window.set_xpic = xpic;
                send = Some((word_address, sctl));
            }
        }
        if let Some((start, sctl)) = send {
            let wide = sctl & SCTL_WIDE != 0;
            let per_item = if wide { 2 } else { 1 };
            let end = u64::from(start) + u64::from(window.cycles) * per_item;
            if end > u64::from(MAX_WORD_ADDRESS) + 1 {
                return Err(overflow);
            }
            self.sp = end as u32;
            if sctl & 3 != 0 {
                window.send = Some(SendRun {
                    byte_address: start * 4,
                    wide,
                });
            }
        }
        self.cycle += u64::from(window.cycles);
        self.index += used;
        Ok(window)
    }
}
