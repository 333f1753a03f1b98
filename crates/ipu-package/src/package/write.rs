//! Writing a package directory atomically, and recovering from a writer
//! that was killed.
//!
//! A write holds an exclusive lock on `.NAME.lock` beside the target for
//! its whole length, so writers of one target take turns and whoever holds
//! the lock knows that every `.NAME.staging-*` or `.NAME.old-*` sibling was
//! left by a writer that died. It then:
//!
//! 1. recovers: if the target is missing and a complete earlier package
//!    sits aside (`.NAME.old-*`), it is moved back; every other sibling is
//!    removed;
//! 2. writes every file into a new staging sibling, the manifest last;
//! 3. moves the earlier package (if any) aside, renames the staging
//!    directory into place, and removes the earlier package.
//!
//! At every instant the target holds the earlier or the new package, or —
//! between the two renames of step 3 — nothing, with the earlier package
//! whole beside it; the next write, and [`Package::recover`], move it back.
//! The unit tests stop a write at every step, as a kill would, and check
//! exactly that.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use tracing::{info, warn};

use super::MODEL_FILE;
use super::error::io;
use super::manifest::{KERNELS, MANIFEST, PackageFile, manifest_text};
use super::rows::encode_rows;
use super::weights::WEIGHTS_FILE;
use super::{FORMAT_VERSION, Manifest, Package, PackageIoError};

/// The file operations of a write, so that tests can make each fail or
/// stop (as a kill would) in turn.
pub(super) struct FsOps<'a> {
    /// Writes a file (files are written side by side, from several
    /// threads).
    pub write: &'a (dyn Fn(&Path, &[u8]) -> std::io::Result<()> + Sync),
    /// Renames a file or directory.
    pub rename: &'a dyn Fn(&Path, &Path) -> std::io::Result<()>,
    /// Asked before every step: `false` stops the write there, leaving
    /// everything as a killed process would.
    pub proceed: &'a dyn Fn(&str) -> bool,
}

impl FsOps<'static> {
    /// The real file system.
    pub(super) fn real() -> FsOps<'static> {
        FsOps {
            write: &|path, bytes| std::fs::write(path, bytes),
            rename: &|from, to| std::fs::rename(from, to),
            proceed: &|_| true,
        }
    }
}

/// `.NAME.KIND-PID-N` in `parent`: a hidden sibling of the target.
fn sibling(parent: &Path, name: &OsStr, kind: &str, n: u64) -> PathBuf {
    let mut file = OsString::from(".");
    file.push(name);
    file.push(format!(".{kind}-{}-{n}", std::process::id()));
    parent.join(file)
}

/// Numbers the siblings this process makes.
static NEXT_SIBLING: AtomicU64 = AtomicU64::new(0);

/// A sibling of the target that does not exist yet.
fn unused_sibling(parent: &Path, name: &OsStr, kind: &str) -> PathBuf {
    loop {
        let path = sibling(
            parent,
            name,
            kind,
            NEXT_SIBLING.fetch_add(1, Ordering::Relaxed),
        );
        if std::fs::symlink_metadata(&path).is_err() {
            return path;
        }
    }
}

/// The lock every writer of `parent/name` holds: `.NAME.lock`, never
/// removed (removing a lock file lets two writers lock two files).
fn lock(parent: &Path, name: &OsStr, wait: bool) -> Result<Option<File>, PackageIoError> {
    let mut file = OsString::from(".");
    file.push(name);
    file.push(".lock");
    let path = parent.join(file);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(&path))?;
    if wait {
        lock.lock().map_err(io(&path))?;
        Ok(Some(lock))
    } else {
        match lock.try_lock() {
            Ok(()) => Ok(Some(lock)),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(io(&path)(e)),
        }
    }
}

/// The staging and aside siblings of the target, as left by earlier
/// writers: `(staging, aside)`.
fn leftovers(parent: &Path, name: &OsStr) -> Result<(Vec<PathBuf>, Vec<PathBuf>), PackageIoError> {
    let dir = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let mut prefix = OsString::from(".");
    prefix.push(name);
    let prefix = prefix.to_string_lossy().into_owned();
    let (mut staging, mut aside) = (Vec::new(), Vec::new());
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((staging, aside)),
        Err(source) => {
            return Err(PackageIoError::Io {
                path: dir.to_owned(),
                source,
            });
        }
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let file = entry.file_name();
        let Some(rest) = file.to_str().and_then(|f| f.strip_prefix(&prefix)) else {
            continue;
        };
        if rest.starts_with(".staging-") {
            staging.push(parent.join(&file));
        } else if rest.starts_with(".old-") {
            aside.push(parent.join(&file));
        }
    }
    staging.sort();
    aside.sort();
    Ok((staging, aside))
}

/// With the lock held: puts a complete earlier package back where a killed
/// writer left none, and removes what killed writers left beside it.
fn recover_locked(target: &Path, parent: &Path, name: &OsStr) -> Result<(), PackageIoError> {
    let (staging, aside) = leftovers(parent, name)?;
    let missing = matches!(std::fs::symlink_metadata(target), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    if missing && let Some(earlier) = aside.iter().find(|a| a.join(MANIFEST).is_file()) {
        std::fs::rename(earlier, target).map_err(io(earlier))?;
        info!(
            path = %target.display(),
            from = %earlier.display(),
            "restored the package a stopped write had moved aside"
        );
    }
    for path in staging.iter().chain(&aside) {
        if path.exists() {
            std::fs::remove_dir_all(path).map_err(io(path))?;
            info!(path = %path.display(), "removed what a stopped package write left");
        }
    }
    Ok(())
}

/// Whether `target` holds something to replace (`true`: an empty directory
/// or an earlier package) or nothing (`false`), or must not be replaced:
/// the swap deletes whatever was there, so a mistyped path naming a file
/// or a directory of other things is refused.
fn check_target(target: &Path) -> Result<bool, PackageIoError> {
    let meta = match std::fs::metadata(target) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(PackageIoError::Io {
                path: target.to_owned(),
                source,
            });
        }
    };
    if !meta.is_dir() {
        return Err(PackageIoError::TargetNotADirectory {
            path: target.to_owned(),
        });
    }
    let empty = std::fs::read_dir(target)
        .map_err(io(target))?
        .next()
        .is_none();
    if empty || target.join(MANIFEST).is_file() {
        Ok(true)
    } else {
        Err(PackageIoError::TargetNotAPackage {
            path: target.to_owned(),
        })
    }
}

/// Refuses a kernel name that would not make one file name under
/// `kernels/`: the name becomes part of a path, and a separator or `..`
/// would write outside the package or over another file.
fn check_kernel_names(package: &Package) -> Result<(), PackageIoError> {
    let mut seen = std::collections::BTreeSet::new();
    for k in &package.kernels {
        let reason = if k.name.is_empty() {
            Some("an empty name")
        } else if k.name.contains(['/', '\\', '\0']) {
            Some("a name with a path separator or NUL")
        } else if k.name == "." || k.name == ".." {
            Some("`.` and `..` are not file names")
        } else if !seen.insert(k.name.as_str()) {
            Some("two kernels have this name")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(PackageIoError::KernelName {
                name: k.name.clone(),
                reason,
            });
        }
    }
    Ok(())
}

/// A package's files: each path under the package and its bytes.
type Files<'a> = Vec<(String, Cow<'a, [u8]>)>;

/// The files of `package`, in the order they are written: the parts the
/// package holds as bytes are borrowed (the memory profile and the
/// weights are tens of megabytes at SigLIP scale), the rest serialised.
fn files(package: &Package) -> Result<Files<'_>, PackageIoError> {
    let json = |name: &str, r: Result<Vec<u8>, serde_json::Error>| {
        r.map_err(|source| PackageIoError::Json {
            path: PathBuf::from(name),
            source,
        })
    };
    // The four large parts (tens of megabytes at SigLIP scale) are
    // serialised side by side.
    let ((program, placement), (phases, rows)) = rayon::join(
        || {
            rayon::join(
                || serde_json::to_vec(&package.program),
                || serde_json::to_vec(&package.placement),
            )
        },
        || {
            rayon::join(
                || serde_json::to_vec(&package.phases.iter().map(|p| &p.info).collect::<Vec<_>>()),
                || encode_rows(package.phases.iter().map(|p| &p.rows)),
            )
        },
    );
    fn owned<'a>(name: &str, bytes: Vec<u8>) -> (String, Cow<'a, [u8]>) {
        (name.to_owned(), Cow::Owned(bytes))
    }
    fn borrowed<'a>(name: &str, text: &'a str) -> (String, Cow<'a, [u8]>) {
        (name.to_owned(), Cow::Borrowed(text.as_bytes()))
    }
    let mut out = vec![
        owned("target.toml", package.target.to_toml().into_bytes()),
        owned("program.json", json("program.json", program)?),
        owned("placement.json", json("placement.json", placement)?),
        owned("phases.json", json("phases.json", phases)?),
        owned("exchange.bin", rows),
        owned(
            "kernels.json",
            json("kernels.json", serde_json::to_vec(&package.kernels))?,
        ),
        borrowed("memory-profile.json", &package.memory_profile),
    ];
    if let Some(profile) = &package.profile {
        let text = profile.to_json().map(String::into_bytes);
        out.push(owned("profile.json", json("profile.json", text)?));
    }
    if let Some(fixture) = &package.fixture {
        out.push(borrowed("fixture.json", fixture));
    }
    if let Some(model) = &package.model {
        out.push(owned(MODEL_FILE, model.to_json().into_bytes()));
    }
    if let Some(weights) = &package.weights {
        out.push((WEIGHTS_FILE.to_owned(), Cow::Borrowed(weights.bytes())));
    }
    for k in &package.kernels {
        out.push((format!("{KERNELS}/{}.o", k.name), Cow::Borrowed(&k.object)));
        out.push((
            format!("{KERNELS}/{}.json", k.name),
            Cow::Borrowed(k.metadata.as_bytes()),
        ));
    }
    Ok(out)
}

impl Package {
    /// Writes the package into `dir` atomically (see the module header).
    ///
    /// `dir` must be missing, an empty directory or an earlier package (a
    /// directory with a `manifest.json`); anything else is refused before
    /// any work, since replacing it would delete it, and so is a path
    /// without a final name (`.`, `..`, a root). On every error the staging
    /// directory is removed and whatever was at `dir` is left as it was.
    pub fn write(&self, dir: &Path) -> Result<(), PackageIoError> {
        self.write_with(dir, &FsOps::real())
    }

    /// Moves back a package a killed writer left aside, and removes what
    /// killed writers left beside `dir`; does nothing while a writer is at
    /// work on it. `inspect-package` and every write call it.
    pub fn recover(dir: &Path) -> Result<(), PackageIoError> {
        let Some(name) = dir.file_name() else {
            return Ok(());
        };
        let parent = dir.parent().unwrap_or(Path::new(""));
        if !parent.as_os_str().is_empty() && !parent.is_dir() {
            return Ok(());
        }
        let target = parent.join(name);
        match lock(parent, name, false)? {
            Some(_held) => recover_locked(&target, parent, name),
            None => Ok(()),
        }
    }

    /// [`Package::write`] with its file operations done by `ops`.
    pub(super) fn write_with(&self, dir: &Path, ops: &FsOps<'_>) -> Result<(), PackageIoError> {
        let Some(name) = dir.file_name() else {
            return Err(PackageIoError::TargetHasNoName {
                path: dir.to_owned(),
            });
        };
        // `parent` is empty for a bare name: joining keeps the path
        // relative. The target is rebuilt from its parent and name so that
        // `pkg/.` is renamed as `pkg`.
        let parent = dir.parent().unwrap_or(Path::new(""));
        let target = parent.join(name);
        check_kernel_names(self)?;
        check_target(&target)?;
        let stop = |step: &str| -> Result<(), PackageIoError> {
            if (ops.proceed)(step) {
                Ok(())
            } else {
                Err(PackageIoError::Stopped {
                    path: target.clone(),
                    step: step.to_owned(),
                })
            }
        };
        let files = files(self)?;
        if !parent.as_os_str().is_empty() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let _lock = lock(parent, name, true)?;
        recover_locked(&target, parent, name)?;
        // Staging may follow a recovery: look again at what is to be
        // replaced.
        let replacing = check_target(&target)?;
        stop("staging")?;
        let staging = unused_sibling(parent, name, "staging");
        std::fs::create_dir(&staging).map_err(io(&staging))?;
        let result = self.stage_and_swap(
            &staging, &target, parent, name, files, replacing, ops, &stop,
        );
        match &result {
            // A stopped write leaves everything as a kill would.
            Err(PackageIoError::Stopped { .. }) => {}
            Err(_) => {
                // Best effort: the write is failing already, and its error
                // says more than this one would.
                let _ = std::fs::remove_dir_all(&staging);
            }
            Ok(()) => {}
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn stage_and_swap(
        &self,
        staging: &Path,
        target: &Path,
        parent: &Path,
        name: &OsStr,
        files: Files<'_>,
        replacing: bool,
        ops: &FsOps<'_>,
        stop: &dyn Fn(&str) -> Result<(), PackageIoError>,
    ) -> Result<(), PackageIoError> {
        let kernels = staging.join(KERNELS);
        std::fs::create_dir(&kernels).map_err(io(&kernels))?;
        // Copying tens of megabytes into the file system is most of a
        // write's time, on one core unless files are written side by side:
        // the files' digests and their writes run as parallel tasks. Steps
        // are still asked about, and writes started, in file order, and a
        // stop waits for the writes started before it, so a stopped write
        // leaves exactly the files before its step. The first failed write
        // in file order is the error reported.
        let write = ops.write;
        let mut entries: Vec<PackageFile> = Vec::new();
        let mut written: Vec<Option<Result<(), PackageIoError>>> =
            files.iter().map(|_| None).collect();
        let staged = rayon::in_place_scope(|scope| {
            let entries = &mut entries;
            let files = &files;
            scope.spawn(move |_| {
                *entries = files
                    .par_iter()
                    .map(|(rel, bytes)| PackageFile::of(rel, bytes))
                    .collect();
            });
            for ((rel, bytes), outcome) in files.iter().zip(written.iter_mut()) {
                stop(rel)?;
                let path = staging.join(rel);
                scope.spawn(move |_| *outcome = Some(write(&path, bytes).map_err(io(&path))));
            }
            Ok(())
        });
        for outcome in written.into_iter().flatten() {
            outcome?;
        }
        staged?;
        let manifest = Manifest {
            format_version: FORMAT_VERSION,
            files: entries,
            ..self.manifest.clone()
        };
        let path = staging.join(MANIFEST);
        let text = manifest_text(&manifest).map_err(|source| PackageIoError::Json {
            path: path.clone(),
            source,
        })?;
        stop(MANIFEST)?;
        (ops.write)(&path, &text).map_err(io(&path))?;

        let aside = if replacing {
            stop("moving the earlier package aside")?;
            let aside = unused_sibling(parent, name, "old");
            (ops.rename)(target, &aside).map_err(io(target))?;
            Some(aside)
        } else {
            None
        };
        stop("renaming the new package into place")?;
        if let Err(source) = (ops.rename)(staging, target) {
            if let Some(aside) = aside
                && let Err(restore) = (ops.rename)(&aside, target)
            {
                return Err(PackageIoError::Restore {
                    path: target.to_owned(),
                    source,
                    aside,
                    restore,
                });
            }
            return Err(PackageIoError::Io {
                path: target.to_owned(),
                source,
            });
        }
        if let Some(aside) = aside {
            stop("removing the earlier package")?;
            if let Err(e) = std::fs::remove_dir_all(&aside) {
                // The new package is in place, so the write succeeded; what
                // is left is the earlier package beside it, which the next
                // write removes.
                warn!(
                    path = %aside.display(),
                    error = %e,
                    "package written; the earlier package moved aside could not be removed"
                );
            }
        }
        info!(
            path = %target.join("memory-profile.json").display(),
            scope = "baseline",
            bytes = self.memory_profile.len(),
            "wrote planner memory profile"
        );
        Ok(())
    }
}
