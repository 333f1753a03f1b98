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

use ipu_layout::rng::SplitMix64;

use crate::imaging::Rgb8;

/// How many synthetic images calibration uses by default.
pub const SYNTHETIC_IMAGES: usize = 4;

/// A 64-bit hash of `z`: the first output of [`SplitMix64`] seeded with it.
pub(crate) fn mix(z: u64) -> u64 {
    SplitMix64::new(z).next_u64()
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
