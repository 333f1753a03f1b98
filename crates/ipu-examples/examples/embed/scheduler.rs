//! The example's exchange scheduler: one transfer at a time, in phase
//! order, encoded through the instruction encoder ([`Instr::encode`]).
//!
//! Transfer `i` starts sending at cycle `T_i`. Two cycles before, each of
//! its receivers listens to the sender (`delayxpic`) and points its write
//! pointer at its destination (`delaypic`); the sender sends the words, up
//! to 64 a `send` (one `send` per word when the transfer gathers words
//! from several addresses); the words arrive `latency` cycles after they
//! are sent, and the cycle after the last arrives each receiver stops
//! listening. The next transfer starts once that is done:
//! `T_{i+1} = T_i + words + latency + 3`. Idle time in a row is `delay`.
//! The instructions chosen depend only on the transfers' sizes, never on
//! their addresses, so the rows of a repeat body's next iteration differ
//! from the first's only in address fields, as the build needs.
//!
//! It offers no readdress capability: the build schedules a moved phase
//! again. Far from the bounds, but every row is the device's own encoding,
//! which the build's checker judges like any other.

use std::sync::Arc;

use ipu_exchange::isa::{MAX_DELAY_CYCLES, MAX_SEND_ITEMS, SCTL_BOTH};
use ipu_exchange::{
    EncodeError, EncodedRows, ExchangeScheduler, Fabric, Instr, Phase, ScheduleError,
    ScheduleOutput, ScheduleRequest, ValidPhase, Xpic,
};
use ipu_layout::TileId;

/// Sequential scheduling.
pub struct SequentialScheduler {
    /// Whether to leave out the last word of the first transfer of two or
    /// more words: a scheduler with a bug, for the checker to catch.
    pub drop_a_word: bool,
}

impl ExchangeScheduler for SequentialScheduler {
    fn name(&self) -> &str {
        if self.drop_a_word {
            "sequential-drops-a-word"
        } else {
            "sequential"
        }
    }

    fn schedule(
        &self,
        phase: ValidPhase<'_>,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<ScheduleOutput, ScheduleError> {
        let rows = self
            .rows(phase.phase(), u64::from(fabric.latency_cycles()))
            .map_err(|e| ScheduleError::Scheduler {
                phase: request.label,
                source: Arc::new(e),
            })?;
        Ok(ScheduleOutput::new(EncodedRows::from_tile_rows(rows)))
    }
}

/// One instruction of a tile, at the cycle it starts.
type Timed = (u64, Instr);

/// Why the sequential scheduler could not encode a phase.
#[derive(Debug)]
pub enum SequentialError {
    /// An instruction field does not fit its encoding (an address beyond
    /// the 18-bit word address space).
    Encode(EncodeError),
    /// Two instructions of one tile overlap in time (a bug here).
    Overlap {
        /// The tile.
        tile: usize,
    },
}

impl std::fmt::Display for SequentialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SequentialError::Encode(e) => write!(f, "the sequential scheduler: {e}"),
            SequentialError::Overlap { tile } => write!(
                f,
                "the sequential scheduler put two instructions of tile{tile} at one time (a bug in the example)"
            ),
        }
    }
}

impl std::error::Error for SequentialError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SequentialError::Encode(e) => Some(e),
            SequentialError::Overlap { .. } => None,
        }
    }
}

impl SequentialScheduler {
    /// Every tile's row.
    fn rows(&self, phase: &Phase, latency: u64) -> Result<Vec<Vec<u32>>, SequentialError> {
        let mut events: Vec<Vec<Timed>> = vec![Vec::new(); phase.tile_count as usize];
        let mut dropped = false;
        // Receivers set up in the two cycles before the first send.
        let mut start = 2u64;
        for t in &phase.transfers {
            let mut words = t.words;
            if self.drop_a_word && !dropped && words >= 2 {
                words -= 1;
                dropped = true;
            }
            let sender = &mut events[t.source.as_u32() as usize];
            let mut at = start;
            for (first, items) in chunks(t.source_addresses.len() == 1, words) {
                // A valid phase has an address for every word.
                let address = t.source_word_address(first).unwrap_or_default();
                sender.push((
                    at,
                    Instr::Send {
                        items,
                        word_address: address / 4,
                        sctl: SCTL_BOTH,
                    },
                ));
                at += u64::from(items);
            }
            let listen = |tile: TileId| Instr::DelayXpic {
                cycles: 1,
                xpic: Xpic::Listen(tile),
            };
            let stop = Instr::DelayXpic {
                cycles: 1,
                xpic: Xpic::Disconnected,
            };
            let done = start + u64::from(t.words) + latency;
            for &(d, address) in &t.destinations {
                let receiver = &mut events[d.as_u32() as usize];
                receiver.push((start - 2, listen(t.source)));
                receiver.push((
                    start - 1,
                    Instr::DelayPic {
                        cycles: 1,
                        sel: 0,
                        value: address / 4,
                    },
                ));
                receiver.push((done, stop));
            }
            start = done + 3;
        }
        events
            .iter()
            .enumerate()
            .map(|(tile, e)| encode(tile, e))
            .collect()
    }
}

/// The sends of `words` words, as (first word, items): up to 64 a send
/// from a contiguous run, one a send from a gather.
fn chunks(contiguous: bool, words: u32) -> impl Iterator<Item = (u32, u32)> {
    let step = if contiguous { MAX_SEND_ITEMS } else { 1 };
    (0..words)
        .step_by(step as usize)
        .map(move |first| (first, step.min(words - first)))
}

/// A tile's row: its instructions in time order, with delays between.
fn encode(tile: usize, events: &[Timed]) -> Result<Vec<u32>, SequentialError> {
    let mut row = Vec::new();
    let mut now = 0u64;
    for &(at, instr) in events {
        let mut idle = at
            .checked_sub(now)
            .ok_or(SequentialError::Overlap { tile })?;
        while idle > 0 {
            let cycles = idle.min(u64::from(MAX_DELAY_CYCLES));
            Instr::Delay {
                cycles: cycles as u32,
            }
            .encode(&mut row)
            .map_err(SequentialError::Encode)?;
            idle -= cycles;
        }
        instr.encode(&mut row).map_err(SequentialError::Encode)?;
        now = at + u64::from(instr.cycles());
    }
    Ok(row)
}
