//! A SigLIP checkpoint and two PNGs in, embeddings out: the README's own
//! commands, run as written (with the sandbox's kernel cache), give an
//! `OUT.safetensors` whose `pooled` embeddings are within cosine 0.995 of
//! transformers' for both images; and wrong image counts, unreadable
//! images and files of the wrong kind are clear errors.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::{Sandbox, differences, fixture, snapshot};

/// The F32 tensors of a safetensors file (others skipped): name →
/// (shape, values).
pub(crate) fn read_f32(path: &Path) -> BTreeMap<String, (Vec<u64>, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut out = BTreeMap::new();
    for (name, info) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        if info["dtype"] != "F32" {
            continue;
        }
        let shape = info["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_u64().unwrap())
            .collect();
        let offsets = info["data_offsets"].as_array().unwrap();
        let (a, b) = (
            offsets[0].as_u64().unwrap() as usize,
            offsets[1].as_u64().unwrap() as usize,
        );
        let values = data[a..b]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        out.insert(name.clone(), (shape, values));
    }
    out
}

/// The words of a shell command line: split at spaces outside double
/// quotes, the quotes removed.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let na: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum();
    let nb: f64 = b.iter().map(|&x| f64::from(x).powi(2)).sum();
    dot / (na * nb).sqrt()
}

/// The README's checkpoint commands of the section headed `heading`
/// (`cargo xtask build-package --checkpoint ...`, `cargo xtask run-package
/// ... --image ...`, `cargo xtask zero-shot ...`, continuation lines
/// joined), as argument lists with `fixtures/` and `out/` resolved for
/// the sandbox.
fn readme_commands(sandbox: &Sandbox, heading: &str) -> Vec<Vec<String>> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README.md");
    let fixtures = fixture("");
    let out = sandbox.work();
    let section: Vec<&str> = readme
        .lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect();
    let mut joined = Vec::new();
    let mut pending = String::new();
    for line in section {
        let line = line.trim();
        match line.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(line);
                joined.push(std::mem::take(&mut pending));
            }
        }
    }
    joined
        .iter()
        .filter_map(|l| l.trim().strip_prefix("cargo xtask "))
        .filter(|l| l.contains("--checkpoint ") || l.contains("--image "))
        .map(|l| {
            words(l)
                .into_iter()
                .map(|w| {
                    if let Some(rest) = w.strip_prefix("fixtures/") {
                        fixtures.join(rest).to_string_lossy().into_owned()
                    } else if let Some(rest) = w.strip_prefix("out/") {
                        out.join(rest).to_string_lossy().into_owned()
                    } else {
                        w.to_owned()
                    }
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_readme_commands_turn_a_checkpoint_and_two_pngs_into_embeddings() {
    let sandbox = Sandbox::new();
    let commands = readme_commands(&sandbox, "## Embeddings from a SigLIP checkpoint");
    assert_eq!(
        commands.len(),
        2,
        "README checkpoint commands: {commands:?}"
    );
    let cache = sandbox.cache().to_string_lossy().into_owned();
    let mut out_file = None;
    let mut package = None;
    for command in &commands {
        let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
        if args[0] == "build-package" {
            args.extend(["--kernel-cache", &cache]);
            let at = args.iter().rposition(|a| *a == "--out").expect("--out");
            package = Some(args[at + 1].to_owned());
        } else {
            let at = args.iter().rposition(|a| *a == "--out").expect("--out");
            out_file = Some(args[at + 1].to_owned());
        }
        sandbox.xtask(&args).succeeded();
    }
    let outputs = read_f32(Path::new(&out_file.expect("a run-package command")));
    let (shape, last_hidden) = &outputs["last_hidden"];
    assert_eq!(shape, &[2, 16, 64]);
    assert!(last_hidden.iter().all(|v| v.is_finite()));
    let (shape, pooled) = &outputs["pooled"];
    assert_eq!(shape, &[2, 64]);

    // transformers' pooler_output for the same two images.
    let golden = read_f32(&fixture(
        "checkpoints/siglip-vision-head/golden.safetensors",
    ));
    let (_, expected) = &golden["pooler_output"];
    for (row, (ours, theirs)) in pooled.chunks(64).zip(expected.chunks(64)).enumerate() {
        let c = cosine(ours, theirs);
        assert!(c >= 0.995, "image {row}: cosine {c}");
    }

    // Without images the package runs on the synthetic images the seed
    // picks and is checked against the reference: seeds 7 and 8 once left
    // one element of `last_hidden` outside the graph tolerance.
    let package = package.expect("a build-package command");
    for seed in ["0", "7", "8"] {
        let run = sandbox.xtask(&["run-package", &package, "--seed", seed]);
        run.succeeded();
        assert!(
            run.stdout
                .lines()
                .any(|l| l == "result=pass" || l.starts_with("result=pass ")),
            "{}",
            run.describe()
        );
    }
}

/// The README's zero-shot commands, run as written: two builds and the
/// zero-shot run, whose probabilities are within 0.05 of transformers'
/// on the golden checkpoint (FP8 packages; docs/SIGLIP.md gives the
/// figures, and the F16 packages' 0.01 is the frontend's test).
#[test]
fn the_readme_zero_shot_commands_give_transformers_probabilities() {
    let sandbox = Sandbox::new();
    let commands = readme_commands(
        &sandbox,
        "## Zero-shot probabilities from a SigLIP checkpoint",
    );
    assert_eq!(commands.len(), 3, "README zero-shot commands: {commands:?}");
    let cache = sandbox.cache().to_string_lossy().into_owned();
    let mut scores = None;
    for command in &commands {
        let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
        if args[0] == "build-package" {
            args.extend(["--kernel-cache", &cache]);
        } else {
            assert_eq!(args[0], "zero-shot");
            let at = args.iter().rposition(|a| *a == "--out").expect("--out");
            scores = Some(args[at + 1].to_owned());
        }
        sandbox.xtask(&args).succeeded();
    }
    let scores = read_f32(Path::new(&scores.expect("a zero-shot command")));
    let (shape, probs) = &scores["probs"];
    assert_eq!(shape, &[2, 2]);
    let golden = read_f32(&fixture("checkpoints/siglip-zero-shot/golden.safetensors"));
    let (_, expected) = &golden["probs"];
    for (k, (ours, theirs)) in probs.iter().zip(expected).enumerate() {
        assert!(
            (ours - theirs).abs() <= 0.05,
            "pair {k}: {ours} vs {theirs}"
        );
    }
    assert_eq!(scores["text_embeds"].0, [2, 32]);
}

/// The golden checkpoint with its attention on the AMP and on the vector
/// unit, run on the tile model on the golden images: both within cosine
/// 0.995 of transformers' `pooler_output` for each image, and the
/// `last_hidden` cosines printed beside them (the fidelity table of
/// `docs/SIGLIP.md`).
#[test]
fn the_golden_checkpoint_keeps_its_fidelity_with_attention_on_the_amp() {
    let sandbox = Sandbox::new();
    let dir = fixture("checkpoints/siglip-vision-head");
    let images = [
        fixture("checkpoints/images/rgb-40x30.png"),
        fixture("checkpoints/images/rgba-13x11.png"),
    ];
    let golden = read_f32(&fixture(
        "checkpoints/siglip-vision-head/golden.safetensors",
    ));
    let (_, expected_pooled) = &golden["pooler_output"];
    let (_, expected_hidden) = &golden["last_hidden_state"];
    // The default precisions on both units, and FP8 values and
    // probabilities (`--precision fp8-values`) on the AMP.
    for (unit, precision) in [("amp", "fp8"), ("vector", "fp8"), ("amp", "fp8-values")] {
        let package = sandbox.out(&format!("siglip-{unit}-{precision}"));
        sandbox
            .build_checkpoint(
                &dir,
                "2",
                &package,
                &["--attention", unit, "--precision", precision],
            )
            .succeeded();
        let program = std::fs::read_to_string(package.join("program.json")).expect("program");
        assert_eq!(
            program.contains("AttentionSoftmax"),
            unit == "amp",
            "{unit}: the attention runs where asked"
        );
        let fixture = std::fs::read_to_string(package.join("fixture.json")).expect("fixture");
        assert_eq!(
            fixture.contains("\"softmax\": \"F16-FP8\""),
            precision == "fp8-values",
            "{precision}: the encoder's softmax"
        );
        let out = sandbox.out(&format!("embeddings-{unit}-{precision}.safetensors"));
        let unit = format!("{unit}, {precision}");
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
        let outputs = read_f32(&out);
        let (_, pooled) = &outputs["pooled"];
        let (_, hidden) = &outputs["last_hidden"];
        let rows = |x: &[f32], n: usize| -> Vec<f64> {
            x.chunks(n)
                .zip(expected_pooled.chunks(n))
                .map(|(a, b)| cosine(a, b))
                .collect()
        };
        let pooled_cosines = rows(pooled, 64);
        let hidden_cosine = cosine(hidden, expected_hidden);
        eprintln!(
            "attention on {unit}: pooled cosine per image {pooled_cosines:?}, last_hidden cosine {hidden_cosine}"
        );
        for (row, c) in pooled_cosines.iter().enumerate() {
            assert!(*c >= 0.995, "{unit}: image {row}: pooled cosine {c}");
        }
        assert!(
            hidden_cosine >= 0.99,
            "{unit}: last_hidden cosine {hidden_cosine}"
        );
    }
}

#[test]
fn bad_images_and_files_are_clear_errors() {
    let sandbox = Sandbox::new();
    let package = sandbox.out("siglip");
    let dir = fixture("checkpoints/siglip-vision-head");
    sandbox
        .build_checkpoint(&dir, "2", &package, &[])
        .succeeded();
    let package = package.to_string_lossy().into_owned();
    let png = fixture("checkpoints/images/rgb-40x30.png")
        .to_string_lossy()
        .into_owned();
    let config = dir.join("config.json").to_string_lossy().into_owned();
    let out = sandbox.out("o.safetensors").to_string_lossy().into_owned();
    let run = |extra: &[&str]| {
        let mut args = vec!["run-package", &package];
        args.extend_from_slice(extra);
        sandbox.xtask(&args)
    };
    run(&["--image", &png, "--out", &out]).failed_with("the graph's batch is 2");
    run(&["--image", &png, "--image", &config, "--out", &out]).failed_with("not an image");
    run(&["--image", &png, "--image", "missing.png", "--out", &out])
        .failed_with("cannot read image `missing.png`");
    run(&["--inputs", &png]).failed_with("not a valid safetensors file");
    let both = run(&["--image", &png, "--image", &png, "--inputs", &png]);
    both.failed_with("cannot be used with");
    assert_eq!(both.status.code(), Some(2), "{}", both.describe());
    assert!(!Path::new(&out).exists(), "nothing is written on an error");

    // A weight removed from the package: never a seeded stand-in.
    let weights = Path::new(&package).join("weights.safetensors");
    assert!(weights.is_file());
    std::fs::write(&weights, b"damaged").unwrap();
    run(&["--image", &png, "--image", &png, "--out", &out]).failed_with("weights.safetensors");

    // --image needs a package built from a checkpoint.
    let tiny = sandbox.good_package("tiny-2l-h64.json", "16", "tiny");
    sandbox
        .xtask(&[
            "run-package",
            &tiny.to_string_lossy(),
            "--image",
            &png,
            "--image",
            &png,
        ])
        .failed_with("--image needs a package built from a checkpoint");

    // --checkpoint with a fixture, or --strict without a checkpoint, are
    // usage errors before any work.
    let outcome = sandbox.xtask(&["build-package", "--strict", "--out", &out]);
    assert_eq!(outcome.status.code(), Some(2), "{}", outcome.describe());
}

#[test]
fn strict_refuses_a_checkpoint_that_saturates_and_a_plain_build_warns() {
    // The golden checkpoint with a processor that divides by 5e-6: pixel
    // values reach 1e5, beyond F16, so the `patches` input and its FP8 cast
    // saturate.
    let sandbox = Sandbox::new();
    let dir = sandbox.out("loud-checkpoint");
    std::fs::create_dir(&dir).unwrap();
    let golden = fixture("checkpoints/siglip-vision-head");
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(golden.join(file), dir.join(file)).unwrap();
    }
    std::fs::write(
        dir.join("preprocessor_config.json"),
        r#"{"image_mean": 0.5, "image_std": 5e-6}"#,
    )
    .unwrap();
    let out = sandbox.out("loud");
    let build = |extra: &[&str]| sandbox.build_checkpoint(&dir, "2", &out, extra);
    build(&["--strict"]).failed_with("--strict");
    assert!(!out.exists(), "--strict wrote a package");
    let plain = build(&[]);
    plain.succeeded();
    assert!(
        plain.stderr.contains("saturates beyond the threshold"),
        "{}",
        plain.describe()
    );
    // The package records the saturation.
    let model = std::fs::read_to_string(out.join("model.json")).unwrap();
    let model: serde_json::Value = serde_json::from_str(&model).unwrap();
    let report = &model["frontend"]["precision"];
    let precision = report.to_string();
    let threshold = report["calibration"]["saturation_threshold"]
        .as_f64()
        .unwrap();
    assert!(
        report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["saturated"].as_f64().unwrap() > threshold),
        "{precision}"
    );
}

#[test]
fn an_inputs_file_holds_inputs_only_and_all_of_them() {
    // A fixture package runs on seeded weights; an inputs file that also
    // carries a weight is refused rather than mixed with seeded ones, and
    // one without the input is refused by name.
    use ipu_package::graph::safetensors::write_values;
    use ipu_package::graph::{parse_fixture, values};

    let sandbox = Sandbox::new();
    let package = sandbox.good_package("tiny-2l-h64.json", "16", "tiny");
    let text = std::fs::read_to_string(fixture("tiny-2l-h64.json")).unwrap();
    let graph = parse_fixture(&text).unwrap();
    let all = values::generate(&graph, 3);
    let input = graph.inputs()[0];
    let weight = graph.weights()[0];
    let write = |name: &str, tensors: &[ipu_package::TensorId]| {
        let path = sandbox.out(name);
        std::fs::write(&path, write_values(&graph, &all, tensors).unwrap()).unwrap();
        path.to_string_lossy().into_owned()
    };
    let package = package.to_string_lossy().into_owned();
    let good = write("inputs.safetensors", &[input]);
    sandbox
        .xtask(&["run-package", &package, "--inputs", &good])
        .succeeded();
    let mixed = write("mixed.safetensors", &[input, weight]);
    sandbox
        .xtask(&["run-package", &package, "--inputs", &mixed])
        .failed_with(&format!("holds weight `{}`", graph.tensor(weight).name()));
    let none = write("none.safetensors", &[weight]);
    sandbox
        .xtask(&["run-package", &package, "--inputs", &none])
        .failed_with("holds weight");
    let empty = write("empty.safetensors", &[]);
    sandbox
        .xtask(&["run-package", &package, "--inputs", &empty])
        .failed_with("has no input `patches`");
}

#[test]
fn checkpoint_packages_are_byte_identical_whatever_the_thread_count() {
    let sandbox = Sandbox::new();
    let dir = fixture("checkpoints/siglip-vision-head");
    let mut built = Vec::new();
    for jobs in ["1", "2"] {
        let out = sandbox.out(&format!("jobs{jobs}"));
        sandbox
            .build_checkpoint(&dir, "2", &out, &["--jobs", jobs])
            .succeeded();
        built.push(snapshot(&out));
    }
    assert!(built[0].contains_key("weights.safetensors"));
    assert!(
        built[0] == built[1],
        "{:?}",
        differences("--jobs 1", &built[0], "--jobs 2", &built[1])
    );
}

/// `--min-cosine` takes a cosine in [0, 1]; anything else is clap's
/// usage error naming the flag, before any work and with nothing
/// written.
#[test]
fn a_fidelity_target_outside_zero_to_one_is_refused() {
    let sandbox = Sandbox::new();
    let dir = fixture("checkpoints/vit-tiny")
        .to_string_lossy()
        .into_owned();
    for (value, needle) in [
        ("1.5", "not a cosine in [0, 1]"),
        ("-0.1", "not a cosine in [0, 1]"),
        ("NaN", "not a cosine in [0, 1]"),
        ("high", "is not a number"),
    ] {
        let out = sandbox.out(value);
        let flag = format!("--min-cosine={value}");
        let outcome = sandbox.xtask(&[
            "build-package",
            "--checkpoint",
            &dir,
            &flag,
            "--out",
            &out.to_string_lossy(),
        ]);
        assert_eq!(outcome.status.code(), Some(2), "{}", outcome.describe());
        assert!(
            outcome.stderr.contains("--min-cosine") && outcome.stderr.contains(needle),
            "{}",
            outcome.describe()
        );
        assert!(!out.exists(), "{value}: {} was written", out.display());
    }
}

/// `--precisions PACKAGE` builds a checkpoint with an earlier package's
/// precisions instead of calibrating: the same package again, byte for
/// byte, at the same batch, and a package at another batch that runs.
/// A file that is not a package's `model.json` is a clear error, nothing
/// written.
#[test]
fn precisions_from_an_earlier_package_rebuild_it_without_calibrating() {
    let sandbox = Sandbox::new();
    let dir = fixture("checkpoints/vit-tiny");
    let build = |out: &Path, batch: &str, extra: &[&str]| {
        sandbox.build_checkpoint_logging(&dir, batch, out, extra, Some("info"))
    };
    let first = sandbox.out("first");
    let outcome = build(&first, "2", &[]);
    outcome.succeeded();
    assert!(
        outcome.stderr.contains("calibrated FP8 scales"),
        "{}",
        outcome.describe()
    );
    let first_path = first.to_string_lossy().into_owned();
    let again = sandbox.out("again");
    let outcome = build(&again, "2", &["--precisions", &first_path]);
    outcome.succeeded();
    assert!(
        !outcome.stderr.contains("calibrated FP8 scales")
            && outcome
                .stderr
                .contains("precisions taken from an earlier package"),
        "{}",
        outcome.describe()
    );
    assert_eq!(snapshot(&first), snapshot(&again));
    let larger = sandbox.out("larger");
    build(&larger, "3", &["--precisions", &first_path]).succeeded();
    let png = fixture("checkpoints/images/rgb-40x30.png")
        .to_string_lossy()
        .into_owned();
    let written = sandbox
        .out("larger.safetensors")
        .to_string_lossy()
        .into_owned();
    sandbox
        .xtask(&[
            "run-package",
            &larger.to_string_lossy(),
            "--image",
            &png,
            "--image",
            &png,
            "--image",
            &png,
            "--out",
            &written,
        ])
        .succeeded();
    // Not a package's model.json: the fixture's config.json.
    let config = dir.join("config.json").to_string_lossy().into_owned();
    let bad = sandbox.out("bad");
    let outcome = build(&bad, "2", &["--precisions", &config]);
    assert_ne!(outcome.status.code(), Some(0), "{}", outcome.describe());
    assert!(
        outcome.stderr.contains("--precisions") && outcome.stderr.contains("config.json"),
        "{}",
        outcome.describe()
    );
    assert!(!bad.exists());
}
