//! `manifest.json`: the manifest with a digest of itself, the file entries
//! and their names.
//!
//! The manifest lists every other file with its size and SHA-256, so the
//! reader checks every byte before it parses anything; the manifest's own
//! digest covers what the others cannot. The digests are not keyed: they
//! find damage, not forgery, which is why the reader also validates what
//! the files say ([`super::Package::validate`]).

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{FORMAT_VERSION, Manifest, PackageIoError};

/// The manifest's name in the package directory.
pub(super) const MANIFEST: &str = "manifest.json";
/// The directory of the kernel objects and their metadata.
pub(super) const KERNELS: &str = "kernels";

/// A file of a package as `manifest.json` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageFile {
    /// The path inside the package directory: `NAME` or `kernels/NAME`.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// SHA-256 of the content, 64 lowercase hex digits.
    pub sha256: String,
}

impl PackageFile {
    /// The entry of `bytes` stored as `name`.
    pub(super) fn of(name: &str, bytes: &[u8]) -> PackageFile {
        PackageFile {
            name: name.to_owned(),
            bytes: bytes.len() as u64,
            sha256: sha256_hex(bytes),
        }
    }
}

/// `manifest.json` as it is on disk.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestFile<M> {
    manifest: M,
    /// SHA-256 of `manifest`'s compact JSON.
    manifest_sha256: String,
}

/// Lowercase hex SHA-256 of `bytes`.
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut out, b| {
            // Writing to a String cannot fail.
            let _ = write!(out, "{b:02x}");
            out
        })
}

fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The digest of a manifest: over its compact serialisation, so that it
/// depends on the values and not on how the file is laid out.
fn digest(manifest: &Manifest) -> Result<String, serde_json::Error> {
    Ok(sha256_hex(&serde_json::to_vec(manifest)?))
}

/// The text of `manifest.json` for `manifest`.
pub(super) fn manifest_text(manifest: &Manifest) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec_pretty(&ManifestFile {
        manifest,
        manifest_sha256: digest(manifest)?,
    })
}

/// Why `name` cannot be a manifest entry, if it cannot: entries are
/// `NAME` or `kernels/NAME`, so that a manifest cannot make the reader open
/// a file outside the package.
pub(super) fn entry_name_problem(name: &str) -> Option<&'static str> {
    let file = match name.split_once('/') {
        Some((KERNELS, file)) => file,
        Some(_) => return Some("only kernels/ may hold files"),
        None => name,
    };
    if file.is_empty() || file == "." || file == ".." || file.contains(['/', '\\', '\0']) {
        Some("not a file name")
    } else if name == MANIFEST || name == KERNELS {
        Some("a name the package reserves")
    } else {
        None
    }
}

/// Reads `manifest.json` from its bytes: the version first (so that an
/// older or newer package gets a version message, not a field error), then
/// the fields, the manifest's own digest and the file names.
pub(super) fn parse_manifest(path: &Path, bytes: &[u8]) -> Result<Manifest, PackageIoError> {
    let format = |reason: String| PackageIoError::Format {
        path: path.to_owned(),
        reason,
    };
    let json = |source| PackageIoError::Json {
        path: path.to_owned(),
        source,
    };
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(json)?;
    // Versions 1 and 2 kept the version at the top level.
    let version = value
        .pointer("/manifest/format_version")
        .or_else(|| value.get("format_version"))
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| format("no format_version".into()))?;
    if version != u64::from(FORMAT_VERSION) {
        return Err(PackageIoError::Version {
            path: path.to_owned(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let file: ManifestFile<Manifest> = serde_json::from_value(value).map_err(json)?;
    if !is_sha256_hex(&file.manifest_sha256) {
        return Err(format(
            "manifest_sha256 is not 64 lowercase hex digits".into(),
        ));
    }
    let found = digest(&file.manifest).map_err(json)?;
    if found != file.manifest_sha256 {
        return Err(PackageIoError::Digest {
            path: path.to_owned(),
            expected: file.manifest_sha256,
            found,
        });
    }
    let mut names = std::collections::BTreeSet::new();
    for f in &file.manifest.files {
        if let Some(problem) = entry_name_problem(&f.name) {
            return Err(format(format!("file {:?}: {problem}", f.name)));
        }
        if !names.insert(f.name.as_str()) {
            return Err(format(format!("file {:?} is listed twice", f.name)));
        }
        if !is_sha256_hex(&f.sha256) {
            return Err(format(format!(
                "file {:?}: sha256 is not 64 lowercase hex digits",
                f.name
            )));
        }
    }
    Ok(file.manifest)
}
