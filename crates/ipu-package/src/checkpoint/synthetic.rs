//! The built-in calibration images, used when the user gives none.
//!
//! FP8 activation scales are chosen from the activations a model computes
//! on calibration images, so these images must drive the model like
//! photographs do: the full 0–255 range in every channel, smooth regions
//! and edges, fine texture and flat areas. Image `k` (of side `S`, the
//! model's image size) is made of:
//!
//! - a colour gradient whose direction turns with `k` (channel `c` runs
//!   along angle `(k + c)·2π/7`);
//! - sinusoidal stripes of period `S / (2 + k)` pixels in the green
//!   channel and `S / (3 + 2k)` in the blue one;
//! - a saturated block (white for even `k`, black for odd) covering the
//!   square from `S/8` to `3S/8` on both axes, for the extremes;
//! - pseudo-random noise of ±24 levels from a hash of `(k, x, y, c)`.
//!
//! Values are clamped to 0..=255. The images depend only on `k` and `S`.

use std::f64::consts::PI;

use crate::checkpoint::resample::Rgb8;

/// How many synthetic images calibration uses by default.
pub const SYNTHETIC_IMAGES: usize = 4;

/// A 64-bit mix of the inputs (SplitMix64's finaliser).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Synthetic image `k` of side `side` (see the module header).
pub fn synthetic_image(k: usize, side: usize) -> Rgb8 {
    let mut pixels = Vec::with_capacity(side * side * 3);
    let s = side.max(1) as f64;
    let block = (side / 8, (3 * side) / 8);
    let block_value = if k % 2 == 0 { 255.0 } else { 0.0 };
    for y in 0..side {
        for x in 0..side {
            let (u, v) = (x as f64 / s, y as f64 / s);
            for c in 0..3 {
                let angle = (k + c) as f64 * 2.0 * PI / 7.0;
                let mut value = 255.0 * (0.5 + 0.5 * (u * angle.cos() + v * angle.sin()));
                if c == 1 {
                    value += 60.0 * (2.0 * PI * x as f64 * (2 + k) as f64 / s).sin();
                }
                if c == 2 {
                    value += 60.0 * (2.0 * PI * y as f64 * (3 + 2 * k) as f64 / s).sin();
                }
                if (block.0..block.1).contains(&x) && (block.0..block.1).contains(&y) {
                    value = block_value;
                }
                let key = ((k as u64) << 48) ^ ((y as u64) << 32) ^ ((x as u64) << 8) ^ c as u64;
                value += (mix(key) % 49) as f64 - 24.0;
                pixels.push(value.clamp(0.0, 255.0).round() as u8);
            }
        }
    }
    Rgb8::from_parts(side, side, pixels)
}

/// Hidden channels that carry large values in [`random_weights`], as
/// trained SigLIP checkpoints have a few (reduced modulo the hidden size).
pub const OUTLIER_CHANNELS: [u64; 2] = [3, 17];

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
/// of `config`), drawn from `seed`, for checking that a configuration
/// whose weights are not at hand builds and fits. The spreads are those
/// of `fixtures/checkpoints/make_golden.py`: GEMM weights `N(0, 1/fan_in)`,
/// biases `N(0, 0.02²)`, layer-norm gains `1 + N(0, 0.1²)` and offsets
/// `N(0, 0.05²)`, the position embedding `N(0, 0.02²)`, the probe
/// `N(0, 1)`; and [`OUTLIER_CHANNELS`] of the residual stream carry large
/// values: their patch-embedding bias is 4, every `fc2` weight column for
/// them is scaled by 8 and their `fc2` bias is 1.5. Deterministic whatever
/// the thread count.
pub fn random_weights(
    config: &crate::checkpoint::VisionConfig,
    graph: &crate::graph::Graph,
    seed: u64,
) -> crate::graph::ValueSet {
    use rayon::prelude::*;

    let hidden = config.hidden();
    let outliers: Vec<u64> = OUTLIER_CHANNELS.iter().map(|c| c % hidden).collect();
    let mut set = crate::graph::ValueSet::new();
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
    set
}
