//! The package: what a build produces, in memory and on disk.
//!
//! A package holds the lowered program (buffers, kernel specs, steps), the
//! address of every buffer's shard on every tile, the exchange rows of
//! every phase (with the per-iteration patches of repeat bodies), the
//! kernel objects, the support-memory layout of every tile, and the memory
//! profile. `docs/FORMAT.md` documents the files. Writing is atomic: the
//! package is written into a temporary directory beside the target and
//! renamed over it, so a failed build leaves any previous package intact.

use std::io::Write;
use std::path::{Path, PathBuf};

use ipu_exchange::EncodedRows;
use ipu_layout::TileId;
use serde::{Deserialize, Serialize};

use crate::phases::LocalCopy;
use crate::program::{Buffer, GemmKernel, Step};

/// The package format version.
pub const FORMAT_VERSION: u32 = 1;

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
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The graph's name.
    pub name: String,
    /// Tiles.
    pub tile_count: u32,
    /// Headline figures.
    pub summary: BuildSummary,
    /// The files of the package with their sizes.
    pub files: Vec<(String, u64)>,
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

impl Package {
    /// Writes the package into `dir` atomically (a temporary directory
    /// beside it, renamed over it).
    pub fn write(&self, dir: &Path) -> Result<(), PackageIoError> {
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
        std::fs::create_dir_all(tmp.join("kernels")).map_err(io(&tmp))?;
        let mut files = Vec::new();
        let mut put = |rel: &str, bytes: &[u8]| -> Result<(), PackageIoError> {
            let path = tmp.join(rel);
            let mut f = std::fs::File::create(&path).map_err(io(&path))?;
            f.write_all(bytes).map_err(io(&path))?;
            files.push((rel.to_owned(), bytes.len() as u64));
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
            put(&format!("kernels/{}.o", k.name), &k.object)?;
            put(&format!("kernels/{}.json", k.name), k.metadata.as_bytes())?;
        }
        let mut manifest = self.manifest.clone();
        manifest.files = files;
        let text = serde_json::to_vec_pretty(&manifest).map_err(|e| PackageIoError::Format {
            path: tmp.join("manifest.json"),
            reason: e.to_string(),
        })?;
        let path = tmp.join("manifest.json");
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

    /// Reads a package written by [`Package::write`].
    pub fn read(dir: &Path) -> Result<Package, PackageIoError> {
        let read = |rel: &str| -> Result<Vec<u8>, PackageIoError> {
            let path = dir.join(rel);
            std::fs::read(&path).map_err(io(&path))
        };
        let format = |rel: &str, reason: String| PackageIoError::Format {
            path: dir.join(rel),
            reason,
        };
        let manifest: Manifest = serde_json::from_slice(&read("manifest.json")?)
            .map_err(|e| format("manifest.json", e.to_string()))?;
        if manifest.format_version != FORMAT_VERSION {
            return Err(format(
                "manifest.json",
                format!(
                    "format version {} is not {FORMAT_VERSION}",
                    manifest.format_version
                ),
            ));
        }
        let mut program: PackageProgram = serde_json::from_slice(&read("program.json")?)
            .map_err(|e| format("program.json", e.to_string()))?;
        for k in &mut program.compiled {
            k.object = read(&format!("kernels/{}.o", k.name))?;
            k.metadata =
                String::from_utf8_lossy(&read(&format!("kernels/{}.json", k.name))?).into_owned();
        }
        let rows = decode_rows(&read("exchange.bin")?).map_err(|e| format("exchange.bin", e))?;
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
        let memory_profile = String::from_utf8_lossy(&read("memory-profile.json")?).into_owned();
        let fixture = match std::fs::read(dir.join("fixture.json")) {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(PackageIoError::Io {
                    path: dir.join("fixture.json"),
                    source,
                });
            }
        };
        Ok(Package {
            manifest,
            program,
            rows,
            memory_profile,
            fixture,
        })
    }
}
