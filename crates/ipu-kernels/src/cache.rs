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
//! A damaged entry is logged with `tracing::warn!` and rebuilt: metadata
//! that does not parse or is for another key or variant, an object whose
//! size or SHA-256 is not the metadata's, an object that does not parse
//! back, or whose programs are not exactly the variant's entries (symbols,
//! which carry the variant key's prefix, and each program's header: rows,
//! mode, dimensions, blocks, precisions, orders); and a file where the
//! entry's directory belongs or a directory where one of its files
//! belongs, which is removed first. So another entry's object and metadata
//! copied in, even with the digests made to match, is never a hit. A hit
//! is verified on every lookup at the cost of reading and hashing the
//! object and decoding its program headers, far less than compiling.
//! A miss logs `compiling kernel source=...
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

/// The largest `kernel.json` read: metadata is a few kilobytes, and a
/// damaged entry must not make a lookup read a huge file.
const MAX_METADATA_BYTES: u64 = 1 << 20;

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
        let outcome = match read_entry(&object_path, &metadata_path, &key, variant) {
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

        clear_wrong_kinds(&dir, &[&object_path, &metadata_path])?;
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

/// Removes what stands where the entry's directory (`dir`) or its files
/// (`files`) belong but is of the wrong kind: a file (or a link) for the
/// directory, a directory (or a link) for a file. Renaming a new file over
/// a directory fails, and creating a directory where a file is fails, so
/// such damage would otherwise fail every later build. A node already
/// gone (another builder repaired it) is not an error.
fn clear_wrong_kinds(dir: &Path, files: &[&Path]) -> Result<(), KernelError> {
    let remove = |path: &Path, as_dir: bool| -> Result<(), KernelError> {
        let result = if as_dir {
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        };
        match result {
            Ok(()) => {
                tracing::warn!(path = %path.display(), "removed a damaged kernel cache node");
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(KernelError::Io {
                action: "removing",
                path: path.to_path_buf(),
                source,
            }),
        }
    };
    match std::fs::symlink_metadata(dir) {
        Ok(m) if !m.is_dir() => return remove(dir, false),
        _ => {}
    }
    for file in files {
        match std::fs::symlink_metadata(file) {
            Ok(m) if m.is_dir() => remove(file, true)?,
            Ok(m) if m.file_type().is_symlink() => remove(file, false)?,
            _ => {}
        }
    }
    Ok(())
}

/// Reads at most `limit` bytes of the regular file at `path`: `Ok(None)` if
/// it does not exist, `Err` with a reason if it is not a regular file, is
/// larger, or cannot be read.
fn read_regular(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    if meta.len() > limit {
        return Err(format!(
            "{} has {} bytes, more than the {limit} expected",
            path.display(),
            meta.len()
        ));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(Some(bytes))
}

/// Reads and verifies an entry: `Ok(None)` if it does not exist, `Err` with
/// a reason if it exists but is damaged or is not `variant`'s.
fn read_entry(
    object_path: &Path,
    metadata_path: &Path,
    key: &str,
    variant: &Variant,
) -> Result<Option<(KernelMetadata, Vec<u8>)>, String> {
    // The entry's directory may itself be damaged (a file where it
    // belongs); reading through it then fails and the entry is rebuilt.
    let Some(json) = read_regular(metadata_path, MAX_METADATA_BYTES)? else {
        // The object alone (a writer stopped between the two renames) is
        // an incomplete entry: rebuild it without calling it corrupt.
        return Ok(None);
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
    if metadata.name != variant.name() || metadata.variant_key != variant.key() {
        return Err(format!(
            "{} describes variant {} ({}), not {} ({})",
            metadata_path.display(),
            metadata.name,
            metadata.variant_key,
            variant.name(),
            variant.key()
        ));
    }
    let object = read_regular(object_path, metadata.object_bytes)?
        .ok_or_else(|| format!("{} is missing", object_path.display()))?;
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
    let programs = programs_from_object(&object)
        .map_err(|e| format!("{} does not parse: {e}", object_path.display()))?;
    check_programs(variant, &programs)
        .map_err(|why| format!("{}: {why}", object_path.display()))?;
    let entries: Vec<&str> = metadata.entries.iter().map(|e| e.symbol.as_str()).collect();
    let expected: Vec<String> = variant
        .entry_points()
        .into_iter()
        .map(|e| e.symbol)
        .collect();
    if entries != expected {
        return Err(format!(
            "{} lists entries {entries:?}, the variant's are {expected:?}",
            metadata_path.display()
        ));
    }
    Ok(Some((metadata, object)))
}

/// Whether `programs` are exactly `variant`'s entries: one program per
/// entry symbol, none other, each with the header the entry's program has
/// (compared field by field, which is cheap; the builder's own checker
/// ran when the entry was compiled).
fn check_programs(
    variant: &Variant,
    programs: &[(String, crate::AmpProgram)],
) -> Result<(), String> {
    let entries = variant.entry_points();
    if programs.len() != entries.len() {
        return Err(format!(
            "{} programs, the variant has {} entries",
            programs.len(),
            entries.len()
        ));
    }
    let shape = variant.shape();
    for e in &entries {
        let Some((_, p)) = programs.iter().find(|(name, _)| *name == e.symbol) else {
            return Err(format!("no program for entry {}", e.symbol));
        };
        let h = &p.header;
        let same = h.left == shape.left
            && h.right == shape.right
            && h.output == shape.output
            && h.left_order == shape.left_order
            && h.output_order == shape.output_order
            && h.right_class == shape.right_class
            && h.mode == e.mode
            && h.arithmetic == variant.arithmetic()
            && h.rows == e.rows
            && h.inner == shape.inner
            && h.columns == shape.columns
            && h.k == variant.k()
            && h.c == variant.c()
            && h.left_tail_bytes == variant.left_tail_bytes();
        if !same {
            return Err(format!(
                "the program of entry {} is not the variant's ({h:?})",
                e.symbol
            ));
        }
    }
    Ok(())
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
