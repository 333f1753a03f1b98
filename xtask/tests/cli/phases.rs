//! `build-package --write-phases FILE`: the phases a build scheduled,
//! scheduled again by `cargo xtask exchange FILE` with the build's
//! settings, give every step the horizon and bound the package records;
//! and recording them leaves the package as it is.

use serde_json::Value;

use crate::support::{Sandbox, differences, fixture, snapshot};

/// (endpoint bound, horizon) of each row of `cargo xtask exchange`'s table.
fn table_rows(stdout: &str) -> Vec<(u64, u64)> {
    stdout
        .lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // phase transfers endpoint stronger multicast horizon ...
            cols.first()?.parse::<u32>().ok()?;
            Some((cols.get(2)?.parse().ok()?, cols.get(5)?.parse().ok()?))
        })
        .collect()
}

#[test]
fn written_phases_schedule_again_to_the_packaged_horizons() {
    let sandbox = Sandbox::new();
    let tiny = fixture("tiny-2l-h64.json");
    let plain = sandbox.out("plain");
    sandbox.build(&tiny, "64", &plain, None, &[]).succeeded();
    let recorded = sandbox.out("recorded");
    let file = sandbox.out("phases.json");
    let file_arg = file.to_string_lossy().into_owned();
    sandbox
        .build(&tiny, "64", &recorded, None, &["--write-phases", &file_arg])
        .succeeded();
    let diff = differences("plain", &snapshot(&plain), "recorded", &snapshot(&recorded));
    assert!(
        diff.is_empty(),
        "recording changed the package:\n{}",
        diff.join("\n")
    );

    let packaged: Value = serde_json::from_slice(
        &std::fs::read(recorded.join("phases.json")).expect("the package's phases.json"),
    )
    .expect("phases.json is JSON");
    let packaged: Vec<(u64, u64)> = packaged
        .as_array()
        .expect("phases.json is a list")
        .iter()
        .map(|p| {
            let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
            (n("endpoint_lower_bound"), n("horizon"))
        })
        .collect();
    assert!(packaged.len() >= 4, "{packaged:?}");
    // The package builder's scheduler settings (`Stages::builtin`).
    let again = sandbox.xtask(&[
        "exchange",
        &file_arg,
        "--no-core-split",
        "--presplit-max-fanout",
        "2",
    ]);
    again.succeeded();
    assert_eq!(table_rows(&again.stdout), packaged, "{}", again.describe());
}

/// A `--write-phases` path that cannot be written is refused before any
/// work, and nothing is built.
#[test]
fn an_unwritable_phases_file_is_refused_before_the_build() {
    let sandbox = Sandbox::new();
    let out = sandbox.out("never");
    let missing = sandbox.out("no-such-dir").join("phases.json");
    let missing = missing.to_string_lossy().into_owned();
    let outcome = sandbox.build(
        &fixture("tiny-2l-h64.json"),
        "64",
        &out,
        None,
        &["--write-phases", &missing],
    );
    assert!(!outcome.status.success(), "{}", outcome.describe());
    assert!(
        outcome.stderr.contains("--write-phases"),
        "{}",
        outcome.describe()
    );
    assert!(
        !out.exists(),
        "a package was written: {}",
        outcome.describe()
    );
}
