//! `throughput`: items per second by batch, and the largest batch that
//! fits, on a fixture small enough to run out of one tile's memory within
//! a few builds. The figures it prints must be those `profile` gives for
//! the same build, and the batch it calls the first that does not fit
//! must fail `build-package` too.

use crate::support::{Sandbox, fixture};

/// The `(batch, cycles, items/s)` rows of a throughput table.
fn rows(stdout: &str) -> Vec<(u64, u64, f64)> {
    stdout
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let batch = words.next()?.parse().ok()?;
            let cycles = words.next()?.parse().ok()?;
            let items = words.next()?.parse().ok()?;
            Some((batch, cycles, items))
        })
        .collect()
}

#[test]
fn throughput_prints_each_batch_and_the_largest_that_fits() {
    let sandbox = Sandbox::new();
    let tiny = fixture("tiny-2l-h64.json");
    let tiny = tiny.to_string_lossy();
    let cache = sandbox.cache();
    let cache = cache.to_string_lossy();
    let run = sandbox.xtask(&[
        "throughput",
        "--fixture",
        &tiny,
        "--tiles",
        "1",
        "--batches",
        "2,1",
        "--up-to",
        "200",
        "--kernel-cache",
        &cache,
    ]);
    run.succeeded();
    let table = rows(&run.stdout);
    assert!(table.len() >= 3, "{}", run.describe());
    assert_eq!((table[0].0, table[1].0), (1, 2), "{}", run.describe());
    // Two images take longer than one, and not twice as long.
    assert!(table[1].1 > table[0].1, "{}", run.describe());
    assert!(table[1].2 > table[0].2, "{}", run.describe());
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("largest batch that fits: "))
        .unwrap_or_else(|| panic!("no largest batch: {}", run.describe()));
    let largest: u64 = line["largest batch that fits: ".len()..]
        .split(' ')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("unreadable: {line}"));
    assert_eq!(
        table.last().map(|r| r.0),
        Some(largest),
        "{}",
        run.describe()
    );
    assert!(
        line.contains(&format!("(batch {}: ", largest + 1)),
        "{line}"
    );

    // The largest batch's figures are profile's for the same build.
    let out = sandbox.out("largest");
    let largest_text = largest.to_string();
    sandbox
        .build(
            &fixture("tiny-2l-h64.json"),
            "1",
            &out,
            None,
            &["--batch", &largest_text],
        )
        .succeeded();
    let profile = sandbox.xtask(&["profile", &out.to_string_lossy()]);
    profile.succeeded();
    let cycles = table.last().map(|r| r.1).unwrap_or_default();
    assert!(
        profile
            .stdout
            .contains(&format!("whole model: {cycles} cycles")),
        "throughput says {cycles} cycles; {}",
        profile.describe()
    );
    // And one more image does not fit.
    let next = (largest + 1).to_string();
    let out = sandbox.out("too-large");
    let failed = sandbox.build(
        &fixture("tiny-2l-h64.json"),
        "1",
        &out,
        None,
        &["--batch", &next],
    );
    assert!(!failed.status.success(), "{}", failed.describe());
}
