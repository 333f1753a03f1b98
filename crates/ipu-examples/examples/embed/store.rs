//! The example's kernel store: bytes by key in a map shared between
//! handles, and a handle with a bug (every value it returns has one byte
//! flipped).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use ipu_kernels::{KernelError, KernelKey, KernelStore};

/// Kernels in memory, by key.
#[derive(Clone, Default)]
pub struct MapStore {
    entries: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    /// Whether values come back with a byte flipped: a store with a bug
    /// (or a tampered one), for the kernel check to catch.
    pub tamper: bool,
}

impl MapStore {
    /// Another handle on the same entries that flips a byte of every value
    /// it returns.
    pub fn tampering(&self) -> MapStore {
        MapStore {
            entries: self.entries.clone(),
            tamper: true,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl KernelStore for MapStore {
    fn name(&self) -> &str {
        if self.tamper { "map-tampering" } else { "map" }
    }

    fn get(&self, key: &KernelKey) -> Result<Option<Vec<u8>>, KernelError> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let mut value = entries.get(key.as_str()).cloned();
        if self.tamper
            && let Some(byte) = value.as_mut().and_then(|v| {
                let middle = v.len() / 2;
                v.get_mut(middle)
            })
        {
            *byte ^= 0x20;
        }
        Ok(value)
    }

    fn put(&self, key: &KernelKey, value: &[u8]) -> Result<(), KernelError> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.as_str().to_owned(), value.to_vec());
        Ok(())
    }
}
