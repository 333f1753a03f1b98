//! SigLIP checkpoint import: the code-built graph equals the fixtures and
//! reads back from the fixture a package stores it as, the
//! base, large and so400m configs build at any batch with transformers'
//! parameter counts, every weight lands where the name mapping says
//! (checked element by element against the stored tensors read with the
//! `safetensors` crate), and missing, extra and mis-shaped tensors and bad
//! configs are errors that name what is wrong.

use std::path::{Path, PathBuf};

use ipu_frontend::ImportError;
use ipu_frontend::siglip::{
    ConfigError, GraphOptions, ImportConfig, PrecisionPolicy, VisionConfig, VisionParams,
    build_graph, import_checkpoint,
};
use ipu_layout::Precision;
use ipu_package::graph::{
    Graph, Op, ParseOptions, SoftmaxPrecision, parse_fixture_with, write_fixture,
};

use crate::fixture_text;

/// `fixtures/checkpoints/<name>`.
pub fn checkpoint_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/checkpoints")
        .join(name)
}

fn assert_same_graph(built: &Graph, fixture: &Graph) {
    assert_eq!(
        built.tensors().len(),
        fixture.tensors().len(),
        "tensor count"
    );
    for ((id, a), (_, b)) in built.tensors().iter().zip(fixture.tensors().iter()) {
        assert_eq!(a, b, "{id}");
    }
    assert_eq!(built.ops().len(), fixture.ops().len(), "op count");
    for ((id, a), (_, b)) in built.ops().iter().zip(fixture.ops().iter()) {
        assert_eq!(a, b, "{id}");
    }
    assert_eq!(built.repeats(), fixture.repeats());
    assert_eq!(built.name(), fixture.name());
}

fn params(
    hidden: u64,
    mlp: u64,
    heads: u32,
    layers: u32,
    image: u64,
    patch: u64,
    head: bool,
) -> VisionParams {
    VisionParams {
        hidden_size: hidden,
        intermediate_size: mlp,
        num_attention_heads: heads,
        num_hidden_layers: layers,
        image_size: image,
        patch_size: patch,
        vision_use_head: head,
        ..VisionParams::default()
    }
}

fn so400m() -> VisionConfig {
    VisionConfig::new(&params(1152, 4304, 16, 27, 384, 14, true)).expect("valid")
}

#[test]
fn code_built_so400m_graph_equals_the_default_fixture() {
    for batch in [2, 5] {
        let options = ParseOptions {
            overrides: vec![("batch".to_owned(), batch)],
        };
        let fixture = parse_fixture_with(&fixture_text("siglip-so400m-b2.json"), &options)
            .expect("fixture parses");
        let policy = PrecisionPolicy::from_graph(&fixture).expect("policy");
        let built = build_graph(
            &so400m(),
            &GraphOptions {
                name: fixture.name().to_owned(),
                batch,
                policy,
            },
        )
        .expect("builds");
        assert_same_graph(&built, &fixture);
    }
}

#[test]
fn the_head_checkpoint_builds_the_tiny_fixture_graph() {
    // The golden checkpoint with a head has the shape of tiny-2l-h64.
    let fixture = parse_fixture_with(&fixture_text("tiny-2l-h64.json"), &ParseOptions::default())
        .expect("fixture parses");
    let text =
        std::fs::read_to_string(checkpoint_dir("siglip-vision-head/config.json")).expect("config");
    let config = VisionConfig::from_json(&text).expect("config");
    let built = build_graph(
        &config,
        &GraphOptions {
            name: fixture.name().to_owned(),
            batch: 2,
            policy: PrecisionPolicy::from_graph(&fixture).expect("policy"),
        },
    )
    .expect("builds");
    assert_same_graph(&built, &fixture);
}

#[test]
fn every_code_built_graph_is_stored_as_a_fixture_that_reads_back_the_same() {
    // A package keeps a checkpoint's graph as fixture.json: any layer
    // count (one layer is a repeat of one iteration), with and without
    // the head, all-F32 (no casts) or the fixture's precisions.
    let template = parse_fixture_with(
        &fixture_text("siglip-so400m-b2.json"),
        &ParseOptions::default(),
    )
    .expect("fixture parses");
    let fixture_policy = PrecisionPolicy::from_graph(&template).expect("policy");
    for layers in [1, 2, 27] {
        for head in [true, false] {
            let config =
                VisionConfig::new(&params(64, 256, 4, layers, 16, 4, head)).expect("valid");
            for policy in [PrecisionPolicy::all_f32(), fixture_policy.clone()] {
                let graph = build_graph(
                    &config,
                    &GraphOptions {
                        name: format!("siglip-l{layers}-b2"),
                        batch: 2,
                        policy,
                    },
                )
                .expect("builds");
                let text = write_fixture(&graph).expect("writes");
                let back = parse_fixture_with(&text, &ParseOptions::default()).expect("parses");
                assert_same_graph(&back, &graph);
            }
        }
    }
}

#[test]
fn base_large_and_so400m_build_at_any_batch_with_transformers_parameter_counts() {
    // Parameter counts of transformers' SiglipVisionModel for these
    // configs (counted with transformers 5.24), with and without the head.
    let cases = [
        (params(768, 3072, 12, 12, 224, 16, true), 92_884_224, 196),
        (params(768, 3072, 12, 12, 224, 16, false), 85_797_120, 196),
        (params(1024, 4096, 16, 24, 256, 16, true), 315_956_224, 256),
        (params(1024, 4096, 16, 24, 256, 16, false), 303_361_024, 256),
        (params(1152, 4304, 16, 27, 384, 14, true), 428_225_600, 729),
        (params(1152, 4304, 16, 27, 384, 14, false), 412_987_248, 729),
    ];
    let template = parse_fixture_with(
        &fixture_text("siglip-so400m-b2.json"),
        &ParseOptions::default(),
    )
    .expect("fixture parses");
    let fixture_policy = PrecisionPolicy::from_graph(&template).expect("policy");
    for (p, count, tokens) in cases {
        let config = VisionConfig::new(&p).expect("valid");
        for batch in [1, 3] {
            for policy in [PrecisionPolicy::all_f32(), fixture_policy.clone()] {
                let graph = build_graph(
                    &config,
                    &GraphOptions {
                        name: "g".to_owned(),
                        batch,
                        policy,
                    },
                )
                .expect("builds");
                assert_eq!(graph.parameter_count(), count, "{p:?}");
                let patches = graph.tensor(graph.tensor_by_name("patches").expect("patches"));
                assert_eq!(
                    patches.extents(),
                    &[batch, tokens, 3 * p.patch_size * p.patch_size]
                );
                let outputs: Vec<_> = graph
                    .outputs()
                    .into_iter()
                    .map(|t| graph.tensor(t).name().to_owned())
                    .collect();
                let expected: &[&str] = if p.vision_use_head {
                    &["last_hidden", "pooled"]
                } else {
                    &["last_hidden"]
                };
                assert_eq!(outputs, expected);
            }
        }
    }
}

#[test]
fn the_f32_policy_has_no_casts_and_only_f32_tensors() {
    let graph = build_graph(
        &so400m(),
        &GraphOptions {
            name: "f32".to_owned(),
            batch: 1,
            policy: PrecisionPolicy::all_f32(),
        },
    )
    .expect("builds");
    assert!(
        graph
            .tensors()
            .values()
            .iter()
            .all(|t| t.precision() == Precision::F32)
    );
    for op in graph.ops().values() {
        assert!(!matches!(op, Op::CastFp8 { .. }), "{op:?}");
        if let Op::Attention { softmax, .. } = op {
            assert_eq!(*softmax, SoftmaxPrecision::F32);
        }
    }
    // Per layer: 13 ops and 25 tensors, the fixture's 17 and 29 less the
    // four casts.
    assert_eq!(graph.repeats()[0].ops_per_iteration(), 13);
    assert_eq!(graph.repeats()[0].tensors_per_iteration(), 25);
}

#[test]
fn policy_overrides_by_role_and_by_name() {
    let template = parse_fixture_with(&fixture_text("tiny-2l-h64.json"), &ParseOptions::default())
        .expect("fixture parses");
    let scale = |s: i8| Precision::F8 {
        format: ipu_layout::Fp8Format::F143,
        scale: s,
    };
    let policy = PrecisionPolicy::from_graph(&template)
        .expect("policy")
        .with_precision("enc{i}.fc1.w", scale(-3))
        .with_precision("head.fc2.w", scale(-5));
    // Seven layers, more than the template's two: layers 2..6 take their
    // roles' precisions.
    let config = VisionConfig::new(&params(64, 256, 4, 7, 16, 4, true)).expect("valid");
    let build = |policy: PrecisionPolicy| {
        build_graph(
            &config,
            &GraphOptions {
                name: "seven".to_owned(),
                batch: 1,
                policy,
            },
        )
    };
    let graph = build(policy.clone()).expect("builds");
    let precision = |name: &str| {
        graph
            .tensor(graph.tensor_by_name(name).expect(name))
            .precision()
    };
    for i in 0..7 {
        assert_eq!(precision(&format!("enc{i}.fc1.w")), scale(-3));
        assert_eq!(
            precision(&format!("enc{i}.fc2.w")),
            template
                .tensor(template.tensor_by_name("enc0.fc2.w").expect("fc2"))
                .precision()
        );
    }
    assert_eq!(precision("head.fc2.w"), scale(-5));
    assert_eq!(precision("x7"), Precision::F16);

    // One layer's own precision breaks the repeat: an error, not a panic.
    let err = build(policy.clone().with_precision("enc5.fc1.w", scale(-4))).expect_err("repeat");
    assert!(err.to_string().contains("enc5.fc1.w"), "{err}");
    // A cast given a non-FP8 precision is refused, naming the tensor.
    let err = build(policy.with_precision("enc{i}.gelu8", Precision::F16)).expect_err("cast");
    assert!(err.to_string().contains("enc0.gelu8"), "{err}");
}

#[test]
fn config_errors_say_what_is_wrong() {
    let cases = [
        (
            r#"{"model_type": "siglip_vision_model", "hidden_act": "gelu"}"#,
            "gelu",
        ),
        (
            r#"{"model_type": "siglip_vision_model", "hidden_size": 100, "num_attention_heads": 12}"#,
            "multiple",
        ),
        (
            r#"{"model_type": "clip_vision_model"}"#,
            "clip_vision_model",
        ),
        (
            r#"{"model_type": "siglip_vision_model", "num_channels": 1}"#,
            "RGB",
        ),
        (
            r#"{"model_type": "siglip_vision_model", "patch_size": 0}"#,
            "patch_size",
        ),
        (
            r#"{"model_type": "siglip_vision_model", "image_size": [224, 224]}"#,
            "sequence",
        ),
        (
            r#"{"model_type": "siglip_vision_model", "num_hidden_layers": 4000000000}"#,
            "too large",
        ),
        (r#"{"model_type": "#, "line 1"),
    ];
    for (text, needle) in cases {
        let err = VisionConfig::from_json(text).expect_err(text);
        assert!(err.to_string().contains(needle), "{text}: {err}");
    }
    assert!(matches!(
        VisionConfig::from_json(r#"{"model_type": "siglip_vision_model", "hidden_act": "gelu"}"#),
        Err(ConfigError::Activation { .. })
    ));
    // A full SiglipConfig without a vision_config is transformers' default
    // vision tower (base, patch 16, 224).
    let default = VisionConfig::from_json(r#"{"model_type": "siglip"}"#).expect("defaults");
    assert_eq!(
        default,
        VisionConfig::new(&VisionParams::default()).expect("valid")
    );
    assert_eq!(default.tokens(), 196);
    // Without a model type, a nested vision_config is still the one used.
    let nested = VisionConfig::from_json(
        r#"{"vision_config": {"hidden_size": 64, "num_attention_heads": 4}}"#,
    )
    .expect("nested");
    assert_eq!(nested.hidden(), 64);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

/// Rewrites `model.safetensors` in `dir` through `edit` on its tensors.
fn rewrite_weights(dir: &Path, edit: impl FnOnce(&mut Vec<(String, Vec<usize>, Vec<u8>)>)) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    let file = safetensors::SafeTensors::deserialize(&bytes).expect("parses");
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), safetensors::Dtype::F16);
            (name, view.shape().to_vec(), view.data().to_vec())
        })
        .collect();
    edit(&mut tensors);
    let views: Vec<_> = tensors
        .iter()
        .map(|(name, shape, data)| {
            (
                name.as_str(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F16, shape.clone(), data)
                    .expect("view"),
            )
        })
        .collect();
    std::fs::write(
        &path,
        safetensors::serialize(views, None).expect("serialise"),
    )
    .expect("write");
}

fn import(dir: &Path) -> Result<ipu_frontend::siglip::Checkpoint, ImportError> {
    import_checkpoint(
        dir,
        &ImportConfig {
            batch: 2,
            policy: PrecisionPolicy::all_f32(),
            name: None,
        },
    )
}

#[test]
fn missing_extra_and_misshaped_tensors_are_named_with_their_shapes() {
    let source = checkpoint_dir("siglip-vision-head");
    assert!(import(&source).is_ok());

    let temp = tempfile::tempdir().expect("tempdir");
    let dir = temp.path().join("ckpt");

    copy_dir(&source, &dir);
    rewrite_weights(&dir, |t| {
        t.retain(|(n, ..)| n != "encoder.layers.1.mlp.fc2.weight")
    });
    let err = import(&dir).expect_err("missing");
    assert!(
        matches!(&err, ImportError::MissingTensor { name, expected, weight }
            if name == "encoder.layers.1.mlp.fc2.weight" && expected == &[64, 256] && weight == "enc1.fc2.w"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("encoder.layers.1.mlp.fc2.weight") && text.contains("[64, 256]"));

    copy_dir(&source, &dir);
    rewrite_weights(&dir, |t| {
        t.push((
            "encoder.layers.2.mlp.fc1.weight".to_owned(),
            vec![256, 64],
            vec![0; 256 * 64 * 2],
        ));
    });
    let err = import(&dir).expect_err("extra");
    assert!(
        matches!(&err, ImportError::UnexpectedTensor { name, shape, .. }
            if name == "encoder.layers.2.mlp.fc1.weight" && shape == &[256, 64]),
        "{err:?}"
    );
    assert!(err.to_string().contains("[256, 64]"), "{err}");

    copy_dir(&source, &dir);
    rewrite_weights(&dir, |t| {
        let entry = t
            .iter_mut()
            .find(|(n, ..)| n == "encoder.layers.0.mlp.fc1.weight")
            .expect("fc1");
        entry.1 = vec![64, 256];
    });
    let err = import(&dir).expect_err("mis-shaped");
    assert!(
        matches!(&err, ImportError::Shape { name, found, expected, weight, .. }
            if name == "encoder.layers.0.mlp.fc1.weight" && found == &[64, 256]
                && expected == &[256, 64] && weight == "enc0.fc1.w"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("[64, 256]") && text.contains("[256, 64]"),
        "{text}"
    );

    // With vision_use_head = false the head's tensors are unexpected, and
    // the error says why.
    copy_dir(&source, &dir);
    let config = std::fs::read_to_string(dir.join("config.json")).expect("config");
    std::fs::write(
        dir.join("config.json"),
        config.replace("\"vision_use_head\": true", "\"vision_use_head\": false"),
    )
    .expect("write");
    let err = import(&dir).expect_err("head");
    assert!(
        matches!(
            &err,
            ImportError::UnexpectedTensor {
                head_disabled: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("vision_use_head"), "{err}");
}

#[test]
fn directory_and_index_errors() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = temp.path().join("ckpt");
    copy_dir(&checkpoint_dir("siglip-full-nohead"), &dir);
    assert!(import(&dir).is_ok(), "the text tower is ignored");

    // An index that names a file outside the directory.
    let index_path = dir.join("model.safetensors.index.json");
    let index = std::fs::read_to_string(&index_path).expect("index");
    std::fs::write(
        &index_path,
        index.replacen(
            "\"model-00001-of-00003.safetensors\"",
            "\"../model-00001-of-00003.safetensors\"",
            1,
        ),
    )
    .expect("write");
    assert!(matches!(import(&dir), Err(ImportError::ShardName { .. })));
    // An index that puts a tensor in the wrong shard.
    std::fs::write(
        &index_path,
        index.replacen(
            "\"logit_bias\": \"model-00001-of-00003.safetensors\"",
            "\"logit_bias\": \"model-00002-of-00003.safetensors\"",
            1,
        ),
    )
    .expect("write");
    assert!(matches!(
        import(&dir),
        Err(ImportError::IndexMismatch { name, .. }) if name == "logit_bias"
    ));
    // A truncated shard.
    std::fs::write(&index_path, &index).expect("write");
    let shard = dir.join("model-00002-of-00003.safetensors");
    let bytes = std::fs::read(&shard).expect("read");
    std::fs::write(&shard, &bytes[..bytes.len() - 1]).expect("write");
    assert!(matches!(import(&dir), Err(ImportError::Safetensors { .. })));
    // No weights at all.
    std::fs::remove_file(&index_path).expect("rm");
    assert!(matches!(import(&dir), Err(ImportError::NoWeights { .. })));
    // No config.
    assert!(matches!(import(temp.path()), Err(ImportError::Io { .. })));
}

/// The stored tensor `name` of a single-file or sharded checkpoint, as f32,
/// read with the `safetensors` crate alone.
fn stored(dir: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "safetensors") && !p.ends_with("golden.safetensors")
        })
        .collect();
    files.sort();
    for file in files {
        let bytes = std::fs::read(&file).expect("read");
        let st = safetensors::SafeTensors::deserialize(&bytes).expect("parses");
        if let Ok(view) = st.tensor(name) {
            let values = match view.dtype() {
                safetensors::Dtype::F32 => view
                    .data()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
                safetensors::Dtype::F16 => view
                    .data()
                    .chunks_exact(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
                other => panic!("{other}"),
            };
            return (view.shape().to_vec(), values);
        }
    }
    panic!("{name} not stored in {}", dir.display());
}

#[test]
fn every_weight_lands_where_the_mapping_says() {
    for (name, prefix) in [
        ("siglip-vision-head", ""),
        ("siglip-full-nohead", "vision_model."),
    ] {
        let dir = checkpoint_dir(name);
        let checkpoint = import(&dir).expect("imports");
        let graph = checkpoint.graph();
        let config = checkpoint.config().clone();
        let (h, m, p) = (
            config.hidden() as usize,
            config.intermediate() as usize,
            config.patch_size() as usize,
        );
        let weight = |n: &str| {
            checkpoint
                .weights()
                .get(graph.tensor_by_name(n).expect(n))
                .expect(n)
                .to_vec()
        };
        let st = |n: &str| stored(&dir, &format!("{prefix}{n}")).1;

        // Patch convolution [H, C, p, p] → embed.w [C·p·p, H].
        let conv = st("embeddings.patch_embedding.weight");
        let embed = weight("embed.w");
        for o in 0..h {
            for c in 0..3 {
                for ky in 0..p {
                    for kx in 0..p {
                        let k = (c * p + ky) * p + kx;
                        assert_eq!(embed[k * h + o], conv[((o * 3 + c) * p + ky) * p + kx]);
                    }
                }
            }
        }
        assert_eq!(weight("pos"), st("embeddings.position_embedding.weight"));
        assert_eq!(weight("post.g"), st("post_layernorm.weight"));
        for i in 0..config.layers() as usize {
            let l = |s: &str| st(&format!("encoder.layers.{i}.{s}"));
            let g = |s: &str| weight(&format!("enc{i}.{s}"));
            // q | k | v column blocks of the fused [H, 3H] weight, the
            // queries' divided by √head_dim (the attention takes them
            // scaled), each value rounded once.
            let qkv = g("qkv.w");
            let root = ((h / config.heads() as usize) as f64).sqrt();
            for (block, x) in ["q", "k", "v"].iter().enumerate() {
                let scaled = |v: f32| {
                    if block == 0 {
                        (f64::from(v) / root) as f32
                    } else {
                        v
                    }
                };
                let w = l(&format!("self_attn.{x}_proj.weight"));
                for out in 0..h {
                    for inp in 0..h {
                        assert_eq!(qkv[inp * 3 * h + block * h + out], scaled(w[out * h + inp]));
                    }
                }
                let b: Vec<f32> = l(&format!("self_attn.{x}_proj.bias"))
                    .into_iter()
                    .map(scaled)
                    .collect();
                assert_eq!(&g("qkv.b")[block * h..(block + 1) * h], b.as_slice());
            }
            let fc1 = l("mlp.fc1.weight");
            let g_fc1 = g("fc1.w");
            for out in 0..m {
                for inp in 0..h {
                    assert_eq!(g_fc1[inp * m + out], fc1[out * h + inp]);
                }
            }
            let fc2 = l("mlp.fc2.weight");
            let g_fc2 = g("fc2.w");
            for out in 0..h {
                for inp in 0..m {
                    assert_eq!(g_fc2[inp * h + out], fc2[out * m + inp]);
                }
            }
            assert_eq!(g("ln2.b"), l("layer_norm2.bias"));
            assert_eq!(g("out.b"), l("self_attn.out_proj.bias"));
        }
        if config.use_head() {
            let in_proj = st("head.attention.in_proj_weight");
            let (q, kv) = (weight("head.q.w"), weight("head.kv.w"));
            for out in 0..h {
                for inp in 0..h {
                    assert_eq!(q[inp * h + out], in_proj[out * h + inp]);
                    assert_eq!(kv[inp * 2 * h + out], in_proj[(h + out) * h + inp]);
                    assert_eq!(kv[inp * 2 * h + h + out], in_proj[(2 * h + out) * h + inp]);
                }
            }
            let bias = st("head.attention.in_proj_bias");
            assert_eq!(weight("head.q.b"), &bias[..h]);
            assert_eq!(weight("head.kv.b"), &bias[h..]);
            assert_eq!(weight("head.probe"), st("head.probe"));
        }
        assert_eq!(checkpoint.weights().len(), graph.weights().len());
    }
}
