//! What a tile sends and receives in a phase, as the scheduler leaves it
//! for the encoder: send pieces, and receive pieces stored once per
//! arrival (the first destination's) with the other destinations as
//! receptions, keyed by start for the encoder's sweep.

use crate::address::structural_address;

/// Items a tile sends without interruption from contiguous memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SendPiece {
    pub start: u64,
    pub items: u32,
    pub wide: bool,
    pub byte_address: u32,
    /// The address instruction choices are made on: `byte_address`, or a
    /// structural one when rows must not depend on addresses.
    pub vaddr: u128,
}

/// Items a tile receives without interruption from one source into
/// contiguous memory; `start` is the arrival cycle of the first item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecvPiece {
    pub start: u64,
    pub items: u32,
    pub wide: bool,
    pub source: u32,
    pub byte_address: u32,
    /// As [`SendPiece::vaddr`].
    pub vaddr: u128,
    /// Which of its transfer's destinations the piece is (where a
    /// relocation finds the tile's address of the transfer).
    pub dest: u32,
    /// Send cycle after the source's previous send (before this piece's),
    /// or [`NO_CYCLE`] if it did not send before.
    pub source_quiet_from: u64,
    /// Send cycle of the source's next send after this piece's, or
    /// [`NO_CYCLE`].
    pub source_next_send: u64,
}

/// A [`RecvPiece`] or [`Arrival`] cycle that does not exist: arrivals are
/// kept for every segment of a phase, and two `Option<u64>` fields would
/// make each 16 bytes larger.
pub(crate) const NO_CYCLE: u64 = u64::MAX;

const _: () = assert!(std::mem::size_of::<RecvPiece>() == 64);

impl RecvPiece {
    /// [`RecvPiece::source_quiet_from`], if the source sent before.
    pub(crate) fn quiet_from(&self) -> Option<u64> {
        Some(self.source_quiet_from).filter(|&c| c != NO_CYCLE)
    }

    /// [`RecvPiece::source_next_send`], if the source sends again.
    pub(crate) fn next_send(&self) -> Option<u64> {
        Some(self.source_next_send).filter(|&c| c != NO_CYCLE)
    }
}

/// What the receive pieces of one segment share, whatever their
/// receiving tile, with its first destination's piece: a unicast, most
/// of a large unicast phase, is one arrival and nothing more. Its source
/// is the tile whose [`Made`] holds it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival {
    pub start: u64,
    pub source_quiet_from: u64,
    pub source_next_send: u64,
    pub items: u32,
    /// The transfer and its first word: with relocatable rows, every
    /// destination's piece has their structural address (see
    /// [`SendPiece::vaddr`]); otherwise a piece's is its own
    /// `byte_address`.
    pub origin: u32,
    pub first_word: u32,
    /// The first destination's piece: where it is written, and which of
    /// the transfer's destinations it is.
    pub byte_address: u32,
    pub dest: u32,
    pub wide: bool,
}

/// The piece of an [`Arrival`] at one of its other destinations.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reception {
    /// Index of its arrival in the making tile's list.
    pub arrival: u32,
    pub byte_address: u32,
    /// As [`RecvPiece::dest`].
    pub dest: u32,
}

/// The receive pieces one tile's segments make: per segment an arrival,
/// holding its first destination's piece, and a reception of 12 bytes per
/// further destination, not a piece of 64 bytes per destination (SigLIP's
/// largest phases receive 800,000 pieces from about 100,000 transfers;
/// the seed-shaped phase's 586,368 transfers are mostly unicasts, each of
/// which a separate reception gave a second record to read).
#[derive(Debug, Default)]
pub(crate) struct Made {
    pub arrivals: Vec<Arrival>,
    pub receptions: Vec<Reception>,
    /// Whether the rows are relocatable (see [`Arrival::origin`]).
    pub relocatable: bool,
}

// Kept for every segment of a phase: 48 bytes, where a whole piece
// takes 64.
const _: () = assert!(std::mem::size_of::<Arrival>() == 48);

/// One receive piece of a [`Made`]: its arrival's own, or a further
/// reception.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Received {
    Arrival(u32),
    Reception(u32),
}

impl Made {
    /// The start of piece `which`, 0 if there is none.
    fn start(&self, which: Received) -> u64 {
        let arrival = match which {
            Received::Arrival(a) => Some(a),
            Received::Reception(r) => self.receptions.get(r as usize).map(|r| r.arrival),
        };
        arrival
            .and_then(|a| self.arrivals.get(a as usize))
            .map_or(0, |a| a.start)
    }

    /// Piece `which` as a whole piece; `source` is the making tile.
    fn piece(&self, source: u32, which: Received) -> RecvPiece {
        let (a, byte_address, dest) = match which {
            Received::Arrival(a) => {
                let a = self.arrivals[a as usize];
                (a, a.byte_address, a.dest)
            }
            Received::Reception(r) => {
                let r = self.receptions[r as usize];
                (self.arrivals[r.arrival as usize], r.byte_address, r.dest)
            }
        };
        RecvPiece {
            start: a.start,
            items: a.items,
            wide: a.wide,
            source,
            byte_address,
            vaddr: if self.relocatable {
                structural_address(a.origin, a.first_word)
            } else {
                u128::from(byte_address)
            },
            dest,
            source_quiet_from: a.source_quiet_from,
            source_next_send: a.source_next_send,
        }
    }
}

/// A receive piece's key at its receiving tile: (start, making tile,
/// which piece there) packed into one integer, which sorts a receiving
/// tile's pieces by start (a tile receives one piece at a time, so starts
/// differ). It is made when the pieces are grouped, not kept with them:
/// 16 bytes more per piece, millions on a large phase.
pub(crate) fn recv_key(made: &Made, tile: u32, which: Received) -> u128 {
    let (reception, index) = match which {
        Received::Arrival(a) => (0, a),
        Received::Reception(r) => (1, r),
    };
    (u128::from(made.start(which)) << 64)
        | (u128::from(tile) << 33)
        | (reception << 32)
        | u128::from(index)
}

/// The making tile and piece of a [`recv_key`].
fn key_piece(key: u128) -> (u32, Received) {
    let tile = (key as u64 >> 33) as u32;
    let index = key as u32;
    let which = if (key >> 32) & 1 == 0 {
        Received::Arrival(index)
    } else {
        Received::Reception(index)
    };
    (tile, which)
}

/// Everything every tile does in a phase: per tile, its send pieces and
/// its receive pieces, each sorted by start.
///
/// A receive piece is stored once, in the lists of the tile whose segment
/// made it (where it was built, see `schedule::activity`; in its
/// segment's [`Arrival`] or as a [`Reception`] of it), and each receiving
/// tile lists its own as [`recv_key`]s; a tile's pieces are gathered only
/// while the tile is encoded. A per-receiver copy of every piece, made for
/// all tiles at once, held every piece twice: the largest part of a
/// build's peak memory.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    /// Per tile, its send pieces.
    pub sends: Vec<Vec<SendPiece>>,
    /// Per tile, the receive pieces its segments make.
    pub made: Vec<Made>,
    /// Tile `t`'s receive pieces are `received[offsets[t]..offsets[t + 1]]`.
    pub offsets: Vec<usize>,
    /// Per receiving tile, the [`recv_key`]s of its pieces.
    pub received: Vec<u128>,
}

impl Activity {
    /// The number of tiles.
    pub fn tiles(&self) -> usize {
        self.sends.len()
    }

    /// Tile `tile`'s receive pieces, in start order.
    pub fn recvs(&self, tile: usize) -> Recvs<'_> {
        let keys = match (self.offsets.get(tile), self.offsets.get(tile + 1)) {
            (Some(&a), Some(&b)) => &self.received[a..b],
            _ => &[],
        };
        Recvs {
            keys,
            made: &self.made,
        }
    }
}

/// One tile's receive pieces, in start order (see [`Activity`]).
#[derive(Clone, Copy)]
pub(crate) struct Recvs<'a> {
    keys: &'a [u128],
    made: &'a [Made],
}

impl Recvs<'_> {
    /// The pieces, in start order. Every key names a piece of `made`
    /// (`schedule::activity` makes them together).
    pub fn gather(self) -> Vec<RecvPiece> {
        let mut out = Vec::with_capacity(self.keys.len());
        for &key in self.keys {
            let (tile, which) = key_piece(key);
            out.push(self.made[tile as usize].piece(tile, which));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MAX_TILES;

    /// A key names its making tile and piece back, at the largest tile
    /// and index, whatever its start.
    #[test]
    fn a_receive_key_names_its_piece() {
        let arrival = |start| Arrival {
            start,
            source_quiet_from: NO_CYCLE,
            source_next_send: NO_CYCLE,
            items: 1,
            origin: 0,
            first_word: 0,
            byte_address: 0,
            dest: 0,
            wide: false,
        };
        let made = Made {
            arrivals: vec![arrival(u64::MAX - 1), arrival(7)],
            receptions: vec![Reception {
                arrival: 0,
                byte_address: 0,
                dest: 1,
            }],
            relocatable: false,
        };
        let tile = MAX_TILES - 1;
        for which in [
            Received::Arrival(0),
            Received::Arrival(1),
            Received::Reception(0),
            Received::Arrival(u32::MAX),
            Received::Reception(u32::MAX),
        ] {
            let key = recv_key(&made, tile, which);
            assert_eq!(key_piece(key), (tile, which));
        }
        // Keys order by start first.
        assert!(
            recv_key(&made, 0, Received::Arrival(1)) < recv_key(&made, 0, Received::Reception(0))
        );
        assert_eq!(made.piece(tile, Received::Reception(0)).start, u64::MAX - 1);
    }
}
