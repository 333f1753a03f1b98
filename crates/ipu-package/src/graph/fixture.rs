//! The versioned JSON fixture format and its parser.
//!
//! A fixture describes a model's graph: tensor shapes, precisions and kinds,
//! and the ops between them. Values are not part of it (see
//! [`values`](crate::graph::values)). Schema version 1:
//!
//! ```text
//! {
//!   "schema_version": 1,
//!   "name": "tiny-2l-h64",
//!   "description": "free text (optional)",
//!   "params": { "batch": 2, "hidden": 64, "layers": 2 },      (optional)
//!   "layers": [
//!     { "name": "embed", "tensors": [ ... ], "ops": [ ... ] },
//!     { "name": "encoder", "repeat": "layers", "tensors": [ ... ], "ops": [ ... ] }
//!   ]
//! }
//! tensor: { "name": "enc{i}.fc1.w", "shape": ["hidden", "mlp"],
//!           "precision": "F16" | "F32" | "F143" | "F152", "scale": -10 (FP8 only, required),
//!           "kind": "input" | "weight" | "activation" | "output" }
//! op:     { "op": "gemm" | "add" | "layer_norm" | "gelu" | "gelu_erf" | "quick_gelu"
//!                 | "tanh" | "attention" | "cast_fp8" | "reshape" | "transpose"
//!                 | "slice" | "broadcast" | "gather",
//!           "inputs": [ tensor names ], "output": "tensor name", attributes }
//! ```
//!
//! Integers anywhere (extents, `repeat`, `heads`, `axis`, `start`, `perm`
//! entries) may be written as numbers or as names of `params`, which
//! [`ParseOptions::overrides`] can change (for example the batch size or the
//! layer count). Op inputs follow [`Op::inputs`]: gemm `[left, right]` or
//! `[left, right, bias]`; add `[left, right]`; layer_norm
//! `[input, scale, bias]` with `"eps"`; attention `[q, k, v]` with `"heads"`
//! and `"softmax": "F16" | "F32"`, optionally `"mask": "none" | "causal"`
//! and `"queries_scaled": true` (the queries carry `1/√head_dim`);
//! transpose `[input]` with `"perm"`; slice
//! `[input]` with `"axis"` and `"start"`; gather `[table, indices]`; the
//! others `[input]`. The activations are named as
//! [`Activation::name`](crate::graph::Activation::name)
//! says: `gelu` is GELU's tanh form, `gelu_erf` its exact form.
//!
//! A layer with `"repeat": n` is instantiated `n` times. Its tensor and op
//! names are templates: `{i}` is the iteration index and `{i+1}` (or any
//! `{i+c}`, `{i-c}`) an offset from it, so a body that reads `x{i}` and
//! declares and writes `x{i+1}` chains each iteration's output to the next
//! one's input, with `x0` coming from an earlier layer. Anywhere, `{p}`
//! stands for the value of parameter `p` (so a layer after the repeat can
//! read `x{layers}`, and the model's name can carry its batch,
//! `model-b{batch}`). Each layer's
//! tensors are declared before its ops are read, in declaration order, so
//! every iteration owns a contiguous id range; the resulting
//! [`Repeat`] keeps the structure for the lowering.
//!
//! Every error names the JSON path of the offending field; malformed JSON
//! gives its line and column. [`write_fixture`] writes a graph back as a
//! fixture (`write.rs`), which this parser reads to the same graph.

mod json;
mod parser;
mod template;
mod write;

use ipu_layout::IdVec;
use serde_json::Value;

use crate::graph::{ErrorLocation, Graph, GraphError, Op, OpId, Repeat, Slot, Tensor, TensorId};

pub use write::{WriteError, write_fixture};

/// The fixture schema version this parser reads.
pub const FIXTURE_SCHEMA_VERSION: u64 = 1;

/// The most tensors plus ops a fixture may expand to: parsing takes about
/// five microseconds an item, so a fixture is parsed in seconds at most
/// (SigLIP so400m has about 1300 items, a thousand layers of it 46000).
pub const MAX_GRAPH_ITEMS: u64 = 1 << 20;

/// Options of [`parse_fixture_with`].
#[derive(Clone, Debug, Default)]
pub struct ParseOptions {
    /// Parameter values that replace the fixture's own (for example
    /// `("batch", 4)` or `("layers", 1)`). Each name must exist in the
    /// fixture's `params`.
    pub overrides: Vec<(String, u64)>,
}

/// Why a fixture was rejected. Every variant but [`FixtureError::Json`]
/// carries the JSON path of the offending field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FixtureError {
    /// The text is not valid JSON.
    #[error("malformed JSON at line {line}, column {column}: {source}")]
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The JSON reader's error.
        #[source]
        source: serde_json::Error,
    },
    /// The schema version is not one this parser reads.
    #[error(
        "{path}: schema_version {found} is not supported; this parser reads version {supported}"
    )]
    Version {
        /// Path of the field.
        path: String,
        /// The version found, as written.
        found: String,
        /// The supported version.
        supported: u64,
    },
    /// A required field is absent.
    #[error("{path}: the required field `{field}` is missing")]
    MissingField {
        /// Path of the object.
        path: String,
        /// The field.
        field: &'static str,
    },
    /// A field is not part of the schema.
    #[error("{path}: unknown field `{field}`; expected one of: {allowed}")]
    UnknownField {
        /// Path of the field.
        path: String,
        /// The field.
        field: String,
        /// The fields allowed there.
        allowed: String,
    },
    /// A field has the wrong JSON type.
    #[error("{path}: expected {expected}, found {found}")]
    Type {
        /// Path of the field.
        path: String,
        /// What was expected.
        expected: &'static str,
        /// What was found.
        found: &'static str,
    },
    /// A field has a value outside its domain.
    #[error("{path}: {message}")]
    Value {
        /// Path of the field.
        path: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// An integer names a parameter the fixture does not define.
    #[error(
        "{path}: `{name}` is not one of the fixture's params; define it under $.params or write a number"
    )]
    UnknownParam {
        /// Path of the field.
        path: String,
        /// The name.
        name: String,
    },
    /// An override names a parameter the fixture does not define.
    #[error("override `{name}` is not one of the fixture's params ({known})")]
    UnknownOverride {
        /// The name.
        name: String,
        /// The parameters the fixture defines.
        known: String,
    },
    /// An op names a tensor no layer up to here declares.
    #[error("{path}: no tensor `{name}` is declared in this or an earlier layer{iteration}")]
    UnknownTensor {
        /// Path of the field.
        path: String,
        /// The resolved name.
        name: String,
        /// " (repeat iteration k)" inside a repeat, else empty.
        iteration: IterationNote,
    },
    /// A tensor name is declared twice.
    #[error("{path}: tensor `{name}` is already declared at {first_path}{iteration}")]
    DuplicateTensor {
        /// Path of the second declaration.
        path: String,
        /// The resolved name.
        name: String,
        /// Path of the first declaration.
        first_path: String,
        /// " (repeat iteration k)" inside a repeat, else empty.
        iteration: IterationNote,
    },
    /// A name template is malformed or used outside a repeat.
    #[error("{path}: name template `{template}` is invalid: {message}")]
    Template {
        /// Path of the field.
        path: String,
        /// The template as written.
        template: String,
        /// What is wrong.
        message: String,
    },
    /// The graph the fixture describes breaks a graph rule.
    #[error("{path}: {source}{iteration}")]
    Graph {
        /// Path of the field the rule is about.
        path: String,
        /// " (repeat iteration k)" inside a repeat, else empty.
        iteration: IterationNote,
        /// The broken rule.
        source: Box<GraphError>,
    },
}

impl FixtureError {
    /// The JSON path of the offending field, if the error has one.
    pub fn path(&self) -> Option<&str> {
        match self {
            FixtureError::Json { .. } | FixtureError::UnknownOverride { .. } => None,
            FixtureError::Version { path, .. }
            | FixtureError::MissingField { path, .. }
            | FixtureError::UnknownField { path, .. }
            | FixtureError::Type { path, .. }
            | FixtureError::Value { path, .. }
            | FixtureError::UnknownParam { path, .. }
            | FixtureError::UnknownTensor { path, .. }
            | FixtureError::DuplicateTensor { path, .. }
            | FixtureError::Template { path, .. }
            | FixtureError::Graph { path, .. } => Some(path),
        }
    }
}

/// The repeat iteration an error happened in, printed as a suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IterationNote(pub Option<u32>);

impl std::fmt::Display for IterationNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(k) => write!(f, " (repeat iteration {k})"),
            None => Ok(()),
        }
    }
}

/// Parses and validates a fixture with its own parameters.
pub fn parse_fixture(text: &str) -> Result<Graph, FixtureError> {
    parse_fixture_with(text, &ParseOptions::default())
}

/// Parses and validates a fixture with parameter overrides.
pub fn parse_fixture_with(text: &str, options: &ParseOptions) -> Result<Graph, FixtureError> {
    parse_fixture_bounded(text, options, MAX_GRAPH_ITEMS)
}

/// [`parse_fixture_with`] refusing a fixture that expands to more than
/// `max_items` tensors and ops (at most [`MAX_GRAPH_ITEMS`]) before it is
/// expanded: a package reader bounds the fixture a package carries this
/// way.
pub fn parse_fixture_bounded(
    text: &str,
    options: &ParseOptions,
    max_items: u64,
) -> Result<Graph, FixtureError> {
    let value: Value = serde_json::from_str(text).map_err(json_error)?;
    let parser = Parser {
        max_items: max_items.min(MAX_GRAPH_ITEMS),
        ..Parser::default()
    };
    parser.parse(&value, options)
}

/// [`parse_fixture_with`] also checking what a package build needs
/// ([`check_buildable`](crate::graph::check_buildable)), with the JSON
/// path of the offending field: `build-package` parses this way, so a
/// fixture or parameter the build cannot take is refused before any work.
pub fn parse_fixture_for_build(text: &str, options: &ParseOptions) -> Result<Graph, FixtureError> {
    let value: Value = serde_json::from_str(text).map_err(json_error)?;
    let parser = Parser {
        max_items: MAX_GRAPH_ITEMS,
        for_build: true,
        ..Parser::default()
    };
    parser.parse(&value, options)
}

/// The error of fixture text that is not JSON, with its place.
fn json_error(source: serde_json::Error) -> FixtureError {
    FixtureError::Json {
        line: source.line(),
        column: source.column(),
        source,
    }
}

/// Where each tensor and op came from, for error paths.
#[derive(Default)]
struct Parser {
    /// The most tensors plus ops the graph may have.
    max_items: u64,
    /// Whether to check what a build needs too.
    for_build: bool,
    tensors: IdVec<TensorId, Tensor>,
    tensor_paths: Vec<(String, Option<u32>)>,
    names: std::collections::HashMap<String, TensorId>,
    ops: IdVec<OpId, Op>,
    op_paths: Vec<(String, Option<u32>)>,
    repeats: Vec<Repeat>,
}

/// Maps a graph error to the JSON path of the field it is about.
fn locate(
    source: GraphError,
    tensor_paths: &[(String, Option<u32>)],
    op_paths: &[(String, Option<u32>)],
) -> FixtureError {
    let op_path = |op: OpId| op_paths.get(op.as_u32() as usize);
    let (path, iteration) = match source.location() {
        ErrorLocation::Tensor(t) => match tensor_paths.get(t.as_u32() as usize) {
            Some((p, it)) => {
                let field = if matches!(
                    source,
                    GraphError::Overflow { .. }
                        | GraphError::ZeroExtent { .. }
                        | GraphError::PartialWords { .. }
                ) {
                    ".shape"
                } else {
                    ".name"
                };
                (format!("{p}{field}"), *it)
            }
            None => ("$".to_owned(), None),
        },
        ErrorLocation::Operand(op, slot) => match op_path(op) {
            Some((p, it)) => match slot {
                Slot::Input(i) => (format!("{p}.inputs[{i}]"), *it),
                Slot::Output => (format!("{p}.output"), *it),
            },
            None => ("$".to_owned(), None),
        },
        ErrorLocation::Attribute(op, attribute) => match op_path(op) {
            Some((p, it)) => (format!("{p}.{attribute}"), *it),
            None => ("$".to_owned(), None),
        },
        ErrorLocation::Graph => ("$.layers".to_owned(), None),
    };
    FixtureError::Graph {
        path,
        iteration: IterationNote(iteration),
        source: Box::new(source),
    }
}
