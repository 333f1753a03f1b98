//! Runs IPU21 packages on a host model of the tiles and checks them.
//!
//! [`reference`](mod@reference) evaluates a graph on whole tensors in
//! plain f32, independent of layouts, and compares device results with it
//! under documented tolerances. [`tiles`] runs a built package on per-tile
//! SRAM images, checking every op on the way ([`oracle`]); [`logical`]
//! runs a lowered program before placement.

#![forbid(unsafe_code)]

pub mod codelets;
mod error;
pub mod logical;
pub mod oracle;
pub mod reference;
pub mod tiles;

pub use error::SimError;

pub use reference::{ReferenceConfig, ReferenceError, evaluate, evaluate_op, evaluate_with};

use ipu_layout::TileId;
use ipu_package::graph::{Graph, ValueSet};
use ipu_package::program::{Buffer, BufferRole};

/// The values of `buffer`, read shard by shard (replica 0 of each element)
/// through `shard(tile, bytes)`, which returns the shard's bytes. The
/// element count is checked against the bytes the shards hold before
/// anything is allocated, so a damaged type cannot ask for more memory
/// than the shards themselves occupy.
pub(crate) fn buffer_values(
    buffer: &Buffer,
    mut shard: impl FnMut(TileId, u64) -> Result<Vec<u8>, SimError>,
) -> Result<Vec<f32>, SimError> {
    let layout = |source| SimError::Layout {
        what: buffer.name.clone(),
        source,
    };
    let count = buffer.ty.shape().element_count().map_err(layout)?;
    let held: u64 = buffer
        .ty
        .shards()
        .filter(|s| s.replica == 0)
        .map(|s| s.data_elements())
        .fold(0, u64::saturating_add);
    let count = usize::try_from(count)
        .ok()
        .filter(|_| count <= held)
        .ok_or_else(|| SimError::BufferSize {
            buffer: buffer.name.clone(),
            elements: count,
            held,
        })?;
    let mut values = vec![f32::NAN; count];
    for s in buffer.ty.shards() {
        if s.replica != 0 || s.bytes == 0 {
            continue;
        }
        let bytes = shard(s.tile, s.bytes)?;
        buffer
            .ty
            .unpack_shard(s.tile, &bytes, &mut values)
            .map_err(layout)?;
    }
    Ok(values)
}

/// The values of every output buffer, read through `shard(buffer index,
/// tile, bytes)`, which returns the shard's bytes.
pub(crate) fn collect_outputs<'b>(
    buffers: impl Iterator<Item = &'b Buffer>,
    graph: &Graph,
    mut shard: impl FnMut(usize, TileId, u64) -> Result<Vec<u8>, SimError>,
) -> Result<ValueSet, SimError> {
    let mut out = ValueSet::new();
    for (id, b) in buffers.enumerate() {
        if b.role != BufferRole::Output {
            continue;
        }
        let Some(tensor) = graph.tensor_by_name(&b.name) else {
            continue;
        };
        let values = buffer_values(b, |tile, bytes| shard(id, tile, bytes))?;
        out.insert(tensor, values);
    }
    Ok(out)
}
