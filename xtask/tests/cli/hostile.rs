//! Hostile use of the command line: packages edited with their digests
//! recomputed, writes killed at any moment, damaged kernel caches,
//! fixtures and parameters the build cannot take, and tasks whose checks
//! fail. Every case ends in a clean refusal (a non-zero status and an
//! `error:` line) or a success, never a panic, and `inspect-package`
//! never calls valid what `run-package` refuses. These are the command-line
//! regression tests of the hardening issue; `cargo xtask hostile` runs the
//! larger campaign.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ipu_package::hostile::{PackageFiles, read_package_files, resign, write_package_files};
use serde_json::Value;

use crate::support::{Outcome, Sandbox, entries, fixture};

/// `dir`'s files edited by `edit` and re-signed, written as `work/<name>`.
fn forged(
    sandbox: &Sandbox,
    dir: &Path,
    name: &str,
    edit: impl FnOnce(&mut PackageFiles),
) -> PathBuf {
    let mut files = read_package_files(dir).expect("read the package");
    edit(&mut files);
    resign(&mut files);
    let out = sandbox.out(name);
    write_package_files(&out, &files).expect("write the edited package");
    out
}

/// Edits the JSON file `name` of `files`.
fn json(files: &mut PackageFiles, name: &str, edit: impl FnOnce(&mut Value)) {
    let mut value: Value = serde_json::from_slice(&files[name]).expect("json");
    edit(&mut value);
    files.insert(name.to_owned(), serde_json::to_vec(&value).expect("text"));
}

fn inspect(sandbox: &Sandbox, dir: &Path) -> Outcome {
    sandbox.xtask(&["inspect-package", &dir.to_string_lossy()])
}

fn run(sandbox: &Sandbox, dir: &Path) -> Outcome {
    sandbox.xtask(&["run-package", &dir.to_string_lossy()])
}

/// Asserts `inspect-package` and `run-package` both refuse `dir`, cleanly,
/// the inspection with a `problem:` line containing `needle`.
fn both_refuse(sandbox: &Sandbox, dir: &Path, needle: &str) {
    let i = inspect(sandbox, dir);
    i.failed_with("");
    assert!(i.stdout.contains("valid=false"), "{}", i.describe());
    assert!(
        i.stdout
            .lines()
            .any(|l| l.starts_with("problem:") && l.contains(needle)),
        "no problem line mentions {needle:?}:\n{}",
        i.describe()
    );
    run(sandbox, dir).failed_with(needle);
}

#[test]
fn a_tile_id_of_100000_is_refused_by_both_commands() {
    // inspect-package once panicked on it.
    let sandbox = Sandbox::new();
    let good = sandbox.good_package("micro-1l-h32.json", "8", "good");
    let bad = forged(&sandbox, &good, "bad", |f| {
        json(f, "program.json", |p| {
            let steps = p["steps"].as_array_mut().expect("steps");
            let compute = steps
                .iter_mut()
                .find_map(|s| s.get_mut("Compute"))
                .expect("a compute step");
            compute["calls"][0][0] = Value::from(100_000);
        });
    });
    both_refuse(&sandbox, &bad, "tile100000");
}

#[test]
fn a_stored_fixture_edited_to_huge_sizes_is_refused_by_both_commands() {
    // Weights were once generated for 2^24 tokens before the fixture was
    // checked against the package (memory exhausted); 65536 layers hung.
    let sandbox = Sandbox::new();
    let good = sandbox.good_package("micro-1l-h32.json", "8", "good");
    for (param, value, needle) in [
        ("tokens", 1u64 << 24, "fixture.json"),
        ("layers", 65_536, "fixture.json"),
    ] {
        let bad = forged(&sandbox, &good, param, |f| {
            json(f, "fixture.json", |x| {
                x["params"][param] = Value::from(value)
            });
        });
        both_refuse(&sandbox, &bad, needle);
    }
}

#[test]
fn a_run_that_computes_wrong_values_says_where() {
    // Two failures once printed only `result=fail`. A layer norm with a
    // huge epsilon runs and gives wrong values: the per-op check stops
    // the run naming the op and its tensor.
    let sandbox = Sandbox::new();
    let good = sandbox.good_package("micro-1l-h32.json", "8", "good");
    let wrong = forged(&sandbox, &good, "wrong", |f| {
        json(f, "program.json", |p| {
            for s in p["steps"].as_array_mut().expect("steps") {
                if let Some(calls) = s
                    .pointer_mut("/Compute/calls")
                    .and_then(Value::as_array_mut)
                {
                    for c in calls {
                        if let Some(ln) = c[1].get_mut("LayerNorm") {
                            ln["eps"] = Value::from(1.0e6);
                        }
                    }
                }
            }
        });
    });
    inspect(&sandbox, &wrong).succeeded();
    run(&sandbox, &wrong).failed_with("layer_norm");
}

/// A package at `work/pkg` whose write was killed between moving the
/// earlier package aside and renaming the new one in, with a staging
/// directory of another killed write beside it.
fn killed_between_renames(sandbox: &Sandbox) -> PathBuf {
    let good = sandbox.good_package("micro-1l-h32.json", "8", "pkg");
    let aside = sandbox.work().join(".pkg.old-999999-0");
    std::fs::rename(&good, &aside).expect("move the package aside");
    let staging = sandbox.work().join(".pkg.staging-999999-1");
    std::fs::create_dir_all(staging.join("kernels")).expect("a staging directory");
    std::fs::write(staging.join("program.json"), vec![b' '; 1 << 20]).expect("staged bytes");
    good
}

/// The names beside a package, the writers' lock file aside.
fn beside(sandbox: &Sandbox) -> Vec<String> {
    entries(&sandbox.work())
        .into_iter()
        .filter(|n| !n.ends_with(".lock"))
        .collect()
}

#[test]
fn inspect_and_run_restore_a_package_a_killed_write_moved_aside() {
    // A kill between the two renames once left no package at its path,
    // and nothing put it back or removed what was left.
    for command in ["inspect-package", "run-package"] {
        let sandbox = Sandbox::new();
        let pkg = killed_between_renames(&sandbox);
        sandbox
            .xtask(&[command, &pkg.to_string_lossy()])
            .succeeded();
        assert_eq!(beside(&sandbox), ["pkg"], "{command}");
    }
}

#[test]
fn the_next_build_restores_then_replaces_and_leaves_nothing_beside() {
    // Staging directories of killed writes were once left forever.
    let sandbox = Sandbox::new();
    let pkg = killed_between_renames(&sandbox);
    sandbox
        .build(&fixture("tiny-2l-h64.json"), "16", &pkg, None, &[])
        .succeeded();
    assert_eq!(beside(&sandbox), ["pkg"]);
    let i = inspect(&sandbox, &pkg);
    i.succeeded();
    assert!(i.stdout.contains("model=tiny-2l-h64"), "{}", i.describe());
}

#[test]
fn a_build_killed_at_any_moment_leaves_one_package() {
    // Kill -9 a build replacing an earlier package at several moments:
    // afterwards the path holds the earlier or the new package (put back
    // by inspect-package if the kill fell between the renames) and nothing
    // is left beside it.
    let sandbox = Sandbox::new();
    let pkg = sandbox.good_package("micro-1l-h32.json", "8", "pkg");
    let cache = sandbox.cache();
    for delay_ms in [0u64, 3, 10, 25, 60] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args([
                "build-package",
                "--fixture",
                &fixture("tiny-2l-h64.json").to_string_lossy(),
                "--tiles",
                "16",
                "--out",
                &pkg.to_string_lossy(),
                "--kernel-cache",
                &cache.to_string_lossy(),
            ])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the build starts");
        std::thread::sleep(Duration::from_millis(delay_ms));
        // The build may have finished already; then there is nothing to kill.
        let _ = child.kill();
        child.wait().expect("the build ends");
        let i = inspect(&sandbox, &pkg);
        assert!(
            i.stdout.contains("valid=true"),
            "after {delay_ms} ms: {}",
            i.describe()
        );
        assert_eq!(beside(&sandbox), ["pkg"], "after {delay_ms} ms");
    }
}

#[test]
fn a_kernel_cache_entry_replaced_by_a_directory_is_rebuilt() {
    // A directory where a file belongs once failed every later build
    // (a rename cannot replace it).
    let sandbox = Sandbox::new();
    sandbox.good_package("micro-1l-h32.json", "8", "first");
    let cache = sandbox.cache();
    let entry = entries(&cache)
        .into_iter()
        .map(|e| cache.join(e))
        .find(|p| p.is_file())
        .expect("a cache entry");
    std::fs::remove_file(&entry).expect("remove the entry");
    std::fs::create_dir_all(entry.join("inside")).expect("a directory in its place");
    sandbox.good_package("micro-1l-h32.json", "8", "second");
    assert!(entry.is_file(), "the entry was rebuilt");
}

#[test]
fn parameters_the_build_cannot_take_are_refused_naming_the_field() {
    // These once reached "bug in the planner/lowering".
    let sandbox = Sandbox::new();
    let micro = fixture("micro-1l-h32.json");
    for (param, needle) in [
        ("patch=2", "$.layers[0].tensors[1].shape"),
        ("patch=5", "$.layers[0].tensors[0].shape"),
        ("hidden=0", ".shape"),
    ] {
        let outcome = sandbox.build(&micro, "16", &sandbox.out("p"), None, &["--param", param]);
        outcome.failed_with(needle);
        outcome.failed_with(&format!("--param {param}"));
        assert_eq!(outcome.status.code(), Some(2), "{}", outcome.describe());
        assert!(!outcome.stderr.contains("bug in"), "{}", outcome.describe());
    }
}

#[test]
fn an_mlp_of_four_builds_and_runs() {
    // tiny with --param mlp=4 once reached "bug in the lowering" (its
    // bias was padded past the output's columns).
    let sandbox = Sandbox::new();
    let out = sandbox.out("mlp4");
    sandbox
        .build(
            &fixture("tiny-2l-h64.json"),
            "16",
            &out,
            None,
            &["--param", "mlp=4"],
        )
        .succeeded();
    run(&sandbox, &out).succeeded();
}

/// `micro-1l-h32.json` edited by `edit`, written as `work/<name>.json`.
fn edited_fixture(sandbox: &Sandbox, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let text = std::fs::read_to_string(fixture("micro-1l-h32.json")).expect("the fixture");
    let mut value: Value = serde_json::from_str(&text).expect("json");
    edit(&mut value);
    let path = sandbox.work().join(format!("{name}.json"));
    std::fs::write(&path, value.to_string()).expect("write the fixture");
    path
}

#[test]
fn a_repeat_count_that_disagrees_with_the_names_read_is_refused() {
    // "repeat": 3 read at x2 once built and ran to a wrong result: x2 is
    // iteration 1's value, gone when the repeat ends at x3.
    let sandbox = Sandbox::new();
    let bad = edited_fixture(&sandbox, "repeat-x2", |f| {
        f["params"]["layers"] = Value::from(3);
        f["layers"][2]["ops"][0]["inputs"][0] = Value::from("x2");
    });
    sandbox
        .build(&bad, "16", &sandbox.out("x2"), None, &[])
        .failed_with("$.layers[2].ops[0].inputs[0]")
        .failed_with("iteration 1 of repeat `encoder`");
}

#[test]
fn an_unread_weight_is_refused_at_fixture_validation() {
    // It once built, and run-package then refused its own package with a
    // misleading hint. An unread weight is an error of the fixture, named
    // by its path.
    let sandbox = Sandbox::new();
    let bad = edited_fixture(&sandbox, "unread", |f| {
        let tensors = f["layers"][0]["tensors"].as_array_mut().expect("tensors");
        tensors.push(serde_json::json!({"name": "spare.w", "shape": ["hidden"],
            "precision": "F143", "scale": -7, "kind": "weight"}));
    });
    sandbox
        .build(&bad, "16", &sandbox.out("unread"), None, &[])
        .failed_with("$.layers[0].tensors[7].name")
        .failed_with("no op reads");
}

#[test]
fn tasks_whose_checks_fail_exit_non_zero_with_a_reason() {
    let sandbox = Sandbox::new();
    // A phase whose transfer names a tile the snapshot does not have: the
    // exchange task once exited 0.
    let snapshot = std::fs::read_to_string(fixture("exchange/small.json")).expect("snapshot");
    let mut value: Value = serde_json::from_str(&snapshot).expect("json");
    value["phases"][0]["transfers"][0]["source"] = Value::from(1_000_000);
    let file = sandbox.work().join("bad-phase.json");
    std::fs::write(&file, value.to_string()).expect("write");
    sandbox
        .xtask(&["exchange", &file.to_string_lossy()])
        .failed_with("phase(s) failed");
}

#[test]
fn degenerate_allocation_problems_are_answered_at_once() {
    // Both once answered `unknown` after the whole timeout.
    let sandbox = Sandbox::new();
    let alloc = |name: &str, text: &str| {
        let file = sandbox.work().join(name);
        std::fs::write(&file, text).expect("write");
        let started = std::time::Instant::now();
        let outcome = sandbox.xtask(&[
            "alloc",
            &file.to_string_lossy(),
            "--capacity",
            "1048576",
            "--timeout",
            "600",
        ]);
        (outcome, started.elapsed())
    };
    // A zero-slack instance that fits at its bound, with one buffer whose
    // lifetime is empty added.
    let base = std::fs::read_to_string(fixture("alloc/zero-slack-n150-seed1.csv")).expect("csv");
    let (outcome, took) = alloc(
        "empty-lifetime.csv",
        &format!("{base}empty,500,500,4096,1,\n"),
    );
    outcome.succeeded();
    assert!(
        outcome.stdout.contains("result=fits") && outcome.stdout.contains("peak=1048576"),
        "{}",
        outcome.describe()
    );
    // Far below the timeout: the answer does not come from giving up.
    assert!(took < Duration::from_secs(300), "{took:?}");
    // Every buffer fixed at offset 0, two of them live together.
    let (outcome, took) = alloc(
        "all-fixed.csv",
        "id,lower,upper,size,alignment,offset\na,0,10,5,1,0\nb,5,15,5,1,0\nc,20,30,5,1,0\n",
    );
    outcome.failed_with("proved infeasible");
    assert!(
        outcome.stdout.contains("result=infeasible"),
        "{}",
        outcome.describe()
    );
    assert!(took < Duration::from_secs(300), "{took:?}");
}

#[test]
fn a_small_campaign_finds_no_panic_hang_or_inconsistency() {
    let sandbox = Sandbox::new();
    let outcome = sandbox.xtask(&[
        "hostile",
        "--packages",
        "6",
        "--fixtures",
        "3",
        "--snapshots",
        "2",
        "--timeout",
        "30",
    ]);
    outcome.succeeded();
    for column in ["ok", "clean", "panic", "timeout", "abort"] {
        assert!(outcome.stdout.contains(column), "{}", outcome.describe());
    }
    let total = outcome
        .stdout
        .lines()
        .find(|l| l.starts_with("total"))
        .expect("a total line");
    assert!(total.split_whitespace().nth(1) != Some("0"), "{total}");
}

#[test]
fn a_checkpoint_package_whose_model_or_weights_were_edited_is_refused_by_both_commands() {
    let sandbox = Sandbox::new();
    let good = sandbox.out("siglip");
    let checkpoint = fixture("checkpoints/siglip-vision-head");
    sandbox
        .xtask(&[
            "build-package",
            "--checkpoint",
            &checkpoint.to_string_lossy(),
            "--batch",
            "2",
            "--tiles",
            "16",
            "--out",
            &good.to_string_lossy(),
            "--kernel-cache",
            &sandbox.cache().to_string_lossy(),
        ])
        .succeeded();
    inspect(&sandbox, &good).succeeded();
    // More layers than the package was built with, in the stored graph:
    // it is not the program's, and no value is made for it.
    for (name, layers) in [("layers", 3u32), ("many-layers", 65_536)] {
        let edited = forged(&sandbox, &good, name, |f| {
            json(f, "fixture.json", |m| {
                for layer in m["layers"].as_array_mut().expect("layers") {
                    if layer.get("repeat").is_some() {
                        layer["repeat"] = Value::from(layers);
                    }
                }
            });
        });
        both_refuse(&sandbox, &edited, "fixture.json");
    }
    // The model description edited: its config no longer describes the
    // stored graph, so its preprocessing is not the graph's.
    for (name, field, value) in [
        ("model-layers", "num_hidden_layers", 3u64),
        ("model-image", "image_size", 32),
    ] {
        let edited = forged(&sandbox, &good, name, |f| {
            json(f, "model.json", |m| {
                m["frontend"]["config"][field] = Value::from(value);
            });
        });
        both_refuse(&sandbox, &edited, "model.json");
    }
    // A model description naming an input the graph does not have
    // (refused by the package's validation), or none (refused by the
    // front end, which fills `patches` from images).
    for (name, inputs) in [
        (
            "model-input",
            serde_json::json!([{"tensor": "pixels", "from": "images"}]),
        ),
        ("model-no-input", serde_json::json!([])),
    ] {
        let edited = forged(&sandbox, &good, name, |f| {
            json(f, "model.json", |m| m["inputs"] = inputs);
        });
        both_refuse(&sandbox, &edited, "model.json");
    }
    // The weights file left out of the package: a checkpoint's weights are
    // never generated.
    let unweighted = forged(&sandbox, &good, "unweighted", |f| {
        f.remove("weights.safetensors");
        json(f, "manifest.json", |m| {
            if let Some(files) = m
                .pointer_mut("/manifest/files")
                .and_then(Value::as_array_mut)
            {
                files.retain(|e| e["name"] != "weights.safetensors");
            }
        });
    });
    both_refuse(&sandbox, &unweighted, "weights.safetensors");
}
