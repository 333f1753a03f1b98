//! The shipped fixtures parse, validate, keep their repeats, have the
//! parameter counts WORKLOAD.md gives for SigLIP so400m, and read back as
//! the same graph when written as fixtures.

use ipu_layout::{Fp8Format, Precision};
use ipu_package::graph::{
    Activation, AttentionMask, FixtureError, Graph, Op, ParseOptions, TensorKind, parse_fixture,
    parse_fixture_with, write_fixture,
};

use crate::fixture_text;

fn siglip() -> Graph {
    parse_fixture(&fixture_text("siglip-so400m-b2.json")).expect("SigLIP fixture parses")
}

fn weight_elements(graph: &Graph, ids: &[ipu_package::TensorId]) -> u64 {
    ids.iter().map(|&t| graph.tensor(t).element_count()).sum()
}

#[test]
fn siglip_parameter_counts_match_the_model() {
    let graph = siglip();
    assert_eq!(graph.parameter_count(), 428_225_600);

    let repeats = graph.repeats();
    assert_eq!(repeats.len(), 1);
    let encoder = &repeats[0];
    assert_eq!(encoder.name(), "encoder");
    assert_eq!(encoder.count(), 27);
    for k in 0..27 {
        let weights = graph.weights_read_by(encoder.iteration_ops(k));
        assert_eq!(weight_elements(&graph, &weights), 15_239_504, "layer {k}");
    }

    let head: Vec<_> = graph
        .weights()
        .into_iter()
        .filter(|&t| graph.tensor(t).name().starts_with("head."))
        .collect();
    assert_eq!(weight_elements(&graph, &head), 15_238_352);

    // What is left: patch embedding with bias, position embedding, post-LN.
    let rest = 428_225_600 - 27 * 15_239_504 - 15_238_352;
    assert_eq!(rest, (588 * 1152 + 1152) + 729 * 1152 + 2 * 1152);
}

#[test]
fn siglip_has_the_workload_structure() {
    let graph = siglip();
    let t = |name: &str| {
        graph.tensor(
            graph
                .tensor_by_name(name)
                .unwrap_or_else(|| panic!("{name}")),
        )
    };
    assert_eq!(t("patches").extents(), &[2, 729, 588]);
    assert_eq!(t("patches").kind(), TensorKind::Input);
    assert_eq!(t("pos").extents(), &[729, 1152]);
    assert_eq!(t("enc0.qkv.w").extents(), &[1152, 3456]);
    assert_eq!(t("enc26.fc1.w").extents(), &[1152, 4304]);
    assert_eq!(t("enc26.fc2.w").extents(), &[4304, 1152]);
    assert_eq!(t("x27").extents(), &[2, 729, 1152]);
    assert_eq!(t("head.probe").extents(), &[1, 1, 1152]);
    assert_eq!(t("pooled").extents(), &[2, 1152]);
    // Every weight is FP8 F143 with its own power-of-two scale; every
    // computed tensor is F16 or an FP8 cast feeding a GEMM.
    for (_, tensor) in graph.tensors().iter() {
        match tensor.kind() {
            TensorKind::Weight => assert!(
                matches!(
                    tensor.precision(),
                    Precision::F8 {
                        format: Fp8Format::F143,
                        ..
                    }
                ),
                "{}",
                tensor.name()
            ),
            TensorKind::Input | TensorKind::Output => {
                assert_eq!(tensor.precision(), Precision::F16)
            }
            TensorKind::Activation => {}
        }
    }
    let outputs: Vec<_> = graph
        .outputs()
        .iter()
        .map(|&t| graph.tensor(t).name().to_owned())
        .collect();
    assert_eq!(outputs, ["last_hidden", "pooled"]);
    // 3 embedding ops, 17 per layer, 1 post-LN, 17 in the head.
    assert_eq!(graph.ops().len(), 3 + 27 * 17 + 1 + 17);
    let mut attention = 0;
    for op in graph.ops().values() {
        match op {
            Op::LayerNorm { eps, .. } => assert_eq!(*eps, 1e-6),
            Op::Attention { heads, .. } => {
                assert_eq!(*heads, 16);
                attention += 1;
            }
            Op::Gemm { left, .. } => assert!(graph.tensor(*left).precision().is_fp8()),
            _ => {}
        }
    }
    assert_eq!(attention, 28);
}

#[test]
fn repeat_iterations_chain_and_shift() {
    let graph = siglip();
    let encoder = &graph.repeats()[0];
    assert_eq!(encoder.ops_per_iteration(), 17);
    // The first op of each iteration is its first layer norm, which reads
    // the previous iteration's output.
    for k in 0..27u32 {
        let first = encoder.iteration_ops(k).start;
        let op = &graph.ops().values()[first];
        let Op::LayerNorm { input, .. } = op else {
            panic!("iteration {k} starts with {op:?}");
        };
        assert_eq!(graph.tensor(*input).name(), format!("x{k}"));
        let (repeat, iteration, position) = graph
            .repeat_of_op(ipu_package::OpId::from_u32(first as u32))
            .expect("inside the repeat");
        assert_eq!((repeat.name(), iteration, position), ("encoder", k, 0));
    }
    assert_eq!(encoder.iteration_ops(27), 0..0);
    // One carry: x0 into the first iteration, x{i+1} out of each.
    let x0 = graph.tensor_by_name("x0").expect("x0");
    let &[carry] = encoder.carries() else {
        panic!("carries {:?}", encoder.carries());
    };
    assert_eq!(carry.initial, x0);
    for k in 0..27 {
        let out = encoder.body_tensor(k, carry.body_tensor).expect("in range");
        assert_eq!(graph.tensor(out).name(), format!("x{}", k + 1));
    }
    let owned = encoder.iteration_tensors(3);
    assert!(
        graph.tensors().values()[owned.clone()]
            .iter()
            .all(|t| t.name().starts_with("enc3.") || t.name() == "x4")
    );
}

#[test]
fn small_fixtures_share_the_structure_and_stay_small() {
    for (name, layers, hidden) in [("tiny-2l-h64.json", 2, 64), ("micro-1l-h32.json", 1, 32)] {
        let graph = parse_fixture(&fixture_text(name)).expect(name);
        assert_eq!(graph.repeats()[0].count(), layers);
        assert_eq!(
            graph.ops().len(),
            3 + 17 * layers as usize + 1 + 17,
            "{name}"
        );
        let x0 = graph.tensor(graph.tensor_by_name("x0").expect("x0"));
        assert_eq!(*x0.extents().last().expect("rank 3"), hidden);
        let biggest = graph
            .tensors()
            .values()
            .iter()
            .map(|t| t.bytes())
            .max()
            .unwrap_or(0);
        assert!(
            biggest <= 64 * 1024,
            "{name}: largest tensor {biggest} bytes"
        );
    }
}

#[test]
fn overrides_change_batch_and_layer_count() {
    let options = ParseOptions {
        overrides: vec![("batch".to_owned(), 5), ("layers".to_owned(), 1)],
    };
    let graph =
        parse_fixture_with(&fixture_text("siglip-so400m-b2.json"), &options).expect("parses");
    assert_eq!(graph.repeats()[0].count(), 1);
    let pooled = graph.tensor(graph.tensor_by_name("pooled").expect("pooled"));
    assert_eq!(pooled.extents(), &[5, 1152]);
    assert_eq!(graph.parameter_count(), 428_225_600 - 26 * 15_239_504);
    // The post layer norm reads x{layers}, which follows the override.
    assert!(graph.tensor_by_name("x1").is_some());
    assert!(graph.tensor_by_name("x2").is_none());
    // A single iteration still knows its carry.
    assert_eq!(graph.repeats()[0].carries().len(), 1);
}

#[test]
fn the_patchify_variant_extracts_patches_in_the_graph() {
    let graph = parse_fixture(&fixture_text("micro-patchify.json")).expect("parses");
    let image = graph.tensor(graph.tensor_by_name("image").expect("image"));
    assert_eq!(image.extents(), &[1, 3, 4, 8]);
    assert_eq!(image.kind(), TensorKind::Input);
    assert!(matches!(
        graph.op(ipu_package::OpId::from_u32(1)),
        Op::Transpose { perm, .. } if perm == &[0, 2, 4, 1, 3, 5]
    ));
    // The rest is micro-1l-h32: three more ops, the same parameters.
    let micro = parse_fixture(&fixture_text("micro-1l-h32.json")).expect("parses");
    assert_eq!(graph.ops().len(), micro.ops().len() + 3);
    assert_eq!(graph.parameter_count(), micro.parameter_count());
}

#[test]
fn the_siglip_name_carries_its_batch() {
    assert_eq!(siglip().name(), "siglip-so400m-patch14-384-b2");
    let b4 = ParseOptions {
        overrides: vec![("batch".to_owned(), 4)],
    };
    let graph = parse_fixture_with(&fixture_text("siglip-so400m-b2.json"), &b4).unwrap();
    assert_eq!(graph.name(), "siglip-so400m-patch14-384-b4");
    // A model name naming an unknown parameter is a template error.
    let text = fixture_text("tiny-2l-h64.json").replacen(
        "\"name\": \"tiny-2l-h64\"",
        "\"name\": \"tiny-{nope}\"",
        1,
    );
    assert!(matches!(
        parse_fixture(&text),
        Err(ipu_package::graph::FixtureError::Template { .. })
    ));
}

/// Whether two graphs are the same, id by id.
fn assert_same(a: &Graph, b: &Graph) {
    assert_eq!(a.name(), b.name());
    assert_eq!(a.tensors().values(), b.tensors().values());
    assert_eq!(a.ops().values(), b.ops().values());
    assert_eq!(a.repeats(), b.repeats());
}

#[test]
fn every_fixture_written_back_reads_as_the_same_graph() {
    for name in [
        "siglip-so400m-b2.json",
        "tiny-2l-h64.json",
        "micro-1l-h32.json",
        "micro-patchify.json",
        "micro-text-1l-h32.json",
    ] {
        let text = fixture_text(name);
        // One layer (a repeat of one iteration, whose carry the writer
        // must still express) and the fixture's own count.
        let overrides: &[&[(&str, u64)]] = &[&[], &[("layers", 1)], &[("layers", 3)]];
        for o in overrides {
            let options = ParseOptions {
                overrides: o.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            };
            let Ok(graph) = parse_fixture_with(&text, &options) else {
                continue;
            };
            let written = write_fixture(&graph).unwrap_or_else(|e| panic!("{name} {o:?}: {e}"));
            let back = parse_fixture(&written).expect("the written fixture parses");
            assert_same(&graph, &back);
            assert_eq!(
                write_fixture(&back).expect("writes"),
                written,
                "{name} {o:?}"
            );
            assert!(!written.contains("\"params\""), "numbers only");
        }
    }
}

#[test]
fn softmax_precisions_read_as_fixtures_name_them() {
    use ipu_package::graph::SoftmaxPrecision;
    for p in SoftmaxPrecision::ALL {
        assert_eq!(SoftmaxPrecision::from_name(p.name()), Some(p));
    }
    assert_eq!(SoftmaxPrecision::from_name("F8"), None);
    // FP8 values turn an F16 softmax into F16-FP8 and back; F32 stays.
    let f16 = SoftmaxPrecision::F16;
    assert_eq!(f16.with_fp8_values(true), SoftmaxPrecision::F16Fp8);
    assert_eq!(
        SoftmaxPrecision::F16Fp8.with_fp8_values(false),
        SoftmaxPrecision::F16
    );
    assert_eq!(
        SoftmaxPrecision::F32.with_fp8_values(true),
        SoftmaxPrecision::F32
    );
    // A fixture naming another precision is refused with the names.
    let text =
        fixture_text("tiny-2l-h64.json").replacen("\"softmax\": \"F16\"", "\"softmax\": \"F8\"", 1);
    let e = parse_fixture(&text).expect_err("F8 is no softmax precision");
    assert!(e.to_string().contains("use F16, F32 or F16-FP8"), "{e}");
}

#[test]
fn graphs_the_fixture_format_cannot_express_are_refused() {
    use ipu_package::graph::{Carry, GraphBuilder, OpId, Repeat, WriteError};

    // A two-iteration chain; `names` gives iteration k's weight name.
    let chain = |names: [&str; 2]| {
        let mut b = GraphBuilder::new("chain");
        let x = b.tensor("x0", [2, 4], Precision::F16, TensorKind::Input);
        let first = b.next_tensor();
        let mut prev = x;
        for (i, w) in names.iter().enumerate() {
            let w = b.tensor(*w, [4], Precision::F16, TensorKind::Weight);
            let y = b.tensor(
                format!("x{}", i + 1),
                [2, 4],
                Precision::F16,
                TensorKind::Activation,
            );
            b.op(Op::Add {
                left: prev,
                right: w,
                output: y,
            });
            prev = y;
        }
        let carry = Carry {
            initial: x,
            body_tensor: 1,
        };
        b.repeat(
            Repeat::new("layers", 2, OpId::from_u32(0), 1, first, 2).with_carries(vec![carry]),
        );
        let out = b.tensor("out", [2, 4], Precision::F16, TensorKind::Output);
        b.op(Op::Activation {
            function: Activation::GeluTanh,
            input: prev,
            output: out,
        });
        b.finish().expect("valid graph")
    };
    let good = write_fixture(&chain(["w0", "w1"])).expect("templated names write");
    assert!(
        good.contains("\"w{i}\"") && good.contains("\"x{i+1}\""),
        "{good}"
    );
    assert!(matches!(
        write_fixture(&chain(["bias", "scale"])),
        Err(WriteError::Template { .. })
    ));
    assert!(matches!(
        write_fixture(&chain(["w{0}", "w{1}"])),
        Err(WriteError::Brace { .. })
    ));
}

#[test]
fn every_activation_is_written_back_by_its_name() {
    let text = fixture_text("tiny-2l-h64.json");
    // The existing spelling `gelu` is the tanh form.
    let graph = parse_fixture(&text).expect("parses");
    let functions = |g: &Graph| -> Vec<Activation> {
        g.ops()
            .iter()
            .filter_map(|(_, op)| match op {
                Op::Activation { function, .. } => Some(*function),
                _ => None,
            })
            .collect()
    };
    assert_eq!(functions(&graph), [Activation::GeluTanh; 3]);
    for function in Activation::ALL {
        let edited = text.replace(
            "\"op\": \"gelu\"",
            &format!("\"op\": \"{}\"", function.name()),
        );
        let graph = parse_fixture(&edited).expect("parses");
        assert_eq!(functions(&graph), [function; 3]);
        let written = write_fixture(&graph).expect("writes");
        assert!(
            written.contains(&format!("\"op\": \"{}\"", function.name())),
            "{written}"
        );
        let back = parse_fixture(&written).expect("the written fixture parses");
        assert_same(&graph, &back);
        assert_eq!(functions(&back), [function; 3]);
    }
}

#[test]
fn an_attention_mask_is_read_written_back_and_defaults_to_none() {
    let text = fixture_text("micro-text-1l-h32.json");
    let masks = |g: &Graph| -> Vec<AttentionMask> {
        g.ops()
            .iter()
            .filter_map(|(_, op)| match op {
                Op::Attention { mask, .. } => Some(*mask),
                _ => None,
            })
            .collect()
    };
    // No `mask` key: the unmasked attention, written back without one.
    let graph = parse_fixture(&text).expect("parses");
    assert_eq!(masks(&graph), [AttentionMask::None]);
    assert!(!write_fixture(&graph).expect("writes").contains("\"mask\""));
    let causal = text.replace(
        "\"op\": \"attention\",",
        "\"op\": \"attention\", \"mask\": \"causal\",",
    );
    let graph = parse_fixture(&causal).expect("parses");
    assert_eq!(masks(&graph), [AttentionMask::Causal]);
    let written = write_fixture(&graph).expect("writes");
    assert!(written.contains("\"mask\": \"causal\""), "{written}");
    let back = parse_fixture(&written).expect("the written fixture parses");
    assert_same(&graph, &back);
    assert_eq!(masks(&back), [AttentionMask::Causal]);
    // An unknown mask is a typed error naming the field.
    let bad = text.replace(
        "\"op\": \"attention\",",
        "\"op\": \"attention\", \"mask\": \"diagonal\",",
    );
    match parse_fixture(&bad) {
        Err(FixtureError::Value { path, message }) => {
            assert!(path.ends_with("mask"), "{path}");
            assert!(message.contains("diagonal"), "{message}");
        }
        other => panic!("expected a value error, got {other:?}"),
    }
}
