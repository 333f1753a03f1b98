//! Structural validation of a package read from disk: what its files say
//! must agree with its own declarations and its target, and ask for no
//! more than [`Limits`], before anything is allocated for it or run. The
//! digests only find damage; a package edited with its digests recomputed
//! is caught here or not at all.
//!
//! The checks, in order (a stage runs only when the ones it relies on
//! passed, so that no check indexes with an id an earlier one refused):
//!
//! 1. the manifest against the target: tile count, name, tile memory;
//! 2. buffers and placement (`placement.rs`): types no wider than the
//!    package, unique names, every non-empty shard placed once inside tile
//!    memory and outside support memory, aligned, support memory inside
//!    the code region;
//! 3. kernels (`kernels.rs`): one compiled kernel per spec, whose object
//!    parses and holds, for each entry, the program the spec describes;
//! 4. steps (`steps.rs`): every buffer, kernel and tile id in range,
//!    repeats nested no deeper and counted no higher than the limits, with
//!    one substitute per iteration, every codelet operand span
//!    ([`codelet_accesses`]) inside its (substituted) buffer's shard on
//!    the calling tile, GEMM rows and operands as the kernel's program has
//!    them, and the run's work counted against the limits;
//! 5. exchange (`exchange.rs`): one phase per exchange step, rows for every
//!    tile, patches naming existing words, on-tile copies inside placed
//!    memory in every iteration, and every row of every iteration replayed
//!    against the placed ranges (no data moves) — what a run does, so a
//!    package that validates does not fail its exchange;
//! 6. the graph (`fixture.rs`): the stored fixture parsed within the
//!    limits (whether it was given or a model front end built the graph
//!    and the build wrote it), checked against the program's host-visible
//!    buffers by name, shape and precision ([`Package::check_fixture`]),
//!    so that a run never generates values for tensors the package does
//!    not hold; then the header of `weights.safetensors` against that
//!    graph, and the model description (`model.json`) against it: its
//!    inputs are the graph's, and a described model carries its weights.
//!
//! At most [`MAX_ERRORS`] problems are collected; validation stops there.

mod access;
mod exchange;
mod fixture;
mod kernels;
mod placement;
mod steps;

use ipu_exchange::ReplayError;
use ipu_kernels::KernelError;
use ipu_layout::TileId;

use super::{Limits, ModelError, Package, WeightsError};
use crate::graph::FixtureError;
use crate::program::{BufferId, KernelId};

pub use access::{Access, SpanError, codelet_accesses};
pub use fixture::FixtureMismatch;

/// The most problems one validation reports.
pub const MAX_ERRORS: usize = 64;

/// One way a package contradicts itself or its target, or asks for more
/// than the limits allow.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// The manifest's tile count is not one the target has.
    #[error("the manifest says {tiles} tiles; the target {target} has {available}")]
    TileCount {
        /// Tiles in the manifest.
        tiles: u32,
        /// The target's name.
        target: String,
        /// Tiles the target has.
        available: u32,
    },
    /// The manifest names another target than `target.toml`.
    #[error("the manifest names target {manifest}, target.toml describes {file}")]
    TargetName {
        /// The manifest's target name.
        manifest: String,
        /// `target.toml`'s.
        file: String,
    },
    /// A count or amount is above its limit.
    #[error("the package asks for {found} {what}; a package may ask for at most {limit}")]
    Limit {
        /// What is counted.
        what: &'static str,
        /// What the package asks for (saturated at `u64::MAX`).
        found: u64,
        /// The limit.
        limit: u64,
    },
    /// The target's exchange fabric cannot be built.
    #[error("target.toml: {0}")]
    Fabric(#[source] ipu_exchange::FabricError),
    /// Support memory is not given for every tile.
    #[error("support memory is given for {found} tiles, the package has {tiles}")]
    Support {
        /// Entries found.
        found: usize,
        /// Tiles of the package.
        tiles: u32,
    },
    /// A tile calls kernel entries whose code blocks take more than the
    /// kernel code its support memory counts.
    #[error(
        "{tile}: its support memory counts {counted} bytes of kernel code, but the kernel entries it calls take {needed}"
    )]
    KernelCode {
        /// The tile.
        tile: TileId,
        /// Kernel code bytes its support counts.
        counted: u32,
        /// Code bytes of the entries it calls.
        needed: u64,
    },
    /// A tile's support memory is not inside the code region, or uses more
    /// than it reserves.
    #[error(
        "{tile}: support memory at {start:#x} reserves {reserved} bytes and uses {used}; it must lie in the code region {region_start:#x}..{region_end:#x} and use no more than it reserves"
    )]
    SupportOutside {
        /// The tile.
        tile: TileId,
        /// First address.
        start: u32,
        /// Bytes reserved.
        reserved: u32,
        /// Bytes used.
        used: u64,
        /// The code region's start.
        region_start: u32,
        /// The code region's end.
        region_end: u32,
    },
    /// Addresses are given for a different number of buffers than the
    /// program has.
    #[error("addresses are given for {found} buffers, the program has {buffers}")]
    AddressLists {
        /// Lists found.
        found: usize,
        /// Buffers of the program.
        buffers: usize,
    },
    /// Two buffers have one name (buffers are matched with fixture tensors
    /// by name).
    #[error("two buffers are named {buffer}")]
    DuplicateBuffer {
        /// The name.
        buffer: String,
    },
    /// A buffer's type spans more tiles than the package has, or cannot be
    /// sized on one of them.
    #[error("{buffer}'s type spans {type_tiles} tiles, the package has {tiles}")]
    BufferTiles {
        /// The buffer's name.
        buffer: String,
        /// Tiles of the type.
        type_tiles: u32,
        /// Tiles of the package.
        tiles: u32,
    },
    /// A buffer's alignment is not a power of two.
    #[error("{buffer}'s alignment {alignment} is not a power of two")]
    Alignment {
        /// The buffer's name.
        buffer: String,
        /// The alignment.
        alignment: u32,
    },
    /// A shard is placed on a tile the package does not have, or outside
    /// the tile's SRAM.
    #[error("{buffer} on {tile} at {address:#x} ({bytes} bytes) is outside tile memory")]
    ShardOutside {
        /// The buffer's name.
        buffer: String,
        /// The tile.
        tile: TileId,
        /// The address.
        address: u32,
        /// The bytes of the shard and its access tail.
        bytes: u64,
    },
    /// A shard overlaps its tile's support memory.
    #[error(
        "{buffer} on {tile} at {address:#x} ({bytes} bytes) overlaps the tile's support memory"
    )]
    ShardInSupport {
        /// The buffer's name.
        buffer: String,
        /// The tile.
        tile: TileId,
        /// The address.
        address: u32,
        /// The bytes of the shard and its access tail.
        bytes: u64,
    },
    /// A shard's address is not a multiple of its buffer's alignment.
    #[error("{buffer} on {tile} at {address:#x} is not aligned to {alignment} bytes")]
    Misaligned {
        /// The buffer's name.
        buffer: String,
        /// The tile.
        tile: TileId,
        /// The address.
        address: u32,
        /// The alignment.
        alignment: u32,
    },
    /// A buffer's shards are not listed in increasing tile order, once each.
    #[error("the addresses of {buffer} are not in increasing tile order")]
    AddressOrder {
        /// The buffer's name.
        buffer: String,
    },
    /// A non-empty shard has no address, or an empty one has one.
    #[error(
        "{buffer}'s shard on {tile} ({bytes} bytes) {}",
        if *.placed { "is empty but has an address" } else { "has no address" }
    )]
    Placement {
        /// The buffer's name.
        buffer: String,
        /// The tile.
        tile: TileId,
        /// The shard's bytes.
        bytes: u64,
        /// Whether it has an address.
        placed: bool,
    },
    /// The program's kernel specs and the compiled kernels differ in number.
    #[error("the program has {specs} GEMM kernels, kernels.json lists {compiled}")]
    KernelCount {
        /// Kernel specs of the program.
        specs: usize,
        /// Compiled kernels.
        compiled: usize,
    },
    /// A kernel's object does not parse.
    #[error("kernel {kernel}: {source}")]
    KernelObject {
        /// The kernel's name.
        kernel: String,
        /// Why.
        #[source]
        source: KernelError,
    },
    /// A kernel's object has no program for one of its entry symbols.
    #[error("kernel {kernel}: no program for entry symbol {symbol}")]
    KernelEntry {
        /// The kernel's name.
        kernel: String,
        /// The entry symbol.
        symbol: String,
    },
    /// Two entries of one kernel name the same symbol: each of the four
    /// entries (small and large rows, initialise and accumulate) is a
    /// program of its own.
    #[error("kernel {kernel}: entries {first} and {second} both name symbol {symbol}")]
    KernelEntryRepeated {
        /// The kernel's name.
        kernel: String,
        /// The repeated entry symbol.
        symbol: String,
        /// The first entry naming it (0..4: small initialise, small
        /// accumulate, large initialise, large accumulate).
        first: usize,
        /// The later entry naming it.
        second: usize,
    },
    /// A kernel's program has blocks no variant of the spec's shape has.
    #[error(
        "kernel {kernel}: the program of entry {symbol} is no variant of the spec's shape: {source}"
    )]
    KernelVariant {
        /// The kernel's name.
        kernel: String,
        /// The entry symbol.
        symbol: String,
        /// Why.
        #[source]
        source: KernelError,
    },
    /// A kernel's program does not compute what the program's spec says.
    #[error(
        "kernel {kernel}: the program of entry {symbol} fails the kernel checker with {} problem(s); first: {}",
        problems.len(),
        problems.first().map(ToString::to_string).unwrap_or_default()
    )]
    KernelCheck {
        /// The kernel's name.
        kernel: String,
        /// The entry symbol.
        symbol: String,
        /// Every problem the checker found.
        problems: Vec<ipu_kernels::CheckError>,
    },
    /// Repeats are nested too deeply.
    #[error("repeat {repeat} is nested {depth} deep; repeats may nest at most {limit} deep")]
    RepeatDepth {
        /// The repeat's name.
        repeat: String,
        /// Its depth (1 for a repeat at the top level).
        depth: usize,
        /// The limit.
        limit: usize,
    },
    /// A repeat's count is zero or above the limit.
    #[error("repeat {repeat} runs {count} times; give 1 to {limit}")]
    RepeatCount {
        /// The repeat's name.
        repeat: String,
        /// Its count.
        count: u32,
        /// The limit.
        limit: u32,
    },
    /// A substitution list does not give one buffer per iteration.
    #[error("repeat {repeat} substitutes {buffer} with {found} buffers for {count} iterations")]
    IterationBuffers {
        /// The repeat's name.
        repeat: String,
        /// The buffer substituted.
        buffer: BufferId,
        /// Substitutes given.
        found: usize,
        /// Iterations.
        count: u32,
    },
    /// A step names a buffer the program does not have.
    #[error("step {step}: {buffer} is not one of the program's {buffers} buffers")]
    UnknownBuffer {
        /// The step's name.
        step: String,
        /// The id.
        buffer: BufferId,
        /// Buffers of the program.
        buffers: usize,
    },
    /// A codelet names a kernel the program does not have.
    #[error("step {step}: {kernel} is not one of the program's {kernels} kernels")]
    UnknownKernel {
        /// The step's name.
        step: String,
        /// The id.
        kernel: KernelId,
        /// Kernels of the program.
        kernels: usize,
    },
    /// A codelet runs on a tile the package does not have.
    #[error("step {step}: a codelet runs on {tile}, the package has {tiles} tiles")]
    CodeletTile {
        /// The step's name.
        step: String,
        /// The tile.
        tile: TileId,
        /// Tiles of the package.
        tiles: u32,
    },
    /// A codelet operand's buffer has no shard on the calling tile.
    #[error("step {step}: operand {slot} on {tile} reads {buffer}, which has no shard there")]
    OperandUnplaced {
        /// The step's name.
        step: String,
        /// The tile.
        tile: TileId,
        /// The operand.
        slot: &'static str,
        /// The buffer's name (after substitution).
        buffer: String,
    },
    /// A codelet operand's span is not inside its buffer's shard.
    #[error(
        "step {step}: operand {slot} on {tile} spans bytes {offset}..{end} of {buffer}, whose shard and tail hold {limit}"
    )]
    OperandOutside {
        /// The step's name.
        step: String,
        /// The tile.
        tile: TileId,
        /// The operand.
        slot: &'static str,
        /// The buffer's name (after substitution).
        buffer: String,
        /// The operand's offset.
        offset: u32,
        /// The end of its span.
        end: u64,
        /// The shard's bytes with its access tail.
        limit: u64,
    },
    /// A codelet operand's span cannot be computed.
    #[error("step {step}: operand {slot} on {tile} ({buffer}): {source}")]
    OperandSpan {
        /// The step's name.
        step: String,
        /// The tile.
        tile: TileId,
        /// The operand.
        slot: &'static str,
        /// The buffer's name (after substitution).
        buffer: String,
        /// Why.
        #[source]
        source: SpanError,
    },
    /// A gather's arguments cannot describe a shard of its table: its
    /// rows run past the table's end, or its indices are not F32.
    #[error("step {step}: the gather on {tile} {what}")]
    GatherArguments {
        /// The step's name.
        step: String,
        /// The tile.
        tile: TileId,
        /// What is wrong.
        what: String,
    },
    /// A GEMM call's rows are not the rows of the entry it calls.
    #[error(
        "step {step}: the GEMM on {tile} calls {kernel} for {rows} rows, its entry serves {entry_rows}"
    )]
    GemmRows {
        /// The step's name.
        step: String,
        /// The tile.
        tile: TileId,
        /// The kernel's name.
        kernel: String,
        /// Rows of the call.
        rows: u32,
        /// Rows of the entry's program.
        entry_rows: u32,
    },
    /// A GEMM operand's precision is not the kernel's.
    #[error(
        "step {step}: the GEMM on {tile} reads {slot} from {buffer} in {found}; {kernel} takes {expected}"
    )]
    GemmPrecision {
        /// The step's name.
        step: String,
        /// The tile.
        tile: TileId,
        /// The kernel's name.
        kernel: String,
        /// The operand.
        slot: &'static str,
        /// The buffer's name (after substitution).
        buffer: String,
        /// The buffer's precision.
        found: ipu_layout::Precision,
        /// The kernel's.
        expected: ipu_layout::Precision,
    },
    /// A GEMM operand's address is not aligned as its kernel needs.
    #[error(
        "step {step}: the GEMM on {tile} has {slot} at {address:#x}, not a multiple of {alignment}"
    )]
    GemmMisaligned {
        /// The step's name.
        step: String,
        /// The tile.
        tile: TileId,
        /// The operand.
        slot: &'static str,
        /// The operand's address.
        address: u64,
        /// The kernel's alignment.
        alignment: u32,
    },
    /// A GEMM's output overlaps one of its inputs.
    #[error("step {step}: the GEMM on {tile} writes its output over its {slot} operand")]
    GemmOverlap {
        /// The step's name.
        step: String,
        /// The tile.
        tile: TileId,
        /// The input overlapped.
        slot: &'static str,
    },
    /// The AMP's read past a GEMM's left operand leaves tile memory.
    #[error(
        "step {step}: the GEMM on {tile} reads its left operand up to {end:#x}, past tile memory at {memory_end:#x}"
    )]
    GemmTail {
        /// The step's name.
        step: String,
        /// The tile.
        tile: TileId,
        /// The end of the read, tail included.
        end: u64,
        /// The end of tile memory.
        memory_end: u32,
    },
    /// The program's exchange steps and the package's phases differ in
    /// number.
    #[error("the program has {steps} exchange steps, the package has {phases} phases")]
    PhaseCount {
        /// Exchange steps (each repeat body once).
        steps: usize,
        /// Phases.
        phases: usize,
    },
    /// A phase's rows are not for the package's tile count.
    #[error("phase {phase} has rows for {found} tiles, the package has {tiles}")]
    RowTiles {
        /// The phase.
        phase: usize,
        /// Tiles with rows.
        found: u32,
        /// Tiles of the package.
        tiles: u32,
    },
    /// A row patch names a word its tile's row does not have.
    #[error("phase {phase}: a patch names word {index} of {tile}'s row, which has {words} words")]
    PatchOutside {
        /// The phase.
        phase: usize,
        /// The tile.
        tile: TileId,
        /// The word index.
        index: u32,
        /// Words of the row (0 for a tile the package does not have).
        words: usize,
    },
    /// A phase outside every repeat has patches (they would never apply).
    #[error("phase {phase} has row patches but no repeat runs it")]
    PatchesOutsideRepeat {
        /// The phase.
        phase: usize,
    },
    /// An on-tile copy reads or writes outside placed memory.
    #[error(
        "phase {phase}, iteration {iteration}: an on-tile copy on {tile} {what} {bytes} bytes at {address:#x}, outside placed memory"
    )]
    CopyOutside {
        /// The phase.
        phase: usize,
        /// The iteration.
        iteration: u32,
        /// The tile.
        tile: TileId,
        /// `reads` or `writes`.
        what: &'static str,
        /// The address.
        address: u32,
        /// The bytes.
        bytes: u32,
    },
    /// A phase's rows cannot be replayed against placed memory.
    #[error("phase {phase}, iteration {iteration}: {source}")]
    Replay {
        /// The phase.
        phase: usize,
        /// The iteration.
        iteration: u32,
        /// Why.
        #[source]
        source: ReplayError,
    },
    /// The stored fixture does not parse.
    #[error("fixture.json: {0}")]
    Fixture(#[source] FixtureError),
    /// The stored fixture is not the graph the program was lowered from.
    #[error("fixture.json: {0}")]
    FixtureMismatch(#[source] FixtureMismatch),
    /// `weights.safetensors` does not hold exactly the graph's weights.
    #[error("{0}")]
    Weights(#[source] WeightsError),
    /// `model.json` contradicts the graph.
    #[error("{0}")]
    Model(#[source] ModelError),
    /// A package whose model is described carries no weights.
    #[error(
        "the package describes the model it was built from (model.json) but carries no weights.safetensors; build it again"
    )]
    ModelWithoutWeights,
    /// A model description without the graph to check it against.
    #[error("the package carries model.json but no fixture.json with the graph it describes")]
    ModelWithoutGraph,
    /// A weights file without a graph to check it against.
    #[error(
        "the package carries weights.safetensors but no fixture.json to say which graph they belong to"
    )]
    WeightsWithoutGraph,
}

/// The problems found so far, at most [`MAX_ERRORS`].
struct Errors {
    list: Vec<ValidationError>,
}

impl Errors {
    fn push(&mut self, e: ValidationError) {
        if self.list.len() < MAX_ERRORS {
            self.list.push(e);
        }
    }

    /// Whether validation should stop: the list is full.
    fn full(&self) -> bool {
        self.list.len() >= MAX_ERRORS
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Records `found` against `limit`; `true` if it is within.
    fn within(&mut self, what: &'static str, found: u64, limit: u64) -> bool {
        if found > limit {
            self.push(ValidationError::Limit { what, found, limit });
            false
        } else {
            true
        }
    }
}

impl Package {
    /// Every way the package contradicts itself or its target, or asks for
    /// more than the default [`Limits`]; empty when it is consistent.
    pub fn validate(&self) -> Vec<ValidationError> {
        self.validate_with(&Limits::default())
    }

    /// [`Package::validate`] against `limits`.
    pub fn validate_with(&self, limits: &Limits) -> Vec<ValidationError> {
        let mut errors = Errors { list: Vec::new() };
        let Some(tiles) = self.check_manifest(limits, &mut errors) else {
            return errors.list;
        };
        let Some(placed) = placement::check(self, tiles, limits, &mut errors) else {
            return errors.list;
        };
        let programs = kernels::check(self, &mut errors);
        if !errors.is_empty() {
            return errors.list;
        }
        let Some(uses) = steps::check(self, tiles, limits, &programs, &mut errors) else {
            return errors.list;
        };
        let fabric = match ipu_exchange::Fabric::new(&self.target) {
            Ok(f) => f,
            Err(e) => {
                errors.push(ValidationError::Fabric(e));
                return errors.list;
            }
        };
        exchange::check(self, tiles, limits, &placed, &uses, &fabric, &mut errors);
        if errors.is_empty() {
            fixture::check_stored(self, limits, &mut errors);
        }
        errors.list
    }

    /// The manifest against the target and the limits: the tile count if
    /// every later check may rely on it.
    fn check_manifest(&self, limits: &Limits, errors: &mut Errors) -> Option<u32> {
        let tiles = self.manifest.tile_count;
        let target = &self.target;
        if self.manifest.target != target.name() {
            errors.push(ValidationError::TargetName {
                manifest: self.manifest.target.clone(),
                file: target.name().to_owned(),
            });
        }
        if tiles == 0 || tiles > target.tile_count() {
            errors.push(ValidationError::TileCount {
                tiles,
                target: target.name().to_owned(),
                available: target.tile_count(),
            });
            return None;
        }
        if !errors.within("tiles", u64::from(tiles), u64::from(limits.max_tiles)) {
            return None;
        }
        let memory = target.memory();
        let sram = u64::from(memory.sram_end.saturating_sub(memory.sram_start));
        if !errors.within(
            "bytes of tile memory (tiles × SRAM bytes)",
            sram.saturating_mul(u64::from(tiles)),
            limits.max_image_bytes,
        ) {
            return None;
        }
        Some(tiles)
    }
}
