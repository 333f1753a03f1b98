//! Exchange phases from redistributions.
//!
//! Every exchange step of a program becomes one [`Phase`] of word transfers
//! plus the on-tile copies of fragments whose source and destination share
//! a tile. Fragments read at the same source address and length by several
//! destinations (replicated destination layouts) become one multicast
//! transfer. Addresses come from the placement; every transfer must be
//! whole words, which the planner's layouts guarantee and this module
//! checks.

use std::collections::HashMap;

use ipu_exchange::{Phase, Transfer, Width};
use ipu_layout::{Fragment, RedistributeConfig, SourceView, TensorType, TileId, redistribute_view};
use serde::{Deserialize, Serialize};
use smallvec::smallvec;

use crate::program::{BufferId, Program, Redistribute};

/// A copy inside one tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LocalCopy {
    /// The tile.
    pub tile: TileId,
    /// Source address.
    pub source: u32,
    /// Destination address.
    pub destination: u32,
    /// Bytes.
    pub bytes: u32,
    /// Added to `source` per repeat iteration (wrapping), when the source
    /// is a per-iteration buffer.
    #[serde(default)]
    pub source_stride: u32,
    /// Added to `destination` per repeat iteration (wrapping).
    #[serde(default)]
    pub destination_stride: u32,
}

impl LocalCopy {
    /// The copy as iteration `i` of a repeat body does it.
    pub fn in_iteration(&self, i: u32) -> LocalCopy {
        LocalCopy {
            source: self.source.wrapping_add(self.source_stride.wrapping_mul(i)),
            destination: self
                .destination
                .wrapping_add(self.destination_stride.wrapping_mul(i)),
            ..*self
        }
    }
}

/// One exchange step, ready to schedule.
#[derive(Clone, Debug)]
pub struct PhaseBuild {
    /// The transfers between tiles.
    pub phase: Phase,
    /// The copies within tiles.
    pub local: Vec<LocalCopy>,
}

/// Why a phase could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PhaseBuildError {
    /// A redistribution failed.
    #[error("redistributing {source_name} into {destination}: {error}")]
    Layout {
        /// The source buffer.
        source_name: String,
        /// The destination buffer.
        destination: String,
        /// The layout error.
        #[source]
        error: ipu_layout::LayoutError,
    },
    /// A buffer has no address on a tile that holds part of it.
    #[error("bug in the package builder: {buffer} has no address on {tile}")]
    Unplaced {
        /// The buffer.
        buffer: String,
        /// The tile.
        tile: TileId,
    },
    /// A fragment is not whole words.
    #[error(
        "bug in the planner: a fragment of {buffer} on {tile} ({bytes} bytes at {address:#x}) is not \
         whole 32-bit words"
    )]
    Unaligned {
        /// The destination buffer.
        buffer: String,
        /// The destination tile.
        tile: TileId,
        /// The fragment's bytes.
        bytes: u64,
        /// The fragment's destination address.
        address: u64,
    },
}

/// Fragments of redistributions, memoised by their types and view.
#[derive(Debug, Default)]
pub struct FragmentCache {
    map: HashMap<(TensorType, SourceView, TensorType), std::sync::Arc<Vec<Fragment>>>,
}

impl FragmentCache {
    /// The fragments of `source` viewed through `view` into `destination`.
    pub fn get(
        &mut self,
        source: &TensorType,
        view: &SourceView,
        destination: &TensorType,
    ) -> Result<std::sync::Arc<Vec<Fragment>>, ipu_layout::LayoutError> {
        let key = (source.clone(), view.clone(), destination.clone());
        if let Some(f) = self.map.get(&key) {
            return Ok(f.clone());
        }
        let r = redistribute_view(source, view, destination, &RedistributeConfig::default())?;
        let f = std::sync::Arc::new(r.into_fragments());
        self.map.insert(key, f.clone());
        Ok(f)
    }
}

/// Builds the phase of one exchange step. `address(buffer, tile)` is where
/// the buffer's shard starts on the tile; `resolve` maps a body buffer to the
/// buffer of the iteration being built.
pub fn build_phase(
    program: &Program,
    copies: &[Redistribute],
    tile_count: u32,
    cache: &mut FragmentCache,
    resolve: &dyn Fn(BufferId) -> BufferId,
    address: &dyn Fn(BufferId, TileId) -> Option<u32>,
) -> Result<PhaseBuild, PhaseBuildError> {
    // Multicast grouping: (source tile, source address, words) → index.
    let mut by_source: HashMap<(TileId, u32, u32), usize> = HashMap::new();
    let mut transfers: Vec<Transfer> = Vec::new();
    let mut local = Vec::new();
    for c in copies {
        let (s, d) = (resolve(c.source), resolve(c.destination));
        let (sb, db) = (&program.buffers[s], &program.buffers[d]);
        let fragments =
            cache
                .get(&sb.ty, &c.view, &db.ty)
                .map_err(|error| PhaseBuildError::Layout {
                    source_name: sb.name.clone(),
                    destination: db.name.clone(),
                    error,
                })?;
        for f in fragments.iter() {
            let base_s = address(s, f.source).ok_or_else(|| PhaseBuildError::Unplaced {
                buffer: sb.name.clone(),
                tile: f.source,
            })?;
            let base_d = address(d, f.destination).ok_or_else(|| PhaseBuildError::Unplaced {
                buffer: db.name.clone(),
                tile: f.destination,
            })?;
            let src = u64::from(base_s) + f.source_offset;
            let dst = u64::from(base_d) + f.destination_offset;
            let unaligned = || PhaseBuildError::Unaligned {
                buffer: db.name.clone(),
                tile: f.destination,
                bytes: f.bytes,
                address: dst,
            };
            let (Ok(src), Ok(dst), Ok(bytes)) = (
                u32::try_from(src),
                u32::try_from(dst),
                u32::try_from(f.bytes),
            ) else {
                return Err(unaligned());
            };
            if f.is_local() {
                local.push(LocalCopy {
                    tile: f.source,
                    source: src,
                    destination: dst,
                    bytes,
                    source_stride: 0,
                    destination_stride: 0,
                });
                continue;
            }
            if src % 4 != 0 || dst % 4 != 0 || bytes % 4 != 0 {
                return Err(unaligned());
            }
            let words = bytes / 4;
            match by_source.get(&(f.source, src, words)) {
                Some(&i)
                    if !transfers[i]
                        .destinations
                        .iter()
                        .any(|&(t, _)| t == f.destination) =>
                {
                    transfers[i].destinations.push((f.destination, dst));
                }
                _ => {
                    by_source.insert((f.source, src, words), transfers.len());
                    transfers.push(Transfer {
                        source: f.source,
                        source_addresses: smallvec![src],
                        destinations: smallvec![(f.destination, dst)],
                        words,
                        width: Width::Word32,
                    });
                }
            }
        }
    }
    Ok(PhaseBuild {
        phase: Phase {
            tile_count,
            transfers,
        },
        local,
    })
}
