//! `cargo xtask reference`: parse a fixture, generate its values and run
//! the reference evaluator, printing the time of each phase and statistics
//! of every output.
//!
//! This is the figure-printing companion of the reference benchmark: it
//! times one run of a whole model (for example SigLIP so400m with all 27
//! layers), which a criterion benchmark would repeat for too long. Build it
//! in release mode for meaningful times:
//! `cargo run --release -p xtask -- reference --fixture fixtures/siglip-so400m-b2.json`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use ipu_package::graph::{ParseOptions, parse_fixture_with, values};

use crate::params::parse_param;

/// Options of `reference`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The fixture to evaluate
    #[arg(long, value_name = "PATH", default_value = "fixtures/tiny-2l-h64.json")]
    fixture: PathBuf,
    /// Seed of the generated inputs and weights
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Override a fixture parameter, e.g. `--set layers=1` (repeatable)
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_param)]
    overrides: Vec<(String, u64)>,
}

/// Runs the task.
pub fn reference(args: &Args) -> Result<ExitCode, String> {
    let seed = args.seed;
    let options = ParseOptions {
        overrides: args.overrides.clone(),
    };
    let fixture = args.fixture.display();
    let text = std::fs::read_to_string(&args.fixture)
        .map_err(|e| format!("cannot read {fixture}: {e}"))?;

    let start = Instant::now();
    let graph = parse_fixture_with(&text, &options).map_err(|e| format!("{fixture}: {e}"))?;
    let parsed = start.elapsed();
    println!(
        "fixture {fixture}: graph `{}`, {} tensors, {} ops, {} parameters, parsed in {:.1} ms",
        graph.name(),
        graph.tensors().len(),
        graph.ops().len(),
        graph.parameter_count(),
        parsed.as_secs_f64() * 1e3
    );

    let start = Instant::now();
    let inputs = values::generate(&graph, seed);
    println!(
        "values (seed {seed}): {} tensors in {:.2} s",
        inputs.len(),
        start.elapsed().as_secs_f64()
    );

    let start = Instant::now();
    let outputs = {
        let _shown = crate::progress::activity("reference evaluation");
        ipu_sim::evaluate(&graph, &inputs).map_err(|e| e.to_string())?
    };
    println!(
        "reference evaluation: {:.2} s on {} threads",
        start.elapsed().as_secs_f64(),
        rayon::current_num_threads()
    );
    for (id, v) in outputs.iter() {
        let t = graph.tensor(id);
        let rms =
            (v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / v.len().max(1) as f64).sqrt();
        let (lo, hi) = v
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| {
                (a.min(x), b.max(x))
            });
        println!(
            "output {} {:?} {}: rms {rms:.4}, min {lo:.4}, max {hi:.4}",
            t.name(),
            t.extents(),
            t.precision()
        );
    }
    Ok(ExitCode::SUCCESS)
}
