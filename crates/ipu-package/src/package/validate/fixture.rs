//! The fixture a package carries against its program.
//!
//! A run generates (or reads) a value for every input and weight of the
//! fixture's graph, writes them into the program's buffers of the same
//! names, and compares the graph's outputs with the program's output
//! buffers. [`Package::check_fixture`] checks, from names, shapes,
//! precisions and roles alone, that this is possible: so a run calls it
//! before any value exists, and a fixture edited to 2^24 tokens or 65536
//! layers is refused before a single weight is generated. Validation runs
//! it on the stored fixture, parsed within [`Limits`].

use std::collections::HashMap;

use ipu_layout::Precision;

use super::{Errors, ValidationError};
use crate::graph::{Graph, ParseOptions, TensorKind, parse_fixture_bounded};
use crate::package::{Limits, Package};
use crate::program::BufferRole;

/// How a fixture's graph differs from what the package's program holds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FixtureMismatch {
    /// The graph is not the one the package was built from.
    #[error("the fixture's graph is {fixture}, the package was built from {package}")]
    Name {
        /// The graph's name.
        fixture: String,
        /// The manifest's.
        package: String,
    },
    /// A tensor the host supplies or reads has no buffer.
    #[error(
        "the package has no buffer for the fixture's {kind} {tensor}; rebuild the package from this fixture"
    )]
    MissingBuffer {
        /// The tensor.
        tensor: String,
        /// Its kind.
        kind: &'static str,
    },
    /// A tensor's shape differs from its buffer's.
    #[error(
        "the fixture's {tensor} has shape {fixture:?}, the package's buffer {package:?}; the fixture was edited or its parameters differ from the build's"
    )]
    Shape {
        /// The tensor.
        tensor: String,
        /// The fixture's extents.
        fixture: Vec<u64>,
        /// The buffer's extents.
        package: Vec<u64>,
    },
    /// A tensor's precision differs from its buffer's.
    #[error("the fixture's {tensor} is {fixture}, the package's buffer is {package}")]
    Precision {
        /// The tensor.
        tensor: String,
        /// The fixture's precision.
        fixture: Precision,
        /// The buffer's.
        package: Precision,
    },
    /// A tensor's kind differs from its buffer's role.
    #[error("the fixture's {tensor} is an {kind}, the package's buffer holds {role:?}")]
    Role {
        /// The tensor.
        tensor: String,
        /// Its kind.
        kind: &'static str,
        /// The buffer's role.
        role: BufferRole,
    },
    /// A buffer the host writes or reads has no tensor.
    #[error("the package exchanges {buffer} with the host but the fixture has no such tensor")]
    MissingTensor {
        /// The buffer.
        buffer: String,
    },
    /// The graph's inputs, weights and outputs are larger together than
    /// a run may hold.
    #[error(
        "the fixture's inputs, weights and outputs hold {elements} elements together; a package's fixture may hold at most {limit}"
    )]
    TooLarge {
        /// Elements of every input, weight and output together
        /// (saturated).
        elements: u64,
        /// The limit.
        limit: u64,
    },
}

/// The role a buffer holding a tensor of `kind` has.
fn role_of(kind: TensorKind) -> Option<BufferRole> {
    match kind {
        TensorKind::Input => Some(BufferRole::Input),
        TensorKind::Weight => Some(BufferRole::Weight),
        TensorKind::Output => Some(BufferRole::Output),
        TensorKind::Activation => None,
    }
}

impl Package {
    /// Checks that `graph` is the graph the package was built from as far
    /// as the host sees it: every input, weight and output has a buffer of
    /// the same name, shape, precision and role, every buffer the host
    /// writes or reads is a tensor of its role's kind, and the graph's
    /// tensors hold no more elements
    /// together than the default [`Limits`] allow. It compares sizes only,
    /// so call it before generating values for `graph`.
    pub fn check_fixture(&self, graph: &Graph) -> Result<(), FixtureMismatch> {
        self.check_fixture_with(graph, &Limits::default())
    }

    /// [`Package::check_fixture`] against `limits`.
    pub fn check_fixture_with(
        &self,
        graph: &Graph,
        limits: &Limits,
    ) -> Result<(), FixtureMismatch> {
        if graph.name() != self.manifest.name {
            return Err(FixtureMismatch::Name {
                fixture: graph.name().to_owned(),
                package: self.manifest.name.clone(),
            });
        }
        // The values a run generates or reads whole: inputs, weights and
        // outputs. Activations are computed an op at a time (their work
        // is bounded by `max_compute_elements`); counting them refused
        // SigLIP so400m packages from batch 6 on, whose activations
        // alone pass 2^32 elements.
        let elements = graph
            .tensors()
            .values()
            .iter()
            .filter(|t| t.kind() != TensorKind::Activation)
            .map(|t| t.element_count())
            .fold(0u64, u64::saturating_add);
        if elements > limits.max_fixture_elements {
            return Err(FixtureMismatch::TooLarge {
                elements,
                limit: limits.max_fixture_elements,
            });
        }
        let buffers = self.program.buffers.values();
        let by_name: HashMap<&str, usize> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| (b.name.as_str(), i))
            .collect();
        for t in graph.tensors().values() {
            let Some(role) = role_of(t.kind()) else {
                continue;
            };
            let Some(b) = by_name.get(t.name()).and_then(|&i| buffers.get(i)) else {
                return Err(FixtureMismatch::MissingBuffer {
                    tensor: t.name().to_owned(),
                    kind: t.kind().as_str(),
                });
            };
            if b.ty.shape().extents() != t.extents() {
                return Err(FixtureMismatch::Shape {
                    tensor: t.name().to_owned(),
                    fixture: t.extents().to_vec(),
                    package: b.ty.shape().extents().to_vec(),
                });
            }
            if b.ty.precision() != t.precision() {
                return Err(FixtureMismatch::Precision {
                    tensor: t.name().to_owned(),
                    fixture: t.precision(),
                    package: b.ty.precision(),
                });
            }
            if b.role != role {
                return Err(FixtureMismatch::Role {
                    tensor: t.name().to_owned(),
                    kind: t.kind().as_str(),
                    role: b.role,
                });
            }
        }
        // Every buffer the host writes or reads is a tensor of that kind:
        // the host supplies values for inputs and weights only.
        for b in buffers {
            let kind = match b.role {
                BufferRole::Input => TensorKind::Input,
                BufferRole::Weight => TensorKind::Weight,
                BufferRole::Output => TensorKind::Output,
                BufferRole::Activation | BufferRole::Temporary => continue,
            };
            match graph.tensor_by_name(&b.name).map(|t| graph.tensor(t)) {
                None => {
                    return Err(FixtureMismatch::MissingTensor {
                        buffer: b.name.clone(),
                    });
                }
                Some(t) if t.kind() != kind => {
                    return Err(FixtureMismatch::Role {
                        tensor: t.name().to_owned(),
                        kind: t.kind().as_str(),
                        role: b.role,
                    });
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// Parses the stored fixture within the limits and checks it against the
/// program, then the weights and the model description against the
/// graph. A package without a fixture has nothing to check.
pub(super) fn check_stored(package: &Package, limits: &Limits, errors: &mut Errors) {
    let Some(text) = package.fixture.as_deref() else {
        // Without a graph there is nothing to check a weights file or a
        // model description against; a run refuses such a package by
        // itself.
        if package.weights.is_some() {
            errors.push(ValidationError::WeightsWithoutGraph);
        }
        if package.model.is_some() {
            errors.push(ValidationError::ModelWithoutGraph);
        }
        return;
    };
    let graph =
        match parse_fixture_bounded(text, &ParseOptions::default(), limits.max_fixture_items) {
            Ok(g) => g,
            Err(e) => {
                errors.push(ValidationError::Fixture(e));
                return;
            }
        };
    if let Err(e) = package.check_fixture_with(&graph, limits) {
        errors.push(ValidationError::FixtureMismatch(e));
        return;
    }
    if let Some(weights) = &package.weights
        && let Err(e) = weights.check(&graph)
    {
        errors.push(ValidationError::Weights(e));
    }
    if let Some(model) = &package.model {
        if let Err(e) = model.check(&graph) {
            errors.push(ValidationError::Model(e));
        }
        // An imported model's weights are not generated: a run needs the
        // file.
        if package.weights.is_none() {
            errors.push(ValidationError::ModelWithoutWeights);
        }
    }
}
