//! `build-package` on bad fixtures and bad arguments: a clear error that
//! names what is wrong, a non-zero status, no panic, and no partial
//! package. Each case is run twice: over an earlier good package, which
//! must be left byte for byte as it was, and into a directory that does not
//! exist, which must not be created. In both runs nothing else may appear
//! beside the target either (the writer stages a package in a temporary
//! sibling, which a failure must not leave behind).

use std::path::Path;

use crate::support::{Sandbox, differences, entries, fixture, snapshot};

/// Runs `build-package` with `fixture`, `tiles` and `extra` over an earlier
/// package and into a new directory, and asserts both runs fail with an
/// error containing `needle` and leave the disk as it was.
fn rejected(fixture: &Path, tiles: &str, extra: &[&str], needle: &str) {
    let sandbox = Sandbox::new();
    let earlier = sandbox.good_package("micro-1l-h32.json", "16", "earlier");
    let before = snapshot(&earlier);
    let listing = entries(&sandbox.work());

    sandbox
        .build(fixture, tiles, &earlier, None, extra)
        .failed_with(needle);
    let after = snapshot(&earlier);
    let diff = differences("before", &before, "after", &after);
    assert!(
        diff.is_empty(),
        "a failed build changed the earlier package:\n{}",
        diff.join("\n")
    );
    assert_eq!(
        entries(&sandbox.work()),
        listing,
        "a failed build left files beside the package"
    );

    let fresh = sandbox.out("fresh");
    sandbox
        .build(fixture, tiles, &fresh, None, extra)
        .failed_with(needle);
    assert!(
        !fresh.exists(),
        "a failed build created {}",
        fresh.display()
    );
    assert_eq!(
        entries(&sandbox.work()),
        listing,
        "a failed build left files in the parent"
    );
}

#[test]
fn malformed_json_names_line_and_column() {
    // The micro fixture cut off in the middle of a string.
    rejected(
        &fixture("bad/malformed.json"),
        "16",
        &[],
        "malformed JSON at line 26, column 21",
    );
}

#[test]
fn truncated_fixture_is_malformed_json() {
    // Any cut of a good fixture, not only the shipped one.
    let sandbox = Sandbox::new();
    let bytes = std::fs::read(fixture("tiny-2l-h64.json")).expect("tiny fixture");
    let cut = sandbox.out("cut.json");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).expect("write the cut fixture");
    rejected(&cut, "16", &[], "fixture: malformed JSON at line");
}

#[test]
fn empty_fixture_is_malformed_json() {
    let sandbox = Sandbox::new();
    let empty = sandbox.out("empty.json");
    std::fs::write(&empty, "").expect("write the empty fixture");
    rejected(&empty, "16", &[], "malformed JSON at line 1");
}

#[test]
fn missing_fixture_names_the_file() {
    let sandbox = Sandbox::new();
    rejected(
        &sandbox.out("no-such-fixture.json"),
        "16",
        &[],
        "no-such-fixture.json",
    );
}

#[test]
fn gemm_with_disagreeing_inner_extents_names_the_operand() {
    // fc1's weight declared [mlp, hidden]: its rows (64) are not the left
    // operand's last extent (32).
    rejected(
        &fixture("bad/shape-mismatch.json"),
        "16",
        &[],
        "$.layers[1].ops[12].inputs[1]: op15 (gemm) input 1 t27 `enc0.fc1.w` has shape [64, 32]",
    );
}

#[test]
fn unknown_tensor_names_the_input() {
    rejected(
        &fixture("bad/unknown-tensor.json"),
        "16",
        &[],
        "$.layers[1].ops[6].inputs[1]: no tensor `enc0.key`",
    );
}

#[test]
fn future_schema_version_is_refused() {
    rejected(
        &fixture("bad/future-version.json"),
        "16",
        &[],
        "$.schema_version",
    );
}

#[test]
fn tensor_larger_than_64_bits_names_the_shape() {
    rejected(
        &fixture("bad/overflow.json"),
        "16",
        &[],
        "$.layers[0].tensors[0].shape: t0 `patches`",
    );
}

#[test]
fn shard_larger_than_a_tile_can_address_is_refused() {
    // Hidden 2^30: every count fits in 64 bits, but one tile's shard of an
    // activation would need more than 2^32 bytes. The tensor alone needs
    // more than the tiles hold, which is refused before any planning.
    rejected(
        &fixture("bad/address-overflow.json"),
        "16",
        &[],
        "the workload does not fit:",
    );
}

#[test]
fn shard_larger_than_a_codelet_argument_is_refused() {
    // 2^32 tokens: a shard's element count would not fit a codelet's
    // 32-bit argument; the tensor alone needs more than the tiles hold.
    rejected(
        &fixture("bad/codelet-overflow.json"),
        "16",
        &[],
        "the workload does not fit:",
    );
}

#[test]
fn weights_beyond_sixteen_tiles_do_not_fit() {
    // About 24 MiB of weights against 16 × 624 KiB.
    rejected(
        &fixture("bad/does-not-fit.json"),
        "16",
        &[],
        "the workload does not fit",
    );
}

#[test]
fn zero_tiles_are_refused() {
    rejected(
        &fixture("tiny-2l-h64.json"),
        "0",
        &[],
        "'--tiles 0': the device ipu21 has 1472 tiles",
    );
}

#[test]
fn more_tiles_than_the_device_are_refused() {
    for tiles in ["1473", "100000"] {
        rejected(&fixture("tiny-2l-h64.json"), tiles, &[], "give 1 to 1472");
    }
}

#[test]
fn zero_batch_is_refused() {
    // A batch of 0 used to build a package with empty outputs that no run
    // can check.
    rejected(
        &fixture("micro-1l-h32.json"),
        "16",
        &["--batch", "0"],
        "'--batch <BATCH>'",
    );
}

#[test]
fn an_out_that_is_not_a_package_is_kept() {
    // The writer replaces whatever is at --out; a mistyped --out naming a
    // file or a directory of other things must be refused, before any
    // work, and left as it was.
    let sandbox = Sandbox::new();
    let file = sandbox.out("notes.txt");
    std::fs::write(&file, "keep me").expect("write the file");
    let dir = sandbox.out("sources");
    std::fs::create_dir(&dir).expect("create the directory");
    std::fs::write(dir.join("lib.rs"), "// keep me").expect("write into it");
    let listing = entries(&sandbox.work());
    let before = snapshot(&sandbox.work());
    let micro = fixture("micro-1l-h32.json");
    sandbox
        .build(&micro, "16", &file, None, &[])
        .failed_with("it exists and is not a directory");
    sandbox
        .build(&micro, "16", &dir, None, &[])
        .failed_with("it holds no package (no manifest.json)");
    assert_eq!(entries(&sandbox.work()), listing);
    let diff = differences("before", &before, "after", &snapshot(&sandbox.work()));
    assert!(diff.is_empty(), "{}", diff.join("\n"));

    // An empty directory and an earlier package may be replaced.
    let empty = sandbox.out("empty");
    std::fs::create_dir(&empty).expect("create the directory");
    sandbox.build(&micro, "16", &empty, None, &[]).succeeded();
    sandbox.build(&micro, "16", &empty, None, &[]).succeeded();
    assert!(empty.join("manifest.json").is_file());
}

#[test]
fn bad_params_are_refused_naming_the_parameter() {
    let micro = fixture("micro-1l-h32.json");
    for (param, needle) in [
        (
            "nope=1",
            "--param nope: the fixture has no parameter `nope`",
        ),
        (
            "layers=0",
            "--param layers=0: the fixture rejects this value",
        ),
    ] {
        rejected(&micro, "16", &["--param", param], needle);
    }
    // Malformed ones are clap's to refuse, with its usage exit status.
    let sandbox = Sandbox::new();
    for param in ["layers", "layers=x", "=2"] {
        let outcome = sandbox.build(&micro, "16", &sandbox.out("p"), None, &["--param", param]);
        assert_eq!(outcome.status.code(), Some(2), "{}", outcome.describe());
        assert!(outcome.stderr.contains("--param"), "{}", outcome.describe());
    }
    let outcome = sandbox.build(
        &micro,
        "16",
        &sandbox.out("p"),
        None,
        &["--param", "nope=1"],
    );
    assert_eq!(outcome.status.code(), Some(2), "{}", outcome.describe());
    let outcome = sandbox.build(
        &micro,
        "16",
        &sandbox.out("p"),
        None,
        &["--batch", "1", "--param", "batch=2"],
    );
    assert_eq!(outcome.status.code(), Some(2), "{}", outcome.describe());
    assert!(outcome.stderr.contains("`batch`"), "{}", outcome.describe());
}
