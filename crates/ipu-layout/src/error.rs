//! The one error type of this crate.

use crate::TileId;

/// Why a layout, shard query or redistribution was rejected.
///
/// Every variant names the axis, tile or value involved; the message says
/// what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A count that must be at least one was zero.
    #[error("{what} is zero; it must be at least 1")]
    Zero {
        /// Which field.
        what: &'static str,
    },
    /// `replicas × Π partitions` does not equal `tile_count`.
    #[error(
        "tiling covers {covered} tiles (replicas {replicas} × partitions {partitions:?}) \
         but tile_count is {tile_count}; make the product equal tile_count"
    )]
    TileCountMismatch {
        /// The tiling's tile count.
        tile_count: u32,
        /// The tiling's replica count.
        replicas: u32,
        /// Partitions per tiled axis, in list order.
        partitions: Vec<u32>,
        /// `replicas × Π partitions`, saturated at `u64::MAX`.
        covered: u64,
    },
    /// An axis reference does not name an axis of the shape.
    #[error("tiling axis {axis} does not exist in a rank-{rank} tensor")]
    AxisOutOfRange {
        /// The axis reference as written.
        axis: String,
        /// The tensor's rank.
        rank: usize,
    },
    /// Two tiling entries name the same tensor axis.
    #[error("tensor axis {axis} is tiled twice; merge the two entries into one")]
    DuplicateAxis {
        /// The tensor axis (from the start).
        axis: usize,
    },
    /// An axis cannot be split into its padding groups evenly.
    #[error(
        "axis {axis}: extent {extent} and {partitions} partitions must both divide into \
         {groups} padding groups"
    )]
    UnevenPaddingGroups {
        /// The tensor axis.
        axis: usize,
        /// Its extent.
        extent: u64,
        /// Its partitions.
        partitions: u32,
        /// The padding groups asked for.
        groups: u32,
    },
    /// Padding was needed on an axis whose tiling rejects padding.
    #[error(
        "axis {axis}: {what} {value} is not a multiple of {multiple} and padding is Reject; \
         choose a multiple that divides it or allow Zero padding"
    )]
    PaddingRejected {
        /// The tensor axis.
        axis: usize,
        /// What needed padding: a padding group's extent or a shard's width.
        what: &'static str,
        /// The value that did not divide.
        value: u64,
        /// The multiple it had to be rounded to.
        multiple: u64,
    },
    /// Explicit tile strides do not give every coordinate tuple exactly
    /// `replicas` tiles.
    #[error(
        "tile strides give coordinate tuple {tuple:?} to {found} tiles, but every tuple needs \
         exactly {replicas}; use strides that enumerate each tuple once per replica"
    )]
    IrregularStrides {
        /// Partition coordinates per tiled axis, in list order.
        tuple: Vec<u32>,
        /// How many tiles got it.
        found: u32,
        /// How many should have.
        replicas: u32,
    },
    /// An AMP element order was asked of a scalar.
    #[error("AMP element orders need a tensor of rank at least 1")]
    AmpScalar,
    /// A size computation overflowed.
    #[error("{what} overflows 64 bits; the tensor or tiling is too large")]
    Overflow {
        /// What was being computed.
        what: &'static str,
    },
    /// The tiling spans more tiles than this crate resolves tables for.
    #[error("tile_count {tile_count} exceeds the supported {limit} tiles")]
    TooManyTiles {
        /// The tiling's tile count.
        tile_count: u32,
        /// The largest supported tile count.
        limit: u32,
    },
    /// A tiling's rotation is not below its tile count.
    #[error("rotation {rotation} is not below the tiling's {tile_count} tiles")]
    RotationOutOfRange {
        /// The rotation asked for.
        rotation: u32,
        /// The tiling's tiles.
        tile_count: u32,
    },
    /// A tile number is not below the tiling's tile count.
    #[error("{tile} is outside the tiling's {tile_count} tiles")]
    TileOutOfRange {
        /// The tile asked about.
        tile: TileId,
        /// The tiling's tile count.
        tile_count: u32,
    },
    /// An element index does not fit the shape.
    #[error("element index {index:?} is outside shape {extents:?}")]
    IndexOutOfRange {
        /// The index asked about.
        index: Vec<u64>,
        /// The tensor's extents.
        extents: Vec<u64>,
    },
    /// A redistribution was asked between types that differ in more than layout.
    #[error("cannot redistribute between {what}: {source_value} and {destination_value}")]
    Incompatible {
        /// What differs: shapes, precisions or tile counts.
        what: &'static str,
        /// The source type's value.
        source_value: String,
        /// The destination type's value.
        destination_value: String,
    },
}
