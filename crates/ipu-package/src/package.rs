//! The package: what a build produces, in memory and on disk.
//!
//! A package holds the lowered program (buffers, kernel specs, steps), the
//! address of every buffer's shard on every tile, the exchange rows of
//! every phase (with the per-iteration patches of repeat bodies), the
//! kernel objects, the support-memory layout of every tile, and the memory
//! profile. `docs/FORMAT.md` documents the files. Writing is atomic: the
//! package is written into a temporary directory beside the target and
//! renamed over it, so a failed build leaves any previous package intact.
//!
//! The manifest records the size and SHA-256 of every other file, and a
//! digest of itself; reading checks all of them before parsing anything,
//! so a damaged package is refused with the file that is wrong rather than
//! run with a wrong address or instruction word.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use ipu_exchange::EncodedRows;
use ipu_layout::TileId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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
    /// Writes the package into `dir` atomically (a temporary directory
    /// beside it, renamed over it).
    pub fn write(&self, dir: &Path) -> Result<(), PackageIoError> {
        check_kernel_names(&self.program.compiled)?;
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "package".into());
        let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
        }
        std::fs::create_dir_all(tmp.join(KERNELS)).map_err(io(&tmp))?;
        let mut files = Vec::new();
        let mut put = |rel: &str, bytes: &[u8]| -> Result<(), PackageIoError> {
            let path = tmp.join(rel);
            std::fs::write(&path, bytes).map_err(io(&path))?;
            files.push(PackageFile::of(rel, bytes));
            Ok(())
        };
        let program = serde_json::to_vec(&self.program).map_err(|e| PackageIoError::Format {
            path: tmp.join("program.json"),
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
        let path = tmp.join(MANIFEST);
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
        std::fs::write(&path, text).map_err(io(&path))?;
        // Swap in: move any old package aside, rename the new one, then
        // delete the old one.
        let old = parent.join(format!(".{name}.old-{}", std::process::id()));
        let had_old = dir.exists();
        if had_old {
            std::fs::rename(dir, &old).map_err(io(dir))?;
        }
        if let Err(e) = std::fs::rename(&tmp, dir) {
            if had_old {
                let _ = std::fs::rename(&old, dir);
            }
            return Err(PackageIoError::Io {
                path: dir.to_owned(),
                source: e,
            });
        }
        if had_old {
            std::fs::remove_dir_all(&old).map_err(io(&old))?;
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
