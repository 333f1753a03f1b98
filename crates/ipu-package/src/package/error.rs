//! Why a package could not be written or read.

use std::path::{Path, PathBuf};

use super::rows::RowsError;

/// Why a package could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackageIoError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A JSON or TOML file is not what the format says.
    #[error("{path}: {reason}")]
    Format {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A JSON file does not parse as the format says, or a part of the
    /// package cannot be written as JSON.
    #[error("{path}: {source}")]
    Json {
        /// The path.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A text file is not UTF-8.
    #[error("{path}: not UTF-8: {source}")]
    Utf8 {
        /// The path.
        path: PathBuf,
        /// Where the bytes stop being UTF-8.
        #[source]
        source: std::string::FromUtf8Error,
    },
    /// `profile.json` is not a profile.
    #[error("{path}: {source}")]
    Profile {
        /// The path.
        path: PathBuf,
        /// The cause (boxed: a profile error is large).
        #[source]
        source: Box<crate::profile::ProfileError>,
    },
    /// `exchange.bin` is not what the format says.
    #[error("{path}: {source}")]
    Rows {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: RowsError,
    },
    /// `target.toml` is not a valid device description.
    #[error("{path}: {source}")]
    Target {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: ipu_target::TargetError,
    },
    /// `weights.safetensors` is not a safetensors file.
    #[error("{path}: {source}")]
    Weights {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: super::WeightsError,
    },
    /// What the files say contradicts itself or the target.
    #[error(
        "{path}: {} problem(s) in what the package says; first: {}",
        errors.len(),
        errors.first().map(ToString::to_string).unwrap_or_default()
    )]
    Invalid {
        /// The package.
        path: PathBuf,
        /// Every problem found.
        errors: Vec<super::ValidationError>,
    },
    /// The manifest is of a format version this reader does not read.
    #[error(
        "{path}: format version {found}, this reader supports {supported}; build the package again"
    )]
    Version {
        /// The manifest.
        path: PathBuf,
        /// The version the manifest records.
        found: u64,
        /// [`super::FORMAT_VERSION`].
        supported: u32,
    },
    /// A file, or the manifest's list of files, is larger than the reader's
    /// limits allow.
    #[error("{path}: {found} {what}, more than the {limit} a package may have")]
    Limit {
        /// The file (the manifest for a count of files).
        path: PathBuf,
        /// What is counted.
        what: &'static str,
        /// What was found.
        found: u64,
        /// The limit.
        limit: u64,
    },
    /// A file's size is not the one the manifest records.
    #[error("{path}: {found} bytes, the manifest records {expected}")]
    Size {
        /// The file.
        path: PathBuf,
        /// The size the manifest records.
        expected: u64,
        /// The size on disk.
        found: u64,
    },
    /// A file's content is not the one the manifest records (for the
    /// manifest itself, its content is not the one its digest was made of).
    #[error("{path}: SHA-256 {found}, the manifest records {expected}")]
    Digest {
        /// The file.
        path: PathBuf,
        /// The digest the manifest records.
        expected: String,
        /// The digest of the content on disk.
        found: String,
    },
    /// A file the manifest does not list: in the package directory, or
    /// needed by the program.
    #[error("{path}: not listed in the manifest")]
    Unlisted {
        /// The file.
        path: PathBuf,
    },
    /// A kernel's name cannot name its files under `kernels/`.
    #[error("kernel {name:?}: {reason}")]
    KernelName {
        /// The name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The path to write a package to has no final name.
    #[error("{path:?}: no final name (`.`, `..` or a root) to write a package under")]
    TargetHasNoName {
        /// The path.
        path: PathBuf,
    },
    /// The path to write a package to exists and is not a directory.
    #[error(
        "{path}: exists and is not a directory; write a package to a new directory, an empty one or an earlier package"
    )]
    TargetNotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// The path to write a package to is a directory of something else.
    #[error(
        "{path}: holds no package (no manifest.json) and writing would replace it; write a package to a new directory, an empty one or an earlier package"
    )]
    TargetNotAPackage {
        /// The path.
        path: PathBuf,
    },
    /// The new package could not be renamed into place, and the earlier
    /// package, moved aside for it, could not be moved back.
    #[error(
        "{path}: {source}; the earlier package could not be moved back ({restore}) and is at {aside}; the next write or inspect-package restores it"
    )]
    Restore {
        /// Where the package was to be written.
        path: PathBuf,
        /// Why the new package could not be renamed into place.
        #[source]
        source: std::io::Error,
        /// Where the earlier package is.
        aside: PathBuf,
        /// Why it could not be moved back.
        restore: std::io::Error,
    },
    /// A write was stopped by its test hook, as a kill would stop it: no
    /// cleanup ran. Only tests see this.
    #[error("{path}: the write was stopped before {step}")]
    Stopped {
        /// Where the package was to be written.
        path: PathBuf,
        /// The step it stopped before.
        step: String,
    },
}

/// The `Io` error of an operation on `path`.
pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PackageIoError + '_ {
    move |source| PackageIoError::Io {
        path: path.to_owned(),
        source,
    }
}
