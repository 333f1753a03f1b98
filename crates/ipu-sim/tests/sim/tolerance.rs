//! The tolerance rules: calibration against F16 partial accumulation, op
//! by op and end to end, and known-bad results that must fail.

use ipu_package::graph::values::{self, ValueSet};
use ipu_package::graph::{Graph, Op};
use ipu_sim::reference::{GemmAccumulation, Keep, ReferenceConfig, Tolerance, compare};
use ipu_sim::{evaluate, evaluate_op, evaluate_with};

use crate::fixtures::load;

const BLOCKS: [u32; 2] = [1, 16];

fn partials(block: u32, keep: Keep) -> ReferenceConfig {
    ReferenceConfig {
        keep,
        gemm_accumulation: GemmAccumulation::F16Partials { block },
    }
}

/// The per-op tolerance for `op` on a device with F16 partials.
fn op_tolerance(graph: &Graph, op: &Op, block: u32) -> Tolerance {
    let precision = graph.tensor(op.output()).precision();
    match op {
        Op::Gemm { right, .. } => {
            let k = graph.tensor(*right).extents()[0];
            Tolerance::gemm_f16_partials(precision, k, u64::from(block))
        }
        _ => Tolerance::op(precision),
    }
}

#[test]
fn every_op_matches_on_the_devices_own_inputs() {
    for name in ["tiny-2l-h64.json", "micro-1l-h32.json"] {
        let graph = load(name);
        for seed in 0..2 {
            let supplied = values::generate(&graph, seed);
            for block in BLOCKS {
                // A "device" that accumulates GEMMs in F16 partials.
                let mut device = evaluate_with(&graph, &supplied, &partials(block, Keep::All))
                    .expect("evaluates");
                device.extend(supplied.clone());
                let mut worst = 0.0f32;
                for (id, op) in graph.ops().iter() {
                    let reference =
                        evaluate_op(&graph, id, &device, &ReferenceConfig::default()).expect("op");
                    let tolerance = op_tolerance(&graph, op, block);
                    let c = compare(&reference, device.get(op.output()).expect("dev"), tolerance);
                    worst = worst.max(c.rms_error);
                    assert!(
                        c.pass,
                        "{name} seed {seed} block {block} {id} ({}): {c:?}",
                        op.kind_name()
                    );
                }
                println!("{name} seed {seed} block {block}: worst per-op RMS error {worst:.3e}");
            }
        }
    }
}

#[test]
fn f16_partial_sums_stay_within_the_graph_tolerance() {
    for name in ["tiny-2l-h64.json", "micro-1l-h32.json"] {
        let graph = load(name);
        for seed in 0..3 {
            let inputs = values::generate(&graph, seed);
            let reference = evaluate(&graph, &inputs).expect("evaluates");
            for block in BLOCKS {
                let device = evaluate_with(&graph, &inputs, &partials(block, Keep::Outputs))
                    .expect("evaluates");
                for id in graph.outputs() {
                    let t = graph.tensor(id);
                    let c = compare(
                        reference.get(id).expect("ref"),
                        device.get(id).expect("dev"),
                        Tolerance::graph(t.precision()),
                    );
                    println!(
                        "{name} seed {seed} block {block} {}: max_abs {:.3e} max_rel {:.3e} rms {:.3e}",
                        t.name(),
                        c.max_abs,
                        c.max_rel,
                        c.rms_error
                    );
                    assert!(
                        c.pass,
                        "{name} seed {seed} block {block} {}: {c:?}",
                        t.name()
                    );
                }
            }
        }
    }
}

/// Known-bad device results: the comparison must fail them.
#[test]
fn corrupted_results_fail() {
    let graph = load("tiny-2l-h64.json");
    let inputs = values::generate(&graph, 0);
    let reference = evaluate(&graph, &inputs).expect("evaluates");
    let id = graph.outputs()[0];
    let r = reference.get(id).expect("ref");
    let tolerance = Tolerance::graph(graph.tensor(id).precision());
    assert!(compare(r, r, tolerance).pass);

    // One element off by a lot.
    let mut one = r.to_vec();
    one[17] += 8.0;
    let c = compare(r, &one, tolerance);
    assert!(!c.pass && c.violations == 1 && c.worst == Some(17), "{c:?}");

    // Rows swapped (a layout bug): fails on RMS and elements.
    let mut swapped = r.to_vec();
    let hidden = 64;
    swapped.swap(0, hidden);
    for i in 0..hidden {
        swapped.swap(i, hidden + i);
    }
    assert!(!compare(r, &swapped, tolerance).pass);

    // Results of another seed (values of the right scale, wrong data).
    let other = evaluate(&graph, &values::generate(&graph, 99)).expect("evaluates");
    let c = compare(r, other.get(id).expect("other"), tolerance);
    assert!(!c.pass && c.rms_error > 0.5, "{c:?}");

    // A NaN, and a length mismatch.
    let mut nan = r.to_vec();
    nan[3] = f32::NAN;
    assert!(!compare(r, &nan, tolerance).pass);
    assert!(!compare(r, &r[1..], tolerance).pass);
}

/// A GEMM op result off by one F16 step in a quarter of its elements
/// passes the GEMM tolerance; off by 1 % everywhere it fails the op
/// tolerance.
#[test]
fn op_tolerance_is_tight() {
    let graph = load("micro-1l-h32.json");
    let supplied = values::generate(&graph, 4);
    let mut all = evaluate_with(
        &graph,
        &supplied,
        &ReferenceConfig {
            keep: Keep::All,
            ..ReferenceConfig::default()
        },
    )
    .expect("evaluates");
    all.extend(supplied);
    let (gemm, op) = graph
        .ops()
        .iter()
        .find(|(_, op)| matches!(op, Op::Gemm { .. }))
        .expect("a gemm");
    let exact = evaluate_op(&graph, gemm, &all, &ReferenceConfig::default()).expect("op");
    let tolerance = op_tolerance(&graph, op, 16);
    let f16_step: Vec<f32> = exact
        .iter()
        .enumerate()
        .map(|(i, &x)| if i % 4 == 0 { f16_next(x) } else { x })
        .collect();
    assert!(compare(&exact, &f16_step, tolerance).pass);
    let scaled: Vec<f32> = exact.iter().map(|x| x * 1.01).collect();
    assert!(
        !compare(
            &exact,
            &scaled,
            Tolerance::op(graph.tensor(op.output()).precision())
        )
        .pass
    );
    let mut missing = ValueSet::new();
    missing.insert(op.output(), exact);
    assert!(evaluate_op(&graph, gemm, &missing, &ReferenceConfig::default()).is_err());
}

/// The next F16 value above `x` (for finite `x`).
fn f16_next(x: f32) -> f32 {
    let bits = ipu_layout::numeric::f16_bits(x);
    let next = if x >= 0.0 { bits + 1 } else { bits - 1 };
    ipu_layout::numeric::f16_value(next)
}
