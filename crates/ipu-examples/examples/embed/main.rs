//! Embedding the package builder in another toolchain with all four
//! stages of the embedder's own: a placer (`placer.rs`), an exchange
//! scheduler (`scheduler.rs`), a kernel toolchain (`toolchain.rs`) and a
//! kernel store (`store.rs`), each simple but real.
//!
//! The tiny SigLIP fixture is built on 16 tiles with them and the package
//! runs on the tile model against the reference evaluation. Then each
//! stage gets a bug, and the build refuses its wrong result with an error
//! of its own: the checkers share nothing with any stage.
//!
//! Run it with `cargo run -p ipu-examples --example embed`.

mod placer;
mod scheduler;
mod store;
mod toolchain;

use ipu_kernels::KernelError;
use ipu_package::build::{BuildConfig, BuildError, Stages, build_package};
use ipu_package::graph::{Graph, parse_fixture, values};
use ipu_sim::reference::{Tolerance, compare};

use placer::FirstFitPlacer;
use scheduler::SequentialScheduler;
use store::MapStore;
use toolchain::ProgramToolchain;

/// The fixture, as a user would have it on disk.
const TINY: &str = include_str!("../../../../fixtures/tiny-2l-h64.json");

/// The example's four stages, the kernels kept in `store`.
fn stages(store: &MapStore) -> Stages {
    Stages {
        placer: Box::new(FirstFitPlacer { overlap: false }),
        scheduler: Box::new(SequentialScheduler { drop_a_word: false }),
        toolchain: Box::new(ProgramToolchain::default()),
        kernel_store: Box::new(store.clone()),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let graph = parse_fixture(TINY)?;
    let config = BuildConfig {
        tiles: Some(16),
        ..BuildConfig::default()
    };
    let store = MapStore::default();
    built_and_run(&graph, &config, &store)?;
    refused(&graph, &config, &store)
}

/// Builds the fixture with the example's stages and runs the package on
/// the tile model against the reference evaluation.
fn built_and_run(
    graph: &Graph,
    config: &BuildConfig,
    store: &MapStore,
) -> Result<(), Box<dyn std::error::Error>> {
    let stages = stages(store);
    let package = build_package(graph, config, &stages)?;
    let s = &package.manifest.summary;
    println!(
        "built {} on {} tiles with placer {}, scheduler {}, toolchain {}, store {}",
        graph.name(),
        s.tile_count,
        stages.placer.name(),
        stages.scheduler.name(),
        stages.toolchain.identity(),
        stages.kernel_store.name(),
    );
    let horizon: u64 = package.phases.iter().map(|p| p.info.horizon).sum();
    let bound: u64 = package
        .phases
        .iter()
        .map(|p| p.info.stronger_lower_bound)
        .sum();
    // The scheduler cannot readdress, so the build scheduled the next
    // iteration of each phase a repeat body patches again.
    let patched = package
        .phases
        .iter()
        .filter(|p| !p.info.patches.is_empty())
        .count();
    println!(
        "  peak {} bytes; {} kernels, {} in the store; {} exchange phases ({} patched per iteration), horizon {} cycles against a bound of {}",
        s.peak_bytes,
        s.kernels,
        store.len(),
        package.phases.len(),
        patched,
        horizon,
        bound
    );
    let mut values = values::generate_weights(graph, 1);
    values.extend(values::generate_inputs(graph, 1));
    let device = ipu_sim::tiles::run_package(&package, graph, &values)?;
    let reference = ipu_sim::evaluate(graph, &values)?;
    for output in graph.outputs() {
        let t = graph.tensor(output);
        let (Some(r), Some(d)) = (reference.get(output), device.get(output)) else {
            return Err(format!("output {} is missing", t.name()).into());
        };
        let c = compare(r, d, Tolerance::graph(t.precision()));
        println!(
            "  output {}: {} elements on the tile model, max_abs {:.5} from the reference, {}",
            t.name(),
            c.elements,
            c.max_abs,
            if c.pass { "pass" } else { "FAIL" }
        );
        if !c.pass {
            return Err(format!("output {} does not match the reference", t.name()).into());
        }
    }
    Ok(())
}

/// Gives each stage a bug in turn and shows the build refusing it.
fn refused(
    graph: &Graph,
    config: &BuildConfig,
    store: &MapStore,
) -> Result<(), Box<dyn std::error::Error>> {
    // A placer that puts two live shards on the same bytes.
    let overlapping = Stages {
        placer: Box::new(FirstFitPlacer { overlap: true }),
        ..stages(store)
    };
    match build_package(graph, config, &overlapping) {
        Err(BuildError::PlacementRejected { placer, errors }) => {
            report("placer", &placer, errors.len(), errors.first());
        }
        other => return Err(unexpected("an overlapping placement", other)),
    }

    // A scheduler whose rows leave out a word.
    let short = Stages {
        scheduler: Box::new(SequentialScheduler { drop_a_word: true }),
        ..stages(store)
    };
    match build_package(graph, config, &short) {
        Err(BuildError::ScheduleRejected {
            scheduler, errors, ..
        }) => report("scheduler", &scheduler, errors.len(), errors.first()),
        other => return Err(unexpected("rows that miss a word", other)),
    }

    // A toolchain whose object holds a wrong program.
    let wrong_kernel = Stages {
        toolchain: Box::new(ProgramToolchain {
            forget_a_store: true,
        }),
        ..stages(&MapStore::default())
    };
    match build_package(graph, config, &wrong_kernel) {
        Err(BuildError::Kernel {
            source: KernelError::CompiledRejected { toolchain, errors },
            ..
        }) => report("toolchain", &toolchain, errors.len(), errors.first()),
        other => return Err(unexpected("a kernel with a wrong program", other)),
    }

    // A store that returns the entries the first build put, each with a
    // byte flipped.
    let tampered = Stages {
        kernel_store: Box::new(store.tampering()),
        ..stages(store)
    };
    match build_package(graph, config, &tampered) {
        Err(BuildError::Kernel {
            source: KernelError::StoredRejected { store, errors, .. },
            ..
        }) => report("kernel store", &store, errors.len(), errors.first()),
        other => return Err(unexpected("a tampered store entry", other)),
    }
    Ok(())
}

/// Prints how the build refused a stage's result.
fn report(stage: &str, name: &str, count: usize, first: Option<&impl std::fmt::Display>) {
    println!(
        "refused the {stage} {name}: {count} error(s), first: {}",
        first.map(ToString::to_string).unwrap_or_default()
    );
}

/// The example's failure when the build did not refuse a wrong result
/// with the error expected.
fn unexpected(
    what: &str,
    outcome: Result<ipu_package::Package, BuildError>,
) -> Box<dyn std::error::Error> {
    match outcome {
        Ok(_) => format!("the build accepted {what}").into(),
        Err(e) => format!("the build refused {what} with another error: {e}").into(),
    }
}
