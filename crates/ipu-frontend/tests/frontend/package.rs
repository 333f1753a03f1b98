//! A calibrated checkpoint built into a package (`package_checkpoint`):
//! the package carries its weights, graph and model description; a build
//! that does not fit with the F16 groups calibration kept is calibrated
//! again without them, the reason recorded in the precision report; any
//! other build failure is the build's typed error.

use std::sync::Mutex;

use ipu_alloc::{BuiltinPlacer, PlaceError, Placement, Placer, Problem};
use ipu_frontend::PackagedModel;
use ipu_frontend::siglip::{
    CalibrationOptions, Checkpoint, ImportConfig, PackageError, PrecisionPolicy, calibrate,
    import_checkpoint, package_checkpoint,
};
use ipu_package::build::{BuildConfig, BuildError, Stages};
use ipu_package::graph::{Graph, parse_fixture};

use crate::checkpoint::checkpoint_dir;
use crate::fixture_text;

/// The built-in placer, except that it refuses every problem of the same
/// data as the first one it is given (its requests' bytes summed), or
/// every problem at all with `always`: the first model does not fit in
/// any placement round, a model of other precisions may. It refuses by
/// placing the problem with its first request on every tile made larger
/// than the tile: a genuine misfit, as a build too large for the device
/// gets.
#[derive(Debug, Default)]
struct RefuseFirstModel {
    always: bool,
    first: Mutex<Option<u64>>,
}

impl Placer for RefuseFirstModel {
    fn name(&self) -> &str {
        "refuse-first-model"
    }

    fn place(&self, problem: &Problem) -> Result<Placement, PlaceError> {
        let builtin = BuiltinPlacer::default();
        let bytes: u64 = problem
            .tiles
            .iter()
            .flat_map(|t| &t.requests)
            .map(|r| u64::from(r.bytes))
            .sum();
        let first = *self
            .first
            .lock()
            .expect("not poisoned")
            .get_or_insert(bytes);
        if self.always || bytes == first {
            let mut larger = problem.clone();
            for tile in &mut larger.tiles {
                if let Some(r) = tile.requests.first_mut() {
                    r.bytes = 1 << 22;
                }
            }
            return builtin.place(&larger);
        }
        builtin.place(problem)
    }
}

fn checkpoint() -> (Checkpoint, CalibrationOptions) {
    let template = PrecisionPolicy::from_graph(
        &parse_fixture(&fixture_text("tiny-2l-h64.json")).expect("fixture"),
    )
    .expect("policy");
    let checkpoint = import_checkpoint(
        &checkpoint_dir("siglip-vision-head"),
        &ImportConfig {
            batch: 2,
            policy: template.clone(),
            name: None,
        },
    )
    .expect("imports");
    (checkpoint, CalibrationOptions::new(template))
}

fn stages(placer: RefuseFirstModel) -> Stages {
    Stages {
        placer: Box::new(placer),
        ..Stages::in_memory()
    }
}

/// One placement per build: a misfit is not replanned.
fn config() -> BuildConfig {
    BuildConfig {
        tiles: Some(16),
        max_replans: 0,
        ..BuildConfig::default()
    }
}

fn groups_kept(graph_report: &ipu_frontend::siglip::report::PrecisionReport) -> Vec<String> {
    graph_report
        .groups
        .iter()
        .filter(|g| g.decision == "F16")
        .map(|g| g.group.clone())
        .collect()
}

#[test]
fn a_package_that_fits_keeps_the_f16_groups_and_describes_its_graph() {
    let (checkpoint, options) = checkpoint();
    let calibration = calibrate(&checkpoint, &options).expect("calibrates");
    let kept = groups_kept(calibration.report());
    assert!(
        !kept.is_empty(),
        "the golden checkpoint keeps some F16 group"
    );
    let built = package_checkpoint(
        &checkpoint,
        calibration,
        &options,
        &config(),
        &Stages::in_memory(),
    )
    .expect("builds");
    assert_eq!(groups_kept(built.calibration.report()), kept);
    let package = &built.package;
    let stored = parse_fixture(package.fixture.as_deref().expect("a graph")).expect("parses");
    assert_same(&stored, &built.graph);
    assert_eq!(stored.name(), checkpoint.graph().name());
    assert!(package.weights.is_some());
    let model = package.model.as_ref().expect("a model description");
    assert!(package.validate().is_empty(), "{:?}", package.validate());
    PackagedModel::from_description(model, &stored).expect("the description builds the graph");
}

#[test]
fn a_build_that_does_not_fit_with_f16_groups_is_calibrated_again_without_them() {
    let (checkpoint, options) = checkpoint();
    let calibration = calibrate(&checkpoint, &options).expect("calibrates");
    assert!(!groups_kept(calibration.report()).is_empty());
    let built = package_checkpoint(
        &checkpoint,
        calibration,
        &options,
        &config(),
        &stages(RefuseFirstModel::default()),
    )
    .expect("builds without the F16 groups");
    let report = built.calibration.report();
    assert!(groups_kept(report).is_empty(), "{:?}", report.groups);
    for group in &report.groups {
        assert!(
            group.reason.contains("did not fit on 16 tiles"),
            "{}",
            group.reason
        );
    }
    // Nor is any operand raised for the fidelity target: F16 is refused
    // as a whole, and the record says why when FP8 misses the target.
    let fidelity = report.fidelity.as_ref().expect("a fidelity record");
    assert!(
        fidelity.operands.iter().all(|o| o.decision == "FP8"),
        "{fidelity:?}"
    );
    assert!(
        fidelity.met || fidelity.reason.contains("did not fit on 16 tiles"),
        "{}",
        fidelity.reason
    );
    // The package records the calibration it was built with.
    let model = built.package.model.as_ref().expect("described");
    assert_eq!(
        model.frontend["precision"],
        serde_json::to_value(report).expect("json")
    );
    assert!(built.package.validate().is_empty());
}

#[test]
fn a_build_that_does_not_fit_without_f16_groups_either_is_the_builds_error() {
    let (checkpoint, options) = checkpoint();
    let calibration = calibrate(&checkpoint, &options).expect("calibrates");
    let always = RefuseFirstModel {
        always: true,
        ..RefuseFirstModel::default()
    };
    match package_checkpoint(
        &checkpoint,
        calibration,
        &options,
        &config(),
        &stages(always),
    ) {
        Err(PackageError::Build {
            source: BuildError::DoesNotFit { .. },
        }) => {}
        other => panic!("{other:?}"),
    }
}

fn assert_same(a: &Graph, b: &Graph) {
    assert_eq!(a.name(), b.name());
    assert_eq!(a.tensors().values(), b.tensors().values());
    assert_eq!(a.ops().values(), b.ops().values());
    assert_eq!(a.repeats(), b.repeats());
}
