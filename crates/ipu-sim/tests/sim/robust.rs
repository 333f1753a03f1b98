//! Packages edited into shapes no build produces, run on the tile model:
//! each must be refused with a typed error before it panics, runs for ever
//! or exhausts memory. Each case is a crash the model once had.

use std::sync::OnceLock;

use ipu_layout::TileId;
use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::{
    Graph, ParseOptions, ValueSet, parse_fixture, parse_fixture_with, values,
};
use ipu_package::package::Package;
use ipu_package::program::{BufferId, Codelet, KernelId, Operand, RepeatStep, Step};
use ipu_sim::SimError;
use ipu_sim::tiles::{Limits, RunConfig, check_fixture, run_package, run_package_with};

/// The micro fixture built on 16 tiles, with its values (built once).
fn micro() -> &'static (Graph, Package, ValueSet) {
    static BUILT: OnceLock<(Graph, Package, ValueSet)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let graph = parse_fixture(&crate::fixture_text("micro-1l-h32.json")).expect("parses");
        let config = BuildConfig {
            tiles: Some(16),
            ..BuildConfig::default()
        };
        let package = build_package(&graph, &config, &Stages::in_memory()).expect("builds");
        let values = values::generate(&graph, 3);
        (graph, package, values)
    })
}

/// Runs `edit`ed copy of the micro package with `limits`.
fn run_edited(limits: Limits, edit: impl FnOnce(&mut Package)) -> Result<(), SimError> {
    let (graph, package, values) = micro();
    let mut p = package.clone();
    edit(&mut p);
    let config = RunConfig {
        limits,
        ..RunConfig::default()
    };
    run_package_with(&p, graph, values, &config).map(|_| ())
}

/// The first codelet (in program order) that `pick` accepts, mutably.
fn codelet(p: &mut Package, pick: impl Fn(&Codelet) -> bool) -> &mut Codelet {
    fn find<'a>(steps: &'a mut [Step], pick: &dyn Fn(&Codelet) -> bool) -> Option<&'a mut Codelet> {
        for s in steps {
            match s {
                Step::Compute(step) => {
                    if let Some((_, c)) = step.calls.iter_mut().find(|(_, c)| pick(c)) {
                        return Some(c);
                    }
                }
                Step::Repeat(r) => {
                    if let Some(c) = find(&mut r.body, pick) {
                        return Some(c);
                    }
                }
                Step::Exchange(_) => {}
            }
        }
        None
    }
    find(&mut p.program.steps, &pick).expect("the package has such a codelet")
}

/// An edit of a package.
type Edit = dyn Fn(&mut Package);

/// Limits that let every package through validation, so that the checks
/// inside the codelets are what refuses it.
fn no_limits() -> Limits {
    Limits {
        max_tiles: 8192,
        max_steps: u64::MAX,
        max_compute_elements: u64::MAX,
        max_exchange_words: u64::MAX,
    }
}

#[test]
fn the_pristine_package_runs() {
    let (graph, package, values) = micro();
    run_package(package, graph, values).expect("runs");
}

#[test]
fn an_operand_naming_an_unknown_buffer_is_an_error() {
    let e = run_edited(Limits::default(), |p| {
        let missing = BufferId::from_u32(p.program.buffers.len() as u32 + 5);
        if let Codelet::Add { a, .. } = codelet(p, |c| matches!(c, Codelet::Add { .. })) {
            a.buffer = missing;
        }
    })
    .unwrap_err();
    assert!(matches!(e, SimError::UnknownBuffer { .. }), "{e}");
}

#[test]
fn a_codelet_on_a_missing_tile_or_kernel_is_an_error() {
    let e = run_edited(Limits::default(), |p| {
        let steps = &mut p.program.steps;
        for s in steps.iter_mut() {
            if let Step::Compute(step) = s {
                step.calls[0].0 = TileId::from_u32(1 << 20);
                break;
            }
        }
    })
    .unwrap_err();
    assert!(matches!(e, SimError::UnknownTile { .. }), "{e}");
    let e = run_edited(Limits::default(), |p| {
        if let Codelet::Gemm { kernel, .. } = codelet(p, |c| matches!(c, Codelet::Gemm { .. })) {
            *kernel = KernelId::from_u32(9999);
        }
    })
    .unwrap_err();
    assert!(matches!(e, SimError::UnknownKernel { .. }), "{e}");
}

#[test]
fn huge_codelet_counts_are_refused_before_they_run() {
    let huge_add = |p: &mut Package| {
        if let Codelet::Add { rows, cols, .. } = codelet(p, |c| matches!(c, Codelet::Add { .. })) {
            *rows = u32::MAX;
            *cols = u32::MAX;
        }
    };
    let huge_reduce = |p: &mut Package| {
        if let Codelet::ReduceSum {
            count, elements, ..
        } = codelet(p, |c| matches!(c, Codelet::ReduceSum { .. }))
        {
            *count = 0;
            *elements = u32::MAX;
        }
    };
    let huge_attention = |p: &mut Package| {
        if let Codelet::AttentionBlock {
            q_rows,
            kv_rows,
            head_dim,
            q_stride,
            kv_stride,
            ..
        } = codelet(p, |c| matches!(c, Codelet::AttentionBlock { .. }))
        {
            *q_rows = u32::MAX;
            *kv_rows = u32::MAX;
            *head_dim = 0;
            *q_stride = 0;
            *kv_stride = 0;
        }
    };
    let huge_combine = |p: &mut Package| {
        if let Codelet::AttentionCombine {
            blocks,
            q_rows,
            stat_block_stride,
            ..
        } = codelet(p, |c| matches!(c, Codelet::AttentionCombine { .. }))
        {
            *blocks = u32::MAX;
            *q_rows = 1;
            *stat_block_stride = 0;
        }
    };
    let huge_zero = |p: &mut Package| {
        if let Codelet::Zero { bytes, .. } = codelet(p, |c| matches!(c, Codelet::Zero { .. })) {
            *bytes = u32::MAX;
        }
    };
    let many_zero_runs = |p: &mut Package| {
        if let Codelet::Zero {
            bytes,
            runs,
            stride,
            ..
        } = codelet(p, |c| matches!(c, Codelet::Zero { .. }))
        {
            *bytes = 8;
            *runs = u32::MAX;
            *stride = 8;
        }
    };
    let overlapping_zero_runs = |p: &mut Package| {
        if let Codelet::Zero {
            bytes,
            runs,
            stride,
            ..
        } = codelet(p, |c| matches!(c, Codelet::Zero { .. }))
        {
            *bytes = 64;
            *runs = 2;
            *stride = 8;
        }
    };
    let edits: [(&str, &Edit); 7] = [
        ("add", &huge_add),
        ("reduce_sum", &huge_reduce),
        ("attention_block", &huge_attention),
        ("attention_combine", &huge_combine),
        ("zero", &huge_zero),
        ("zero runs", &many_zero_runs),
        ("overlapping zero runs", &overlapping_zero_runs),
    ];
    for (what, edit) in edits {
        // With the default limits, the work count refuses the ones whose
        // loops would take too long; without limits, the codelet's own
        // checks refuse them before allocating.
        let e = run_edited(Limits::default(), edit).unwrap_err();
        assert!(
            matches!(
                e,
                SimError::WorkLimit { .. }
                    | SimError::OutOfRange { .. }
                    | SimError::Argument { .. }
            ),
            "{what}: {e}"
        );
        let e = run_edited(no_limits(), edit).unwrap_err();
        assert!(
            matches!(e, SimError::OutOfRange { .. } | SimError::Argument { .. }),
            "{what} without limits: {e}"
        );
    }
}

#[test]
fn endless_repeats_are_refused_before_they_run() {
    // One repeat of 2^32 - 1 iterations of the whole program.
    let e = run_edited(Limits::default(), |p| {
        let body = std::mem::take(&mut p.program.steps);
        p.program.steps = vec![Step::Repeat(RepeatStep {
            name: "forever".to_owned(),
            count: u32::MAX,
            body,
            iteration_buffers: Vec::new(),
        })];
    })
    .unwrap_err();
    assert!(matches!(e, SimError::WorkLimit { .. }), "{e}");
    // 40 nested repeats of 2 around an empty body: 2^40 iterations of
    // nothing.
    let e = run_edited(Limits::default(), |p| {
        let mut step = Step::Repeat(RepeatStep {
            name: "r0".to_owned(),
            count: 2,
            body: Vec::new(),
            iteration_buffers: Vec::new(),
        });
        for i in 1..40 {
            step = Step::Repeat(RepeatStep {
                name: format!("r{i}"),
                count: 2,
                body: vec![step],
                iteration_buffers: Vec::new(),
            });
        }
        p.program.steps.push(step);
    })
    .unwrap_err();
    assert!(matches!(e, SimError::WorkLimit { .. }), "{e}");
}

#[test]
fn a_huge_tile_count_is_refused_before_images_are_allocated() {
    let e = run_edited(Limits::default(), |p| p.manifest.tile_count = 2_000_000).unwrap_err();
    assert!(matches!(e, SimError::TooManyTiles { .. }), "{e}");
}

#[test]
fn rows_for_another_tile_count_are_refused() {
    let e = run_edited(Limits::default(), |p| {
        let rows = &mut p.phases[0].rows;
        let mut per_tile: Vec<Vec<u32>> = (0..rows.tile_count())
            .map(|t| rows.row(TileId::from_u32(t)).to_vec())
            .collect();
        per_tile.push(Vec::new());
        *rows = ipu_exchange::EncodedRows::from_tile_rows(per_tile);
    })
    .unwrap_err();
    assert!(matches!(e, SimError::RowTiles { .. }), "{e}");
}

/// The first shard address of the first buffer, to edit.
fn first_address(p: &mut Package) -> &mut (u32, u32) {
    let list = p
        .placement
        .addresses
        .of_mut(BufferId::from_u32(0))
        .expect("the package has buffers");
    &mut list[0]
}

#[test]
fn a_buffer_placed_outside_memory_or_on_a_missing_tile_is_refused() {
    let e = run_edited(Limits::default(), |p| first_address(p).1 = u32::MAX - 3).unwrap_err();
    assert!(matches!(e, SimError::PlacedOutside { .. }), "{e}");
    let e = run_edited(Limits::default(), |p| first_address(p).0 = 1 << 30).unwrap_err();
    assert!(matches!(e, SimError::UnknownTile { .. }), "{e}");
}

#[test]
fn an_operand_offset_past_its_shard_is_an_error() {
    let e = run_edited(Limits::default(), |p| {
        if let Codelet::Add { out, .. } = codelet(p, |c| matches!(c, Codelet::Add { .. })) {
            *out = Operand {
                buffer: out.buffer,
                offset: u32::MAX,
            };
        }
    })
    .unwrap_err();
    assert!(matches!(e, SimError::OutOfRange { .. }), "{e}");
}

/// The fixture's size limit counts what a run generates or reads whole
/// (inputs, weights, outputs), not the activations it computes an op at
/// a time: SigLIP so400m at batch 6 has more than 2^32 activation
/// elements and must still be read.
#[test]
fn the_fixture_limit_counts_inputs_weights_and_outputs() {
    use ipu_package::TensorKind;
    use ipu_package::package::FixtureMismatch;
    let (graph, package, _) = micro();
    let count = |host: bool| -> u64 {
        graph
            .tensors()
            .values()
            .iter()
            .filter(|t| !host || t.kind() != TensorKind::Activation)
            .map(|t| t.element_count())
            .sum()
    };
    let (host, all) = (count(true), count(false));
    assert!(all > host, "{all} {host}");
    let limits = |max_fixture_elements| ipu_package::package::Limits {
        max_fixture_elements,
        ..ipu_package::package::Limits::default()
    };
    package
        .check_fixture_with(graph, &limits(host))
        .expect("the host's tensors fit the limit");
    let e = package
        .check_fixture_with(graph, &limits(host - 1))
        .expect_err("one element over");
    assert_eq!(
        e,
        FixtureMismatch::TooLarge {
            elements: host,
            limit: host - 1
        }
    );
}

/// A stored fixture edited to 2^24 tokens is refused by its sizes, before
/// any value is generated for it.
#[test]
fn an_oversized_fixture_is_refused_before_values_are_generated() {
    let (_, package, _) = micro();
    let options = ParseOptions {
        overrides: vec![("tokens".to_owned(), 1 << 24)],
    };
    let big =
        parse_fixture_with(&crate::fixture_text("micro-1l-h32.json"), &options).expect("parses");
    let e = check_fixture(package, &big).unwrap_err();
    assert!(matches!(e, SimError::FixtureSize { .. }), "{e}");
    // The run itself checks sizes before it looks for values.
    let e = run_package(package, &big, &ValueSet::new()).unwrap_err();
    assert!(matches!(e, SimError::FixtureSize { .. }), "{e}");
}
