//! A compiled kernel as one stored value: what a [`KernelStore`] keeps
//! under a key, bytes it need not understand.
//!
//! The value is little endian:
//!
//! ```text
//! magic "IPUKERN\0", version u16 (1), metadata length u32,
//! metadata (kernel.json, compact JSON), object bytes (the rest)
//! ```
//!
//! Decoding checks only the framing; whether the metadata and the object
//! are the variant's is [`check_kernel`](crate::check_kernel)'s business.
//!
//! [`KernelStore`]: crate::KernelStore

use crate::{CompiledKernel, KernelError};

const ENTRY_MAGIC: &[u8; 8] = b"IPUKERN\0";
const ENTRY_VERSION: u16 = 1;

/// The largest metadata an entry may hold: `kernel.json` is a few
/// kilobytes, and a damaged entry must not make a reader allocate much.
const MAX_METADATA_BYTES: usize = 1 << 20;

impl CompiledKernel {
    /// The kernel as one value for a [`KernelStore`](crate::KernelStore).
    pub fn to_bytes(&self) -> Result<Vec<u8>, KernelError> {
        let metadata = serde_json::to_vec(&self.metadata)
            .map_err(|source| KernelError::Metadata { source })?;
        let length = u32::try_from(metadata.len()).map_err(|_| KernelError::MetadataTooLarge {
            bytes: metadata.len(),
        })?;
        let mut out = Vec::with_capacity(14 + metadata.len() + self.object.len());
        out.extend_from_slice(ENTRY_MAGIC);
        out.extend_from_slice(&ENTRY_VERSION.to_le_bytes());
        out.extend_from_slice(&length.to_le_bytes());
        out.extend_from_slice(&metadata);
        out.extend_from_slice(&self.object);
        Ok(out)
    }

    /// A kernel from a value [`CompiledKernel::to_bytes`] wrote.
    pub fn from_bytes(bytes: &[u8]) -> Result<CompiledKernel, KernelError> {
        let malformed = |reason: String| KernelError::MalformedEntry { reason };
        let (magic, rest) = bytes
            .split_first_chunk::<8>()
            .ok_or_else(|| malformed(format!("{} bytes, shorter than its header", bytes.len())))?;
        if magic != ENTRY_MAGIC {
            return Err(malformed(
                "it does not start with the entry magic".to_owned(),
            ));
        }
        let (version, rest) = rest
            .split_first_chunk::<2>()
            .ok_or_else(|| malformed("its header is truncated".to_owned()))?;
        let version = u16::from_le_bytes(*version);
        if version != ENTRY_VERSION {
            return Err(malformed(format!(
                "entry version {version}, this build reads {ENTRY_VERSION}"
            )));
        }
        let (length, rest) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| malformed("its header is truncated".to_owned()))?;
        let length = u32::from_le_bytes(*length) as usize;
        if length > MAX_METADATA_BYTES || length > rest.len() {
            return Err(malformed(format!(
                "it claims {length} bytes of metadata, with {} bytes left",
                rest.len()
            )));
        }
        let (metadata, object) = rest.split_at(length);
        let metadata = serde_json::from_slice(metadata)
            .map_err(|source| KernelError::EntryMetadata { source })?;
        Ok(CompiledKernel {
            metadata,
            object: object.to_vec(),
        })
    }
}
