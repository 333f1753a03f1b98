//! Known-bad fixtures: each is rejected with the JSON path of the field at
//! fault, never a panic. The cases mutate the tiny fixture one field at a
//! time; the files under `fixtures/bad/` are the same kinds of mistakes
//! kept as data for command-line tests.

use ipu_package::graph::{
    FixtureError, GraphError, ParseOptions, parse_fixture, parse_fixture_with,
};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::fixture_text;

/// The tiny fixture with `change` applied, parsed.
fn mutated(change: impl FnOnce(&mut Value)) -> Result<ipu_package::Graph, FixtureError> {
    let mut value: Value =
        serde_json::from_str(&fixture_text("tiny-2l-h64.json")).expect("valid JSON");
    change(&mut value);
    parse_fixture(&value.to_string())
}

/// Asserts the error's path and returns the error.
fn rejected_at(change: impl FnOnce(&mut Value), path: &str) -> FixtureError {
    let err = mutated(change).expect_err("the mutation must be rejected");
    assert_eq!(err.path(), Some(path), "{err}");
    // The message starts with the path, so a user sees where to look.
    assert!(err.to_string().starts_with(path), "{err}");
    err
}

// Encoder body ops of the fixtures, by position.
const QKV: usize = 2;
const SLICE_Q: usize = 3;
const ATTENTION: usize = 6;

#[test]
fn malformed_json_gives_line_and_column() {
    let text = fixture_text("tiny-2l-h64.json");
    let cut = &text[..text.len() / 2];
    match parse_fixture(cut) {
        Err(FixtureError::Json { line, column, .. }) => {
            assert!(line > 10 && column >= 1, "line {line} column {column}");
        }
        other => panic!("expected a JSON error, got {other:?}"),
    }
    let err = parse_fixture("{\"schema_version\": 1,, }").expect_err("bad JSON");
    assert!(
        matches!(
            err,
            FixtureError::Json {
                line: 1,
                column: 22,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("line 1, column 22"), "{err}");
    // The JSON reader's error is kept as the cause.
    let cause = std::error::Error::source(&err).expect("a cause");
    assert!(cause.is::<serde_json::Error>(), "{err}");
}

#[test]
fn structural_mistakes_name_their_field() {
    let e = rejected_at(|v| v["schema_version"] = json!(2), "$.schema_version");
    assert!(matches!(e, FixtureError::Version { .. }));
    let e = rejected_at(|v| drop(v.as_object_mut().map(|o| o.remove("layers"))), "$");
    assert!(matches!(
        e,
        FixtureError::MissingField {
            field: "layers",
            ..
        }
    ));
    let e = rejected_at(
        |v| v["layers"][0]["tensors"][1]["colour"] = json!("red"),
        "$.layers[0].tensors[1].colour",
    );
    assert!(matches!(e, FixtureError::UnknownField { .. }));
    let e = rejected_at(
        |v| v["layers"][0]["tensors"][0]["shape"] = json!("abc"),
        "$.layers[0].tensors[0].shape",
    );
    assert!(matches!(e, FixtureError::Type { .. }));
    let e = rejected_at(
        |v| v["layers"][0]["tensors"][0]["shape"][1] = json!("tokns"),
        "$.layers[0].tensors[0].shape[1]",
    );
    assert!(matches!(e, FixtureError::UnknownParam { .. }));
    let e = rejected_at(
        |v| v["layers"][0]["tensors"][0]["shape"][1] = json!(-3),
        "$.layers[0].tensors[0].shape[1]",
    );
    assert!(matches!(e, FixtureError::Type { .. }));
    let e = rejected_at(
        |v| v["layers"][0]["ops"][0]["op"] = json!("conv"),
        "$.layers[0].ops[0].op",
    );
    assert!(matches!(e, FixtureError::Value { .. }));
    let e = rejected_at(
        |v| v["layers"][1]["ops"][ATTENTION]["queries_scaled"] = json!("yes"),
        &format!("$.layers[1].ops[{ATTENTION}].queries_scaled"),
    );
    assert!(matches!(e, FixtureError::Type { .. }));
    let e = rejected_at(
        |v| v["layers"][0]["ops"][1]["inputs"] = json!(["embed.patches8"]),
        "$.layers[0].ops[1].inputs",
    );
    assert!(
        e.to_string().contains("gemm takes 2 or 3 inputs, found 1"),
        "{e}"
    );
    rejected_at(
        |v| v["layers"][0]["tensors"][0]["kind"] = json!("constant"),
        "$.layers[0].tensors[0].kind",
    );
    rejected_at(
        |v| v["layers"][0]["tensors"][0]["precision"] = json!("BF16"),
        "$.layers[0].tensors[0].precision",
    );
    let e = rejected_at(
        |v| {
            drop(
                v["layers"][0]["tensors"][2]
                    .as_object_mut()
                    .map(|o| o.remove("scale")),
            )
        },
        "$.layers[0].tensors[2]",
    );
    assert!(matches!(
        e,
        FixtureError::MissingField { field: "scale", .. }
    ));
    rejected_at(
        |v| v["layers"][0]["tensors"][0]["scale"] = json!(-3),
        "$.layers[0].tensors[0].scale",
    );
    rejected_at(
        |v| v["layers"][0]["tensors"][2]["scale"] = json!(200),
        "$.layers[0].tensors[2].scale",
    );
    rejected_at(
        |v| v["layers"][1]["repeat"] = json!(0),
        "$.layers[1].repeat",
    );
    // A repeat count that would build a graph too large to hold.
    let e = rejected_at(
        |v| v["layers"][1]["repeat"] = json!(1_000_000_000u64),
        "$.layers[1].repeat",
    );
    assert!(e.to_string().contains("lower the repeat count"), "{e}");
    rejected_at(
        |v| v["layers"][1]["ops"][ATTENTION]["softmax"] = json!("F8"),
        "$.layers[1].ops[6].softmax",
    );
    // An attribute that belongs to another op kind.
    rejected_at(
        |v| v["layers"][1]["ops"][QKV]["eps"] = json!(1e-6),
        "$.layers[1].ops[2].eps",
    );
}

#[test]
fn names_and_templates() {
    let e = rejected_at(
        |v| v["layers"][1]["ops"][SLICE_Q]["inputs"][0] = json!("enc{i}.qvk"),
        "$.layers[1].ops[3].inputs[0]",
    );
    match &e {
        FixtureError::UnknownTensor {
            name, iteration, ..
        } => {
            assert_eq!(name, "enc0.qvk");
            assert_eq!(iteration.0, Some(0));
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("(repeat iteration 0)"), "{e}");
    let e = rejected_at(
        |v| {
            v["layers"][0]["tensors"]
                .as_array_mut()
                .expect("array")
                .push(json!({"name": "x0", "shape": [1], "precision": "F16", "kind": "activation"}))
        },
        "$.layers[0].tensors[7].name",
    );
    assert!(
        matches!(&e, FixtureError::DuplicateTensor { first_path, .. } if first_path == "$.layers[0].tensors[6]"),
        "{e:?}"
    );
    rejected_at(
        |v| v["layers"][1]["tensors"][0]["name"] = json!("enc{j}.ln1.g"),
        "$.layers[1].tensors[0].name",
    );
    rejected_at(
        |v| v["layers"][0]["tensors"][0]["name"] = json!("patches{i}"),
        "$.layers[0].tensors[0].name",
    );
    rejected_at(
        |v| v["layers"][1]["ops"][0]["inputs"][0] = json!("x{i-1}"),
        "$.layers[1].ops[0].inputs[0]",
    );
    rejected_at(
        |v| v["layers"][1]["ops"][0]["inputs"][0] = json!("x{i"),
        "$.layers[1].ops[0].inputs[0]",
    );
    rejected_at(
        |v| v["layers"][1]["ops"][0]["inputs"][0] = json!("x}"),
        "$.layers[1].ops[0].inputs[0]",
    );
    // A body op reading a tensor of a later iteration is an unknown tensor
    // at the time it is read.
    rejected_at(
        |v| v["layers"][1]["ops"][0]["inputs"][0] = json!("x{i+2}"),
        "$.layers[1].ops[0].inputs[0]",
    );
}

fn graph_error(e: &FixtureError) -> &GraphError {
    match e {
        FixtureError::Graph { source, .. } => source,
        other => panic!("expected a graph error, got {other:?}"),
    }
}

#[test]
fn graph_rules_map_to_json_paths() {
    // Inconsistent shapes: the QKV weight declared [hidden, hidden].
    let e = rejected_at(
        |v| v["layers"][1]["tensors"][4]["shape"] = json!(["hidden", "hidden"]),
        "$.layers[1].ops[2].inputs[1]",
    );
    assert!(matches!(graph_error(&e), GraphError::Shape { .. }));
    assert!(
        e.to_string().contains("enc0.qkv.w") && e.to_string().contains("(repeat iteration 0)"),
        "{e}"
    );
    // Sizes that overflow.
    let e = rejected_at(
        |v| v["layers"][0]["tensors"][0]["shape"] = json!([1u64 << 40, 1u64 << 40, 48]),
        "$.layers[0].tensors[0].shape",
    );
    assert!(matches!(graph_error(&e), GraphError::Overflow { .. }));
    // Attributes.
    let e = rejected_at(
        |v| v["layers"][1]["ops"][ATTENTION]["heads"] = json!(5),
        "$.layers[1].ops[6].heads",
    );
    assert!(matches!(
        graph_error(&e),
        GraphError::Attribute {
            attribute: "heads",
            ..
        }
    ));
    rejected_at(
        |v| v["layers"][1]["ops"][0]["eps"] = json!(-1.0),
        "$.layers[1].ops[0].eps",
    );
    rejected_at(
        |v| v["layers"][1]["ops"][SLICE_Q]["start"] = json!(150),
        "$.layers[1].ops[3].start",
    );
    rejected_at(
        |v| v["layers"][1]["ops"][SLICE_Q]["axis"] = json!(3),
        "$.layers[1].ops[3].axis",
    );
    // A cast whose output is not FP8.
    let e = rejected_at(
        |v| {
            v["layers"][1]["tensors"][3]["precision"] = json!("F16");
            drop(
                v["layers"][1]["tensors"][3]
                    .as_object_mut()
                    .map(|o| o.remove("scale")),
            );
        },
        "$.layers[1].ops[1].output",
    );
    assert!(matches!(graph_error(&e), GraphError::Precision { .. }));
    // Topology: an op listed before the op that produces its input.
    let e = rejected_at(
        |v| {
            v["layers"][0]["ops"]
                .as_array_mut()
                .expect("ops")
                .swap(1, 2)
        },
        "$.layers[0].ops[1].inputs[0]",
    );
    assert!(matches!(
        graph_error(&e),
        GraphError::ReadBeforeWrite { .. }
    ));
    // Writing a weight.
    let e = rejected_at(
        |v| v["layers"][0]["ops"][2]["output"] = json!("pos"),
        "$.layers[0].ops[2].output",
    );
    assert!(matches!(
        graph_error(&e),
        GraphError::InPlace { .. } | GraphError::WritesSupplied { .. }
    ));
    let e = rejected_at(
        |v| v["layers"][0]["ops"][1]["output"] = json!("pos"),
        "$.layers[0].ops[1].output",
    );
    assert!(matches!(graph_error(&e), GraphError::WritesSupplied { .. }));
    // An activation nobody writes.
    let e = rejected_at(
        |v| {
            v["layers"][0]["tensors"].as_array_mut().expect("array").push(json!({"name": "orphan", "shape": [1], "precision": "F16", "kind": "activation"}))
        },
        "$.layers[0].tensors[7].name",
    );
    assert!(matches!(graph_error(&e), GraphError::NeverWritten { .. }));
    // Two writers.
    let e = rejected_at(
        |v| v["layers"][0]["ops"][2]["output"] = json!("embed.y"),
        "$.layers[0].ops[2].output",
    );
    assert!(matches!(
        graph_error(&e),
        GraphError::InPlace { .. } | GraphError::WrittenTwice { .. }
    ));
}

#[test]
fn overrides_are_checked() {
    let text = fixture_text("tiny-2l-h64.json");
    let bad = ParseOptions {
        overrides: vec![("batchsize".to_owned(), 4)],
    };
    let e = parse_fixture_with(&text, &bad).expect_err("unknown override");
    assert!(matches!(e, FixtureError::UnknownOverride { .. }));
    assert!(e.to_string().contains("batch"), "{e}");
    // An override that breaks a shape rule is reported like a bad field.
    let heads = ParseOptions {
        overrides: vec![("heads".to_owned(), 7)],
    };
    let e = parse_fixture_with(&text, &heads).expect_err("7 does not divide 64");
    assert_eq!(e.path(), Some("$.layers[1].ops[6].heads"));
}

#[test]
fn shipped_bad_fixtures_are_rejected_with_their_paths() {
    let cases = [
        ("bad/malformed.json", None),
        (
            "bad/unknown-tensor.json",
            Some("$.layers[1].ops[6].inputs[1]"),
        ),
        (
            "bad/shape-mismatch.json",
            Some("$.layers[1].ops[12].inputs[1]"),
        ),
        ("bad/overflow.json", Some("$.layers[0].tensors[0].shape")),
        ("bad/future-version.json", Some("$.schema_version")),
    ];
    for (name, path) in cases {
        let err = parse_fixture(&fixture_text(name)).expect_err(name);
        assert_eq!(err.path(), path, "{name}: {err}");
        if path.is_none() {
            assert!(matches!(err, FixtureError::Json { .. }), "{name}: {err}");
        }
    }
}

/// Every JSON path of a value, depth first.
fn paths(value: &Value, prefix: Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    out.push(prefix.clone());
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let mut p = prefix.clone();
                p.push(PathStep::Key(k.clone()));
                paths(v, p, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let mut p = prefix.clone();
                p.push(PathStep::Index(i));
                paths(v, p, out);
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn at<'a>(value: &'a mut Value, path: &[PathStep]) -> &'a mut Value {
    path.iter().fold(value, |v, step| match step {
        PathStep::Key(k) => &mut v[k.as_str()],
        PathStep::Index(i) => &mut v[*i],
    })
}

fn replacement() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(-1)),
        Just(json!(0)),
        Just(json!(1)),
        Just(json!(3)),
        Just(json!(1u64 << 40)),
        Just(json!(u64::MAX)),
        Just(json!(1.5)),
        Just(json!("x")),
        Just(json!("hidden")),
        Just(json!("x{i+1}")),
        Just(json!("F143")),
        Just(json!([])),
        Just(json!({})),
        Just(json!(["hidden", "hidden"])),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Replacing any one field of a good fixture with an arbitrary value
    /// never panics: the parser either accepts a valid graph or names a
    /// JSON path (or the override).
    #[test]
    fn any_single_field_mutation_is_handled(pick in any::<prop::sample::Index>(), new in replacement()) {
        let mut value: Value = serde_json::from_str(&fixture_text("micro-1l-h32.json")).expect("valid JSON");
        let mut all = Vec::new();
        paths(&value, Vec::new(), &mut all);
        let path = &all[pick.index(all.len())];
        *at(&mut value, path) = new;
        match parse_fixture(&value.to_string()) {
            Ok(graph) => prop_assert!(!graph.ops().is_empty()),
            Err(e) => prop_assert!(e.path().is_some(), "{e}"),
        }
    }

    /// Cutting or corrupting the text anywhere gives an error, not a panic.
    #[test]
    fn damaged_text_is_handled(cut in 0usize..12_000, byte in any::<u8>()) {
        let text = fixture_text("micro-1l-h32.json");
        let cut = cut.min(text.len());
        let mut bytes = text.as_bytes().to_vec();
        bytes.truncate(cut);
        // A cut that removes only trailing whitespace leaves the whole
        // document.
        let whole = text[..cut].trim_end() == text.trim_end();
        prop_assert!(parse_fixture(&String::from_utf8_lossy(&bytes)).is_err() || whole);
        let mut corrupted = text.into_bytes();
        if let Some(b) = corrupted.get_mut(cut) {
            *b = byte;
        }
        let _ = parse_fixture(&String::from_utf8_lossy(&corrupted));
    }
}

// The encoder body's GELU and its output tensor, by position.
const GELU: usize = 13;
const GELU_OUT: usize = 23;

#[test]
fn every_activation_reads_and_is_checked_like_the_gelu() {
    for name in ["gelu", "gelu_erf", "quick_gelu", "tanh"] {
        let graph = mutated(|v| v["layers"][1]["ops"][GELU]["op"] = json!(name)).expect(name);
        let kinds: Vec<&str> = graph.ops().iter().map(|(_, op)| op.kind_name()).collect();
        assert!(kinds.contains(&name), "{name}: {kinds:?}");
        // One input only.
        let e = rejected_at(
            |v| {
                v["layers"][1]["ops"][GELU]["op"] = json!(name);
                v["layers"][1]["ops"][GELU]["inputs"] = json!(["enc{i}.fc1", "enc{i}.fc1"]);
            },
            "$.layers[1].ops[13].inputs",
        );
        assert!(
            e.to_string()
                .contains(&format!("{name} takes 1 inputs, found 2")),
            "{e}"
        );
        // No attributes: the function is the op's name.
        let e = rejected_at(
            |v| {
                v["layers"][1]["ops"][GELU]["op"] = json!(name);
                v["layers"][1]["ops"][GELU]["approximate"] = json!("none");
            },
            "$.layers[1].ops[13].approximate",
        );
        assert!(matches!(e, FixtureError::UnknownField { .. }), "{e:?}");
        // An FP8 result: only casts produce FP8.
        let e = rejected_at(
            |v| {
                v["layers"][1]["ops"][GELU]["op"] = json!(name);
                v["layers"][1]["tensors"][GELU_OUT]["precision"] = json!("F143");
                v["layers"][1]["tensors"][GELU_OUT]["scale"] = json!(-4);
            },
            "$.layers[1].ops[13].output",
        );
        assert!(
            matches!(graph_error(&e), GraphError::Precision { .. }),
            "{e}"
        );
        // A result of another shape.
        let e = rejected_at(
            |v| {
                v["layers"][1]["ops"][GELU]["op"] = json!(name);
                v["layers"][1]["tensors"][GELU_OUT]["shape"] = json!(["batch", "tokens", "hidden"]);
            },
            "$.layers[1].ops[13].output",
        );
        assert!(matches!(graph_error(&e), GraphError::Shape { .. }), "{e}");
    }
    // The spellings are exact: no other case, no transformers aliases.
    for other in ["Gelu", "gelu_new", "gelu_pytorch_tanh", "relu"] {
        let e = rejected_at(
            |v| v["layers"][1]["ops"][GELU]["op"] = json!(other),
            "$.layers[1].ops[13].op",
        );
        assert!(e.to_string().contains("gelu_erf, quick_gelu, tanh"), "{e}");
    }
}
