//! Deterministic values: the same seed and name give the same bits, values
//! are already in their tensor's precision, magnitudes follow the roles,
//! and the parallel encoder writes the codec's bytes.

use ipu_layout::{Fp8Format, Precision};
use ipu_package::graph::values::{self, ValueRole};
use ipu_package::graph::{TensorKind, parse_fixture};
use proptest::prelude::*;

use crate::fixture_text;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn values_are_deterministic_and_depend_on_seed_and_name() {
    let graph = parse_fixture(&fixture_text("tiny-2l-h64.json")).expect("parses");
    let a = values::generate(&graph, 11);
    let b = values::generate(&graph, 11);
    assert_eq!(a, b);
    let c = values::generate(&graph, 12);
    let w = graph.tensor_by_name("enc0.fc1.w").expect("w");
    assert_ne!(a.get(w), c.get(w));
    // Two tensors of the same shape and role differ by name.
    let w1 = graph.tensor_by_name("enc1.fc1.w").expect("w");
    assert_ne!(a.get(w), a.get(w1));
    // Every input and weight has values, and nothing else.
    let supplied = graph
        .tensors()
        .iter()
        .filter(|(_, t)| !t.kind().is_computed())
        .count();
    assert_eq!(a.len(), supplied);
    // The same name in another graph gets the same values (the other
    // fixture's tensor has another shape, so compare the common prefix of a
    // generated stream directly).
    let stream = values::values_for(
        "enc0.fc1.w",
        64 * 256,
        ValueRole::Matrix { fan_in: 64 },
        graph.tensor(w).precision(),
        11,
    );
    assert_eq!(bits(&stream), bits(a.get(w).expect("w")));
}

#[test]
fn values_are_in_precision_with_role_magnitudes() {
    let graph = parse_fixture(&fixture_text("tiny-2l-h64.json")).expect("parses");
    let set = values::generate(&graph, 0);
    for (id, v) in set.iter() {
        let t = graph.tensor(id);
        for &x in v {
            assert_eq!(
                t.precision().quantize(x).to_bits(),
                x.to_bits(),
                "{}",
                t.name()
            );
        }
        // No fixture weight saturates its FP8 range.
        if let Precision::F8 { format, scale } = t.precision() {
            let max = format.max_value() * 2f32.powi(i32::from(scale));
            assert!(v.iter().all(|x| x.abs() < max), "{} saturates", t.name());
        }
    }
    let stats = |name: &str| {
        let v = set
            .get(graph.tensor_by_name(name).expect(name))
            .expect(name);
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
        let sd = (v
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / v.len() as f64)
            .sqrt();
        (mean, sd)
    };
    let (mean, sd) = stats("enc0.fc1.w");
    assert!(
        mean.abs() < 0.01 && (sd - 1.0 / 8.0).abs() < 0.01,
        "fc1.w mean {mean} sd {sd}"
    );
    let (mean, sd) = stats("enc0.fc2.w");
    assert!((sd - 1.0 / 16.0).abs() < 0.01, "fc2.w mean {mean} sd {sd}");
    let (mean, _) = stats("enc0.ln1.g");
    assert!((mean - 1.0).abs() < 0.05, "ln gain mean {mean}");
    let patches = set
        .get(graph.tensor_by_name("patches").expect("patches"))
        .expect("patches");
    assert!(patches.iter().all(|x| (-1.0..=1.0).contains(x)));
    assert_eq!(
        graph
            .tensor(graph.tensor_by_name("patches").expect("p"))
            .kind(),
        TensorKind::Input
    );
}

#[test]
fn values_do_not_depend_on_the_thread_count() {
    let precision = Precision::F8 {
        format: Fp8Format::F143,
        scale: -10,
    };
    let role = ValueRole::Matrix { fan_in: 1152 };
    let n = 5 * values::BLOCK + 17;
    let many = values::values_for("w", n, role, precision, 3);
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool")
        .install(|| values::values_for("w", n, role, precision, 3));
    assert_eq!(bits(&many), bits(&one));
}

fn precision() -> impl Strategy<Value = Precision> {
    prop_oneof![
        Just(Precision::F32),
        Just(Precision::F16),
        (-30i8..30).prop_map(|scale| Precision::F8 {
            format: Fp8Format::F143,
            scale
        }),
        (-30i8..30).prop_map(|scale| Precision::F8 {
            format: Fp8Format::F152,
            scale
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The parallel block encoder writes the codec's bytes element by
    /// element.
    #[test]
    fn encode_matches_the_codec(p in precision(), xs in prop::collection::vec(prop_oneof![
        any::<f32>().prop_filter("finite", |x| x.is_finite()),
        -10f32..10.0,
        -1e-3f32..1e-3,
        Just(f32::NAN),
        Just(-0.0f32),
    ], 0..40)) {
        let fast = values::encode(p, &xs);
        let width = p.element_bytes() as usize;
        let mut slow = vec![0u8; xs.len() * width];
        for (out, &x) in slow.chunks_exact_mut(width).zip(&xs) {
            p.encode_into(x, out);
        }
        prop_assert_eq!(fast, slow);
    }
}
