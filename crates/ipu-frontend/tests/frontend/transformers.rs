//! The graph of a SigLIP checkpoint equals transformers' model: with every
//! tensor in F32, the reference evaluation of each golden checkpoint
//! (`fixtures/checkpoints/`, made by `make_golden.py` with transformers)
//! matches transformers' `last_hidden_state` and `pooler_output` to 1e-5
//! relative, from our own preprocessing of the PNG images and from
//! transformers' pixel values alike.
//!
//! An element passes when `|ours − theirs| ≤ 1e-5·|theirs| + 1e-5·rms`,
//! `rms` the root mean square of transformers' tensor (so that elements
//! that cancel to near zero are judged against the tensor's scale), and
//! the tensor's normalised RMS error is at most 1e-5.

use std::path::{Path, PathBuf};

use ipu_frontend::siglip::{
    Checkpoint, ImportConfig, LAST_HIDDEN, POOLED, PrecisionPolicy, import_checkpoint, patchify,
};
use ipu_package::graph::values::ValueSet;
use ipu_sim::reference::{Tolerance, compare};

fn checkpoints_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/checkpoints")
}

/// A golden tensor (F32) with its shape.
fn golden(dir: &Path, name: &str) -> Option<(Vec<usize>, Vec<f32>)> {
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

const TOLERANCE: Tolerance = Tolerance {
    abs: 0.0,
    rel: 1e-5,
    abs_rms: 1e-5,
    rms: 1e-5,
};

fn import(dir: &Path, batch: u64) -> Checkpoint {
    import_checkpoint(
        dir,
        &ImportConfig {
            batch,
            policy: PrecisionPolicy::all_f32(),
            name: None,
        },
    )
    .expect("imports")
}

/// Evaluates the checkpoint's graph on `input` and compares every output
/// with transformers'; returns `(output, max rel, max abs / max |r|,
/// normalised RMS)` per output.
fn check(checkpoint: &Checkpoint, dir: &Path, input: ValueSet) -> Vec<(String, f32, f32, f32)> {
    let mut values = checkpoint.weights().clone();
    values.extend(input);
    let outputs = ipu_sim::evaluate(checkpoint.graph(), &values).expect("evaluates");
    let graph = checkpoint.graph();
    let mut results = Vec::new();
    for (ours, theirs) in [
        (LAST_HIDDEN, "last_hidden_state"),
        (POOLED, "pooler_output"),
    ] {
        let Some(id) = graph.tensor_by_name(ours) else {
            assert!(
                golden(dir, theirs).is_none(),
                "transformers has {theirs} but the graph has no {ours}"
            );
            continue;
        };
        let (shape, expected) = golden(dir, theirs).expect("golden output");
        let extents: Vec<usize> = graph
            .tensor(id)
            .extents()
            .iter()
            .map(|&e| e as usize)
            .collect();
        assert_eq!(extents, shape, "{ours}");
        let got = outputs.get(id).expect("output");
        let c = compare(&expected, got, TOLERANCE);
        let peak = expected.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        results.push((ours.to_owned(), c.max_rel, c.max_abs / peak, c.rms_error));
        assert!(
            c.pass,
            "{}: {ours} differs from transformers: max rel {:.3e}, max abs {:.3e}, \
             rms {:.3e}, {} violations",
            dir.display(),
            c.max_rel,
            c.max_abs,
            c.rms_error,
            c.violations
        );
    }
    results
}

#[test]
fn f32_graphs_equal_transformers_on_every_golden_checkpoint() {
    let images = [
        checkpoints_dir().join("images/rgb-40x30.png"),
        checkpoints_dir().join("images/rgba-13x11.png"),
    ];
    for name in ["siglip-vision-head", "siglip-full-nohead"] {
        let dir = checkpoints_dir().join(name);
        let checkpoint = import(&dir, 2);

        // From the PNG files through our preprocessing.
        let input = checkpoint.input_values(&images).expect("images");
        for (output, rel, peak_rel, rms) in check(&checkpoint, &dir, input) {
            println!(
                "{name} {output} from images: max rel {rel:.3e}, max abs / max |r| \
                 {peak_rel:.3e}, normalised rms {rms:.3e}"
            );
        }

        // From transformers' own pixel values.
        let (shape, pixels) = golden(&dir, "pixel_values").expect("pixel values");
        let per_image = shape[1] * shape[2] * shape[3];
        let mut patches = Vec::new();
        for image in pixels.chunks_exact(per_image) {
            patchify(checkpoint.config(), image, &mut patches).expect("patchifies");
        }
        let mut input = ValueSet::new();
        input.insert(checkpoint.patches(), patches);
        for (output, rel, peak_rel, rms) in check(&checkpoint, &dir, input) {
            println!(
                "{name} {output} from pixel values: max rel {rel:.3e}, max abs / max |r| \
                 {peak_rel:.3e}, normalised rms {rms:.3e}"
            );
        }
    }
}

#[test]
fn a_batch_of_one_gives_the_first_image_of_the_batch_of_two() {
    // The graph builds at any batch; images do not interact.
    let dir = checkpoints_dir().join("siglip-vision-head");
    let image = checkpoints_dir().join("images/rgb-40x30.png");
    let one = import(&dir, 1);
    let mut values = one.weights().clone();
    values.extend(one.input_values(&[&image]).expect("image"));
    let outputs = ipu_sim::evaluate(one.graph(), &values).expect("evaluates");
    let pooled = outputs
        .get(one.graph().tensor_by_name(POOLED).expect("pooled"))
        .expect("output");
    let (_, expected) = golden(&dir, "pooler_output").expect("golden");
    let c = compare(&expected[..pooled.len()], pooled, TOLERANCE);
    assert!(c.pass, "{c:?}");
}
