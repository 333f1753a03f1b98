//! The checkpoint's image processor (`preprocessor_config.json`) and the
//! graph's `patches` input.
//!
//! The steps are those of transformers' SigLIP image processor with its
//! Pillow backend (`SiglipImageProcessorPil`, the same steps as
//! transformers 4's `SiglipImageProcessor`), in order: convert to RGB
//! ([`read_rgb8`]), resize to `size` with the `resample` filter
//! ([`Rgb8::resize`], Pillow's arithmetic exactly), rescale
//! (`f32(u8 · rescale_factor)` with the product in f64), normalise
//! (`(x − mean[c]) / std[c]` in f32). The result is channel-first
//! `[3, H, W]`, transformers' `pixel_values`, and equals it bit for bit on
//! 8-bit PNG input (a test checks it). transformers 5's default
//! `SiglipImageProcessor` resizes with torchvision instead, whose
//! antialiased bicubic differs from Pillow's by up to one 8-bit level on
//! the golden images (`docs/SIGLIP.md`).
//!
//! Fields read: `do_resize`, `size` (`{"height", "width"}`), `resample`
//! (Pillow codes 1–5), `do_rescale`, `rescale_factor`, `do_normalize`,
//! `image_mean` and `image_std` (three numbers or one for all channels).
//! `do_convert_rgb` is always honoured as true, since the model takes
//! three channels. Absent fields take the SigLIP processor's defaults;
//! without a `preprocessor_config.json` the defaults apply with `size` the
//! model's image size. `do_center_crop` or `do_pad` set to true, or a
//! `size` other than height and width, are refused.
//!
//! Patch order: token `t = gy·G + gx` (row-major over the `G × G` patch
//! grid) and, within a token, element `c·p² + ky·p + kx`, so that
//! `patches[b, t, c·p² + ky·p + kx] = pixel_values[b, c, gy·p + ky,
//! gx·p + kx]`: the order of the patch convolution's flattened filters.

use std::path::Path;

use serde::Deserialize;

use crate::error::ImageError;
use crate::imaging::read_rgb8;
use crate::imaging::{Filter, Rgb8};
use crate::siglip::config::VisionConfig;

/// The preprocessing a checkpoint asks for, validated against its model.
#[derive(Clone, Debug, PartialEq)]
pub struct Processor {
    resize: Option<Filter>,
    /// The model's image side; also the resize target.
    side: u64,
    rescale: Option<f64>,
    normalize: Option<([f32; 3], [f32; 3])>,
}

/// Why a processor config cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessorError {
    /// The text is not JSON of the expected form.
    #[error("it is not an image processor config: {source}")]
    Json {
        /// The parser's finding.
        #[source]
        source: serde_json::Error,
    },
    /// The resize target is not the model's image size.
    #[error(
        "it resizes to {height}x{width} but the model takes {side}x{side} images; \
         the patch grid would not match the position embeddings"
    )]
    Size {
        /// Target height.
        height: u64,
        /// Target width.
        width: u64,
        /// The model's image side.
        side: u64,
    },
    /// `size` is not `{"height", "width"}`.
    #[error(
        "`size` must give `height` and `width`; shortest-edge and other resize rules are not supported"
    )]
    SizeForm,
    /// The resample filter is not a Pillow convolution filter.
    #[error(
        "resample {code} is not supported; use a Pillow filter code 1 to 5 (SigLIP uses 3, bicubic)"
    )]
    Resample {
        /// The code found.
        code: u64,
    },
    /// A preprocessing step this importer does not perform is enabled.
    #[error("`{field}` is true, but SigLIP preprocessing here has no such step")]
    Step {
        /// The field.
        field: &'static str,
    },
    /// A mean or standard deviation list has the wrong length.
    #[error("`{field}` must be one number or three, found {found}")]
    Channels {
        /// The field.
        field: &'static str,
        /// How many numbers it holds.
        found: usize,
    },
    /// A number is not usable (a zero or non-finite std, a non-finite
    /// rescale factor or mean).
    #[error(
        "`{field}` value {value} is not usable; it must be finite (and non-zero for image_std)"
    )]
    Value {
        /// The field.
        field: &'static str,
        /// The value.
        value: f64,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum PerChannel {
    One(f64),
    Many(Vec<f64>),
}

#[derive(Deserialize, Default)]
struct RawSize {
    height: Option<u64>,
    width: Option<u64>,
    shortest_edge: Option<u64>,
    longest_edge: Option<u64>,
}

#[derive(Deserialize)]
#[serde(default)]
struct RawProcessor {
    do_resize: bool,
    size: Option<RawSize>,
    resample: u64,
    do_rescale: bool,
    rescale_factor: f64,
    do_normalize: bool,
    image_mean: PerChannel,
    image_std: PerChannel,
    do_center_crop: Option<bool>,
    do_pad: Option<bool>,
}

impl Default for RawProcessor {
    /// The SigLIP image processor's defaults.
    fn default() -> Self {
        Self {
            do_resize: true,
            size: None,
            resample: 3,
            do_rescale: true,
            rescale_factor: 1.0 / 255.0,
            do_normalize: true,
            image_mean: PerChannel::One(0.5),
            image_std: PerChannel::One(0.5),
            do_center_crop: None,
            do_pad: None,
        }
    }
}

fn per_channel(field: &'static str, value: &PerChannel) -> Result<[f32; 3], ProcessorError> {
    let values = match value {
        PerChannel::One(v) => [*v; 3],
        PerChannel::Many(v) if v.len() == 3 => [v[0], v[1], v[2]],
        PerChannel::Many(v) => {
            return Err(ProcessorError::Channels {
                field,
                found: v.len(),
            });
        }
    };
    let mut out = [0.0f32; 3];
    for (o, &v) in out.iter_mut().zip(&values) {
        let f = v as f32;
        if !f.is_finite() || (field == "image_std" && f == 0.0) {
            return Err(ProcessorError::Value { field, value: v });
        }
        *o = f;
    }
    Ok(out)
}

impl Processor {
    /// The SigLIP processor's defaults for `config`: bicubic resize to the
    /// model's image size, rescale by 1/255, mean and std 0.5.
    pub fn default_for(config: &VisionConfig) -> Self {
        Self {
            resize: Some(Filter::Bicubic),
            side: config.image_size(),
            rescale: Some(1.0 / 255.0),
            normalize: Some(([0.5; 3], [0.5; 3])),
        }
    }

    /// Reads the text of a `preprocessor_config.json` for `config`.
    pub fn from_json(text: &str, config: &VisionConfig) -> Result<Self, ProcessorError> {
        let raw: RawProcessor =
            serde_json::from_str(text).map_err(|source| ProcessorError::Json { source })?;
        if raw.do_center_crop == Some(true) {
            return Err(ProcessorError::Step {
                field: "do_center_crop",
            });
        }
        if raw.do_pad == Some(true) {
            return Err(ProcessorError::Step { field: "do_pad" });
        }
        let side = config.image_size();
        let resize = if raw.do_resize {
            let size = raw.size.unwrap_or_default();
            let (height, width) = match size {
                RawSize {
                    height: Some(h),
                    width: Some(w),
                    shortest_edge: None,
                    longest_edge: None,
                } => (h, w),
                RawSize {
                    height: None,
                    width: None,
                    shortest_edge: None,
                    longest_edge: None,
                } => (side, side),
                _ => return Err(ProcessorError::SizeForm),
            };
            if height != side || width != side {
                return Err(ProcessorError::Size {
                    height,
                    width,
                    side,
                });
            }
            Some(
                Filter::from_pillow(raw.resample)
                    .ok_or(ProcessorError::Resample { code: raw.resample })?,
            )
        } else {
            None
        };
        let rescale = if raw.do_rescale {
            if !raw.rescale_factor.is_finite() {
                return Err(ProcessorError::Value {
                    field: "rescale_factor",
                    value: raw.rescale_factor,
                });
            }
            Some(raw.rescale_factor)
        } else {
            None
        };
        let normalize = if raw.do_normalize {
            Some((
                per_channel("image_mean", &raw.image_mean)?,
                per_channel("image_std", &raw.image_std)?,
            ))
        } else {
            None
        };
        Ok(Self {
            resize,
            side,
            rescale,
            normalize,
        })
    }

    /// The processor as a `preprocessor_config.json` object, every field
    /// written; [`Processor::from_json`] reads it back, for the same
    /// model, to an equal processor.
    pub fn to_json(&self) -> serde_json::Value {
        let (mean, std) = self.normalize.unwrap_or(([0.0; 3], [1.0; 3]));
        serde_json::json!({
            "image_processor_type": "SiglipImageProcessor",
            "do_convert_rgb": true,
            "do_resize": self.resize.is_some(),
            "size": {"height": self.side, "width": self.side},
            "resample": self.resize.map_or(Filter::Bicubic, |f| f).pillow_code(),
            "do_rescale": self.rescale.is_some(),
            "rescale_factor": self.rescale.unwrap_or(1.0),
            "do_normalize": self.normalize.is_some(),
            "image_mean": mean.map(f64::from),
            "image_std": std.map(f64::from),
        })
    }

    /// The resize filter, if the processor resizes.
    pub fn filter(&self) -> Option<Filter> {
        self.resize
    }

    /// transformers' `pixel_values` of one image, `[3, side, side]`
    /// channel-first.
    pub fn pixel_values(&self, path: &Path) -> Result<Vec<f32>, ImageError> {
        let image = read_rgb8(path)?;
        self.pixel_values_of(&image, path)
    }

    /// [`Processor::pixel_values`] of an image already in memory; `path`
    /// names it in errors.
    pub fn pixel_values_of(&self, image: &Rgb8, path: &Path) -> Result<Vec<f32>, ImageError> {
        let side = self.side as usize;
        let resized;
        let image = match self.resize {
            Some(filter) => {
                resized = image.resize(side, side, filter);
                &resized
            }
            None if image.width() == side && image.height() == side => image,
            None => {
                return Err(ImageError::Size {
                    path: path.to_owned(),
                    width: image.width() as u32,
                    height: image.height() as u32,
                    expected: self.side,
                });
            }
        };
        let plane = side * side;
        let mut out = vec![0.0f32; 3 * plane];
        for (i, pixel) in image.pixels().chunks_exact(3).enumerate() {
            for (c, &byte) in pixel.iter().enumerate() {
                let mut x = match self.rescale {
                    Some(factor) => (f64::from(byte) * factor) as f32,
                    None => f32::from(byte),
                };
                if let Some((mean, std)) = &self.normalize {
                    x = (x - mean[c]) / std[c];
                }
                out[c * plane + i] = x;
            }
        }
        Ok(out)
    }
}

/// Cuts one image's `pixel_values` (`[3, S, S]`, `S` the model's image
/// side) into its patch vectors, `[tokens, patch_width]`, in the documented
/// order (module header), each followed by the zeros that pad it to
/// [`VisionConfig::patch_width`], appending them to `out`. Pixels past the last whole
/// patch are not read, as the convolution's "valid" padding does not.
pub fn patchify(
    config: &VisionConfig,
    pixel_values: &[f32],
    out: &mut Vec<f32>,
) -> Result<(), ImageError> {
    let side = config.image_size() as usize;
    let p = config.patch_size() as usize;
    let grid = config.grid() as usize;
    let channels = config.channels() as usize;
    if pixel_values.len() != channels * side * side {
        return Err(ImageError::Internal {
            what: format!(
                "pixel values hold {} numbers, not {channels}x{side}x{side}",
                pixel_values.len()
            ),
        });
    }
    let width = config.patch_width() as usize;
    let pad = width - channels * p * p;
    out.reserve(grid * grid * width);
    for gy in 0..grid {
        for gx in 0..grid {
            for c in 0..channels {
                for ky in 0..p {
                    let row = (c * side + gy * p + ky) * side + gx * p;
                    out.extend_from_slice(&pixel_values[row..row + p]);
                }
            }
            out.extend(std::iter::repeat_n(0.0, pad));
        }
    }
    Ok(())
}
