//! Exchange phases from redistributions.
//!
//! Every exchange step of a program becomes one [`Phase`] of word transfers
//! plus the on-tile copies of fragments whose source and destination share
//! a tile. Fragments read at the same source address and length by several
//! destinations (replicated destination layouts) become one multicast
//! transfer. Addresses come from the placement; every transfer must be
//! whole words, which the planner's layouts guarantee and this module
//! checks.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ipu_exchange::{Phase, Transfer, Width};
use ipu_layout::hash::FoldBuildHasher;
use ipu_layout::{
    EntityId, Fragment, RedistributeConfig, SourceView, TensorType, TileId, redistribute_view,
};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use smallvec::{SmallVec, smallvec};

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
#[non_exhaustive]
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

/// Multicast grouping: (source tile, buffer, offset, words) → the
/// transfers reading that run.
/// Looked up for every fragment of a step (millions at SigLIP scale), so
/// with the cheap [`FoldBuildHasher`].
type RunGroups = HashMap<(TileId, BufferId, u32, u32), SmallVec<[usize; 1]>, FoldBuildHasher>;

/// A redistribution: source type, view, destination type.
type FragmentKey = (TensorType, SourceView, TensorType);

/// Fragments of redistributions, memoised by their types and view.
///
/// [`FragmentCache::fill`] computes the ones a plan needs together, in
/// parallel; lookups then only read, so steps can be shaped in parallel.
#[derive(Debug, Default)]
pub struct FragmentCache {
    map: HashMap<FragmentKey, Result<Arc<Vec<Fragment>>, ipu_layout::LayoutError>>,
}

impl FragmentCache {
    /// Computes (in parallel) and keeps the fragments of every
    /// redistribution of `keys` not kept yet.
    pub fn fill(&mut self, keys: impl IntoIterator<Item = FragmentKey>) {
        let mut missing: Vec<FragmentKey> = Vec::new();
        let mut seen: HashSet<FragmentKey> = HashSet::new();
        for key in keys {
            if !self.map.contains_key(&key) && !seen.contains(&key) {
                seen.insert(key.clone());
                missing.push(key);
            }
        }
        let computed: Vec<_> = missing
            .into_par_iter()
            .map(|key| {
                let fragments = fragments_of(&key.0, &key.1, &key.2);
                (key, fragments)
            })
            .collect();
        self.map.extend(computed);
    }

    /// The fragments of `source` viewed through `view` into `destination`:
    /// kept ones, or computed now (and not kept) for a redistribution
    /// [`FragmentCache::fill`] was not given.
    pub fn get(
        &self,
        source: &TensorType,
        view: &SourceView,
        destination: &TensorType,
    ) -> Result<Arc<Vec<Fragment>>, ipu_layout::LayoutError> {
        let key = (source.clone(), view.clone(), destination.clone());
        match self.map.get(&key) {
            Some(kept) => kept.clone(),
            None => fragments_of(source, view, destination),
        }
    }
}

fn fragments_of(
    source: &TensorType,
    view: &SourceView,
    destination: &TensorType,
) -> Result<Arc<Vec<Fragment>>, ipu_layout::LayoutError> {
    let r = redistribute_view(source, view, destination, &RedistributeConfig::default())?;
    Ok(Arc::new(r.into_fragments()))
}

/// One exchange step in buffer terms: every transfer and on-tile copy with
/// its buffers and byte offsets, before any address is known.
///
/// Fragments, multicast grouping and the word checks of the offsets depend
/// only on the buffers' types, so a plan computes each step's shape once
/// and then turns it into a [`PhaseBuild`] for any placement
/// ([`PhaseShape::at`]) by adding base addresses — no hashing, no
/// redistribution. Two transfers are one multicast when they read the same
/// run of the same buffer on the same tile, which for buffers live in one
/// step is the same as reading the same address.
#[derive(Clone, Debug)]
pub struct PhaseShape {
    tile_count: u32,
    transfers: Vec<ShapeTransfer>,
    local: Vec<ShapeCopy>,
}

/// A transfer between tiles in buffer terms.
#[derive(Clone, Debug)]
struct ShapeTransfer {
    source: TileId,
    buffer: BufferId,
    offset: u32,
    words: u32,
    /// Per destination: its tile, buffer and byte offset in the shard.
    destinations: SmallVec<[(TileId, BufferId, u32); 2]>,
}

/// An on-tile copy in buffer terms.
#[derive(Clone, Copy, Debug)]
struct ShapeCopy {
    tile: TileId,
    source: BufferId,
    source_offset: u32,
    destination: BufferId,
    destination_offset: u32,
    bytes: u32,
}

/// Per tile: what one phase makes it send and receive, from its shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TileTraffic {
    /// Transfers the tile sends.
    pub sends: u32,
    /// Words the tile sends.
    pub send_words: u64,
    /// Send instructions the words need at least: one per transfer and
    /// per 64 words of it.
    pub send_chunks: u64,
    /// Transfers the tile receives.
    pub receives: u32,
    /// Words the tile receives.
    pub receive_words: u64,
}

impl PhaseShape {
    /// A measure of the work scheduling this phase takes: its transfers
    /// and their destinations.
    pub(crate) fn work(&self) -> usize {
        self.transfers
            .iter()
            .map(|t| 1 + t.destinations.len())
            .sum()
    }

    /// The shape of one exchange step; `resolve` maps a body buffer to the
    /// buffer of the iteration being built.
    pub fn build(
        program: &Program,
        copies: &[Redistribute],
        tile_count: u32,
        cache: &FragmentCache,
        resolve: &dyn Fn(BufferId) -> BufferId,
    ) -> Result<PhaseShape, PhaseBuildError> {
        // Multicast grouping: (source tile, buffer, offset, words) → the
        // transfers reading that run. A fragment joins the first of them
        // that does not yet write its destination tile (two rows of one
        // tile read from the same source run, as a broadcast gives, need
        // two transfers, but every other tile joins those two).
        let fragments_of = |c: &Redistribute| {
            let (s, d) = (resolve(c.source), resolve(c.destination));
            let (sb, db) = (&program.buffers[s], &program.buffers[d]);
            cache
                .get(&sb.ty, &c.view, &db.ty)
                .map(|f| (s, d, f))
                .map_err(|error| PhaseBuildError::Layout {
                    source_name: sb.name.clone(),
                    destination: db.name.clone(),
                    error,
                })
        };
        let all = copies
            .iter()
            .map(fragments_of)
            .collect::<Result<Vec<_>, _>>()?;
        // Sized for every fragment up front: a large step groups millions,
        // and growing the table rehashes every key each time.
        let count: usize = all.iter().map(|(_, _, f)| f.len()).sum();
        let mut by_source: RunGroups = HashMap::with_capacity_and_hasher(count, Default::default());
        let mut transfers: Vec<ShapeTransfer> = Vec::new();
        let mut local = Vec::new();
        for (s, d, fragments) in all {
            let db = &program.buffers[d];
            for f in fragments.iter() {
                let unaligned = || PhaseBuildError::Unaligned {
                    buffer: db.name.clone(),
                    tile: f.destination,
                    bytes: f.bytes,
                    address: f.destination_offset,
                };
                let (Ok(so), Ok(dof), Ok(bytes)) = (
                    u32::try_from(f.source_offset),
                    u32::try_from(f.destination_offset),
                    u32::try_from(f.bytes),
                ) else {
                    return Err(unaligned());
                };
                if f.is_local() {
                    local.push(ShapeCopy {
                        tile: f.source,
                        source: s,
                        source_offset: so,
                        destination: d,
                        destination_offset: dof,
                        bytes,
                    });
                    continue;
                }
                if so % 4 != 0 || dof % 4 != 0 || bytes % 4 != 0 {
                    return Err(unaligned());
                }
                let words = bytes / 4;
                let key = (f.source, s, so, words);
                let group = by_source.entry(key).or_default();
                let joined = group.iter().copied().find(|&i| {
                    !transfers[i]
                        .destinations
                        .iter()
                        .any(|&(t, _, _)| t == f.destination)
                });
                match joined {
                    Some(i) => transfers[i].destinations.push((f.destination, d, dof)),
                    None => {
                        group.push(transfers.len());
                        transfers.push(ShapeTransfer {
                            source: f.source,
                            buffer: s,
                            offset: so,
                            words,
                            destinations: smallvec![(f.destination, d, dof)],
                        });
                    }
                }
            }
        }
        Ok(PhaseShape {
            tile_count,
            transfers,
            local,
        })
    }

    /// The same shape with every buffer mapped through `map` (the next
    /// iteration of a repeat body, whose buffers have the same types).
    pub fn map_buffers(&self, map: &dyn Fn(BufferId) -> BufferId) -> PhaseShape {
        PhaseShape {
            tile_count: self.tile_count,
            transfers: self
                .transfers
                .iter()
                .map(|t| ShapeTransfer {
                    buffer: map(t.buffer),
                    destinations: t
                        .destinations
                        .iter()
                        .map(|&(tile, b, o)| (tile, map(b), o))
                        .collect(),
                    ..*t
                })
                .collect(),
            local: self
                .local
                .iter()
                .map(|c| ShapeCopy {
                    source: map(c.source),
                    destination: map(c.destination),
                    ..*c
                })
                .collect(),
        }
    }

    /// Transfers between tiles.
    pub fn transfer_count(&self) -> usize {
        self.transfers.len()
    }

    /// Whether any transfer or copy reads or writes a buffer `pred` holds.
    pub fn touches(&self, pred: &dyn Fn(BufferId) -> bool) -> bool {
        self.transfers
            .iter()
            .any(|t| pred(t.buffer) || t.destinations.iter().any(|&(_, b, _)| pred(b)))
            || self
                .local
                .iter()
                .any(|c| pred(c.source) || pred(c.destination))
    }

    /// Adds what this phase makes every tile send and receive to `traffic`
    /// (indexed by tile).
    pub fn add_traffic(&self, traffic: &mut [TileTraffic]) {
        for t in &self.transfers {
            if let Some(s) = traffic.get_mut(t.source.index()) {
                s.sends += 1;
                s.send_words += u64::from(t.words);
                s.send_chunks += u64::from(t.words.div_ceil(64).max(1));
            }
            for &(d, _, _) in &t.destinations {
                if let Some(r) = traffic.get_mut(d.index()) {
                    r.receives += 1;
                    r.receive_words += u64::from(t.words);
                }
            }
        }
    }

    /// The phase at the addresses `address(buffer, tile)` gives (where the
    /// buffer's shard starts on the tile).
    pub fn at(
        &self,
        program: &Program,
        address: &dyn Fn(BufferId, TileId) -> Option<u32>,
    ) -> Result<PhaseBuild, PhaseBuildError> {
        let base = |b: BufferId, tile: TileId| {
            address(b, tile).ok_or_else(|| PhaseBuildError::Unplaced {
                buffer: program.buffers[b].name.clone(),
                tile,
            })
        };
        let place = |b: BufferId, tile: TileId, offset: u32, bytes: u32, dest: BufferId| {
            let a = u64::from(base(b, tile)?) + u64::from(offset);
            u32::try_from(a).map_err(|_| PhaseBuildError::Unaligned {
                buffer: program.buffers[dest].name.clone(),
                tile,
                bytes: u64::from(bytes),
                address: a,
            })
        };
        let mut transfers = Vec::with_capacity(self.transfers.len());
        for t in &self.transfers {
            let bytes = t.words * 4;
            let first = t.destinations[0].1;
            let src = place(t.buffer, t.source, t.offset, bytes, first)?;
            let mut destinations = SmallVec::with_capacity(t.destinations.len());
            for &(d, b, o) in &t.destinations {
                let dst = place(b, d, o, bytes, b)?;
                if src % 4 != 0 || dst % 4 != 0 {
                    return Err(PhaseBuildError::Unaligned {
                        buffer: program.buffers[b].name.clone(),
                        tile: d,
                        bytes: u64::from(bytes),
                        address: u64::from(dst),
                    });
                }
                destinations.push((d, dst));
            }
            transfers.push(Transfer {
                source: t.source,
                source_addresses: smallvec![src],
                destinations,
                words: t.words,
                width: Width::Word32,
            });
        }
        let mut local = Vec::with_capacity(self.local.len());
        for c in &self.local {
            local.push(LocalCopy {
                tile: c.tile,
                source: place(c.source, c.tile, c.source_offset, c.bytes, c.destination)?,
                destination: place(
                    c.destination,
                    c.tile,
                    c.destination_offset,
                    c.bytes,
                    c.destination,
                )?,
                bytes: c.bytes,
                source_stride: 0,
                destination_stride: 0,
            });
        }
        Ok(PhaseBuild {
            phase: Phase {
                tile_count: self.tile_count,
                transfers,
            },
            local,
        })
    }
}
