//! `weights.safetensors`: the graph's weights inside the package, so that a
//! package built from a checkpoint is self-contained.
//!
//! The file is written by the one safetensors codec,
//! [`crate::graph::safetensors`], every weight in exactly its graph
//! tensor's precision (FP8 with its scale in `__metadata__`). Reading is
//! stricter than [`crate::graph::safetensors::read_values`]: the package's weights are
//! the build's own quantised values, so an entry stored in another
//! precision or scale (which the general reader would silently round), an
//! entry the graph has no weight for, and a graph weight without an entry
//! are errors. A run never falls back to generated values for a weight.

use std::collections::HashMap;

use ::safetensors::{Dtype, SafeTensors};
use ipu_layout::{Fp8Format, Precision};

use crate::graph::safetensors::{SafetensorsError, read_weights, scale_key, write_values};
use crate::graph::{Graph, TensorId, TensorKind, ValueSet};

/// The weights file's name in the package directory.
pub const WEIGHTS_FILE: &str = "weights.safetensors";

/// The bytes of a package's `weights.safetensors`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageWeights {
    bytes: Vec<u8>,
}

/// Why a package's weights cannot be written or used for a graph.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WeightsError {
    /// The safetensors codec refused the values or the file.
    #[error("{WEIGHTS_FILE}: {source}")]
    Safetensors {
        /// The codec's finding.
        #[source]
        source: SafetensorsError,
    },
    /// A graph weight has no entry in the file.
    #[error(
        "{WEIGHTS_FILE} has no entry for weight `{name}` ({tensor}); the package does not \
         match its graph, build it again"
    )]
    Missing {
        /// The weight's name.
        name: String,
        /// The graph tensor.
        tensor: TensorId,
    },
    /// An entry names no weight of the graph.
    #[error(
        "{WEIGHTS_FILE} holds `{name}`, which is not a weight of the graph; the package does \
         not match its graph, build it again"
    )]
    Unexpected {
        /// The entry's name.
        name: String,
    },
    /// An entry is stored in another precision than its graph tensor's.
    #[error(
        "{WEIGHTS_FILE} stores `{name}` ({tensor}) as {stored}, but the graph holds it in \
         {expected:?}; the package does not match its graph, build it again"
    )]
    Precision {
        /// The weight's name.
        name: String,
        /// The graph tensor.
        tensor: TensorId,
        /// The stored dtype (and scale).
        stored: String,
        /// The graph tensor's precision.
        expected: Precision,
    },
}

impl PackageWeights {
    /// Encodes every weight of `graph` from `values` (each in its tensor's
    /// precision; values are rounded to it on the way).
    pub fn encode(graph: &Graph, values: &ValueSet) -> Result<Self, WeightsError> {
        let bytes = write_values(graph, values, &graph.weights())
            .map_err(|source| WeightsError::Safetensors { source })?;
        Ok(Self { bytes })
    }

    /// The file's bytes as read from a package. Only their safetensors
    /// form is checked here; [`PackageWeights::values`] checks them
    /// against a graph.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, WeightsError> {
        SafeTensors::read_metadata(&bytes).map_err(|source| WeightsError::Safetensors {
            source: SafetensorsError::Format { source },
        })?;
        Ok(Self { bytes })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The value of every weight of `graph`: each must be stored, in
    /// exactly its tensor's precision, and nothing else may be.
    pub fn values(&self, graph: &Graph) -> Result<ValueSet, WeightsError> {
        self.check(graph)?;
        read_weights(graph, &self.bytes).map_err(|source| match source {
            SafetensorsError::Missing { name, tensor } => WeightsError::Missing { name, tensor },
            source => WeightsError::Safetensors { source },
        })
    }

    /// What [`PackageWeights::values`] checks that the file's header alone
    /// shows: every entry is a weight of `graph` stored in exactly its
    /// precision and shape, and every weight has an entry. It decodes no
    /// value, so package validation runs it on every read.
    pub fn check(&self, graph: &Graph) -> Result<(), WeightsError> {
        let (_, metadata) = SafeTensors::read_metadata(&self.bytes).map_err(|source| {
            WeightsError::Safetensors {
                source: SafetensorsError::Format { source },
            }
        })?;
        let none = HashMap::new();
        let scales = metadata.metadata().as_ref().unwrap_or(&none);
        // Offset order, so that the first error does not depend on hash
        // order.
        for name in metadata.offset_keys() {
            let id = graph
                .tensor_by_name(&name)
                .filter(|&id| graph.tensor(id).kind() == TensorKind::Weight);
            let Some(id) = id else {
                return Err(WeightsError::Unexpected { name });
            };
            let Some(info) = metadata.info(&name) else {
                continue;
            };
            let expected = graph.tensor(id).precision();
            let scale = scales.get(&scale_key(&name));
            let matches = match (expected, info.dtype) {
                (Precision::F32, Dtype::F32) | (Precision::F16, Dtype::F16) => true,
                (
                    Precision::F8 {
                        format: Fp8Format::F143,
                        scale: s,
                    },
                    Dtype::F8_E4M3FNUZ,
                )
                | (
                    Precision::F8 {
                        format: Fp8Format::F152,
                        scale: s,
                    },
                    Dtype::F8_E5M2FNUZ,
                ) => scale.and_then(|t| t.parse::<i8>().ok()) == Some(s),
                _ => false,
            };
            if !matches {
                return Err(WeightsError::Precision {
                    tensor: id,
                    stored: match scale {
                        Some(s) => format!("{} with scale {s}", info.dtype),
                        None => info.dtype.to_string(),
                    },
                    name,
                    expected,
                });
            }
            let stored: Vec<u64> = info.shape.iter().map(|&e| e as u64).collect();
            let extents = graph.tensor(id).extents();
            if stored != extents {
                return Err(WeightsError::Safetensors {
                    source: SafetensorsError::Shape {
                        name,
                        tensor: id,
                        stored,
                        expected: extents.to_vec(),
                    },
                });
            }
        }
        for id in graph.weights() {
            let name = graph.tensor(id).name();
            if metadata.info(name).is_none() {
                return Err(WeightsError::Missing {
                    name: name.to_owned(),
                    tensor: id,
                });
            }
        }
        Ok(())
    }
}
