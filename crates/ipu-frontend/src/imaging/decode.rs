//! Reading an image file into 8-bit RGB the way transformers' processor
//! does before it resizes.
//!
//! The format is recognised from the file's contents (PNG and JPEG are
//! built in); anything else is [`ImageError::NotAnImage`]. The `image`
//! crate's default decoding limits (512 MiB per image) bound memory.
//!
//! Conversion to RGB follows transformers' `convert_to_rgb` with Pillow:
//! an image with an alpha channel (or a PNG transparency chunk, which
//! decoding turns into alpha) is composited over opaque white with
//! Pillow's `alpha_composite` integer arithmetic, exactly; grey images are
//! replicated to three channels. 16-bit images are reduced to 8 bits by
//! the `image` crate (rounding), where Pillow's reduction may differ by one
//! level; 8-bit PNGs match Pillow exactly, and JPEG decoders may differ
//! from Pillow's libjpeg by a level in some pixels.

use std::path::Path;

use crate::error::ImageError;
use crate::imaging::Rgb8;

/// Reads and decodes the image at `path` into 8-bit RGB.
pub fn read_rgb8(path: &Path) -> Result<Rgb8, ImageError> {
    let read = |source| ImageError::Read {
        path: path.to_owned(),
        source,
    };
    let reader = image::ImageReader::open(path)
        .map_err(read)?
        .with_guessed_format()
        .map_err(read)?;
    if reader.format().is_none() {
        return Err(ImageError::NotAnImage {
            path: path.to_owned(),
        });
    }
    let decoded = reader.decode().map_err(|source| match source {
        image::ImageError::Unsupported(_) => ImageError::NotAnImage {
            path: path.to_owned(),
        },
        source => ImageError::Decode {
            path: path.to_owned(),
            source,
        },
    })?;
    let (width, height) = (decoded.width() as usize, decoded.height() as usize);
    let pixels = if decoded.color().has_alpha() {
        over_white(decoded.to_rgba8().as_raw())
    } else {
        decoded.to_rgb8().into_raw()
    };
    Rgb8::new(width, height, pixels).ok_or_else(|| ImageError::Internal {
        what: format!(
            "decoding `{}` gave a buffer of the wrong size",
            path.display()
        ),
    })
}

/// RGBA pixels composited over opaque white, as Pillow's `alpha_composite`
/// computes it for an opaque white destination: with source alpha `a` and
/// colour `c`, `t = 128·(c·a + 255·(255 − a)) + 128·128` and the result is
/// `(((t >> 8) + t) >> 8) >> 7` (a rounded division by 255 in 7-bit fixed
/// point); a fully transparent pixel is white.
pub fn over_white(rgba: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rgba.len() / 4 * 3);
    for pixel in rgba.chunks_exact(4) {
        let a = u32::from(pixel[3]);
        for &c in &pixel[..3] {
            let value = if a == 0 {
                255
            } else {
                let t = 128 * (u32::from(c) * a + 255 * (255 - a)) + (128 << 7);
                (((t >> 8) + t) >> 8) >> 7
            };
            out.push(value.min(255) as u8);
        }
    }
    out
}
