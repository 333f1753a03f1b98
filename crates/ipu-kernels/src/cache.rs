//! The content-addressed kernel cache.
//!
//! An entry lives in `<root>/<key>/` as `kernel.o` and `kernel.json`, where
//! the key is the sha256 of every compile input ([`cache_key`]): the
//! variant's canonical description (shape, blocks, rows, cost model), the
//! format version of its programs, the toolchain identity, target, source
//! name and source bytes. The root is `$IPU_KERNEL_CACHE`, else
//! `$XDG_CACHE_HOME/ipu-backend/kernels`, else `~/.cache/ipu-backend/kernels`.
//!
//! **Invariant:** a reader never sees a torn file. Each file is written to a
//! temporary file in the entry directory and renamed into place (atomic on
//! one file system); the object is renamed before the metadata, and the
//! metadata carries the object's sha256, so a reader that finds metadata
//! and an object that disagree treats the entry as corrupt. Builds are
//! deterministic, so concurrent writers of one key write identical bytes and
//! either rename may win. Files are not synced to disk: an entry a crash
//! leaves empty or short fails verification like any corrupt entry.
//!
//! A corrupt or truncated entry (unparsable metadata, wrong key, object hash
//! or size mismatch, object that does not parse back) is logged with
//! `tracing::warn!` and rebuilt. A miss logs `compiling kernel source=...
//! name=... target=...` and `kernel artifact created object=...
//! metadata=...` as the seed system did.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::variant::hex;
use crate::{KernelError, KernelMetadata, Toolchain, Variant, programs_from_object};

/// The file names inside an entry.
const OBJECT_FILE: &str = "kernel.o";
const METADATA_FILE: &str = "kernel.json";

/// A content-addressed store of compiled kernels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelCache {
    root: PathBuf,
}

/// Whether a lookup found a valid entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheOutcome {
    /// A valid entry was found.
    Hit,
    /// There was no entry; the kernel was compiled.
    Miss,
    /// The entry was corrupt; the kernel was compiled again.
    Rebuilt,
}

/// A kernel in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedKernel {
    /// Path of `kernel.o`.
    pub object_path: PathBuf,
    /// Path of `kernel.json`.
    pub metadata_path: PathBuf,
    /// The metadata.
    pub metadata: KernelMetadata,
    /// The object bytes.
    pub object: Vec<u8>,
    /// How the lookup went.
    pub outcome: CacheOutcome,
}

/// The cache key of compiling `variant` with `toolchain`: the sha256 (hex)
/// of every compile input.
pub fn cache_key(variant: &Variant, toolchain: &dyn Toolchain) -> String {
    let mut h = Sha256::new();
    let mut field = |label: &str, bytes: &[u8]| {
        // Length-prefixed fields so that no two input lists hash alike.
        h.update((label.len() as u64).to_le_bytes());
        h.update(label.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field("cache", b"ipu-kernels cache v1");
    field("variant", variant.key().as_bytes());
    // The format the variant's programs are written in: the base format for
    // Amp(Left) variants, as before the left order existed, so their keys
    // do not change.
    field(
        "program-format",
        &variant.program_format_version().to_le_bytes(),
    );
    field("toolchain", toolchain.identity().as_bytes());
    field("target", toolchain.target().as_bytes());
    field("source-name", toolchain.source_name().as_bytes());
    field("source", &toolchain.source_bytes());
    hex(&h.finalize())
}

impl KernelCache {
    /// A cache rooted at `root` (created if missing).
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, KernelError> {
        let root = root.into();
        std::fs::create_dir_all(&root).map_err(|source| KernelError::Io {
            action: "creating",
            path: root.clone(),
            source,
        })?;
        Ok(Self { root })
    }

    /// The cache at `$IPU_KERNEL_CACHE`, else
    /// `$XDG_CACHE_HOME/ipu-backend/kernels`, else
    /// `~/.cache/ipu-backend/kernels`.
    pub fn from_env() -> Result<Self, KernelError> {
        let var = |name: &str| std::env::var_os(name);
        let root =
            Self::root_from_vars(var("IPU_KERNEL_CACHE"), var("XDG_CACHE_HOME"), var("HOME"))
                .ok_or(KernelError::NoCacheDirectory)?;
        Self::open(root)
    }

    /// The root [`KernelCache::from_env`] chooses for these values of
    /// `IPU_KERNEL_CACHE`, `XDG_CACHE_HOME` and `HOME` (empty values count as
    /// unset).
    pub fn root_from_vars(
        ipu_kernel_cache: Option<std::ffi::OsString>,
        xdg_cache_home: Option<std::ffi::OsString>,
        home: Option<std::ffi::OsString>,
    ) -> Option<PathBuf> {
        let set = |v: Option<std::ffi::OsString>| v.filter(|v| !v.is_empty());
        if let Some(root) = set(ipu_kernel_cache) {
            Some(PathBuf::from(root))
        } else if let Some(xdg) = set(xdg_cache_home) {
            Some(PathBuf::from(xdg).join("ipu-backend").join("kernels"))
        } else {
            set(home).map(|h| {
                PathBuf::from(h)
                    .join(".cache")
                    .join("ipu-backend")
                    .join("kernels")
            })
        }
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of the entry for `key`.
    pub fn entry_dir(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    /// Returns the cached kernel for `variant` compiled by `toolchain`,
    /// compiling and storing it on a miss or a corrupt entry.
    pub fn get_or_compile(
        &self,
        variant: &Variant,
        toolchain: &dyn Toolchain,
    ) -> Result<CachedKernel, KernelError> {
        let key = cache_key(variant, toolchain);
        let dir = self.entry_dir(&key);
        let object_path = dir.join(OBJECT_FILE);
        let metadata_path = dir.join(METADATA_FILE);
        let outcome = match read_entry(&object_path, &metadata_path, &key) {
            Ok(Some((metadata, object))) => {
                tracing::debug!(name = ?variant.name(), key = %key, "kernel cache hit");
                return Ok(CachedKernel {
                    object_path,
                    metadata_path,
                    metadata,
                    object,
                    outcome: CacheOutcome::Hit,
                });
            }
            Ok(None) => CacheOutcome::Miss,
            Err(reason) => {
                tracing::warn!(
                    entry = %dir.display(),
                    reason = %reason,
                    "corrupt kernel cache entry, rebuilding"
                );
                CacheOutcome::Rebuilt
            }
        };

        let (metadata, object) = compile_entry(variant, toolchain, &key)?;
        let json = serde_json::to_vec_pretty(&metadata).map_err(|e| KernelError::Metadata {
            reason: e.to_string(),
        })?;

        std::fs::create_dir_all(&dir).map_err(|source| KernelError::Io {
            action: "creating",
            path: dir.clone(),
            source,
        })?;
        write_atomic(&dir, &object_path, &object)?;
        write_atomic(&dir, &metadata_path, &json)?;
        tracing::info!(
            object = %object_path.display(),
            metadata = %metadata_path.display(),
            "kernel artifact created"
        );
        Ok(CachedKernel {
            object_path,
            metadata_path,
            metadata,
            object,
            outcome,
        })
    }
}

/// Compiles `variant` for the entry `key`: the metadata gets the key and
/// the object's digest and size, and nothing is returned before the object
/// parses back into its programs. Every kernel store compiles through
/// here, so entries mean the same whatever holds them.
pub(crate) fn compile_entry(
    variant: &Variant,
    toolchain: &dyn Toolchain,
    key: &str,
) -> Result<(KernelMetadata, Vec<u8>), KernelError> {
    tracing::info!(
        source = %toolchain.source_name(),
        name = ?variant.name(),
        target = %toolchain.target(),
        "compiling kernel"
    );
    let compiled = toolchain.compile(variant)?;
    let mut metadata = compiled.metadata;
    metadata.input_hash = key.to_owned();
    metadata.object_sha256 = hex(&Sha256::digest(&compiled.object));
    metadata.object_bytes = compiled.object.len() as u64;
    programs_from_object(&compiled.object)?;
    Ok((metadata, compiled.object))
}

/// Reads and verifies an entry: `Ok(None)` if it does not exist, `Err` with
/// a reason if it exists but is corrupt.
fn read_entry(
    object_path: &Path,
    metadata_path: &Path,
    key: &str,
) -> Result<Option<(KernelMetadata, Vec<u8>)>, String> {
    let json = match std::fs::read(metadata_path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // The object alone (a writer stopped between the two renames)
            // is an incomplete entry: rebuild it without calling it corrupt.
            return Ok(None);
        }
        Err(e) => return Err(format!("cannot read {}: {e}", metadata_path.display())),
    };
    let metadata: KernelMetadata = serde_json::from_slice(&json)
        .map_err(|e| format!("{} does not parse: {e}", metadata_path.display()))?;
    if metadata.input_hash != key {
        return Err(format!(
            "{} is for inputs {}, not {key}",
            metadata_path.display(),
            metadata.input_hash
        ));
    }
    let object = std::fs::read(object_path)
        .map_err(|e| format!("cannot read {}: {e}", object_path.display()))?;
    if object.len() as u64 != metadata.object_bytes {
        return Err(format!(
            "{} has {} bytes, the metadata says {}",
            object_path.display(),
            object.len(),
            metadata.object_bytes
        ));
    }
    if hex(&Sha256::digest(&object)) != metadata.object_sha256 {
        return Err(format!(
            "{} does not match the sha256 in its metadata",
            object_path.display()
        ));
    }
    programs_from_object(&object)
        .map_err(|e| format!("{} does not parse: {e}", object_path.display()))?;
    Ok(Some((metadata, object)))
}

/// Writes `bytes` to `path` through a temporary file in `dir` and a rename.
fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), KernelError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| KernelError::Io {
            action,
            path,
            source,
        }
    };
    let mut temp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempfile_in(dir)
        .map_err(io("creating a temporary file in", dir))?;
    // No fsync: the rename makes the write atomic for concurrent readers,
    // and an entry a crash leaves empty or short fails verification and is
    // rebuilt, so syncing would only slow every miss down.
    temp.write_all(bytes)
        .map_err(io("writing a temporary file in", dir))?;
    temp.persist(path).map_err(|e| KernelError::Io {
        action: "renaming into",
        path: path.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}
