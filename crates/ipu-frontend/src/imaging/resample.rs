//! Image resizing that reproduces Pillow's `Image.resize` on 8-bit RGB
//! images bit for bit, because transformers' SigLIP processor resizes with
//! Pillow and a model's embeddings should not depend on which program
//! prepared its pixels.
//!
//! Pillow's convolution resampling (its `Resample.c`), written here from
//! its documented arithmetic:
//!
//! - Separable: a horizontal pass over only the source rows the vertical
//!   pass will read, its results rounded to 8 bits, then a vertical pass.
//!   A pass whose size does not change is skipped.
//! - Per output index `o` of a pass from `n` to `m` samples: `scale =
//!   n / m`, `filterscale = max(scale, 1)` (downscaling widens the filter,
//!   which is its antialiasing), `support = filter support · filterscale`,
//!   `center = (o + 0.5) · scale`, input range `[trunc(center − support +
//!   0.5), trunc(center + support + 0.5))` clamped to `[0, n)`; weight of
//!   input `i` is `filter((i − center + 0.5) / filterscale)`, normalised by
//!   their sequential sum (all in f64).
//! - Weights become integers with 22 fractional bits, rounded half away
//!   from zero; a sample is `(2^21 + Σ pixel · weight) >> 22` (arithmetic
//!   shift) clamped to 0..=255.
//! - Filters: bicubic with `a = −0.5` (support 2), bilinear (1), Lanczos-3
//!   (3), box (0.5, `−0.5 < x ≤ 0.5`) and Hamming (1, with its constants
//!   0.54 and 0.46 taken as f32 values, as Pillow writes them).

use std::f64::consts::PI;

/// Pillow's convolution filters, by their `PIL.Image.Resampling` codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// `LANCZOS` (1): truncated sinc, 3 lobes.
    Lanczos,
    /// `BILINEAR` (2): the triangle.
    Bilinear,
    /// `BICUBIC` (3): Keys' cubic with `a = −0.5`; SigLIP's choice.
    Bicubic,
    /// `BOX` (4): the box.
    Box,
    /// `HAMMING` (5): sinc with a Hamming window.
    Hamming,
}

impl Filter {
    /// The filter with Pillow's code `code`; `None` for `NEAREST` (0),
    /// which is not a convolution, and unknown codes.
    pub fn from_pillow(code: u64) -> Option<Self> {
        match code {
            1 => Some(Filter::Lanczos),
            2 => Some(Filter::Bilinear),
            3 => Some(Filter::Bicubic),
            4 => Some(Filter::Box),
            5 => Some(Filter::Hamming),
            _ => None,
        }
    }

    /// Pillow's code of the filter, as `preprocessor_config.json` writes it.
    pub fn pillow_code(self) -> u64 {
        match self {
            Filter::Lanczos => 1,
            Filter::Bilinear => 2,
            Filter::Bicubic => 3,
            Filter::Box => 4,
            Filter::Hamming => 5,
        }
    }

    /// Half the filter's width at scale 1.
    fn support(self) -> f64 {
        match self {
            Filter::Box => 0.5,
            Filter::Bilinear | Filter::Hamming => 1.0,
            Filter::Bicubic => 2.0,
            Filter::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Box => {
                if x > -0.5 && x <= 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            Filter::Bilinear => {
                let x = x.abs();
                if x < 1.0 { 1.0 - x } else { 0.0 }
            }
            Filter::Hamming => {
                let x = x.abs();
                if x == 0.0 {
                    1.0
                } else if x >= 1.0 {
                    0.0
                } else {
                    let x = x * PI;
                    x.sin() / x * (f64::from(0.54f32) + f64::from(0.46f32) * x.cos())
                }
            }
            Filter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Filter::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let x = x * PI;
        x.sin() / x
    }
}

/// Fractional bits of the integer weights.
const PRECISION_BITS: u32 = 22;

/// The integer weights of one pass: for each output sample, the first
/// input index and its weights.
struct Weights {
    spans: Vec<(usize, Vec<i64>)>,
}

impl Weights {
    fn new(input: usize, output: usize, filter: Filter) -> Self {
        // Pillow computes the input extent in f32 before widening it.
        let scale = f64::from(input as f32) / output as f64;
        let filterscale = scale.max(1.0);
        let support = filter.support() * filterscale;
        let mut spans = Vec::with_capacity(output);
        for o in 0..output {
            let center = (o as f64 + 0.5) * scale;
            let first = ((center - support + 0.5) as i64).max(0) as usize;
            let end = ((center + support + 0.5) as i64).clamp(0, input as i64) as usize;
            let mut weights: Vec<f64> = (first..end.max(first))
                .map(|i| filter.weight((i as f64 - center + 0.5) / filterscale))
                .collect();
            let total: f64 = weights.iter().fold(0.0, |sum, w| sum + w);
            if total != 0.0 {
                for w in &mut weights {
                    *w /= total;
                }
            }
            let unit = f64::from(1u32 << PRECISION_BITS);
            let fixed = weights
                .iter()
                .map(|&w| {
                    if w < 0.0 {
                        (-0.5 + w * unit) as i64
                    } else {
                        (0.5 + w * unit) as i64
                    }
                })
                .collect();
            spans.push((first, fixed));
        }
        Self { spans }
    }

    /// The input rows or columns the pass reads: `first..end`.
    fn range(&self) -> (usize, usize) {
        let first = self.spans.first().map_or(0, |(s, _)| *s);
        let end = self.spans.last().map_or(0, |(s, w)| s + w.len());
        (first, end.max(first))
    }
}

fn sample(acc: i64) -> u8 {
    ((acc >> PRECISION_BITS).clamp(0, 255)) as u8
}

/// An 8-bit RGB image, row-major, 3 bytes per pixel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rgb8 {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Rgb8 {
    /// An image from interleaved RGB bytes; `None` if the length is not
    /// `width · height · 3`.
    pub fn new(width: usize, height: usize, pixels: Vec<u8>) -> Option<Self> {
        let len = width.checked_mul(height)?.checked_mul(3)?;
        (pixels.len() == len).then_some(Self {
            width,
            height,
            pixels,
        })
    }

    /// An image from interleaved RGB bytes that are known to number
    /// `width · height · 3` (as every caller inside the crate builds them).
    pub(crate) fn from_parts(width: usize, height: usize, pixels: Vec<u8>) -> Self {
        debug_assert_eq!(pixels.len(), width * height * 3);
        Self {
            width,
            height,
            pixels,
        }
    }

    /// Width in pixels.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> usize {
        self.height
    }

    /// Interleaved RGB bytes, row by row.
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    /// The `width × height` window whose top-left pixel is (`left`,
    /// `top`); `None` when it does not lie inside the image.
    pub fn crop(&self, left: usize, top: usize, width: usize, height: usize) -> Option<Rgb8> {
        let right = left.checked_add(width)?;
        let bottom = top.checked_add(height)?;
        if right > self.width || bottom > self.height {
            return None;
        }
        let mut pixels = Vec::with_capacity(width * height * 3);
        for y in top..bottom {
            let row = (y * self.width + left) * 3;
            pixels.extend_from_slice(&self.pixels[row..row + width * 3]);
        }
        Some(Rgb8 {
            width,
            height,
            pixels,
        })
    }

    /// The image resized to `width × height` as Pillow's
    /// `Image.resize((width, height), filter)` does.
    pub fn resize(&self, width: usize, height: usize, filter: Filter) -> Rgb8 {
        if width == 0 || height == 0 || self.width == 0 || self.height == 0 {
            return Rgb8 {
                width,
                height,
                pixels: vec![0; width * height * 3],
            };
        }
        let vertical = Weights::new(self.height, height, filter);
        let (first_row, end_row) = vertical.range();
        let source = if width != self.width {
            let horizontal = Weights::new(self.width, width, filter);
            // Only the rows the vertical pass reads.
            let rows = end_row - first_row;
            let mut out = vec![0u8; rows * width * 3];
            for r in 0..rows {
                let src = &self.pixels[(first_row + r) * self.width * 3..][..self.width * 3];
                let dst = &mut out[r * width * 3..][..width * 3];
                for (o, (first, weights)) in horizontal.spans.iter().enumerate() {
                    for c in 0..3 {
                        let mut acc = 1i64 << (PRECISION_BITS - 1);
                        for (k, &w) in weights.iter().enumerate() {
                            acc += i64::from(src[(first + k) * 3 + c]) * w;
                        }
                        dst[o * 3 + c] = sample(acc);
                    }
                }
            }
            Rgb8 {
                width,
                height: rows,
                pixels: out,
            }
        } else {
            Rgb8 {
                width,
                height: end_row - first_row,
                pixels: self.pixels[first_row * width * 3..end_row * width * 3].to_vec(),
            }
        };
        if height == self.height {
            return source;
        }
        let mut out = vec![0u8; height * width * 3];
        for (o, (first, weights)) in vertical.spans.iter().enumerate() {
            let first = first - first_row;
            let dst = &mut out[o * width * 3..][..width * 3];
            for (x, d) in dst.iter_mut().enumerate() {
                let mut acc = 1i64 << (PRECISION_BITS - 1);
                for (k, &w) in weights.iter().enumerate() {
                    acc += i64::from(source.pixels[(first + k) * width * 3 + x]) * w;
                }
                *d = sample(acc);
            }
        }
        Rgb8 {
            width,
            height,
            pixels: out,
        }
    }
}
