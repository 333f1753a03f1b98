//! Kernel stores and fetching a kernel through one.
//!
//! A [`KernelStore`] keeps bytes by key and nothing else: it neither
//! compiles nor interprets what it holds (the shape of cranelift's
//! `CacheKvStore`), so an embedding toolchain can keep kernels wherever it
//! keeps artifacts. [`fetch_kernel`] is the caller's side: it derives the
//! key from every compile input ([`cache_key`]), takes the store's value
//! for it, compiles a miss with the [`Toolchain`] and stores the result;
//! and it checks every kernel it returns ([`check_kernel`]), from the store
//! or just compiled, so a store that returns wrong bytes or a toolchain
//! that compiles a wrong kernel is refused with its own error
//! ([`KernelError::StoredRejected`], [`KernelError::CompiledRejected`]).
//!
//! The stores here are the disk cache ([`KernelCache`](crate::KernelCache))
//! and [`MemoryStore`].

use std::collections::HashMap;
use std::sync::Mutex;

use ipu_target::Target;
use sha2::{Digest, Sha256};

use crate::variant::hex;
use crate::{CompiledKernel, KernelCheckError, KernelError, Toolchain, Variant, check_kernel};

/// The key of a compiled kernel: the SHA-256, in lower-case hex, of every
/// input of its compilation ([`cache_key`]). Being hex, it is safe as a
/// file name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelKey(String);

impl KernelKey {
    /// The key as 64 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for KernelKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The key of compiling `variant` for `target` with `toolchain`: the
/// SHA-256 of every compile input — the variant's description (shape,
/// blocks, rows, cost model), the format of its programs, the toolchain's
/// identity, the target's name, and the source's name and bytes.
pub fn cache_key(variant: &Variant, target: &Target, toolchain: &dyn Toolchain) -> KernelKey {
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
    field("target", target.name().as_bytes());
    field("source-name", toolchain.source_name().as_bytes());
    field("source", &toolchain.source_bytes());
    KernelKey(hex(&h.finalize()))
}

/// A store of compiled kernels: bytes by key.
///
/// The values are [`CompiledKernel::to_bytes`]; a store keeps them as
/// given and hands them back unchanged. Whatever it returns is checked by
/// the caller, so a store need not verify what it holds, only not return
/// bytes that a torn write or other damage left (a miss is always safe).
pub trait KernelStore: Send + Sync {
    /// A short name for logs and errors (`disk` or `memory` for this
    /// crate's).
    fn name(&self) -> &str;

    /// The value stored under `key`, or `None` when there is none. A store
    /// that fails for a reason of its own returns [`KernelError::Store`].
    fn get(&self, key: &KernelKey) -> Result<Option<Vec<u8>>, KernelError>;

    /// Stores `value` under `key`, replacing what was there. Concurrent
    /// puts of one key carry the same bytes (compilation is
    /// deterministic), so either may win.
    fn put(&self, key: &KernelKey, value: &[u8]) -> Result<(), KernelError>;
}

/// A store in memory, for embedders that keep no files and for tests.
/// Entries last as long as the store.
#[derive(Debug, Default)]
pub struct MemoryStore {
    entries: Mutex<HashMap<KernelKey, Vec<u8>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<KernelKey, Vec<u8>>> {
        // A panic elsewhere while the lock was held leaves whole entries
        // (each insert is one call), so the map is still good to use.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl KernelStore for MemoryStore {
    fn name(&self) -> &str {
        "memory"
    }

    fn get(&self, key: &KernelKey) -> Result<Option<Vec<u8>>, KernelError> {
        Ok(self.lock().get(key).cloned())
    }

    fn put(&self, key: &KernelKey, value: &[u8]) -> Result<(), KernelError> {
        self.lock().insert(key.clone(), value.to_vec());
        Ok(())
    }
}

/// Whether a fetch found the kernel in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheOutcome {
    /// The store held it.
    Hit,
    /// The store did not hold it (or held a damaged value it did not
    /// return); it was compiled and stored.
    Miss,
}

/// A checked kernel, from a store or just compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchedKernel {
    /// The key it is stored under.
    pub key: KernelKey,
    /// The kernel; its metadata's `input_hash` is the key.
    pub kernel: CompiledKernel,
    /// Whether the store held it.
    pub outcome: CacheOutcome,
}

/// The kernel of `variant` for `target` compiled by `toolchain`: the
/// store's value for its key ([`cache_key`]) when there is one, else
/// compiled and stored. Either way it is checked ([`check_kernel`]) before
/// it is returned (or stored), so a wrong value in the store is
/// [`KernelError::StoredRejected`] and a wrong compilation
/// [`KernelError::CompiledRejected`], each with every error found.
///
/// A miss logs `compiling kernel source=... name=... target=...`, as the
/// seed system did.
pub fn fetch_kernel(
    variant: &Variant,
    target: &Target,
    toolchain: &dyn Toolchain,
    store: &dyn KernelStore,
) -> Result<FetchedKernel, KernelError> {
    let key = cache_key(variant, target, toolchain);
    if let Some(value) = store.get(&key)? {
        let stored_rejected = |errors| KernelError::StoredRejected {
            store: store.name().to_owned(),
            key: key.clone(),
            errors,
        };
        let kernel = CompiledKernel::from_bytes(&value)
            .map_err(|e| stored_rejected(vec![KernelCheckError::Undecodable(e)]))?;
        check_kernel(variant, target, &key, &kernel).map_err(stored_rejected)?;
        return Ok(FetchedKernel {
            key,
            kernel,
            outcome: CacheOutcome::Hit,
        });
    }
    tracing::info!(
        source = %toolchain.source_name(),
        name = ?variant.name(),
        target = %target.name(),
        "compiling kernel"
    );
    let mut kernel = toolchain.compile(variant, target)?;
    // The key is the caller's: it names the inputs, which the toolchain
    // does not see whole.
    kernel.metadata.input_hash = key.to_string();
    check_kernel(variant, target, &key, &kernel).map_err(|errors| {
        KernelError::CompiledRejected {
            toolchain: toolchain.identity(),
            errors,
        }
    })?;
    store.put(&key, &kernel.to_bytes()?)?;
    Ok(FetchedKernel {
        key,
        kernel,
        outcome: CacheOutcome::Miss,
    })
}
