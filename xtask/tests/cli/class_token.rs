//! ViT, CLIP vision and DINOv2 checkpoints through the two commands:
//! `build-package --checkpoint` picks the importer by `config.json`'s
//! `model_type`, and `run-package` turns the two golden images into each
//! family's outputs, shaped as transformers' are and, run on the tile
//! model in FP8, within cosine 0.98 of them per image; an unsupported
//! `model_type` is refused before any work, naming what is read.

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
            .xtask(&[
                "build-package",
                "--checkpoint",
                &fixture(&format!("checkpoints/{name}")).to_string_lossy(),
                "--batch",
                "2",
                "--tiles",
                "16",
                "--out",
                &package.to_string_lossy(),
                "--kernel-cache",
                &sandbox.cache().to_string_lossy(),
            ])
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
                assert!(c >= 0.98, "{name} {output} image {image}: cosine {c}");
            }
        }
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
