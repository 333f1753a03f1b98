//! Exchange phases for IPU21 tiles: lower bounds, a scheduler that gets
//! close to them, IPU21 supervisor row encoding, a decoder, an independent
//! checker and a replay against real memory.
//!
//! A [`Phase`] is a set of [`Transfer`]s (source tile and addresses,
//! destinations, words, [`Width`]). Per cycle a tile's transmit lane carries
//! one word and its receive port takes one word; a multicast is one send
//! that several receivers listen to. [`schedule`] turns a phase into
//! [`EncodedRows`]: one row of supervisor instruction words per tile, which
//! alone determine everything (which words each tile sends when, and which
//! source and write pointer each receiver selects when). [`check_schedule`]
//! decodes and replays the rows of all tiles and compares the result with
//! the phase; [`replay`] moves real data through an [`ExchangeMemory`].
//!
//! Three lower bounds judge a schedule: [`endpoint_lower_bound`] (the
//! busiest lane or port), [`stronger_lower_bound`] (plus the latency) and
//! [`multicast_lower_bound`] (plus what multicast forces on senders whose
//! receivers all hear another tile's multicast).
//!
//! The instruction semantics chosen where the recovered encodings leave
//! details open are documented in [`isa`]; [`Fabric`] holds the timing
//! (a constant latency) and the partner rule of paired sends, read from
//! `device/ipu21.toml`.
//!
//! ```
//! use ipu_exchange::*;
//! use ipu_layout::TileId;
//! let phase = Phase {
//!     tile_count: 4,
//!     transfers: vec![Transfer {
//!         source: TileId::from_u32(0),
//!         source_addresses: smallvec::smallvec![0x4c000],
//!         destinations: smallvec::smallvec![(TileId::from_u32(1), 0x90000)],
//!         words: 8,
//!         width: Width::Word32,
//!     }],
//! };
//! let fabric = Fabric::ipu21().unwrap();
//! let s = schedule(&phase, &fabric, &ScheduleConfig::default()).unwrap();
//! assert!(s.horizon() >= stronger_lower_bound(&phase, &fabric));
//! assert!(s.horizon() >= s.multicast_lower_bound());
//! check_schedule(&phase, &fabric, s.rows()).unwrap();
//! ```

#![forbid(unsafe_code)]

mod address;
mod bounds;
mod check;
mod core;
mod encode;
mod engine;
mod error;
mod fabric;
#[cfg(feature = "testing")]
pub mod generate;
mod grouped;
pub mod isa;
mod model;
mod relocate;
mod replay;
pub mod report;
mod schedule;
mod snapshot;
mod stage;
mod timeline;
mod words;

pub use bounds::{endpoint_lower_bound, multicast_lower_bound, stronger_lower_bound};
pub use check::{CheckedRows, check_schedule, check_valid_schedule};
pub use encode::EncodedRows;
pub use error::{ExchangeCheckError, ReaddressMismatch, ScheduleError};
pub use fabric::{Fabric, FabricError};
pub use isa::{DecodeError, EncodeError, Instr, Xpic};
pub use model::{Phase, PhaseError, Transfer, ValidPhase, Width, validate_phase};
pub use replay::{BlockCopy, ExchangeMemory, MemoryError, ReplayError, ReplayStats, replay};
pub use schedule::{
    Schedule, ScheduleConfig, ScheduleKind, schedule, schedule_phases, schedule_valid,
};
pub use snapshot::{SCHEMA_VERSION, Snapshot, SnapshotError, SnapshotPhase, SnapshotTransfer};
pub use stage::{BuiltinScheduler, ExchangeScheduler, Readdress, ScheduleOutput, ScheduleRequest};
pub use timeline::{SendRun, Timeline, Window, decode, row_end};
