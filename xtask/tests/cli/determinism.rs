//! Builds do not depend on the thread count or on the kernel cache's
//! state: the tiny fixture on 64 tiles built with `--jobs 1` and a cold
//! cache, with `--jobs 2` and another cold cache, and with `--jobs 2` and
//! the first (now warm) cache gives the same package, file for file and
//! byte for byte.
//!
//! One field is the exception today: `manifest.json` records the elapsed
//! milliseconds of each build phase (`summary.phase_ms`), which differ from
//! run to run. [`same_package_whatever_the_thread_count`] compares the
//! manifests with those numbers zeroed and every other file byte for byte;
//! [`manifests_are_byte_identical`] asks for the whole manifest and is
//! ignored until the timings leave the package.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::support::{Sandbox, differences, fixture, snapshot};

/// The three builds: cold cache and one thread, a second cold cache and
/// two threads, the first cache (warm) and two threads.
fn three_builds(sandbox: &Sandbox) -> [(&'static str, PathBuf); 3] {
    let tiny = fixture("tiny-2l-h64.json");
    let second_cache = sandbox.out("second-cache");
    let runs = [
        ("jobs1-cold", None, "1"),
        ("jobs2-cold", Some(second_cache.as_path()), "2"),
        ("jobs2-warm", None, "2"),
    ];
    runs.map(|(name, cache, jobs)| {
        let out = sandbox.out(name);
        sandbox
            .build(&tiny, "64", &out, cache, &["--jobs", jobs])
            .succeeded();
        (name, out)
    })
}

/// `manifest.json` with every `summary.phase_ms` entry's milliseconds set
/// to 0 (the phase names are kept, so their list and order still count).
fn without_timings(manifest: &[u8]) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(manifest).expect("the manifest is JSON");
    let phases = value
        .pointer_mut("/summary/phase_ms")
        .and_then(Value::as_array_mut)
        .expect("the manifest has summary.phase_ms");
    for phase in phases {
        phase[1] = Value::from(0);
    }
    serde_json::to_vec_pretty(&value).expect("serialise")
}

fn assert_same(runs: &[(&str, PathBuf)], adjust: impl Fn(&mut BTreeMap<String, Vec<u8>>)) {
    let (first_name, first_dir) = &runs[0];
    let mut first = snapshot(first_dir);
    assert!(
        first.contains_key("manifest.json") && first.len() > 5,
        "{:?}",
        first.keys()
    );
    adjust(&mut first);
    let mut report = Vec::new();
    for (name, dir) in &runs[1..] {
        let mut other = snapshot(dir);
        adjust(&mut other);
        report.extend(differences(first_name, &first, name, &other));
    }
    assert!(
        report.is_empty(),
        "the packages differ:\n{}",
        report.join("\n")
    );
}

#[test]
fn same_package_whatever_the_thread_count() {
    let sandbox = Sandbox::new();
    let runs = three_builds(&sandbox);
    assert_same(&runs, |files| {
        let manifest = files.get_mut("manifest.json").expect("a manifest");
        *manifest = without_timings(manifest);
    });
}

#[test]
#[ignore = "manifest.json records per-phase elapsed milliseconds (summary.phase_ms)"]
fn manifests_are_byte_identical() {
    let sandbox = Sandbox::new();
    let runs = three_builds(&sandbox);
    assert_same(&runs, |_| {});
}
