//! ViT and CLIP vision checkpoints (`ipu_frontend::class_token`): config
//! errors that name the field, the name mapping element by element
//! (with the class token folded into the position table), preprocessing
//! against transformers' pixel values bit for bit, the F32 graph against
//! transformers' outputs, the FP8 build's pooled cosine, and the package
//! description read back.
//!
//! The golden checkpoints `vit-tiny` and `clip-vision-tiny` are made by
//! `fixtures/checkpoints/make_golden_class_token.py`. The fidelity test
//! prints the table `docs/MODELS.md` quotes
//! (`cargo test -p ipu-frontend --test frontend class_token -- --nocapture`).

use std::path::{Path, PathBuf};

use ipu_frontend::class_token::{
    ClassTokenCheckpoint, ClassTokenConfig, Family, IMAGE_EMBEDS, LAST_HIDDEN, POOLED,
    PackagedClassToken, build_graph, import_class_token, template,
};
use ipu_frontend::processor::{PatchGrid, patchify};
use ipu_frontend::siglip::{
    CalibrationInputs, CalibrationOptions, ConfigError, GraphOptions, ImportConfig,
    PrecisionPolicy, calibrate_inputs,
};
use ipu_frontend::{CheckpointKind, ImportError, PackagedModel, checkpoint_kind};
use ipu_package::graph::{Activation, ValueSet, parse_fixture};
use ipu_sim::reference::{Tolerance, compare};

use crate::checkpoint::checkpoint_dir;
use crate::fixture_text;

const FAMILIES: [(&str, Family); 2] = [
    ("vit-tiny", Family::Vit),
    ("clip-vision-tiny", Family::Clip),
];

pub(crate) fn images() -> [PathBuf; 2] {
    [
        checkpoint_dir("images/rgb-40x30.png"),
        checkpoint_dir("images/rgba-13x11.png"),
    ]
}

/// A golden F32 tensor with its shape.
pub(crate) fn golden(dir: &Path, name: &str) -> Option<(Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(dir.join("golden.safetensors")).expect("golden file");
    let file = safetensors::SafeTensors::deserialize(&bytes).expect("parses");
    let view = file.tensor(name).ok()?;
    assert_eq!(view.dtype(), safetensors::Dtype::F32);
    let values = view
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Some((view.shape().to_vec(), values))
}

/// A stored checkpoint tensor as f32 (the golden checkpoints are F32).
pub(crate) fn stored(dir: &Path, name: &str) -> Vec<f32> {
    let bytes = std::fs::read(dir.join("model.safetensors")).expect("weights");
    let file = safetensors::SafeTensors::deserialize(&bytes).expect("parses");
    let view = file
        .tensor(name)
        .unwrap_or_else(|_| panic!("{name} stored"));
    view.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub(crate) fn import(name: &str, family: Family, policy: PrecisionPolicy) -> ClassTokenCheckpoint {
    import_class_token(
        &checkpoint_dir(name),
        family,
        &ImportConfig {
            batch: 2,
            policy,
            name: None,
        },
    )
    .expect("imports")
}

fn config(text: &str, family: Family) -> Result<ClassTokenConfig, ConfigError> {
    ClassTokenConfig::from_json(text, family)
}

#[test]
fn configs_read_with_their_families_defaults_and_heads() {
    let vit = config(r#"{"model_type": "vit"}"#, Family::Vit).expect("valid");
    assert_eq!(
        (vit.hidden(), vit.patch_size(), vit.layers()),
        (768, 16, 12)
    );
    assert_eq!(vit.tokens(), 197);
    assert_eq!(vit.layer_norm_eps(), 1e-12);
    assert_eq!(vit.activation(), Activation::GeluErf);
    assert_eq!(vit.pooler(), Some(768));
    let clip = config(r#"{"model_type": "clip_vision_model"}"#, Family::Clip).expect("valid");
    assert_eq!((clip.patch_size(), clip.tokens()), (32, 50));
    assert_eq!(clip.activation(), Activation::QuickGelu);
    assert_eq!(clip.projection(), None);
    // A full CLIP config: the vision config, the top level's projection.
    let full = config(
        r#"{"model_type": "clip", "projection_dim": 768,
            "vision_config": {"hidden_size": 1024, "patch_size": 14, "image_size": 336,
                              "num_hidden_layers": 24, "num_attention_heads": 16,
                              "intermediate_size": 4096, "projection_dim": 1}}"#,
        Family::Clip,
    )
    .expect("valid");
    assert_eq!(
        (full.hidden(), full.tokens(), full.projection()),
        (1024, 577, Some(768))
    );
    // The description's form reads back to the same config.
    for c in [vit, clip, full] {
        assert_eq!(
            config(&c.to_json().to_string(), c.family()).expect("reads"),
            c
        );
    }
}

#[test]
fn real_configs_build_with_transformers_parameter_counts() {
    // transformers' counts (ViTModel with its pooler; CLIP ViT-L/14-336's
    // CLIPVisionModelWithProjection); the graph folds the class token (and
    // ViT's convolution bias) into the position table, `H` fewer each.
    for (name, family, transformers, folded) in [
        ("vit-base-patch16-224", Family::Vit, 86_389_248u64, 2 * 768),
        (
            "clip-vit-large-patch14-336",
            Family::Clip,
            304_293_888,
            1024,
        ),
    ] {
        let text = std::fs::read_to_string(checkpoint_dir(name).join("config.json")).unwrap();
        let config = ClassTokenConfig::from_json(&text, family).expect("valid");
        for batch in [1, 4] {
            let graph = build_graph(
                &config,
                &GraphOptions {
                    name: name.into(),
                    batch,
                    policy: PrecisionPolicy::all_f32(),
                },
            )
            .expect("builds");
            assert_eq!(graph.parameter_count(), transformers - folded, "{name}");
        }
    }
}

#[test]
fn config_errors_name_the_field_and_the_supported_types() {
    type Expect = fn(&ConfigError) -> bool;
    let cases: [(&str, Family, Expect); 8] = [
        (
            r#"{"model_type": "vit", "hidden_size": "big"}"#,
            Family::Vit,
            |e| {
                matches!(
                    e,
                    ConfigError::Field {
                        field: "hidden_size",
                        ..
                    }
                )
            },
        ),
        (
            r#"{"model_type": "vit", "qkv_bias": false}"#,
            Family::Vit,
            |e| {
                matches!(
                    e,
                    ConfigError::Field {
                        field: "qkv_bias",
                        ..
                    }
                )
            },
        ),
        (
            r#"{"model_type": "vit", "pooler_act": "relu"}"#,
            Family::Vit,
            |e| {
                matches!(
                    e,
                    ConfigError::Field {
                        field: "pooler_act",
                        ..
                    }
                )
            },
        ),
        (
            r#"{"model_type": "vit", "hidden_act": "relu"}"#,
            Family::Vit,
            |e| matches!(e, ConfigError::Activation { .. }),
        ),
        (
            r#"{"model_type": "vit", "num_attention_heads": 0}"#,
            Family::Vit,
            |e| {
                matches!(
                    e,
                    ConfigError::Zero {
                        field: "num_attention_heads"
                    }
                )
            },
        ),
        (
            r#"{"model_type": "clip", "vision_config": 3}"#,
            Family::Clip,
            |e| {
                matches!(
                    e,
                    ConfigError::Field {
                        field: "vision_config",
                        ..
                    }
                )
            },
        ),
        (r#"{"model_type": "clip_text_model"}"#, Family::Clip, |e| {
            matches!(e, ConfigError::MissingTower { .. })
        }),
        (r#"{"model_type": "swin"}"#, Family::Vit, |e| {
            matches!(e, ConfigError::ModelType { .. })
        }),
    ];
    for (text, family, expected) in cases {
        let err = config(text, family).expect_err(text);
        assert!(expected(&err), "{text}: {err:?}");
        assert!(!err.to_string().is_empty());
    }
    let err = config(
        r#"{"model_type": "vit", "hidden_size": "big"}"#,
        Family::Vit,
    )
    .unwrap_err();
    assert!(err.to_string().contains("hidden_size"), "{err}");

    // The dispatch names the file and every supported model type.
    let temp = tempfile::tempdir().expect("tempdir");
    std::fs::write(temp.path().join("config.json"), r#"{"model_type": "swin"}"#).unwrap();
    let err = checkpoint_kind(temp.path()).expect_err("unsupported");
    let message = err.to_string();
    assert!(matches!(err, ImportError::Config { .. }), "{err:?}");
    for name in [
        "config.json",
        "swin",
        "dinov2",
        "vit",
        "clip_vision_model",
        "siglip",
    ] {
        assert!(message.contains(name), "{message}");
    }
    for (name, family) in FAMILIES {
        assert_eq!(
            checkpoint_kind(&checkpoint_dir(name)).expect("reads"),
            CheckpointKind::ClassToken(family)
        );
    }
    assert_eq!(
        checkpoint_kind(&checkpoint_dir("siglip-vision-head")).expect("reads"),
        CheckpointKind::Siglip
    );
}

/// `[rows, cols]` row-major transposed.
pub(crate) fn transposed(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = data[r * cols + c];
        }
    }
    out
}

#[test]
fn every_weight_lands_where_the_mapping_says() {
    for (name, family) in FAMILIES {
        let dir = checkpoint_dir(name);
        let checkpoint = import(name, family, PrecisionPolicy::all_f32());
        let config = checkpoint.config();
        let graph = checkpoint.graph();
        let weight = |n: &str| {
            checkpoint
                .weights()
                .get(graph.tensor_by_name(n).expect(n))
                .expect(n)
                .to_vec()
        };
        let (h, m) = (config.hidden() as usize, config.intermediate() as usize);
        let (pre, conv, pos, class, bias) = match family {
            Family::Vit | Family::Dinov2 => (
                "",
                "embeddings.patch_embeddings.projection.weight",
                "embeddings.position_embeddings",
                "embeddings.cls_token",
                Some("embeddings.patch_embeddings.projection.bias"),
            ),
            Family::Clip => (
                "vision_model.",
                "embeddings.patch_embedding.weight",
                "embeddings.position_embedding.weight",
                "embeddings.class_embedding",
                None,
            ),
        };
        // The patch embedding: [H, 3·p²] transposed, zero rows padding it.
        let p = config.patch_dim() as usize;
        let mut expected = transposed(&stored(&dir, &format!("{pre}{conv}")), h, p);
        expected.resize(config.patch_width() as usize * h, 0.0);
        assert_eq!(weight("embed.w"), expected, "{name} embed.w");
        // The position table: class token on row 0, the bias on the rest,
        // each one f32 addition.
        let table = stored(&dir, &format!("{pre}{pos}"));
        let cls = stored(&dir, &format!("{pre}{class}"));
        let conv_bias = bias.map(|b| stored(&dir, &format!("{pre}{b}")));
        let folded = weight("pos");
        assert_eq!(folded.len(), config.tokens() as usize * h);
        for (i, (&got, &p)) in folded.iter().zip(&table).enumerate() {
            let want = if i < h {
                p + cls[i]
            } else {
                p + conv_bias.as_ref().map_or(0.0, |b| b[i % h])
            };
            assert_eq!(got.to_bits(), want.to_bits(), "{name} pos[{i}]");
        }
        // The attention projections of layer 1, concatenated.
        let qkv = weight("enc1.qkv.w");
        let parts: Vec<String> = match family {
            Family::Vit | Family::Dinov2 => ["query", "key", "value"]
                .iter()
                .map(|x| format!("encoder.layer.1.attention.attention.{x}.weight"))
                .collect(),
            Family::Clip => ["q", "k", "v"]
                .iter()
                .map(|x| format!("vision_model.encoder.layers.1.self_attn.{x}_proj.weight"))
                .collect(),
        };
        // The queries' rows divided by √head_dim (the attention takes them
        // scaled), each value rounded once.
        let root = ((h / config.heads() as usize) as f64).sqrt();
        let stacked: Vec<f32> = parts
            .iter()
            .enumerate()
            .flat_map(|(j, n)| {
                stored(&dir, n).into_iter().map(move |v| {
                    if j == 0 {
                        (f64::from(v) / root) as f32
                    } else {
                        v
                    }
                })
            })
            .collect();
        assert_eq!(qkv, transposed(&stacked, 3 * h, h), "{name} qkv");
        let fc2 = match family {
            Family::Vit => "encoder.layer.0.output.dense.weight",
            Family::Clip => "vision_model.encoder.layers.0.mlp.fc2.weight",
            Family::Dinov2 => unreachable!("dinov2.rs checks DINOv2's scaled GEMMs"),
        };
        assert_eq!(weight("enc0.fc2.w"), transposed(&stored(&dir, fc2), h, m));
        match family {
            Family::Vit => {
                assert_eq!(weight("post.g"), stored(&dir, "layernorm.weight"));
                assert_eq!(
                    weight("pool.w"),
                    transposed(&stored(&dir, "pooler.dense.weight"), h, h)
                );
                assert_eq!(weight("pool.b"), stored(&dir, "pooler.dense.bias"));
            }
            Family::Clip => {
                assert_eq!(
                    weight("pre.g"),
                    stored(&dir, "vision_model.pre_layrnorm.weight")
                );
                assert_eq!(
                    weight("post.b"),
                    stored(&dir, "vision_model.post_layernorm.bias")
                );
                let d = config.projection().expect("projection") as usize;
                assert_eq!(
                    weight("proj.w"),
                    transposed(&stored(&dir, "visual_projection.weight"), d, h)
                );
            }
            Family::Dinov2 => unreachable!("dinov2.rs checks DINOv2's mapping"),
        }
        assert_eq!(checkpoint.weights().len(), graph.weights().len());
    }
}

/// A copy of golden checkpoint `name` whose weights are `edit`ed.
fn edited(
    name: &str,
    edit: impl FnOnce(&mut Vec<(String, Vec<usize>, Vec<u8>)>),
) -> tempfile::TempDir {
    let temp = tempfile::tempdir().expect("tempdir");
    for file in ["config.json", "preprocessor_config.json"] {
        std::fs::copy(checkpoint_dir(name).join(file), temp.path().join(file)).expect("copy");
    }
    let bytes = std::fs::read(checkpoint_dir(name).join("model.safetensors")).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parses");
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.shape().to_vec(), v.data().to_vec()))
        .collect();
    edit(&mut tensors);
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, s, d)| {
            let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d)
                .expect("view");
            (n.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &temp.path().join("model.safetensors"))
        .expect("write");
    temp
}

#[test]
fn missing_extra_and_misshaped_tensors_are_named() {
    let options = ImportConfig {
        batch: 1,
        policy: PrecisionPolicy::all_f32(),
        name: None,
    };
    let missing = edited("clip-vision-tiny", |t| {
        t.retain(|(n, _, _)| n != "vision_model.embeddings.class_embedding")
    });
    match import_class_token(missing.path(), Family::Clip, &options) {
        Err(ImportError::MissingTensor { name, weight, .. }) => {
            assert_eq!(name, "vision_model.embeddings.class_embedding");
            assert_eq!(weight, "pos");
        }
        other => panic!("{other:?}"),
    }
    let extra = edited("vit-tiny", |t| {
        t.push((
            "encoder.layer.9.output.dense.bias".into(),
            vec![1],
            vec![0; 4],
        ))
    });
    let err = import_class_token(extra.path(), Family::Vit, &options).expect_err("extra");
    assert!(
        matches!(&err, ImportError::UnexpectedTensor { tower: "ViT", .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("encoder.layer.9.output.dense.bias"),
        "{err}"
    );
    let shape = edited("vit-tiny", |t| {
        for (n, s, d) in t.iter_mut() {
            if n == "embeddings.cls_token" {
                *s = vec![1, 32];
                d.truncate(32 * 4);
            }
        }
    });
    match import_class_token(shape.path(), Family::Vit, &options) {
        Err(ImportError::Shape { name, .. }) => assert_eq!(name, "embeddings.cls_token"),
        other => panic!("{other:?}"),
    }
    // Without the pooler's tensors the graph has no pooled output, and a
    // task model's classifier is ignored.
    let headless = edited("vit-tiny", |t| {
        t.retain(|(n, _, _)| !n.starts_with("pooler."));
        t.push(("classifier.weight".into(), vec![2, 32], vec![0; 256]));
    });
    let checkpoint = import_class_token(headless.path(), Family::Vit, &options).expect("imports");
    assert!(checkpoint.graph().tensor_by_name(POOLED).is_none());
    assert!(checkpoint.graph().tensor_by_name(LAST_HIDDEN).is_some());
    // A task model's checkpoint: the tower under `vit.`, the classifier
    // beside it; the same weights as the plain model's.
    let task = edited("vit-tiny", |t| {
        for (n, _, _) in t.iter_mut() {
            *n = format!("vit.{n}");
        }
        t.push(("classifier.bias".into(), vec![2], vec![0; 8]));
    });
    let prefixed = import_class_token(task.path(), Family::Vit, &options).expect("imports");
    let plain = import_class_token(&checkpoint_dir("vit-tiny"), Family::Vit, &options).unwrap();
    assert_eq!(prefixed.weights(), plain.weights());
}

/// Asserts that `checkpoint`'s preprocessing of the two golden images
/// equals transformers' pixel values (`[2, 3, side, side]`) bit for bit,
/// and returns those values.
pub(crate) fn assert_pixel_values_equal_golden(
    name: &str,
    checkpoint: &ClassTokenCheckpoint,
    side: usize,
) -> Vec<f32> {
    let (shape, expected) = golden(&checkpoint_dir(name), "pixel_values").expect("pixel values");
    assert_eq!(shape, [2, 3, side, side], "{name}");
    let mut got = Vec::new();
    for image in images() {
        got.extend(checkpoint.processor().pixel_values(&image).expect("image"));
    }
    let differing = got
        .iter()
        .zip(&expected)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(differing, 0, "{name}: {differing} pixel values differ");
    expected
}

#[test]
fn preprocessing_equals_transformers_pixel_values_bit_for_bit() {
    for (name, family) in FAMILIES {
        let checkpoint = import(name, family, PrecisionPolicy::all_f32());
        let side = checkpoint.config().image_size() as usize;
        let expected = assert_pixel_values_equal_golden(name, &checkpoint, side);
        // The graph's input: a zero class row, then the patches.
        let input = checkpoint.input_values(&images()).expect("images");
        let patches = input.get(checkpoint.patches()).expect("patches");
        let width = checkpoint.config().patch_width() as usize;
        let per_image = checkpoint.config().tokens() as usize * width;
        assert_eq!(patches.len(), 2 * per_image);
        assert!(patches[..width].iter().all(|&v| v == 0.0));
        assert!(
            patches[per_image..per_image + width]
                .iter()
                .all(|&v| v == 0.0)
        );
        let p = checkpoint.config().patch_size() as usize;
        // Token 1 is patch (0, 0): channel 0's first row starts it.
        assert_eq!(&patches[width..width + p], &expected[..p]);
    }
}

#[test]
fn clip_processor_configs_are_checked() {
    use ipu_frontend::processor::{CLIP_PROCESSOR, Processor, ProcessorError, VIT_PROCESSOR};
    type Expect = fn(&ProcessorError) -> bool;
    let cases: [(&str, Expect); 5] = [
        // The crop must be the model's image size.
        (r#"{"crop_size": {"height": 16, "width": 16}}"#, |e| {
            matches!(e, ProcessorError::Size { height: 16, .. })
        }),
        // A crop larger than the resized edge would need padding.
        (r#"{"size": {"shortest_edge": 20}}"#, |e| {
            matches!(e, ProcessorError::Crop { crop: 28, edge: 20 })
        }),
        // Without the crop a shortest-edge resize is not square.
        (r#"{"do_center_crop": false}"#, |e| {
            matches!(
                e,
                ProcessorError::Step {
                    field: "do_center_crop",
                    value: false,
                    ..
                }
            )
        }),
        (r#"{"size": {"shortest_edge": 100000}}"#, |e| {
            matches!(e, ProcessorError::Value { field: "size", .. })
        }),
        (r#"{"size": {"longest_edge": 28}}"#, |e| {
            matches!(
                e,
                ProcessorError::SizeForm {
                    shortest_edge: true
                }
            )
        }),
    ];
    for (text, expected) in cases {
        let err = Processor::read(text, CLIP_PROCESSOR, 28).expect_err(text);
        assert!(expected(&err), "{text}: {err:?}");
    }
    // The old forms: a number is a shortest edge for CLIP, a square for ViT.
    let old = Processor::read(r#"{"size": 28, "crop_size": 28}"#, CLIP_PROCESSOR, 28).unwrap();
    assert_eq!(old, Processor::defaults(CLIP_PROCESSOR, 28));
    assert_eq!(
        Processor::read(r#"{"size": 16}"#, VIT_PROCESSOR, 16).unwrap(),
        Processor::defaults(VIT_PROCESSOR, 16)
    );
    assert!(matches!(
        Processor::read(r#"{"do_center_crop": true}"#, VIT_PROCESSOR, 16),
        Err(ProcessorError::Step {
            field: "do_center_crop",
            value: true,
            ..
        })
    ));
    // Every processor reads back from the form a package stores.
    for (kind, side) in [(CLIP_PROCESSOR, 28), (VIT_PROCESSOR, 16)] {
        let processor = Processor::defaults(kind, side);
        let back = Processor::read(&processor.to_json().to_string(), kind, side).expect("reads");
        assert_eq!(back, processor);
    }
    // An image too elongated for the shortest-edge resize is refused.
    let processor = Processor::defaults(CLIP_PROCESSOR, 28);
    let strip = ipu_frontend::imaging::Rgb8::new(1000, 1, vec![0; 3000]).unwrap();
    assert!(matches!(
        processor.pixel_values_of(&strip, Path::new("strip")),
        Err(ipu_frontend::ImageError::Aspect {
            width: 1000,
            height: 1,
            ..
        })
    ));
}

const TOLERANCE: Tolerance = Tolerance {
    abs: 0.0,
    rel: 1e-5,
    abs_rms: 1e-5,
    rms: 1e-5,
};

/// The outputs transformers gives, by graph output name.
fn golden_outputs(family: Family) -> Vec<(&'static str, &'static str)> {
    let mut out = vec![
        (LAST_HIDDEN, "last_hidden_state"),
        (POOLED, "pooler_output"),
    ];
    if family == Family::Clip {
        out.push((IMAGE_EMBEDS, "image_embeds"));
    }
    out
}

/// Asserts that each graph output of `pairs` (ours, transformers' name)
/// in `outputs` has the golden tensor's shape and equals it within the
/// F32 tolerance, printing the errors under `context`.
pub(crate) fn assert_outputs_equal_golden(
    dir: &Path,
    checkpoint: &ClassTokenCheckpoint,
    outputs: &ValueSet,
    pairs: &[(&str, &str)],
    context: &str,
) {
    for &(ours, theirs) in pairs {
        let (shape, expected) = golden(dir, theirs).expect(theirs);
        let id = checkpoint.graph().tensor_by_name(ours).expect(ours);
        let extents: Vec<usize> = checkpoint
            .graph()
            .tensor(id)
            .extents()
            .iter()
            .map(|&e| e as usize)
            .collect();
        assert_eq!(extents, shape, "{context} {ours}");
        let c = compare(&expected, outputs.get(id).expect("output"), TOLERANCE);
        println!(
            "{context} {ours}: max rel {:.3e}, normalised rms {:.3e}",
            c.max_rel, c.rms_error
        );
        assert!(c.pass, "{context} {ours}: {c:?}");
    }
}

#[test]
fn f32_graphs_equal_transformers() {
    for (name, family) in FAMILIES {
        let dir = checkpoint_dir(name);
        let checkpoint = import(name, family, PrecisionPolicy::all_f32());
        let (_, pixels) = golden(&dir, "pixel_values").expect("pixel values");
        let grid = PatchGrid {
            side: checkpoint.config().image_size(),
            patch: checkpoint.config().patch_size(),
            width: checkpoint.config().patch_width(),
            class_rows: 1,
        };
        let mut from_pixels = Vec::new();
        for image in pixels.chunks_exact(pixels.len() / 2) {
            patchify(&grid, image, &mut from_pixels).expect("patchifies");
        }
        let mut transformers_input = ValueSet::new();
        transformers_input.insert(checkpoint.patches(), from_pixels);
        let ours = checkpoint.input_values(&images()).expect("images");
        for (label, input) in [("images", ours), ("pixel values", transformers_input)] {
            let mut values = checkpoint.weights().clone();
            values.extend(input);
            let outputs = ipu_sim::evaluate(checkpoint.graph(), &values).expect("evaluates");
            let context = format!("{name} from {label}");
            assert_outputs_equal_golden(
                &dir,
                &checkpoint,
                &outputs,
                &golden_outputs(family),
                &context,
            );
        }
    }
}

/// The smallest per-row cosine and the relative RMS of `ours` against
/// `theirs`, rows of `width`.
pub(crate) fn fidelity(theirs: &[f32], ours: &[f32], width: usize) -> (f64, f64) {
    let dot = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| f64::from(x) * f64::from(y))
            .sum::<f64>()
    };
    let min_cos = theirs
        .chunks(width)
        .zip(ours.chunks(width))
        .map(|(a, b)| dot(a, b) / (dot(a, a) * dot(b, b)).sqrt())
        .fold(1.0, f64::min);
    let err: f64 = theirs
        .iter()
        .zip(ours)
        .map(|(&x, &y)| (f64::from(y) - f64::from(x)).powi(2))
        .sum();
    (min_cos, (err / dot(theirs, theirs)).sqrt())
}

/// The SigLIP fixture's precision layout with the class-token tensors.
pub(crate) fn fp8_template() -> PrecisionPolicy {
    let fixture = parse_fixture(&fixture_text("tiny-2l-h64.json")).expect("fixture");
    template(PrecisionPolicy::from_graph(&fixture).expect("policy"))
}

/// Calibrates `checkpoint` on the synthetic images and returns the model.
pub(crate) fn calibrated(checkpoint: &ClassTokenCheckpoint) -> PackagedClassToken {
    let options = CalibrationOptions::new(fp8_template());
    let inputs = checkpoint
        .calibration_inputs(&CalibrationInputs::Synthetic(4))
        .expect("inputs");
    let calibration = calibrate_inputs(checkpoint, inputs, &options).expect("calibrates");
    PackagedClassToken::new(checkpoint, "calibrated-b2", 2, &calibration).expect("model")
}

#[test]
fn the_description_reads_back_to_the_same_graph_and_inputs() {
    for (name, family) in FAMILIES {
        let checkpoint = import(name, family, fp8_template());
        let model = calibrated(&checkpoint);
        let graph = model.graph().expect("graph");
        let description = model.description();
        let read = PackagedModel::from_description(&description, &graph).expect("reads back");
        assert_eq!(read.family(), model.family());
        let from_description = read.input_values(&graph, &images()).expect("images");
        let direct = model.input_values(&graph, &images()).expect("images");
        let patches = graph.tensor_by_name("patches").expect("patches");
        assert_eq!(from_description.get(patches), direct.get(patches));
        // Another graph (another batch) is refused.
        let other = build_graph(
            checkpoint.config(),
            &GraphOptions {
                name: "calibrated-b2".into(),
                batch: 3,
                policy: PrecisionPolicy::all_f32(),
            },
        )
        .expect("builds");
        assert!(PackagedModel::from_description(&description, &other).is_err());
    }
}

/// Each golden output of `model` (the reference evaluation on the two
/// golden images) against transformers': the smallest per-row cosine
/// and the relative RMS.
fn against_golden(
    checkpoint: &ClassTokenCheckpoint,
    model: &PackagedClassToken,
    name: &str,
    family: Family,
) -> Vec<(&'static str, f64, f64)> {
    let dir = checkpoint_dir(name);
    let graph = model.graph().expect("graph");
    let mut values = checkpoint.weights_for(&graph).expect("weights");
    values.extend(model.input_values(&graph, &images()).expect("images"));
    let out = ipu_sim::evaluate(&graph, &values).expect("evaluates");
    golden_outputs(family)
        .into_iter()
        .map(|(ours, theirs)| {
            let (shape, expected) = golden(&dir, theirs).expect(theirs);
            let got = out
                .get(graph.tensor_by_name(ours).expect(ours))
                .expect(ours);
            let (cosine, rms) = fidelity(&expected, got, *shape.last().expect("width"));
            (ours, cosine, rms)
        })
        .collect()
}

#[test]
fn calibrated_fp8_pooled_output_matches_transformers() {
    println!("| checkpoint | output | smallest per-image cosine | relative RMS |");
    println!("|---|---|---|---|");
    let mut worst = Vec::new();
    for (name, family) in FAMILIES {
        let checkpoint = import(name, family, fp8_template());
        let model = calibrated(&checkpoint);
        for (ours, cosine, rms) in against_golden(&checkpoint, &model, name, family) {
            println!("| `{name}` | `{ours}` | {cosine:.6} | {rms:.2e} |");
            worst.push((name, ours, cosine, rms));
        }
    }
    // The target is a per-image cosine of 0.995 for the embeddings
    // (SigLIP's, docs/SIGLIP.md), which calibration's default fidelity
    // target aims at; every output within 15 % relative RMS.
    for (name, output, cosine, rms) in worst {
        assert!(rms <= 0.15, "{name} {output}: relative RMS {rms}");
        if output != LAST_HIDDEN {
            assert!(cosine >= 0.995, "{name} {output}: cosine {cosine}");
        }
    }
}

/// Calibrates `checkpoint` on four synthetic images with `options`
/// adjusted by `edit`.
fn calibrate_with(
    checkpoint: &ClassTokenCheckpoint,
    edit: impl FnOnce(&mut CalibrationOptions),
) -> ipu_frontend::siglip::Calibration {
    let mut options = CalibrationOptions::new(fp8_template());
    edit(&mut options);
    let inputs = checkpoint
        .calibration_inputs(&CalibrationInputs::Synthetic(4))
        .expect("inputs");
    calibrate_inputs(checkpoint, inputs, &options).expect("calibrates")
}

/// A target FP8 misses on the calibration inputs raises GEMM operands to
/// F16 until the inputs meet it with headroom, and the report says which:
/// raised weights are F16 in the tensor table for that reason, removed
/// casts are gone from it. On the golden images every embedding then
/// keeps a cosine of 0.995 against transformers.
#[test]
fn a_fidelity_target_fp8_misses_raises_operands_until_it_is_met() {
    for (name, family) in FAMILIES {
        let checkpoint = import(name, family, fp8_template());
        let calibration = calibrate_with(&checkpoint, |o| o.min_cosine = Some(0.998));
        let report = calibration.report();
        let f = report.fidelity.as_ref().expect("a fidelity record");
        let required = f.required.expect("required");
        assert!((required - 0.999).abs() < 1e-12, "{name}: {required}");
        assert!(f.before < required, "{name}: FP8 already meets it: {f:?}");
        assert!(f.met && f.after >= required, "{name}: {f:?}");
        let raised: Vec<_> = f.operands.iter().filter(|o| o.decision == "F16").collect();
        assert!(!raised.is_empty(), "{name}: {f:?}");
        for o in &raised {
            let record = report.tensors.iter().find(|t| t.tensor == o.role);
            match o.operand.as_str() {
                "weights" => {
                    let t = record.expect("a raised weight is listed");
                    assert_eq!(t.precision, "F16", "{name} {}", o.role);
                    assert!(t.reason.contains("fidelity"), "{name}: {}", t.reason);
                }
                "activations" => assert!(record.is_none(), "{name}: cast {} kept", o.role),
                "group" => {}
                other => panic!("{name}: operand kind {other}"),
            }
        }
        // The smallest per-input output cosine the report lists is the
        // one the target was measured on.
        let smallest = report
            .outputs
            .iter()
            .map(|o| o.smallest_cosine.expect("measured"))
            .fold(1.0, f64::min);
        assert!(
            (smallest - f.after).abs() < 1e-12,
            "{name}: {smallest} vs {f:?}"
        );

        let model =
            PackagedClassToken::new(&checkpoint, "raised-b2", 2, &calibration).expect("model");
        for (ours, cosine, rms) in against_golden(&checkpoint, &model, name, family) {
            println!("| `{name}` (--min-cosine 0.998) | `{ours}` | {cosine:.6} | {rms:.2e} |");
            if ours != LAST_HIDDEN {
                assert!(cosine >= 0.995, "{name} {ours}: cosine {cosine}");
            }
        }
    }
}

/// Without a target, or with F16 refused (a build that did not fit),
/// nothing is raised and the record says why.
#[test]
fn no_operand_is_raised_without_a_target_or_with_f16_refused() {
    let checkpoint = import("clip-vision-tiny", Family::Clip, fp8_template());
    let unraised = calibrate_with(&checkpoint, |o| o.min_cosine = None);
    let f = unraised.report().fidelity.clone().expect("record");
    assert!(
        f.operands.is_empty() && f.met && f.before == f.after,
        "{f:?}"
    );
    let refused = calibrate_with(&checkpoint, |o| {
        o.min_cosine = Some(0.9999);
        o.f16_groups = ipu_frontend::siglip::F16Groups::Refused("a test".into());
    });
    let f = refused.report().fidelity.clone().expect("record");
    assert!(f.operands.is_empty() && !f.met, "{f:?}");
    assert!(f.reason.contains("not considered: a test"), "{}", f.reason);
    // Both leave every GEMM weight in FP8 (only the F16 groups' test
    // decides the rest).
    for calibration in [&unraised, &refused] {
        for t in &calibration.report().tensors {
            if t.tensor.ends_with(".w") {
                assert!(
                    t.precision.starts_with("F1") && t.precision != "F16",
                    "{t:?}"
                );
            }
        }
    }
}
