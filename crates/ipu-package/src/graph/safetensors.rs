//! Weights from a safetensors-style file: the real loading path beside the
//! seeded generator.
//!
//! Layout (the safetensors convention): an 8-byte little-endian header
//! length `N`, `N` bytes of JSON, then the raw little-endian tensor data.
//! The header maps each tensor name to
//! `{"dtype", "shape", "data_offsets": [begin, end]}` with offsets relative
//! to the start of the data, and may hold a `__metadata__` object of
//! strings. Dtypes: `F32`, `F16`, and the IPU21 FP8 formats as
//! `F8_E4M3FNUZ` (F143) and `F8_E5M2FNUZ` (F152), whose per-tensor
//! power-of-two scale is stored in `__metadata__` under `scale.<name>`.
//!
//! Reading decodes every element to f32 and rounds it to the graph
//! tensor's precision, so a file written in a wider type loads into FP8
//! weights the same way generated values do. Every offset is checked: a
//! truncated or inconsistent file is an error, never a panic.

use serde_json::{Map, Value};

use ipu_layout::{Fp8Format, Precision};

use crate::graph::values::{Quantizer, ValueSet, encode};
use crate::graph::{Graph, TensorId, TensorKind};

/// The header key of a tensor's FP8 scale.
fn scale_key(name: &str) -> String {
    format!("scale.{name}")
}

/// The largest header this reader accepts (100 MB, as safetensors does).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Why a file could not be written or read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SafetensorsError {
    /// The file ends before a part it declares.
    #[error("the file is {len} bytes but its {what} needs {needed}; it is truncated")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        len: u64,
    },
    /// The header length is implausible.
    #[error("the header claims {bytes} bytes, more than the {limit} this reader accepts")]
    HeaderTooLarge {
        /// The claimed length.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The header is not the expected JSON.
    #[error("the header is not valid: {message}")]
    Header {
        /// What is wrong.
        message: String,
    },
    /// A tensor entry is malformed.
    #[error("header entry `{name}` is malformed: {message}")]
    Entry {
        /// The entry's name.
        name: String,
        /// What is wrong.
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
}

/// Writes `tensors` of `graph` with their values, each in its own
/// precision.
pub fn write_values(
    graph: &Graph,
    values: &ValueSet,
    tensors: &[TensorId],
) -> Result<Vec<u8>, SafetensorsError> {
    let mut header = Map::new();
    let mut metadata = Map::new();
    metadata.insert("format".to_owned(), Value::from("ipu-backend"));
    let mut data = Vec::new();
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
            Precision::F32 => "F32",
            Precision::F16 => "F16",
            Precision::F8 { format, scale } => {
                metadata.insert(scale_key(tensor.name()), Value::from(scale.to_string()));
                match format {
                    Fp8Format::F143 => "F8_E4M3FNUZ",
                    Fp8Format::F152 => "F8_E5M2FNUZ",
                }
            }
        };
        let begin = data.len();
        data.extend_from_slice(&encode(precision, v));
        let mut entry = Map::new();
        entry.insert("dtype".to_owned(), Value::from(dtype));
        entry.insert("shape".to_owned(), Value::from(tensor.extents().to_vec()));
        entry.insert(
            "data_offsets".to_owned(),
            Value::from(vec![begin as u64, data.len() as u64]),
        );
        header.insert(tensor.name().to_owned(), Value::Object(entry));
    }
    header.insert("__metadata__".to_owned(), Value::Object(metadata));
    let mut text = Value::Object(header).to_string().into_bytes();
    // The data starts 8-byte aligned, as safetensors writers do.
    while (text.len() + 8) % 8 != 0 {
        text.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + text.len() + data.len());
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(&text);
    out.extend_from_slice(&data);
    Ok(out)
}

/// Reads the values of every graph tensor the file names (other entries
/// are ignored), rounded to the graph tensor's precision.
pub fn read_values(graph: &Graph, bytes: &[u8]) -> Result<ValueSet, SafetensorsError> {
    let len = bytes.len() as u64;
    let Some(prefix) = bytes.get(..8) else {
        return Err(SafetensorsError::Truncated {
            what: "header length",
            needed: 8,
            len,
        });
    };
    let mut n = [0u8; 8];
    n.copy_from_slice(prefix);
    let header_len = u64::from_le_bytes(n);
    if header_len > MAX_HEADER_BYTES {
        return Err(SafetensorsError::HeaderTooLarge {
            bytes: header_len,
            limit: MAX_HEADER_BYTES,
        });
    }
    let data_start = 8 + header_len;
    let Some(header_bytes) = bytes.get(8..data_start as usize) else {
        return Err(SafetensorsError::Truncated {
            what: "header",
            needed: data_start,
            len,
        });
    };
    let data = &bytes[data_start as usize..];
    let header: Value =
        serde_json::from_slice(header_bytes).map_err(|e| SafetensorsError::Header {
            message: e.to_string(),
        })?;
    let Value::Object(entries) = header else {
        return Err(SafetensorsError::Header {
            message: "the header must be a JSON object".to_owned(),
        });
    };
    let metadata = match entries.get("__metadata__") {
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Err(SafetensorsError::Header {
                message: "`__metadata__` must be an object of strings".to_owned(),
            });
        }
        None => Map::new(),
    };
    let mut set = ValueSet::new();
    for (name, entry) in &entries {
        if name == "__metadata__" {
            continue;
        }
        let Some(id) = graph.tensor_by_name(name) else {
            continue;
        };
        let tensor = graph.tensor(id);
        let bad = |message: String| SafetensorsError::Entry {
            name: name.clone(),
            message,
        };
        let dtype = entry
            .get("dtype")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("`dtype` must be a string".to_owned()))?;
        let shape: Vec<u64> = entry
            .get("shape")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_u64).collect())
            .ok_or_else(|| bad("`shape` must be an array of non-negative integers".to_owned()))?;
        if shape != tensor.extents() {
            return Err(SafetensorsError::Shape {
                name: name.clone(),
                tensor: id,
                stored: shape,
                expected: tensor.extents().to_vec(),
            });
        }
        let offsets: Vec<u64> = entry
            .get("data_offsets")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_u64).collect())
            .filter(|o: &Vec<u64>| o.len() == 2)
            .ok_or_else(|| bad("`data_offsets` must be [begin, end]".to_owned()))?;
        let stored = match dtype {
            "F32" => Precision::F32,
            "F16" => Precision::F16,
            "F8_E4M3FNUZ" | "F8_E5M2FNUZ" => {
                let scale = metadata
                    .get(&scale_key(name))
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<i8>().ok())
                    .ok_or_else(|| {
                        bad(format!(
                            "FP8 data needs `__metadata__.{}` holding its scale as a string",
                            scale_key(name)
                        ))
                    })?;
                let format = if dtype == "F8_E4M3FNUZ" {
                    Fp8Format::F143
                } else {
                    Fp8Format::F152
                };
                Precision::F8 { format, scale }
            }
            other => {
                return Err(bad(format!(
                    "dtype `{other}` is not supported; use F32, F16, F8_E4M3FNUZ or F8_E5M2FNUZ"
                )));
            }
        };
        let width = stored.element_bytes();
        let (begin, end) = (offsets[0], offsets[1]);
        let needed = tensor
            .element_count()
            .checked_mul(width)
            .ok_or_else(|| bad("the byte size overflows".to_owned()))?;
        if end.checked_sub(begin) != Some(needed) {
            return Err(bad(format!(
                "data_offsets [{begin}, {end}] do not span the {needed} bytes its shape and dtype need"
            )));
        }
        let Some(raw) = usize::try_from(begin)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(b, e)| data.get(b..e))
        else {
            return Err(SafetensorsError::Truncated {
                what: "tensor data",
                needed: data_start.saturating_add(end),
                len,
            });
        };
        let quantizer = Quantizer::new(tensor.precision());
        let values = raw
            .chunks_exact(width as usize)
            .map(|chunk| quantizer.round(stored.decode_from(chunk)))
            .collect();
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
