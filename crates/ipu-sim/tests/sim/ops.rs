//! Each op on inputs whose results can be checked by hand.

use ipu_layout::{Fp8Format, Precision};
use ipu_package::graph::{Activation, FP8_PROBABILITIES, Op, SoftmaxPrecision};

use crate::{one_op, run};

const F32: Precision = Precision::F32;
const F16: Precision = Precision::F16;

#[test]
fn gemm_2x2_with_bias() {
    let g = one_op(
        &[(&[2, 2], F32), (&[2, 2], F32), (&[2], F32)],
        (&[2, 2], F32),
        |i, o| Op::Gemm {
            left: i[0],
            right: i[1],
            bias: Some(i[2]),
            output: o,
        },
    );
    // [1 2; 3 4] × [5 6; 7 8] = [19 22; 43 50], plus bias [1, -1].
    let out = run(
        &g,
        &[
            vec![1.0, 2.0, 3.0, 4.0],
            vec![5.0, 6.0, 7.0, 8.0],
            vec![1.0, -1.0],
        ],
    );
    assert_eq!(out, [20.0, 21.0, 44.0, 49.0]);
}

#[test]
fn gemm_batched_left_and_f16_rounding() {
    let g = one_op(
        &[(&[2, 1, 3], F32), (&[3, 1], F32)],
        (&[2, 1, 1], F16),
        |i, o| Op::Gemm {
            left: i[0],
            right: i[1],
            bias: None,
            output: o,
        },
    );
    // 1 + 2^-11 is not an F16 value: it rounds to 1 (ties to even).
    let out = run(
        &g,
        &[
            vec![1.0, 2f32.powi(-11), 0.0, 1.0, 1.0, 1.0],
            vec![1.0, 1.0, 1.0],
        ],
    );
    assert_eq!(out, [1.0, 3.0]);
}

#[test]
fn add_broadcasts_like_numpy() {
    let g = one_op(
        &[(&[2, 1, 3], F32), (&[2, 1], F32)],
        (&[2, 2, 3], F32),
        |i, o| Op::Add {
            left: i[0],
            right: i[1],
            output: o,
        },
    );
    let out = run(&g, &[vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], vec![10.0, 20.0]]);
    assert_eq!(
        out,
        [
            11.0, 12.0, 13.0, 21.0, 22.0, 23.0, 14.0, 15.0, 16.0, 24.0, 25.0, 26.0
        ]
    );
}

#[test]
fn layer_norm_of_a_known_vector() {
    let g = one_op(
        &[(&[1, 4], F32), (&[4], F32), (&[4], F32)],
        (&[1, 4], F32),
        |i, o| Op::LayerNorm {
            input: i[0],
            scale: i[1],
            bias: i[2],
            eps: 1e-6,
            output: o,
        },
    );
    // mean 2.5, population variance 1.25.
    let out = run(
        &g,
        &[
            vec![1.0, 2.0, 3.0, 4.0],
            vec![1.0, 1.0, 2.0, 2.0],
            vec![0.0, 0.5, 0.0, 0.0],
        ],
    );
    let inv = 1.0 / (1.25f64 + 1e-6).sqrt();
    let expected = [
        -1.5 * inv,
        -0.5 * inv + 0.5,
        2.0 * 0.5 * inv,
        2.0 * 1.5 * inv,
    ];
    for (a, b) in out.iter().zip(expected) {
        assert!((f64::from(*a) - b).abs() < 1e-6, "{out:?} vs {expected:?}");
    }
}

#[test]
fn gelu_known_values() {
    let g = one_op(&[(&[4], F32)], (&[4], F32), |i, o| Op::Activation {
        function: Activation::GeluTanh,
        input: i[0],
        output: o,
    });
    let out = run(&g, &[vec![0.0, 1.0, -1.0, 3.0]]);
    let gelu = |x: f64| {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
    };
    for (a, x) in out.iter().zip([0.0, 1.0, -1.0, 3.0]) {
        assert!((f64::from(*a) - gelu(x)).abs() < 1e-6, "gelu({x}) = {a}");
    }
    // The tanh approximation at 1 is 0.841192, not the erf value 0.841345.
    assert!((out[1] - 0.841_192).abs() < 1e-5);
}

/// Attention with `v` the identity returns the softmax probabilities.
fn softmax_probe(softmax: SoftmaxPrecision, output: Precision) -> Vec<f32> {
    let g = one_op(
        &[(&[1, 1, 4], F32), (&[1, 4, 4], F32), (&[1, 4, 4], F32)],
        (&[1, 1, 4], output),
        |i, o| Op::Attention {
            q: i[0],
            k: i[1],
            v: i[2],
            heads: 1,
            softmax,
            mask: ipu_package::graph::AttentionMask::None,
            queries_scaled: false,
            output: o,
        },
    );
    let q = vec![1.0, 0.0, 2.0, 0.0];
    let k = vec![
        1.0, 0.0, 0.0, 0.0, //
        0.0, 0.0, 1.0, 0.0, //
        0.0, 0.0, 0.0, 0.0, //
        1.0, 0.0, 1.0, 0.0,
    ];
    let mut v = vec![0.0; 16];
    for j in 0..4 {
        v[j * 4 + j] = 1.0;
    }
    run(&g, &[q, k, v])
}

#[test]
fn attention_softmax_matches_the_formula_and_sums_to_one() {
    // Scores q·k_j / sqrt(4) = [0.5, 1.0, 0.0, 1.5].
    let scores = [0.5f64, 1.0, 0.0, 1.5];
    let z: f64 = scores.iter().map(|s| s.exp()).sum();
    let p = run_probe_f32();
    for (a, s) in p.iter().zip(scores) {
        assert!((f64::from(*a) - s.exp() / z).abs() < 1e-6, "{p:?}");
    }
    assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    // In F16 the probabilities are F16 values and still sum to 1 within
    // a few F16 ulps.
    let p16 = softmax_probe(SoftmaxPrecision::F16, F32);
    for x in &p16 {
        assert_eq!(F16.quantize(*x), *x);
    }
    assert!(
        (p16.iter().sum::<f32>() - 1.0).abs() < 4.0 * 2f32.powi(-11),
        "{p16:?}"
    );
}

#[test]
fn an_f16_fp8_softmax_rounds_each_exponential_to_fp8_before_the_sum() {
    // Scores [0.5, 1.0, 0.0, 1.5]: exponentials below the maximum e^-1,
    // e^-0.5, e^-1.5 and 1, which F143 at 2^-6 rounds to 24/64, 40/64,
    // 14/64 and 64/64 (steps of 2, 4, 1 and exact).
    let fp8: Vec<f32> = [-1.0f32, -0.5, -1.5, 0.0]
        .iter()
        .map(|s| FP8_PROBABILITIES.quantize(F16.quantize(s.exp())))
        .collect();
    assert_eq!(fp8, [0.375, 0.625, 0.218_75, 1.0]);
    let sum: f32 = fp8.iter().sum();
    let p = softmax_probe(SoftmaxPrecision::F16Fp8, F32);
    let expected: Vec<f32> = fp8.iter().map(|e| F16.quantize(e / sum)).collect();
    assert_eq!(p, expected);
    // The F16 softmax's probabilities differ from them.
    assert_ne!(softmax_probe(SoftmaxPrecision::F16, F32), p);
}

fn run_probe_f32() -> Vec<f32> {
    softmax_probe(SoftmaxPrecision::F32, F32)
}

#[test]
fn attention_heads_use_their_own_columns() {
    // Two heads of width 1 over two key tokens: head 0 prefers token 0,
    // head 1 token 1, by a wide margin.
    let g = one_op(
        &[(&[1, 1, 2], F32), (&[1, 2, 2], F32), (&[1, 2, 2], F32)],
        (&[1, 1, 2], F32),
        |i, o| Op::Attention {
            q: i[0],
            k: i[1],
            v: i[2],
            heads: 2,
            softmax: SoftmaxPrecision::F32,
            mask: ipu_package::graph::AttentionMask::None,
            queries_scaled: false,
            output: o,
        },
    );
    let out = run(
        &g,
        &[
            vec![1.0, 1.0],
            vec![40.0, -40.0, -40.0, 40.0],
            vec![3.0, 5.0, 7.0, 11.0],
        ],
    );
    assert!(
        (out[0] - 3.0).abs() < 1e-6 && (out[1] - 11.0).abs() < 1e-6,
        "{out:?}"
    );
}

#[test]
fn cast_fp8_rounds_and_saturates() {
    let f8 = Precision::F8 {
        format: Fp8Format::F143,
        scale: -2,
    };
    let g = one_op(&[(&[5], F32)], (&[5], f8), |i, o| Op::CastFp8 {
        input: i[0],
        output: o,
    });
    // Scale -2: values are q·2^-2, so the largest is 240/4 = 60. 0.3 is
    // 1.2·2^-2, and in [1, 2) F143 steps by 1/8, so q rounds to 1.25.
    let out = run(&g, &[vec![100.0, -100.0, 0.3, 0.0, -0.0]]);
    assert_eq!(out[0], 60.0);
    assert_eq!(out[1], -60.0);
    assert_eq!(out[2], 0.3125);
    assert_eq!(out[3].to_bits(), 0.0f32.to_bits());
    assert_eq!(out[4].to_bits(), 0.0f32.to_bits());
}

#[test]
fn data_movement_ops() {
    let data: Vec<f32> = (0..6).map(|x| x as f32).collect();
    let t = one_op(&[(&[2, 3], F32)], (&[3, 2], F32), |i, o| Op::Transpose {
        input: i[0],
        perm: vec![1, 0],
        output: o,
    });
    assert_eq!(
        run(&t, std::slice::from_ref(&data)),
        [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    );

    let r = one_op(&[(&[2, 3], F32)], (&[3, 2], F32), |i, o| Op::Reshape {
        input: i[0],
        output: o,
    });
    assert_eq!(run(&r, std::slice::from_ref(&data)), data);

    let s = one_op(&[(&[2, 3], F32)], (&[2, 2], F32), |i, o| Op::Slice {
        input: i[0],
        axis: 1,
        start: 1,
        output: o,
    });
    assert_eq!(run(&s, std::slice::from_ref(&data)), [1.0, 2.0, 4.0, 5.0]);

    let b = one_op(&[(&[1, 3], F32)], (&[2, 2, 3], F32), |i, o| Op::Broadcast {
        input: i[0],
        output: o,
    });
    assert_eq!(
        run(&b, &[vec![1.0, 2.0, 3.0]]),
        [1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    );

    // A rank-3 transpose: [2, 3, 4] with perm [2, 0, 1] gives [4, 2, 3].
    let big: Vec<f32> = (0..24).map(|x| x as f32).collect();
    let t3 = one_op(&[(&[2, 3, 4], F32)], (&[4, 2, 3], F32), |i, o| {
        Op::Transpose {
            input: i[0],
            perm: vec![2, 0, 1],
            output: o,
        }
    });
    let out = run(&t3, &[big]);
    for a in 0..4 {
        for b in 0..2 {
            for c in 0..3 {
                assert_eq!(out[a * 6 + b * 3 + c], (b * 12 + c * 4 + a) as f32);
            }
        }
    }
}

#[test]
fn empty_inner_dimension_gives_the_bias() {
    let g = one_op(
        &[(&[3, 0], F32), (&[0, 2], F32), (&[2], F32)],
        (&[3, 2], F32),
        |i, o| Op::Gemm {
            left: i[0],
            right: i[1],
            bias: Some(i[2]),
            output: o,
        },
    );
    let out = run(&g, &[vec![], vec![], vec![1.5, -2.0]]);
    assert_eq!(out, [1.5, -2.0, 1.5, -2.0, 1.5, -2.0]);
}

#[test]
fn tensors_beyond_the_limit_are_refused_before_allocating() {
    let g = one_op(&[(&[1 << 33], F16)], (&[1 << 33], F16), |i, o| {
        Op::Activation {
            function: Activation::GeluTanh,
            input: i[0],
            output: o,
        }
    });
    let err =
        ipu_sim::evaluate(&g.graph, &ipu_package::graph::ValueSet::new()).expect_err("too large");
    assert!(
        matches!(err, ipu_sim::ReferenceError::TooLarge { .. }),
        "{err}"
    );
}

#[test]
fn gather_picks_rows_by_index_and_refuses_a_bad_one() {
    let table = (0..12).map(|x| x as f32 * 0.5).collect::<Vec<_>>();
    let g = one_op(
        &[(&[4, 3], F32), (&[2, 2], F32)],
        (&[2, 2, 3], F16),
        |i, o| Op::Gather {
            table: i[0],
            indices: i[1],
            output: o,
        },
    );
    let out = run(&g, &[table.clone(), vec![3.0, 0.0, 0.0, 2.0]]);
    assert_eq!(
        out,
        [4.5, 5.0, 5.5, 0.0, 0.5, 1.0, 0.0, 0.5, 1.0, 3.0, 3.5, 4.0]
    );
    for bad in [4.0, -1.0, 1.5, f32::NAN] {
        let mut set = ipu_package::graph::values::ValueSet::new();
        set.insert(g.inputs[0], table.clone());
        set.insert(g.inputs[1], vec![0.0, bad, 1.0, 2.0]);
        let e = ipu_sim::evaluate(&g.graph, &set).expect_err("a bad index is refused");
        let text = e.to_string();
        assert!(
            matches!(
                e,
                ipu_sim::ReferenceError::GatherIndex {
                    position: 1,
                    rows: 4,
                    ..
                }
            ),
            "{text}"
        );
        assert!(text.contains("0..4"), "{text}");
    }
}
