//! The activation functions: the reference's values at known points, the
//! error function they rest on, and the tile model against the reference
//! bit for bit, with the cycle estimate equal to its count.

use ipu_layout::Precision;
use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::{Activation, GraphBuilder, Op, TensorKind, parse_fixture, values};
use ipu_package::program::{Codelet, Step};
use ipu_sim::evaluate;
use ipu_sim::tiles::run_package;

use crate::{fixture_text, one_op, run};

/// The reference's F32 results of `function` at `points`, each against
/// the exact value rounded once to f32: what an f64 evaluation within a
/// few f64 ulps gives (no point here is near an f32 rounding tie).
fn assert_known_values(function: Activation, points: &[(f32, f64)]) {
    let n = points.len() as u64;
    let g = one_op(&[(&[n], Precision::F32)], (&[n], Precision::F32), |i, o| {
        Op::Activation {
            function,
            input: i[0],
            output: o,
        }
    });
    let xs: Vec<f32> = points.iter().map(|p| p.0).collect();
    let out = run(&g, &[xs]);
    for (&y, &(x, exact)) in out.iter().zip(points) {
        assert_eq!(y, exact as f32, "{function}({x}) = {y}, exactly {exact}");
    }
}

#[test]
fn the_error_function_is_accurate_to_f64() {
    // erf at points of the published tables (Abramowitz and Stegun
    // table 7.1, extended to 16 digits).
    for (x, erf) in [
        (0.1, 0.112_462_916_018_284_9),
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (1.5, 0.966_105_146_475_310_8),
        (2.0, 0.995_322_265_018_952_7),
        (3.0, 0.999_977_909_503_001_4),
        (-0.7, -0.677_801_193_837_418_4),
    ] {
        let got = libm::erf(x);
        assert!((got - erf).abs() < 1e-15, "erf({x}) = {got}, not {erf}");
    }
    assert_eq!(libm::erf(0.0), 0.0);
    assert_eq!(libm::erf(7.0), 1.0);
    assert_eq!(libm::erf(-7.0), -1.0);
}

#[test]
fn exact_gelu_known_values() {
    // 0.5·x·(1 + erf(x/√2)) = x·Φ(x), Φ the normal distribution function.
    assert_known_values(
        Activation::GeluErf,
        &[
            (0.0, 0.0),
            (0.5, 0.345_731_230_637_006_56),
            (1.0, 0.841_344_746_068_542_9),
            (-1.0, -0.158_655_253_931_457_07),
            (2.0, 1.954_499_736_103_641_6),
            (-3.0, -0.004_049_694_094_890_31),
        ],
    );
}

#[test]
fn quick_gelu_known_values() {
    assert_known_values(
        Activation::QuickGelu,
        &[
            (0.0, 0.0),
            (0.5, 0.350_388_436_606_380_14),
            (1.0, 0.845_795_765_932_821_2),
            (-1.0, -0.154_204_234_067_178_7),
            (2.0, 1.935_658_623_144_208_3),
            (-3.0, -0.018_071_309_707_785_97),
        ],
    );
}

#[test]
fn tanh_known_values() {
    assert_known_values(
        Activation::Tanh,
        &[
            (0.0, 0.0),
            (0.5, 0.462_117_157_260_009_74),
            (1.0, 0.761_594_155_955_764_9),
            (-2.0, -0.964_027_580_075_816_9),
            (20.0, 1.0),
        ],
    );
}

#[test]
fn the_three_gelus_differ_where_they_should() {
    // At 1 the tanh form gives 0.841192, the exact one 0.841345 and the
    // sigmoid one 0.845796: each op computes its own function.
    let at_one = |function| {
        let g = one_op(&[(&[1], Precision::F32)], (&[1], Precision::F32), |i, o| {
            Op::Activation {
                function,
                input: i[0],
                output: o,
            }
        });
        run(&g, &[vec![1.0]])[0]
    };
    assert!((at_one(Activation::GeluTanh) - 0.841_192).abs() < 1e-6);
    assert!((at_one(Activation::GeluErf) - 0.841_345).abs() < 1e-6);
    assert!((at_one(Activation::QuickGelu) - 0.845_796).abs() < 1e-6);
}

/// x (F16, [24, 40]) → every activation, F32 and F16 results.
fn every_activation() -> ipu_package::graph::Graph {
    let mut b = GraphBuilder::new("activations");
    let x = b.tensor("x", [24, 40], Precision::F16, TensorKind::Input);
    for function in Activation::ALL {
        for (suffix, precision) in [("f32", Precision::F32), ("f16", Precision::F16)] {
            let name = format!("{function}.{suffix}");
            let y = b.tensor(name, [24, 40], precision, TensorKind::Output);
            b.op(Op::Activation {
                function,
                input: x,
                output: y,
            });
        }
    }
    b.finish().expect("valid graph")
}

#[test]
fn the_tile_model_computes_every_activation_like_the_reference_bit_for_bit() {
    let graph = every_activation();
    let mut inputs = values::generate(&graph, 3);
    // Spread the arguments over the functions' interesting range: every
    // multiple of 1/64 in -7.5..7.5, each an F16 value.
    let x = graph.inputs()[0];
    let spread: Vec<f32> = (0..24 * 40).map(|i| (i as f32 - 480.0) / 64.0).collect();
    inputs.insert(x, spread);
    let reference = evaluate(&graph, &inputs).expect("evaluates");
    for tiles in [4, 16] {
        let config = BuildConfig {
            tiles: Some(tiles),
            ..BuildConfig::default()
        };
        let package = build_package(&graph, &config, &Stages::in_memory())
            .unwrap_or_else(|e| panic!("on {tiles} tiles: {e}"));
        let functions: Vec<Activation> = package
            .program
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Compute(c) => Some(&c.calls),
                _ => None,
            })
            .flatten()
            .filter_map(|(_, c)| match c {
                Codelet::Activation { function, .. } => Some(*function),
                _ => None,
            })
            .collect();
        for function in Activation::ALL {
            assert!(functions.contains(&function), "no {function} codelet");
        }
        crate::cycles::assert_estimate_is_the_count(
            &graph,
            &package,
            &format!("every activation on {tiles} tiles"),
        );
        let device = run_package(&package, &graph, &inputs).expect("runs");
        for output in graph.outputs() {
            let (r, d) = (reference.get(output).unwrap(), device.get(output).unwrap());
            let name = graph.tensor(output).name();
            assert_eq!(r.len(), d.len(), "{name}");
            for (i, (a, b)) in r.iter().zip(d).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{name}[{i}] on {tiles} tiles");
            }
        }
    }
}

/// micro-1l-h32 with its GELU replaced by each other activation: the
/// estimate equals the tile model's count.
#[test]
fn the_estimate_equals_the_count_with_every_activation_in_a_small_fixture() {
    let text = fixture_text("micro-1l-h32.json");
    assert!(text.contains("\"op\": \"gelu\""), "the fixture has a GELU");
    for function in [Activation::GeluErf, Activation::QuickGelu, Activation::Tanh] {
        let edited = text.replace(
            "\"op\": \"gelu\"",
            &format!("\"op\": \"{}\"", function.name()),
        );
        let graph = parse_fixture(&edited).expect("fixture parses");
        let config = BuildConfig {
            tiles: Some(16),
            ..BuildConfig::default()
        };
        let package = build_package(&graph, &config, &Stages::in_memory())
            .unwrap_or_else(|e| panic!("{function}: {e}"));
        crate::cycles::assert_estimate_is_the_count(
            &graph,
            &package,
            &format!("micro-1l-h32 with {function} on 16 tiles"),
        );
    }
}
