//! The package's cycle estimate against the tile model's own count: for
//! every small fixture that lowers, on 16 and 64 tiles, the estimate
//! (`ipu_package::profile`, which reads the package's arguments, phases and
//! kernel metadata) equals the cycles the tile model counts from what it
//! executes (the AMP programs it emulates, the elements and rows its
//! codelets touch, the rows it replays, the copies it does), step by step
//! in run order, with the same busiest tile for every compute step; and
//! the same with attention on the AMP.

use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::{Graph, parse_fixture, values};
use ipu_package::lower::AttentionUnit;
use ipu_package::package::Package;
use ipu_package::profile::{Profile, StepKind};
use ipu_package::program::{Codelet, RepeatStep, Step};
use ipu_sim::tiles::{RunConfig, run_package_with};

use crate::fixture_text;

/// The profile's steps in run order: program order, each repeat body once
/// per iteration, as `(step index in the profile)`.
fn run_order(steps: &[Step], next: &mut usize, out: &mut Vec<usize>) {
    for s in steps {
        match s {
            Step::Compute(_) | Step::Exchange(_) => {
                out.push(*next);
                *next += 1;
            }
            Step::Repeat(RepeatStep { count, body, .. }) => {
                let first = *next;
                let mut end = first;
                for _ in 0..*count {
                    end = first;
                    run_order(body, &mut end, out);
                }
                if *count == 0 {
                    let mut skipped = Vec::new();
                    run_order(body, &mut end, &mut skipped);
                }
                *next = end;
            }
        }
    }
}

#[test]
fn the_estimate_equals_the_tile_models_count_on_every_small_fixture() {
    // micro-patchify's in-graph patch extraction (6-D transpose) does not
    // lower yet, so it has no package to estimate; when it does, it joins
    // the list below.
    let patchify = parse_fixture(&fixture_text("micro-patchify.json")).expect("parses");
    let e = build_package(&patchify, &BuildConfig::default(), &Stages::in_memory())
        .expect_err("micro-patchify does not lower yet; add it to the fixtures compared here");
    assert!(e.to_string().contains("cannot be lowered"), "{e}");
    for name in [
        "micro-1l-h32.json",
        "tiny-2l-h64.json",
        "micro-text-1l-h32.json",
    ] {
        let graph = parse_fixture(&fixture_text(name)).expect("fixture parses");
        for tiles in [16, 64] {
            let config = BuildConfig {
                tiles: Some(tiles),
                ..BuildConfig::default()
            };
            let package: Package = build_package(&graph, &config, &Stages::in_memory())
                .unwrap_or_else(|e| panic!("{name} on {tiles} tiles: {e}"));
            assert_estimate_is_the_count(&graph, &package, &format!("{name} on {tiles} tiles"));
        }
    }
}

/// The same with attention on the AMP (its transposes, softmaxes and
/// GEMM calls), on tiny-2l-h64 and on micro-1l-h32 with an F16 softmax
/// (the AMP's second product reads F16 exponentials).
#[test]
fn the_estimate_equals_the_tile_models_count_with_attention_on_the_amp() {
    for (name, text) in [
        ("tiny-2l-h64", fixture_text("tiny-2l-h64.json")),
        (
            "micro-1l-h32 (F16 softmax)",
            crate::amp::micro_f16_softmax(),
        ),
        ("tiny-2l-h64 with head dim 8", crate::amp::tiny_head_dim_8()),
        (
            "tiny-2l-h64 with FP8 values",
            crate::amp::fp8_values(&fixture_text("tiny-2l-h64.json")),
        ),
        (
            "tiny-2l-h64 with head dim 8 and FP8 values",
            crate::amp::fp8_values(&crate::amp::tiny_head_dim_8()),
        ),
    ] {
        let graph = parse_fixture(&text).expect("fixture parses");
        for tiles in [16, 64] {
            let what = format!("{name} on {tiles} tiles, attention on the AMP");
            let package = crate::amp::build(&graph, tiles, AttentionUnit::Amp);
            let softmaxes = crate::amp::count_calls(&package, |c| {
                matches!(c, Codelet::AttentionSoftmax { .. })
            });
            assert!(softmaxes > 0, "{what}: no AMP attention");
            // Head dimensions of 16 leave no padding column; 8 does, and
            // then every softmax leaves its row sums to the AMP.
            let amp_sums = crate::amp::count_calls(&package, |c| {
                matches!(c, Codelet::AttentionSoftmax { sum: None, .. })
            });
            let expected = if name.contains("dim 8") { softmaxes } else { 0 };
            assert_eq!(amp_sums, expected, "{what}: softmaxes without sums");
            if name.contains("FP8") {
                assert_eq!(crate::amp::fp8_softmaxes(&package), softmaxes, "{what}");
            }
            assert_estimate_is_the_count(&graph, &package, &what);
        }
    }
}

/// Runs `package` on the tile model and holds the estimate to its count:
/// every step run, the busiest tile of every compute step, the totals.
pub(crate) fn assert_estimate_is_the_count(graph: &Graph, package: &Package, what: &str) {
    let inputs = values::generate(graph, 5);
    let profile: &Profile = package.profile.as_ref().expect("estimated");
    let run = RunConfig {
        check_ops: false,
        ..RunConfig::default()
    };
    let (_, stats) =
        run_package_with(package, graph, &inputs, &run).unwrap_or_else(|e| panic!("{what}: {e}"));
    let counted = &stats.cycles;
    assert_eq!(counted.uncounted_gemm_calls, 0, "{what}");
    let mut order = Vec::new();
    run_order(&package.program.steps, &mut 0, &mut order);
    assert_eq!(order.len(), counted.steps.len(), "{what}: step runs");
    for (&i, c) in order.iter().zip(&counted.steps) {
        let e = &profile.steps[i];
        assert_eq!(e.name, c.name, "{what}: run order");
        assert_eq!(
            e.kind == StepKind::Exchange,
            c.exchange,
            "{what}: {}",
            e.name
        );
        assert_eq!(
            e.cycles, c.cycles,
            "{what}: step {} ({}): estimate {} counted {}",
            e.index, e.name, e.cycles, c.cycles
        );
        if e.kind == StepKind::Compute {
            assert_eq!(
                e.busiest_tile,
                c.busiest_tile.map(|t| t.as_u32()),
                "{what}: busiest tile of {}",
                e.name
            );
        }
    }
    let t = &profile.totals;
    assert_eq!(t.cycles, counted.total, "{what}: total");
    assert_eq!(t.compute_cycles, counted.compute, "{what}: compute");
    assert_eq!(t.exchange_cycles, counted.exchange, "{what}: exchange");
    assert_eq!(t.sync_cycles, counted.sync, "{what}: sync");
    eprintln!(
        "{what}: estimate {} cycles = tile model count {} ({} step runs)",
        t.cycles,
        counted.total,
        counted.steps.len()
    );
}

/// The two accounts are independent: a phase whose recorded horizon is
/// edited changes the estimate (which reads `phases.json`) but not the
/// tile model's count (which replays the rows), and the comparison shows.
#[test]
fn an_edited_horizon_shows_as_a_disagreement() {
    let graph = parse_fixture(&fixture_text("micro-1l-h32.json")).expect("parses");
    let inputs = values::generate(&graph, 5);
    let config = BuildConfig {
        tiles: Some(16),
        ..BuildConfig::default()
    };
    let mut package = build_package(&graph, &config, &Stages::in_memory()).expect("builds");
    package.phases[0].info.horizon += 7;
    let profile = ipu_package::profile::estimate(
        &package,
        &ipu_package::profile::ProfileConfig::for_graph(&graph),
    )
    .expect("estimates");
    let run = RunConfig {
        check_ops: false,
        ..RunConfig::default()
    };
    let (_, stats) = run_package_with(&package, &graph, &inputs, &run).expect("runs");
    assert_eq!(profile.totals.cycles, stats.cycles.total + 7);
}

/// A padding clear joined to the GEMM step after its fill: the tiny
/// fixture with an MLP of 336 (not a whole number of 32-element AMP
/// blocks) on 64 tiles clears fc2's left-operand padding on the tiles of
/// its last inner block in fc2's GEMM step (`lower/clears.rs`). The tile
/// model runs it op by op against the reference, and the estimate equals
/// its count.
#[test]
fn a_clear_joined_to_a_gemm_step_is_run_checked_and_counted() {
    let mut fixture: serde_json::Value =
        serde_json::from_str(&fixture_text("tiny-2l-h64.json")).expect("json");
    fixture["params"]["mlp"] = serde_json::Value::from(336);
    let graph = parse_fixture(&serde_json::to_string(&fixture).expect("text")).expect("parses");
    let config = BuildConfig {
        tiles: Some(64),
        ..BuildConfig::default()
    };
    let package = build_package(&graph, &config, &Stages::in_memory()).expect("builds");
    let mut joined = 0;
    let mut steps: Vec<&Step> = package.program.steps.iter().collect();
    while let Some(step) = steps.pop() {
        match step {
            Step::Compute(c) if c.label.role == ipu_package::program::StepRole::Gemm => {
                // Clears of a left operand the step's kernels read (not
                // the zeros an empty inner block writes to its output).
                let lefts: Vec<_> = c
                    .calls
                    .iter()
                    .filter_map(|(_, call)| match call {
                        Codelet::Gemm { left, .. } => Some(left.buffer),
                        _ => None,
                    })
                    .collect();
                joined += c
                    .calls
                    .iter()
                    .filter(|(_, call)| {
                        matches!(call, Codelet::Zero { target, .. } if lefts.contains(&target.buffer))
                    })
                    .count();
            }
            Step::Repeat(r) => steps.extend(&r.body),
            _ => {}
        }
    }
    assert!(joined > 0, "no clear joined a GEMM step");
    let run = RunConfig {
        check_ops: true,
        ..RunConfig::default()
    };
    let inputs = values::generate(&graph, 5);
    run_package_with(&package, &graph, &inputs, &run).expect("runs and passes the per-op check");
    assert_estimate_is_the_count(&graph, &package, "tiny-2l-h64 with MLP 336 on 64 tiles");
}
