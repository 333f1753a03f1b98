//! The safetensors loader: round trips, wider stored types (and BF16)
//! loading into FP8 or F32 weights, and every kind of damaged file
//! rejected with an error.

use ipu_layout::{Fp8Format, Precision};
use ipu_package::graph::safetensors::{SafetensorsError, read_values, read_weights, write_values};
use ipu_package::graph::values::{self, ValueSet};
use ipu_package::graph::{Graph, GraphBuilder, Op, TensorKind, parse_fixture};

use crate::fixture_text;

fn tiny() -> Graph {
    parse_fixture(&fixture_text("micro-1l-h32.json")).expect("parses")
}

#[test]
fn weights_round_trip_bit_exactly() {
    let graph = tiny();
    let weights = values::generate_weights(&graph, 21);
    let ids = graph.weights();
    let file = write_values(&graph, &weights, &ids).expect("writes");
    // The header length prefix and 8-byte aligned data.
    let header = u64::from_le_bytes(file[..8].try_into().expect("8 bytes"));
    assert_eq!((8 + header) % 8, 0);
    let back = read_weights(&graph, &file).expect("reads");
    assert_eq!(back, weights);
    // Inputs written too come back through read_values.
    let all = values::generate(&graph, 21);
    let every: Vec<_> = graph
        .tensors()
        .iter()
        .filter(|(_, t)| !t.kind().is_computed())
        .map(|(id, _)| id)
        .collect();
    let file = write_values(&graph, &all, &every).expect("writes");
    assert_eq!(read_values(&graph, &file).expect("reads"), all);
}

/// A one-GEMM graph with an FP8 weight.
fn small_gemm() -> Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.tensor("x", [1, 2], Precision::F16, TensorKind::Input);
    let w = b.tensor(
        "w",
        [2, 3],
        Precision::F8 {
            format: Fp8Format::F143,
            scale: -4,
        },
        TensorKind::Weight,
    );
    let y = b.tensor("y", [1, 3], Precision::F16, TensorKind::Output);
    b.op(Op::Gemm {
        left: x,
        right: w,
        bias: None,
        output: y,
    });
    b.finish().expect("valid")
}

#[test]
fn wider_stored_values_are_rounded_to_the_weight_precision() {
    // Store `w` as F32 through a graph that declares it F32, then load it
    // into the FP8 graph.
    let mut b = GraphBuilder::new("f32");
    let x = b.tensor("x", [1, 2], Precision::F16, TensorKind::Input);
    let w32 = b.tensor("w", [2, 3], Precision::F32, TensorKind::Weight);
    let y = b.tensor("y", [1, 3], Precision::F16, TensorKind::Output);
    b.op(Op::Gemm {
        left: x,
        right: w32,
        bias: None,
        output: y,
    });
    let wide = b.finish().expect("valid");
    let raw = vec![0.1f32, -0.2, 0.3, 1.0, 20.0, -0.0];
    let mut set = ValueSet::new();
    set.insert(w32, raw.clone());
    let file = write_values(&wide, &set, &[w32]).expect("writes");

    let graph = small_gemm();
    let w = graph.tensor_by_name("w").expect("w");
    let loaded = read_weights(&graph, &file).expect("reads");
    let p = graph.tensor(w).precision();
    let expected: Vec<f32> = raw.iter().map(|&x| p.quantize(x)).collect();
    assert_eq!(loaded.get(w).expect("w"), expected.as_slice());
    // 20 saturates at 240 · 2^-4 = 15.
    assert_eq!(expected[4], 15.0);
}

#[test]
fn damaged_files_are_rejected() {
    let graph = small_gemm();
    let w = graph.tensor_by_name("w").expect("w");
    let mut set = ValueSet::new();
    set.insert(w, vec![0.5; 6]);
    let good = write_values(&graph, &set, &[w]).expect("writes");
    assert!(read_weights(&graph, &good).is_ok());

    // Truncated anywhere: never a panic, always an error.
    for cut in 0..good.len() {
        assert!(read_weights(&graph, &good[..cut]).is_err(), "cut at {cut}");
    }
    // An absurd header length.
    let mut huge = good.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        read_values(&graph, &huge),
        Err(SafetensorsError::Format { .. })
    ));

    let with_header = |header: &str| {
        let mut text = header.as_bytes().to_vec();
        while text.len() % 8 != 0 {
            text.push(b' ');
        }
        let mut file = (text.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(&text);
        file.extend_from_slice(&[0x38; 6]);
        file
    };
    let ok = r#"{"w": {"dtype": "F8_E4M3FNUZ", "shape": [2, 3], "data_offsets": [0, 6]}, "__metadata__": {"scale.w": "-4"}}"#;
    assert!(read_weights(&graph, &with_header(ok)).is_ok());
    let cases = [
        (
            r#"{"w": {"dtype": "F8_E4M3FNUZ", "shape": [3, 2], "data_offsets": [0, 6]}, "__metadata__": {"scale.w": "-4"}}"#,
            "shape",
        ),
        (
            r#"{"w": {"dtype": "U8", "shape": [2, 3], "data_offsets": [0, 6]}}"#,
            "dtype",
        ),
        (
            r#"{"w": {"dtype": "F8_E4M3FNUZ", "shape": [2, 3], "data_offsets": [0, 6]}}"#,
            "scale",
        ),
        (
            r#"{"w": {"dtype": "F8_E4M3FNUZ", "shape": [2, 3], "data_offsets": [0, 5]}, "__metadata__": {"scale.w": "-4"}}"#,
            "offsets",
        ),
        (
            r#"{"w": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]}}"#,
            "beyond data",
        ),
        (
            r#"{"v": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]}}"#,
            "missing",
        ),
        (r#"[1, 2]"#, "not an object"),
        (r#"{"w": "#, "not JSON"),
    ];
    for (header, why) in cases {
        let err = read_weights(&graph, &with_header(header)).expect_err(why);
        assert!(!err.to_string().is_empty(), "{why}");
    }
    // Writing values of the wrong length is refused.
    let mut short = ValueSet::new();
    short.insert(w, vec![0.5; 5]);
    assert!(matches!(
        write_values(&graph, &short, &[w]),
        Err(SafetensorsError::Values { found: 5, .. })
    ));
}

#[test]
fn bf16_values_load_exactly_into_f32_weights() {
    // BF16 is the top half of an f32: 1.0, -2.5, the smallest normal
    // 2^-126 and 3.140625 are exact in it.
    let expected = [1.0f32, -2.5, f32::MIN_POSITIVE, 3.140625, 0.0, -0.0];
    let bytes: Vec<u8> = expected
        .iter()
        .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
        .collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, vec![2, 3], &bytes)
        .expect("view");
    let file = safetensors::serialize([("w", view)], None).expect("serialises");

    let mut b = GraphBuilder::new("f32");
    let x = b.tensor("x", [1, 2], Precision::F32, TensorKind::Input);
    let w = b.tensor("w", [2, 3], Precision::F32, TensorKind::Weight);
    let y = b.tensor("y", [1, 3], Precision::F32, TensorKind::Output);
    b.op(Op::Gemm {
        left: x,
        right: w,
        bias: None,
        output: y,
    });
    let graph = b.finish().expect("valid");
    let loaded = read_weights(&graph, &file).expect("reads");
    let got = loaded.get(w).expect("w");
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(expected) {
        assert_eq!(g.to_bits(), e.to_bits());
    }
}
