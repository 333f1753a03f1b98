//! SigLIP's image processor: the shared [`Processor`] with
//! `SiglipImageProcessor`'s defaults, and the patch grid of a
//! [`VisionConfig`] (no class token).

use crate::error::ImageError;
use crate::processor::{PatchGrid, Processor, ProcessorError, SIGLIP_PROCESSOR};
use crate::siglip::config::VisionConfig;

impl Processor {
    /// The SigLIP processor's defaults for `config`: bicubic resize to the
    /// model's image size, rescale by 1/255, mean and std 0.5.
    pub fn default_for(config: &VisionConfig) -> Self {
        Self::defaults(SIGLIP_PROCESSOR, config.image_size())
    }

    /// Reads the text of a SigLIP `preprocessor_config.json` for `config`.
    pub fn from_json(text: &str, config: &VisionConfig) -> Result<Self, ProcessorError> {
        Self::read(text, SIGLIP_PROCESSOR, config.image_size())
    }
}

/// The patch grid of `config`'s graph input.
pub(crate) fn grid(config: &VisionConfig) -> PatchGrid {
    PatchGrid {
        side: config.image_size(),
        patch: config.patch_size(),
        width: config.patch_width(),
        class_rows: 0,
    }
}

/// Cuts one image's `pixel_values` (`[3, S, S]`, `S` the model's image
/// side) into its patch vectors, `[tokens, patch_width]`, in the
/// documented order ([`crate::processor`]), appending them to `out`.
pub fn patchify(
    config: &VisionConfig,
    pixel_values: &[f32],
    out: &mut Vec<f32>,
) -> Result<(), ImageError> {
    crate::processor::patchify(&grid(config), pixel_values, out)
}
