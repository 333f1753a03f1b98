//! The package: what a build produces, in memory and on disk.
//!
//! A package holds the lowered program (buffers, kernel specs, steps), the
//! address of every buffer's shard on every tile, the exchange rows of
//! every phase (with the per-iteration patches of repeat bodies), the
//! kernel objects, the support-memory layout of every tile, and the memory
//! profile. `docs/FORMAT.md` documents the files. Writing is atomic: the
//! package is written into a staging directory beside the target and
//! renamed into place, so a failed write leaves any previous package
//! intact and nothing beside it.
//!
//! The manifest records the size and SHA-256 of every other file, and a
//! digest of itself; reading checks all of them before parsing anything,
//! so a damaged package is refused with the file that is wrong rather than
//! run with a wrong address or instruction word.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ipu_exchange::EncodedRows;
use ipu_layout::TileId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::warn;

use crate::phases::LocalCopy;
use crate::program::{Buffer, GemmKernel, Step};

/// The package format version. Version 2 records every file's SHA-256 and
/// the manifest's own digest, and no build timings.
pub const FORMAT_VERSION: u32 = 2;

/// A word of an exchange row that differs per repeat iteration: in
/// iteration `i` it is `word + i · delta` (wrapping), where `word` is the
/// row's word at `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowPatch {
    /// The tile.
    pub tile: TileId,
    /// Word index in the tile's row.
    pub index: u32,
    /// Added per iteration.
    pub delta: u32,
}

/// One exchange phase of the package.
#[derive(Clone, Debug)]
pub struct PackagePhase {
    /// The exchange step's name.
    pub name: String,
    /// Every tile's row (iteration 0 for a repeat body).
    pub rows: EncodedRows,
    /// Copies within tiles, done in the same step.
    pub local: Vec<LocalCopy>,
    /// Per-iteration patches of a repeat body's rows.
    pub patches: Vec<RowPatch>,
    /// Schedule horizon in cycles.
    pub horizon: u64,
    /// The endpoint lower bound.
    pub endpoint_lower_bound: u64,
    /// The stronger lower bound.
    pub stronger_lower_bound: u64,
}

/// A compiled GEMM kernel.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PackageKernel {
    /// The variant's name.
    pub name: String,
    /// Entry symbols: `[small initialise, small accumulate, large
    /// initialise, large accumulate]`.
    pub entries: [String; 4],
    /// The ELF object.
    #[serde(skip)]
    pub object: Vec<u8>,
    /// `kernel.json`.
    #[serde(skip)]
    pub metadata: String,
}

/// A tile's support memory: runtime, kernel code, control program and
/// exchange rows, in region 0 from `start`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileSupport {
    /// First address.
    pub start: u32,
    /// Bytes reserved (whole memory elements).
    pub reserved: u32,
    /// Runtime and codelet code.
    pub runtime_bytes: u32,
    /// GEMM kernel code.
    pub kernel_code_bytes: u32,
    /// The control program (steps and codelet arguments).
    pub control_bytes: u32,
    /// Exchange rows of every phase.
    pub exchange_bytes: u32,
    /// Repeat patches.
    pub patch_bytes: u32,
}

impl TileSupport {
    /// Bytes used.
    pub fn used(&self) -> u32 {
        self.runtime_bytes
            + self.kernel_code_bytes
            + self.control_bytes
            + self.exchange_bytes
            + self.patch_bytes
    }
}

/// Headline figures of a build.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
// A misspelt field is damage, not an extension: the manifest is versioned.
#[serde(deny_unknown_fields)]
pub struct BuildSummary {
    /// Whether everything was placed.
    pub fits: bool,
    /// Tiles.
    pub tile_count: u32,
    /// Storage requests placed.
    pub requests: usize,
    /// The largest peak address use of a tile, in bytes above the SRAM base.
    pub peak_bytes: u64,
    /// The smallest free space left on a tile at its fullest step: usable
    /// bytes minus live data and the support memory actually used.
    pub min_headroom_bytes: u64,
    /// The tile with the least headroom.
    pub min_headroom_tile: u32,
    /// Σ horizon of the exchange phases (each body phase once).
    pub exchange_horizon: u64,
    /// Σ endpoint lower bound of the same phases.
    pub exchange_endpoint_bound: u64,
    /// Σ stronger lower bound.
    pub exchange_stronger_bound: u64,
    /// Distinct GEMM kernels.
    pub kernels: usize,
    /// The largest support memory of a tile.
    pub max_support_bytes: u32,
    /// Elapsed milliseconds per phase, for the builder's report. Never
    /// written: wall-clock time differs from run to run, and a package must
    /// be byte-identical whatever the machine, its load or the thread
    /// count. Empty in a package read from disk.
    #[serde(skip)]
    pub phase_ms: Vec<(String, u64)>,
    /// The per-op transient budget the plan ended with.
    pub transient_budget: u64,
}

/// The manifest: what the package is and what its files hold.
///
/// On disk, `manifest.json` also holds each file's SHA-256 and a digest of
/// the manifest itself; they protect the bytes on disk and are checked by
/// [`Package::read`], so the in-memory value keeps names and sizes only
/// ([`Package::verify`] returns the digests).
#[derive(Clone, Debug)]
pub struct Manifest {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The graph's name.
    pub name: String,
    /// Tiles.
    pub tile_count: u32,
    /// Headline figures.
    pub summary: BuildSummary,
    /// The files of the package with their sizes, as written (empty in a
    /// package that has not been written or read).
    pub files: Vec<(String, u64)>,
}

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
    fn of(name: &str, bytes: &[u8]) -> PackageFile {
        PackageFile {
            name: name.to_owned(),
            bytes: bytes.len() as u64,
            sha256: sha256_hex(bytes),
        }
    }
}

/// `manifest.json` as it is on disk: the manifest with digests.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestFile {
    format_version: u32,
    name: String,
    tile_count: u32,
    summary: BuildSummary,
    files: Vec<PackageFile>,
    /// SHA-256 of this manifest's compact JSON with this field empty. The
    /// other digests cannot cover the manifest, and its tile count and
    /// file list are what the rest is read by.
    manifest_sha256: String,
}

impl ManifestFile {
    /// The digest `manifest_sha256` must hold: over the compact
    /// serialisation, so that it depends on the values and not on how the
    /// file is laid out.
    fn digest(&self) -> Result<String, serde_json::Error> {
        let unsigned = ManifestFileRef {
            format_version: self.format_version,
            name: &self.name,
            tile_count: self.tile_count,
            summary: &self.summary,
            files: &self.files,
            manifest_sha256: "",
        };
        Ok(sha256_hex(&serde_json::to_vec(&unsigned)?))
    }
}

/// [`ManifestFile`] by reference, with the same fields in the same order,
/// so that its digest is computed without cloning the file list.
#[derive(Serialize)]
struct ManifestFileRef<'a> {
    format_version: u32,
    name: &'a str,
    tile_count: u32,
    summary: &'a BuildSummary,
    files: &'a [PackageFile],
    manifest_sha256: &'a str,
}

/// Lowercase hex SHA-256 of `bytes`.
fn sha256_hex(bytes: &[u8]) -> String {
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

/// The program part of a package.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PackageProgram {
    /// Buffers, by id.
    pub buffers: Vec<Buffer>,
    /// GEMM kernel specs, by id.
    pub kernels: Vec<GemmKernel>,
    /// The steps.
    pub steps: Vec<Step>,
    /// Per buffer: `(tile, address)` of each non-empty shard.
    pub addresses: Vec<Vec<(u32, u32)>>,
    /// Per tile: its support memory.
    pub support: Vec<TileSupport>,
    /// Per exchange step (program order, bodies once): its name and local
    /// copies; the rows are in `exchange.bin`.
    pub phases: Vec<PhaseInfo>,
    /// Compiled kernels (objects under `kernels/`).
    pub compiled: Vec<PackageKernel>,
}

/// What `program.json` says of a phase.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhaseInfo {
    /// The step name.
    pub name: String,
    /// Copies within tiles.
    pub local: Vec<LocalCopy>,
    /// Row patches per iteration.
    pub patches: Vec<RowPatch>,
    /// Horizon and bounds.
    pub horizon: u64,
    /// Endpoint bound.
    pub endpoint_lower_bound: u64,
    /// Stronger bound.
    pub stronger_lower_bound: u64,
}

/// A built package.
#[derive(Clone, Debug)]
pub struct Package {
    /// The manifest.
    pub manifest: Manifest,
    /// Program, addresses, support and kernel index.
    pub program: PackageProgram,
    /// Rows of every phase, in the order of `program.phases`.
    pub rows: Vec<EncodedRows>,
    /// The memory profile JSON.
    pub memory_profile: String,
    /// The fixture the package was built from, so that a run can be
    /// checked against the reference evaluation of the same graph.
    pub fixture: Option<String>,
}

/// Why a package could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum PackageIoError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file is not what the format says.
    #[error("{path}: {reason}")]
    Format {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
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
        /// [`FORMAT_VERSION`].
        supported: u32,
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
        "{path}: {source}; the earlier package could not be moved back ({restore}) and is at {aside}"
    )]
    Restore {
        /// Where the package was to be written.
        path: PathBuf,
        /// Why the new package could not be renamed into place.
        source: std::io::Error,
        /// Where the earlier package is.
        aside: PathBuf,
        /// Why it could not be moved back.
        restore: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PackageIoError + '_ {
    move |source| PackageIoError::Io {
        path: path.to_owned(),
        source,
    }
}

const ROWS_MAGIC: &[u8; 8] = b"IPUROWS1";

/// Encodes every phase's rows: magic, phase count, then per phase the tile
/// count, the distinct rows (length-prefixed words) and each tile's row id,
/// all little-endian `u32`.
pub fn encode_rows(rows: &[EncodedRows]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(ROWS_MAGIC);
    let put = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_le_bytes());
    put(&mut out, rows.len() as u32);
    for r in rows {
        put(&mut out, r.tile_count());
        put(&mut out, r.unique_rows().len() as u32);
        for row in r.unique_rows() {
            put(&mut out, row.len() as u32);
            for &w in row {
                put(&mut out, w);
            }
        }
        for t in 0..r.tile_count() {
            put(&mut out, r.row_id(TileId::from_u32(t)).unwrap_or(u32::MAX));
        }
    }
    out
}

/// Decodes [`encode_rows`].
pub fn decode_rows(bytes: &[u8]) -> Result<Vec<EncodedRows>, String> {
    if bytes.len() < 12 || &bytes[..8] != ROWS_MAGIC {
        return Err("not an exchange row file".into());
    }
    let mut at = 8usize;
    let mut next = || -> Result<u32, String> {
        let b = bytes.get(at..at + 4).ok_or("truncated")?;
        at += 4;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let phases = next()?;
    let mut out = Vec::new();
    for _ in 0..phases {
        let tiles = next()?;
        let unique = next()?;
        let mut rows = Vec::new();
        for _ in 0..unique {
            let len = next()?;
            if len > (1 << 26) {
                return Err("row length out of range".into());
            }
            let row: Result<Vec<u32>, String> = (0..len).map(|_| next()).collect();
            rows.push(row?);
        }
        let mut per_tile = Vec::new();
        for _ in 0..tiles {
            let id = next()?;
            per_tile.push(rows.get(id as usize).cloned().unwrap_or_default());
        }
        out.push(EncodedRows::from_tile_rows(per_tile));
    }
    Ok(out)
}

/// The file operations of [`Package::write`] that can fail once staging
/// has begun, so that tests can make each of them fail in turn.
struct FsOps<'a> {
    write: &'a dyn Fn(&Path, &[u8]) -> std::io::Result<()>,
    rename: &'a dyn Fn(&Path, &Path) -> std::io::Result<()>,
}

/// `.NAME.KIND-PID-N` in `parent`: a hidden sibling of the target. The
/// process id and a counter keep two writers (processes or threads) apart.
fn sibling(parent: &Path, name: &OsStr, kind: &str, n: u64) -> PathBuf {
    let mut file = OsString::from(".");
    file.push(name);
    file.push(format!(".{kind}-{}-{n}", std::process::id()));
    parent.join(file)
}

/// Numbers the siblings this process makes.
static NEXT_SIBLING: AtomicU64 = AtomicU64::new(0);

/// Tries this many sibling names before giving up: only stale siblings of
/// an earlier process with the same id can be in the way.
const SIBLING_ATTEMPTS: u32 = 1000;

/// The first of this process's numbered siblings of the target that
/// `claim` takes (it fails with `AlreadyExists` for one in use).
fn claim_sibling(
    parent: &Path,
    name: &OsStr,
    kind: &str,
    claim: impl Fn(&Path) -> std::io::Result<()>,
) -> Result<PathBuf, PackageIoError> {
    let mut last = PathBuf::new();
    for _ in 0..SIBLING_ATTEMPTS {
        last = sibling(
            parent,
            name,
            kind,
            NEXT_SIBLING.fetch_add(1, Ordering::Relaxed),
        );
        match claim(&last) {
            Ok(()) => return Ok(last),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(PackageIoError::Io { path: last, source }),
        }
    }
    Err(PackageIoError::Io {
        path: last,
        source: std::io::ErrorKind::AlreadyExists.into(),
    })
}

/// A sibling of the target that does not exist yet, to move the earlier
/// package to.
fn unused_sibling(parent: &Path, name: &OsStr) -> Result<PathBuf, PackageIoError> {
    claim_sibling(
        parent,
        name,
        "old",
        |path| match std::fs::symlink_metadata(path) {
            Ok(_) => Err(std::io::ErrorKind::AlreadyExists.into()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        },
    )
}

/// The staging directory of a write, removed when dropped unless the new
/// package was renamed out of it: every error path, `?` included, then
/// leaves nothing beside the target.
struct Staging {
    path: PathBuf,
    armed: bool,
}

impl Staging {
    /// Creates a new, empty staging directory beside the target. It is
    /// created, never reused, so that a concurrent writer's is never
    /// touched.
    fn create(parent: &Path, name: &OsStr) -> Result<Staging, PackageIoError> {
        let path = claim_sibling(parent, name, "staging", |path| std::fs::create_dir(path))?;
        Ok(Staging { path, armed: true })
    }

    /// The package was renamed into place: nothing is left to remove.
    fn renamed(mut self) {
        self.armed = false;
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.armed {
            // Best effort: the write is failing already, and its error says
            // more than this one would.
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
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

/// The manifest's name in the package directory.
const MANIFEST: &str = "manifest.json";
/// The directory of the kernel objects and their metadata.
const KERNELS: &str = "kernels";

/// Refuses a kernel name that would not make one file name under
/// `kernels/`: the name becomes part of a path, and a separator or `..`
/// would write outside the package or over another file.
fn check_kernel_names(kernels: &[PackageKernel]) -> Result<(), PackageIoError> {
    let mut seen = BTreeSet::new();
    for k in kernels {
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

/// Why `name` cannot be a manifest entry, if it cannot: entries are
/// `NAME` or `kernels/NAME`, so that a manifest cannot make the reader open
/// a file outside the package.
fn entry_name_problem(name: &str) -> Option<&'static str> {
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
fn parse_manifest(path: &Path, bytes: &[u8]) -> Result<ManifestFile, PackageIoError> {
    let format = |reason: String| PackageIoError::Format {
        path: path.to_owned(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format(e.to_string()))?;
    let version = value
        .get("format_version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| format("no format_version".into()))?;
    if version != u64::from(FORMAT_VERSION) {
        return Err(PackageIoError::Version {
            path: path.to_owned(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let manifest: ManifestFile =
        serde_json::from_value(value).map_err(|e| format(e.to_string()))?;
    if !is_sha256_hex(&manifest.manifest_sha256) {
        return Err(format(
            "manifest_sha256 is not 64 lowercase hex digits".into(),
        ));
    }
    let found = manifest.digest().map_err(|e| format(e.to_string()))?;
    if found != manifest.manifest_sha256 {
        return Err(PackageIoError::Digest {
            path: path.to_owned(),
            expected: manifest.manifest_sha256,
            found,
        });
    }
    let mut names = BTreeSet::new();
    for f in &manifest.files {
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
    Ok(manifest)
}

/// Reads the file `entry` names under `dir` and checks its size, then its
/// digest, against the entry.
fn read_verified(dir: &Path, entry: &PackageFile) -> Result<Vec<u8>, PackageIoError> {
    let path = dir.join(&entry.name);
    let mut file = std::fs::File::open(&path).map_err(io(&path))?;
    let size = file.metadata().map_err(io(&path))?.len();
    // The size first: a cut or grown file is named as such, and a file far
    // larger than recorded is not read into memory.
    if size != entry.bytes {
        return Err(PackageIoError::Size {
            path,
            expected: entry.bytes,
            found: size,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.read_to_end(&mut bytes).map_err(io(&path))?;
    if bytes.len() as u64 != entry.bytes {
        return Err(PackageIoError::Size {
            path,
            expected: entry.bytes,
            found: bytes.len() as u64,
        });
    }
    let found = sha256_hex(&bytes);
    if found != entry.sha256 {
        return Err(PackageIoError::Digest {
            path,
            expected: entry.sha256.clone(),
            found,
        });
    }
    Ok(bytes)
}

/// Refuses a file in the package directory or in `kernels/` that the
/// manifest does not list: the manifest is the whole package, and a file
/// beside it (an object from another build, a fixture put there by hand)
/// would otherwise be taken for part of it or silently ignored.
fn check_unlisted(dir: &Path, listed: &BTreeSet<&str>) -> Result<(), PackageIoError> {
    let check = |sub: Option<&str>| -> Result<(), PackageIoError> {
        let at = sub.map_or_else(|| dir.to_owned(), |s| dir.join(s));
        let entries = match std::fs::read_dir(&at) {
            Ok(entries) => entries,
            // A package without kernels may have no kernels/ directory.
            Err(e) if sub.is_some() && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(PackageIoError::Io { path: at, source }),
        };
        for entry in entries {
            let entry = entry.map_err(io(&at))?;
            let path = entry.path();
            let Some(file) = entry.file_name().to_str().map(str::to_owned) else {
                return Err(PackageIoError::Unlisted { path });
            };
            let name = match sub {
                Some(s) => format!("{s}/{file}"),
                None => file,
            };
            let known = match sub {
                None => name == MANIFEST || name == KERNELS,
                Some(_) => false,
            };
            if !known && !listed.contains(name.as_str()) {
                return Err(PackageIoError::Unlisted { path });
            }
        }
        Ok(())
    };
    check(None)?;
    check(Some(KERNELS))
}

impl Package {
    /// Writes the package into `dir` atomically: into a staging directory
    /// beside it, then renamed into place.
    ///
    /// `dir` must be missing, an empty directory or an earlier package (a
    /// directory with a `manifest.json`); anything else is refused before
    /// any work, since replacing it would delete it, and so is a path
    /// without a final name (`.`, `..`, a root). An earlier package is
    /// moved aside, the new one renamed in, and the earlier one removed; if
    /// the rename fails the earlier one is moved back. On every error the
    /// staging directory is removed and whatever was at `dir` is left as it
    /// was.
    pub fn write(&self, dir: &Path) -> Result<(), PackageIoError> {
        self.write_with(
            dir,
            &FsOps {
                write: &|path, bytes| std::fs::write(path, bytes),
                rename: &|from, to| std::fs::rename(from, to),
            },
        )
    }

    /// [`Package::write`] with its file writes and renames done by `ops`.
    fn write_with(&self, dir: &Path, ops: &FsOps<'_>) -> Result<(), PackageIoError> {
        let Some(name) = dir.file_name() else {
            return Err(PackageIoError::TargetHasNoName {
                path: dir.to_owned(),
            });
        };
        // `parent` is empty for a bare name: joining keeps the path
        // relative, and creating it is a no-op. The target is rebuilt from
        // its parent and name so that `pkg/.` is renamed as `pkg`.
        let parent = dir.parent().unwrap_or(Path::new(""));
        let target = parent.join(name);
        check_kernel_names(&self.program.compiled)?;
        check_target(&target)?;
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        let staging = Staging::create(parent, name)?;
        let kernels = staging.path.join(KERNELS);
        std::fs::create_dir(&kernels).map_err(io(&kernels))?;
        let mut files = Vec::new();
        let mut put = |rel: &str, bytes: &[u8]| -> Result<(), PackageIoError> {
            let path = staging.path.join(rel);
            (ops.write)(&path, bytes).map_err(io(&path))?;
            files.push(PackageFile::of(rel, bytes));
            Ok(())
        };
        let program = serde_json::to_vec(&self.program).map_err(|e| PackageIoError::Format {
            path: staging.path.join("program.json"),
            reason: e.to_string(),
        })?;
        put("program.json", &program)?;
        put("exchange.bin", &encode_rows(&self.rows))?;
        put("memory-profile.json", self.memory_profile.as_bytes())?;
        if let Some(fixture) = &self.fixture {
            put("fixture.json", fixture.as_bytes())?;
        }
        for k in &self.program.compiled {
            put(&format!("{KERNELS}/{}.o", k.name), &k.object)?;
            put(&format!("{KERNELS}/{}.json", k.name), k.metadata.as_bytes())?;
        }
        let path = staging.path.join(MANIFEST);
        let format = |e: serde_json::Error| PackageIoError::Format {
            path: path.clone(),
            reason: e.to_string(),
        };
        let mut manifest = ManifestFile {
            format_version: FORMAT_VERSION,
            name: self.manifest.name.clone(),
            tile_count: self.manifest.tile_count,
            summary: self.manifest.summary.clone(),
            files,
            manifest_sha256: String::new(),
        };
        manifest.manifest_sha256 = manifest.digest().map_err(format)?;
        let text = serde_json::to_vec_pretty(&manifest).map_err(format)?;
        (ops.write)(&path, &text).map_err(io(&path))?;

        // Staging may have taken a while: look again at what is to be
        // replaced, then swap.
        let replacing = check_target(&target)?;
        let aside = if replacing {
            let aside = unused_sibling(parent, name)?;
            (ops.rename)(&target, &aside).map_err(io(&target))?;
            Some(aside)
        } else {
            None
        };
        if let Err(source) = (ops.rename)(&staging.path, &target) {
            if let Some(aside) = aside
                && let Err(restore) = (ops.rename)(&aside, &target)
            {
                return Err(PackageIoError::Restore {
                    path: target,
                    source,
                    aside,
                    restore,
                });
            }
            return Err(PackageIoError::Io {
                path: target,
                source,
            });
        }
        staging.renamed();
        if let Some(aside) = aside
            && let Err(e) = std::fs::remove_dir_all(&aside)
        {
            // The new package is in place, so the write succeeded; what is
            // left is the earlier package beside it, which is said here
            // rather than failing a write that happened.
            warn!(
                path = %aside.display(),
                error = %e,
                "package written; the earlier package moved aside could not be removed"
            );
        }
        Ok(())
    }

    /// Checks the package in `dir` without parsing its content: the
    /// manifest's version and digest, every listed file's size and SHA-256,
    /// and that the directory holds no file the manifest does not list.
    /// Returns the manifest's entries.
    pub fn verify(dir: &Path) -> Result<Vec<PackageFile>, PackageIoError> {
        let (manifest, _) = Self::read_files(dir)?;
        Ok(manifest.files)
    }

    /// The verified manifest and the content of every file it lists.
    fn read_files(dir: &Path) -> Result<(ManifestFile, BTreeMap<String, Vec<u8>>), PackageIoError> {
        let path = dir.join(MANIFEST);
        let bytes = std::fs::read(&path).map_err(io(&path))?;
        let manifest = parse_manifest(&path, &bytes)?;
        let mut content = BTreeMap::new();
        for entry in &manifest.files {
            content.insert(entry.name.clone(), read_verified(dir, entry)?);
        }
        let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.name.as_str()).collect();
        check_unlisted(dir, &listed)?;
        Ok((manifest, content))
    }

    /// Reads a package written by [`Package::write`], after checking every
    /// file against the manifest ([`Package::verify`]).
    pub fn read(dir: &Path) -> Result<Package, PackageIoError> {
        let (manifest, content) = Self::read_files(dir)?;
        // Only verified content is parsed; a file the program needs but the
        // manifest does not list is as wrong as a damaged one.
        let file = |rel: &str| -> Result<&[u8], PackageIoError> {
            content
                .get(rel)
                .map(Vec::as_slice)
                .ok_or_else(|| PackageIoError::Unlisted {
                    path: dir.join(rel),
                })
        };
        let format = |rel: &str, reason: String| PackageIoError::Format {
            path: dir.join(rel),
            reason,
        };
        let text = |rel: &str| -> Result<String, PackageIoError> {
            String::from_utf8(file(rel)?.to_vec())
                .map_err(|e| format(rel, format!("not UTF-8: {e}")))
        };
        let mut program: PackageProgram = serde_json::from_slice(file("program.json")?)
            .map_err(|e| format("program.json", e.to_string()))?;
        for k in &mut program.compiled {
            k.object = file(&format!("{KERNELS}/{}.o", k.name))?.to_vec();
            k.metadata = text(&format!("{KERNELS}/{}.json", k.name))?;
        }
        let rows = decode_rows(file("exchange.bin")?).map_err(|e| format("exchange.bin", e))?;
        if rows.len() != program.phases.len() {
            return Err(format(
                "exchange.bin",
                format!(
                    "{} phases, the program has {}",
                    rows.len(),
                    program.phases.len()
                ),
            ));
        }
        let memory_profile = text("memory-profile.json")?;
        let fixture = if content.contains_key("fixture.json") {
            Some(text("fixture.json")?)
        } else {
            None
        };
        Ok(Package {
            manifest: Manifest {
                format_version: manifest.format_version,
                name: manifest.name,
                tile_count: manifest.tile_count,
                summary: manifest.summary,
                files: manifest
                    .files
                    .into_iter()
                    .map(|f| (f.name, f.bytes))
                    .collect(),
            },
            program,
            rows,
            memory_profile,
            fixture,
        })
    }
}

#[cfg(test)]
mod tests {
    //! The failures of a write that only a failing disk causes, made to
    //! happen through [`FsOps`]: whichever operation fails, the earlier
    //! package is left byte for byte as it was and nothing is left beside
    //! it.

    use std::collections::BTreeMap;
    use std::io::Error;

    use super::*;

    /// A scratch directory under the system's temporary directory,
    /// removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(test: &str) -> Scratch {
            let path = std::env::temp_dir()
                .join(format!("ipu-package-unit-{}-{test}", std::process::id()));
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

    /// A small package; `tag` makes its content differ.
    fn sample(tag: &str) -> Package {
        Package {
            manifest: Manifest {
                format_version: FORMAT_VERSION,
                name: format!("sample-{tag}"),
                tile_count: 1,
                summary: BuildSummary::default(),
                files: Vec::new(),
            },
            program: PackageProgram {
                buffers: Vec::new(),
                kernels: Vec::new(),
                steps: Vec::new(),
                addresses: Vec::new(),
                support: vec![TileSupport::default()],
                phases: Vec::new(),
                compiled: vec![PackageKernel {
                    name: "k".into(),
                    entries: Default::default(),
                    object: format!("object {tag}").into_bytes(),
                    metadata: "{}".into(),
                }],
            },
            rows: Vec::new(),
            memory_profile: format!("{{\"tag\":\"{tag}\"}}"),
            fixture: None,
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

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read the directory")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }

    fn failed() -> Error {
        Error::other("injected failure")
    }

    /// An earlier package at `pkg` in the scratch directory: its path and
    /// its files.
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

    /// Whether `path` is a staging directory.
    fn staged(path: &Path) -> bool {
        path.file_name()
            .is_some_and(|n| n.to_string_lossy().contains(".staging-"))
    }

    #[test]
    fn a_file_that_cannot_be_written_leaves_the_earlier_package() {
        for failing in ["exchange.bin", "k.o", MANIFEST] {
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
            };
            match sample("new").write_with(&target, &ops) {
                Err(PackageIoError::Io { path, .. }) => {
                    assert!(path.ends_with(failing), "{path:?}");
                }
                other => panic!("{failing}: {other:?}"),
            }
            assert_eq!(snapshot(&target), before, "{failing}");
            assert_eq!(entries(&scratch.0), ["pkg"], "{failing}");
        }
    }

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
        // Only the staged package's rename fails; moving the earlier one
        // back succeeds.
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
    fn an_earlier_package_that_cannot_be_moved_back_is_named() {
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
    }

    #[test]
    fn a_failed_write_to_a_new_directory_leaves_nothing() {
        let scratch = Scratch::new("fresh");
        let target = scratch.0.join("pkg");
        let ops = FsOps {
            write: &write,
            rename: &|_, _| Err(failed()),
        };
        let error = sample("new")
            .write_with(&target, &ops)
            .expect_err("the write fails");
        assert!(matches!(error, PackageIoError::Io { .. }), "{error}");
        assert!(entries(&scratch.0).is_empty());
    }

    #[test]
    fn sibling_names_are_hidden_and_distinct() {
        let parent = Path::new("out");
        let a = sibling(parent, OsStr::new("pkg"), "staging", 0);
        let b = sibling(parent, OsStr::new("pkg"), "staging", 1);
        assert_ne!(a, b);
        assert!(a.starts_with(parent));
        assert!(
            a.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(".pkg.staging-"))
        );
        // A bare name's siblings stay relative.
        assert_eq!(
            sibling(Path::new(""), OsStr::new("pkg"), "old", 3),
            PathBuf::from(format!(".pkg.old-{}-3", std::process::id()))
        );
    }
}
