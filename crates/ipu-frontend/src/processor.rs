//! A checkpoint's image processor (`preprocessor_config.json`) and the
//! patch vectors cut from its output: what every vision family does to an
//! image after decoding it, with the family's defaults ([`ProcessorKind`]).
//!
//! The steps are those of transformers' image processors with their
//! Pillow backend (`SiglipImageProcessorPil`, `ViTImageProcessorPil`,
//! `CLIPImageProcessorPil`, DINOv2's `BitImageProcessorPil`; the same steps
//! as transformers 4's `SiglipImageProcessor`, `ViTImageProcessor`,
//! `CLIPImageProcessor`, `BitImageProcessor`), in
//! order: convert to RGB ([`read_rgb8`]); resize with the `resample`
//! filter ([`Rgb8::resize`], Pillow's arithmetic exactly) either to
//! `size`'s height and width or, for CLIP and DINOv2, so that the shortest edge is
//! `size.shortest_edge` (the long edge `⌊shortest · long / short⌋`, the
//! aspect kept); center crop to `crop_size` (CLIP: top-left corner at
//! `⌊(H − h) / 2⌋, ⌊(W − w) / 2⌋`); rescale (`f32(u8 · rescale_factor)`
//! with the product in f64); normalise (`(x − mean[c]) / std[c]` in f32).
//! The result is channel-first `[3, side, side]`, transformers'
//! `pixel_values`, and equals it bit for bit on 8-bit PNG input (tests
//! check it for each family). transformers 5's default processors resize
//! with torchvision instead, whose antialiased filters differ from
//! Pillow's by up to one 8-bit level (`docs/SIGLIP.md`).
//!
//! Fields read: `do_resize`, `size` (`{"height", "width"}`; for CLIP also
//! `{"shortest_edge"}`; a bare number is a square for SigLIP and ViT and a
//! shortest edge for CLIP, as transformers reads it), `resample` (Pillow
//! codes 1–5), `do_center_crop` and `crop_size` (CLIP only), `do_rescale`,
//! `rescale_factor`, `do_normalize`, `image_mean` and `image_std` (three
//! numbers or one for all channels). `do_convert_rgb` is always honoured
//! as true, since the models take three channels. Absent fields take the
//! family's defaults; without a `preprocessor_config.json` the defaults
//! apply with every size the model's image size. What a family's processor
//! does not do (`do_pad`, a center crop outside CLIP, a shortest-edge
//! resize outside CLIP, a crop larger than the resized image) is refused.
//!
//! Patch order ([`patchify`]): token `t = gy·G + gx` (row-major over the
//! `G × G` patch grid) and, within a token, element `c·p² + ky·p + kx`, so
//! that `patches[b, t, c·p² + ky·p + kx] = pixel_values[b, c, gy·p + ky,
//! gx·p + kx]`: the order of the patch convolution's flattened filters. A
//! family with a class token puts one row of zeros before the patches
//! (`class_rows`), the class token's place in the graph.

use std::path::Path;

use serde::Deserialize;

use crate::error::ImageError;
use crate::imaging::read_rgb8;
use crate::imaging::{Filter, Rgb8};
use crate::siglip::MAX_IMAGE_SIDE;

/// CLIP's normalisation mean (of its training images, per channel):
/// transformers' `OPENAI_CLIP_MEAN` (0.48145466, 0.4578275, 0.40821073)
/// as f32.
pub const CLIP_MEAN: [f32; 3] = [0.481_454_67, 0.457_827_5, 0.408_210_72];
/// CLIP's normalisation standard deviation: `OPENAI_CLIP_STD`
/// (0.26862954, 0.26130258, 0.27577711) as f32.
pub const CLIP_STD: [f32; 3] = [0.268_629_55, 0.261_302_6, 0.275_777_1];

/// The longest side a shortest-edge resize may produce: the resized image
/// is held in memory (`3 · shortest · longest` bytes, at most 192 MiB with
/// the shortest edge at most [`MAX_IMAGE_SIDE`]), so an extreme aspect
/// ratio is refused rather than allowed to exhaust it.
pub const MAX_RESIZED_SIDE: u64 = 1 << 14;

/// A family's image processor: its transformers class and the defaults a
/// `preprocessor_config.json` leaves out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessorKind {
    /// transformers' `image_processor_type`.
    pub class: &'static str,
    /// The default resample filter.
    pub resample: Filter,
    /// The default normalisation mean.
    pub mean: [f32; 3],
    /// The default normalisation standard deviation.
    pub std: [f32; 3],
    /// CLIP's steps: a shortest-edge resize and a center crop (the
    /// defaults, and allowed at all only here).
    pub shortest_edge_and_crop: bool,
}

/// SigLIP's `SiglipImageProcessor`.
pub const SIGLIP_PROCESSOR: ProcessorKind = ProcessorKind {
    class: "SiglipImageProcessor",
    resample: Filter::Bicubic,
    mean: [0.5; 3],
    std: [0.5; 3],
    shortest_edge_and_crop: false,
};

/// ViT's `ViTImageProcessor`.
pub const VIT_PROCESSOR: ProcessorKind = ProcessorKind {
    class: "ViTImageProcessor",
    resample: Filter::Bilinear,
    mean: [0.5; 3],
    std: [0.5; 3],
    shortest_edge_and_crop: false,
};

/// CLIP's `CLIPImageProcessor`.
pub const CLIP_PROCESSOR: ProcessorKind = ProcessorKind {
    class: "CLIPImageProcessor",
    resample: Filter::Bicubic,
    mean: CLIP_MEAN,
    std: CLIP_STD,
    shortest_edge_and_crop: true,
};

/// DINOv2's `BitImageProcessor`: CLIP's steps (shortest-edge resize,
/// center crop) and, as transformers' class has them, CLIP's mean and std
/// by default (the published DINOv2 configs give ImageNet's).
pub const DINOV2_PROCESSOR: ProcessorKind = ProcessorKind {
    class: "BitImageProcessor",
    resample: Filter::Bicubic,
    mean: CLIP_MEAN,
    std: CLIP_STD,
    shortest_edge_and_crop: true,
};

/// `BitImageProcessor`'s default `crop_size` side.
pub const BIT_CROP: u64 = 224;

/// How the resize step sizes its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// Exactly `height × width`.
    Exact { height: u64, width: u64 },
    /// The shortest edge this long, the aspect ratio kept.
    ShortestEdge(u64),
}

/// The preprocessing a checkpoint asks for, validated against its model.
#[derive(Clone, Debug, PartialEq)]
pub struct Processor {
    kind: ProcessorKind,
    resize: Option<(Filter, Target)>,
    /// Whether the image is center-cropped to `side × side`.
    crop: bool,
    /// The model's image side: the processor's output is `side × side`.
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
    /// The processor's output is not the model's image size.
    #[error(
        "it makes {height}x{width} images but the model takes {side}x{side} images; \
         the patch grid would not match the position embeddings"
    )]
    Size {
        /// Output height.
        height: u64,
        /// Output width.
        width: u64,
        /// The model's image side.
        side: u64,
    },
    /// `size` is of a form this family's processor does not take.
    #[error(
        "`size` must give `height` and `width`{}; other resize rules are not supported",
        if *shortest_edge { " or `shortest_edge`" } else { "" }
    )]
    SizeForm {
        /// Whether a shortest edge would have been accepted.
        shortest_edge: bool,
    },
    /// The resample filter is not a Pillow convolution filter.
    #[error(
        "resample {code} is not supported; use a Pillow filter code 1 to 5 \
         (bicubic is 3, bilinear 2)"
    )]
    Resample {
        /// The code found.
        code: u64,
    },
    /// A preprocessing step this family's processor does not perform is
    /// enabled, or one it needs is disabled.
    #[error("`{field}` is {value}, but {class} preprocessing here {}", if *value { "has no such step" } else { "needs it" })]
    Step {
        /// The field.
        field: &'static str,
        /// The value found.
        value: bool,
        /// The processor class.
        class: &'static str,
    },
    /// The center crop is larger than the resized image.
    #[error(
        "the center crop {crop}x{crop} is larger than the shortest edge {edge} it cuts from; \
         padding before the crop is not supported"
    )]
    Crop {
        /// The crop side.
        crop: u64,
        /// The resized shortest edge.
        edge: u64,
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
    /// rescale factor or mean, a size of 0 or above `MAX_IMAGE_SIDE`).
    #[error(
        "`{field}` value {value} is not usable; it must be finite (non-zero for image_std, \
         1 to 4096 for sizes)"
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

/// A size as transformers writes it: an object or one number.
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeField {
    One(u64),
    Object(RawSize),
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawProcessor {
    do_resize: Option<bool>,
    size: Option<SizeField>,
    resample: Option<u64>,
    do_rescale: Option<bool>,
    rescale_factor: Option<f64>,
    do_normalize: Option<bool>,
    image_mean: Option<PerChannel>,
    image_std: Option<PerChannel>,
    do_center_crop: Option<bool>,
    crop_size: Option<SizeField>,
    do_pad: Option<bool>,
}

fn per_channel(
    field: &'static str,
    value: Option<&PerChannel>,
    default: [f32; 3],
) -> Result<[f32; 3], ProcessorError> {
    let values = match value {
        None => return Ok(default),
        Some(PerChannel::One(v)) => [*v; 3],
        Some(PerChannel::Many(v)) if v.len() == 3 => [v[0], v[1], v[2]],
        Some(PerChannel::Many(v)) => {
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

/// The resize target `size` asks for, in `kind`'s reading of it.
fn target(
    size: Option<&SizeField>,
    side: u64,
    kind: &ProcessorKind,
) -> Result<Target, ProcessorError> {
    let form = ProcessorError::SizeForm {
        shortest_edge: kind.shortest_edge_and_crop,
    };
    let target = match size {
        None if kind.shortest_edge_and_crop => Target::ShortestEdge(side),
        None => Target::Exact {
            height: side,
            width: side,
        },
        Some(SizeField::One(n)) if kind.shortest_edge_and_crop => Target::ShortestEdge(*n),
        Some(SizeField::One(n)) => Target::Exact {
            height: *n,
            width: *n,
        },
        Some(SizeField::Object(raw)) => match raw {
            RawSize {
                height: Some(height),
                width: Some(width),
                shortest_edge: None,
                longest_edge: None,
            } => Target::Exact {
                height: *height,
                width: *width,
            },
            RawSize {
                height: None,
                width: None,
                shortest_edge: Some(edge),
                longest_edge: None,
            } if kind.shortest_edge_and_crop => Target::ShortestEdge(*edge),
            _ => return Err(form),
        },
    };
    let (smallest, largest) = match target {
        Target::Exact { height, width } => (height.min(width), height.max(width)),
        Target::ShortestEdge(edge) => (edge, edge),
    };
    // A resize target is held in memory: bounded like a model's image.
    if smallest == 0 || largest > MAX_IMAGE_SIDE {
        return Err(ProcessorError::Value {
            field: "size",
            value: if smallest == 0 { 0.0 } else { largest as f64 },
        });
    }
    Ok(target)
}

/// The side of `crop_size` (which must be square and is the model's
/// image side).
fn crop_side(crop: Option<&SizeField>, side: u64) -> Result<(), ProcessorError> {
    let (height, width) = match crop {
        None => return Ok(()),
        Some(SizeField::One(n)) => (*n, *n),
        Some(SizeField::Object(RawSize {
            height: Some(h),
            width: Some(w),
            shortest_edge: None,
            longest_edge: None,
        })) => (*h, *w),
        Some(SizeField::Object(_)) => {
            return Err(ProcessorError::SizeForm {
                shortest_edge: false,
            });
        }
    };
    if height != side || width != side {
        return Err(ProcessorError::Size {
            height,
            width,
            side,
        });
    }
    Ok(())
}

impl Processor {
    /// The side of the square `crop_size` of a `preprocessor_config.json`
    /// of a family with a center crop, `None` when it gives none (or turns
    /// the crop off): the image side of a model that takes whatever its
    /// processor makes (DINOv2).
    pub fn crop_side(text: &str) -> Result<Option<u64>, ProcessorError> {
        let raw: RawProcessor =
            serde_json::from_str(text).map_err(|source| ProcessorError::Json { source })?;
        if raw.do_center_crop == Some(false) {
            return Ok(None);
        }
        let (height, width) = match raw.crop_size {
            None => return Ok(None),
            Some(SizeField::One(n)) => (n, n),
            Some(SizeField::Object(RawSize {
                height: Some(h),
                width: Some(w),
                shortest_edge: None,
                longest_edge: None,
            })) => (h, w),
            Some(SizeField::Object(_)) => {
                return Err(ProcessorError::SizeForm {
                    shortest_edge: false,
                });
            }
        };
        if height != width {
            return Err(ProcessorError::Size {
                height,
                width,
                side: height.min(width),
            });
        }
        if height == 0 || height > MAX_IMAGE_SIDE {
            return Err(ProcessorError::Value {
                field: "crop_size",
                value: height as f64,
            });
        }
        Ok(Some(height))
    }

    /// `kind`'s defaults for a model taking `side × side` images: resize
    /// to it (CLIP: shortest edge to it, then center crop), rescale by
    /// 1/255, the family's mean and std.
    pub fn defaults(kind: ProcessorKind, side: u64) -> Self {
        let target = if kind.shortest_edge_and_crop {
            Target::ShortestEdge(side)
        } else {
            Target::Exact {
                height: side,
                width: side,
            }
        };
        Self {
            kind,
            resize: Some((kind.resample, target)),
            crop: kind.shortest_edge_and_crop,
            side,
            rescale: Some(1.0 / 255.0),
            normalize: Some((kind.mean, kind.std)),
        }
    }

    /// Reads the text of a `preprocessor_config.json` of `kind`'s family
    /// for a model taking `side × side` images.
    pub fn read(text: &str, kind: ProcessorKind, side: u64) -> Result<Self, ProcessorError> {
        let raw: RawProcessor =
            serde_json::from_str(text).map_err(|source| ProcessorError::Json { source })?;
        let step = |field, value| ProcessorError::Step {
            field,
            value,
            class: kind.class,
        };
        if raw.do_pad == Some(true) {
            return Err(step("do_pad", true));
        }
        let crop = raw.do_center_crop.unwrap_or(kind.shortest_edge_and_crop);
        if crop && !kind.shortest_edge_and_crop {
            return Err(step("do_center_crop", true));
        }
        if crop {
            crop_side(raw.crop_size.as_ref(), side)?;
        }
        let resize = if raw.do_resize.unwrap_or(true) {
            let target = target(raw.size.as_ref(), side, &kind)?;
            match target {
                Target::Exact { height, width } if !crop && (height != side || width != side) => {
                    return Err(ProcessorError::Size {
                        height,
                        width,
                        side,
                    });
                }
                Target::Exact { height, width } if height.min(width) < side => {
                    return Err(ProcessorError::Crop {
                        crop: side,
                        edge: height.min(width),
                    });
                }
                // Without the crop a shortest-edge resize keeps the aspect
                // ratio, so only square images would fit the model.
                Target::ShortestEdge(_) if !crop => return Err(step("do_center_crop", false)),
                Target::ShortestEdge(edge) if edge < side => {
                    return Err(ProcessorError::Crop { crop: side, edge });
                }
                _ => {}
            }
            let code = raw.resample.unwrap_or(kind.resample.pillow_code());
            let filter = Filter::from_pillow(code).ok_or(ProcessorError::Resample { code })?;
            Some((filter, target))
        } else {
            None
        };
        let rescale = if raw.do_rescale.unwrap_or(true) {
            let factor = raw.rescale_factor.unwrap_or(1.0 / 255.0);
            if !factor.is_finite() {
                return Err(ProcessorError::Value {
                    field: "rescale_factor",
                    value: factor,
                });
            }
            Some(factor)
        } else {
            None
        };
        let normalize = if raw.do_normalize.unwrap_or(true) {
            Some((
                per_channel("image_mean", raw.image_mean.as_ref(), kind.mean)?,
                per_channel("image_std", raw.image_std.as_ref(), kind.std)?,
            ))
        } else {
            None
        };
        Ok(Self {
            kind,
            resize,
            crop,
            side,
            rescale,
            normalize,
        })
    }

    /// The processor as a `preprocessor_config.json` object, every field
    /// written; [`Processor::read`] reads it back, for the same family and
    /// model, to an equal processor.
    pub fn to_json(&self) -> serde_json::Value {
        let (mean, std) = self.normalize.unwrap_or(([0.0; 3], [1.0; 3]));
        let (filter, target) = self.resize.unwrap_or((
            self.kind.resample,
            Target::Exact {
                height: self.side,
                width: self.side,
            },
        ));
        let size = match target {
            Target::Exact { height, width } => {
                serde_json::json!({"height": height, "width": width})
            }
            Target::ShortestEdge(edge) => serde_json::json!({"shortest_edge": edge}),
        };
        let mut out = serde_json::json!({
            "image_processor_type": self.kind.class,
            "do_convert_rgb": true,
            "do_resize": self.resize.is_some(),
            "size": size,
            "resample": filter.pillow_code(),
            "do_rescale": self.rescale.is_some(),
            "rescale_factor": self.rescale.unwrap_or(1.0),
            "do_normalize": self.normalize.is_some(),
            "image_mean": mean.map(f64::from),
            "image_std": std.map(f64::from),
        });
        if self.kind.shortest_edge_and_crop {
            out["do_center_crop"] = serde_json::json!(self.crop);
            out["crop_size"] = serde_json::json!({"height": self.side, "width": self.side});
        }
        out
    }

    /// The resize filter, if the processor resizes.
    pub fn filter(&self) -> Option<Filter> {
        self.resize.map(|(f, _)| f)
    }

    /// The family's processor.
    pub fn kind(&self) -> &ProcessorKind {
        &self.kind
    }

    /// transformers' `pixel_values` of one image, `[3, side, side]`
    /// channel-first.
    pub fn pixel_values(&self, path: &Path) -> Result<Vec<f32>, ImageError> {
        let image = read_rgb8(path)?;
        self.pixel_values_of(&image, path)
    }

    /// The image resized and cropped to `side × side` (module header).
    fn sized(&self, image: &Rgb8, path: &Path) -> Result<Rgb8, ImageError> {
        let side = self.side as usize;
        let resized = match self.resize {
            Some((filter, Target::Exact { height, width })) => {
                image.resize(width as usize, height as usize, filter)
            }
            Some((filter, Target::ShortestEdge(edge))) => {
                let (w, h) = (image.width() as u64, image.height() as u64);
                let (short, long) = (w.min(h), w.max(h));
                // transformers: int(edge * long / short), a true division
                // of exact integers, truncated.
                let long_side = (edge as f64 * long as f64 / short.max(1) as f64) as u64;
                if long_side > MAX_RESIZED_SIDE {
                    return Err(ImageError::Aspect {
                        path: path.to_owned(),
                        width: w,
                        height: h,
                    });
                }
                let (new_w, new_h) = if w <= h {
                    (edge, long_side)
                } else {
                    (long_side, edge)
                };
                image.resize(new_w as usize, new_h as usize, filter)
            }
            None => image.clone(),
        };
        let size_error = |image: &Rgb8| ImageError::Size {
            path: path.to_owned(),
            width: image.width() as u32,
            height: image.height() as u32,
            expected: self.side,
        };
        if self.crop {
            let (w, h) = (resized.width(), resized.height());
            if w < side || h < side {
                return Err(size_error(&resized));
            }
            let (top, left) = ((h - side) / 2, (w - side) / 2);
            return resized
                .crop(left, top, side, side)
                .ok_or_else(|| size_error(&resized));
        }
        if resized.width() != side || resized.height() != side {
            return Err(size_error(&resized));
        }
        Ok(resized)
    }

    /// [`Processor::pixel_values`] of an image already in memory; `path`
    /// names it in errors.
    pub fn pixel_values_of(&self, image: &Rgb8, path: &Path) -> Result<Vec<f32>, ImageError> {
        let image = self.sized(image, path)?;
        let plane = image.width() * image.height();
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

/// The patch grid of a model: what [`patchify`] needs to cut an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatchGrid {
    /// The image side in pixels.
    pub side: u64,
    /// The patch side in pixels.
    pub patch: u64,
    /// Elements of one patch row as the graph holds it (`3·p²` rounded
    /// up, the rest zeros).
    pub width: u64,
    /// Rows of zeros before the patches (1 for a class token, else 0).
    pub class_rows: u64,
}

/// Cuts one image's `pixel_values` (`[3, S, S]`) into `class_rows` rows
/// of zeros and then its patch vectors, `[class_rows + tokens, width]`, in
/// the documented order (module header), each followed by the zeros that
/// pad it to `width`, appending them to `out`. Pixels past the last whole
/// patch are not read, as the convolution's "valid" padding does not.
pub fn patchify(
    grid: &PatchGrid,
    pixel_values: &[f32],
    out: &mut Vec<f32>,
) -> Result<(), ImageError> {
    let side = grid.side as usize;
    let p = grid.patch as usize;
    let cells = side / p.max(1);
    let channels = 3;
    if pixel_values.len() != channels * side * side {
        return Err(ImageError::Internal {
            what: format!(
                "pixel values hold {} numbers, not {channels}x{side}x{side}",
                pixel_values.len()
            ),
        });
    }
    let width = grid.width as usize;
    let pad = width - channels * p * p;
    out.reserve((cells * cells + grid.class_rows as usize) * width);
    out.extend(std::iter::repeat_n(0.0, grid.class_rows as usize * width));
    for gy in 0..cells {
        for gx in 0..cells {
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
