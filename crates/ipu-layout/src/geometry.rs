//! Resolved shard geometry: per-axis partition tables and tile maps.
//!
//! [`Geometry`] is computed once per [`TensorType`](crate::TensorType) and
//! answers shard, ownership and offset queries without touching elements.
//! Every width and offset is computed with checked arithmetic when the
//! geometry is built, so the queries afterwards cannot overflow: each offset
//! is below the shard's byte count, which was checked to fit in `u64`.

use smallvec::SmallVec;

use crate::numeric::Codec;
use crate::tiling::{ElementOrder, Padding, TensorFormat};
use crate::{LayoutError, TensorShape, TensorType, TileId};

/// The largest tile count whose tables are resolved (far above any IPU).
pub(crate) const MAX_TILES: u32 = 1 << 20;

/// One axis of one shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AxisShard {
    /// First data element held, in tensor coordinates.
    pub start: u64,
    /// One past the last data element held.
    pub end: u64,
    /// The padded width stored on the tile (at least `end - start`); the
    /// data sits at local positions `0..end - start`, zeros after it.
    pub width: u64,
}

impl AxisShard {
    /// How many data elements the shard holds along this axis.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the shard holds no data along this axis.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// What one tile holds of a tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shard {
    /// The tile.
    pub tile: TileId,
    /// Which replica of its coordinate tuple this tile holds, `0..replicas`.
    pub replica: u32,
    /// Per tensor axis, outermost first.
    pub axes: SmallVec<[AxisShard; 4]>,
    /// Bytes the padded shard occupies (no alignment, no access tail).
    pub bytes: u64,
}

impl Shard {
    /// Data elements held (padding excluded).
    pub fn data_elements(&self) -> u64 {
        // Cannot overflow: bounded by the padded element count, which was
        // checked when the geometry was built.
        self.axes.iter().map(AxisShard::len).product()
    }

    /// Whether the stored shard contains any padding elements.
    pub fn has_padding(&self) -> bool {
        self.axes.iter().any(|a| a.width != a.len())
    }
}

/// One partition of one axis.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Part {
    pub start: u64,
    pub end: u64,
    pub width: u64,
}

/// One tensor axis, resolved.
#[derive(Clone, Debug)]
pub(crate) struct AxisGeom {
    pub parts: Vec<Part>,
    group_extent: u64,
    block: u64,
    parts_per_group: u64,
    base_blocks: u64,
    extra: u64,
}

impl AxisGeom {
    fn untiled(extent: u64) -> Self {
        AxisGeom {
            parts: vec![Part {
                start: 0,
                end: extent,
                width: extent,
            }],
            group_extent: extent,
            block: extent.max(1),
            parts_per_group: 1,
            base_blocks: 1,
            extra: 0,
        }
    }

    /// The partition holding element `x` (which must be below the extent).
    pub fn partition_of(&self, x: u64) -> usize {
        if self.parts.len() == 1 {
            return 0;
        }
        let group = x / self.group_extent;
        let block = (x % self.group_extent) / self.block;
        let long_blocks = self.extra * (self.base_blocks + 1);
        let local = if block < long_blocks {
            block / (self.base_blocks + 1)
        } else {
            self.extra + (block - long_blocks) / self.base_blocks
        };
        (group * self.parts_per_group + local) as usize
    }
}

/// A tensor type's resolved geometry.
#[derive(Clone, Debug)]
pub(crate) struct Geometry {
    pub element_bytes: u64,
    pub order: ElementOrder,
    pub panel: u64,
    pub axes: Vec<AxisGeom>,
    /// The tensor axis of each tiling entry, in list order.
    pub tiled: Vec<usize>,
    pub replicas: u32,
    /// Per tile: the coordinate tuple's index (list order, first fastest).
    pub tile_tuple: Vec<u32>,
    /// Per tile: which replica of its tuple it is.
    pub tile_replica: Vec<u32>,
    /// Per tuple and replica: the tile (`tuple * replicas + replica`).
    pub tuple_tiles: Vec<u32>,
}

fn round_up(value: u64, multiple: u64) -> Result<u64, LayoutError> {
    value
        .div_ceil(multiple)
        .checked_mul(multiple)
        .ok_or(LayoutError::Overflow {
            what: "padded extent",
        })
}

impl Geometry {
    pub fn new(shape: &TensorShape, format: &TensorFormat) -> Result<Self, LayoutError> {
        let tiling = &format.layout.tiling;
        let rank = shape.rank();
        if tiling.tile_count() > MAX_TILES {
            return Err(LayoutError::TooManyTiles {
                tile_count: tiling.tile_count(),
                limit: MAX_TILES,
            });
        }
        if rank == 0 && matches!(format.layout.order, ElementOrder::Amp(_)) {
            return Err(LayoutError::AmpScalar);
        }
        let mut axes: Vec<AxisGeom> = shape
            .extents()
            .iter()
            .map(|&e| AxisGeom::untiled(e))
            .collect();
        let mut tiled = Vec::with_capacity(tiling.axes().len());
        for a in tiling.axes() {
            let index = a.axis.resolve(rank)?;
            if tiled.contains(&index) {
                return Err(LayoutError::DuplicateAxis { axis: index });
            }
            tiled.push(index);
            axes[index] = resolve_axis(index, shape.extents()[index], a)?;
        }

        // Every width was rounded with checked arithmetic; the padded element
        // count bounds every offset, so checking it once here makes all later
        // offset arithmetic safe.
        let element_bytes = format.precision.element_bytes();
        let max_elements = axes.iter().try_fold(1u64, |acc, a| {
            let widest = a.parts.iter().map(|p| p.width).max().unwrap_or(0);
            acc.checked_mul(widest)
        });
        max_elements
            .and_then(|n| n.checked_mul(element_bytes))
            .ok_or(LayoutError::Overflow {
                what: "shard bytes",
            })?;

        let (tile_tuple, tile_replica, tuple_tiles) = resolve_tiles(tiling, &axes, &tiled)?;
        Ok(Geometry {
            element_bytes,
            order: format.layout.order,
            panel: format.precision.amp_panel_columns(),
            axes,
            tiled,
            replicas: tiling.replicas(),
            tile_tuple,
            tile_replica,
            tuple_tiles,
        })
    }

    /// The partition of each tensor axis that `tile` holds.
    pub fn partitions_of(&self, tile: usize) -> SmallVec<[usize; 4]> {
        let mut parts: SmallVec<[usize; 4]> = smallvec::smallvec![0; self.axes.len()];
        let mut tuple = self.tile_tuple[tile] as usize;
        for &axis in &self.tiled {
            let p = self.axes[axis].parts.len();
            parts[axis] = tuple % p;
            tuple /= p;
        }
        parts
    }

    /// The tuple index of per-axis partitions.
    pub fn tuple_of(&self, parts: &[usize]) -> usize {
        self.tiled.iter().rev().fold(0, |acc, &axis| {
            acc * self.axes[axis].parts.len() + parts[axis]
        })
    }

    /// Padded widths of the shard with these partitions.
    pub fn widths(&self, parts: &[usize]) -> SmallVec<[u64; 4]> {
        self.axes
            .iter()
            .zip(parts)
            .map(|(a, &p)| a.parts[p].width)
            .collect()
    }

    /// Byte offset of the element at shard-local position `local` in a shard
    /// of padded `widths`.
    pub fn local_offset(&self, widths: &[u64], local: &[u64]) -> u64 {
        element_position(self.order, self.panel, widths, local) * self.element_bytes
    }
}

fn resolve_axis(index: usize, extent: u64, a: &crate::AxisTiling) -> Result<AxisGeom, LayoutError> {
    let groups = u64::from(a.padding_groups);
    let partitions = u64::from(a.partitions);
    if extent % groups != 0 || partitions % groups != 0 {
        return Err(LayoutError::UnevenPaddingGroups {
            axis: index,
            extent,
            partitions: a.partitions,
            groups: a.padding_groups,
        });
    }
    let group_extent = extent / groups;
    let multiple = u64::from(a.padding_multiple);
    if a.padding == Padding::Reject && group_extent % multiple != 0 {
        return Err(LayoutError::PaddingRejected {
            axis: index,
            what: "padding group extent",
            value: group_extent,
            multiple,
        });
    }
    let padded_group = round_up(group_extent, multiple)?;
    let block = u64::from(a.block_size);
    let blocks = padded_group.div_ceil(block);
    let parts_per_group = partitions / groups;
    let base_blocks = blocks / parts_per_group;
    let extra = blocks % parts_per_group;
    let shard_multiple = u64::from(a.shard_padding_multiple);

    let mut parts = Vec::with_capacity(a.partitions as usize);
    for q in 0..partitions {
        let group = q / parts_per_group;
        let j = q % parts_per_group;
        let first_block = j * base_blocks + j.min(extra);
        let block_count = base_blocks + u64::from(j < extra);
        // Both products are at most `blocks * block`, which is below
        // `padded_group + block` and so cannot overflow after the check above.
        let local_start = (first_block * block).min(padded_group);
        let local_end = ((first_block + block_count) * block).min(padded_group);
        let raw_width = local_end - local_start;
        if a.padding == Padding::Reject && raw_width % shard_multiple != 0 {
            return Err(LayoutError::PaddingRejected {
                axis: index,
                what: "shard width",
                value: raw_width,
                multiple: shard_multiple,
            });
        }
        let width = round_up(raw_width, shard_multiple)?;
        let group_start = group * group_extent;
        parts.push(Part {
            start: group_start + local_start.min(group_extent),
            end: group_start + local_end.min(group_extent),
            width,
        });
    }
    Ok(AxisGeom {
        parts,
        group_extent,
        block,
        parts_per_group,
        base_blocks,
        extra,
    })
}

type TileTables = (Vec<u32>, Vec<u32>, Vec<u32>);

fn resolve_tiles(
    tiling: &crate::TensorTiling,
    axes: &[AxisGeom],
    tiled: &[usize],
) -> Result<TileTables, LayoutError> {
    let tile_count = tiling.tile_count() as usize;
    let replicas = tiling.replicas();
    // Default strides: replicas innermost, then the axes in list order.
    let mut strides = Vec::with_capacity(tiled.len());
    let mut packed = u64::from(replicas);
    let mut all_default = true;
    for a in tiling.axes() {
        match a.tile_stride {
            Some(s) => {
                strides.push(u64::from(s));
                all_default = false;
            }
            None => strides.push(packed),
        }
        packed *= u64::from(a.partitions);
    }
    let tuples = tile_count / replicas as usize;
    let mut tile_tuple = vec![0u32; tile_count];
    let mut tile_replica = vec![0u32; tile_count];
    let mut tuple_tiles = vec![u32::MAX; tile_count];
    let mut seen = vec![0u32; tuples];
    let rotation = tiling.rotation() as usize;
    for logical in 0..tile_count {
        let t = logical;
        let mut tuple = 0u64;
        let mut radix = 1u64;
        for (&axis, &stride) in tiled.iter().zip(&strides) {
            let p = axes[axis].parts.len() as u64;
            tuple += ((t as u64 / stride) % p) * radix;
            radix *= p;
        }
        let tuple = tuple as usize;
        let replica = if all_default {
            (t % replicas as usize) as u32
        } else {
            seen[tuple]
        };
        seen[tuple] += 1;
        // `rotation < tile_count`, so this stays in range.
        let physical = (logical + rotation) % tile_count;
        if replica < replicas {
            tuple_tiles[tuple * replicas as usize + replica as usize] = physical as u32;
        }
        tile_tuple[physical] = tuple as u32;
        tile_replica[physical] = replica;
    }
    if let Some((tuple, &found)) = seen.iter().enumerate().find(|&(_, &n)| n != replicas) {
        let mut rest = tuple;
        let coordinates = tiled
            .iter()
            .map(|&axis| {
                let p = axes[axis].parts.len();
                let c = rest % p;
                rest /= p;
                c as u32
            })
            .collect();
        return Err(LayoutError::IrregularStrides {
            tuple: coordinates,
            found,
            replicas,
        });
    }
    Ok((tile_tuple, tile_replica, tuple_tiles))
}

impl TensorType {
    /// What `tile` holds.
    pub fn shard(&self, tile: TileId) -> Result<Shard, LayoutError> {
        let g = self.geometry();
        let t = self.check_tile(tile)?;
        let parts = g.partitions_of(t);
        let axes: SmallVec<[AxisShard; 4]> = g
            .axes
            .iter()
            .zip(&parts)
            .map(|(a, &p)| {
                let part = a.parts[p];
                AxisShard {
                    start: part.start,
                    end: part.end,
                    width: part.width,
                }
            })
            .collect();
        let bytes = axes.iter().map(|a| a.width).product::<u64>() * g.element_bytes;
        Ok(Shard {
            tile,
            replica: g.tile_replica[t],
            axes,
            bytes,
        })
    }

    /// Bytes of the padded shard on `tile`.
    pub fn shard_bytes(&self, tile: TileId) -> Result<u64, LayoutError> {
        Ok(self.shard(tile)?.bytes)
    }

    /// The largest shard on any tile, in bytes.
    pub fn max_shard_bytes(&self) -> u64 {
        let g = self.geometry();
        let elements: u64 = g
            .axes
            .iter()
            .map(|a| a.parts.iter().map(|p| p.width).max().unwrap_or(0))
            .product();
        elements * g.element_bytes
    }

    /// Every tile's shard, in tile order.
    pub fn shards(&self) -> impl ExactSizeIterator<Item = Shard> + '_ {
        (0..self.tiling().tile_count()).map(|t| {
            // Every tile below tile_count has a shard.
            self.shard(TileId::from_u32(t))
                .expect("tile below tile_count")
        })
    }

    /// The tiles holding the element at `index`, one per replica, in replica
    /// order.
    pub fn tiles_holding(
        &self,
        index: &[u64],
    ) -> Result<impl ExactSizeIterator<Item = TileId> + '_, LayoutError> {
        self.check_index(index)?;
        let g = self.geometry();
        let parts: SmallVec<[usize; 4]> = g
            .axes
            .iter()
            .zip(index)
            .map(|(a, &x)| a.partition_of(x))
            .collect();
        let replicas = g.replicas as usize;
        let first = g.tuple_of(&parts) * replicas;
        Ok(g.tuple_tiles[first..first + replicas]
            .iter()
            .map(|&t| TileId::from_u32(t)))
    }

    /// The byte offset of the element at `index` inside `tile`'s shard, or
    /// `None` if the tile does not hold it.
    pub fn element_offset(&self, tile: TileId, index: &[u64]) -> Result<Option<u64>, LayoutError> {
        self.check_index(index)?;
        let g = self.geometry();
        let t = self.check_tile(tile)?;
        let parts = g.partitions_of(t);
        let mut local: SmallVec<[u64; 4]> = SmallVec::new();
        for ((a, &p), &x) in g.axes.iter().zip(&parts).zip(index) {
            let part = a.parts[p];
            if x < part.start || x >= part.end {
                return Ok(None);
            }
            local.push(x - part.start);
        }
        Ok(Some(g.local_offset(&g.widths(&parts), &local)))
    }

    fn check_tile(&self, tile: TileId) -> Result<usize, LayoutError> {
        let tile_count = self.tiling().tile_count();
        if tile.as_u32() >= tile_count {
            return Err(LayoutError::TileOutOfRange { tile, tile_count });
        }
        Ok(tile.as_u32() as usize)
    }

    fn check_index(&self, index: &[u64]) -> Result<(), LayoutError> {
        let extents = self.shape().extents();
        if index.len() != extents.len() || index.iter().zip(extents).any(|(&i, &e)| i >= e) {
            return Err(LayoutError::IndexOutOfRange {
                index: index.to_vec(),
                extents: extents.to_vec(),
            });
        }
        Ok(())
    }
}

/// The position (in elements) of shard-local index `local` in a shard of
/// padded `widths` stored in `order` with AMP panels of `panel` columns.
fn element_position(order: ElementOrder, panel: u64, widths: &[u64], local: &[u64]) -> u64 {
    match order {
        ElementOrder::RowMajor => local
            .iter()
            .zip(widths)
            .fold(0, |acc, (&i, &w)| acc * w + i),
        ElementOrder::Amp(_) => {
            let Some(last) = widths.len().checked_sub(1) else {
                return 0;
            };
            let rows: u64 = widths[..last].iter().product();
            let row = local[..last]
                .iter()
                .zip(&widths[..last])
                .fold(0, |acc, (&i, &w)| acc * w + i);
            let column = local[last];
            let panel_start = column / panel * panel;
            let panel_width = panel.min(widths[last] - panel_start);
            panel_start * rows + row * panel_width + (column - panel_start)
        }
    }
}

impl ElementOrder {
    /// The byte offset of shard-local index `local` in a shard of padded
    /// `widths` holding `precision` elements in this order. `local` must lie
    /// inside `widths`.
    pub fn byte_offset(self, precision: crate::Precision, widths: &[u64], local: &[u64]) -> u64 {
        element_position(self, precision.amp_panel_columns(), widths, local)
            * precision.element_bytes()
    }
}

impl TensorType {
    /// Calls `f(index, byte_offset)` for every data element `tile` holds,
    /// in row-major order of the tensor index.
    pub fn for_each_element(
        &self,
        tile: TileId,
        mut f: impl FnMut(&[u64], u64),
    ) -> Result<(), LayoutError> {
        let shard = self.shard(tile)?;
        if shard.axes.iter().any(AxisShard::is_empty) {
            return Ok(());
        }
        let g = self.geometry();
        let widths: SmallVec<[u64; 4]> = shard.axes.iter().map(|a| a.width).collect();
        let mut index: SmallVec<[u64; 4]> = shard.axes.iter().map(|a| a.start).collect();
        let mut local: SmallVec<[u64; 4]> = smallvec::smallvec![0; index.len()];
        loop {
            f(&index, g.local_offset(&widths, &local));
            if !next_index(&shard.axes, index.len(), &mut index, &mut local) {
                return Ok(());
            }
        }
    }

    /// Calls `f(index, byte_offset, count)` for every run of `count` data
    /// elements `tile` holds that are consecutive along the last axis and
    /// consecutive in the shard (a whole row in row-major order, the part
    /// of a row inside one AMP panel otherwise), `index` being the first's;
    /// in row-major order of the tensor index, so the runs list exactly the
    /// elements of [`TensorType::for_each_element`], in its order.
    pub fn for_each_run(
        &self,
        tile: TileId,
        mut f: impl FnMut(&[u64], u64, u64),
    ) -> Result<(), LayoutError> {
        let shard = self.shard(tile)?;
        if shard.axes.iter().any(AxisShard::is_empty) {
            return Ok(());
        }
        let Some(last) = shard.axes.len().checked_sub(1) else {
            // A scalar: one element.
            f(&[], 0, 1);
            return Ok(());
        };
        let g = self.geometry();
        let widths: SmallVec<[u64; 4]> = shard.axes.iter().map(|a| a.width).collect();
        let mut index: SmallVec<[u64; 4]> = shard.axes.iter().map(|a| a.start).collect();
        let mut local: SmallVec<[u64; 4]> = smallvec::smallvec![0; index.len()];
        let columns = shard.axes[last].end - shard.axes[last].start;
        let run = match g.order {
            ElementOrder::RowMajor => columns,
            ElementOrder::Amp(_) => g.panel.max(1),
        };
        loop {
            let mut column = 0;
            while column < columns {
                // AMP panels start at multiples of the panel width.
                let count = (run - column % run).min(columns - column);
                index[last] = shard.axes[last].start + column;
                local[last] = column;
                f(&index, g.local_offset(&widths, &local), count);
                column += count;
            }
            if !next_index(&shard.axes, last, &mut index, &mut local) {
                return Ok(());
            }
        }
    }

    /// Calls `f(byte_offset, bytes)` for every run of contiguous bytes of
    /// `tile`'s shard holding padding along `axis` that lies in the data
    /// along every other axis: the padding a kernel reading the shard's
    /// data rows or columns in full meets (for a GEMM operand, the padding
    /// of its inner dimension, which meets data of the other operand).
    /// Runs come in increasing offset order, adjacent ones merged.
    pub fn for_each_axis_padding_run(
        &self,
        tile: TileId,
        axis: crate::Axis,
        mut f: impl FnMut(u64, u64),
    ) -> Result<(), LayoutError> {
        let shard = self.shard(tile)?;
        let a = axis.resolve(shard.axes.len())?;
        let along = shard.axes[a];
        if along.width == along.len() || shard.axes.iter().any(AxisShard::is_empty) {
            return Ok(());
        }
        let g = self.geometry();
        let eb = g.element_bytes;
        let widths: SmallVec<[u64; 4]> = shard.axes.iter().map(|x| x.width).collect();
        // The local box: data along every axis but `a`, padding along it.
        let lower: SmallVec<[u64; 4]> = shard
            .axes
            .iter()
            .enumerate()
            .map(|(i, x)| if i == a { x.len() } else { 0 })
            .collect();
        let upper: SmallVec<[u64; 4]> = shard
            .axes
            .iter()
            .enumerate()
            .map(|(i, x)| if i == a { x.width } else { x.len() })
            .collect();
        let mut offsets = Vec::new();
        let mut local = lower.clone();
        'elements: loop {
            offsets.push(g.local_offset(&widths, &local));
            // The next index of the box, row-major.
            for i in (0..local.len()).rev() {
                local[i] += 1;
                if local[i] < upper[i] {
                    continue 'elements;
                }
                local[i] = lower[i];
            }
            break;
        }
        offsets.sort_unstable();
        let mut run: Option<(u64, u64)> = None;
        for o in offsets {
            run = match run {
                Some((start, end)) if o == end => Some((start, end + eb)),
                Some((start, end)) => {
                    f(start, end - start);
                    Some((o, o + eb))
                }
                None => Some((o, o + eb)),
            };
        }
        if let Some((start, end)) = run {
            f(start, end - start);
        }
        Ok(())
    }

    /// Writes the elements `tile` holds, taken from the whole tensor's
    /// row-major `values`, into `shard` (its bytes), encoded in the
    /// tensor's precision. Padding is left as it is.
    pub fn pack_shard(
        &self,
        tile: TileId,
        values: &[f32],
        shard: &mut [u8],
    ) -> Result<(), LayoutError> {
        self.check_sizes(tile, values.len(), shard.len())?;
        let strides = row_major_strides(self.shape().extents());
        let eb = self.precision().element_bytes() as usize;
        let codec = Codec::new(self.precision());
        self.for_each_run(tile, |index, offset, count| {
            let linear: u64 = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
            let (at, n) = (offset as usize, count as usize);
            let bytes = shard[at..at + n * eb].chunks_exact_mut(eb);
            for (out, &v) in bytes.zip(&values[linear as usize..][..n]) {
                codec.encode_into(v, out);
            }
        })
    }

    /// Reads the elements `tile` holds from `shard` into the whole tensor's
    /// row-major `values`.
    pub fn unpack_shard(
        &self,
        tile: TileId,
        shard: &[u8],
        values: &mut [f32],
    ) -> Result<(), LayoutError> {
        self.check_sizes(tile, values.len(), shard.len())?;
        let strides = row_major_strides(self.shape().extents());
        let eb = self.precision().element_bytes() as usize;
        let codec = Codec::new(self.precision());
        self.for_each_run(tile, |index, offset, count| {
            let linear: u64 = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
            let (at, n) = (offset as usize, count as usize);
            let bytes = shard[at..at + n * eb].chunks_exact(eb);
            for (v, b) in values[linear as usize..][..n].iter_mut().zip(bytes) {
                *v = codec.decode_from(b);
            }
        })
    }

    fn check_sizes(&self, tile: TileId, values: usize, shard: usize) -> Result<(), LayoutError> {
        let needed = self.shard_bytes(tile)?;
        let count = self.shape().element_count()?;
        if values as u64 != count || (shard as u64) < needed {
            return Err(LayoutError::Incompatible {
                what: "buffer sizes",
                source_value: format!("{values} values, {shard} shard bytes"),
                destination_value: format!("{count} values, {needed} shard bytes"),
            });
        }
        Ok(())
    }
}

/// Steps `index` (and the shard-local `local`) to the next index in
/// row-major order over the first `axes_used` axes of `axes`, the later
/// ones left to the caller; `false` when it was the last.
fn next_index(axes: &[AxisShard], axes_used: usize, index: &mut [u64], local: &mut [u64]) -> bool {
    for axis in (0..axes_used).rev() {
        index[axis] += 1;
        local[axis] += 1;
        if index[axis] < axes[axis].end {
            return true;
        }
        index[axis] = axes[axis].start;
        local[axis] = 0;
    }
    false
}

fn row_major_strides(extents: &[u64]) -> SmallVec<[u64; 4]> {
    let mut strides: SmallVec<[u64; 4]> = smallvec::smallvec![1; extents.len()];
    for a in (0..extents.len().saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * extents[a + 1];
    }
    strides
}
