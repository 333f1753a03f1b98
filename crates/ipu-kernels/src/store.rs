//! Kernel stores: where compiled kernels are kept between builds, behind a
//! trait so that an embedding toolchain chooses (a disk cache, memory, its
//! own artifact store).
//!
//! Every store keys entries by [`cache_key`] and compiles a miss through
//! the same checked path, so a kernel is the same bytes whichever store
//! held it.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::cache::compile_entry;
use crate::{
    CacheOutcome, KernelCache, KernelError, KernelMetadata, Toolchain, Variant, cache_key,
};

/// A compiled kernel as a store hands it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredKernel {
    /// Its metadata (`kernel.json`), with the key it is stored under.
    pub metadata: KernelMetadata,
    /// The ELF object.
    pub object: Vec<u8>,
    /// Whether it was found or compiled.
    pub outcome: CacheOutcome,
}

/// A store of compiled kernels.
pub trait KernelStore: Send + Sync {
    /// A short name for logs (`disk` or `memory`).
    fn name(&self) -> &str;

    /// The kernel of `variant` compiled by `toolchain`: from the store when
    /// it holds a valid entry for [`cache_key`]`(variant, toolchain)`,
    /// compiled and stored otherwise.
    fn get_or_compile(
        &self,
        variant: &Variant,
        toolchain: &dyn Toolchain,
    ) -> Result<StoredKernel, KernelError>;
}

impl KernelStore for KernelCache {
    fn name(&self) -> &str {
        "disk"
    }

    fn get_or_compile(
        &self,
        variant: &Variant,
        toolchain: &dyn Toolchain,
    ) -> Result<StoredKernel, KernelError> {
        let k = KernelCache::get_or_compile(self, variant, toolchain)?;
        Ok(StoredKernel {
            metadata: k.metadata,
            object: k.object,
            outcome: k.outcome,
        })
    }
}

/// A store in memory, for embedders that keep no files and for tests.
/// Entries last as long as the store.
#[derive(Debug, Default)]
pub struct MemoryStore {
    entries: Mutex<HashMap<String, (KernelMetadata, Vec<u8>)>>,
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (KernelMetadata, Vec<u8>)>> {
        // A panic elsewhere while the lock was held leaves whole entries
        // (each insert is one call), so the map is still good to use.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl KernelStore for MemoryStore {
    fn name(&self) -> &str {
        "memory"
    }

    fn get_or_compile(
        &self,
        variant: &Variant,
        toolchain: &dyn Toolchain,
    ) -> Result<StoredKernel, KernelError> {
        let key = cache_key(variant, toolchain);
        if let Some((metadata, object)) = self.lock().get(&key) {
            return Ok(StoredKernel {
                metadata: metadata.clone(),
                object: object.clone(),
                outcome: CacheOutcome::Hit,
            });
        }
        // Compiled outside the lock: other variants compile in parallel.
        let (metadata, object) = compile_entry(variant, toolchain, &key)?;
        self.lock().insert(key, (metadata.clone(), object.clone()));
        Ok(StoredKernel {
            metadata,
            object,
            outcome: CacheOutcome::Miss,
        })
    }
}
