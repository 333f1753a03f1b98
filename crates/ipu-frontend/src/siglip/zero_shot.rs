//! SigLIP's zero-shot scores: for every (image, text) pair, the logit
//! `exp(logit_scale) · cos(image, text) + logit_bias` and its sigmoid, the
//! probability that the text describes the image (`SiglipModel.forward`'s
//! `logits_per_image`; SigLIP scores each pair on its own, so the
//! probabilities of one image need not sum to one).
//!
//! The embeddings are the vision tower's `pooled` output and the text
//! tower's `pooled` output, each L2-normalised; the arithmetic is in f64.

use crate::siglip::text::LogitParams;

/// Why the scores cannot be computed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ZeroShotError {
    /// The towers' embeddings differ in width.
    #[error(
        "the image embeddings are {image} wide but the text embeddings {text}; SigLIP's \
         text_config.projection_size must equal vision_config.hidden_size"
    )]
    Width {
        /// The image embedding width.
        image: usize,
        /// The text embedding width.
        text: usize,
    },
    /// An embedding has no direction.
    #[error("{what} {index}'s embedding is zero or not finite, so it has no cosine")]
    Degenerate {
        /// `image` or `text`.
        what: &'static str,
        /// Which one.
        index: usize,
    },
}

/// Every pair's logit and probability, `[images, texts]` row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Scores {
    /// Images (rows).
    pub images: usize,
    /// Texts (columns).
    pub texts: usize,
    /// `exp(logit_scale) · cos + logit_bias`.
    pub logits: Vec<f32>,
    /// The logits' sigmoids.
    pub probs: Vec<f32>,
}

/// Unit vectors of the `width`-wide rows of `x`.
fn normalised(x: &[f32], width: usize, what: &'static str) -> Result<Vec<Vec<f64>>, ZeroShotError> {
    x.chunks(width.max(1))
        .enumerate()
        .map(|(index, row)| {
            let norm = row
                .iter()
                .map(|&v| f64::from(v).powi(2))
                .sum::<f64>()
                .sqrt();
            if !(norm.is_finite() && norm > 0.0) {
                return Err(ZeroShotError::Degenerate { what, index });
            }
            Ok(row.iter().map(|&v| f64::from(v) / norm).collect())
        })
        .collect()
}

/// The scores of every image (rows of `image_embeds`, `image_width` wide)
/// against every text (rows of `text_embeds`, `text_width` wide).
pub fn scores(
    image_embeds: &[f32],
    image_width: usize,
    text_embeds: &[f32],
    text_width: usize,
    params: LogitParams,
) -> Result<Scores, ZeroShotError> {
    if image_width != text_width {
        return Err(ZeroShotError::Width {
            image: image_width,
            text: text_width,
        });
    }
    let images = normalised(image_embeds, image_width, "image")?;
    let texts = normalised(text_embeds, text_width, "text")?;
    let scale = f64::from(params.logit_scale).exp();
    let bias = f64::from(params.logit_bias);
    let mut logits = Vec::with_capacity(images.len() * texts.len());
    let mut probs = Vec::with_capacity(logits.capacity());
    for i in &images {
        for t in &texts {
            let cos: f64 = i.iter().zip(t).map(|(a, b)| a * b).sum();
            let logit = scale * cos + bias;
            logits.push(logit as f32);
            probs.push((1.0 / (1.0 + (-logit).exp())) as f32);
        }
    }
    Ok(Scores {
        images: images.len(),
        texts: texts.len(),
        logits,
        probs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_scaled_cosines_and_their_sigmoids() {
        let params = LogitParams {
            logit_scale: 10f32.ln(),
            logit_bias: -1.0,
        };
        // Image 0 along x, image 1 along y (scaled); texts x and x+y.
        let s = scores(&[2.0, 0.0, 0.0, 3.0], 2, &[1.0, 0.0, 1.0, 1.0], 2, params).unwrap();
        let c = std::f32::consts::FRAC_1_SQRT_2;
        let expected = [9.0, 10.0 * c - 1.0, -1.0, 10.0 * c - 1.0];
        for (l, e) in s.logits.iter().zip(expected) {
            assert!((l - e).abs() < 1e-5, "{l} vs {e}");
        }
        assert!((s.probs[0] - 1.0 / (1.0 + (-9.0f32).exp())).abs() < 1e-6);
        assert_eq!((s.images, s.texts), (2, 2));
        assert_eq!(
            scores(&[1.0, 0.0], 2, &[1.0], 1, params),
            Err(ZeroShotError::Width { image: 2, text: 1 })
        );
        assert_eq!(
            scores(&[0.0, 0.0], 2, &[1.0, 0.0], 2, params),
            Err(ZeroShotError::Degenerate {
                what: "image",
                index: 0
            })
        );
    }
}
