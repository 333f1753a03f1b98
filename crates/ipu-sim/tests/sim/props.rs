//! Properties of the reference ops on generated shapes and values.

use ipu_layout::Precision;
use ipu_package::graph::{Op, SoftmaxPrecision};
use proptest::prelude::*;

use crate::{one_op, run};

const F32: Precision = Precision::F32;

fn values(n: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-4.0f32..4.0, n)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// GEMM matches an f64 naive product to f32 accuracy.
    #[test]
    fn gemm_matches_naive_f64((m, k, n, a, b) in (1usize..6, 1usize..40, 1usize..6).prop_flat_map(|(m, k, n)| {
        (Just(m), Just(k), Just(n), values(m * k), values(k * n))
    })) {
        let g = one_op(&[(&[m as u64, k as u64], F32), (&[k as u64, n as u64], F32)], (&[m as u64, n as u64], F32),
            |i, o| Op::Gemm { left: i[0], right: i[1], bias: None, output: o });
        let out = run(&g, &[a.clone(), b.clone()]);
        for i in 0..m {
            for j in 0..n {
                let exact: f64 = (0..k).map(|kk| f64::from(a[i * k + kk]) * f64::from(b[kk * n + j])).sum();
                let bound: f64 = (0..k).map(|kk| (f64::from(a[i * k + kk]) * f64::from(b[kk * n + j])).abs()).sum::<f64>() * 1e-6 + 1e-6;
                prop_assert!((f64::from(out[i * n + j]) - exact).abs() <= bound);
            }
        }
    }

    /// Transposing with a permutation and then its inverse gives the input.
    #[test]
    fn transpose_round_trips(extents in prop::collection::vec(1u64..4, 1..5), seed in any::<u64>()) {
        let rank = extents.len();
        let mut perm: Vec<u32> = (0..rank as u32).collect();
        // A seeded Fisher–Yates shuffle.
        let mut s = seed;
        for i in (1..rank).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            perm.swap(i, (s >> 33) as usize % (i + 1));
        }
        let mut inverse = vec![0u32; rank];
        for (a, &p) in perm.iter().enumerate() {
            inverse[p as usize] = a as u32;
        }
        let permuted: Vec<u64> = perm.iter().map(|&p| extents[p as usize]).collect();
        let data: Vec<f32> = (0..extents.iter().product::<u64>()).map(|x| x as f32).collect();
        let t = one_op(&[(&extents, F32)], (&permuted, F32), |i, o| Op::Transpose { input: i[0], perm: perm.clone(), output: o });
        let back = one_op(&[(&permuted, F32)], (&extents, F32), |i, o| Op::Transpose { input: i[0], perm: inverse.clone(), output: o });
        let there = run(&t, std::slice::from_ref(&data));
        prop_assert_eq!(run(&back, &[there]), data);
    }

    /// Broadcast addition is commutative.
    #[test]
    fn add_commutes((a_shape, b_shape) in (prop::collection::vec(prop_oneof![Just(1u64), Just(3)], 1..4), prop::collection::vec(prop_oneof![Just(1u64), Just(3)], 1..4))) {
        let out = ipu_package::graph::broadcast_shapes(&a_shape, &b_shape).expect("1 and 3 broadcast");
        let a: Vec<f32> = (0..a_shape.iter().product::<u64>()).map(|x| x as f32).collect();
        let b: Vec<f32> = (0..b_shape.iter().product::<u64>()).map(|x| 100.0 * x as f32).collect();
        let ab = one_op(&[(&a_shape, F32), (&b_shape, F32)], (&out, F32), |i, o| Op::Add { left: i[0], right: i[1], output: o });
        let ba = one_op(&[(&b_shape, F32), (&a_shape, F32)], (&out, F32), |i, o| Op::Add { left: i[0], right: i[1], output: o });
        prop_assert_eq!(run(&ab, &[a.clone(), b.clone()]), run(&ba, &[b, a]));
    }

    /// Attention outputs are convex combinations of the value rows: each
    /// element lies within its column's range over the key tokens.
    #[test]
    fn attention_is_a_convex_combination((tq, tkv, heads, q, k, v) in (1usize..4, 1usize..6, 1usize..3).prop_flat_map(|(tq, tkv, heads)| {
        let hidden = heads * 2;
        (Just(tq), Just(tkv), Just(heads), values(tq * hidden), values(tkv * hidden), values(tkv * hidden))
    })) {
        let hidden = (heads * 2) as u64;
        let g = one_op(
            &[(&[1, tq as u64, hidden], F32), (&[1, tkv as u64, hidden], F32), (&[1, tkv as u64, hidden], F32)],
            (&[1, tq as u64, hidden], F32),
            |i, o| Op::Attention { q: i[0], k: i[1], v: i[2], heads: heads as u32, softmax: SoftmaxPrecision::F32, mask: ipu_package::graph::AttentionMask::None, queries_scaled: false, output: o },
        );
        let out = run(&g, &[q, k, v.clone()]);
        let h = hidden as usize;
        for i in 0..tq {
            for c in 0..h {
                let column = (0..tkv).map(|j| v[j * h + c]);
                let lo = column.clone().fold(f32::INFINITY, f32::min);
                let hi = column.fold(f32::NEG_INFINITY, f32::max);
                let x = out[i * h + c];
                prop_assert!(x >= lo - 1e-5 && x <= hi + 1e-5, "{x} outside [{lo}, {hi}]");
            }
        }
    }

    /// Layer norm with unit gain and zero bias gives rows of mean 0 and
    /// variance 1 (up to eps).
    #[test]
    fn layer_norm_standardises_rows((rows, d, x) in (1usize..4, 2usize..32).prop_flat_map(|(r, d)| (Just(r), Just(d), values(r * d)))) {
        let spread = x.chunks(d).all(|row| row.iter().any(|&v| (v - row[0]).abs() > 0.1));
        prop_assume!(spread);
        let g = one_op(&[(&[rows as u64, d as u64], F32), (&[d as u64], F32), (&[d as u64], F32)], (&[rows as u64, d as u64], F32),
            |i, o| Op::LayerNorm { input: i[0], scale: i[1], bias: i[2], eps: 1e-6, output: o });
        let out = run(&g, &[x, vec![1.0; d], vec![0.0; d]]);
        for row in out.chunks(d) {
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
            let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / d as f64;
            prop_assert!(mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-3, "mean {mean} var {var}");
        }
    }

    /// The blocked, parallel GEMM gives the naive loop's bits: one f32
    /// running sum over k in increasing order, bias added last.
    #[test]
    fn gemm_is_bit_identical_to_the_documented_loop((m, k, n, a, b, bias) in (1usize..70, 1usize..6, prop_oneof![1usize..8, 250usize..300]).prop_flat_map(|(m, k, n)| {
        (Just(m), Just(k), Just(n), values(m * k), values(k * n), values(n))
    })) {
        let g = one_op(&[(&[m as u64, k as u64], F32), (&[k as u64, n as u64], F32), (&[n as u64], F32)], (&[m as u64, n as u64], F32),
            |i, o| Op::Gemm { left: i[0], right: i[1], bias: Some(i[2]), output: o });
        let out = run(&g, &[a.clone(), b.clone(), bias.clone()]);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0f32;
                for kk in 0..k {
                    acc += a[i * k + kk] * b[kk * n + j];
                }
                acc += bias[j];
                prop_assert_eq!(out[i * n + j].to_bits(), acc.to_bits());
            }
        }
    }

    /// Attention gives the bits of the formula documented in
    /// `ipu_sim::reference`, written here as plainly as possible.
    #[test]
    fn attention_is_bit_identical_to_the_documented_formula((batch, tq, tkv, heads, q, k, v, f16, queries_scaled) in (1usize..3, 1usize..4, 1usize..7, 1usize..4).prop_flat_map(|(b, tq, tkv, heads)| {
        let hidden = heads * 3;
        (Just(b), Just(tq), Just(tkv), Just(heads), values(b * tq * hidden), values(b * tkv * hidden), values(b * tkv * hidden), any::<bool>(), any::<bool>())
    })) {
        let hidden = heads * 3;
        let softmax = if f16 { SoftmaxPrecision::F16 } else { SoftmaxPrecision::F32 };
        let g = one_op(
            &[(&[batch as u64, tq as u64, hidden as u64], F32), (&[batch as u64, tkv as u64, hidden as u64], F32), (&[batch as u64, tkv as u64, hidden as u64], F32)],
            (&[batch as u64, tq as u64, hidden as u64], F32),
            |i, o| Op::Attention { q: i[0], k: i[1], v: i[2], heads: heads as u32, softmax, mask: ipu_package::graph::AttentionMask::None, queries_scaled, output: o },
        );
        let out = run(&g, &[q.clone(), k.clone(), v.clone()]);
        let p = softmax.precision();
        let d = 3;
        let scale = if queries_scaled { 1.0 } else { 1.0 / (d as f32).sqrt() };
        for b in 0..batch {
            for i in 0..tq {
                for h in 0..heads {
                    let mut s = vec![0.0f32; tkv];
                    for (j, sj) in s.iter_mut().enumerate() {
                        let mut dot = 0.0f32;
                        for c in h * d..(h + 1) * d {
                            dot += q[(b * tq + i) * hidden + c] * k[(b * tkv + j) * hidden + c];
                        }
                        *sj = p.quantize(dot * scale);
                    }
                    let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let e: Vec<f32> = s.iter().map(|&x| p.quantize((x - m).exp())).collect();
                    let mut sum = 0.0f32;
                    for &x in &e {
                        sum += x;
                    }
                    let probs: Vec<f32> = e.iter().map(|&x| p.quantize(x / sum)).collect();
                    for c in h * d..(h + 1) * d {
                        let mut acc = 0.0f32;
                        for (j, &pj) in probs.iter().enumerate() {
                            acc += pj * v[(b * tkv + j) * hidden + c];
                        }
                        prop_assert_eq!(out[(b * tq + i) * hidden + c].to_bits(), acc.to_bits());
                    }
                }
            }
        }
    }

    /// The micro fixture at generated sizes (batch, tokens, heads, head
    /// width, MLP width, layers) evaluates to finite outputs of the right
    /// length.
    #[test]
    fn resized_fixtures_evaluate(batch in 1u64..3, tokens in 1u64..6, heads in 1u64..4, head_dim in 1u64..5, mlp in 1u64..9, layers in 1u64..3, seed in any::<u64>()) {
        let hidden = heads * head_dim;
        let overrides = [("batch", batch), ("tokens", tokens), ("heads", heads), ("hidden", hidden), ("hidden2", 2 * hidden), ("qkv", 3 * hidden), ("mlp", mlp), ("layers", layers)];
        let options = ipu_package::graph::ParseOptions { overrides: overrides.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect() };
        let graph = ipu_package::graph::parse_fixture_with(&crate::fixture_text("micro-1l-h32.json"), &options).expect("consistent overrides parse");
        let values = ipu_package::graph::values::generate(&graph, seed);
        let out = ipu_sim::evaluate(&graph, &values).expect("evaluates");
        for id in graph.outputs() {
            let v = out.get(id).expect("output");
            prop_assert_eq!(v.len() as u64, graph.tensor(id).element_count());
            prop_assert!(v.iter().all(|x| x.is_finite()));
        }
    }
}
