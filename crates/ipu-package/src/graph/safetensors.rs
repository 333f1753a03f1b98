//! Weights in safetensors files: the real loading path beside the seeded
//! generator, and the one place that turns stored safetensors elements
//! into values ([`StoredType`]), which the checkpoint importer of `ipu-frontend` shares.
//!
//! Files are parsed and written by the `safetensors` crate, which checks
//! the header (at most 100 MB of JSON), that the data offsets tile the data
//! section exactly and that every tensor's byte span matches its shape and
//! dtype. Dtypes read: `F32`, `F16`, `BF16`, and the IPU21 FP8 formats as
//! `F8_E4M3FNUZ` (F143) and `F8_E5M2FNUZ` (F152), whose per-tensor
//! power-of-two scale is stored in `__metadata__` under `scale.<name>` (a
//! decimal string). Writing uses the graph tensor's own precision (never
//! `BF16`).
//!
//! Reading decodes every element to f32 and rounds it to the graph
//! tensor's precision, so a file written in a wider type loads into FP8
//! weights the same way generated values do. A damaged file is an error,
//! never a panic.

use std::collections::HashMap;

use ipu_layout::{Fp8Format, Precision};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensorError, SafeTensors};

use crate::graph::values::{ValueSet, encode};
use crate::graph::{Graph, TensorId, TensorKind};

/// The header key of a tensor's FP8 scale.
pub fn scale_key(name: &str) -> String {
    format!("scale.{name}")
}

/// An element type values can be stored in, with what decoding needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredType {
    /// IEEE single precision.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16: the top half of an f32.
    Bf16,
    /// An IPU21 FP8 format with its power-of-two scale.
    Fp8(Precision),
}

impl StoredType {
    /// The stored type of a safetensors dtype; FP8 dtypes need the
    /// tensor's scale. `None` for dtypes this crate does not read (and for
    /// FP8 without a scale).
    pub fn from_dtype(dtype: Dtype, fp8_scale: Option<i8>) -> Option<Self> {
        match dtype {
            Dtype::F32 => Some(StoredType::F32),
            Dtype::F16 => Some(StoredType::F16),
            Dtype::BF16 => Some(StoredType::Bf16),
            Dtype::F8_E4M3FNUZ => fp8_scale.map(|scale| {
                StoredType::Fp8(Precision::F8 {
                    format: Fp8Format::F143,
                    scale,
                })
            }),
            Dtype::F8_E5M2FNUZ => fp8_scale.map(|scale| {
                StoredType::Fp8(Precision::F8 {
                    format: Fp8Format::F152,
                    scale,
                })
            }),
            _ => None,
        }
    }

    /// Bytes per element.
    pub fn element_bytes(self) -> usize {
        match self {
            StoredType::F32 => 4,
            StoredType::F16 | StoredType::Bf16 => 2,
            StoredType::Fp8(_) => 1,
        }
    }

    /// Decodes little-endian elements; a trailing partial element is
    /// ignored (callers check the byte length against the shape first).
    pub fn decode(self, bytes: &[u8]) -> Vec<f32> {
        let width = self.element_bytes();
        let chunks = bytes.chunks_exact(width);
        match self {
            StoredType::F32 => chunks.map(|c| Precision::F32.decode_from(c)).collect(),
            StoredType::F16 => chunks.map(|c| Precision::F16.decode_from(c)).collect(),
            StoredType::Bf16 => chunks
                .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
                .collect(),
            StoredType::Fp8(precision) => chunks.map(|c| precision.decode_from(c)).collect(),
        }
    }
}

/// Why a file could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SafetensorsError {
    /// The bytes are not a well-formed safetensors file (truncated, a bad
    /// header, offsets that do not tile the data).
    #[error("the file is not a valid safetensors file: {source}")]
    Format {
        /// The parser's finding.
        #[source]
        source: SafeTensorError,
    },
    /// A tensor entry cannot be used (its dtype, or its FP8 scale).
    #[error("tensor `{name}` cannot be read: {message}")]
    Entry {
        /// The entry's name.
        name: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// A tensor's stored shape differs from the graph's.
    #[error("`{name}` ({tensor}) is stored with shape {stored:?} but the graph needs {expected:?}")]
    Shape {
        /// The name.
        name: String,
        /// The graph tensor.
        tensor: TensorId,
        /// The stored shape.
        stored: Vec<u64>,
        /// The graph's shape.
        expected: Vec<u64>,
    },
    /// A graph weight is absent from the file.
    #[error("weight `{name}` ({tensor}) is not in the file")]
    Missing {
        /// The name.
        name: String,
        /// The graph tensor.
        tensor: TensorId,
    },
    /// Values to write are absent or have the wrong length.
    #[error("{tensor} `{name}` needs {expected} values to be written, found {found}")]
    Values {
        /// The graph tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Its element count.
        expected: u64,
        /// Values supplied (0 when absent).
        found: u64,
    },
    /// The tensors could not be serialised (for example a header over
    /// the format's 100 MB limit).
    #[error("the tensors could not be written as safetensors: {source}")]
    Write {
        /// The serialiser's finding.
        #[source]
        source: SafeTensorError,
    },
}

/// Writes `tensors` of `graph` with their values, each in its own
/// precision; FP8 scales go to `__metadata__`.
pub fn write_values(
    graph: &Graph,
    values: &ValueSet,
    tensors: &[TensorId],
) -> Result<Vec<u8>, SafetensorsError> {
    let mut metadata = HashMap::new();
    metadata.insert("format".to_owned(), "ipu-backend".to_owned());
    let mut encoded = Vec::with_capacity(tensors.len());
    for &id in tensors {
        let Some(tensor) = graph.tensors().get(id) else {
            return Err(SafetensorsError::Values {
                tensor: id,
                name: String::new(),
                expected: 0,
                found: 0,
            });
        };
        let v = values.get(id).unwrap_or(&[]);
        if v.len() as u64 != tensor.element_count() {
            return Err(SafetensorsError::Values {
                tensor: id,
                name: tensor.name().to_owned(),
                expected: tensor.element_count(),
                found: v.len() as u64,
            });
        }
        let precision = tensor.precision();
        let dtype = match precision {
            Precision::F32 => Dtype::F32,
            Precision::F16 => Dtype::F16,
            Precision::F8 { format, scale } => {
                metadata.insert(scale_key(tensor.name()), scale.to_string());
                match format {
                    Fp8Format::F143 => Dtype::F8_E4M3FNUZ,
                    Fp8Format::F152 => Dtype::F8_E5M2FNUZ,
                }
            }
        };
        let shape: Vec<usize> = tensor.extents().iter().map(|&e| e as usize).collect();
        encoded.push((tensor.name(), dtype, shape, encode(precision, v)));
    }
    let views = encoded
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes)
                .map(|view| (*name, view))
                .map_err(|source| SafetensorsError::Write { source })
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::serialize(views, Some(metadata))
        .map(canonical_header)
        .map_err(|source| SafetensorsError::Write { source })
}

/// The file with its JSON header's keys in sorted order. The
/// `safetensors` crate writes `__metadata__` from a `HashMap`, whose order
/// changes from run to run; files this crate writes (a package's weights
/// among them) must be byte-identical for the same values. The header is
/// re-serialised with the same content, so its length and the data
/// offsets are unchanged; a header that does not parse back is left as
/// it was (the crate wrote it, so that does not happen).
fn canonical_header(mut bytes: Vec<u8>) -> Vec<u8> {
    let Some(len) = bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .and_then(|n| usize::try_from(n).ok())
    else {
        return bytes;
    };
    let Some(header) = bytes.get(8..8usize.saturating_add(len)) else {
        return bytes;
    };
    let parsed: Result<std::collections::BTreeMap<String, serde_json::Value>, _> =
        serde_json::from_slice(header.trim_ascii_end());
    let Ok(mut parsed) = parsed else {
        return bytes;
    };
    if let Some(meta) = parsed.get_mut("__metadata__") {
        let sorted: Option<std::collections::BTreeMap<String, String>> =
            serde_json::from_value(meta.clone()).ok();
        if let Some(sorted) = sorted.and_then(|m| serde_json::to_value(m).ok()) {
            *meta = sorted;
        }
    }
    match serde_json::to_vec(&parsed) {
        Ok(text) if text.len() <= len => {
            bytes[8..8 + text.len()].copy_from_slice(&text);
            for b in &mut bytes[8 + text.len()..8 + len] {
                *b = b' ';
            }
            bytes
        }
        _ => bytes,
    }
}

/// Writes named F32 tensors (such as a run's outputs, whatever their
/// graph precision): `(name, shape, values)`, each `values` holding the
/// shape's element count.
pub fn write_f32(tensors: &[(&str, &[u64], &[f32])]) -> Result<Vec<u8>, SafetensorsError> {
    let mut metadata = HashMap::new();
    metadata.insert("format".to_owned(), "ipu-backend".to_owned());
    let encoded: Vec<(&str, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, shape, values)| {
            let shape = shape.iter().map(|&e| e as usize).collect();
            (*name, shape, encode(Precision::F32, values))
        })
        .collect();
    let views = encoded
        .iter()
        .map(|(name, shape, bytes)| {
            TensorView::new(Dtype::F32, shape.clone(), bytes)
                .map(|view| (*name, view))
                .map_err(|source| SafetensorsError::Write { source })
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::serialize(views, Some(metadata))
        .map(canonical_header)
        .map_err(|source| SafetensorsError::Write { source })
}

/// Reads the values of every graph tensor the file names (other entries
/// are ignored), rounded to the graph tensor's precision.
pub fn read_values(graph: &Graph, bytes: &[u8]) -> Result<ValueSet, SafetensorsError> {
    let (header_len, metadata) =
        SafeTensors::read_metadata(bytes).map_err(|source| SafetensorsError::Format { source })?;
    // `read_metadata` checked that the offsets tile the data section,
    // which runs to the end of `bytes`.
    let data = bytes.get(8 + header_len..).unwrap_or(&[]);
    let no_scales = HashMap::new();
    let scales = metadata.metadata().as_ref().unwrap_or(&no_scales);
    let mut set = ValueSet::new();
    // Offset order, so that the first error reported does not depend on
    // hash order.
    for name in metadata.offset_keys() {
        let Some(id) = graph.tensor_by_name(&name) else {
            continue;
        };
        let Some(info) = metadata.info(&name) else {
            continue;
        };
        let tensor = graph.tensor(id);
        let stored: Vec<u64> = info.shape.iter().map(|&e| e as u64).collect();
        if stored != tensor.extents() {
            return Err(SafetensorsError::Shape {
                name,
                tensor: id,
                stored,
                expected: tensor.extents().to_vec(),
            });
        }
        let (begin, end) = info.data_offsets;
        let Some(raw) = data.get(begin..end) else {
            return Err(SafetensorsError::Entry {
                name,
                message: format!("its data offsets [{begin}, {end}] lie outside the file"),
            });
        };
        let scale = match info.dtype {
            Dtype::F8_E4M3FNUZ | Dtype::F8_E5M2FNUZ => {
                let key = scale_key(&name);
                let scale = scales
                    .get(&key)
                    .and_then(|s| s.parse::<i8>().ok())
                    .ok_or_else(|| SafetensorsError::Entry {
                        name: name.clone(),
                        message: format!(
                            "FP8 data needs `__metadata__.{key}` holding its scale \
                             (an integer in -128..=127) as a string"
                        ),
                    })?;
                Some(scale)
            }
            _ => None,
        };
        let Some(stored_type) = StoredType::from_dtype(info.dtype, scale) else {
            return Err(SafetensorsError::Entry {
                name,
                message: format!(
                    "dtype {} is not supported; use F32, F16, BF16, F8_E4M3FNUZ or F8_E5M2FNUZ",
                    info.dtype
                ),
            });
        };
        let codec = tensor.precision().codec();
        let mut values = stored_type.decode(raw);
        for v in &mut values {
            *v = codec.quantize(*v);
        }
        set.insert(id, values);
    }
    Ok(set)
}

/// Reads every weight of `graph` from the file (see [`read_values`]);
/// an absent weight is an error.
pub fn read_weights(graph: &Graph, bytes: &[u8]) -> Result<ValueSet, SafetensorsError> {
    let mut set = read_values(graph, bytes)?;
    for (id, tensor) in graph.tensors().iter() {
        match tensor.kind() {
            TensorKind::Weight if !set.contains(id) => {
                return Err(SafetensorsError::Missing {
                    name: tensor.name().to_owned(),
                    tensor: id,
                });
            }
            TensorKind::Weight => {}
            _ => {
                set.remove(id);
            }
        }
    }
    Ok(set)
}
