//! `cargo xtask zero-shot --vision PKG --text PKG --image FILE...
//! --label TEXT... [--out FILE] [--truncate]`: SigLIP's zero-shot scores
//! from the two towers' packages.
//!
//! Each package runs on the tile model with the per-op check, as
//! `run-package` runs it: the vision package on the images (one per batch
//! row), the text package on the labels (one per batch row, tokenized as
//! its checkpoint's tokenizer does). The pooled outputs are the
//! embeddings; every (image, label) pair gets the logit
//! `exp(logit_scale) · cos + logit_bias` and its sigmoid
//! (`ipu_frontend::siglip::zero_shot`), with `logit_scale` and
//! `logit_bias` from the text package's `model.json` (recorded from a full
//! `SiglipModel` checkpoint). The table goes to stdout; `--out` writes
//! `logits_per_image` and `probs` `[images, labels]`, `image_embeds` and
//! `text_embeds` as F32 safetensors.
//!
//! With CLIP's packages (a `clip-vision` package and a CLIP text package,
//! both from a full `CLIPModel`) the embeddings are `image_embeds` and
//! `text_embeds`, and the scores CLIP's: `exp(logit_scale) · cos` and per
//! image their softmax over the labels (`zero_shot::clip_scores`).

use std::path::PathBuf;
use std::process::ExitCode;

use ipu_frontend::PackagedModel;
use ipu_frontend::siglip::POOLED;
use ipu_frontend::siglip::text::Truncation;
use ipu_frontend::siglip::text::{TEXT_EMBEDS, TextFamily};
use ipu_frontend::siglip::zero_shot::{clip_scores, scores};
use ipu_package::graph::{Graph, ValueSet};

use crate::run_package::{Inputs, run_checked, write_tensors};

/// Options of `zero-shot`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The vision tower's package (build-package --checkpoint DIR)
    #[arg(long, value_name = "DIR")]
    vision: PathBuf,
    /// The text tower's package (build-package --checkpoint DIR --tower text)
    #[arg(long, value_name = "DIR")]
    text: PathBuf,
    /// An image (repeatable: as many as the vision package's batch)
    #[arg(long, value_name = "FILE", required = true)]
    image: Vec<PathBuf>,
    /// A label such as "a photo of a cat" (repeatable: as many as the text
    /// package's batch)
    #[arg(long, value_name = "TEXT", required = true)]
    label: Vec<String>,
    /// Cut a label longer than the text tower's sequence instead of
    /// refusing it
    #[arg(long)]
    truncate: bool,
    /// Write the logits, probabilities and embeddings to this safetensors
    /// file
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// The embedding output `name` of a run, `[rows, width]`.
fn pooled(
    graph: &Graph,
    device: &ValueSet,
    what: &str,
    name: &str,
) -> Result<(Vec<f32>, usize), String> {
    let id = graph
        .tensor_by_name(name)
        .ok_or_else(|| format!("the {what} package's graph has no `{name}` output"))?;
    let width = graph.tensor(id).extents().last().copied().unwrap_or(1) as usize;
    let values = device
        .get(id)
        .ok_or_else(|| format!("the tile model produced no `{name}` for the {what} package"))?;
    Ok((values.to_vec(), width))
}

pub fn run(args: &Args) -> Result<ExitCode, String> {
    if let Some(out) = &args.out
        && out.is_dir()
    {
        return Err(format!(
            "--out {}: is a directory; give the safetensors file to write",
            out.display()
        ));
    }
    let truncation = if args.truncate {
        Truncation::Truncate
    } else {
        Truncation::Refuse
    };
    let (text_graph, text_device, text_model) =
        run_checked(&args.text, &Inputs::Texts(args.label.clone(), truncation))?;
    let params = text_model
        .as_ref()
        .and_then(|m| m.logits())
        .ok_or_else(|| {
            format!(
                "{}: the text package records no logit_scale and logit_bias (model.json \
                 `frontend.logits`); build it from a full SiglipModel or CLIPModel checkpoint",
                args.text.display()
            )
        })?;
    let clip = matches!(
        &text_model,
        Some(PackagedModel::SiglipText(t)) if matches!(t.config().family(), TextFamily::Clip { .. })
    );
    let (family, model, image_name, text_name) = if clip {
        (
            ipu_frontend::class_token::CLIP_FAMILY,
            "CLIP",
            "image_embeds",
            TEXT_EMBEDS,
        )
    } else {
        (ipu_frontend::siglip::FAMILY, "SigLIP", POOLED, POOLED)
    };
    let (vision_graph, vision_device, vision_model) =
        run_checked(&args.vision, &Inputs::Images(args.image.clone()))?;
    if let Some(m) = &vision_model
        && m.family() != family
    {
        return Err(format!(
            "{}: is a `{}` package; with this text package --vision takes a {model} vision package",
            args.vision.display(),
            m.family()
        ));
    }
    let (images, image_width) = pooled(&vision_graph, &vision_device, "vision", image_name)?;
    let (texts, text_width) = pooled(&text_graph, &text_device, "text", text_name)?;
    let s = if clip {
        clip_scores(&images, image_width, &texts, text_width, params.logit_scale)
    } else {
        scores(&images, image_width, &texts, text_width, params)
    }
    .map_err(|e| e.to_string())?;

    println!(
        "logit_scale={} (exp {:.4}) logit_bias={}",
        params.logit_scale,
        f64::from(params.logit_scale).exp(),
        params.logit_bias
    );
    println!(
        "{:<4} {:<32} {:<40} {:>9} {:>11}",
        "", "image", "label", "logit", "probability"
    );
    for (i, image) in args.image.iter().enumerate() {
        for (t, label) in args.label.iter().enumerate() {
            let k = i * s.texts + t;
            println!(
                "{:<4} {:<32} {:<40} {:>9.4} {:>11.4}",
                format!("{i},{t}"),
                image.display().to_string(),
                format!("{label:?}"),
                s.logits[k],
                s.probs[k]
            );
        }
    }
    if let Some(out) = &args.out {
        let pair = [s.images as u64, s.texts as u64];
        let image_shape = [s.images as u64, image_width as u64];
        let text_shape = [s.texts as u64, text_width as u64];
        write_tensors(
            out,
            &[
                ("logits_per_image", &pair, &s.logits),
                ("probs", &pair, &s.probs),
                ("image_embeds", &image_shape, &images),
                ("text_embeds", &text_shape, &texts),
            ],
        )?;
        eprintln!("scores written to {}", out.display());
    }
    Ok(ExitCode::SUCCESS)
}
