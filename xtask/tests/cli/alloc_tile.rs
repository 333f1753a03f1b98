//! `build-package --write-failed-tile` and `alloc tile`: a build that
//! cannot place a tile writes that tile's placement problem, and placing
//! the file again gives the build's verdict; a file that is not a tile
//! problem gets a clear error.

use serde_json::Value;

use crate::support::{Sandbox, fixture};

/// The micro fixture at batch 256 on one tile: its attention alone needs
/// more than the tile holds, which the placer's lower bound proves.
fn failed_tile(sandbox: &Sandbox) -> std::path::PathBuf {
    let file = sandbox.out("tile.json");
    let file_arg = file.to_string_lossy().into_owned();
    let outcome = sandbox.build(
        &fixture("micro-1l-h32.json"),
        "1",
        &sandbox.out("package"),
        None,
        &["--batch", "256", "--write-failed-tile", &file_arg],
    );
    outcome.failed_with("the workload does not fit");
    assert!(
        outcome
            .stderr
            .contains("wrote the placement problem of tile0"),
        "{}",
        outcome.describe()
    );
    file
}

#[test]
fn a_failed_placement_is_written_and_placed_again_with_the_same_verdict() {
    let sandbox = Sandbox::new();
    let file = failed_tile(&sandbox);
    let file_arg = file.to_string_lossy().into_owned();
    let again = sandbox.xtask(&["alloc", "tile", &file_arg]);
    again.failed_with("proved impossible by the lower bound");
    assert!(
        again.stdout.starts_with("result=infeasible tile=tile0 "),
        "{}",
        again.describe()
    );

    // The same tile without its large requests fits, within the SRAM and
    // above its support reservation.
    let text = std::fs::read_to_string(&file).expect("the tile problem");
    let mut tile: Value = serde_json::from_str(&text).expect("JSON");
    let reserved_end = tile["reservations"][0]["end"]
        .as_u64()
        .expect("a reservation");
    let requests = tile["requests"].as_array_mut().expect("requests");
    requests.retain(|r| r["bytes"].as_u64().is_some_and(|b| b <= 4096));
    for r in requests.iter_mut() {
        r["separate_from"] = Value::Array(Vec::new());
    }
    assert!(!requests.is_empty());
    let small = sandbox.out("small.json");
    std::fs::write(&small, tile.to_string()).expect("write");
    let placed = sandbox.xtask(&["alloc", "tile", &small.to_string_lossy()]);
    placed.succeeded();
    let peak: u64 = placed
        .stdout
        .split_whitespace()
        .find_map(|f| f.strip_prefix("peak="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no peak: {}", placed.describe()));
    // Peaks count from the SRAM start (0x4c000).
    assert!(
        peak >= reserved_end - 0x4c000 && peak <= 624 * 1024,
        "{}",
        placed.describe()
    );
}

#[test]
fn alloc_tile_refuses_what_is_not_a_tile_problem() {
    let sandbox = Sandbox::new();
    let bad = sandbox.out("bad.json");
    std::fs::write(&bad, r#"{"tile": 0, "requests": "#).expect("write");
    sandbox
        .xtask(&["alloc", "tile", &bad.to_string_lossy()])
        .failed_with("is not a tile problem");

    // Well-formed JSON with a request the placer cannot take.
    let file = failed_tile(&sandbox);
    let mut tile: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("JSON");
    tile["requests"][0]["alignment"] = Value::from(3);
    std::fs::write(&bad, tile.to_string()).expect("write");
    sandbox
        .xtask(&["alloc", "tile", &bad.to_string_lossy()])
        .failed_with("not a power of two");

    sandbox
        .xtask(&[
            "alloc",
            "tile",
            &sandbox.out("missing.json").to_string_lossy(),
        ])
        .failed_with("cannot read");
}

/// A checkpoint's build writes its failed tile too: ViT-tiny at batch 128
/// on one tile.
#[test]
fn a_checkpoint_build_writes_its_failed_tile() {
    let sandbox = Sandbox::new();
    let file = sandbox.out("tile.json");
    let (dir, out, cache) = (
        fixture("checkpoints/vit-tiny"),
        sandbox.out("package"),
        sandbox.cache(),
    );
    let outcome = sandbox.xtask(&[
        "build-package",
        "--checkpoint",
        &dir.to_string_lossy(),
        "--batch",
        "128",
        "--tiles",
        "1",
        "--out",
        &out.to_string_lossy(),
        "--kernel-cache",
        &cache.to_string_lossy(),
        "--write-failed-tile",
        &file.to_string_lossy(),
    ]);
    outcome.failed_with("the workload does not fit");
    assert!(!out.exists(), "{}", outcome.describe());
    let again = sandbox.xtask(&["alloc", "tile", &file.to_string_lossy()]);
    again.failed_with("tile0 did not place");
    assert!(
        again.stdout.starts_with("result=infeasible tile=tile0 ")
            || again.stdout.starts_with("result=undecided tile=tile0 "),
        "{}",
        again.describe()
    );
}

/// `--max-replans N` bounds how often a build whose placement fails plans
/// again with less memory: none with 0, at most BuildConfig's three by
/// default; the verdict is the same "does not fit".
#[test]
fn max_replans_bounds_the_replans_of_a_failed_build() {
    let sandbox = Sandbox::new();
    let replans = |extra: &[&str]| {
        let outcome = sandbox.build(
            &fixture("micro-1l-h32.json"),
            "1",
            &sandbox.out("package"),
            None,
            &[&["--batch", "256"], extra].concat(),
        );
        outcome.failed_with("the workload does not fit");
        outcome
            .stderr
            .matches("placement failed; trading cycles")
            .count()
    };
    assert_eq!(replans(&["--max-replans", "0"]), 0);
    assert_eq!(replans(&["--max-replans", "1"]), 1);
    let default = replans(&[]);
    assert!((2..=3).contains(&default), "{default} replans by default");
}
