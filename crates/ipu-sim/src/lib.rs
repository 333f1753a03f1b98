//! Runs IPU21 packages on a host model of the tiles and checks them.
//!
//! So far this crate holds the oracle: [`reference`](mod@reference)
//! evaluates a graph on whole tensors in plain f32, independent of
//! layouts, and compares device results with it under documented
//! tolerances. The tile model that
//! executes packages builds on it.

#![forbid(unsafe_code)]

pub mod codelets;
mod error;
pub mod logical;
pub mod reference;
pub mod tiles;

pub use error::SimError;

pub use reference::{ReferenceConfig, ReferenceError, evaluate, evaluate_op, evaluate_with};

use ipu_package::graph::{Graph, ValueSet};
use ipu_package::program::{Buffer, BufferRole};

/// The values of every output buffer, read shard by shard (replica 0 of
/// each element) through `shard(buffer index, tile)`, which returns the
/// shard's bytes.
pub(crate) fn collect_outputs<'b>(
    buffers: impl Iterator<Item = &'b Buffer>,
    graph: &Graph,
    mut shard: impl FnMut(usize, ipu_layout::TileId, u64) -> Result<Vec<u8>, SimError>,
) -> Result<ValueSet, SimError> {
    let mut out = ValueSet::new();
    for (id, b) in buffers.enumerate() {
        if b.role != BufferRole::Output {
            continue;
        }
        let Some(tensor) = graph.tensor_by_name(&b.name) else {
            continue;
        };
        let layout = |source| SimError::Layout {
            what: b.name.clone(),
            source,
        };
        let count = b.ty.shape().element_count().map_err(layout)?;
        let mut values = vec![f32::NAN; count as usize];
        for s in b.ty.shards() {
            if s.replica != 0 || s.bytes == 0 {
                continue;
            }
            let bytes = shard(id, s.tile, s.bytes)?;
            b.ty.unpack_shard(s.tile, &bytes, &mut values)
                .map_err(layout)?;
        }
        out.insert(tensor, values);
    }
    Ok(out)
}
