//! Builds do not depend on the thread count, on the kernel cache's state
//! or on where the package is written: the tiny fixture on 64 tiles built
//! with `--jobs 1` and a cold cache, with `--jobs 2` and another cold cache,
//! and with `--jobs 2`, the first (now warm) cache and an `--out` two
//! directories deeper gives the same package, file for file and byte for
//! byte, manifest included. The build still reports how long each phase
//! took, on stderr; the timings are not part of the package.

use std::path::PathBuf;

use serde_json::Value;

use crate::support::{Sandbox, differences, fixture, snapshot};

/// The three builds: cold cache and one thread, a second cold cache and
/// two threads, the first cache (warm) and two threads into a directory
/// whose parents the writer has to create.
fn three_builds(sandbox: &Sandbox) -> [(&'static str, PathBuf); 3] {
    let tiny = fixture("tiny-2l-h64.json");
    let second_cache = sandbox.out("second-cache");
    let runs = [
        ("jobs1-cold", None, "1"),
        ("jobs2-cold", Some(second_cache.as_path()), "2"),
        ("nested/deeper/jobs2-warm", None, "2"),
    ];
    runs.map(|(name, cache, jobs)| {
        let out = sandbox.out(name);
        sandbox
            .build(&tiny, "64", &out, cache, &["--jobs", jobs])
            .succeeded();
        (name, out)
    })
}

/// Asserts every run's package is the first's, byte for byte.
fn assert_same(runs: &[(&str, PathBuf)]) {
    let (first_name, first_dir) = &runs[0];
    let first = snapshot(first_dir);
    assert!(
        first.contains_key("manifest.json") && first.len() > 5,
        "{:?}",
        first.keys()
    );
    let mut report = Vec::new();
    for (name, dir) in &runs[1..] {
        report.extend(differences(first_name, &first, name, &snapshot(dir)));
    }
    assert!(
        report.is_empty(),
        "the packages differ:\n{}",
        report.join("\n")
    );
}

#[test]
fn manifests_are_byte_identical() {
    let sandbox = Sandbox::new();
    let runs = three_builds(&sandbox);
    assert_same(&runs);
}

/// The same with attention on the AMP (its own kernels, transposes and
/// softmaxes): one thread or two, the same package.
#[test]
fn amp_attention_packages_are_byte_identical_for_any_thread_count() {
    let sandbox = Sandbox::new();
    let tiny = fixture("tiny-2l-h64.json");
    let runs = [("amp-jobs1", "1"), ("amp-jobs2", "2")].map(|(name, jobs)| {
        let out = sandbox.out(name);
        sandbox
            .build(
                &tiny,
                "64",
                &out,
                None,
                &["--jobs", jobs, "--attention", "amp"],
            )
            .succeeded();
        (name, out)
    });
    let program = std::fs::read_to_string(runs[0].1.join("program.json")).expect("program");
    assert!(program.contains("AttentionSoftmax"), "attention on the AMP");
    assert_same(&runs);
}

#[test]
fn timings_are_reported_but_not_packaged() {
    let sandbox = Sandbox::new();
    let out = sandbox.out("timed");
    let outcome = sandbox.build(&fixture("micro-1l-h32.json"), "16", &out, None, &[]);
    outcome.succeeded();
    // The summary's last line lists every phase with its milliseconds.
    let phases = outcome
        .stderr
        .lines()
        .find(|l| l.starts_with("phases "))
        .unwrap_or_else(|| panic!("no phase timings:\n{}", outcome.describe()));
    for phase in ["plan_kernels=", "plan_package=", "schedule_exchange="] {
        assert!(phases.contains(phase), "{phase} missing: {phases}");
    }
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).expect("the manifest"))
            .expect("the manifest is JSON");
    let summary = manifest
        .pointer("/manifest/summary")
        .expect("the manifest has a summary");
    assert!(
        summary.get("phase_ms").is_none(),
        "the manifest records timings: {summary}"
    );
}
