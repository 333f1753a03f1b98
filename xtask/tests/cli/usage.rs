//! The command line itself: `--help` at the top and on every task exits 0,
//! `--version` exits 0, no task prints the help and exits 2, and a made-up
//! flag or a value that does not parse exits 2 with clap's message on
//! every task, before any work. The logging options work on every task:
//! a plain build logs no events, `-v` or `RUST_LOG` brings them back.
//!
//! Nothing here builds more than the micro fixture; the refusals do no
//! work at all.

use crate::support::{Outcome, Sandbox, fixture};

/// Every task, as the top-level help lists them (`hostile-case` is hidden
/// there and added by hand).
const TASKS: &[&str] = &[
    "build-package",
    "run-package",
    "inspect-package",
    "zero-shot",
    "bench-sim",
    "profile",
    "throughput",
    "report",
    "test",
    "exchange",
    "kernels",
    "reference",
    "alloc",
    "hostile",
    "ci",
];

/// Tasks with subcommands of their own, each `TASK SUBCOMMAND`.
const SUBCOMMANDS: &[&[&str]] = &[
    &["alloc", "bench"],
    &["alloc", "tile"],
    &["hostile-case", "package"],
    &["hostile-case", "inspect"],
    &["hostile-case", "fixture"],
    &["hostile-case", "snapshot"],
];

/// Asserts a usage error: status 2, clap's `error:` line containing
/// `needle` and its pointer to `--help`, nothing on stdout, no panic. A
/// made-up argument also shows the usage line of `task`.
fn usage_error(outcome: &Outcome, task: &str, needle: &str) {
    assert_eq!(outcome.status.code(), Some(2), "{}", outcome.describe());
    outcome.failed_with(needle);
    assert!(
        outcome.stderr.contains("try '--help'"),
        "{}",
        outcome.describe()
    );
    if needle.starts_with("unexpected argument") || needle.starts_with("unrecognized") {
        assert!(
            outcome
                .stderr
                .contains(&format!("Usage: cargo xtask {task}")),
            "no usage line of {task}:\n{}",
            outcome.describe()
        );
    }
    assert!(outcome.stdout.is_empty(), "{}", outcome.describe());
}

/// The task names in the `Commands:` section of the top-level help.
fn listed_tasks(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn help_and_version_exit_zero_everywhere() {
    let sandbox = Sandbox::new();
    let top = sandbox.xtask(&["--help"]);
    top.succeeded();
    assert_eq!(listed_tasks(&top.stdout), TASKS, "{}", top.stdout);
    for flag in ["-h", "help"] {
        let again = sandbox.xtask(&[flag]);
        again.succeeded();
        assert_eq!(listed_tasks(&again.stdout), TASKS, "{}", again.stdout);
    }
    let version = sandbox.xtask(&["--version"]);
    version.succeeded();
    assert!(
        version.stdout.starts_with("cargo xtask "),
        "{}",
        version.describe()
    );

    let mut tasks: Vec<Vec<&str>> = TASKS
        .iter()
        .chain(["hostile-case"].iter())
        .map(|t| vec![*t])
        .collect();
    tasks.extend(SUBCOMMANDS.iter().map(|s| s.to_vec()));
    for task in &tasks {
        let name = task.join(" ");
        for flag in ["--help", "-h"] {
            let mut args = task.clone();
            args.push(flag);
            let help = sandbox.xtask(&args);
            help.succeeded();
            assert!(
                help.stdout.contains(&format!("Usage: cargo xtask {name}")),
                "{}",
                help.describe()
            );
            // The logging options are on every task.
            for option in ["--verbose", "--quiet", "--log-format"] {
                assert!(help.stdout.contains(option), "{}", help.describe());
            }
        }
        let help = sandbox.xtask(&[&["help"], task.as_slice()].concat());
        help.succeeded();
    }
}

#[test]
fn no_task_prints_the_help_and_exits_two() {
    let sandbox = Sandbox::new();
    let outcome = sandbox.xtask(&[]);
    assert_eq!(outcome.status.code(), Some(2), "{}", outcome.describe());
    assert_eq!(listed_tasks(&outcome.stderr), TASKS, "{}", outcome.stderr);
    let outcome = sandbox.xtask(&["no-such-task"]);
    usage_error(&outcome, "", "unrecognized subcommand 'no-such-task'");
}

#[test]
fn a_made_up_flag_exits_two_on_every_task() {
    let sandbox = Sandbox::new();
    let mut tasks: Vec<Vec<&str>> = TASKS
        .iter()
        .chain(["hostile-case"].iter())
        .map(|t| vec![*t])
        .collect();
    tasks.extend(SUBCOMMANDS.iter().map(|s| s.to_vec()));
    for task in &tasks {
        let mut args = task.clone();
        args.push("--no-such-flag");
        usage_error(
            &sandbox.xtask(&args),
            &task.join(" "),
            "unexpected argument '--no-such-flag'",
        );
    }
    // Tasks that take no positional argument refuse one too.
    for task in ["kernels", "bench-sim", "hostile", "build-package"] {
        usage_error(
            &sandbox.xtask(&[task, "stray"]),
            task,
            "unexpected argument 'stray'",
        );
    }
}

#[test]
fn values_that_do_not_parse_exit_two() {
    let sandbox = Sandbox::new();
    let snapshot = fixture("exchange/small.json");
    let snapshot = snapshot.to_string_lossy();
    let cases: &[(&[&str], &str, &str)] = &[
        // Once read as the default fanout.
        (
            &["exchange", &snapshot, "--presplit-max-fanout", "x"],
            "exchange",
            "invalid value 'x' for '--presplit-max-fanout <N>'",
        ),
        (
            &["exchange", "--families", "--split-jobs", "many"],
            "exchange",
            "invalid value 'many' for '--split-jobs <N>'",
        ),
        // Once a default campaign of 500 packages.
        (
            &["hostile", "--packages", "-1"],
            "hostile",
            "unexpected argument '-1'",
        ),
        (
            &["hostile", "--timeout", "1.5"],
            "hostile",
            "invalid value '1.5' for '--timeout <SECONDS>'",
        ),
        (
            &["run-package", "pkg", "--seed", "seven"],
            "run-package",
            "invalid value 'seven' for '--seed <SEED>'",
        ),
        (
            &["reference", "--set", "layers"],
            "reference",
            "is not NAME=VALUE",
        ),
        (
            &["bench-sim", "--layers", "0"],
            "bench-sim",
            "invalid value '0' for '--layers <LAYERS>'",
        ),
        (
            &["alloc", "p.csv", "--capacity", "lots"],
            "alloc",
            "invalid value 'lots' for '--capacity <CAPACITY>'",
        ),
        (
            &["alloc", "bench", "--timeout", "soon"],
            "alloc bench",
            "invalid value 'soon' for '--timeout <TIMEOUT>'",
        ),
        (&["ci", "deploy"], "ci", "invalid value 'deploy'"),
        (
            &["report", "pkg", "--out", "r.html", "--tile", "last"],
            "report",
            "invalid value 'last' for '--tile <TILE>'",
        ),
        (
            &["build-package", "--log-format", "xml"],
            "build-package",
            "invalid value 'xml' for '--log-format <LOG_FORMAT>'",
        ),
        // Missing or conflicting arguments are usage errors too.
        (
            &["exchange"],
            "exchange",
            "the following required arguments were not provided",
        ),
        (
            &["exchange", &snapshot, "--families"],
            "exchange",
            "cannot be used with",
        ),
        (
            &["exchange", &snapshot, "--write", "dir"],
            "exchange",
            "cannot be used with",
        ),
        (
            &["alloc", "p.csv"],
            "alloc",
            "the following required arguments were not provided",
        ),
        (
            &["profile"],
            "profile",
            "the following required arguments were not provided",
        ),
        (&["kernels", "-q", "-v"], "kernels", "cannot be used with"),
    ];
    for (args, task, needle) in cases {
        usage_error(&sandbox.xtask(args), task, needle);
    }
}

#[test]
fn a_plain_build_logs_no_events_and_verbose_brings_them_back() {
    let sandbox = Sandbox::new();
    let micro = fixture("micro-1l-h32.json");
    let build = |extra: &[&str], rust_log: Option<&str>| {
        let out = sandbox.out("micro");
        let outcome = sandbox.build_logging(&micro, "16", &out, None, extra, rust_log);
        outcome.succeeded();
        // The summary is printed whatever the logging.
        for line in ["result=fits ", "phases "] {
            assert!(
                outcome.stderr.lines().any(|l| l.starts_with(line)),
                "{}",
                outcome.describe()
            );
        }
        outcome
    };
    let event = "package build phase finished";
    let plain = build(&[], None);
    assert!(!plain.stderr.contains(event), "{}", plain.describe());
    assert!(!plain.stderr.contains(" INFO "), "{}", plain.describe());
    let verbose = build(&["-v"], None);
    assert!(verbose.stderr.contains(event), "{}", verbose.describe());
    let from_env = build(&[], Some("info"));
    assert!(from_env.stderr.contains(event), "{}", from_env.describe());
    // -q wins over RUST_LOG.
    let quiet = build(&["-q"], Some("info"));
    assert!(!quiet.stderr.contains(event), "{}", quiet.describe());
    let json = build(&["--log-format", "json", "-v"], None);
    let phases: Vec<serde_json::Value> = json
        .stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.pointer("/fields/message").and_then(|m| m.as_str()) == Some(event))
        .collect();
    assert!(!phases.is_empty(), "{}", json.describe());
    assert!(
        phases
            .iter()
            .all(|v| v.pointer("/fields/phase").is_some_and(|p| p.is_string())),
        "{phases:?}"
    );
}
