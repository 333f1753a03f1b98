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
    // Not a terminal: no progress line, not even cleared ones.
    assert!(
        !outcome.stderr.contains('\r') && !outcome.stderr.contains('\x1b'),
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
    let outcome = sandbox.xtask(&["run-package"]);
    outcome.failed_with("the following required arguments were not provided");
    assert_eq!(outcome.status.code(), Some(2), "{}", outcome.describe());
    assert!(outcome.stderr.contains("<DIR>"), "{}", outcome.describe());
}

#[test]
fn overridden_parameters_reach_the_run() {
    // The stored fixture must carry the overrides, or the reference would
    // evaluate a different graph (one layer against two, batch 1 against 2).
    let sandbox = Sandbox::new();
    let out = sandbox.out("micro-l2-b2");
    sandbox
        .build(
            &crate::support::fixture("micro-1l-h32.json"),
            "16",
            &out,
            None,
            &["--param", "layers=2", "--batch", "2"],
        )
        .succeeded();
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("fixture.json")).expect("fixture.json"))
            .expect("stored fixture is JSON");
    assert_eq!(stored["params"]["layers"], 2);
    assert_eq!(stored["params"]["batch"], 2);
    sandbox
        .xtask(&["run-package", &out.to_string_lossy()])
        .succeeded();
}
