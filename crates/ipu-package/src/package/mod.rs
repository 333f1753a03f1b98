//! The package: what a build produces, in memory and on disk.
//!
//! A package holds the device it was built for, the lowered program
//! (buffers, kernel specs, steps), where every buffer's shard is on every
//! tile and each tile's support memory, every exchange phase (what the
//! program says of it and its encoded rows, with the per-iteration patches
//! of repeat bodies), the kernel objects, and the memory profile.
//! `docs/FORMAT.md` documents the files.
//!
//! The modules: this one is the model; [`rows`] is the `exchange.bin`
//! codec; [`weights`] is `weights.safetensors`, the weights a package
//! carries; `model` is `model.json`, the model a front end built the
//! graph from ([`ModelDescription`]); `write` writes a package directory atomically; `read` verifies
//! every file against the manifest's digests and parses it; `validate`
//! checks what the files say against each other, the target and the
//! [`Limits`]; `forge` re-signs edited files ([`resign`]), as anyone can.

mod error;
mod forge;
mod limits;
mod manifest;
mod model;
mod read;
pub mod rows;
mod validate;
pub mod weights;
mod write;
#[cfg(test)]
mod write_tests;

use ipu_exchange::EncodedRows;
use ipu_layout::{EntityId, TileId};
use ipu_target::Target;
use serde::{Deserialize, Serialize};

pub use error::PackageIoError;
pub use forge::resign;
pub use limits::Limits;
pub use manifest::PackageFile;
pub use model::{InputSource, MODEL_FILE, MODEL_FORMAT, ModelDescription, ModelError, ModelInput};
pub use validate::{
    Access, FixtureMismatch, MAX_ERRORS, SpanError, ValidationError, codelet_accesses,
};
pub use weights::{PackageWeights, WeightsError};

use crate::phases::LocalCopy;
use crate::program::{BufferId, Program};

/// The package format version. Version 3 splits the program from its
/// placement, phases and kernel index, and records the target; version 4
/// labels every step with its operation's id and role.
pub const FORMAT_VERSION: u32 = 4;

/// A word of an exchange row that differs per repeat iteration: in
/// iteration `i` it is `word + i · delta` (wrapping), where `word` is the
/// row's word at `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowPatch {
    /// The tile.
    pub tile: TileId,
    /// Word index in the tile's row.
    pub index: u32,
    /// Added per iteration.
    pub delta: u32,
}

/// What `phases.json` says of an exchange phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseInfo {
    /// The exchange step's name.
    pub name: String,
    /// Copies within tiles, done in the same step.
    pub local: Vec<LocalCopy>,
    /// Per-iteration patches of a repeat body's rows.
    pub patches: Vec<RowPatch>,
    /// Schedule horizon in cycles.
    pub horizon: u64,
    /// The endpoint lower bound.
    pub endpoint_lower_bound: u64,
    /// The stronger lower bound.
    pub stronger_lower_bound: u64,
}

/// One exchange phase of the package.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackagePhase {
    /// Name, on-tile copies, patches, horizon and bounds.
    pub info: PhaseInfo,
    /// Every tile's row (iteration 0 for a repeat body).
    pub rows: EncodedRows,
}

impl PackagePhase {
    /// The rows of repeat iteration `iteration`: the phase's rows with
    /// every patch applied `iteration` times, as the tile model makes them
    /// (borrowed when nothing is patched). A patch naming no word of its
    /// row is left out (validation refuses such a patch).
    pub fn rows_at(&self, iteration: u32) -> std::borrow::Cow<'_, EncodedRows> {
        let (patches, base) = (&self.info.patches, &self.rows);
        if patches.is_empty() || iteration == 0 {
            return std::borrow::Cow::Borrowed(base);
        }
        let mut per_tile: Vec<Vec<u32>> = (0..base.tile_count())
            .map(|t| base.row(TileId::from_u32(t)).to_vec())
            .collect();
        for p in patches {
            if let Some(word) = per_tile
                .get_mut(p.tile.index())
                .and_then(|r| r.get_mut(p.index as usize))
            {
                *word = word.wrapping_add(p.delta.wrapping_mul(iteration));
            }
        }
        std::borrow::Cow::Owned(EncodedRows::from_tile_rows(per_tile))
    }
}

/// A compiled GEMM kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageKernel {
    /// The variant's name.
    pub name: String,
    /// Entry symbols: `[small initialise, small accumulate, large
    /// initialise, large accumulate]`.
    pub entries: [String; 4],
    /// The ELF object (`kernels/NAME.o`).
    #[serde(skip)]
    pub object: Vec<u8>,
    /// `kernel.json` (`kernels/NAME.json`).
    #[serde(skip)]
    pub metadata: String,
}

/// A tile's support memory: runtime, kernel code, control program and
/// exchange rows, in the code region from `start`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileSupport {
    /// First address.
    pub start: u32,
    /// Bytes reserved (whole memory elements).
    pub reserved: u32,
    /// Runtime and codelet code.
    pub runtime_bytes: u32,
    /// GEMM kernel code.
    pub kernel_code_bytes: u32,
    /// The control program (steps and codelet arguments).
    pub control_bytes: u32,
    /// Exchange rows of every phase.
    pub exchange_bytes: u32,
    /// Repeat patches.
    pub patch_bytes: u32,
}

impl TileSupport {
    /// Bytes used.
    pub fn used(&self) -> u32 {
        self.runtime_bytes
            .saturating_add(self.kernel_code_bytes)
            .saturating_add(self.control_bytes)
            .saturating_add(self.exchange_bytes)
            .saturating_add(self.patch_bytes)
    }
}

/// Where every buffer's shards are: per buffer (by id), `(tile, address)`
/// of each placed shard, sorted by tile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BufferAddresses {
    lists: Vec<Vec<(u32, u32)>>,
}

impl BufferAddresses {
    /// Addresses from per-buffer lists (each sorted by tile here).
    pub fn from_lists(mut lists: Vec<Vec<(u32, u32)>>) -> BufferAddresses {
        for list in &mut lists {
            list.sort_unstable();
        }
        BufferAddresses { lists }
    }

    /// Where `buffer`'s shard on `tile` starts.
    pub fn get(&self, buffer: BufferId, tile: TileId) -> Option<u32> {
        let list = self.lists.get(buffer.index())?;
        // A buffer spread over every tile from tile 0 has its shard on
        // tile t at index t: one read instead of a binary search, and
        // exchange phases look up every transfer's addresses this way. A
        // list holds each tile once, so the entry found is the one the
        // search would find.
        if let Some(&(t, address)) = list.get(tile.index())
            && t == tile.as_u32()
        {
            return Some(address);
        }
        let i = list.binary_search_by_key(&tile.as_u32(), |e| e.0).ok()?;
        Some(list[i].1)
    }

    /// `(tile, address)` of every placed shard of `buffer`.
    pub fn of(&self, buffer: BufferId) -> &[(u32, u32)] {
        self.lists.get(buffer.index()).map_or(&[], Vec::as_slice)
    }

    /// The list of `buffer`, to edit (tests that damage a package do).
    /// [`Package::validate`] finds a list left out of tile order.
    pub fn of_mut(&mut self, buffer: BufferId) -> Option<&mut Vec<(u32, u32)>> {
        self.lists.get_mut(buffer.index())
    }

    /// Every buffer's list, in buffer order.
    pub fn iter(&self) -> impl Iterator<Item = (BufferId, &[(u32, u32)])> + '_ {
        self.lists
            .iter()
            .enumerate()
            .map(|(i, l)| (BufferId::new(i), l.as_slice()))
    }

    /// Buffers listed.
    pub fn len(&self) -> usize {
        self.lists.len()
    }

    /// Whether no buffer is listed.
    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }
}

/// Where the program's data and support memory are on every tile
/// (`placement.json`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackagePlacement {
    /// Every buffer's shard addresses.
    pub addresses: BufferAddresses,
    /// Per tile: its support memory.
    pub support: Vec<TileSupport>,
}

/// Headline figures of a build.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
// A misspelt field is damage, not an extension: the manifest is versioned.
#[serde(deny_unknown_fields)]
pub struct BuildSummary {
    /// Tiles.
    pub tile_count: u32,
    /// Storage requests placed.
    pub requests: usize,
    /// The largest peak address use of a tile, in bytes above the SRAM base.
    pub peak_bytes: u64,
    /// The smallest free space left on a tile at its fullest step: usable
    /// bytes minus live data and the support memory actually used.
    pub min_headroom_bytes: u64,
    /// The tile with the least headroom.
    pub min_headroom_tile: u32,
    /// Σ horizon of the exchange phases (each body phase once).
    pub exchange_horizon: u64,
    /// Σ endpoint lower bound of the same phases.
    pub exchange_endpoint_bound: u64,
    /// Σ stronger lower bound.
    pub exchange_stronger_bound: u64,
    /// Distinct GEMM kernels.
    pub kernels: usize,
    /// The largest support memory of a tile.
    pub max_support_bytes: u32,
    /// Elapsed milliseconds per phase, for the builder's report. Never
    /// written: wall-clock time differs from run to run, and a package must
    /// be byte-identical whatever the machine, its load or the thread
    /// count. Empty in a package read from disk.
    #[serde(skip)]
    pub phase_ms: Vec<(String, u64)>,
    /// The per-op transient budget the plan ended with.
    pub transient_budget: u64,
}

/// The manifest: what the package is and what its files hold.
///
/// On disk, `manifest.json` holds it with a digest of itself; the files'
/// digests and the manifest's protect the bytes on disk and are checked by
/// [`Package::read`] before anything is parsed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The graph's name.
    pub name: String,
    /// The target's name (its description is `target.toml`).
    pub target: String,
    /// Tiles.
    pub tile_count: u32,
    /// Headline figures.
    pub summary: BuildSummary,
    /// Every other file of the package with its size and SHA-256, in the
    /// order written (empty in a package that has not been written or
    /// read).
    pub files: Vec<PackageFile>,
}

/// A built package.
#[derive(Clone, Debug)]
pub struct Package {
    /// The manifest.
    pub manifest: Manifest,
    /// The device the package was built for (`target.toml`).
    pub target: Target,
    /// Buffers, kernel specs and steps (`program.json`).
    pub program: Program,
    /// Shard addresses and support memory (`placement.json`).
    pub placement: PackagePlacement,
    /// Every exchange phase, in program order with each repeat body once
    /// (`phases.json` and `exchange.bin`).
    pub phases: Vec<PackagePhase>,
    /// Compiled kernels (`kernels.json` and the files under `kernels/`).
    pub kernels: Vec<PackageKernel>,
    /// The memory profile JSON (`memory-profile.json`).
    pub memory_profile: String,
    /// The cycle estimate (`profile.json`), when the build made one.
    pub profile: Option<crate::profile::Profile>,
    /// The graph the package was built from as a fixture (`fixture.json`):
    /// the fixture as given, or the graph a model front end built, written
    /// by [`crate::graph::write_fixture`]; so that a run can be checked
    /// against the reference evaluation of the same graph.
    pub fixture: Option<String>,
    /// The graph's weights (`weights.safetensors`), when the package
    /// carries them; a run then takes every weight from here.
    pub weights: Option<PackageWeights>,
    /// The model a front end built the graph from (`model.json`), with
    /// what a run needs to make the graph's inputs from a user's data.
    pub model: Option<ModelDescription>,
}
