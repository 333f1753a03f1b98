//! The errors of scheduling and of checking rows, apart from the modules
//! that raise them: the checker, the replay engine, the scheduler and the
//! relocation of rows all report through them, and none of those modules
//! need import another for its error type.

use ipu_layout::TileId;

use crate::isa::{DecodeError, EncodeError};
use crate::model::PhaseError;

/// One thing wrong with a set of rows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExchangeCheckError {
    /// The phase itself is invalid.
    #[error("the phase is invalid: {0}")]
    Phase(#[source] PhaseError),
    /// Rows exist for a different number of tiles.
    #[error("there are rows for {rows} tiles but the phase has {tiles}; encode one row per tile")]
    TileCount {
        /// Rows given.
        rows: u32,
        /// Tiles in the phase.
        tiles: u32,
    },
    /// A row does not decode.
    #[error("{tile}: {error}")]
    Decode {
        /// The tile.
        tile: TileId,
        /// The decoder's complaint.
        #[source]
        error: DecodeError,
    },
    /// A paired item needs a partner tile that does not exist.
    #[error("{tile} uses 64-bit items but its partner {partner} does not exist")]
    PartnerMissing {
        /// The tile.
        tile: TileId,
        /// The missing partner.
        partner: TileId,
    },
    /// A paired send overlaps a send of the partner.
    #[error("{tile} sends 64-bit items at cycle {cycle} while its partner {partner} also sends")]
    PartnerSendConflict {
        /// The tile.
        tile: TileId,
        /// The partner.
        partner: TileId,
        /// First conflicting cycle.
        cycle: u64,
    },
    /// A paired receive overlaps a receive of the partner.
    #[error(
        "{tile} receives 64-bit items at cycle {cycle} while its partner {partner} also receives"
    )]
    PartnerReceiveConflict {
        /// The tile.
        tile: TileId,
        /// The partner.
        partner: TileId,
        /// First conflicting cycle.
        cycle: u64,
    },
    /// A tile listens to a tile that does not exist.
    #[error("{tile} listens to {sender} at cycle {cycle}, which does not exist")]
    UnknownSource {
        /// The tile.
        tile: TileId,
        /// The named source.
        sender: TileId,
        /// The cycle.
        cycle: u64,
    },
    /// A PIC runs past the address space.
    #[error("{tile}'s write pointer runs past the address space at cycle {cycle}")]
    PointerOverflow {
        /// The tile.
        tile: TileId,
        /// The cycle.
        cycle: u64,
    },
    /// Words written where no transfer to the tile writes, or from the
    /// wrong source tile.
    #[error(
        "{tile} writes {words} words at {byte_address:#x} from {sender} (arrival cycle {cycle}), \
         which no transfer from that source puts there"
    )]
    StrayWrite {
        /// The receiving tile.
        tile: TileId,
        /// The source tile.
        sender: TileId,
        /// First byte written.
        byte_address: u32,
        /// Words in the run.
        words: u64,
        /// Arrival cycle of the first word.
        cycle: u64,
    },
    /// A destination word got a word read from the wrong source address.
    #[error(
        "transfer {transfer}: {tile} got word {word} from source address {got:#x}, expected \
         {expected:#x}"
    )]
    WrongSourceAddress {
        /// The transfer.
        transfer: usize,
        /// The receiving tile.
        tile: TileId,
        /// Word index in the transfer.
        word: u32,
        /// Expected source byte address.
        expected: u32,
        /// Source byte address actually sent.
        got: u32,
    },
    /// A Word32 transfer arrived as 64-bit items.
    #[error("transfer {transfer} is Word32 but {tile} received it as 64-bit items")]
    WideWord32 {
        /// The transfer.
        transfer: usize,
        /// The receiving tile.
        tile: TileId,
    },
    /// A destination word was written more than once.
    #[error("transfer {transfer}: {tile} writes word {word} more than once")]
    DoubleWrite {
        /// The transfer.
        transfer: usize,
        /// The receiving tile.
        tile: TileId,
        /// Word index in the transfer.
        word: u32,
    },
    /// Destination words were never written.
    #[error("transfer {transfer}: {tile} never receives words {first}..{end}")]
    Missing {
        /// The transfer.
        transfer: usize,
        /// The receiving tile.
        tile: TileId,
        /// First missing word.
        first: u32,
        /// End of the missing words.
        end: u32,
    },
    /// A tile reads and writes one memory element in one cycle.
    #[error(
        "{tile} reads {read_address:#x} and writes {write_address:#x} in one memory element at \
         cycle {cycle}"
    )]
    ElementHazard {
        /// The tile.
        tile: TileId,
        /// The cycle.
        cycle: u64,
        /// Read byte address.
        read_address: u32,
        /// Written byte address.
        write_address: u32,
    },
}

/// How a phase given to [`Schedule::readdress`](crate::Schedule::readdress) differs from the scheduled
/// one beyond its addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReaddressMismatch {
    /// The tile counts differ.
    #[error("it has {phase_tiles} tiles, the schedule {schedule_tiles}")]
    TileCount {
        /// Tiles of the phase given.
        phase_tiles: u32,
        /// Tiles of the scheduled phase.
        schedule_tiles: u32,
    },
    /// The phase has fewer transfers than the schedule moves.
    #[error("it has fewer transfers ({transfers}) than the scheduled phase")]
    FewerTransfers {
        /// Transfers of the phase given.
        transfers: usize,
    },
    /// A transfer's source, destination tiles or word count differ.
    #[error("its source, destination tiles or words differ")]
    Transfer,
    /// A transfer sent as 64-bit items is no longer a contiguous Paired64
    /// transfer.
    #[error("it was scheduled as 64-bit items but is no longer paired")]
    NoLongerPaired,
}

/// Why a phase could not be scheduled.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The phase breaks a modelling rule.
    #[error("phase {phase}: {source}")]
    Phase {
        /// The phase number.
        phase: u32,
        /// What is wrong.
        source: PhaseError,
    },
    /// The phase has more tiles than the fabric.
    #[error(
        "phase {phase} has {tile_count} tiles but the fabric has {fabric_tiles}; build the phase for this device"
    )]
    TileCount {
        /// The phase number.
        phase: u32,
        /// The phase's tile count.
        tile_count: u32,
        /// The fabric's tile count.
        fabric_tiles: u32,
    },
    /// A row could not be encoded (a bug in this crate).
    #[error("phase {phase}, {tile}: {source}")]
    Encode {
        /// The phase number.
        phase: u32,
        /// The tile.
        tile: TileId,
        /// The encoder's complaint.
        source: EncodeError,
    },
    /// The scheduler lost track of a transfer (a bug in this crate).
    #[error("phase {phase}: the scheduler left transfers unscheduled (a bug in ipu-exchange)")]
    Incomplete {
        /// The phase number.
        phase: u32,
    },
    /// The checker rejected the rows (a bug in this crate); with
    /// `verify` on, nothing unchecked is returned.
    #[error(
        "phase {phase}: the checker rejects the encoded rows ({} errors, first: {}) (a bug in ipu-exchange)",
        errors.len(),
        errors.first().map(ToString::to_string).unwrap_or_default()
    )]
    Check {
        /// The phase number.
        phase: u32,
        /// Every error the checker found.
        errors: Vec<ExchangeCheckError>,
    },
    /// [`Schedule::readdress`](crate::Schedule::readdress) was given a phase that is not the scheduled
    /// one with other addresses.
    #[error(
        "phase {phase}: cannot reuse the schedule{}: {reason}",
        transfer.map(|t| format!(" for transfer {t}")).unwrap_or_default()
    )]
    Readdress {
        /// The phase number.
        phase: u32,
        /// The first transfer that differs, if one does.
        transfer: Option<u32>,
        /// How it differs.
        #[source]
        reason: ReaddressMismatch,
    },
    /// Rows being moved to other addresses do not decode (a bug in this
    /// crate).
    #[error(
        "phase {phase}, {tile}: the rows to move do not decode: {source} (a bug in ipu-exchange)"
    )]
    Relocate {
        /// The phase number.
        phase: u32,
        /// The tile.
        tile: TileId,
        /// The decoder's complaint.
        source: DecodeError,
    },
    /// A horizon does not fit the instruction set (more than 2^40 cycles).
    #[error("phase {phase} needs {horizon} cycles, more than rows can express; split the phase")]
    TooLong {
        /// The phase number.
        phase: u32,
        /// The horizon.
        horizon: u64,
    },
    /// Another scheduler ([`ExchangeScheduler`](crate::ExchangeScheduler))
    /// failed for a reason of its own.
    #[error("phase {phase}: {source}")]
    Scheduler {
        /// The phase number.
        phase: u32,
        /// Its cause.
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
}
