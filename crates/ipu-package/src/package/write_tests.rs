//! The failures of a write that only a failing disk or a kill causes, made
//! to happen through [`FsOps`]: whichever operation fails, the earlier
//! package is left byte for byte as it was and nothing is left beside it;
//! wherever a write is stopped (as a kill stops it, with no cleanup), the
//! target holds the earlier or the new package, or nothing with the earlier
//! one whole beside it — and the next write or [`Package::recover`] leaves
//! exactly one whole package and nothing beside it.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Error;
use std::path::{Path, PathBuf};

use super::write::FsOps;
use super::*;

/// A scratch directory under the system's temporary directory, removed
/// when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let path =
            std::env::temp_dir().join(format!("ipu-package-unit-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create the scratch directory");
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small package that validates (no buffers, steps or kernels); `tag`
/// makes its content differ.
fn sample(tag: &str) -> Package {
    let target = ipu_target::Target::ipu21().clone();
    let support = TileSupport {
        start: target.code_region().start,
        ..TileSupport::default()
    };
    Package {
        manifest: Manifest {
            format_version: FORMAT_VERSION,
            name: format!("sample-{tag}"),
            target: "ipu21".into(),
            tile_count: 1,
            summary: BuildSummary::default(),
            files: Vec::new(),
        },
        target,
        program: Program::default(),
        placement: PackagePlacement {
            addresses: BufferAddresses::default(),
            support: vec![support],
        },
        phases: Vec::new(),
        kernels: Vec::new(),
        memory_profile: format!("{{\"tag\":\"{tag}\"}}"),
        profile: None,
        fixture: None,
        weights: None,
        model: None,
    }
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).expect("read the directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read the file");
                out.insert(path.strip_prefix(dir).expect("inside").to_owned(), bytes);
            }
        }
    }
    out
}

/// The entries of `dir` other than the writers' lock file.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read the directory")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    names.sort();
    names
}

fn failed() -> Error {
    Error::other("injected failure")
}

/// An earlier package at `pkg` in the scratch directory: its path and its
/// files.
fn earlier(scratch: &Scratch) -> (PathBuf, BTreeMap<PathBuf, Vec<u8>>) {
    let target = scratch.0.join("pkg");
    sample("old")
        .write(&target)
        .expect("write the earlier package");
    let before = snapshot(&target);
    (target, before)
}

fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

fn rename(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::rename(from, to)
}

fn proceed(_: &str) -> bool {
    true
}

/// Whether `path` is a staging directory.
fn staged(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().contains(".staging-"))
}

#[test]
fn a_file_that_cannot_be_written_leaves_the_earlier_package() {
    for failing in ["exchange.bin", "memory-profile.json", MANIFEST_NAME] {
        let scratch = Scratch::new(&format!("write-{failing}"));
        let (target, before) = earlier(&scratch);
        let write = |path: &Path, bytes: &[u8]| {
            if path.file_name() == Some(OsStr::new(failing)) {
                Err(failed())
            } else {
                write(path, bytes)
            }
        };
        let ops = FsOps {
            write: &write,
            rename: &rename,
            proceed: &proceed,
        };
        match sample("new").write_with(&target, &ops) {
            Err(PackageIoError::Io { path, .. }) => assert!(path.ends_with(failing), "{path:?}"),
            other => panic!("{failing}: {other:?}"),
        }
        assert_eq!(snapshot(&target), before, "{failing}");
        assert_eq!(entries(&scratch.0), ["pkg"], "{failing}");
    }
}

const MANIFEST_NAME: &str = "manifest.json";

#[test]
fn an_earlier_package_that_cannot_be_moved_aside_is_left() {
    let scratch = Scratch::new("aside");
    let (target, before) = earlier(&scratch);
    let rename = |from: &Path, to: &Path| {
        if from == target {
            Err(failed())
        } else {
            rename(from, to)
        }
    };
    let ops = FsOps {
        write: &write,
        rename: &rename,
        proceed: &proceed,
    };
    match sample("new").write_with(&target, &ops) {
        Err(PackageIoError::Io { path, .. }) => assert_eq!(path, target),
        other => panic!("{other:?}"),
    }
    assert_eq!(snapshot(&target), before);
    assert_eq!(entries(&scratch.0), ["pkg"]);
}

#[test]
fn a_failed_rename_into_place_moves_the_earlier_package_back() {
    let scratch = Scratch::new("rename-in");
    let (target, before) = earlier(&scratch);
    // Only the staged package's rename fails; moving the earlier one back
    // succeeds.
    let rename = |from: &Path, to: &Path| {
        if to == target && staged(from) {
            Err(failed())
        } else {
            rename(from, to)
        }
    };
    let ops = FsOps {
        write: &write,
        rename: &rename,
        proceed: &proceed,
    };
    match sample("new").write_with(&target, &ops) {
        Err(PackageIoError::Io { path, .. }) => assert_eq!(path, target),
        other => panic!("{other:?}"),
    }
    assert_eq!(snapshot(&target), before);
    assert_eq!(entries(&scratch.0), ["pkg"]);
    Package::read(&target).expect("the earlier package reads");
}

#[test]
fn an_earlier_package_that_cannot_be_moved_back_is_named_and_recovered() {
    let scratch = Scratch::new("restore");
    let (target, before) = earlier(&scratch);
    let rename = |from: &Path, to: &Path| {
        if to == target {
            Err(failed())
        } else {
            rename(from, to)
        }
    };
    let ops = FsOps {
        write: &write,
        rename: &rename,
        proceed: &proceed,
    };
    let error = sample("new")
        .write_with(&target, &ops)
        .expect_err("the write fails");
    let PackageIoError::Restore { path, aside, .. } = &error else {
        panic!("not a restore error: {error}");
    };
    assert_eq!(*path, target);
    assert!(error.to_string().contains(&aside.display().to_string()));
    // The earlier package is whole where the error says, and it is all
    // that is left: the staging directory is gone.
    assert_eq!(snapshot(aside), before);
    let aside_name = aside.file_name().expect("a name").to_string_lossy();
    assert_eq!(entries(&scratch.0), [aside_name.into_owned()]);
    // Recovery puts it back.
    Package::recover(&target).expect("recover");
    assert_eq!(snapshot(&target), before);
    assert_eq!(entries(&scratch.0), ["pkg"]);
}

#[test]
fn a_failed_write_to_a_new_directory_leaves_nothing() {
    let scratch = Scratch::new("fresh");
    let target = scratch.0.join("pkg");
    let ops = FsOps {
        write: &write,
        rename: &|_, _| Err(failed()),
        proceed: &proceed,
    };
    let error = sample("new")
        .write_with(&target, &ops)
        .expect_err("the write fails");
    assert!(matches!(error, PackageIoError::Io { .. }), "{error}");
    assert!(entries(&scratch.0).is_empty());
}

/// Every step a write asks `proceed` about, in order, for the sample
/// package replacing an earlier one.
fn steps() -> Vec<String> {
    let scratch = Scratch::new("steps");
    let (target, _) = earlier(&scratch);
    let seen = std::sync::Mutex::new(Vec::new());
    let record = |step: &str| {
        seen.lock().expect("not poisoned").push(step.to_owned());
        true
    };
    let ops = FsOps {
        write: &write,
        rename: &rename,
        proceed: &record,
    };
    sample("new")
        .write_with(&target, &ops)
        .expect("the write succeeds");
    seen.into_inner().expect("not poisoned")
}

#[test]
fn a_write_stopped_at_any_step_leaves_a_recoverable_state() {
    let steps = steps();
    assert!(steps.len() > 10, "{steps:?}");
    for (stop_at, mode) in steps.iter().flat_map(|s| [(s.clone(), 0), (s.clone(), 1)]) {
        let scratch = Scratch::new(&format!("stop-{mode}-{}", stop_at.replace(['/', ' '], "_")));
        let (target, before) = earlier(&scratch);
        let new = sample("new");
        let stop = |step: &str| step != stop_at;
        let ops = FsOps {
            write: &write,
            rename: &rename,
            proceed: &stop,
        };
        match new.write_with(&target, &ops) {
            Err(PackageIoError::Stopped { step, .. }) => assert_eq!(step, stop_at),
            other => panic!("{stop_at}: {other:?}"),
        }
        // At this instant: the earlier package, the new one, or nothing
        // with the earlier one whole beside the target.
        let now = if target.exists() {
            Some(snapshot(&target))
        } else {
            None
        };
        match &now {
            Some(files) => {
                let read = Package::read(&target).expect("whatever is at the target reads");
                let is_old = *files == before;
                assert!(is_old || read.manifest.name == "sample-new", "{stop_at}");
            }
            None => {
                let aside = entries(&scratch.0)
                    .into_iter()
                    .find(|n| n.contains(".old-"))
                    .unwrap_or_else(|| panic!("{stop_at}: no package anywhere"));
                assert_eq!(snapshot(&scratch.0.join(aside)), before, "{stop_at}");
            }
        }
        // Then the next writer (mode 1) or an inspection (mode 0) tidies up.
        if mode == 0 {
            Package::recover(&target).expect("recover");
            let read = Package::read(&target).expect("a package is back");
            assert!(matches!(
                read.manifest.name.as_str(),
                "sample-old" | "sample-new"
            ));
        } else {
            sample("third")
                .write(&target)
                .expect("the next write succeeds");
            assert_eq!(
                Package::read(&target).expect("reads").manifest.name,
                "sample-third"
            );
        }
        assert_eq!(entries(&scratch.0), ["pkg"], "{stop_at}, mode {mode}");
    }
}

#[test]
fn sibling_names_are_hidden() {
    let scratch = Scratch::new("siblings");
    let (target, _) = earlier(&scratch);
    let stop = |step: &str| step != "renaming the new package into place";
    let ops = FsOps {
        write: &write,
        rename: &rename,
        proceed: &stop,
    };
    let _ = sample("new").write_with(&target, &ops);
    for name in entries(&scratch.0) {
        assert!(name == "pkg" || name.starts_with(".pkg."), "{name}");
    }
}
