//! The tensors of a checkpoint directory: one `model.safetensors`, or the
//! shards a `model.safetensors.index.json` lists; elements are decoded by
//! the package's one decoder of stored elements (`StoredType`).
//!
//! Only headers are read when the store is opened; a tensor's bytes are
//! read (by seeking to them) when it is asked for, so the text tower of a
//! full `SiglipModel` checkpoint is never loaded. Headers are parsed and
//! validated by the `safetensors` crate (offsets that tile the data
//! section, byte spans that match shape and dtype, a header of at most
//! 100 MB), and each file's length must be exactly what its header
//! describes, as the crate requires of a whole file.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::tensor::Metadata;
use safetensors::{Dtype, SafeTensorError};
use serde::Deserialize;

use crate::error::ImportError;
use ipu_package::graph::safetensors::StoredType;

/// The single-file weights of a checkpoint.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// The largest header accepted (the `safetensors` crate's limit).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One stored tensor: where its bytes are and how to read them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StoredTensor {
    file: usize,
    dtype: Dtype,
    shape: Vec<u64>,
    /// Absolute byte range in the file.
    start: u64,
    end: u64,
}

impl StoredTensor {
    /// The stored shape.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The stored dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
}

/// Every tensor of a checkpoint, by name.
#[derive(Clone, Debug)]
pub(crate) struct TensorStore {
    files: Vec<PathBuf>,
    tensors: BTreeMap<String, StoredTensor>,
}

#[derive(Deserialize)]
struct Index {
    weight_map: BTreeMap<String, String>,
}

impl TensorStore {
    /// Opens the weights of the checkpoint in `dir`: `model.safetensors`
    /// if present, else the shards of `model.safetensors.index.json`.
    pub fn open(dir: &Path) -> Result<Self, ImportError> {
        let single = dir.join(WEIGHTS_FILE);
        if single.is_file() {
            let mut store = Self {
                files: Vec::new(),
                tensors: BTreeMap::new(),
            };
            store.add_file(single)?;
            return Ok(store);
        }
        let index_path = dir.join(INDEX_FILE);
        if !index_path.is_file() {
            return Err(ImportError::NoWeights {
                dir: dir.to_owned(),
            });
        }
        let index: Index = super::read_json(&index_path)?;
        let mut store = Self {
            files: Vec::new(),
            tensors: BTreeMap::new(),
        };
        let mut shard_ids: BTreeMap<&str, usize> = BTreeMap::new();
        for file in index.weight_map.values() {
            // Shards live beside the index; a path could reach anywhere.
            let plain = !file.is_empty()
                && file != "."
                && file != ".."
                && !file.contains(['/', '\\'])
                && Path::new(file).file_name().is_some();
            if !plain {
                return Err(ImportError::ShardName {
                    index: index_path.clone(),
                    file: file.clone(),
                });
            }
            if !shard_ids.contains_key(file.as_str()) {
                let id = store.add_file(dir.join(file))?;
                shard_ids.insert(file, id);
            }
        }
        for (name, file) in &index.weight_map {
            let in_shard = store
                .tensors
                .get(name)
                .is_some_and(|t| Some(&t.file) == shard_ids.get(file.as_str()));
            if !in_shard {
                return Err(ImportError::IndexMismatch {
                    index: index_path.clone(),
                    name: name.clone(),
                    file: file.clone(),
                });
            }
        }
        Ok(store)
    }

    /// Reads one file's header and records its tensors; returns the
    /// file's number.
    fn add_file(&mut self, path: PathBuf) -> Result<usize, ImportError> {
        let io = |source| ImportError::Io {
            path: path.clone(),
            source,
        };
        let format = |source| ImportError::Safetensors {
            path: path.clone(),
            source,
        };
        let mut file = File::open(&path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut prefix = [0u8; 8];
        if len < 8 {
            return Err(format(SafeTensorError::HeaderTooSmall));
        }
        file.read_exact(&mut prefix).map_err(io)?;
        let header_len = u64::from_le_bytes(prefix);
        if header_len > MAX_HEADER_BYTES {
            return Err(format(SafeTensorError::HeaderTooLarge));
        }
        let data_start = 8 + header_len;
        if data_start > len {
            return Err(format(SafeTensorError::InvalidHeaderLength));
        }
        // Bounded by MAX_HEADER_BYTES and by the file's length.
        let mut header = vec![0u8; header_len as usize];
        file.read_exact(&mut header).map_err(io)?;
        let text =
            std::str::from_utf8(&header).map_err(|e| format(SafeTensorError::InvalidHeader(e)))?;
        let metadata: Metadata = serde_json::from_str(text)
            .map_err(|e| format(SafeTensorError::InvalidHeaderDeserialization(e)))?;
        if data_start.checked_add(metadata.data_len() as u64) != Some(len) {
            return Err(format(SafeTensorError::MetadataIncompleteBuffer));
        }
        let id = self.files.len();
        for name in metadata.offset_keys() {
            let Some(info) = metadata.info(&name) else {
                continue;
            };
            let tensor = StoredTensor {
                file: id,
                dtype: info.dtype,
                shape: info.shape.iter().map(|&e| e as u64).collect(),
                start: data_start + info.data_offsets.0 as u64,
                end: data_start + info.data_offsets.1 as u64,
            };
            if let Some(first) = self.tensors.get(&name) {
                return Err(ImportError::DuplicateTensor {
                    name,
                    first: self.files[first.file].clone(),
                    second: path,
                });
            }
            self.tensors.insert(name, tensor);
        }
        self.files.push(path);
        Ok(id)
    }

    /// Every stored tensor, by name.
    pub fn tensors(&self) -> &BTreeMap<String, StoredTensor> {
        &self.tensors
    }

    /// The file that holds `tensor`.
    pub fn file_of(&self, tensor: &StoredTensor) -> &Path {
        &self.files[tensor.file]
    }

    /// The values of the tensor called `name`, decoded to f32.
    pub fn read(&self, name: &str) -> Result<Vec<f32>, ImportError> {
        let Some(tensor) = self.tensors.get(name) else {
            return Err(ImportError::Internal {
                what: format!("tensor `{name}` was read without being found first"),
            });
        };
        let Some(stored) = StoredType::from_dtype(tensor.dtype, None) else {
            return Err(ImportError::Dtype {
                name: name.to_owned(),
                dtype: tensor.dtype.to_string(),
            });
        };
        let path = self.file_of(tensor);
        let io = |source| ImportError::Io {
            path: path.to_owned(),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        file.seek(SeekFrom::Start(tensor.start)).map_err(io)?;
        // The header check tied `end` to the file's length, so this
        // allocation is bounded by the file.
        let mut bytes = vec![0u8; (tensor.end - tensor.start) as usize];
        file.read_exact(&mut bytes).map_err(io)?;
        Ok(stored.decode(&bytes))
    }
}
