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
    redistribute_view_each,
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
    /// A step makes more transfers than a phase numbers.
    #[error("a step makes more than {} transfers between tiles, more than a phase numbers", u32::MAX - 1)]
    TooManyTransfers,
}

/// Multicast grouping: (source tile, buffer, offset, words) → the first
/// transfer reading that run (the others follow it in a chain, see
/// [`Grouping`]).
/// Looked up for every fragment of a step (millions at SigLIP scale), so
/// with the cheap [`FoldBuildHasher`], and small: 20 bytes an entry.
type RunGroups = HashMap<(TileId, BufferId, u32, u32), u32, FoldBuildHasher>;

/// The end of a chain of transfers reading one run.
const NO_TRANSFER: u32 = u32::MAX;

/// A redistribution: source type, view, destination type.
type FragmentKey = (TensorType, SourceView, TensorType);

/// Fragments of redistributions, memoised by their types and view.
///
/// [`FragmentCache::fill`] computes, in parallel, the ones several steps
/// make (a step computes its others as it shapes itself, see
/// `shape_steps`); lookups then only read, so steps can be shaped in
/// parallel.
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

    /// The kept fragments of `source` viewed through `view` into
    /// `destination`, if [`FragmentCache::fill`] was given that
    /// redistribution.
    pub fn kept(
        &self,
        source: &TensorType,
        view: &SourceView,
        destination: &TensorType,
    ) -> Option<&Result<Arc<Vec<Fragment>>, ipu_layout::LayoutError>> {
        self.map
            .get(&(source.clone(), view.clone(), destination.clone()))
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
    /// Every transfer's destinations, one after another: its tile, buffer
    /// and byte offset in the shard. Shapes live for the whole build, and
    /// SigLIP's have millions of destinations: one list sized once takes
    /// half the memory of a small vector per transfer grown one
    /// destination at a time (DHAT, at the build's peak).
    destinations: Vec<Destination>,
    local: Vec<ShapeCopy>,
}

/// A destination of a transfer: tile, buffer, byte offset in the shard.
type Destination = (TileId, BufferId, u32);

/// A transfer between tiles in buffer terms.
#[derive(Clone, Copy, Debug)]
struct ShapeTransfer {
    source: TileId,
    buffer: BufferId,
    offset: u32,
    words: u32,
    /// Its destinations are `destinations[first..first + count]` of the
    /// shape.
    first: u32,
    count: u32,
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

/// A step's fragments grouped into transfers and on-tile copies, one
/// fragment at a time.
///
/// Multicast grouping: a fragment joins a transfer that reads the same
/// run (source tile, buffer, offset, words) — the first of them, in the
/// order they were made, that does not yet write its destination tile
/// (two rows of one tile read from the same source run, as a broadcast
/// gives, need two transfers, but every other tile joins those two).
#[derive(Default)]
struct Grouping {
    /// Each run's first transfer.
    by_source: RunGroups,
    transfers: Vec<Grouped>,
    /// Per transfer: the next transfer reading the same run.
    same_run: Vec<u32>,
    local: Vec<ShapeCopy>,
}

impl Grouping {
    /// Adds fragment `f` of a redistribution from buffer `s` into buffer
    /// `d` (named `d_name`).
    fn add(
        &mut self,
        s: BufferId,
        d: BufferId,
        d_name: &str,
        f: &Fragment,
    ) -> Result<(), PhaseBuildError> {
        let unaligned = || PhaseBuildError::Unaligned {
            buffer: d_name.to_owned(),
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
            self.local.push(ShapeCopy {
                tile: f.source,
                source: s,
                source_offset: so,
                destination: d,
                destination_offset: dof,
                bytes,
            });
            return Ok(());
        }
        if so % 4 != 0 || dof % 4 != 0 || bytes % 4 != 0 {
            return Err(unaligned());
        }
        let words = bytes / 4;
        let Some(new) = u32::try_from(self.transfers.len())
            .ok()
            .filter(|&n| n != NO_TRANSFER)
        else {
            return Err(PhaseBuildError::TooManyTransfers);
        };
        // The first transfer of the run's chain that does not write the
        // destination tile yet, else the chain's last.
        let mut at = *self
            .by_source
            .entry((f.source, s, so, words))
            .or_insert(new);
        let mut last = NO_TRANSFER;
        while at != NO_TRANSFER && at != new {
            let writes = self.transfers[at as usize]
                .destinations
                .iter()
                .any(|&(t, _, _)| t == f.destination);
            if !writes {
                break;
            }
            last = at;
            at = self.same_run[at as usize];
        }
        if at != NO_TRANSFER && at != new {
            self.transfers[at as usize]
                .destinations
                .push((f.destination, d, dof));
            return Ok(());
        }
        if last != NO_TRANSFER {
            self.same_run[last as usize] = new;
        }
        self.same_run.push(NO_TRANSFER);
        self.transfers.push(Grouped {
            source: f.source,
            buffer: s,
            offset: so,
            words,
            destinations: smallvec![(f.destination, d, dof)],
        });
        Ok(())
    }

    /// The shape of the fragments added, on `tile_count` tiles: the
    /// transfers with their destinations in one list, and the copies.
    fn finish(self, tile_count: u32) -> Result<PhaseShape, PhaseBuildError> {
        let total: usize = self.transfers.iter().map(|t| t.destinations.len()).sum();
        if u32::try_from(total).is_err() {
            return Err(PhaseBuildError::TooManyTransfers);
        }
        let mut destinations = Vec::with_capacity(total);
        let transfers = self
            .transfers
            .into_iter()
            .map(|t| {
                // Within `total`, which fits in u32.
                let first = destinations.len() as u32;
                destinations.extend_from_slice(&t.destinations);
                ShapeTransfer {
                    source: t.source,
                    buffer: t.buffer,
                    offset: t.offset,
                    words: t.words,
                    first,
                    count: t.destinations.len() as u32,
                }
            })
            .collect();
        Ok(PhaseShape {
            tile_count,
            transfers,
            destinations,
            local: self.local,
        })
    }
}

/// A transfer while its step's fragments are grouped.
struct Grouped {
    source: TileId,
    buffer: BufferId,
    offset: u32,
    words: u32,
    destinations: SmallVec<[Destination; 2]>,
}

impl PhaseShape {
    /// A measure of the work scheduling this phase takes: its transfers
    /// and their destinations.
    pub(crate) fn work(&self) -> usize {
        self.transfers.len() + self.destinations.len()
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
        // Fragments are grouped as they are made: a step's redistributions
        // have millions of them, and no list of them is kept (see
        // `shape_steps`), except for a redistribution several steps make.
        let mut grouping = Grouping::default();
        for c in copies {
            let (s, d) = (resolve(c.source), resolve(c.destination));
            let (sb, db) = (&program.buffers[s], &program.buffers[d]);
            let layout = |error| PhaseBuildError::Layout {
                source_name: sb.name.clone(),
                destination: db.name.clone(),
                error,
            };
            match cache.kept(&sb.ty, &c.view, &db.ty) {
                Some(Ok(fragments)) => {
                    for f in fragments.iter() {
                        grouping.add(s, d, &db.name, f)?;
                    }
                }
                Some(Err(error)) => return Err(layout(error.clone())),
                None => {
                    let mut failed = None;
                    let config = RedistributeConfig::default();
                    redistribute_view_each(
                        &sb.ty,
                        &c.view,
                        &db.ty,
                        &config,
                        &mut |f| match grouping.add(s, d, &db.name, &f) {
                            Ok(()) => true,
                            Err(e) => {
                                failed = Some(e);
                                false
                            }
                        },
                    )
                    .map_err(layout)?;
                    if let Some(e) = failed {
                        return Err(e);
                    }
                }
            }
        }
        grouping.finish(tile_count)
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
                    ..*t
                })
                .collect(),
            destinations: self
                .destinations
                .iter()
                .map(|&(tile, b, o)| (tile, map(b), o))
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

    /// Transfer `t`'s destinations.
    fn destinations_of(&self, t: &ShapeTransfer) -> &[Destination] {
        let first = t.first as usize;
        &self.destinations[first..first + t.count as usize]
    }

    /// Transfers between tiles.
    pub fn transfer_count(&self) -> usize {
        self.transfers.len()
    }

    /// Whether any transfer or copy reads or writes a buffer `pred` holds.
    pub fn touches(&self, pred: &dyn Fn(BufferId) -> bool) -> bool {
        self.transfers.iter().any(|t| pred(t.buffer))
            || self.destinations.iter().any(|&(_, b, _)| pred(b))
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
            for &(d, _, _) in self.destinations_of(t) {
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
            let dests = self.destinations_of(t);
            let first = dests.first().map_or(t.buffer, |&(_, b, _)| b);
            let src = place(t.buffer, t.source, t.offset, bytes, first)?;
            let mut destinations = SmallVec::with_capacity(dests.len());
            for &(d, b, o) in dests {
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
