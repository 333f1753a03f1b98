//! SigLIP's zero-shot scores: for every (image, text) pair, the logit
//! `exp(logit_scale) · cos(image, text) + logit_bias` and its sigmoid, the
//! probability that the text describes the image (`SiglipModel.forward`'s
//! `logits_per_image`; SigLIP scores each pair on its own, so the
//! probabilities of one image need not sum to one).
//!
//! The embeddings are the vision tower's `pooled` output and the text
//! tower's `pooled` output, each L2-normalised; the arithmetic is in f64.
//!
//! CLIP's scores ([`clip_scores`], `CLIPModel.forward`'s
//! `logits_per_image` and their softmax): `exp(logit_scale) · cos` of the
//! projected embeddings (`image_embeds`, `text_embeds`), no bias, and per
//! image a softmax over the texts, so one image's probabilities sum to
//! one.

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
    let (images, texts) = both_normalised(image_embeds, image_width, text_embeds, text_width)?;
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

/// Unit rows of embeddings.
type UnitRows = Vec<Vec<f64>>;

/// The unit rows of both towers' embeddings, which must be equally wide.
fn both_normalised(
    image_embeds: &[f32],
    image_width: usize,
    text_embeds: &[f32],
    text_width: usize,
) -> Result<(UnitRows, UnitRows), ZeroShotError> {
    if image_width != text_width {
        return Err(ZeroShotError::Width {
            image: image_width,
            text: text_width,
        });
    }
    Ok((
        normalised(image_embeds, image_width, "image")?,
        normalised(text_embeds, text_width, "text")?,
    ))
}

/// CLIP's scores of every image against every text (module header):
/// `exp(logit_scale) · cos` and, per image, their softmax over the texts.
pub fn clip_scores(
    image_embeds: &[f32],
    image_width: usize,
    text_embeds: &[f32],
    text_width: usize,
    logit_scale: f32,
) -> Result<Scores, ZeroShotError> {
    let (images, texts) = both_normalised(image_embeds, image_width, text_embeds, text_width)?;
    let scale = f64::from(logit_scale).exp();
    let mut logits = Vec::with_capacity(images.len() * texts.len());
    let mut probs = Vec::with_capacity(logits.capacity());
    for i in &images {
        let row: Vec<f64> = texts
            .iter()
            .map(|t| scale * i.iter().zip(t).map(|(a, b)| a * b).sum::<f64>())
            .collect();
        // The softmax from the row's largest logit, so no term overflows.
        let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = row.iter().map(|l| (l - top).exp()).sum();
        for &l in &row {
            logits.push(l as f32);
            probs.push(((l - top).exp() / total) as f32);
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
    fn clip_scores_are_scaled_cosines_and_their_softmax_over_texts() {
        let s = clip_scores(
            &[2.0, 0.0, 0.0, 3.0],
            2,
            &[1.0, 0.0, 1.0, 1.0],
            2,
            10f32.ln(),
        )
        .unwrap();
        let c = 10.0 * std::f32::consts::FRAC_1_SQRT_2;
        for (l, e) in s.logits.iter().zip([10.0, c, 0.0, c]) {
            assert!((l - e).abs() < 1e-5, "{l} vs {e}");
        }
        let p0 = 1.0 / (1.0 + (c - 10.0f32).exp());
        assert!((s.probs[0] - p0).abs() < 1e-6);
        for row in s.probs.chunks(2) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        }
    }

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
