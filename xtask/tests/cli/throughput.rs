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

/// `--transient-budgets` builds each batch under each budget and keeps the
/// fastest that fits, saying which: never slower than the default budget
/// alone (which is among those listed); `build-package --transient-budget`
/// builds with the budget asked for, and a budget of 0 is refused.
#[test]
fn throughput_keeps_the_fastest_of_several_transient_budgets() {
    let sandbox = Sandbox::new();
    let tiny = fixture("tiny-2l-h64.json");
    let tiny = tiny.to_string_lossy();
    let cache = sandbox.cache();
    let cache = cache.to_string_lossy();
    let table = |extra: &[&str]| {
        let base = [
            "throughput",
            "--fixture",
            &tiny,
            "--tiles",
            "16",
            "--batches",
            "2",
            "--up-to",
            "2",
            "--kernel-cache",
            &cache,
        ];
        let run = sandbox.xtask(&[&base[..], extra].concat());
        run.succeeded();
        let row = run
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with("2 "))
            .unwrap_or_else(|| panic!("no batch 2: {}", run.describe()))
            .to_owned();
        let words: Vec<u64> = row
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        // batch, cycles, build ms, budget KiB (items/s and the ratio are
        // not whole numbers).
        assert_eq!(words.len(), 4, "{row}");
        (words[1], words[3])
    };
    let (default_cycles, default_kib) = table(&[]);
    assert_eq!(default_kib, 160);
    let (cycles, kib) = table(&["--transient-budgets", "16,160,320"]);
    assert!([16, 160, 320].contains(&kib), "{kib}");
    assert!(cycles <= default_cycles, "{cycles} > {default_cycles}");

    let built = sandbox.build(
        &fixture("tiny-2l-h64.json"),
        "16",
        &sandbox.out("budget"),
        None,
        &["--transient-budget", "320"],
    );
    built.succeeded();
    assert!(
        built.stderr.contains("transient_budget=327680"),
        "{}",
        built.describe()
    );
    sandbox
        .build(
            &fixture("tiny-2l-h64.json"),
            "16",
            &sandbox.out("zero"),
            None,
            &["--transient-budget", "0"],
        )
        .failed_with("--transient-budget");
}
