//! CLIP's text tower against transformers, on the golden full `CLIPModel`
//! `fixtures/checkpoints/clip-text-tiny` (made by
//! `make_golden_clip_text.py`): the tokenizer's ids against
//! `CLIPTokenizer`'s with `padding="max_length"`, the pooled rows from
//! them, the F32 graph (causal attention, end-of-text pooling, the
//! projection) against `CLIPTextModel` and `text_projection` (1e-5
//! normalised RMS), the calibrated FP8 graph's pooled cosine, and bad
//! checkpoints.
//!
//! `cargo test -p ipu-frontend --test frontend clip_text -- --nocapture`
//! prints the fidelity figures `docs/MODELS.md` quotes.

use std::path::{Path, PathBuf};

use ipu_frontend::class_token::{Family, import_class_token};
use ipu_frontend::siglip::text::{
    INPUT_IDS, POOL_ROWS, TEXT_EMBEDS, TextCheckpoint, TextFamily, TextTokenizer, TokenizeError,
    Truncation, build_text_graph, import_text_checkpoint, pool_position, text_template,
};
use ipu_frontend::siglip::zero_shot::clip_scores;
use ipu_frontend::siglip::{
    CalibrationOptions, GraphOptions, ImportConfig, POOLED, PrecisionPolicy, calibrate_inputs,
};
use ipu_package::graph::{AttentionMask, Op, ValueSet, parse_fixture};
use ipu_sim::reference::{Tolerance, compare};

use crate::{cosine, fixture_text};

const TEXTS: usize = 3;
const POSITIONS: usize = 16;
const HIDDEN: usize = 32;
const PROJECTION: usize = 16;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/checkpoints/clip-text-tiny")
}

/// The golden file.
struct Golden {
    bytes: Vec<u8>,
}

impl Golden {
    fn read() -> Self {
        Self {
            bytes: std::fs::read(dir().join("golden.safetensors")).unwrap(),
        }
    }

    fn f32(&self, name: &str) -> Vec<f32> {
        crate::golden_f32(&self.bytes, name)
    }

    fn ids(&self) -> Vec<Vec<u32>> {
        let file = safetensors::SafeTensors::deserialize(&self.bytes).unwrap();
        let view = file.tensor("input_ids").unwrap();
        let all: Vec<u32> = view
            .data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u32)
            .collect();
        all.chunks(POSITIONS).map(<[u32]>::to_vec).collect()
    }

    fn texts(&self) -> Vec<String> {
        let (_, meta) = safetensors::SafeTensors::read_metadata(&self.bytes).unwrap();
        serde_json::from_str(&meta.metadata().as_ref().unwrap()["texts"]).unwrap()
    }
}

fn import(
    path: &Path,
    policy: PrecisionPolicy,
) -> Result<TextCheckpoint, ipu_frontend::ImportError> {
    import_text_checkpoint(
        path,
        &ImportConfig {
            batch: TEXTS as u64,
            policy,
            name: None,
        },
    )
}

/// The normalised RMS error bound alone (no element bound).
const F32_TOLERANCE: Tolerance = Tolerance {
    abs: 1e30,
    rel: 0.0,
    abs_rms: 0.0,
    rms: 1e-5,
};

#[test]
fn the_tokenizer_gives_clips_ids_and_the_pooled_rows_follow_them() {
    let golden = Golden::read();
    let t = TextTokenizer::read(&dir(), 93, 16, &dir().join("config.json")).unwrap();
    let texts = golden.texts();
    let ids = t.encode(&texts, POSITIONS, Truncation::Refuse).unwrap();
    assert_eq!(ids, golden.ids());
    // The end token (id 92, the largest) first follows each text, then
    // pads it; both pooling rules find it.
    for row in &ids {
        let p = pool_position(row, 92);
        assert_eq!(row[p], 92);
        assert!(row[..p].iter().all(|&id| id != 92));
        assert_eq!(pool_position(row, 2), p);
    }
    // A digit is not in the tiny vocabulary: the unknown token, which is
    // CLIP's end token, inside the text.
    let e = t
        .encode(&["a cat 7".to_owned()], POSITIONS, Truncation::Refuse)
        .unwrap_err();
    assert!(
        matches!(&e, TokenizeError::Unknown { piece, unk_id: 92, .. } if piece == "7"),
        "{e}"
    );
    assert!(e.to_string().contains("tokenizer.json"), "{e}");
    assert!(!e.to_string().contains('\n'));
    // Longer than the sequence.
    let long = vec!["a photo of a cat and a dog on a red car and a house".to_owned()];
    let e = t.encode(&long, POSITIONS, Truncation::Refuse).unwrap_err();
    assert!(
        matches!(e, TokenizeError::TooLong { tokens, length: 16, .. } if tokens > 16),
        "{e}"
    );
    // Cut when asked, the end token stays last, as transformers'
    // truncation keeps the post-processor's special tokens.
    let cut = t.encode(&long, POSITIONS, Truncation::Truncate).unwrap();
    assert_eq!(cut[0].len(), POSITIONS);
    assert_eq!(cut[0].last(), Some(&92));
    assert_eq!(pool_position(&cut[0], 92), POSITIONS - 1);
}

#[test]
fn the_clip_text_graph_is_causal_and_pools_at_the_end_token() {
    let checkpoint = import(&dir(), PrecisionPolicy::all_f32()).unwrap();
    assert_eq!(
        checkpoint.config().family(),
        TextFamily::Clip { projected: true }
    );
    let graph = checkpoint.graph();
    let masks: Vec<AttentionMask> = graph
        .ops()
        .iter()
        .filter_map(|(_, op)| match op {
            Op::Attention { mask, .. } => Some(*mask),
            _ => None,
        })
        .collect();
    assert!(!masks.is_empty());
    assert!(masks.iter().all(|&m| m == AttentionMask::Causal));
    let golden = Golden::read();
    let values = checkpoint
        .input_values(&golden.texts(), Truncation::Refuse)
        .unwrap();
    let rows = values
        .get(graph.tensor_by_name(POOL_ROWS).unwrap())
        .unwrap();
    let expected: Vec<f32> = golden
        .ids()
        .iter()
        .enumerate()
        .map(|(b, row)| (b * POSITIONS + pool_position(row, 92)) as f32)
        .collect();
    assert_eq!(rows, expected.as_slice());
}

#[test]
fn the_f32_clip_text_graph_equals_transformers() {
    let golden = Golden::read();
    let checkpoint = import(&dir(), PrecisionPolicy::all_f32()).unwrap();
    let mut values = checkpoint.weights().clone();
    values.extend(
        checkpoint
            .input_values(&golden.texts(), Truncation::Refuse)
            .unwrap(),
    );
    let graph = checkpoint.graph();
    let out = ipu_sim::evaluate(graph, &values).unwrap();
    for (ours, theirs, width) in [
        ("last_hidden", "last_hidden_state", POSITIONS * HIDDEN),
        (POOLED, "pooler_output", HIDDEN),
        (TEXT_EMBEDS, "text_embeds", PROJECTION),
    ] {
        let got = out.get(graph.tensor_by_name(ours).unwrap()).unwrap();
        let want = golden.f32(theirs);
        assert_eq!(got.len(), TEXTS * width, "{ours}");
        let c = compare(&want, got, F32_TOLERANCE);
        println!(
            "clip-text-tiny F32 {ours}: max rel {:.3e}, normalised rms {:.3e}",
            c.max_rel, c.rms_error
        );
        assert!(c.pass, "{ours}: {c:?}");
    }
}

#[test]
fn the_fp8_clip_text_graph_keeps_the_pooled_direction() {
    let golden = Golden::read();
    let template = text_template(
        PrecisionPolicy::from_graph(&parse_fixture(&fixture_text("tiny-2l-h64.json")).unwrap())
            .unwrap(),
    );
    let text = import(&dir(), template.clone()).unwrap();
    let inputs = text.calibration_inputs(&golden.texts()).unwrap();
    let calibration = calibrate_inputs(&text, inputs, &CalibrationOptions::new(template)).unwrap();
    let graph = build_text_graph(
        text.config(),
        &GraphOptions {
            name: "fp8".into(),
            batch: TEXTS as u64,
            policy: calibration.policy().clone(),
        },
    )
    .unwrap();
    let mut values: ValueSet = text.weights_for(&graph).unwrap();
    let ids: Vec<f32> = golden
        .ids()
        .concat()
        .into_iter()
        .map(|i| i as f32)
        .collect();
    let rows: Vec<f32> = golden
        .ids()
        .iter()
        .enumerate()
        .map(|(b, row)| (b * POSITIONS + pool_position(row, 92)) as f32)
        .collect();
    values.insert(graph.tensor_by_name(INPUT_IDS).unwrap(), ids);
    values.insert(graph.tensor_by_name(POOL_ROWS).unwrap(), rows);
    let out = ipu_sim::evaluate(&graph, &values).unwrap();
    let get = |name: &str| out.get(graph.tensor_by_name(name).unwrap()).unwrap();
    let (pooled, embeds) = (get(POOLED), get(TEXT_EMBEDS));
    let (want_pooled, want_embeds) = (golden.f32("pooler_output"), golden.f32("text_embeds"));
    let mut worst = f64::INFINITY;
    for r in 0..TEXTS {
        let c = cosine(
            &want_pooled[r * HIDDEN..][..HIDDEN],
            &pooled[r * HIDDEN..][..HIDDEN],
        );
        let e = cosine(
            &want_embeds[r * PROJECTION..][..PROJECTION],
            &embeds[r * PROJECTION..][..PROJECTION],
        );
        println!("clip-text-tiny FP8 text {r}: pooled cosine {c:.6}, text_embeds cosine {e:.6}");
        worst = worst.min(c).min(e);
    }
    // The target; the fixture reaches 0.998 for both.
    assert!(worst >= 0.995, "worst cosine {worst}");
}

#[test]
fn clips_zero_shot_scores_equal_transformers() {
    let golden = Golden::read();
    let text = import(&dir(), PrecisionPolicy::all_f32()).unwrap();
    let mut values = text.weights().clone();
    values.extend(
        text.input_values(&golden.texts(), Truncation::Refuse)
            .unwrap(),
    );
    let out = ipu_sim::evaluate(text.graph(), &values).unwrap();
    let text_embeds = out
        .get(text.graph().tensor_by_name(TEXT_EMBEDS).unwrap())
        .unwrap()
        .to_vec();
    // The vision half of the same CLIPModel, on the two golden images.
    let vision = import_class_token(
        &dir(),
        Family::Clip,
        &ImportConfig {
            batch: 2,
            policy: PrecisionPolicy::all_f32(),
            name: None,
        },
    )
    .unwrap();
    let images =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/checkpoints/images");
    let mut v = vision.weights().clone();
    v.extend(
        vision
            .input_values(&[images.join("rgb-40x30.png"), images.join("rgba-13x11.png")])
            .unwrap(),
    );
    let vout = ipu_sim::evaluate(vision.graph(), &v).unwrap();
    let image_embeds = vout
        .get(vision.graph().tensor_by_name("image_embeds").unwrap())
        .unwrap()
        .to_vec();
    // CLIPModel.forward returns the embeddings L2-normalised.
    let unit: Vec<f32> = image_embeds
        .chunks(PROJECTION)
        .flat_map(|row| {
            let n = row
                .iter()
                .map(|&x| f64::from(x).powi(2))
                .sum::<f64>()
                .sqrt();
            row.iter().map(move |&x| (f64::from(x) / n) as f32)
        })
        .collect();
    let c = compare(&golden.f32("image_embeds"), &unit, F32_TOLERANCE);
    assert!(c.pass, "image_embeds: {c:?}");
    let params = text.logits().expect("a full CLIPModel has logit_scale");
    assert_eq!(params.logit_scale, golden.f32("logit_scale")[0]);
    assert_eq!(params.logit_bias, 0.0);
    let s = clip_scores(
        &image_embeds,
        PROJECTION,
        &text_embeds,
        PROJECTION,
        params.logit_scale,
    )
    .unwrap();
    assert_eq!((s.images, s.texts), (2, TEXTS));
    for (ours, theirs) in [(&s.logits, "logits_per_image"), (&s.probs, "probs")] {
        let c = compare(&golden.f32(theirs), ours, F32_TOLERANCE);
        println!(
            "clip-text-tiny F32 {theirs}: normalised rms {:.3e}; ours {ours:?}",
            c.rms_error
        );
        assert!(c.pass, "{theirs}: {c:?}");
    }
}

/// The golden checkpoint in a temporary directory with `edit` applied to
/// its `config.json`, leaving out the files `drop` names.
fn edited(edit: impl FnOnce(&mut serde_json::Value), drop: &[&str]) -> tempfile::TempDir {
    crate::edited_config(&dir(), edit, drop)
}

#[test]
fn bad_clip_text_checkpoints_get_one_line_errors_naming_the_file_and_field() {
    let f32 = PrecisionPolicy::all_f32;
    // The tokenizer has 93 tokens; a table of 90 rows cannot take them.
    let tmp = edited(|c| c["text_config"]["vocab_size"] = 90.into(), &[]);
    let e = import(tmp.path(), f32()).unwrap_err();
    crate::assert_one_line(
        &e,
        &[
            "tokenizer.json",
            "config.json",
            "vocab_size 90",
            "93 tokens",
        ],
    );
    // The tokenizer's length is not the model's sequence.
    let tmp = edited(
        |c| c["text_config"]["max_position_embeddings"] = 20.into(),
        &[],
    );
    let e = import(tmp.path(), f32()).unwrap_err();
    crate::assert_one_line(
        &e,
        &[
            "tokenizer_config.json",
            "model_max_length 16",
            "max_position_embeddings 20",
        ],
    );
    // No tokenizer.
    let tmp = edited(|_| {}, &["tokenizer.json"]);
    let e = import(tmp.path(), f32()).unwrap_err();
    crate::assert_one_line(&e, &["tokenizer.json"]);
    // A full config without its text tower.
    let tmp = edited(
        |c| {
            c.as_object_mut().unwrap().remove("text_config");
        },
        &[],
    );
    let e = import(tmp.path(), f32()).unwrap_err();
    crate::assert_one_line(&e, &["config.json", "text_config"]);
    // Not CLIP's activation.
    let tmp = edited(|c| c["text_config"]["hidden_act"] = "gelu".into(), &[]);
    let e = import(tmp.path(), f32()).unwrap_err();
    crate::assert_one_line(&e, &["config.json", "gelu", "quick_gelu"]);
}
