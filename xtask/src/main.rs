//! `cargo xtask`: the project's tasks, as a small table.
//!
//! Every CI job is one of these tasks or the README's test command, so a
//! developer runs exactly what CI runs. Tasks that shell out to cargo honour
//! `$CARGO` and echo each command before running it. A task whose check
//! fails exits with a non-zero status and an `error:` line saying why.

// A package build allocates and frees hundreds of megabytes of short-lived
// vectors (pieces, rows, timelines) on every thread. The system allocator
// hands much of it back to the kernel and faults it in again (about 230,000
// page faults per SigLIP b2 build); mimalloc keeps it, and the build took
// about 0.85 of the wall and CPU time in alternating runs (docs/ARCHITECTURE.md).
// Its `no_thp` feature (in the workspace manifest) keeps it from asking for
// transparent huge pages: zeroing them on first touch cost more system time
// than the ~130,000 faults of 4 KiB pages it takes instead.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod graph;

use std::process::{Command, ExitCode};

mod alloc;
mod bench_sim;
mod build_package;
mod device;
mod exchange;
mod hostile;
mod kernels;
mod logging;
mod params;
mod profile;
mod record_phases;
mod report;
mod run_package;

/// A task: its name, a one-line summary, and what runs it.
struct Task {
    name: &'static str,
    summary: &'static str,
    run: fn(&[String]) -> Result<ExitCode, String>,
}

const TASKS: &[Task] = &[
    Task {
        name: "build-package",
        summary: "build a model fixture or a SigLIP --checkpoint DIR into a package (default: SigLIP so400m b2 on every tile of the IPU21)",
        run: build_package::run,
    },
    Task {
        name: "run-package",
        summary: "run a package on the tile model: DIR [--image FILE]... [--inputs seed|FILE] [--seed N] [--out FILE.safetensors] [--reference]",
        run: run_package::run,
    },
    Task {
        name: "bench-sim",
        summary: "time the tile model and the reference on SigLIP b2 on the IPU21: [--layers N] [--keep DIR]",
        run: bench_sim::run,
    },
    Task {
        name: "inspect-package",
        summary: "print a package's manifest summary and validate it: DIR",
        run: run_package::inspect,
    },
    Task {
        name: "profile",
        summary: "the cycle estimate of a package: per layer, whole model, images/s, roofline: DIR [--steps]",
        run: profile::run,
    },
    Task {
        name: "report",
        summary: "write a self-contained HTML report of a package's time and memory: DIR --out FILE.html [--tile N]",
        run: report::run,
    },
    Task {
        name: "test",
        summary: "run the whole test suite and the embedding example (what CI runs)",
        run: test,
    },
    Task {
        name: "exchange",
        summary: "exchange schedule figures: FILE.json or --families [--check]",
        run: exchange::run,
    },
    Task {
        name: "kernels",
        summary: "compile times and AMP utilisation of the seed's SigLIP GEMM variants",
        run: kernels::run,
    },
    Task {
        name: "reference",
        summary: "evaluate a fixture with the reference evaluator and print timings",
        run: graph::reference,
    },
    Task {
        name: "alloc",
        summary: "FILE.csv --capacity BYTES [--timeout S] [--output F] | bench [--quick]: placement tools",
        run: alloc::alloc,
    },
    Task {
        name: "hostile",
        summary: "hostile-input campaign through the CLI: [--packages N] [--fixtures N] [--snapshots N] [--seed S] [--timeout S] [--memory-mb MB] [--keep DIR]",
        run: hostile::run,
    },
    Task {
        name: "hostile-case",
        summary: "one package case of `hostile`, run as run-package reads and runs it: package DIR",
        run: hostile::case,
    },
    Task {
        name: "ci",
        summary: "fmt check, clippy -D warnings, tests, bench build",
        run: ci,
    },
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(name) = args.first() else {
        eprintln!("error: give a task");
        usage();
        return ExitCode::from(2);
    };
    match TASKS.iter().find(|t| t.name == name) {
        Some(task) => match (task.run)(&args[1..]) {
            Ok(code) => code,
            Err(message) => {
                eprintln!("error: {message}");
                ExitCode::FAILURE
            }
        },
        None => {
            eprintln!("error: unknown task `{name}`");
            usage();
            ExitCode::from(2)
        }
    }
}

/// Parses a task's arguments with clap. `Err` carries the exit status when
/// clap has already printed help (0) or an error (2).
fn parse_args<A: clap::Parser>(task: &str, args: &[String]) -> Result<A, ExitCode> {
    let argv = std::iter::once(task.to_owned()).chain(args.iter().cloned());
    A::try_parse_from(argv).map_err(|e| {
        let _ = e.print();
        if e.use_stderr() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    })
}

fn usage() {
    eprintln!("usage: cargo xtask <task> [args]\n\ntasks:");
    for t in TASKS {
        eprintln!("  {:<16} {}", t.name, t.summary);
    }
}

/// Runs cargo with `args`, echoing the command first; a failure is `Err`
/// with the command.
fn cargo(args: &[&str]) -> Result<ExitCode, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!("$ {cargo} {}", args.join(" "));
    let status = Command::new(&cargo)
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
fn test(extra: &[String]) -> Result<ExitCode, String> {
    let mut args = vec!["test", "--workspace"];
    args.extend(extra.iter().map(String::as_str));
    cargo(&args)?;
    cargo(&["run", "--quiet", "-p", "ipu-package", "--example", "embed"])
}

fn ci(_: &[String]) -> Result<ExitCode, String> {
    let steps: &[&[&str]] = &[
        &["fmt", "--all", "--", "--check"],
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &["test", "--workspace"],
        &["run", "--quiet", "-p", "ipu-package", "--example", "embed"],
        &["bench", "--workspace", "--no-run"],
    ];
    for step in steps {
        cargo(step)?;
    }
    Ok(ExitCode::SUCCESS)
}
