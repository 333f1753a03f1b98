//! Weights of realistic spread for a SigLIP graph, drawn from a seed, for
//! checking that a configuration whose weights are not at hand builds and
//! fits (`build-package --checkpoint DIR --random-weights SEED`).

use std::f64::consts::PI;

use ipu_package::graph::{Graph, QueryColumns, ValueSet, query_columns, query_factor};

use crate::imaging::synthetic::mix;

/// Hidden channels that carry large values in [`random_weights`], as
/// trained SigLIP checkpoints have a few (reduced modulo the hidden size).
pub const OUTLIER_CHANNELS: [u64; 2] = [3, 17];

/// The most weight elements [`random_weights`] draws: 2^30, 4 GiB of f32
/// values on the host. The largest encoders this crate imports have under
/// half a billion parameters; a configuration above the limit is refused
/// before anything is allocated, rather than exhausting the host's memory.
pub const MAX_RANDOM_WEIGHT_ELEMENTS: u64 = 1 << 30;

/// A configuration whose weights are too many to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "its weights have {elements} elements, more than the {limit} random weights are drawn for; \
     check the sizes in config.json"
)]
pub struct TooManyWeights {
    /// The graph's weight elements (saturating).
    pub elements: u64,
    /// [`MAX_RANDOM_WEIGHT_ELEMENTS`].
    pub limit: u64,
}

/// A standard normal sample from `(seed, tensor, index)`: Box–Muller on
/// two hashed uniforms, so that every element is independent of the
/// thread that draws it.
fn normal(seed: u64, tensor: u64, index: u64) -> f32 {
    let a = mix(seed ^ mix(tensor ^ mix(index)));
    let b = mix(a ^ 0x5851_f42d_4c95_7f2d);
    // Uniforms in (0, 1] and [0, 1) from the top 53 bits.
    let u1 = ((a >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let u2 = (b >> 11) as f64 / (1u64 << 53) as f64;
    ((-2.0 * u1.ln()).sqrt() * (2.0 * PI * u2).cos()) as f32
}

/// Weights of realistic spread for every weight of `graph` (a SigLIP graph
/// of either tower, residual stream `hidden` wide), drawn from `seed`, for checking that a configuration
/// whose weights are not at hand builds and fits. The spreads are those
/// of `fixtures/checkpoints/make_golden.py`: GEMM weights `N(0, 1/fan_in)`,
/// biases `N(0, 0.02²)`, layer-norm gains `1 + N(0, 0.1²)` and offsets
/// `N(0, 0.05²)`, the position embedding `N(0, 0.02²)`, the probe
/// `N(0, 1)`; and [`OUTLIER_CHANNELS`] of the residual stream carry large
/// values: their patch-embedding bias is 4, every `fc2` weight column for
/// them is scaled by 8 and their `fc2` bias is 1.5. Where an attention
/// takes its queries scaled, the query columns of its projection
/// (`ipu_package::graph::query_columns`) are divided by `√head_dim` as the
/// importer divides a checkpoint's, so the scores keep a checkpoint's
/// spread. Deterministic whatever the thread count. A graph with more
/// than [`MAX_RANDOM_WEIGHT_ELEMENTS`] weight elements is refused before
/// anything is drawn.
pub fn random_weights(hidden: u64, graph: &Graph, seed: u64) -> Result<ValueSet, TooManyWeights> {
    use rayon::prelude::*;

    let elements = graph
        .weights()
        .into_iter()
        .map(|id| graph.tensor(id).element_count())
        .fold(0u64, u64::saturating_add);
    if elements > MAX_RANDOM_WEIGHT_ELEMENTS {
        return Err(TooManyWeights {
            elements,
            limit: MAX_RANDOM_WEIGHT_ELEMENTS,
        });
    }

    let outliers: Vec<u64> = OUTLIER_CHANNELS.iter().map(|c| c % hidden).collect();
    let queries = query_columns(graph);
    let mut set = ValueSet::new();
    for id in graph.weights() {
        let tensor = graph.tensor(id);
        let name = tensor.name();
        let extents = tensor.extents();
        let columns = extents.last().copied().unwrap_or(1).max(1);
        let key = mix(name.bytes().fold(0u64, |h, b| mix(h ^ u64::from(b))));
        let is_fc2 = name.ends_with("fc2.w") || name.ends_with("fc2.b");
        let residual = name.starts_with("enc") && is_fc2;
        let (mean, std) = if name.ends_with(".g") {
            (1.0, 0.1)
        } else if name.ends_with("ln1.b")
            || name.ends_with("ln2.b")
            || name.ends_with("ln.b")
            || name == "post.b"
        {
            (0.0, 0.05)
        } else if name == "head.probe" {
            (0.0, 1.0)
        } else if name.ends_with(".w") {
            (0.0, 1.0 / (extents[0].max(1) as f32).sqrt())
        } else {
            // Biases and the position embedding.
            (0.0, 0.02)
        };
        // The query columns this tensor holds, if any: most tensors hold
        // none, and their elements skip the lookup.
        let mine: Vec<QueryColumns> = queries.iter().filter(|q| q.covers(id)).cloned().collect();
        let count = tensor.element_count() as usize;
        let mut values = vec![0.0f32; count];
        values
            .par_chunks_mut(1 << 16)
            .enumerate()
            .for_each(|(block, chunk)| {
                for (i, v) in chunk.iter_mut().enumerate() {
                    let index = (block << 16) + i;
                    let column = index as u64 % columns;
                    *v = mean + std * normal(seed, key, index as u64);
                    if !mine.is_empty() {
                        let q = query_factor(&mine, id, columns, index as u64);
                        *v = (f64::from(*v) * q) as f32;
                    }
                    let outlier = outliers.contains(&column);
                    if outlier && name == "embed.b" {
                        *v = 4.0;
                    } else if outlier && residual && name.ends_with(".w") {
                        *v *= 8.0;
                    } else if outlier && residual {
                        *v = 1.5;
                    }
                }
            });
        set.insert(id, values);
    }
    Ok(set)
}
