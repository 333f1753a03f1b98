//! Tilings, element orders and validated tensor types.
//!
//! These are the fixture-facing types: their serde form is what fixtures and
//! package manifests contain, and their `Debug` form reads like the seed
//! log's `tensor_type=TensorType { ... }`. A [`TensorType`] can only be built
//! through validation, which also resolves the tiling into the per-axis and
//! per-tile tables of [`crate::geometry`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::geometry::Geometry;
use crate::{LayoutError, MemoryClass, Precision, TensorShape};

/// Names a tensor axis, counted from the start or from the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Axis {
    /// Axis `n`, counting from 0 at the outermost axis.
    FromStart(u32),
    /// Axis `rank - n`, so `FromEnd(1)` is the innermost axis; `n ≥ 1`.
    FromEnd(u32),
}

impl Axis {
    /// The axis index from the start in a tensor of `rank` axes.
    pub fn resolve(self, rank: usize) -> Result<usize, LayoutError> {
        let index = match self {
            Axis::FromStart(n) => Some(n as usize),
            Axis::FromEnd(n) if n >= 1 => rank.checked_sub(n as usize),
            Axis::FromEnd(_) => None,
        };
        match index {
            Some(i) if i < rank => Ok(i),
            _ => Err(LayoutError::AxisOutOfRange {
                axis: format!("{self:?}"),
                rank,
            }),
        }
    }
}

/// What to do when an extent is not a multiple of the size it must round to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Padding {
    /// Round up and fill the extra elements with zeros (never read as data).
    #[default]
    Zero,
    /// Refuse the tiling.
    Reject,
}

/// How one axis is cut over tiles.
///
/// The extent is split into `padding_groups` equal groups; each group is
/// rounded up to `padding_multiple`, cut into blocks of `block_size`, and its
/// blocks are spread over the group's partitions, the first
/// `blocks % partitions` partitions taking one extra block. A partition's
/// width is then rounded up to `shard_padding_multiple`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AxisTiling {
    /// The tensor axis this entry tiles.
    pub axis: Axis,
    /// How many parts the axis is cut into.
    pub partitions: u32,
    /// How many equal groups the extent is split into before padding.
    #[serde(default = "one")]
    pub padding_groups: u32,
    /// Partitions receive whole blocks of this many elements.
    #[serde(default = "one")]
    pub block_size: u32,
    /// Each padding group's extent is rounded up to a multiple of this.
    #[serde(default = "one")]
    pub padding_multiple: u32,
    /// Each partition's width is rounded up to a multiple of this.
    #[serde(default = "one")]
    pub shard_padding_multiple: u32,
    /// Whether rounding up is allowed.
    #[serde(default)]
    pub padding: Padding,
    /// With `Some(s)`, tile `t` holds partition `(t / s) % partitions`; with
    /// `None`, the packed default stride (see [`TensorTiling`]).
    #[serde(default)]
    pub tile_stride: Option<u32>,
}

fn one() -> u32 {
    1
}

impl AxisTiling {
    /// An axis cut into `partitions` parts with unit blocks, zero padding and
    /// the default stride.
    pub fn new(axis: Axis, partitions: u32) -> Self {
        Self {
            axis,
            partitions,
            padding_groups: 1,
            block_size: 1,
            padding_multiple: 1,
            shard_padding_multiple: 1,
            padding: Padding::Zero,
            tile_stride: None,
        }
    }

    /// The same tiling with blocks of `block_size` and the group extent
    /// rounded to the same multiple.
    pub fn with_block(mut self, block_size: u32) -> Self {
        self.block_size = block_size;
        self.padding_multiple = block_size;
        self
    }

    /// The same tiling with an explicit tile stride.
    pub fn with_stride(mut self, stride: u32) -> Self {
        self.tile_stride = Some(stride);
        self
    }
}

/// Which tiles hold which parts of a tensor.
///
/// Invariant: `replicas × Π partitions == tile_count`, every count is at least
/// one and no tensor axis is named twice; established by
/// [`TensorTiling::new`]. With default strides, tile `t` is replica
/// `t % replicas`, and the first listed axis has stride `replicas`, the next
/// `replicas × p0`, and so on.
///
/// A `rotation` `ρ` moves everything up by `ρ` tiles, wrapping within the
/// tiling's tiles: what the strides assign to tile `t` lies on tile
/// `(t + ρ) mod tile_count`. Ragged splits give partition 0 the longest
/// shard; rotating different tensors differently keeps those long shards
/// from all landing on tile 0.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "TensorTilingData", into = "TensorTilingData")]
pub struct TensorTiling {
    tile_count: u32,
    replicas: u32,
    axes: Vec<AxisTiling>,
    rotation: u32,
}

// The seed's logs print tilings without a rotation; it shows only when set.
impl std::fmt::Debug for TensorTiling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("TensorTiling");
        d.field("tile_count", &self.tile_count)
            .field("replicas", &self.replicas)
            .field("axes", &self.axes);
        if self.rotation != 0 {
            d.field("rotation", &self.rotation);
        }
        d.finish()
    }
}

#[derive(Serialize, Deserialize)]
struct TensorTilingData {
    tile_count: u32,
    #[serde(default = "one")]
    replicas: u32,
    #[serde(default)]
    axes: Vec<AxisTiling>,
    #[serde(default, skip_serializing_if = "is_zero")]
    rotation: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl TryFrom<TensorTilingData> for TensorTiling {
    type Error = LayoutError;
    fn try_from(d: TensorTilingData) -> Result<Self, LayoutError> {
        TensorTiling::new(d.tile_count, d.replicas, d.axes)?.with_rotation(d.rotation)
    }
}

impl From<TensorTiling> for TensorTilingData {
    fn from(t: TensorTiling) -> Self {
        Self {
            tile_count: t.tile_count,
            replicas: t.replicas,
            axes: t.axes,
            rotation: t.rotation,
        }
    }
}

impl TensorTiling {
    /// A validated tiling. Checks what does not depend on the shape; the
    /// rest is checked when it is combined with a shape in [`TensorType::new`].
    pub fn new(tile_count: u32, replicas: u32, axes: Vec<AxisTiling>) -> Result<Self, LayoutError> {
        if tile_count == 0 {
            return Err(LayoutError::Zero { what: "tile_count" });
        }
        if replicas == 0 {
            return Err(LayoutError::Zero { what: "replicas" });
        }
        for a in &axes {
            let counts = [
                (a.partitions, "partitions"),
                (a.padding_groups, "padding_groups"),
                (a.block_size, "block_size"),
                (a.padding_multiple, "padding_multiple"),
                (a.shard_padding_multiple, "shard_padding_multiple"),
            ];
            for (value, what) in counts {
                if value == 0 {
                    return Err(LayoutError::Zero { what });
                }
            }
            if a.tile_stride == Some(0) {
                return Err(LayoutError::Zero {
                    what: "tile_stride",
                });
            }
        }
        let covered = axes
            .iter()
            .try_fold(u64::from(replicas), |acc, a| {
                acc.checked_mul(u64::from(a.partitions))
            })
            .unwrap_or(u64::MAX);
        if covered != u64::from(tile_count) {
            return Err(LayoutError::TileCountMismatch {
                tile_count,
                replicas,
                partitions: axes.iter().map(|a| a.partitions).collect(),
                covered,
            });
        }
        Ok(Self {
            tile_count,
            replicas,
            axes,
            rotation: 0,
        })
    }

    /// The same tiling rotated by `rotation` tiles (see [`TensorTiling`]).
    pub fn with_rotation(mut self, rotation: u32) -> Result<Self, LayoutError> {
        if rotation >= self.tile_count {
            return Err(LayoutError::RotationOutOfRange {
                rotation,
                tile_count: self.tile_count,
            });
        }
        self.rotation = rotation;
        Ok(self)
    }

    /// How many tiles the tiling is rotated by.
    pub fn rotation(&self) -> u32 {
        self.rotation
    }

    /// A tiling that holds the whole tensor on every one of `tile_count` tiles.
    pub fn replicated(tile_count: u32) -> Result<Self, LayoutError> {
        Self::new(tile_count, tile_count, Vec::new())
    }

    /// The number of tiles the tiling spans.
    pub fn tile_count(&self) -> u32 {
        self.tile_count
    }

    /// How many tiles hold each element.
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// The tiled axes, in list order.
    pub fn axes(&self) -> &[AxisTiling] {
        &self.axes
    }
}

/// The operand role of an AMP element order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AmpOperand {
    /// The streamed left operand of a GEMM.
    Left,
    /// The weights, loaded into the AMP coefficient state.
    Right,
    /// The result.
    Output,
}

/// The order of a shard's elements in tile memory.
///
/// `RowMajor` is the usual C order over the padded shard widths. The AMP
/// orders flatten every axis but the last into rows and store the columns in
/// panels of [`Precision::amp_panel_columns`] (a narrower last panel when the
/// width is not a multiple): panel 0 holds rows 0.. of its columns, then
/// panel 1, and so on, so that the AMP unit reads each row's 64 bytes in one
/// stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ElementOrder {
    /// C order.
    RowMajor,
    /// Column panels for the AMP unit.
    Amp(AmpOperand),
}

/// Element order, tiling and memory class: where and how the shards lie.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    /// The order of a shard's elements.
    pub order: ElementOrder,
    /// Which tiles hold which elements.
    pub tiling: TensorTiling,
    /// Where the shards may live.
    pub memory_class: MemoryClass,
}

/// Everything about a tensor but its shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorFormat {
    /// The element precision.
    pub precision: Precision,
    /// Element order, tiling and memory class.
    pub layout: Layout,
}

/// A shape with a format, validated together.
///
/// Building one resolves the tiling into per-axis partition tables and the
/// tile ↔ coordinate maps, so every query after that is cheap. Cloning
/// shares those tables.
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "TensorTypeData", into = "TensorTypeData")]
pub struct TensorType {
    shape: TensorShape,
    format: TensorFormat,
    geometry: Arc<Geometry>,
}

#[derive(Serialize, Deserialize)]
struct TensorTypeData {
    shape: TensorShape,
    format: TensorFormat,
}

impl TryFrom<TensorTypeData> for TensorType {
    type Error = LayoutError;
    fn try_from(d: TensorTypeData) -> Result<Self, LayoutError> {
        TensorType::new(d.shape, d.format)
    }
}

impl From<TensorType> for TensorTypeData {
    fn from(t: TensorType) -> Self {
        Self {
            shape: t.shape,
            format: t.format,
        }
    }
}

impl TensorType {
    /// Validates `format` against `shape` and resolves its geometry.
    pub fn new(shape: TensorShape, format: TensorFormat) -> Result<Self, LayoutError> {
        let geometry = Geometry::new(&shape, &format)?;
        Ok(Self {
            shape,
            format,
            geometry: Arc::new(geometry),
        })
    }

    /// The tensor's shape.
    pub fn shape(&self) -> &TensorShape {
        &self.shape
    }

    /// The tensor's format.
    pub fn format(&self) -> &TensorFormat {
        &self.format
    }

    /// The element precision.
    pub fn precision(&self) -> Precision {
        self.format.precision
    }

    /// The tiling.
    pub fn tiling(&self) -> &TensorTiling {
        &self.format.layout.tiling
    }

    /// The element order.
    pub fn order(&self) -> ElementOrder {
        self.format.layout.order
    }

    /// The memory class.
    pub fn memory_class(&self) -> MemoryClass {
        self.format.layout.memory_class
    }

    pub(crate) fn geometry(&self) -> &Geometry {
        &self.geometry
    }
}

impl PartialEq for TensorType {
    fn eq(&self, other: &Self) -> bool {
        self.shape == other.shape && self.format == other.format
    }
}

impl Eq for TensorType {}

impl std::hash::Hash for TensorType {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.shape.hash(state);
        self.format.hash(state);
    }
}

impl std::fmt::Debug for TensorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorType")
            .field("shape", &self.shape)
            .field("format", &self.format)
            .finish()
    }
}
