//! The per-op check: it passes every op of correct packages and names the
//! op, tensor and worst element of a wrong one that the end-to-end
//! comparison lets through.

use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::{parse_fixture, values};
use ipu_package::program::BufferRole;
use ipu_sim::SimError;
use ipu_sim::reference::compare::{Tolerance, compare};
use ipu_sim::tiles::{Fault, RunConfig, run_package_with};

/// The tiny fixture and its package on 16 tiles.
fn tiny_on_16_tiles() -> (ipu_package::Graph, ipu_package::package::Package) {
    let graph = parse_fixture(&crate::fixture_text("tiny-2l-h64.json")).expect("parses");
    let config = BuildConfig {
        tiles: Some(16),
        ..BuildConfig::default()
    };
    let package = build_package(&graph, &config, &Stages::in_memory()).expect("builds");
    (graph, package)
}

/// 0.02 added to the weight buffer `name` (a bias) on the first tile of
/// its shards that holds data.
fn bias_fault(package: &ipu_package::package::Package, name: &str) -> Fault {
    let (buffer, b) = package
        .program
        .buffers
        .iter()
        .find(|(_, b)| b.name == name && b.role == BufferRole::Weight)
        .expect("the bias buffer");
    let tile =
        b.ty.shards()
            .find(|s| s.bytes > 0)
            .expect("a shard with data")
            .tile;
    Fault {
        buffer,
        tile,
        delta: 0.02,
    }
}

/// A GEMM bias off by 0.02 on the tiles of one bias shard (the size of the
/// rotated-GEMM bias bug that once passed the end-to-end tolerance) fails
/// the per-op check, which names that GEMM, its output and an element.
#[test]
fn a_bias_off_by_two_hundredths_names_its_gemm() {
    let (graph, package) = tiny_on_16_tiles();
    let inputs = values::generate(&graph, 5);
    let (_, stats) =
        run_package_with(&package, &graph, &inputs, &RunConfig::default()).expect("clean run");
    assert!(stats.ops_checked > 0, "{stats:?}");

    // The bias of the first GEMM with one, on the first tile of its shard.
    let (op, bias) = graph
        .ops()
        .iter()
        .find_map(|(id, op)| match op {
            ipu_package::graph::Op::Gemm { bias: Some(b), .. } => Some((id, *b)),
            _ => None,
        })
        .expect("a GEMM with a bias");
    let faulty = RunConfig {
        faults: vec![bias_fault(&package, graph.tensor(bias).name())],
        ..RunConfig::default()
    };
    let e = run_package_with(&package, &graph, &inputs, &faulty).unwrap_err();
    let SimError::OpMismatch(m) = &e else {
        panic!("expected the per-op check to fail, got {e}");
    };
    let output = graph.op(op).output();
    assert_eq!(m.op, op, "{e}");
    assert_eq!(m.kind, "gemm", "{e}");
    assert_eq!(m.tensor, graph.tensor(output).name(), "{e}");
    assert_eq!(
        m.coordinates.len(),
        graph.tensor(output).extents().len(),
        "{e}"
    );
    assert!((m.device - m.reference).abs() > 0.01, "{e}");
    eprintln!("{e}");

    // What the end-to-end comparison alone says about the same fault.
    let unchecked = RunConfig {
        check_ops: false,
        ..faulty
    };
    let (device, _) = run_package_with(&package, &graph, &inputs, &unchecked).expect("runs");
    let reference = ipu_sim::evaluate(&graph, &inputs).expect("evaluates");
    for o in graph.outputs() {
        let t = graph.tensor(o);
        let c = compare(
            reference.get(o).expect("reference output"),
            device.get(o).expect("device output"),
            Tolerance::graph(t.precision()),
        );
        eprintln!(
            "end to end with the fault, {}: rms error {} pass {}",
            t.name(),
            c.rms_error,
            c.pass
        );
    }
}

/// Where a GEMM's reduce step also runs the residual add reading its
/// result (on 16 tiles, the tiny fixture's fc2 and `x1`), the per-op check
/// takes the GEMM's result first and checks it on its own: a wrong fc2
/// bias names fc2, not the add, whose reference would otherwise have stood
/// in for the GEMM's result (the add writes the carried buffer, which comes
/// first by buffer id).
#[test]
fn a_gemm_whose_reduce_runs_the_residual_add_is_checked_before_the_add() {
    let (graph, package) = tiny_on_16_tiles();
    let folded = package.program.walk().any(|e| match e {
        ipu_package::program::WalkEvent::Compute(step, _) => {
            step.label.name == "enc0.fc2"
                && step.calls.iter().any(|(_, c)| {
                    matches!(
                        c,
                        ipu_package::program::Codelet::Add {
                            broadcast_rows: false,
                            ..
                        }
                    )
                })
        }
        _ => false,
    });
    assert!(folded, "fc2's reduce runs the residual add on 16 tiles");
    let (op, bias) = graph
        .ops()
        .iter()
        .find_map(|(id, op)| match op {
            ipu_package::graph::Op::Gemm {
                bias: Some(b),
                output,
                ..
            } if graph.tensor(*output).name() == "enc0.fc2" => Some((id, *b)),
            _ => None,
        })
        .expect("fc2 with a bias");
    let faulty = RunConfig {
        faults: vec![bias_fault(&package, graph.tensor(bias).name())],
        ..RunConfig::default()
    };
    let inputs = values::generate(&graph, 7);
    let e = run_package_with(&package, &graph, &inputs, &faulty).unwrap_err();
    let SimError::OpMismatch(m) = &e else {
        panic!("expected the per-op check to fail, got {e}");
    };
    assert_eq!((m.op, m.kind), (op, "gemm"), "{e}");
    assert_eq!(m.tensor, "enc0.fc2", "{e}");
}
