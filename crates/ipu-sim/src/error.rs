//! The simulator's error type.

use ipu_layout::{LayoutError, TileId};

/// Why a run of the tile model failed. A failure here means the package
/// (or the program) is wrong, not that the numbers are off: wrong numbers
/// are reported by the comparison with the reference.
#[derive(Debug, thiserror::Error)]
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
    /// A codelet argument does not fit.
    #[error("codelet argument {what} is out of range")]
    Argument {
        /// Which argument.
        what: String,
    },
    /// A value the run needs was not supplied.
    #[error("no values for {tensor}; supply every input and weight")]
    MissingValues {
        /// The tensor's name.
        tensor: String,
    },
    /// A layout computation failed.
    #[error("layout of {what}: {source}")]
    Layout {
        /// Which buffer.
        what: String,
        /// The error.
        source: LayoutError,
    },
    /// A GEMM kernel failed.
    #[error("{tile}: GEMM kernel {kernel} failed: {reason}")]
    Kernel {
        /// The tile.
        tile: TileId,
        /// The kernel's name.
        kernel: String,
        /// What went wrong.
        reason: String,
    },
    /// The graph given is not the one the package was built from.
    #[error(
        "the fixture does not match the package at `{tensor}`: {reason}; \
         was the package built with parameter overrides its fixture.json lacks?"
    )]
    FixtureMismatch {
        /// The tensor or buffer name.
        tensor: String,
        /// What differs.
        reason: String,
    },
    /// The package is inconsistent.
    #[error("the package is inconsistent: {0}")]
    Package(String),
}
