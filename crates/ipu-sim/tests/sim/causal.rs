//! Causal attention through every stage: the reference against a naive
//! f64 implementation, packages whose causal blocks split queries and
//! keys run on the tile model with the per-op check, the estimate equal to
//! the tile model's count, and hostile block positions refused or run
//! without a panic.

use ipu_layout::Precision;
use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::values::{self, ValueSet};
use ipu_package::graph::{AttentionMask, Graph, Op, SoftmaxPrecision, parse_fixture};
use ipu_package::lower::{AttentionUnit, LowerConfig};
use ipu_package::package::Package;
use ipu_package::program::{CausalRows, Codelet, WalkEvent};
use ipu_sim::tiles::{RunConfig, run_package_with};
use serde_json::Value;

use crate::{OneOp, fixture_text, one_op};

const F32: Precision = Precision::F32;

/// One causal attention `[batch, tokens, hidden]` with `heads` heads.
fn causal_attention(batch: u64, tokens: u64, hidden: u64, heads: u32) -> OneOp {
    let s = [batch, tokens, hidden];
    one_op(&[(&s, F32), (&s, F32), (&s, F32)], (&s, F32), |i, o| {
        Op::Attention {
            q: i[0],
            k: i[1],
            v: i[2],
            heads,
            softmax: SoftmaxPrecision::F32,
            mask: AttentionMask::Causal,
            queries_scaled: false,
            output: o,
        }
    })
}

/// Causal attention by its definition, in f64.
fn naive_causal(q: &[f32], k: &[f32], v: &[f32], [b, t, h]: [usize; 3], heads: usize) -> Vec<f64> {
    let d = h / heads;
    let mut out = vec![0.0f64; b * t * h];
    let at = |x: &[f32], bb: usize, r: usize, c: usize| f64::from(x[(bb * t + r) * h + c]);
    for bb in 0..b {
        for hh in 0..heads {
            for i in 0..t {
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        (0..d)
                            .map(|c| at(q, bb, i, hh * d + c) * at(k, bb, j, hh * d + c))
                            .sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let l: f64 = e.iter().sum();
                for c in 0..d {
                    out[(bb * t + i) * h + hh * d + c] = (0..=i)
                        .map(|j| e[j] / l * at(v, bb, j, hh * d + c))
                        .sum::<f64>();
                }
            }
        }
    }
    out
}

#[test]
fn the_reference_is_causal_attention_by_its_definition() {
    let g = causal_attention(2, 9, 8, 2);
    let inputs = values::generate(&g.graph, 11);
    let get = |i: usize| inputs.get(g.inputs[i]).expect("generated").to_vec();
    let (q, k, v) = (get(0), get(1), get(2));
    let out = ipu_sim::evaluate(&g.graph, &inputs).expect("evaluates");
    let got = out.get(g.output).expect("output");
    let want = naive_causal(&q, &k, &v, [2, 9, 8], 2);
    for (i, (&g_, &w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (f64::from(g_) - w).abs() <= 1e-5,
            "element {i}: {g_} vs {w}"
        );
    }
    // The first query row sees only the first key: its output is that
    // key's value row, exactly.
    assert_eq!(&got[..4], &v[..4]);
    // Unmasked, later rows differ: the mask did something.
    let plain = ipu_sim::evaluate(&unmasked_copy(&g.graph), &inputs).expect("evaluates");
    let plain = plain.get(g.output).expect("output");
    assert_ne!(plain, got);
}

/// `graph` with every attention unmasked.
fn unmasked_copy(graph: &Graph) -> Graph {
    let text = ipu_package::graph::write_fixture(graph).expect("writes");
    let text = text.replace(", \"mask\": \"causal\"", "");
    parse_fixture(&text).expect("parses")
}

/// `graph` built on `tiles` tiles with attention on `unit` and
/// `budget` transient bytes (small budgets split keys over tiles).
fn build(graph: &Graph, tiles: u32, unit: AttentionUnit, budget: Option<u64>) -> Package {
    let mut lower = LowerConfig {
        attention: unit,
        ..LowerConfig::default()
    };
    if let Some(b) = budget {
        lower.transient_budget = b;
    }
    let config = BuildConfig {
        tiles: Some(tiles),
        lower,
        ..BuildConfig::default()
    };
    build_package(graph, &config, &Stages::in_memory())
        .unwrap_or_else(|e| panic!("{} on {tiles} tiles: {e}", graph.name()))
}

/// The causal rows of every attention block of `package`.
fn causal_blocks(package: &Package) -> Vec<Option<CausalRows>> {
    let mut out = Vec::new();
    for event in package.program.walk() {
        if let WalkEvent::Compute(step, _) = event {
            for (_, c) in &step.calls {
                if let Codelet::AttentionBlock { causal, .. } = c {
                    out.push(*causal);
                }
            }
        }
    }
    out
}

/// Runs `package` on the tile model with the per-op check (every op
/// against the reference on the device's own inputs) and, for an F32
/// graph (`end_to_end`), compares its outputs with the reference's.
fn run_checked(graph: &Graph, package: &Package, inputs: &ValueSet, what: &str, end_to_end: bool) {
    let run = RunConfig {
        check_ops: true,
        ..RunConfig::default()
    };
    let (outputs, _) =
        run_package_with(package, graph, inputs, &run).unwrap_or_else(|e| panic!("{what}: {e}"));
    if !end_to_end {
        return;
    }
    let reference = ipu_sim::evaluate(graph, inputs).expect("evaluates");
    for t in graph.outputs() {
        let (a, b) = (
            outputs.get(t).expect("device output"),
            reference.get(t).expect("reference output"),
        );
        let worst = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(worst <= 1e-4, "{what}: output differs by {worst}");
    }
}

#[test]
fn causal_blocks_split_over_queries_and_keys_run_and_are_counted() {
    let g = causal_attention(2, 12, 16, 2);
    let inputs = values::generate(&g.graph, 3);
    for (tiles, budget) in [(16, None), (64, Some(512))] {
        let what = format!("causal attention on {tiles} tiles");
        // Asked for the AMP, a causal attention still runs on the vector
        // unit.
        let package = build(&g.graph, tiles, AttentionUnit::Amp, budget);
        let blocks = causal_blocks(&package);
        assert!(!blocks.is_empty(), "{what}: no vector blocks");
        assert!(blocks.iter().all(Option::is_some), "{what}: unmasked block");
        if budget.is_some() {
            // Some blocks start past the first key, and some see no key.
            assert!(
                blocks.iter().flatten().any(|c| c.kv_first > 0),
                "{what}: keys not split: {blocks:?}"
            );
            assert!(
                blocks.iter().flatten().any(|c| c.kv_first > c.q_first),
                "{what}: no wholly masked block"
            );
        }
        run_checked(&g.graph, &package, &inputs, &what, true);
        crate::cycles::assert_estimate_is_the_count(&g.graph, &package, &what);
    }
}

/// micro-text-1l-h32 with its attention made causal.
fn micro_text_causal() -> Graph {
    let mut fixture: Value =
        serde_json::from_str(&fixture_text("micro-text-1l-h32.json")).expect("json");
    let mut masked = 0;
    for layer in fixture["layers"].as_array_mut().expect("layers") {
        for op in layer["ops"].as_array_mut().expect("ops") {
            if op["op"] == "attention" {
                op["mask"] = Value::from("causal");
                masked += 1;
            }
        }
    }
    assert_eq!(masked, 1);
    let text = serde_json::to_string_pretty(&fixture).expect("text");
    parse_fixture(&text).expect("parses")
}

#[test]
fn a_causal_text_tower_runs_and_its_estimate_is_the_count() {
    let graph = micro_text_causal();
    let inputs = values::generate(&graph, 5);
    for tiles in [16, 64] {
        let what = format!("causal micro-text-1l-h32 on {tiles} tiles");
        let package = build(&graph, tiles, AttentionUnit::Auto, None);
        assert!(causal_blocks(&package).iter().all(Option::is_some));
        run_checked(&graph, &package, &inputs, &what, false);
        crate::cycles::assert_estimate_is_the_count(&graph, &package, &what);
    }
}

#[test]
fn hostile_causal_rows_do_not_panic_the_tile_model() {
    let g = causal_attention(1, 8, 8, 1);
    let inputs = values::generate(&g.graph, 7);
    let honest = build(&g.graph, 16, AttentionUnit::Auto, None);
    for rows in [
        CausalRows {
            q_first: u32::MAX,
            kv_first: 0,
        },
        CausalRows {
            q_first: 0,
            kv_first: u32::MAX,
        },
    ] {
        let mut package = honest.clone();
        package.program.steps.iter_mut().for_each(|s| {
            if let ipu_package::program::Step::Compute(c) = s {
                for (_, call) in &mut c.calls {
                    if let Codelet::AttentionBlock { causal, .. } = call {
                        *causal = Some(rows);
                    }
                }
            }
        });
        let run = RunConfig {
            check_ops: true,
            ..RunConfig::default()
        };
        // Every key visible (or none) is a wrong result, never a panic:
        // the per-op check reports it as a typed error.
        let result = run_package_with(&package, &g.graph, &inputs, &run);
        assert!(
            result.is_err(),
            "{rows:?}: a wrong attention passed the check"
        );
    }
}
