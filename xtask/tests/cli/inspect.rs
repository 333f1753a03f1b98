//! `inspect-package`: a good package is valid (status 0); a package with a
//! damaged file is not (non-zero status, and the message names the file).
//!
//! The manifest records every file's size and SHA-256 and a digest of
//! itself, and reading checks them before parsing. So a damaged file is
//! caught even when the damage keeps its syntax and size, say a different
//! number or a different instruction word.

use std::path::{Path, PathBuf};

use crate::support::{Outcome, Sandbox, snapshot};

/// The largest file of the package at `dir`, by its relative path.
fn largest_file(dir: &Path) -> String {
    snapshot(dir)
        .into_iter()
        .max_by_key(|(name, bytes)| (bytes.len(), name.clone()))
        .map(|(name, _)| name)
        .expect("the package has files")
}

/// Flips the low bit of byte `at` of `path`.
fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).expect("read the file");
    bytes[at] ^= 1;
    std::fs::write(path, bytes).expect("write the file");
}

/// A copy of the good package at `good` under `name`, to damage.
fn copy(sandbox: &Sandbox, good: &Path, name: &str) -> PathBuf {
    let out = sandbox.out(name);
    for (rel, bytes) in snapshot(good) {
        let path = out.join(&rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the directory");
        std::fs::write(&path, bytes).expect("copy the file");
    }
    out
}

fn inspect(sandbox: &Sandbox, dir: &Path) -> Outcome {
    sandbox.xtask(&["inspect-package", &dir.to_string_lossy()])
}

/// Asserts the package at `dir` is reported damaged, by an `error:` line
/// (it could not be read) or a `problem:` line (it was read but is wrong)
/// naming `file`.
fn reported_damaged(sandbox: &Sandbox, dir: &Path, file: &str) {
    let outcome = inspect(sandbox, dir);
    if outcome.stdout.contains("problem:") {
        assert!(!outcome.status.success(), "{}", outcome.describe());
        assert!(
            !outcome.stderr.contains("panicked"),
            "{}",
            outcome.describe()
        );
        assert!(
            outcome
                .stdout
                .lines()
                .any(|l| l.starts_with("problem:") && l.contains(file)),
            "{}",
            outcome.describe()
        );
        assert!(
            outcome.stdout.contains("valid=false"),
            "{}",
            outcome.describe()
        );
    } else {
        outcome.failed_with(file);
    }
}

#[test]
fn good_package_is_valid_and_a_damaged_one_is_not() {
    let sandbox = Sandbox::new();
    let good = sandbox.good_package("tiny-2l-h64.json", "16", "good");
    let outcome = inspect(&sandbox, &good);
    outcome.succeeded();
    assert!(
        outcome.stdout.contains("model=tiny-2l-h64 tiles=16"),
        "{}",
        outcome.describe()
    );
    assert!(
        outcome.stdout.lines().any(|l| l == "valid=true"),
        "{}",
        outcome.describe()
    );

    // Flip one byte in the middle of the largest file: the first quote
    // from the middle on, a flip that also breaks the syntax.
    let largest = largest_file(&good);
    let damaged = copy(&sandbox, &good, "flipped");
    let path = damaged.join(&largest);
    let bytes = std::fs::read(&path).expect("read the largest file");
    let middle = bytes.len() / 2;
    let at = middle
        + bytes[middle..]
            .iter()
            .position(|&b| b == b'"')
            .unwrap_or_else(|| panic!("{largest} is not JSON: no quote after its middle"));
    flip(&path, at);
    reported_damaged(&sandbox, &damaged, &largest);
}

#[test]
fn a_file_of_the_wrong_size_is_caught() {
    // The memory profile and the fixture are carried as text and not
    // parsed on reading; their recorded sizes catch a cut or an addition
    // before their digests are computed.
    let sandbox = Sandbox::new();
    let good = sandbox.good_package("micro-1l-h32.json", "16", "good");
    let cut = copy(&sandbox, &good, "cut");
    let profile = cut.join("memory-profile.json");
    let bytes = std::fs::read(&profile).expect("read the profile");
    std::fs::write(&profile, &bytes[..bytes.len() - 1]).expect("cut the profile");
    reported_damaged(&sandbox, &cut, "memory-profile.json");

    let longer = copy(&sandbox, &good, "longer");
    let fixture = longer.join("fixture.json");
    let mut bytes = std::fs::read(&fixture).expect("read the fixture");
    bytes.push(b'\n');
    std::fs::write(&fixture, bytes).expect("extend the fixture");
    reported_damaged(&sandbox, &longer, "fixture.json");

    let missing = copy(&sandbox, &good, "missing");
    std::fs::remove_file(missing.join("exchange.bin")).expect("remove the rows");
    reported_damaged(&sandbox, &missing, "exchange.bin");
}

/// The first ASCII digit of `bytes` from its middle on: a flip there
/// changes a number and keeps the syntax.
fn middle_digit(name: &str, bytes: &[u8]) -> usize {
    let middle = bytes.len() / 2;
    middle
        + bytes[middle..]
            .iter()
            .position(u8::is_ascii_digit)
            .unwrap_or_else(|| panic!("{name} has no digit after its middle"))
}

#[test]
fn any_flipped_byte_is_caught() {
    let sandbox = Sandbox::new();
    let good = sandbox.good_package("tiny-2l-h64.json", "16", "good");
    let files = snapshot(&good);
    // A digit of the program (a different address or extent) and of the
    // manifest (a different size, digest or headline figure), a word of the
    // exchange rows, a byte of the memory profile, of the fixture and of a
    // kernel's object and metadata: every file of the package.
    let kernel = files
        .keys()
        .find(|k| k.ends_with(".o"))
        .expect("a kernel object")
        .clone();
    let metadata = kernel.replace(".o", ".json");
    let mut cases = vec![
        (
            "program.json".to_owned(),
            middle_digit("program.json", &files["program.json"]),
        ),
        (
            "manifest.json".to_owned(),
            middle_digit("manifest.json", &files["manifest.json"]),
        ),
        ("exchange.bin".to_owned(), files["exchange.bin"].len() / 2),
        (
            "memory-profile.json".to_owned(),
            files["memory-profile.json"].len() / 2,
        ),
        ("fixture.json".to_owned(), files["fixture.json"].len() / 2),
        (kernel.clone(), files[&kernel].len() / 2),
        (metadata.clone(), files[&metadata].len() / 2),
    ];
    // The first and last bytes of the rows: the magic and a row index.
    cases.push(("exchange.bin".to_owned(), 0));
    cases.push(("exchange.bin".to_owned(), files["exchange.bin"].len() - 1));
    // Every case is tried before failing, so the message lists them all.
    let mut missed = Vec::new();
    for (i, (file, at)) in cases.into_iter().enumerate() {
        let damaged = copy(&sandbox, &good, &format!("flip{i}"));
        flip(&damaged.join(&file), at);
        let outcome = inspect(&sandbox, &damaged);
        assert!(
            !outcome.stderr.contains("panicked"),
            "{}",
            outcome.describe()
        );
        // Refused, by an error that names the damaged file.
        let named = outcome
            .stderr
            .lines()
            .any(|l| l.starts_with("error:") && l.contains(file.as_str()));
        if outcome.status.success() || !named {
            missed.push(format!("{file} byte {at}"));
        }
    }
    assert!(
        missed.is_empty(),
        "flips not refused by an error naming the file: {}",
        missed.join(", ")
    );
}

#[test]
fn another_format_version_is_named() {
    // A package of another format version (here the manifest of version
    // 1, which listed files as [name, size] and recorded no digests) is
    // refused by its version, not by whichever field it lacks.
    let sandbox = Sandbox::new();
    let good = sandbox.good_package("micro-1l-h32.json", "16", "good");
    let old = copy(&sandbox, &good, "old");
    let path = old.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read the manifest"))
            .expect("the manifest is JSON");
    manifest["manifest"]["format_version"] = 1.into();
    manifest["manifest"]["files"] = serde_json::json!([["program.json", 1]]);
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&manifest).expect("serialise"),
    )
    .expect("write the manifest");
    let supported = ipu_package::package::FORMAT_VERSION;
    inspect(&sandbox, &old).failed_with(&format!(
        "manifest.json: format version 1, this reader supports {supported}"
    ));
    sandbox
        .xtask(&["run-package", &old.to_string_lossy()])
        .failed_with(&format!(
            "format version 1, this reader supports {supported}"
        ));
}

#[test]
fn a_file_the_manifest_does_not_list_is_caught() {
    // An object from another build dropped into kernels/ is not part of
    // the package the manifest describes.
    let sandbox = Sandbox::new();
    let good = sandbox.good_package("micro-1l-h32.json", "16", "good");
    let extra = copy(&sandbox, &good, "extra");
    std::fs::create_dir_all(extra.join("kernels")).expect("create kernels/");
    std::fs::write(extra.join("kernels/stray.o"), b"\x7fELF").expect("write the object");
    reported_damaged(
        &sandbox,
        &extra,
        "kernels/stray.o: not listed in the manifest",
    );
}
