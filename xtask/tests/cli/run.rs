//! `run-package`: the tiny package on 16 tiles runs on the tile model,
//! every output matches the reference within the graph tolerance, and the
//! command says so per output and overall.

use crate::support::Sandbox;

#[test]
fn tiny_package_runs_and_passes() {
    let sandbox = Sandbox::new();
    let package = sandbox.good_package("tiny-2l-h64.json", "16", "tiny");
    let outcome = sandbox.xtask(&["run-package", &package.to_string_lossy()]);
    outcome.succeeded();
    assert!(
        !outcome.stderr.contains("panicked"),
        "{}",
        outcome.describe()
    );
    // One line per graph output, each with its errors and a verdict.
    for output in ["last_hidden", "pooled"] {
        let line = outcome
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("output={output} ")))
            .unwrap_or_else(|| panic!("no line for {output}:\n{}", outcome.stdout));
        for field in ["max_abs=", "max_rel=", "rms_error=", "result=pass"] {
            assert!(line.contains(field), "{field} missing: {line}");
        }
    }
    assert!(
        outcome
            .stdout
            .lines()
            .any(|l| l.starts_with("result=pass ")),
        "{}",
        outcome.stdout
    );
}

#[test]
fn a_missing_package_is_an_error() {
    let sandbox = Sandbox::new();
    let missing = sandbox.out("absent");
    sandbox
        .xtask(&["run-package", &missing.to_string_lossy()])
        .failed_with("absent/manifest.json");
    sandbox
        .xtask(&["inspect-package", &missing.to_string_lossy()])
        .failed_with("absent/manifest.json");
    sandbox
        .xtask(&["run-package"])
        .failed_with("give the package directory");
}
