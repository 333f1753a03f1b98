//! The tile model end to end: small fixtures built into packages (placed,
//! scheduled, kernels compiled), written and read back, run on per-tile
//! SRAM images, and compared with the reference evaluation.

use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::{parse_fixture, values};
use ipu_package::package::Package;
use ipu_sim::evaluate;
use ipu_sim::reference::compare::{Tolerance, compare};
use ipu_sim::tiles::run_package;

fn fixture(name: &str) -> String {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn small_packages_run_and_match_the_reference() {
    let out = tempfile::tempdir().unwrap();
    for name in [
        "micro-1l-h32.json",
        "tiny-2l-h64.json",
        "micro-text-1l-h32.json",
    ] {
        let graph = parse_fixture(&fixture(name)).unwrap();
        let inputs = values::generate(&graph, 11);
        let reference = evaluate(&graph, &inputs).unwrap();
        for tiles in [16, 64] {
            let config = BuildConfig {
                tiles: Some(tiles),
                ..BuildConfig::default()
            };
            let built = build_package(&graph, &config, &Stages::in_memory())
                .unwrap_or_else(|e| panic!("{name} on {tiles}: {e}"));
            let dir = out.path().join(format!("{name}-{tiles}"));
            built.write(&dir).unwrap();
            let package = Package::read(&dir).unwrap();
            let device = run_package(&package, &graph, &inputs)
                .unwrap_or_else(|e| panic!("{name} on {tiles}: {e}"));
            for output in graph.outputs() {
                let t = graph.tensor(output);
                let c = compare(
                    reference.get(output).unwrap(),
                    device.get(output).unwrap(),
                    Tolerance::graph(t.precision()),
                );
                eprintln!(
                    "{name} {tiles} tiles {}: max_abs {} rms {} pass {}",
                    t.name(),
                    c.max_abs,
                    c.rms_error,
                    c.pass
                );
                assert!(c.pass, "{name} on {tiles} tiles, {}: {c:?}", t.name());
            }
        }
    }
}

/// Runs `package` and reports whether it passes the comparison with the
/// reference (an error counts as a failure).
fn passes(
    package: &Package,
    graph: &ipu_package::graph::Graph,
    inputs: &ipu_package::graph::ValueSet,
    reference: &ipu_package::graph::ValueSet,
) -> bool {
    let Ok(device) = run_package(package, graph, inputs) else {
        return false;
    };
    graph.outputs().into_iter().all(|o| {
        let t = graph.tensor(o);
        compare(
            reference.get(o).unwrap(),
            device.get(o).unwrap(),
            Tolerance::graph(t.precision()),
        )
        .pass
    })
}

/// Corrupting one placement address, one exchange row word or one kernel
/// variant in a built package makes the simulation fail the comparison.
#[test]
fn corrupted_packages_fail() {
    use ipu_package::program::BufferRole;
    let graph = parse_fixture(&fixture("micro-1l-h32.json")).unwrap();
    let inputs = values::generate(&graph, 3);
    let reference = evaluate(&graph, &inputs).unwrap();
    let config = BuildConfig {
        tiles: Some(16),
        ..BuildConfig::default()
    };
    let good = build_package(&graph, &config, &Stages::in_memory()).unwrap();
    assert!(
        passes(&good, &graph, &inputs, &reference),
        "the pristine package passes"
    );

    // One placement address: the first activation's shard on its first tile
    // moves to where another buffer of that tile lives.
    let mut bad = good.clone();
    let (victim, _) = bad
        .program
        .buffers
        .iter()
        .find(|(_, b)| b.role == BufferRole::Activation)
        .unwrap();
    let addresses = &mut bad.placement.addresses;
    let (tile, address) = addresses.of(victim)[0];
    let other = addresses
        .iter()
        .filter(|(i, _)| *i != victim)
        .flat_map(|(_, l)| l.iter())
        .find(|&&(t, a)| t == tile && a != address)
        .map(|&(_, a)| a)
        .unwrap();
    addresses.of_mut(victim).unwrap()[0].1 = other;
    assert!(
        !passes(&bad, &graph, &inputs, &reference),
        "a moved shard must fail"
    );

    // One exchange row word: the send instruction that moves the most
    // words in the package reads from one word further on.
    let mut bad = good.clone();
    let mut best: Option<(usize, u32, usize, u32)> = None;
    for (p, rows) in bad.phases.iter().map(|p| &p.rows).enumerate() {
        for t in 0..rows.tile_count() {
            let row = rows.row(ipu_layout::TileId::from_u32(t));
            let mut i = 0;
            while i < row.len() {
                let Ok((instr, next)) = ipu_exchange::Instr::decode_at(row, i) else {
                    break;
                };
                if let ipu_exchange::Instr::Send { items, sctl, .. } = instr
                    && sctl & 3 != 0
                    && best.is_none_or(|b| items > b.3)
                {
                    best = Some((p, t, i, items));
                }
                i += next.max(1);
            }
        }
    }
    let (phase, tile, index, _) = best.expect("the package has a send instruction");
    let rows = &mut bad.phases[phase].rows;
    let mut per_tile: Vec<Vec<u32>> = (0..rows.tile_count())
        .map(|t| rows.row(ipu_layout::TileId::from_u32(t)).to_vec())
        .collect();
    per_tile[tile as usize][index] = per_tile[tile as usize][index].wrapping_add(1 << 3);
    *rows = ipu_exchange::EncodedRows::from_tile_rows(per_tile);
    assert!(
        !passes(&bad, &graph, &inputs, &reference),
        "a changed row word must fail"
    );

    // One kernel variant: a GEMM runs another variant's programs.
    let mut bad = good.clone();
    let compiled = &mut bad.kernels;
    let j = (1..compiled.len())
        .find(|&j| compiled[j].name != compiled[0].name)
        .unwrap();
    let (object, entries) = (compiled[j].object.clone(), compiled[j].entries.clone());
    compiled[0].object = object;
    compiled[0].entries = entries;
    assert!(
        !passes(&bad, &graph, &inputs, &reference),
        "another variant's kernel must fail"
    );
}

/// Running a package with a graph it was not built from (here two layers
/// against a one-layer package, or batch 2 against batch 1) is refused with
/// an error naming a tensor, not run into a silent mismatch; the timed run
/// accounts for every codelet and exchange step.
#[test]
fn a_graph_other_than_the_packages_is_refused() {
    use ipu_package::graph::{ParseOptions, parse_fixture_with};
    let text = fixture("micro-1l-h32.json");
    let graph = parse_fixture(&text).unwrap();
    let config = BuildConfig {
        tiles: Some(16),
        ..BuildConfig::default()
    };
    let package = build_package(&graph, &config, &Stages::in_memory()).unwrap();
    let inputs = values::generate(&graph, 5);
    let (_, stats) = ipu_sim::tiles::run_package_with_stats(&package, &graph, &inputs).unwrap();
    let calls: u64 = stats.codelets.iter().map(|k| k.calls).sum();
    let expected: usize = package
        .program
        .steps
        .iter()
        .map(|s| match s {
            ipu_package::program::Step::Compute(step) => step.calls.len(),
            _ => 0,
        })
        .sum();
    assert!(calls as usize >= expected && calls > 0, "{stats:?}");
    assert_eq!(stats.exchange_steps as usize, package.phases.len());

    for (name, value) in [("layers", 2), ("batch", 2)] {
        let options = ParseOptions {
            overrides: vec![(name.to_owned(), value)],
        };
        let other = parse_fixture_with(&text, &options).unwrap();
        let values = values::generate(&other, 5);
        let error = run_package(&package, &other, &values).unwrap_err();
        assert!(
            matches!(
                error,
                ipu_sim::SimError::FixtureSize { .. }
                    | ipu_sim::SimError::FixtureMissingBuffer { .. }
            ),
            "{name}={value}: {error}"
        );
    }
}

/// The progress hook is told of every compute and exchange step run, a
/// repeat's steps once per iteration, in order and against a total known
/// before the first step; with it the run's results are the same.
#[test]
fn the_progress_hook_counts_every_step_run() {
    use ipu_package::graph::{ParseOptions, parse_fixture_with};
    use ipu_sim::tiles::{ProgressHook, RunConfig, StepProgress, run_package_with};
    use std::sync::{Arc, Mutex};

    let options = ParseOptions {
        overrides: vec![("layers".to_owned(), 2)],
    };
    let graph = parse_fixture_with(&fixture("micro-1l-h32.json"), &options).unwrap();
    let config = BuildConfig {
        tiles: Some(8),
        ..BuildConfig::default()
    };
    let package = build_package(&graph, &config, &Stages::in_memory()).unwrap();
    assert!(
        package
            .program
            .steps
            .iter()
            .any(|s| matches!(s, ipu_package::program::Step::Repeat(r) if r.count == 2)),
        "the two layers are a repeat"
    );
    let inputs = values::generate(&graph, 3);
    let seen: Arc<Mutex<Vec<StepProgress>>> = Arc::default();
    let hook = {
        let seen = seen.clone();
        ProgressHook::new(move |p| seen.lock().unwrap().push(p))
    };
    let with = RunConfig {
        progress: Some(hook),
        ..RunConfig::default()
    };
    let (hooked, stats) = run_package_with(&package, &graph, &inputs, &with).unwrap();
    let (plain, _) = run_package_with(&package, &graph, &inputs, &RunConfig::default()).unwrap();
    let seen = seen.lock().unwrap();
    // Every step run is in the run's statistics once.
    let total = stats.steps.len() as u64;
    assert!(total > 0);
    let expected: Vec<StepProgress> = (0..=total)
        .map(|done| StepProgress { done, total })
        .collect();
    assert_eq!(*seen, expected);
    for output in graph.outputs() {
        assert_eq!(hooked.get(output), plain.get(output));
    }
}

/// A token id past the table faults the tile that reads it, with the
/// index named; no output is produced from another row.
#[test]
fn a_token_id_past_the_table_faults_the_gather() {
    let graph = parse_fixture(&fixture("micro-text-1l-h32.json")).unwrap();
    let mut inputs = values::generate(&graph, 3);
    let ids = graph.tensor_by_name("input_ids").unwrap();
    let mut bad = inputs.get(ids).unwrap().to_vec();
    assert!(
        bad.iter()
            .all(|&x| x.fract() == 0.0 && (0.0..40.0).contains(&x))
    );
    bad[5] = 40.0;
    inputs.insert(ids, bad);
    let config = BuildConfig {
        tiles: Some(16),
        ..BuildConfig::default()
    };
    let package = build_package(&graph, &config, &Stages::in_memory()).unwrap();
    match run_package(&package, &graph, &inputs) {
        Err(ipu_sim::SimError::GatherIndex { position, rows, .. }) => {
            assert_eq!((position, rows), (5, 40));
        }
        other => panic!("expected a gather index fault, got {other:?}"),
    }
}

/// A view of a view (a reshape of a slice, as the text tower's head reads
/// its last token) is materialised in one exchange step and read in the
/// next: both copies in one step would read the intermediate before it is
/// written.
#[test]
fn a_reshape_of_a_slice_runs_like_the_reference() {
    use ipu_layout::Precision::F16;
    use ipu_package::graph::{GraphBuilder, Op, TensorKind};
    let mut b = GraphBuilder::new("slice-reshape");
    let x = b.tensor("x", [2, 8, 32], F16, TensorKind::Input);
    let w = b.tensor("w", [2, 32], F16, TensorKind::Input);
    let last = b.tensor("last", [2, 1, 32], F16, TensorKind::Activation);
    let flat = b.tensor("flat", [2, 32], F16, TensorKind::Activation);
    let y = b.tensor("y", [2, 32], F16, TensorKind::Output);
    b.op(Op::Slice {
        input: x,
        axis: 1,
        start: 7,
        output: last,
    });
    b.op(Op::Reshape {
        input: last,
        output: flat,
    });
    b.op(Op::Add {
        left: flat,
        right: w,
        output: y,
    });
    let graph = b.finish().unwrap();
    let inputs = values::generate(&graph, 5);
    let reference = evaluate(&graph, &inputs).unwrap();
    for tiles in [4, 16] {
        let config = BuildConfig {
            tiles: Some(tiles),
            ..BuildConfig::default()
        };
        let package = build_package(&graph, &config, &Stages::in_memory()).unwrap();
        let view = |s: &ipu_package::program::Step| {
            matches!(s, ipu_package::program::Step::Exchange(e)
                if e.label.role == ipu_package::program::StepRole::View)
        };
        assert!(package.program.steps.iter().any(view), "no view step");
        crate::cycles::assert_estimate_is_the_count(
            &graph,
            &package,
            &format!("slice-reshape on {tiles} tiles"),
        );
        let device = run_package(&package, &graph, &inputs).unwrap();
        let c = compare(
            reference.get(y).unwrap(),
            device.get(y).unwrap(),
            Tolerance::graph(F16),
        );
        assert!(c.pass, "on {tiles} tiles: {c:?}");
    }
}
