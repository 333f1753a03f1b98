//! The disk kernel store: a content-addressed directory of compiled
//! kernels.
//!
//! The value of key `K` ([`cache_key`](crate::cache_key)) lives in
//! `<root>/K.kernel`. The root is `$IPU_KERNEL_CACHE`, else
//! `$XDG_CACHE_HOME/ipu-backend/kernels`, else
//! `~/.cache/ipu-backend/kernels`.
//!
//! A file holds the value in a frame of the store's own, little endian:
//!
//! ```text
//! magic "IPUKSTOR", key (64 hex digits), value length u64,
//! value sha256 (32 bytes), value
//! ```
//!
//! **Invariant:** a reader never sees a torn file. A file is written to a
//! temporary file in the root and renamed into place (atomic on one file
//! system). Builds are deterministic, so concurrent writers of one key
//! write identical bytes and either rename may win. Files are not synced to
//! disk: a file a crash leaves empty or short fails its frame's check. A
//! file whose frame does not check (another key's file copied in, a
//! truncated or altered file), or a directory or link where the file
//! belongs, is logged (`corrupt kernel cache entry, rebuilding`) and
//! treated as a miss, so the caller compiles the kernel and puts it again.
//! The frame keeps storage damage out; whether the value is the right
//! kernel is the caller's check ([`check_kernel`](crate::check_kernel)).
//! A put logs `kernel artifact created` as the seed system did.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{KernelError, KernelKey, KernelStore};

/// The frame's magic.
const FRAME_MAGIC: &[u8; 8] = b"IPUKSTOR";

/// Bytes of the frame before the value: magic, key, length, digest.
const FRAME_BYTES: usize = 8 + 64 + 8 + 32;

/// The largest value read: a kernel is kilobytes to a few megabytes, and a
/// damaged file must not make a lookup read a huge one.
const MAX_VALUE_BYTES: u64 = 1 << 28;

/// A content-addressed store of compiled kernels on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelCache {
    root: PathBuf,
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

    /// The file that holds the value of `key`.
    pub fn entry_path(&self, key: &KernelKey) -> PathBuf {
        self.root.join(format!("{key}.kernel"))
    }
}

impl KernelStore for KernelCache {
    fn name(&self) -> &str {
        "disk"
    }

    fn get(&self, key: &KernelKey) -> Result<Option<Vec<u8>>, KernelError> {
        let path = self.entry_path(key);
        let framed = match read_regular(&path, MAX_VALUE_BYTES + FRAME_BYTES as u64) {
            Ok(None) => return Ok(None),
            Ok(Some(bytes)) => bytes,
            Err(reason) => return Ok(corrupt(&path, &reason)),
        };
        match unframe(key, &framed) {
            Ok(value) => {
                tracing::debug!(key = %key, "kernel cache hit");
                Ok(Some(value.to_vec()))
            }
            Err(reason) => Ok(corrupt(&path, &reason)),
        }
    }

    fn put(&self, key: &KernelKey, value: &[u8]) -> Result<(), KernelError> {
        let path = self.entry_path(key);
        clear_wrong_kind(&path)?;
        write_atomic(&self.root, &path, &frame(key, value))?;
        tracing::info!(entry = %path.display(), "kernel artifact created");
        Ok(())
    }
}

/// Logs a damaged file, which the store then reports as missing.
fn corrupt(path: &Path, reason: &str) -> Option<Vec<u8>> {
    tracing::warn!(
        entry = %path.display(),
        reason = %reason,
        "corrupt kernel cache entry, rebuilding"
    );
    None
}

/// `value` in the store's frame for `key`.
fn frame(key: &KernelKey, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_BYTES + value.len());
    out.extend_from_slice(FRAME_MAGIC);
    out.extend_from_slice(key.as_str().as_bytes());
    out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(value));
    out.extend_from_slice(value);
    out
}

/// The value in `framed` if its frame is one for `key` and the value is
/// whole, else why not.
fn unframe<'a>(key: &KernelKey, framed: &'a [u8]) -> Result<&'a [u8], String> {
    if framed.len() < FRAME_BYTES {
        return Err(format!("{} bytes, shorter than its frame", framed.len()));
    }
    let (head, value) = framed.split_at(FRAME_BYTES);
    if &head[..8] != FRAME_MAGIC {
        return Err("it does not start with the store's magic".to_owned());
    }
    if &head[8..72] != key.as_str().as_bytes() {
        return Err(format!(
            "it holds the value of key {}",
            String::from_utf8_lossy(&head[8..72])
        ));
    }
    let mut length = [0u8; 8];
    length.copy_from_slice(&head[72..80]);
    let length = u64::from_le_bytes(length);
    if length != value.len() as u64 {
        return Err(format!(
            "its frame says {length} bytes of value, the file has {}",
            value.len()
        ));
    }
    if Sha256::digest(value).as_slice() != &head[80..] {
        return Err("its value does not match the sha256 in its frame".to_owned());
    }
    Ok(value)
}

/// Removes what stands where the file `path` belongs but is not a regular
/// file: a directory or a link. Renaming a new file over a directory
/// fails, so such damage would otherwise fail every later build. A node
/// already gone (another builder repaired it) is not an error.
fn clear_wrong_kind(path: &Path) -> Result<(), KernelError> {
    let result = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(path),
        _ => return Ok(()),
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
