//! The exchange-phase model: transfers, phases, and their validation.
//!
//! A [`Phase`] is plain data that the orchestrator builds from layout
//! fragments. Everything downstream (bounds, scheduler, encoder, checker)
//! assumes a phase that [`validate_phase`] accepted, so validation lives in
//! one function and its errors name the transfer and tile involved.

use ipu_layout::TileId;
use rayon::prelude::*;
use smallvec::SmallVec;

use crate::words::none_meet;

/// How a transfer may travel over the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Width {
    /// One 32-bit word per cycle on the sender's own transmit lane.
    Word32,
    /// Permission to send 64-bit items: two words per cycle, borrowing the
    /// transmit lane of the source's partner tile and the receive port of
    /// each destination's partner (the fabric names partners:
    /// [`Fabric::partner`](crate::Fabric::partner)). The scheduler may still
    /// send such a transfer as 32-bit words when that gives a shorter phase.
    /// Needs an even word count, one contiguous 8-byte aligned source run and
    /// 8-byte aligned destinations.
    Paired64,
}

/// One transfer: `words` 32-bit words from `source` to every destination.
///
/// `source_addresses` holds byte addresses, each 4-byte aligned, in one of
/// two forms: a single start address of a contiguous run of `words` words,
/// or exactly `words` addresses, one per word in sending order (a gather).
/// Each destination `(tile, byte_address)` receives the words contiguously
/// from `byte_address` on. Several destinations make a multicast: one send,
/// many listening receivers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The sending tile.
    pub source: TileId,
    /// Byte addresses of the words on the source tile (see the type docs).
    pub source_addresses: SmallVec<[u32; 1]>,
    /// Receiving tiles and the byte address each writes the words to.
    pub destinations: SmallVec<[(TileId, u32); 2]>,
    /// Number of 32-bit words.
    pub words: u32,
    /// Whether 64-bit items are allowed.
    pub width: Width,
}

impl Transfer {
    /// The byte address of word `index` on the source tile, if the transfer
    /// is well formed and `index < words`.
    pub fn source_word_address(&self, index: u32) -> Option<u32> {
        if index >= self.words {
            return None;
        }
        match self.source_addresses.as_slice() {
            [start] => start.checked_add(index.checked_mul(4)?),
            many => many.get(index as usize).copied(),
        }
    }
}

/// One exchange phase on `tile_count` tiles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Phase {
    /// Number of tiles; every tile id in the phase must be below it.
    pub tile_count: u32,
    /// The transfers, in any order.
    pub transfers: Vec<Transfer>,
}

/// The largest byte address (exclusive) a send or receive instruction can
/// name: 18-bit word addresses.
pub const ADDRESS_LIMIT: u64 = 1 << 20;

/// The largest tile id an XPIC value can name (13 bits).
pub const MAX_TILES: u32 = 1 << 13;

/// Why a phase cannot be scheduled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PhaseError {
    /// The tile count is zero or larger than XPIC values can name.
    #[error("the phase has tile_count {tile_count}; it must be between 1 and 8192")]
    TileCount {
        /// The tile count given.
        tile_count: u32,
    },
    /// A tile id is not below the tile count.
    #[error("transfer {transfer} names {tile}, but the phase has only {tile_count} tiles")]
    TileOutOfRange {
        /// Index of the transfer in the phase.
        transfer: usize,
        /// The offending tile.
        tile: TileId,
        /// The phase's tile count.
        tile_count: u32,
    },
    /// A transfer moves no words or has no destination.
    #[error("transfer {transfer} is empty (zero words or no destination); drop it from the phase")]
    Empty {
        /// Index of the transfer.
        transfer: usize,
    },
    /// The source address list has the wrong length.
    #[error(
        "transfer {transfer} has {given} source addresses for {words} words; give one start \
         address or one address per word"
    )]
    SourceAddressCount {
        /// Index of the transfer.
        transfer: usize,
        /// Addresses given.
        given: usize,
        /// Words in the transfer.
        words: u32,
    },
    /// An address is not 4-byte aligned or a run leaves the addressable range.
    #[error(
        "transfer {transfer} uses byte address {address:#x} on {tile}, which is unaligned or \
         runs past {limit:#x}; addresses must be word aligned and inside tile memory",
        limit = ADDRESS_LIMIT
    )]
    BadAddress {
        /// Index of the transfer.
        transfer: usize,
        /// The tile the address is on.
        tile: TileId,
        /// The offending byte address.
        address: u64,
    },
    /// A Paired64 transfer breaks the pairing rules.
    #[error("transfer {transfer} is Paired64 but {reason}; mark it Word32 or fix the addresses")]
    BadPaired {
        /// Index of the transfer.
        transfer: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A tile is both a destination and a source of the same transfer, or
    /// the same tile appears twice as a destination.
    #[error(
        "transfer {transfer} lists {tile} twice (as source and destination, or as two destinations)"
    )]
    DuplicateTile {
        /// Index of the transfer.
        transfer: usize,
        /// The repeated tile.
        tile: TileId,
    },
    /// Two destination ranges overlap on a tile, or a destination range
    /// overlaps memory the tile sends from in the same phase.
    #[error(
        "on {tile}, transfer {first} and transfer {second} touch overlapping bytes \
         {overlap_start:#x}..{overlap_end:#x} (written twice, or written while being read); \
         split the phase"
    )]
    Overlap {
        /// The tile.
        tile: TileId,
        /// One transfer.
        first: usize,
        /// The other transfer.
        second: usize,
        /// Start of the shared bytes.
        overlap_start: u64,
        /// End of the shared bytes.
        overlap_end: u64,
    },
}

/// Checks every rule the scheduler relies on and returns the first broken one.
pub fn validate_phase(phase: &Phase) -> Result<(), PhaseError> {
    validate_structure(phase)?;
    validate_overlaps(phase)
}

/// A phase that passed [`validate_phase`], as proof for the entry points
/// that would otherwise validate it again: [`crate::schedule_valid`],
/// [`crate::Schedule::readdress_valid`], [`crate::check_valid_schedule`],
/// and what every [`crate::ExchangeScheduler`] and [`crate::Readdress`]
/// takes.
///
/// Only [`ValidPhase::new`] makes one, and it borrows the phase, so the
/// phase cannot change while the proof is held. The validation (every
/// transfer's rules, then a bitmap of every destination range) is not
/// cheap on SigLIP-sized phases: the proof lets a build validate each
/// phase once instead of in the scheduler, the readdress and the check.
#[derive(Clone, Copy, Debug)]
pub struct ValidPhase<'a> {
    phase: &'a Phase,
}

impl<'a> ValidPhase<'a> {
    /// Validates `phase` ([`validate_phase`]).
    pub fn new(phase: &'a Phase) -> Result<ValidPhase<'a>, PhaseError> {
        validate_phase(phase)?;
        Ok(ValidPhase { phase })
    }

    /// The phase.
    pub fn phase(self) -> &'a Phase {
        self.phase
    }
}

/// Every rule but the memory overlaps: tile ids, counts, alignment and
/// pairing. The scheduler's core needs only these, so the overlap check
/// (a sort of every range) can run beside it.
pub(crate) fn validate_structure(phase: &Phase) -> Result<(), PhaseError> {
    if phase.tile_count == 0 || phase.tile_count > MAX_TILES {
        return Err(PhaseError::TileCount {
            tile_count: phase.tile_count,
        });
    }
    // Transfers are checked in parallel; the error reported is the one of
    // the first offending transfer, whatever the thread count.
    match phase
        .transfers
        .par_iter()
        .enumerate()
        .find_map_first(|(index, transfer)| validate_transfer(phase, index, transfer).err())
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The rules of one transfer (see [`validate_structure`]).
fn validate_transfer(phase: &Phase, index: usize, transfer: &Transfer) -> Result<(), PhaseError> {
    let in_range = |tile: TileId| {
        if tile.as_u32() < phase.tile_count {
            Ok(())
        } else {
            Err(PhaseError::TileOutOfRange {
                transfer: index,
                tile,
                tile_count: phase.tile_count,
            })
        }
    };
    in_range(transfer.source)?;
    if transfer.words == 0 || transfer.destinations.is_empty() {
        return Err(PhaseError::Empty { transfer: index });
    }
    let bytes = u64::from(transfer.words) * 4;
    let bad = |tile: TileId, address: u64| PhaseError::BadAddress {
        transfer: index,
        tile,
        address,
    };
    match transfer.source_addresses.len() {
        1 => {
            let start = u64::from(transfer.source_addresses[0]);
            if start % 4 != 0 || start + bytes > ADDRESS_LIMIT {
                return Err(bad(transfer.source, start));
            }
        }
        n if n == transfer.words as usize => {
            for &address in &transfer.source_addresses {
                let address = u64::from(address);
                if address % 4 != 0 || address + 4 > ADDRESS_LIMIT {
                    return Err(bad(transfer.source, address));
                }
            }
        }
        given => {
            return Err(PhaseError::SourceAddressCount {
                transfer: index,
                given,
                words: transfer.words,
            });
        }
    }
    // Tiles seen so far: a short list for narrow transfers, a bit set over
    // the tiles for wide ones (a broadcast's fanout squared would dominate
    // the whole validation).
    let wide_fanout = transfer.destinations.len() > 16;
    // The source and up to 16 destinations: never on the heap.
    let mut seen: SmallVec<[u32; 17]> = SmallVec::new();
    let mut seen_bits: Vec<u64> = if wide_fanout {
        vec![0; (phase.tile_count as usize).div_ceil(64)]
    } else {
        Vec::new()
    };
    let mut mark = |tile: u32| {
        if wide_fanout {
            let (word, bit) = (tile as usize / 64, 1u64 << (tile % 64));
            let fresh = seen_bits[word] & bit == 0;
            seen_bits[word] |= bit;
            fresh
        } else {
            let fresh = !seen.contains(&tile);
            seen.push(tile);
            fresh
        }
    };
    mark(transfer.source.as_u32());
    for &(tile, address) in &transfer.destinations {
        in_range(tile)?;
        if !mark(tile.as_u32()) {
            return Err(PhaseError::DuplicateTile {
                transfer: index,
                tile,
            });
        }
        let start = u64::from(address);
        if start % 4 != 0 || start + bytes > ADDRESS_LIMIT {
            return Err(bad(tile, start));
        }
    }
    if transfer.width == Width::Paired64 {
        let paired = |reason| PhaseError::BadPaired {
            transfer: index,
            reason,
        };
        if transfer.words % 2 != 0 {
            return Err(paired("its word count is odd"));
        }
        if transfer.source_addresses.len() != 1 || transfer.source_addresses[0] % 8 != 0 {
            return Err(paired("its source is not one 8-byte aligned run"));
        }
        if transfer.destinations.iter().any(|&(_, a)| a % 8 != 0) {
            return Err(paired("a destination is not 8-byte aligned"));
        }
    }
    Ok(())
}

/// Checks that no write overlaps another write or a read on the same tile.
/// Assumes [`validate_structure`] passed (every tile is below
/// `tile_count`, every range ends at or below [`ADDRESS_LIMIT`]). The
/// ranges are bucketed by tile and each tile's are checked on its own,
/// tiles in parallel; the error reported is the first overlap in (tile,
/// start) order, whatever the thread count.
pub(crate) fn validate_overlaps(phase: &Phase) -> Result<(), PhaseError> {
    let tiles = phase.tile_count as usize;
    // Counting sort by tile: sizes, then offsets, then the ranges.
    let mut counts = vec![0usize; tiles + 1];
    for transfer in &phase.transfers {
        counts[transfer.source.as_u32() as usize + 1] += transfer.source_addresses.len();
        for &(tile, _) in &transfer.destinations {
            counts[tile.as_u32() as usize + 1] += 1;
        }
    }
    for t in 0..tiles {
        counts[t + 1] += counts[t];
    }
    let mut next = counts.clone();
    let mut ranges: Vec<RangeKey> = vec![0; counts[tiles]];
    for (index, transfer) in phase.transfers.iter().enumerate() {
        // A phase of 2^32 transfers cannot be held in memory; an index that
        // did not fit would only blur an error report.
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        let bytes = u64::from(transfer.words) * 4;
        let source = transfer.source.as_u32() as usize;
        let mut push = |tile: usize, range: RangeKey| {
            ranges[next[tile]] = range;
            next[tile] += 1;
        };
        if let [start] = transfer.source_addresses.as_slice() {
            let start = u64::from(*start);
            push(source, range_key(start, start + bytes, index, false));
        } else {
            for &address in &transfer.source_addresses {
                let address = u64::from(address);
                push(source, range_key(address, address + 4, index, false));
            }
        }
        for &(tile, address) in &transfer.destinations {
            let start = u64::from(address);
            push(
                tile.as_u32() as usize,
                range_key(start, start + bytes, index, true),
            );
        }
    }
    // Split the ranges into one slice per tile.
    let mut per_tile: Vec<(u32, &mut [RangeKey])> = Vec::with_capacity(tiles);
    let mut rest: &mut [RangeKey] = &mut ranges;
    for t in 0..tiles {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(counts[t + 1] - counts[t]);
        if !head.is_empty() {
            per_tile.push((t as u32, head));
        }
        rest = tail;
    }
    // A bitmap of the words written shows the usual "nothing meets" in one
    // pass; only a tile where something may meet is sorted, which finds the
    // first overlap exactly.
    let first = per_tile
        .par_iter_mut()
        .map_init(
            || (Vec::new(), Vec::new(), Vec::new()),
            |(reads, writes, bitmap), (tile, ranges)| {
                reads.clear();
                writes.clear();
                for &key in ranges.iter() {
                    let (start, end, _, write) = range_of(key);
                    if write {
                        writes.push((start, end));
                    } else {
                        reads.push((start, end));
                    }
                }
                if none_meet(reads, writes, bitmap) {
                    None
                } else {
                    tile_overlap(*tile, ranges)
                }
            },
        )
        .flatten()
        .min_by_key(|e| match e {
            PhaseError::Overlap { tile, .. } => tile.as_u32(),
            _ => u32::MAX,
        });
    match first {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// One range on a tile, packed so that the integers sort in (start, end,
/// transfer, is_write) order: start from bit 64, end from bit 33, the
/// transfer from bit 1, and whether it is a write in bit 0. Sorting 16-byte
/// integers is much faster than sorting tuples by a key, and the overlap
/// check sorts every range of a phase. Starts and ends are at most
/// [`ADDRESS_LIMIT`] (2^20) once the structure is valid, so each field
/// keeps its own bits.
type RangeKey = u128;

fn range_key(start: u64, end: u64, transfer: u32, write: bool) -> RangeKey {
    debug_assert!(start <= ADDRESS_LIMIT && end <= ADDRESS_LIMIT);
    (u128::from(start) << 64)
        | (u128::from(end) << 33)
        | (u128::from(transfer) << 1)
        | u128::from(write)
}

/// The (start, end, transfer, is_write) of a [`RangeKey`].
fn range_of(key: RangeKey) -> (u64, u64, u32, bool) {
    (
        (key >> 64) as u64,
        ((key >> 33) as u64) & 0x7fff_ffff,
        ((key >> 1) as u64 & 0xffff_ffff) as u32,
        key & 1 == 1,
    )
}

/// The first overlap among one tile's ranges. Writes must not overlap
/// anything else on the tile; reads may overlap reads (the same words may
/// feed several transfers). After sorting by start, a range overlaps an
/// earlier one exactly when the furthest-reaching earlier range (of the
/// relevant kind) ends after its start.
fn tile_overlap(tile: u32, ranges: &mut [RangeKey]) -> Option<PhaseError> {
    ranges.sort_unstable();
    let mut reach_any: Option<(u64, u32)> = None;
    let mut reach_write: Option<(u64, u32)> = None;
    for &key in ranges.iter() {
        let (start, end, transfer, write) = range_of(key);
        let against = if write { reach_any } else { reach_write };
        if let Some((reach, other)) = against {
            if reach > start {
                return Some(PhaseError::Overlap {
                    tile: TileId::from_u32(tile),
                    first: other.min(transfer) as usize,
                    second: other.max(transfer) as usize,
                    overlap_start: start,
                    overlap_end: end.min(reach),
                });
            }
        }
        if reach_any.is_none_or(|(r, _)| end > r) {
            reach_any = Some((end, transfer));
        }
        if write && reach_write.is_none_or(|(r, _)| end > r) {
            reach_write = Some((end, transfer));
        }
    }
    None
}
