//! DINOv2 checkpoints (`ipu_frontend::class_token`, `Family::Dinov2`):
//! the config with its defaults and refusals, the position table's
//! bicubic interpolation against torch's, the mapping with the layer
//! scales folded into the GEMMs, preprocessing against transformers'
//! pixel values bit for bit, the F32 graph against transformers' outputs,
//! the FP8 build's pooled cosine and the package description read back.
//!
//! `dinov2-tiny` (table for an 8x8 patch grid, processor crop 24 with
//! patch 4: a 6x6 grid) and `interpolate.safetensors` are made by
//! `fixtures/checkpoints/make_golden_dinov2.py`.

use std::path::Path;

use ipu_frontend::class_token::interpolate::{bicubic_grid, bicubic_grid_antialiased};
use ipu_frontend::class_token::{
    ClassTokenConfig, Family, LAST_HIDDEN, POOLED, build_graph, read_config,
};
use ipu_frontend::siglip::{ConfigError, GraphOptions, PrecisionPolicy};
use ipu_frontend::{CheckpointKind, PackagedModel, checkpoint_kind};
use ipu_package::graph::{Activation, ValueSet};

use crate::checkpoint::checkpoint_dir;
use crate::class_token::{
    assert_outputs_equal_golden, assert_pixel_values_equal_golden, calibrated, fidelity,
    fp8_template, golden, images, import, stored, transposed,
};

const TINY: &str = "dinov2-tiny";
/// `Dinov2WithRegistersModel` with 2 register tokens, otherwise as `TINY`.
const REGISTERS: &str = "dinov2-registers-tiny";

fn config(text: &str) -> Result<ClassTokenConfig, ConfigError> {
    ClassTokenConfig::from_json(text, Family::Dinov2)
}

#[test]
fn dinov2_configs_read_with_transformers_defaults() {
    let c = config(r#"{"model_type": "dinov2"}"#).expect("valid");
    assert_eq!(
        (c.hidden(), c.intermediate(), c.layers(), c.heads()),
        (768, 3072, 12, 12)
    );
    assert_eq!((c.image_size(), c.patch_size(), c.tokens()), (224, 14, 257));
    assert_eq!(c.layer_norm_eps(), 1e-6);
    assert_eq!(c.activation(), Activation::GeluErf);
    assert!(c.has_pooled());
    assert_eq!((c.pooler(), c.projection()), (None, None));
    // The published models: a table for 518 (37x37), images of 224.
    let large = read_config(&checkpoint_dir("dinov2-large"), Family::Dinov2).expect("reads");
    assert_eq!((large.hidden(), large.intermediate()), (1024, 4096));
    assert_eq!(
        (large.table_grid(), large.grid(), large.tokens()),
        (37, 16, 257)
    );
    assert_eq!(large.input_size(), 224);
    // The description's form reads back to the same config.
    for c in [c, large] {
        assert_eq!(config(&c.to_json().to_string()).expect("reads"), c);
    }
    for name in [TINY, REGISTERS] {
        assert_eq!(
            checkpoint_kind(&checkpoint_dir(name)).expect("kind"),
            CheckpointKind::ClassToken(Family::Dinov2)
        );
    }
    // With registers: 4 by default, patch 16 (Dinov2WithRegistersConfig).
    let r = config(r#"{"model_type": "dinov2_with_registers"}"#).expect("valid");
    assert_eq!((r.registers(), r.patch_size()), (Some(4), 16));
    assert_eq!((r.class_rows(), r.tokens()), (5, 14 * 14 + 5));
    assert_eq!(config(&r.to_json().to_string()).expect("reads"), r);
    let tiny = read_config(&checkpoint_dir(REGISTERS), Family::Dinov2).expect("reads");
    assert_eq!(
        (tiny.registers(), tiny.grid(), tiny.tokens()),
        (Some(2), 6, 39)
    );
}

#[test]
fn dinov2_config_errors_name_the_field() {
    for (text, field) in [
        (
            r#"{"model_type": "dinov2", "use_swiglu_ffn": true}"#,
            "use_swiglu_ffn",
        ),
        (r#"{"model_type": "dinov2", "qkv_bias": false}"#, "qkv_bias"),
        (r#"{"model_type": "dinov2", "mlp_ratio": 2.5}"#, "mlp_ratio"),
        (
            r#"{"model_type": "dinov2", "image_size": [518, 518]}"#,
            "image_size",
        ),
    ] {
        match config(text) {
            Err(ConfigError::Field { field: f, .. }) => assert_eq!(f, field, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    let err = config(r#"{"model_type": "dinov2", "use_swiglu_ffn": true}"#).unwrap_err();
    assert!(err.to_string().contains("use_swiglu_ffn"), "{err}");
    assert!(matches!(
        config(r#"{"model_type": "dinov2", "mlp_ratio": 0}"#),
        Err(ConfigError::Zero { field: "mlp_ratio" })
    ));
    // An input smaller than a patch, and a ViT asked for another size.
    assert!(matches!(
        config(r#"{"model_type": "dinov2", "input_size": 8}"#),
        Err(ConfigError::Patch {
            patch: 14,
            image: 8
        })
    ));
    let vit = ClassTokenConfig::from_json(r#"{"model_type": "vit"}"#, Family::Vit).unwrap();
    assert!(matches!(
        vit.with_input_size(160),
        Err(ConfigError::Field {
            field: "input_size",
            ..
        })
    ));
}

#[test]
fn the_large_config_builds_with_transformers_parameter_count_less_the_folds() {
    let config = read_config(&checkpoint_dir("dinov2-large"), Family::Dinov2).expect("reads");
    let graph = build_graph(
        &config,
        &GraphOptions {
            name: "dinov2-large".into(),
            batch: 1,
            policy: PrecisionPolicy::all_f32(),
        },
    )
    .expect("builds");
    // transformers' Dinov2Model(facebook/dinov2-large) has 304,368,640
    // parameters. The graph has no mask token, class token, convolution
    // bias or layer scales (folded: 3 + 2 · 24 rows of H), and its
    // position table has 257 rows where the stored one has 1370.
    let h = 1024u64;
    let folded = (3 + 2 * 24) * h + (1370 - 257) * h;
    assert_eq!(graph.parameter_count(), 304_368_640 - folded);
}

/// A golden tensor of `interpolate.safetensors`.
fn interpolation_golden(name: &str) -> Vec<f32> {
    golden_in(&checkpoint_dir("interpolate.safetensors"), name)
}

fn golden_in(file: &Path, name: &str) -> Vec<f32> {
    let bytes = std::fs::read(file).expect("golden file");
    let file = safetensors::SafeTensors::deserialize(&bytes).expect("parses");
    let view = file.tensor(name).unwrap_or_else(|_| panic!("{name}"));
    view.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Largest difference of `got` from `want` relative to `want`'s largest
/// magnitude.
fn relative_max(want: &[f32], got: &[f32]) -> f32 {
    assert_eq!(want.len(), got.len());
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let diff = want
        .iter()
        .zip(got)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    diff / scale
}

#[test]
fn bicubic_interpolation_equals_torch() {
    for (from, to, width) in [(8, 6, 5), (8, 4, 3), (37, 16, 4), (5, 9, 3), (3, 1, 2)] {
        let table = interpolation_golden(&format!("table.{from}.{to}"));
        let want = interpolation_golden(&format!("bicubic.{from}.{to}"));
        let got = bicubic_grid(&table, from, to, width).expect("sizes agree");
        let err = relative_max(&want, &got);
        println!("bicubic {from}->{to}: largest difference {err:.2e} of the largest value");
        // torch's kernel sums in an order of its own: a few units in the
        // last place of f32 (at most 6.5e-7 of the largest value here).
        assert!(err <= 1e-6, "{from}->{to}: {err}");
        let want = interpolation_golden(&format!("bicubic_aa.{from}.{to}"));
        let got = bicubic_grid_antialiased(&table, from, to, width).expect("sizes agree");
        let err = relative_max(&want, &got);
        println!("antialiased {from}->{to}: largest difference {err:.2e} of the largest value");
        assert!(err <= 1e-6, "antialiased {from}->{to}: {err}");
    }
}

#[test]
fn the_mapping_interpolates_the_table_and_folds_the_layer_scales() {
    let dir = checkpoint_dir(TINY);
    let checkpoint = import(TINY, Family::Dinov2, PrecisionPolicy::all_f32());
    let config = checkpoint.config();
    assert_eq!((config.table_grid(), config.grid()), (8, 6));
    let graph = checkpoint.graph();
    let weight = |n: &str| {
        checkpoint
            .weights()
            .get(graph.tensor_by_name(n).expect(n))
            .expect(n)
            .to_vec()
    };
    let (h, m) = (config.hidden() as usize, config.intermediate() as usize);
    // The table transformers adds for a 24x24 input, with the class token
    // on row 0 and the convolution bias on the patch rows.
    let (_, table) = golden(&dir, "interpolated_position_embeddings").expect("table");
    let cls = stored(&dir, "embeddings.cls_token");
    let bias = stored(&dir, "embeddings.patch_embeddings.projection.bias");
    let want: Vec<f32> = table
        .iter()
        .enumerate()
        .map(|(i, &p)| if i < h { p + cls[i] } else { p + bias[i % h] })
        .collect();
    let pos = weight("pos");
    assert_eq!(pos.len(), 37 * h);
    assert_eq!(&pos[..h], &want[..h], "row 0 is not interpolated");
    assert!(relative_max(&want, &pos) <= 1e-6);
    // Layer scales: each output row of the stored weight and bias scaled.
    for (i, module, scale, graph_name) in [
        (0, "attention.output.dense", "layer_scale1", "out"),
        (1, "mlp.fc2", "layer_scale2", "fc2"),
    ] {
        let lambda = stored(&dir, &format!("encoder.layer.{i}.{scale}.lambda1"));
        let w = stored(&dir, &format!("encoder.layer.{i}.{module}.weight"));
        let inner = w.len() / h;
        let scaled: Vec<f32> = w
            .iter()
            .enumerate()
            .map(|(k, &v)| v * lambda[k / inner])
            .collect();
        assert_eq!(
            weight(&format!("enc{i}.{graph_name}.w")),
            transposed(&scaled, h, inner)
        );
        let b = stored(&dir, &format!("encoder.layer.{i}.{module}.bias"));
        let scaled: Vec<f32> = b.iter().zip(&lambda).map(|(&v, &l)| v * l).collect();
        assert_eq!(weight(&format!("enc{i}.{graph_name}.b")), scaled);
    }
    // Unscaled: the MLP's first layer, the norms.
    assert_eq!(
        weight("enc1.fc1.w"),
        transposed(&stored(&dir, "encoder.layer.1.mlp.fc1.weight"), m, h)
    );
    assert_eq!(
        weight("enc0.ln2.g"),
        stored(&dir, "encoder.layer.0.norm2.weight")
    );
    assert_eq!(weight("post.b"), stored(&dir, "layernorm.bias"));
    assert_eq!(checkpoint.weights().len(), graph.weights().len());
}

#[test]
fn register_tokens_go_between_the_class_row_and_the_patches() {
    let dir = checkpoint_dir(REGISTERS);
    let checkpoint = import(REGISTERS, Family::Dinov2, PrecisionPolicy::all_f32());
    let graph = checkpoint.graph();
    let pos = checkpoint
        .weights()
        .get(graph.tensor_by_name("pos").expect("pos"))
        .expect("pos")
        .to_vec();
    let h = checkpoint.config().hidden() as usize;
    let (_, table) = golden(&dir, "interpolated_position_embeddings").expect("table");
    let cls = stored(&dir, "embeddings.cls_token");
    let bias = stored(&dir, "embeddings.patch_embeddings.projection.bias");
    let registers = stored(&dir, "embeddings.register_tokens");
    assert_eq!(pos.len(), 39 * h);
    let row0: Vec<f32> = table[..h].iter().zip(&cls).map(|(p, c)| p + c).collect();
    assert_eq!(&pos[..h], &row0[..]);
    assert_eq!(&pos[h..3 * h], &registers[..], "registers as stored");
    let patches: Vec<f32> = table[h..]
        .iter()
        .enumerate()
        .map(|(i, &p)| p + bias[i % h])
        .collect();
    assert!(relative_max(&patches, &pos[3 * h..]) <= 1e-6);
    // The input: three zero rows (class, two registers), then patches.
    let input = checkpoint.input_values(&images()).expect("images");
    let rows = input.get(checkpoint.patches()).expect("patches");
    let width = checkpoint.config().patch_width() as usize;
    assert!(rows[..3 * width].iter().all(|&v| v == 0.0));
    assert!(rows[3 * width..4 * width].iter().any(|&v| v != 0.0));
}

#[test]
fn dinov2_preprocessing_equals_transformers_pixel_values_bit_for_bit() {
    let checkpoint = import(TINY, Family::Dinov2, PrecisionPolicy::all_f32());
    assert_pixel_values_equal_golden(TINY, &checkpoint, 24);
}

#[test]
fn dinov2_f32_graphs_equal_transformers() {
    for name in [TINY, REGISTERS] {
        f32_graph_equals_transformers(name);
    }
}

fn f32_graph_equals_transformers(name: &str) {
    let dir = checkpoint_dir(name);
    let checkpoint = import(name, Family::Dinov2, PrecisionPolicy::all_f32());
    let mut values = checkpoint.weights().clone();
    values.extend(checkpoint.input_values(&images()).expect("images"));
    let outputs = ipu_sim::evaluate(checkpoint.graph(), &values).expect("evaluates");
    assert_outputs_equal_golden(
        &dir,
        &checkpoint,
        &outputs,
        &[
            (LAST_HIDDEN, "last_hidden_state"),
            (POOLED, "pooler_output"),
        ],
        name,
    );
}

#[test]
fn dinov2_fp8_pooled_output_and_description() {
    // The target, 0.995, which both checkpoints meet (docs/MODELS.md).
    for name in [TINY, REGISTERS] {
        fp8_pooled_output_and_description(name, 0.995);
    }
}

fn fp8_pooled_output_and_description(name: &str, bound: f64) {
    let dir = checkpoint_dir(name);
    let checkpoint = import(name, Family::Dinov2, fp8_template());
    let model = calibrated(&checkpoint);
    let graph = model.graph().expect("graph");
    let mut values: ValueSet = checkpoint.weights_for(&graph).expect("weights");
    values.extend(model.input_values(&graph, &images()).expect("images"));
    let out = ipu_sim::evaluate(&graph, &values).expect("evaluates");
    let mut pooled_cosine = 0.0;
    for (ours, theirs) in [
        (LAST_HIDDEN, "last_hidden_state"),
        (POOLED, "pooler_output"),
    ] {
        let (shape, expected) = golden(&dir, theirs).expect(theirs);
        let got = out
            .get(graph.tensor_by_name(ours).expect(ours))
            .expect(ours);
        let (cosine, rms) = fidelity(&expected, got, *shape.last().expect("width"));
        println!("| `{name}` | `{ours}` | {cosine:.6} | {rms:.2e} |");
        assert!(rms <= 0.15, "{ours}: relative RMS {rms}");
        if ours == POOLED {
            pooled_cosine = cosine;
        }
    }
    assert!(
        pooled_cosine >= bound,
        "{name}: pooled cosine {pooled_cosine}"
    );
    // The package's description reads back to the same graph and inputs.
    let description = model.description();
    assert_eq!(description.family, "dinov2");
    let read = PackagedModel::from_description(&description, &graph).expect("reads back");
    assert_eq!(read.family(), "dinov2");
    let patches = graph.tensor_by_name("patches").expect("patches");
    let from_description = read.input_values(&graph, &images()).expect("images");
    let direct = model.input_values(&graph, &images()).expect("images");
    assert_eq!(from_description.get(patches), direct.get(patches));
}
