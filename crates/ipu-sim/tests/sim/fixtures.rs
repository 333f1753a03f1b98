//! The small fixtures end to end: they evaluate quickly, give finite
//! outputs of sensible size, and the same bits whatever the thread count.

use ipu_package::graph::{Graph, ParseOptions, parse_fixture, parse_fixture_with, values};
use ipu_sim::reference::{Keep, ReferenceConfig};
use ipu_sim::{ReferenceError, evaluate, evaluate_with};

use crate::fixture_text;

pub fn load(name: &str) -> Graph {
    parse_fixture(&fixture_text(name)).expect("fixture parses")
}

#[test]
fn small_fixtures_evaluate_to_finite_sensible_outputs() {
    for name in ["tiny-2l-h64.json", "micro-1l-h32.json"] {
        let graph = load(name);
        let inputs = values::generate(&graph, 7);
        let out = evaluate(&graph, &inputs).expect("evaluates");
        assert_eq!(out.len(), graph.outputs().len(), "{name}");
        for id in graph.outputs() {
            let v = out.get(id).expect("output present");
            assert_eq!(v.len() as u64, graph.tensor(id).element_count());
            assert!(v.iter().all(|x| x.is_finite()), "{name}: non-finite output");
            let rms =
                (v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
            // Layer-normed hidden states have RMS near 1; the pooled head
            // output is a residual sum of O(1) terms.
            assert!(
                (0.1..10.0).contains(&rms),
                "{name}: {} rms {rms}",
                graph.tensor(id).name()
            );
        }
    }
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let graph = load("tiny-2l-h64.json");
    let inputs = values::generate(&graph, 3);
    let many = evaluate(&graph, &inputs).expect("evaluates");
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool")
        .install(|| evaluate(&graph, &inputs).expect("evaluates"));
    for id in graph.outputs() {
        let a: Vec<u32> = many
            .get(id)
            .expect("out")
            .iter()
            .map(|x| x.to_bits())
            .collect();
        let b: Vec<u32> = one
            .get(id)
            .expect("out")
            .iter()
            .map(|x| x.to_bits())
            .collect();
        assert_eq!(a, b);
    }
}

#[test]
fn keep_all_returns_every_computed_tensor_rounded_to_its_precision() {
    let graph = load("micro-1l-h32.json");
    let inputs = values::generate(&graph, 1);
    let config = ReferenceConfig {
        keep: Keep::All,
        ..ReferenceConfig::default()
    };
    let all = evaluate_with(&graph, &inputs, &config).expect("evaluates");
    let computed: Vec<_> = graph
        .tensors()
        .iter()
        .filter(|(_, t)| t.kind().is_computed())
        .collect();
    assert_eq!(all.len(), computed.len());
    for (id, tensor) in computed {
        let v = all.get(id).expect("kept");
        for &x in v {
            assert_eq!(
                tensor.precision().quantize(x).to_bits(),
                x.to_bits(),
                "{}",
                tensor.name()
            );
        }
    }
    // The outputs-only run gives the same output values.
    let outputs = evaluate(&graph, &inputs).expect("evaluates");
    for id in graph.outputs() {
        assert_eq!(outputs.get(id), all.get(id));
    }
}

#[test]
fn a_different_seed_changes_the_outputs() {
    let graph = load("micro-1l-h32.json");
    let a = evaluate(&graph, &values::generate(&graph, 1)).expect("evaluates");
    let b = evaluate(&graph, &values::generate(&graph, 2)).expect("evaluates");
    let id = graph.outputs()[0];
    assert_ne!(a.get(id), b.get(id));
}

#[test]
fn missing_and_misshapen_values_are_reported() {
    let graph = load("micro-1l-h32.json");
    let mut inputs = values::generate(&graph, 1);
    let w = graph.tensor_by_name("enc0.fc1.w").expect("weight");
    let mut short = inputs.get(w).expect("present").to_vec();
    short.pop();
    inputs.insert(w, short);
    match evaluate(&graph, &inputs) {
        Err(ReferenceError::Length {
            tensor,
            expected,
            found,
            ..
        }) => {
            assert_eq!(tensor, w);
            assert_eq!(found as u64 + 1, expected);
        }
        other => panic!("expected a length error, got {other:?}"),
    }
    inputs.remove(w);
    let err = evaluate(&graph, &inputs).expect_err("missing weight");
    assert!(matches!(err, ReferenceError::Missing { tensor, .. } if tensor == w));
    assert!(err.to_string().contains("enc0.fc1.w"), "{err}");
}

#[test]
fn unrounded_inputs_are_rounded_to_their_precision_first() {
    let graph = load("micro-1l-h32.json");
    let exact = values::generate(&graph, 5);
    let mut nudged = exact.clone();
    // Adding far less than half an FP8 step to every weight changes
    // nothing once the evaluator rounds them.
    for id in graph.weights() {
        let v: Vec<f32> = exact
            .get(id)
            .expect("w")
            .iter()
            .map(|x| x * (1.0 + 1e-4))
            .collect();
        nudged.insert(id, v);
    }
    assert_eq!(
        evaluate(&graph, &exact).expect("ok"),
        evaluate(&graph, &nudged).expect("ok")
    );
}

#[test]
fn siglip_at_one_layer_parses_for_the_benchmark() {
    // The benchmark evaluates SigLIP with the layer count overridden to 1;
    // this checks that graph is well formed without running it.
    let options = ParseOptions {
        overrides: vec![("layers".to_owned(), 1)],
    };
    let graph =
        parse_fixture_with(&fixture_text("siglip-so400m-b2.json"), &options).expect("parses");
    assert_eq!(graph.repeats()[0].count(), 1);
}

/// The patch extraction by reshape, transpose and reshape gives exactly
/// the patches a plain loop cuts from the image: the two micro fixtures
/// (same weight names, so the same weights) produce the same bits.
#[test]
fn in_graph_patch_extraction_matches_a_plain_loop() {
    let with_image = load("micro-patchify.json");
    let with_patches = load("micro-1l-h32.json");
    let seed = 8;
    let supplied = values::generate(&with_image, seed);
    let image_id = with_image.tensor_by_name("image").expect("image");
    let image = supplied.get(image_id).expect("image values");

    // Patch (pr, pc) of a [3, 4, 8] image in (channel, row, column) order.
    let (channels, height, width, size) = (3, 4, 8, 2);
    let mut patches = Vec::new();
    for pr in 0..height / size {
        for pc in 0..width / size {
            for c in 0..channels {
                for r in 0..size {
                    for col in 0..size {
                        patches.push(image[(c * height + pr * size + r) * width + pc * size + col]);
                    }
                }
            }
        }
    }
    let mut direct = values::generate(&with_patches, seed);
    direct.insert(
        with_patches.tensor_by_name("patches").expect("patches"),
        patches,
    );

    let a = evaluate(&with_image, &supplied).expect("evaluates");
    let b = evaluate(&with_patches, &direct).expect("evaluates");
    for name in ["last_hidden", "pooled"] {
        let x = a
            .get(with_image.tensor_by_name(name).expect(name))
            .expect(name);
        let y = b
            .get(with_patches.tensor_by_name(name).expect(name))
            .expect(name);
        assert_eq!(x, y, "{name}");
    }
}
