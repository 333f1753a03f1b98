//! The simulator's error type.
//!
//! Every variant names what is wrong with which id, and keeps the typed
//! cause of a failure in a lower layer as its `#[source]`.

use ipu_exchange::{FabricError, ReplayError};
use ipu_kernels::{EmulateError, KernelError};
use ipu_layout::{LayoutError, TileId};
use ipu_package::graph::OpId;
use ipu_package::program::{BufferId, KernelId};

use crate::reference::ReferenceError;

/// Why a run of the tile model failed. A failure here means the package
/// (or the program) is wrong or too large for the model, or that an op's
/// device result disagrees with the reference on the device's own inputs;
/// wrong end-to-end numbers are reported by the comparison with the
/// reference.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// An access left the buffer's placed range on the tile.
    #[error(
        "{tile}: access to {buffer} at offset {offset} for {bytes} bytes leaves its {limit}-byte range"
    )]
    OutOfRange {
        /// The tile.
        tile: TileId,
        /// The buffer's name.
        buffer: String,
        /// Offset inside the buffer's shard.
        offset: u64,
        /// Bytes accessed.
        bytes: u64,
        /// The shard's size (with its access tail).
        limit: u64,
    },
    /// An access to tile memory outside every placed range.
    #[error(
        "{tile}: access to address {address:#x} for {bytes} bytes is outside every placed range"
    )]
    Unplaced {
        /// The tile.
        tile: TileId,
        /// The address.
        address: u32,
        /// Bytes accessed.
        bytes: u64,
    },
    /// A codelet's arguments describe sizes or offsets that overflow or
    /// that the codelet cannot have (rows that overlap, for example).
    #[error("{tile}: the {codelet} codelet's {what} is out of range; the package is inconsistent")]
    Argument {
        /// The tile.
        tile: TileId,
        /// The codelet kind.
        codelet: &'static str,
        /// Which argument or derived size.
        what: &'static str,
    },
    /// A gather index is not a row of its table: the input holds a token
    /// id the model does not have (the device faults rather than read
    /// another row).
    #[error(
        "{tile}: gather index {position} is {value}, not a row number of the {rows}-row table; \
         every index must be a whole number in 0..{rows}"
    )]
    GatherIndex {
        /// The tile.
        tile: TileId,
        /// The index's position in the index tensor.
        position: u64,
        /// Its value.
        value: f32,
        /// Rows of the table.
        rows: u32,
    },
    /// A value the run needs was not supplied.
    #[error("no values for {tensor}; supply every input and weight")]
    MissingValues {
        /// The tensor's name.
        tensor: String,
    },
    /// A layout computation failed.
    #[error("layout of {what} cannot be computed")]
    Layout {
        /// Which buffer.
        what: String,
        /// The error.
        #[source]
        source: LayoutError,
    },
    /// A buffer's type has more elements than its shards hold.
    #[error(
        "{buffer} has {elements} elements but its shards hold {held}; the package is inconsistent"
    )]
    BufferSize {
        /// The buffer's name.
        buffer: String,
        /// Elements of its shape.
        elements: u64,
        /// Data elements of its replica-0 shards.
        held: u64,
    },
    /// A GEMM kernel failed.
    #[error("{tile}: GEMM kernel {kernel} failed")]
    Kernel {
        /// The tile.
        tile: TileId,
        /// The kernel's name.
        kernel: String,
        /// What the emulator reported.
        #[source]
        source: EmulateError,
    },
    /// A GEMM call names an entry its kernel object does not hold.
    #[error("{tile}: kernel {kernel} has no program for its {entry} entry; rebuild the package")]
    NoKernelProgram {
        /// The tile.
        tile: TileId,
        /// The kernel's name.
        kernel: String,
        /// The entry (`small initialise`, ...).
        entry: &'static str,
    },
    /// A kernel object could not be read.
    #[error("the object of kernel {kernel} cannot be read; rebuild the package")]
    KernelObject {
        /// The kernel's name.
        kernel: String,
        /// Why.
        #[source]
        source: KernelError,
    },
    /// A kernel program's header cannot run.
    #[error("program {symbol} of kernel {kernel} has a header the emulator rejects")]
    KernelProgram {
        /// The kernel's name.
        kernel: String,
        /// The entry symbol.
        symbol: String,
        /// Why.
        #[source]
        source: EmulateError,
    },
    /// A codelet names a kernel the package does not have.
    #[error("a GEMM codelet names {kernel}, but the package has {kernels} kernels")]
    UnknownKernel {
        /// The kernel id.
        kernel: KernelId,
        /// How many kernels (specs and objects, the smaller) exist.
        kernels: usize,
    },
    /// An operand, copy or repeat substitution names a buffer the package
    /// does not have.
    #[error("{context} names {buffer}, but the package has {buffers} buffers")]
    UnknownBuffer {
        /// The buffer id.
        buffer: BufferId,
        /// How many buffers exist.
        buffers: usize,
        /// Where it was named (the step).
        context: String,
    },
    /// A codelet runs on, or a shard or row belongs to, a tile the package
    /// does not have.
    #[error("{what} uses {tile}, but the package has {tiles} tiles")]
    UnknownTile {
        /// The tile.
        tile: TileId,
        /// The package's tile count.
        tiles: u32,
        /// What uses it.
        what: String,
    },
    /// A buffer is placed outside tile memory.
    #[error(
        "{buffer} on {tile} is placed at {address:#x} for {bytes} bytes, outside tile memory \
         {start:#x}..{end:#x}"
    )]
    PlacedOutside {
        /// The buffer's name.
        buffer: String,
        /// The tile.
        tile: TileId,
        /// The address.
        address: u32,
        /// Bytes with the access tail.
        bytes: u64,
        /// First address of tile memory.
        start: u32,
        /// One past the last address.
        end: u32,
    },
    /// The package has more tiles than the model holds images for.
    #[error(
        "the package has {tiles} tiles; the tile model holds at most {limit} (Limits::max_tiles)"
    )]
    TooManyTiles {
        /// The manifest's tile count.
        tiles: u32,
        /// The limit.
        limit: u32,
    },
    /// Running the package would take more work than the limits allow.
    #[error(
        "the package needs at least {needed} {what} across all iterations, more than the \
         limit of {limit} (Limits); the package is damaged or too large for the tile model"
    )]
    WorkLimit {
        /// What is counted.
        what: &'static str,
        /// The amount needed (saturated at `u64::MAX`).
        needed: u64,
        /// The limit.
        limit: u64,
    },
    /// The exchange fabric description could not be read.
    #[error("the exchange fabric of the device description cannot be read")]
    Fabric(#[source] FabricError),
    /// An exchange step has no phase or no rows in the package.
    #[error(
        "exchange step `{step}` is phase {phase}, but the package has {phases} phases and \
         {rows} row sets"
    )]
    MissingPhase {
        /// The step's name.
        step: String,
        /// The phase index.
        phase: usize,
        /// Phases described.
        phases: usize,
        /// Row sets stored.
        rows: usize,
    },
    /// A phase's rows are for another tile count.
    #[error("phase {phase} has rows for {rows} tiles, but the package has {tiles} tiles")]
    RowTiles {
        /// The phase index.
        phase: usize,
        /// Tiles with rows.
        rows: u32,
        /// The package's tile count.
        tiles: u32,
    },
    /// A repeat patch points outside its row.
    #[error("phase {phase}: a patch of {tile} at word {index} is outside the tile's row")]
    PatchOutsideRow {
        /// The phase index.
        phase: usize,
        /// The tile.
        tile: TileId,
        /// The word index.
        index: u32,
    },
    /// Replaying an exchange step's rows failed.
    #[error("exchange step `{step}` (phase {phase}) cannot be replayed")]
    Replay {
        /// The step's name.
        step: String,
        /// The phase index.
        phase: usize,
        /// Why.
        #[source]
        source: ReplayError,
    },
    /// A codelet touched another tile's memory: a bug in the simulator.
    #[error("bug in the tile model: a codelet of {tile} accessed {accessed}")]
    ForeignTile {
        /// The tile running the codelet.
        tile: TileId,
        /// The tile accessed.
        accessed: TileId,
    },
    /// The graph given has no tensor for a buffer the host must fill.
    #[error(
        "the fixture does not match the package: the package reads `{buffer}` from the host \
         but the fixture has no such tensor; was the package built with parameter overrides \
         its fixture.json lacks?"
    )]
    FixtureMissingTensor {
        /// The buffer's name.
        buffer: String,
    },
    /// The package has no buffer for an input, weight or output of the
    /// graph given.
    #[error(
        "the fixture does not match the package: the package has no buffer for {kind} \
         `{tensor}`; was the package built with parameter overrides its fixture.json lacks?"
    )]
    FixtureMissingBuffer {
        /// The tensor's name.
        tensor: String,
        /// Its kind, as the fixture spells it.
        kind: &'static str,
    },
    /// A tensor of the graph given and its buffer differ in size.
    #[error(
        "the fixture does not match the package at `{tensor}`: the fixture's tensor has \
         {fixture} elements but the package's buffer has {package}; was the package built \
         with parameter overrides its fixture.json lacks?"
    )]
    FixtureSize {
        /// The tensor's name.
        tensor: String,
        /// Elements in the fixture.
        fixture: u64,
        /// Elements in the package.
        package: u64,
    },
    /// The per-op check could not evaluate an op.
    #[error("the per-op check cannot evaluate {op}")]
    Reference {
        /// The op.
        op: OpId,
        /// Why.
        #[source]
        source: ReferenceError,
    },
    /// An op's device result disagrees with the reference evaluated on the
    /// device's own inputs to that op.
    #[error("{0}")]
    OpMismatch(Box<crate::oracle::OpMismatch>),
}
