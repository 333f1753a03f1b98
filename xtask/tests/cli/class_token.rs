//! ViT, CLIP vision and DINOv2 checkpoints through the two commands:
//! `build-package --checkpoint` picks the importer by `config.json`'s
//! `model_type`, and `run-package` turns the two golden images into each
//! family's outputs, shaped as transformers' are and, run on the tile
//! model in FP8 with the default fidelity target, within cosine 0.995 of
//! them per image (the target; `last_hidden` over the whole image); an
//! unsupported
//! `model_type` is refused before any work, naming what is read. CLIP's
//! text tower (`--tower text` of a full CLIPModel checkpoint) turns texts
//! into `last_hidden`, `pooled` and `text_embeds` within cosine 0.98 of
//! transformers' per text.

use crate::checkpoint::{cosine, read_f32};
use crate::support::{Sandbox, fixture};

/// A golden checkpoint's graph outputs with their shapes at batch 2.
type Outputs = Vec<(&'static str, Vec<u64>)>;

#[test]
fn vit_and_clip_checkpoints_build_and_run_on_images() {
    build_and_run(&[
        (
            "vit-tiny",
            "vit",
            vec![("last_hidden", vec![2, 17, 32]), ("pooled", vec![2, 32])],
        ),
        (
            "clip-vision-tiny",
            "clip-vision",
            vec![
                ("last_hidden", vec![2, 17, 32]),
                ("pooled", vec![2, 32]),
                ("image_embeds", vec![2, 16]),
            ],
        ),
    ]);
}

#[test]
fn a_dinov2_checkpoint_builds_and_runs_on_images() {
    // 37 tokens: the class token and the 6x6 patches of the 24x24 crop.
    build_and_run(&[(
        "dinov2-tiny",
        "dinov2",
        vec![("last_hidden", vec![2, 37, 32]), ("pooled", vec![2, 32])],
    )]);
}

/// Builds each golden checkpoint at batch 2 on 16 tiles, checks its
/// `model.json` family, runs it on the two images and compares its
/// outputs with transformers' (module header).
fn build_and_run(checkpoints: &[(&str, &str, Outputs)]) {
    let sandbox = Sandbox::new();
    let images = [
        fixture("checkpoints/images/rgb-40x30.png"),
        fixture("checkpoints/images/rgba-13x11.png"),
    ];
    for (name, family, outputs) in checkpoints {
        let package = sandbox.out(name);
        sandbox
            .build_checkpoint(&fixture(&format!("checkpoints/{name}")), "2", &package, &[])
            .succeeded();
        let model: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(package.join("model.json")).expect("model.json"),
        )
        .expect("JSON");
        assert_eq!(model["family"], *family, "{name}");
        let out = sandbox.out(&format!("{name}.safetensors"));
        sandbox
            .xtask(&[
                "run-package",
                &package.to_string_lossy(),
                "--image",
                &images[0].to_string_lossy(),
                "--image",
                &images[1].to_string_lossy(),
                "--out",
                &out.to_string_lossy(),
            ])
            .succeeded();
        let written = read_f32(&out);
        let golden = read_f32(&fixture(&format!("checkpoints/{name}/golden.safetensors")));
        for (output, shape) in outputs {
            let (got, values) = &written[*output];
            assert_eq!(got, shape, "{name} {output}");
            // The tile model's FP8 run against transformers, per image.
            let theirs = match *output {
                "last_hidden" => "last_hidden_state",
                "pooled" => "pooler_output",
                other => other,
            };
            let (_, expected) = &golden[theirs];
            let width = values.len() / 2;
            for (image, (a, b)) in values.chunks(width).zip(expected.chunks(width)).enumerate() {
                let c = cosine(a, b);
                eprintln!("{name} {output} image {image}: cosine {c:.6} on the tile model");
                assert!(c >= 0.995, "{name} {output} image {image}: cosine {c}");
            }
        }
    }
}

#[test]
fn clips_text_tower_builds_and_runs_on_texts() {
    let sandbox = Sandbox::new();
    let dir = fixture("checkpoints/clip-text-tiny");
    let golden_path = dir.join("golden.safetensors");
    // The texts are in the golden file's metadata: its JSON header
    // follows the header's length (8 bytes, little-endian).
    let bytes = std::fs::read(&golden_path).expect("golden");
    let length = u64::from_le_bytes(bytes[..8].try_into().expect("length")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + length]).expect("header");
    let texts: Vec<String> = serde_json::from_str(
        header["__metadata__"]["texts"]
            .as_str()
            .expect("texts metadata"),
    )
    .expect("texts");
    let package = sandbox.out("clip-text");
    sandbox
        .build_checkpoint(
            &dir,
            &texts.len().to_string(),
            &package,
            &["--tower", "text"],
        )
        .succeeded();
    // The package names its family as CLIP's text tower.
    let model: serde_json::Value =
        serde_json::from_slice(&std::fs::read(package.join("model.json")).expect("model.json"))
            .expect("model.json is JSON");
    assert_eq!(model["family"], "clip-text", "{model}");
    let out = sandbox.out("clip-text.safetensors");
    let mut args = vec![
        "run-package".to_owned(),
        package.to_string_lossy().into_owned(),
        "--out".to_owned(),
        out.to_string_lossy().into_owned(),
    ];
    for t in &texts {
        args.extend(["--text".to_owned(), t.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    sandbox.xtask(&args).succeeded();
    let written = read_f32(&out);
    let golden = read_f32(&golden_path);
    let n = texts.len() as u64;
    for (output, theirs, shape) in [
        ("last_hidden", "last_hidden_state", vec![n, 16, 32]),
        ("pooled", "pooler_output", vec![n, 32]),
        ("text_embeds", "text_embeds", vec![n, 16]),
    ] {
        let (got, values) = &written[output];
        assert_eq!(got, &shape, "{output}");
        let (_, expected) = &golden[theirs];
        let width = values.len() / texts.len();
        for (text, (a, b)) in values.chunks(width).zip(expected.chunks(width)).enumerate() {
            let c = cosine(a, b);
            eprintln!("clip-text-tiny {output} text {text}: cosine {c:.6} on the tile model");
            assert!(c >= 0.98, "{output} text {text}: cosine {c}");
        }
    }

    // The vision half of the same CLIPModel, and CLIP's zero-shot scores
    // of the two towers' packages against transformers'.
    let vision = sandbox.out("clip-vision");
    sandbox
        .build_checkpoint(&dir, "2", &vision, &[])
        .succeeded();
    let scores = sandbox.out("clip-scores.safetensors");
    let mut args = vec![
        "zero-shot".to_owned(),
        "--vision".to_owned(),
        vision.to_string_lossy().into_owned(),
        "--text".to_owned(),
        package.to_string_lossy().into_owned(),
        "--out".to_owned(),
        scores.to_string_lossy().into_owned(),
    ];
    for image in ["rgb-40x30.png", "rgba-13x11.png"] {
        args.extend([
            "--image".to_owned(),
            fixture(&format!("checkpoints/images/{image}"))
                .to_string_lossy()
                .into_owned(),
        ]);
    }
    for t in &texts {
        args.extend(["--label".to_owned(), t.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    sandbox.xtask(&args).succeeded();
    let written = read_f32(&scores);
    let (shape, probs) = &written["probs"];
    assert_eq!(shape, &[2, n]);
    let (_, expected) = &golden["probs"];
    for (k, (p, e)) in probs.iter().zip(expected).enumerate() {
        eprintln!("clip-text-tiny zero-shot pair {k}: probability {p:.4} (transformers {e:.4})");
        assert!((p - e).abs() <= 0.05, "pair {k}: {p} vs {e}");
    }
    for row in probs.chunks(texts.len()) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{row:?}");
    }
}

#[test]
fn an_unsupported_model_type_is_refused_naming_the_supported_ones() {
    let sandbox = Sandbox::new();
    let dir = sandbox.out("swin");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("config.json"), r#"{"model_type": "swin"}"#).expect("config");
    let outcome = sandbox.xtask(&[
        "build-package",
        "--checkpoint",
        &dir.to_string_lossy(),
        "--out",
        &sandbox.out("never").to_string_lossy(),
    ]);
    outcome.failed_with("model_type `swin` is not supported");
    for supported in ["vit", "clip_vision_model", "siglip", "dinov2"] {
        assert!(outcome.stderr.contains(supported), "{}", outcome.describe());
    }
    assert!(!sandbox.out("never").exists());
}
