//! Tensor layouts for IPU21 tiles.
//!
//! A [`TensorType`] is a shape plus a [`TensorFormat`]: element precision,
//! the order elements are stored in on a tile, a [`TensorTiling`] that says
//! which tile holds which part of the tensor, and the memory class the shards
//! live in. From a validated type this crate answers every geometric question
//! the rest of the backend asks:
//!
//! - which elements tile *t* holds, its padded shard shape and bytes
//!   ([`TensorType::shard`]);
//! - which tiles hold a given element ([`TensorType::tiles_holding`]);
//! - the byte offset of an element inside a shard
//!   ([`TensorType::element_offset`]);
//! - the [`Fragment`]s of a redistribution from one layout to another,
//!   computed by per-axis interval intersection ([`redistribute`]).
//!
//! Nothing here allocates addresses: shard bytes carry no alignment or access
//! tails, which belong to placement (`ipu-alloc`).

#![forbid(unsafe_code)]

pub mod entity;
mod error;
mod fragments;
mod geometry;
pub mod hash;
pub mod numeric;
mod precision;
pub mod rng;
mod shape;
mod tiling;

pub use entity::{EntityId, IdVec};
pub use error::LayoutError;
pub use fragments::{
    Fragment, RedistributeConfig, Redistribution, SourceView, redistribute, redistribute_view,
    redistribute_view_each,
};
pub use geometry::{AxisShard, Shard};
pub use precision::{Fp8Format, MemoryClass, Precision};
pub use shape::TensorShape;
pub use tiling::{
    AmpOperand, Axis, AxisTiling, ElementOrder, Layout, Padding, TensorFormat, TensorTiling,
    TensorType,
};

define_id!(
    /// A tile of the IPU, `0..tile_count`.
    pub struct TileId, "tile"
);
