//! The JSON phase snapshot format, for fixtures, benchmarks and
//! `cargo xtask exchange`.
//!
//! ```json
//! {"schema_version": 1, "tile_count": 1472,
//!  "phases": [{"phase": 0, "transfers": [
//!     {"source": 3, "source_addresses": [311296],
//!      "destinations": [[7, 589824]], "words": 16, "width": "Word32"}]}]}
//! ```
//!
//! Parsing checks only the JSON shape; [`crate::validate_phase`] (run by the
//! scheduler) checks the contents.

use ipu_layout::TileId;
use serde::{Deserialize, Serialize};

use crate::model::{Phase, Transfer, Width};

/// The schema version this crate reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

/// A file of phases.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// Must be [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Tiles of every phase.
    pub tile_count: u32,
    /// The phases.
    pub phases: Vec<SnapshotPhase>,
}

/// One phase in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotPhase {
    /// The phase's number in the program.
    pub phase: u32,
    /// Its transfers.
    pub transfers: Vec<SnapshotTransfer>,
}

/// One transfer in a snapshot (fields as in [`Transfer`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotTransfer {
    /// Source tile.
    pub source: u32,
    /// Source byte addresses: one start, or one per word.
    pub source_addresses: Vec<u32>,
    /// `[tile, byte_address]` pairs.
    pub destinations: Vec<(u32, u32)>,
    /// 32-bit words.
    pub words: u32,
    /// `"Word32"` or `"Paired64"`.
    pub width: Width,
}

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Not JSON of the snapshot shape.
    #[error("the snapshot is not valid (line {line}, column {column}): {source}")]
    Json {
        /// Line of the error.
        line: usize,
        /// Column of the error.
        column: usize,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A schema version this crate does not read.
    #[error("the snapshot has schema_version {found}; this tool reads version {expected}")]
    Version {
        /// The version in the file.
        found: u32,
        /// The version expected.
        expected: u32,
    },
}

impl Snapshot {
    /// Parses a snapshot from JSON text.
    pub fn from_json(text: &str) -> Result<Snapshot, SnapshotError> {
        let snapshot: Snapshot = serde_json::from_str(text).map_err(|e| SnapshotError::Json {
            line: e.line(),
            column: e.column(),
            source: e,
        })?;
        if snapshot.schema_version != SCHEMA_VERSION {
            return Err(SnapshotError::Version {
                found: snapshot.schema_version,
                expected: SCHEMA_VERSION,
            });
        }
        Ok(snapshot)
    }

    /// The snapshot as JSON text.
    pub fn to_json(&self) -> String {
        // Serialising plain structs of integers and strings cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A snapshot of `phases` (numbered from 0) on `tile_count` tiles.
    pub fn from_phases(tile_count: u32, phases: &[Phase]) -> Snapshot {
        Snapshot {
            schema_version: SCHEMA_VERSION,
            tile_count,
            phases: phases
                .iter()
                .enumerate()
                .map(|(i, p)| SnapshotPhase {
                    phase: i as u32,
                    transfers: p
                        .transfers
                        .iter()
                        .map(|t| SnapshotTransfer {
                            source: t.source.as_u32(),
                            source_addresses: t.source_addresses.to_vec(),
                            destinations: t
                                .destinations
                                .iter()
                                .map(|&(d, a)| (d.as_u32(), a))
                                .collect(),
                            words: t.words,
                            width: t.width,
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// The phases, in file order.
    pub fn phases(&self) -> Vec<Phase> {
        self.phases
            .iter()
            .map(|p| Phase {
                tile_count: self.tile_count,
                transfers: p
                    .transfers
                    .iter()
                    .map(|t| Transfer {
                        source: TileId::from_u32(t.source),
                        source_addresses: t.source_addresses.iter().copied().collect(),
                        destinations: t
                            .destinations
                            .iter()
                            .map(|&(d, a)| (TileId::from_u32(d), a))
                            .collect(),
                        words: t.words,
                        width: t.width,
                    })
                    .collect(),
            })
            .collect()
    }
}
