//! Redistribution fragments between two layouts of one tensor.
//!
//! A redistribution moves a tensor from a source [`TensorType`] to a
//! destination type of the same shape and precision. It is described by
//! [`Fragment`]s: contiguous byte runs copied from one tile's shard to
//! another's. Every data element of every destination shard (every replica)
//! is covered by exactly one fragment, read from one replica of the source;
//! padding is never read and never written.
//!
//! The computation never visits elements. For each destination shard, each
//! axis's data range is intersected with the source partitions of that axis;
//! the product of those pieces is a set of boxes, each held whole by one
//! source tuple. Inside a box both storage orders are affine in the element
//! index once the last axis is cut at AMP panel boundaries, so a box becomes
//! runs by merging inner axes while both sides stay contiguous, and adjacent
//! runs are merged again as they are emitted.

use smallvec::SmallVec;

use crate::geometry::Geometry;
use crate::tiling::ElementOrder;
use crate::{LayoutError, TensorType, TileId};

/// A contiguous run of bytes copied from one shard to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fragment {
    /// The tile the bytes are read from.
    pub source: TileId,
    /// Byte offset inside the source shard.
    pub source_offset: u64,
    /// The tile the bytes are written to.
    pub destination: TileId,
    /// Byte offset inside the destination shard.
    pub destination_offset: u64,
    /// Length of the run.
    pub bytes: u64,
}

impl Fragment {
    /// Whether source and destination are the same tile (an on-tile copy,
    /// not an exchange).
    pub fn is_local(&self) -> bool {
        self.source == self.destination
    }
}

/// Choices a redistribution makes where several answers are correct.
#[derive(Clone, Debug)]
pub struct RedistributeConfig {
    /// Read from a replica on the destination tile itself when there is one.
    pub prefer_local: bool,
}

impl Default for RedistributeConfig {
    fn default() -> Self {
        Self { prefer_local: true }
    }
}

/// The fragments of one redistribution, ordered by destination tile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Redistribution {
    fragments: Vec<Fragment>,
}

impl Redistribution {
    /// The fragments, ordered by destination tile and then by emission order.
    pub fn fragments(&self) -> &[Fragment] {
        &self.fragments
    }

    /// The fragments, by value.
    pub fn into_fragments(self) -> Vec<Fragment> {
        self.fragments
    }

    /// Bytes that cross between tiles.
    pub fn exchanged_bytes(&self) -> u64 {
        self.fragments
            .iter()
            .filter(|f| !f.is_local())
            .map(|f| f.bytes)
            .sum()
    }

    /// Bytes copied within a tile.
    pub fn local_bytes(&self) -> u64 {
        self.fragments
            .iter()
            .filter(|f| f.is_local())
            .map(|f| f.bytes)
            .sum()
    }

    /// Whether every fragment is a copy to the same offset on the same tile:
    /// the two layouts store this tensor identically.
    pub fn is_identity(&self) -> bool {
        self.fragments
            .iter()
            .all(|f| f.is_local() && f.source_offset == f.destination_offset)
    }
}

/// Computes the fragments that move a tensor from `source` to `destination`.
///
/// The two types must have the same shape and precision; tilings, orders,
/// tile counts and memory classes may differ. Where the source is
/// replicated, each box is read from the replica on the destination tile if
/// `prefer_local` and there is one, else from the replica that has sent the
/// fewest bytes so far (ties to the lowest replica after rotating by the
/// destination tile), so that sends spread over the replicas.
pub fn redistribute(
    source: &TensorType,
    destination: &TensorType,
    config: &RedistributeConfig,
) -> Result<Redistribution, LayoutError> {
    if source.shape() != destination.shape() {
        return Err(LayoutError::Incompatible {
            what: "shapes",
            source_value: format!("{:?}", source.shape()),
            destination_value: format!("{:?}", destination.shape()),
        });
    }
    redistribute_view(source, &SourceView::Whole, destination, config)
}

/// Which elements of a source a destination reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum SourceView {
    /// The whole source, of the destination's shape.
    Whole,
    /// A window starting at `origin` (one entry per source axis), broadcast
    /// along axes where the source extent is 1 or missing; axes aligned at
    /// the end as in numpy broadcasting.
    Window(Vec<u64>),
    /// The same row-major elements under a shape that differs only by axes
    /// of extent 1 (a squeeze or unsqueeze).
    Squeeze,
}

/// Computes the fragments that fill `destination` from a view of `source`.
///
/// With [`SourceView::Window`], axes are aligned at the end, as in numpy
/// broadcasting: destination axis `a` corresponds to source axis
/// `a - (dst_rank - src_rank)`. On an axis where the source extent is 1 and
/// the destination's is not, every destination index reads source index 0
/// (and the origin must be 0); on every other axis destination index `x`
/// reads source index `x + origin`, which must stay inside the source.
/// Leading destination axes without a source axis are broadcast.
/// [`SourceView::Whole`] is the case of equal shapes and a zero origin;
/// [`SourceView::Squeeze`] matches the axes of extent above 1 in order and
/// reads index 0 of every other source axis.
pub fn redistribute_view(
    source: &TensorType,
    view: &SourceView,
    destination: &TensorType,
    config: &RedistributeConfig,
) -> Result<Redistribution, LayoutError> {
    let mut fragments = Vec::new();
    redistribute_view_each(source, view, destination, config, &mut |f| {
        fragments.push(f);
        true
    })?;
    Ok(Redistribution { fragments })
}

/// [`redistribute_view`] without the list: hands each fragment to `sink`
/// as soon as it is complete, in the list's order, so that a caller that
/// only folds the fragments (as a phase's multicast grouping does) never
/// holds millions of them. `sink` returns false to stop: the
/// redistribution then returns early, and the fragments it was given are
/// the list's first ones.
pub fn redistribute_view_each(
    source: &TensorType,
    view: &SourceView,
    destination: &TensorType,
    config: &RedistributeConfig,
    sink: &mut dyn FnMut(Fragment) -> bool,
) -> Result<(), LayoutError> {
    if source.precision() != destination.precision() {
        return Err(LayoutError::Incompatible {
            what: "precisions",
            source_value: source.precision().to_string(),
            destination_value: destination.precision().to_string(),
        });
    }
    let mapping = match view {
        SourceView::Whole => {
            if source.shape() != destination.shape() {
                return Err(LayoutError::Incompatible {
                    what: "shapes",
                    source_value: format!("{:?}", source.shape()),
                    destination_value: format!("{:?}", destination.shape()),
                });
            }
            AxisMapping::new(source, &vec![0; source.shape().rank()], destination)?
        }
        SourceView::Window(origin) => AxisMapping::new(source, origin, destination)?,
        SourceView::Squeeze => AxisMapping::squeeze(source, destination)?,
    };
    let src = source.geometry();
    let dst = destination.geometry();
    let rank = destination.shape().rank();
    let mut sent = vec![0u64; source.tiling().tile_count() as usize];
    let mut out = Emitter {
        pending: None,
        sink,
        stopped: false,
    };

    for d in 0..destination.tiling().tile_count() as usize {
        let dst_parts = dst.partitions_of(d);
        let dst_widths = dst.widths(&dst_parts);
        // Per destination axis: the source partitions meeting this shard's
        // data range.
        let mut pieces: SmallVec<[SmallVec<[Piece; 4]>; 4]> = SmallVec::new();
        for axis in 0..rank {
            let part = dst.axes[axis].parts[dst_parts[axis]];
            let list = mapping.pieces(src, axis, part.start, part.end);
            if list.is_empty() {
                break;
            }
            pieces.push(list);
        }
        if pieces.len() != rank {
            continue;
        }
        let destination_tile = TileId::from_u32(d as u32);
        let dst_start: SmallVec<[u64; 4]> = (0..rank)
            .map(|a| dst.axes[a].parts[dst_parts[a]].start)
            .collect();
        let dst_side = Side {
            geometry: dst,
            widths: &dst_widths,
            origin: &dst_start,
        };
        let mut choice: SmallVec<[usize; 4]> = smallvec::smallvec![0; rank];
        'boxes: loop {
            let chosen: SmallVec<[Piece; 4]> = (0..rank).map(|a| pieces[a][choice[a]]).collect();
            let src_parts = mapping.source_partitions(&chosen);
            let elements: u64 = chosen.iter().map(|p| p.end - p.start).product();
            let s = pick_replica(
                src,
                &src_parts,
                d,
                elements * src.element_bytes,
                config,
                &mut sent,
            );
            let src_widths = src.widths(&src_parts);
            let src_origin: SmallVec<[u64; 4]> = src_parts
                .iter()
                .enumerate()
                .map(|(j, &q)| src.axes[j].parts[q].start)
                .collect();
            let src_side = Side {
                geometry: src,
                widths: &src_widths,
                origin: &src_origin,
            };
            let tiles = (TileId::from_u32(s as u32), destination_tile);
            out.emit_box(&mapping, &src_side, &dst_side, &chosen, tiles);
            if out.stopped {
                return Ok(());
            }

            // Advance the odometer over the pieces, last axis fastest.
            let mut axis = rank;
            loop {
                if axis == 0 {
                    break 'boxes;
                }
                axis -= 1;
                choice[axis] += 1;
                if choice[axis] < pieces[axis].len() {
                    break;
                }
                choice[axis] = 0;
            }
        }
    }
    out.flush();
    Ok(())
}

/// How destination axes read source axes.
#[derive(Clone, Copy, Debug)]
enum AxisRead {
    /// Destination index `x` reads source axis `axis` at `x + origin`.
    Offset { axis: usize, origin: u64 },
    /// Every destination index reads source axis `axis` at 0.
    Broadcast { axis: usize },
    /// A leading destination axis the source does not have.
    Missing,
}

struct AxisMapping {
    reads: SmallVec<[AxisRead; 4]>,
    source_rank: usize,
}

impl AxisMapping {
    fn new(
        source: &TensorType,
        origin: &[u64],
        destination: &TensorType,
    ) -> Result<Self, LayoutError> {
        let src = source.shape().extents();
        let dst = destination.shape().extents();
        let incompatible = || LayoutError::Incompatible {
            what: "shapes of a view",
            source_value: format!("{:?} from {origin:?}", source.shape()),
            destination_value: format!("{:?}", destination.shape()),
        };
        if origin.len() != src.len() || src.len() > dst.len() {
            return Err(incompatible());
        }
        let lead = dst.len() - src.len();
        let mut reads = SmallVec::new();
        for (a, &extent) in dst.iter().enumerate() {
            if a < lead {
                reads.push(AxisRead::Missing);
                continue;
            }
            let j = a - lead;
            if src[j] == 1 && extent != 1 {
                if origin[j] != 0 {
                    return Err(incompatible());
                }
                reads.push(AxisRead::Broadcast { axis: j });
            } else {
                match origin[j].checked_add(extent) {
                    Some(end) if end <= src[j] => {}
                    _ => return Err(incompatible()),
                }
                reads.push(AxisRead::Offset {
                    axis: j,
                    origin: origin[j],
                });
            }
        }
        Ok(Self {
            reads,
            source_rank: src.len(),
        })
    }

    fn squeeze(source: &TensorType, destination: &TensorType) -> Result<Self, LayoutError> {
        let src = source.shape().extents();
        let dst = destination.shape().extents();
        let big = |e: &[u64]| e.iter().copied().filter(|&x| x != 1).collect::<Vec<_>>();
        if big(src) != big(dst) {
            return Err(LayoutError::Incompatible {
                what: "shapes of a squeeze",
                source_value: format!("{:?}", source.shape()),
                destination_value: format!("{:?}", destination.shape()),
            });
        }
        // Match every destination axis of extent above 1 with the next
        // source axis of the same extent; extent-1 destination axes read
        // nothing, extent-1 source axes are read at 0.
        let mut reads = SmallVec::new();
        let mut j = 0;
        for &extent in dst {
            if extent == 1 {
                reads.push(AxisRead::Missing);
                continue;
            }
            while src[j] == 1 {
                j += 1;
            }
            reads.push(AxisRead::Offset { axis: j, origin: 0 });
            j += 1;
        }
        Ok(Self {
            reads,
            source_rank: src.len(),
        })
    }

    /// The pieces of destination range `[start, end)` on `axis`, split at
    /// source partition boundaries. Piece ranges are in destination
    /// coordinates.
    fn pieces(&self, src: &Geometry, axis: usize, start: u64, end: u64) -> SmallVec<[Piece; 4]> {
        let mut list = SmallVec::new();
        if start >= end {
            return list;
        }
        match self.reads[axis] {
            AxisRead::Missing => list.push(Piece {
                partition: 0,
                start,
                end,
            }),
            AxisRead::Broadcast { axis: j } => {
                list.push(Piece {
                    partition: src.axes[j].partition_of(0),
                    start,
                    end,
                });
            }
            AxisRead::Offset { axis: j, origin } => {
                let parts = &src.axes[j].parts;
                let (start, end) = (start + origin, end + origin);
                let mut q = src.axes[j].partition_of(start);
                let mut x = start;
                // On the source's last axis of an AMP order, pieces also end
                // at panel boundaries: offsets are affine only inside a panel.
                let panel = match src.order {
                    ElementOrder::Amp(_) if j + 1 == self.source_rank => Some(src.panel),
                    _ => None,
                };
                while x < end && q < parts.len() {
                    let part = parts[q];
                    if part.end > x {
                        let mut piece_end = part.end.min(end);
                        if let Some(panel) = panel {
                            let next_panel = part.start + ((x - part.start) / panel + 1) * panel;
                            piece_end = piece_end.min(next_panel);
                        }
                        list.push(Piece {
                            partition: q,
                            start: x - origin,
                            end: piece_end - origin,
                        });
                        x = piece_end;
                        if x < part.end {
                            continue;
                        }
                    }
                    q += 1;
                }
            }
        }
        list
    }

    /// The source partition of every source axis for one box.
    fn source_partitions(&self, chosen: &[Piece]) -> SmallVec<[usize; 4]> {
        let mut parts: SmallVec<[usize; 4]> = smallvec::smallvec![0; self.source_rank];
        for (read, piece) in self.reads.iter().zip(chosen) {
            match *read {
                AxisRead::Offset { axis, .. } | AxisRead::Broadcast { axis } => {
                    parts[axis] = piece.partition;
                }
                AxisRead::Missing => {}
            }
        }
        parts
    }

    /// The source element read by destination element `x`.
    fn source_index(&self, x: &[u64]) -> SmallVec<[u64; 4]> {
        let mut index: SmallVec<[u64; 4]> = smallvec::smallvec![0; self.source_rank];
        for (read, &xa) in self.reads.iter().zip(x) {
            match *read {
                AxisRead::Offset { axis, origin } => index[axis] = xa + origin,
                AxisRead::Broadcast { axis } => index[axis] = 0,
                AxisRead::Missing => {}
            }
        }
        index
    }

    /// Source byte strides per destination axis (zero where broadcast).
    fn strides_on_destination(&self, source_strides: &[u64]) -> SmallVec<[u64; 4]> {
        self.reads
            .iter()
            .map(|read| match *read {
                AxisRead::Offset { axis, .. } => source_strides[axis],
                AxisRead::Broadcast { .. } | AxisRead::Missing => 0,
            })
            .collect()
    }
}

/// A source partition's share of a destination range on one axis.
#[derive(Clone, Copy, Debug)]
struct Piece {
    partition: usize,
    start: u64,
    end: u64,
}

fn pick_replica(
    g: &Geometry,
    parts: &[usize],
    destination: usize,
    bytes: u64,
    config: &RedistributeConfig,
    sent: &mut [u64],
) -> usize {
    let replicas = g.replicas as usize;
    let first = g.tuple_of(parts) * replicas;
    let candidates = &g.tuple_tiles[first..first + replicas];
    let chosen = if config.prefer_local && candidates.contains(&(destination as u32)) {
        destination
    } else {
        let rotation = destination % replicas;
        (0..replicas)
            .map(|i| candidates[(i + rotation) % replicas] as usize)
            .min_by_key(|&t| sent[t])
            .unwrap_or(candidates[0] as usize)
    };
    if chosen != destination {
        sent[chosen] += bytes;
    }
    chosen
}

/// One side of a copy: a shard's geometry, padded widths and the tensor
/// coordinates of its local origin.
struct Side<'a> {
    geometry: &'a Geometry,
    widths: &'a [u64],
    origin: &'a [u64],
}

impl Side<'_> {
    fn panel(&self) -> Option<u64> {
        match self.geometry.order {
            ElementOrder::RowMajor => None,
            ElementOrder::Amp(_) => Some(self.geometry.panel),
        }
    }

    /// Byte offset of tensor element `x` and the byte stride of every axis,
    /// valid for every element whose last coordinate lies in the same AMP
    /// panel as `x`'s.
    fn affine(&self, x: &[u64]) -> (u64, SmallVec<[u64; 4]>) {
        let g = self.geometry;
        let local: SmallVec<[u64; 4]> = x.iter().zip(self.origin).map(|(a, o)| a - o).collect();
        let base = g.local_offset(self.widths, &local);
        let rank = self.widths.len();
        let mut strides: SmallVec<[u64; 4]> = smallvec::smallvec![0; rank];
        let mut stride = g.element_bytes;
        if let Some(panel) = self.panel() {
            let last = rank - 1;
            let panel_start = (local[last] / panel) * panel;
            strides[last] = stride;
            stride *= panel.min(self.widths[last] - panel_start);
            for a in (0..last).rev() {
                strides[a] = stride;
                stride *= self.widths[a];
            }
        } else {
            for a in (0..rank).rev() {
                strides[a] = stride;
                stride *= self.widths[a];
            }
        }
        (base, strides)
    }

    /// The next AMP panel boundary after local column of tensor column `c`.
    fn panel_end(&self, c: u64) -> u64 {
        let last = self.widths.len() - 1;
        match self.panel() {
            None => u64::MAX,
            Some(panel) => {
                let local = c - self.origin[last];
                self.origin[last] + (local / panel + 1) * panel
            }
        }
    }
}

/// Hands fragments to a sink, each once it can grow no more: a run that
/// continues the previous one on both tiles extends it.
struct Emitter<'s> {
    pending: Option<Fragment>,
    sink: &'s mut dyn FnMut(Fragment) -> bool,
    /// The sink asked to stop.
    stopped: bool,
}

impl Emitter<'_> {
    fn push(&mut self, f: Fragment) {
        if let Some(last) = &mut self.pending
            && last.source == f.source
            && last.destination == f.destination
            && last.source_offset + last.bytes == f.source_offset
            && last.destination_offset + last.bytes == f.destination_offset
        {
            last.bytes += f.bytes;
            return;
        }
        self.flush();
        self.pending = Some(f);
    }

    /// Hands the pending fragment to the sink.
    fn flush(&mut self) {
        if let Some(f) = self.pending.take()
            && !self.stopped
            && !(self.sink)(f)
        {
            self.stopped = true;
        }
    }

    /// Emits the runs copying one box, given by its per-axis pieces in
    /// destination coordinates.
    fn emit_box(
        &mut self,
        mapping: &AxisMapping,
        src: &Side<'_>,
        dst: &Side<'_>,
        chosen: &[Piece],
        (source, destination): (TileId, TileId),
    ) {
        let rank = chosen.len();
        let element_bytes = src.geometry.element_bytes;
        if rank == 0 {
            let bytes = element_bytes;
            self.push(Fragment {
                source,
                source_offset: 0,
                destination,
                destination_offset: 0,
                bytes,
            });
            return;
        }
        let last = rank - 1;
        let (lo, hi) = (chosen[last].start, chosen[last].end);
        // The box's corner and extents; segments differ only on the last
        // axis (a box is cut at every destination panel boundary).
        let mut start: SmallVec<[u64; 4]> = chosen.iter().map(|p| p.start).collect();
        let mut extent: SmallVec<[u64; 4]> = chosen.iter().map(|p| p.end - p.start).collect();
        let mut c = lo;
        while c < hi {
            // Source panels were cut into separate pieces already.
            let segment_end = hi.min(dst.panel_end(c));
            start[last] = c;
            extent[last] = segment_end - c;
            let (src_base, src_strides) = src.affine(&mapping.source_index(&start));
            let src_strides = mapping.strides_on_destination(&src_strides);
            let (dst_base, dst_strides) = dst.affine(&start);

            // Merge inner axes while both sides stay contiguous. The last
            // axis is contiguous on the destination; on the source unless it
            // is broadcast, in which case runs are single elements.
            let mut outer = rank;
            let mut run = element_bytes;
            if src_strides[last] == element_bytes {
                run = extent[last] * element_bytes;
                outer = last;
                while outer > 0 {
                    let a = outer - 1;
                    if extent[a] == 1 || (src_strides[a] == run && dst_strides[a] == run) {
                        run *= extent[a];
                        outer = a;
                    } else {
                        break;
                    }
                }
            }
            // Enumerate the remaining outer axes, last fastest.
            let mut index: SmallVec<[u64; 4]> = smallvec::smallvec![0; outer];
            loop {
                let mut s = src_base;
                let mut d = dst_base;
                for a in 0..outer {
                    s += index[a] * src_strides[a];
                    d += index[a] * dst_strides[a];
                }
                self.push(Fragment {
                    source,
                    source_offset: s,
                    destination,
                    destination_offset: d,
                    bytes: run,
                });
                if self.stopped {
                    return;
                }
                let mut a = outer;
                let mut done = true;
                while a > 0 {
                    a -= 1;
                    index[a] += 1;
                    if index[a] < extent[a] {
                        done = false;
                        break;
                    }
                    index[a] = 0;
                }
                if done {
                    break;
                }
            }
            c = segment_end;
        }
    }
}
