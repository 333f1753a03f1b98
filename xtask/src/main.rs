//! `cargo xtask`: the project's tasks, one clap command line.
//!
//! Every CI job is one of these tasks or the README's test command, so a
//! developer runs exactly what CI runs. Every task takes the logging
//! options (`logging`); `--help` at the top or after a task says what it
//! takes, and an unknown flag or a value that does not parse exits with
//! status 2 and clap's message. Tasks call library functions, never each
//! other's command lines. Tasks that shell out to cargo honour `$CARGO`
//! and echo each command before running it. A task whose check fails
//! exits with a non-zero status and an `error:` line saying why.

// A package build allocates and frees hundreds of megabytes of short-lived
// vectors (pieces, rows, timelines) on every thread. The system allocator
// hands much of it back to the kernel and faults it in again; mimalloc
// keeps it, and the build is faster with it (docs/ARCHITECTURE.md). Its
// `no_thp` feature (in the workspace manifest) keeps it from asking for
// transparent huge pages: zeroing them on first touch cost more system time
// than the faults of 4 KiB pages it takes instead.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod graph;

use std::process::{Command, ExitCode};

use clap::{Parser, Subcommand, ValueEnum};

mod alloc;
mod alloc_tile;
mod bench_sim;
mod build_checkpoint;
mod build_package;
mod device;
mod exchange;
mod hostile;
mod kernels;
mod logging;
mod params;
mod profile;
mod progress;
mod record_phases;
mod report;
mod run_package;
mod throughput;
mod zero_shot;

/// The project's tasks: build, run, inspect and measure IPU21 packages,
/// and run what CI runs.
#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    version,
    arg_required_else_help = true
)]
struct Cli {
    #[command(flatten)]
    log: logging::LogArgs,
    #[command(subcommand)]
    task: Task,
}

/// The tasks.
#[derive(Subcommand, Debug)]
enum Task {
    /// Build a model fixture or a Hugging Face checkpoint (SigLIP, ViT, CLIP vision) into a package
    /// (default: SigLIP so400m b2 on every tile of the IPU21)
    BuildPackage(build_package::Args),
    /// Run a package on the tile model, checked against the reference
    RunPackage(run_package::Args),
    /// Print a package's manifest summary and validate it
    InspectPackage(run_package::InspectArgs),
    /// SigLIP zero-shot scores: run a vision and a text package on the
    /// tile model and print every (image, label) probability
    ZeroShot(zero_shot::Args),
    /// Time the tile model and the reference on SigLIP so400m b2 on the
    /// IPU21 (a benchmark: build with --release)
    BenchSim(bench_sim::Args),
    /// Print a package's cycle estimate: per layer, whole model,
    /// images/s, roofline
    Profile(profile::Args),
    /// Images per second by batch (default 1, 2, 4) and the largest batch
    /// that fits, from fresh builds of the fixture
    Throughput(throughput::Args),
    /// Write a self-contained HTML report of a package's time and memory
    Report(report::Args),
    /// Run the whole test suite and the embedding example (what CI runs)
    Test(TestArgs),
    /// Exchange schedule figures of a phase snapshot or of the generated
    /// families
    Exchange(exchange::Args),
    /// Compile times and AMP utilisation of the seed's SigLIP GEMM
    /// variants
    Kernels,
    /// Evaluate a fixture with the reference evaluator and print timings
    Reference(graph::Args),
    /// Place a MiniMalloc-style CSV problem, or print the allocator's
    /// figures (`alloc bench`)
    Alloc(alloc::Args),
    /// A hostile-input campaign: edited packages, fixtures and exchange
    /// snapshots, each case in a child process under limits
    Hostile(hostile::Args),
    /// One case of `hostile`, run in its child process
    #[command(hide = true)]
    HostileCase {
        #[command(subcommand)]
        case: hostile::Case,
    },
    /// The CI jobs besides the tests: lint, docs, benches (all of them
    /// without one)
    Ci(CiArgs),
}

impl Task {
    fn run(self) -> Result<ExitCode, String> {
        match self {
            Task::BuildPackage(args) => build_package::run(&args),
            Task::RunPackage(args) => run_package::run(&args),
            Task::InspectPackage(args) => run_package::inspect(&args.package),
            Task::ZeroShot(args) => zero_shot::run(&args),
            Task::BenchSim(args) => bench_sim::run(&args),
            Task::Profile(args) => profile::run(&args),
            Task::Throughput(args) => throughput::run(&args),
            Task::Report(args) => report::run(&args),
            Task::Test(args) => test(&args),
            Task::Exchange(args) => exchange::run(&args),
            Task::Kernels => kernels::run(),
            Task::Reference(args) => graph::reference(&args),
            Task::Alloc(args) => alloc::alloc(&args),
            Task::Hostile(args) => hostile::run(&args),
            Task::HostileCase { case } => hostile::case(&case),
            Task::Ci(args) => ci(&args),
        }
    }
}

fn main() -> ExitCode {
    // Help and version exit 0; a usage error exits 2 with clap's message.
    let cli = Cli::parse();
    logging::init(&cli.log);
    match cli.task.run() {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Options of `cargo xtask test`.
#[derive(clap::Args, Debug)]
struct TestArgs {
    /// Arguments for `cargo test --workspace`, after `--` (e.g. `-- -p
    /// ipu-sim`)
    #[arg(last = true, value_name = "CARGO_TEST_ARGS")]
    cargo_test: Vec<String>,
}

/// Options of `cargo xtask ci`.
#[derive(clap::Args, Debug)]
struct CiArgs {
    /// The job to run (default: all of them in turn)
    #[arg(value_enum)]
    job: Option<CiJob>,
}

/// A CI job besides the test run (`.ci/run`).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum CiJob {
    /// `cargo fmt --check` and `cargo clippy -D warnings`
    Lint,
    /// `cargo doc` with warnings as errors
    Docs,
    /// Builds every benchmark without running it
    Benches,
}

/// Runs cargo with `args`, echoing the command first; a failure is `Err`
/// with the command.
fn cargo(args: &[&str]) -> Result<ExitCode, String> {
    cargo_with(&[], args)
}

/// [`cargo`] with environment variables set for it.
fn cargo_with(env: &[(&str, &str)], args: &[&str]) -> Result<ExitCode, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}='{v}' ")).collect();
    eprintln!("$ {}{cargo} {}", shown.concat(), args.join(" "));
    let status = Command::new(&cargo)
        .envs(env.iter().copied())
        .args(args)
        .status()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if status.success() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(format!("`{cargo} {}` failed ({status})", args.join(" ")))
    }
}

/// The test suite, then the embedding example, which builds a package
/// with stages of its own and runs it on the tile model.
fn test(args: &TestArgs) -> Result<ExitCode, String> {
    let mut cargo_args = vec!["test", "--workspace"];
    cargo_args.extend(args.cargo_test.iter().map(String::as_str));
    cargo(&cargo_args)?;
    cargo(&["run", "--quiet", "-p", "ipu-examples", "--example", "embed"])
}

/// The CI jobs besides the test run (`.ci/run`), the one asked for or all
/// of them in turn. Every cargo command runs `--locked`: CI builds with
/// the committed lock file or fails.
fn ci(args: &CiArgs) -> Result<ExitCode, String> {
    let all = [CiJob::Lint, CiJob::Docs, CiJob::Benches];
    let jobs = match args.job {
        Some(job) => vec![job],
        None => all.to_vec(),
    };
    for job in jobs {
        match job {
            CiJob::Lint => {
                cargo(&["fmt", "--all", "--", "--check"])?;
                cargo(&[
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--locked",
                    "--",
                    "-D",
                    "warnings",
                ])?;
            }
            CiJob::Docs => {
                cargo_with(
                    &[("RUSTDOCFLAGS", "-D warnings")],
                    &["doc", "--workspace", "--no-deps", "--locked"],
                )?;
            }
            CiJob::Benches => {
                cargo(&["bench", "--workspace", "--no-run", "--locked"])?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        // clap's own checks of the definition: conflicting names, bad
        // defaults, arguments that require missing ones.
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
