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
//! op:     { "op": "gemm" | "add" | "layer_norm" | "gelu" | "attention" | "cast_fp8"
//!                 | "reshape" | "transpose" | "slice" | "broadcast",
//!           "inputs": [ tensor names ], "output": "tensor name", attributes }
//! ```
//!
//! Integers anywhere (extents, `repeat`, `heads`, `axis`, `start`, `perm`
//! entries) may be written as numbers or as names of `params`, which
//! [`ParseOptions::overrides`] can change (for example the batch size or the
//! layer count). Op inputs follow [`Op::inputs`]: gemm `[left, right]` or
//! `[left, right, bias]`; add `[left, right]`; layer_norm
//! `[input, scale, bias]` with `"eps"`; attention `[q, k, v]` with `"heads"`
//! and `"softmax": "F16" | "F32"`; transpose `[input]` with `"perm"`; slice
//! `[input]` with `"axis"` and `"start"`; the others `[input]`.
//!
//! A layer with `"repeat": n` is instantiated `n` times. Its tensor and op
//! names are templates: `{i}` is the iteration index and `{i+1}` (or any
//! `{i+c}`, `{i-c}`) an offset from it, so a body that reads `x{i}` and
//! declares and writes `x{i+1}` chains each iteration's output to the next
//! one's input, with `x0` coming from an earlier layer. Anywhere, `{p}`
//! stands for the value of parameter `p` (so a layer after the repeat can
//! read `x{layers}`). Each layer's
//! tensors are declared before its ops are read, in declaration order, so
//! every iteration owns a contiguous id range; the resulting
//! [`Repeat`] keeps the structure for the lowering.
//!
//! Every error names the JSON path of the offending field; malformed JSON
//! gives its line and column.

mod json;

use ipu_layout::{Fp8Format, IdVec, Precision, TensorShape};
use serde_json::Value;

use crate::graph::{
    Carry, ErrorLocation, Graph, GraphError, Op, OpId, Repeat, Slot, SoftmaxPrecision, Tensor,
    TensorId, TensorKind,
};
use json::{Child, Node, Params};

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
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FixtureError {
    /// The text is not valid JSON.
    #[error("malformed JSON at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's description.
        message: String,
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
    let value: Value = serde_json::from_str(text).map_err(|e| FixtureError::Json {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
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
    let value: Value = serde_json::from_str(text).map_err(|e| FixtureError::Json {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let parser = Parser {
        max_items: MAX_GRAPH_ITEMS,
        for_build: true,
        ..Parser::default()
    };
    parser.parse(&value, options)
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

const TOP_FIELDS: &[&str] = &["schema_version", "name", "description", "params", "layers"];
const LAYER_FIELDS: &[&str] = &["name", "repeat", "tensors", "ops", "description"];
const TENSOR_FIELDS: &[&str] = &["name", "shape", "precision", "scale", "kind"];
/// Every field any op may have; each kind then allows its own subset.
const OP_FIELDS: &[&str] = &[
    "op",
    "inputs",
    "output",
    "eps",
    "heads",
    "softmax",
    "perm",
    "axis",
    "start",
    "description",
];

impl Parser {
    fn parse(mut self, value: &Value, options: &ParseOptions) -> Result<Graph, FixtureError> {
        let root = Node { value, path: "$" }.object(TOP_FIELDS)?;
        let version = root.required("schema_version")?;
        if version.value.as_u64() != Some(FIXTURE_SCHEMA_VERSION) {
            return Err(FixtureError::Version {
                path: version.path.clone(),
                found: version.value.to_string(),
                supported: FIXTURE_SCHEMA_VERSION,
            });
        }
        let name = root.required("name")?.node().str()?.to_owned();
        if let Some(description) = root.optional("description") {
            description.node().str()?;
        }
        let mut params = Params::default();
        let mut known = Vec::new();
        if let Some(p) = root.optional("params") {
            let Value::Object(map) = p.value else {
                return Err(p.node().type_error("an object of integers"));
            };
            for (key, value) in map {
                let path = format!("{}.{key}", p.path);
                let n = Node { value, path: &path }.count(&Params::default())?;
                params.insert(key, n);
                known.push(key.clone());
            }
        }
        for (key, value) in &options.overrides {
            if params.get(key).is_none() {
                return Err(FixtureError::UnknownOverride {
                    name: key.clone(),
                    known: known.join(", "),
                });
            }
            params.insert(key, *value);
        }
        let layers = root.required("layers")?;
        for layer in layers.node().array()? {
            self.layer(&layer, &params)?;
        }
        let Parser {
            tensors,
            tensor_paths,
            ops,
            op_paths,
            repeats,
            for_build,
            ..
        } = self;
        let graph = Graph::new(name, tensors, ops, repeats)
            .map_err(|source| locate(source, &tensor_paths, &op_paths))?;
        if for_build {
            crate::graph::check_buildable(&graph)
                .map_err(|source| locate(source, &tensor_paths, &op_paths))?;
        }
        Ok(graph)
    }

    fn layer(&mut self, layer: &Child<'_>, params: &Params) -> Result<(), FixtureError> {
        let obj = layer.node().object(LAYER_FIELDS)?;
        let layer_name = obj.required("name")?.node().str()?.to_owned();
        if let Some(d) = obj.optional("description") {
            d.node().str()?;
        }
        let count = match obj.optional("repeat") {
            Some(r) => {
                let n = r.node().count_u32(params)?;
                if n == 0 {
                    return Err(FixtureError::Value {
                        path: r.path.clone(),
                        message: "a repeat count must be at least 1".to_owned(),
                    });
                }
                Some(n)
            }
            None => None,
        };
        let tensors_field = obj.required("tensors")?;
        let tensors = tensors_field.node().array()?;
        let ops_field = obj.required("ops")?;
        let ops = ops_field.node().array()?;
        // Refuse graphs that would exhaust memory before building them.
        let iterations = u64::from(count.unwrap_or(1));
        let items = (tensors.len() + ops.len()) as u64;
        let total = iterations
            .checked_mul(items)
            .and_then(|n| n.checked_add((self.tensors.len() + self.ops.len()) as u64));
        if total.is_none_or(|n| n > self.max_items) {
            let path = obj
                .optional("repeat")
                .map_or_else(|| layer.path.clone(), |r| r.path);
            return Err(FixtureError::Value {
                path,
                message: format!(
                    "the graph would have more than {} tensors and ops; \
                     lower the repeat count",
                    self.max_items
                ),
            });
        }
        let first_op = self.next_op(layer)?;
        let first_tensor = self.next_tensor(layer)?;
        for k in 0..count.unwrap_or(1) {
            let iteration = count.map(|_| k);
            for t in &tensors {
                self.tensor(t, params, iteration)?;
            }
            for op in &ops {
                self.op(op, params, iteration)?;
            }
        }
        if let Some(count) = count {
            let carries = self.carries(&tensors, &ops, params)?;
            self.repeats.push(
                Repeat::new(
                    layer_name,
                    count,
                    first_op,
                    ops.len() as u32,
                    first_tensor,
                    tensors.len() as u32,
                )
                .with_carries(carries),
            );
        }
        Ok(())
    }

    /// The carries of a repeat body: op inputs whose name in iteration 1
    /// is the name a body tensor has in iteration 0. Found from the
    /// templates, so they are known even for a single iteration.
    fn carries(
        &self,
        tensors: &[Child<'_>],
        ops: &[Child<'_>],
        params: &Params,
    ) -> Result<Vec<Carry>, FixtureError> {
        let mut declared = Vec::new();
        for t in tensors {
            let obj = t.node().object(TENSOR_FIELDS)?;
            declared.push(instantiate(&obj.required("name")?, Some(0), params)?);
        }
        let mut carries = Vec::new();
        for op in ops {
            let inputs_field = op.node().object(OP_FIELDS)?.required("inputs")?;
            for input in inputs_field.node().array()? {
                let next = instantiate(&input, Some(1), params)?;
                if let Some(position) = declared.iter().position(|d| *d == next) {
                    let initial = self.resolve(&input, Some(0), params)?;
                    carries.push(Carry {
                        initial,
                        body_tensor: position as u32,
                    });
                }
            }
        }
        Ok(carries)
    }

    fn next_op(&self, at: &Child<'_>) -> Result<OpId, FixtureError> {
        u32::try_from(self.ops.len())
            .map(OpId::from_u32)
            .map_err(|_| too_many(at, "ops"))
    }

    fn next_tensor(&self, at: &Child<'_>) -> Result<TensorId, FixtureError> {
        u32::try_from(self.tensors.len())
            .map(TensorId::from_u32)
            .map_err(|_| too_many(at, "tensors"))
    }

    fn tensor(
        &mut self,
        decl: &Child<'_>,
        params: &Params,
        iteration: Option<u32>,
    ) -> Result<(), FixtureError> {
        let obj = decl.node().object(TENSOR_FIELDS)?;
        let name_field = obj.required("name")?;
        let name = instantiate(&name_field, iteration, params)?;
        let shape_field = obj.required("shape")?;
        let mut extents = Vec::new();
        for e in shape_field.node().array()? {
            extents.push(e.node().count(params)?);
        }
        let precision = precision(&obj)?;
        let kind_field = obj.required("kind")?;
        let kind = match kind_field.node().str()? {
            "input" => TensorKind::Input,
            "weight" => TensorKind::Weight,
            "activation" => TensorKind::Activation,
            "output" => TensorKind::Output,
            other => {
                return Err(FixtureError::Value {
                    path: kind_field.path.clone(),
                    message: format!(
                        "`{other}` is not a tensor kind; use input, weight, activation or output"
                    ),
                });
            }
        };
        if let Some(&first) = self.names.get(&name) {
            return Err(FixtureError::DuplicateTensor {
                path: name_field.path.clone(),
                name,
                first_path: self.tensor_paths[first.as_u32() as usize].0.clone(),
                iteration: IterationNote(iteration),
            });
        }
        self.next_tensor(decl)?;
        let id = self.tensors.push(Tensor::new(
            name.clone(),
            TensorShape::new(extents),
            precision,
            kind,
        ));
        self.names.insert(name, id);
        self.tensor_paths.push((decl.path.clone(), iteration));
        Ok(())
    }

    fn op(
        &mut self,
        decl: &Child<'_>,
        params: &Params,
        iteration: Option<u32>,
    ) -> Result<(), FixtureError> {
        let kind_field = decl
            .node()
            .object(&[
                "op",
                "inputs",
                "output",
                "eps",
                "heads",
                "softmax",
                "perm",
                "axis",
                "start",
                "description",
            ])?
            .required("op")?;
        let kind = kind_field.node().str()?;
        let (arity, attributes): (&[usize], &[&str]) = match kind {
            "gemm" => (&[2, 3], &[]),
            "add" => (&[2], &[]),
            "layer_norm" => (&[3], &["eps"]),
            "attention" => (&[3], &["heads", "softmax"]),
            "transpose" => (&[1], &["perm"]),
            "slice" => (&[1], &["axis", "start"]),
            "gelu" | "cast_fp8" | "reshape" | "broadcast" => (&[1], &[]),
            other => {
                return Err(FixtureError::Value {
                    path: kind_field.path.clone(),
                    message: format!(
                        "`{other}` is not an op; use gemm, add, layer_norm, gelu, attention, \
                         cast_fp8, reshape, transpose, slice or broadcast"
                    ),
                });
            }
        };
        let allowed: Vec<&str> = ["op", "inputs", "output", "description"]
            .into_iter()
            .chain(attributes.iter().copied())
            .collect();
        let obj = decl.node().object(&allowed)?;
        let inputs_field = obj.required("inputs")?;
        let input_nodes = inputs_field.node().array()?;
        if !arity.contains(&input_nodes.len()) {
            return Err(FixtureError::Value {
                path: inputs_field.path.clone(),
                message: format!(
                    "{kind} takes {} inputs, found {}",
                    arity
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(" or "),
                    input_nodes.len()
                ),
            });
        }
        let mut inputs = Vec::new();
        for node in &input_nodes {
            inputs.push(self.resolve(node, iteration, params)?);
        }
        let output = self.resolve(&obj.required("output")?, iteration, params)?;
        let op = match kind {
            "gemm" => Op::Gemm {
                left: inputs[0],
                right: inputs[1],
                bias: inputs.get(2).copied(),
                output,
            },
            "add" => Op::Add {
                left: inputs[0],
                right: inputs[1],
                output,
            },
            "layer_norm" => {
                let eps_field = obj.required("eps")?;
                let eps = eps_field.node().f64()?;
                Op::LayerNorm {
                    input: inputs[0],
                    scale: inputs[1],
                    bias: inputs[2],
                    eps: eps as f32,
                    output,
                }
            }
            "attention" => {
                let heads = obj.required("heads")?.node().count_u32(params)?;
                let softmax_field = obj.required("softmax")?;
                let softmax = match softmax_field.node().str()? {
                    "F16" => SoftmaxPrecision::F16,
                    "F32" => SoftmaxPrecision::F32,
                    other => {
                        return Err(FixtureError::Value {
                            path: softmax_field.path.clone(),
                            message: format!(
                                "`{other}` is not a softmax precision; use F16 or F32"
                            ),
                        });
                    }
                };
                Op::Attention {
                    q: inputs[0],
                    k: inputs[1],
                    v: inputs[2],
                    heads,
                    softmax,
                    output,
                }
            }
            "transpose" => {
                let mut perm = Vec::new();
                for p in obj.required("perm")?.node().array()? {
                    perm.push(p.node().count_u32(params)?);
                }
                Op::Transpose {
                    input: inputs[0],
                    perm,
                    output,
                }
            }
            "slice" => Op::Slice {
                input: inputs[0],
                axis: obj.required("axis")?.node().count_u32(params)?,
                start: obj.required("start")?.node().count(params)?,
                output,
            },
            "gelu" => Op::Gelu {
                input: inputs[0],
                output,
            },
            "cast_fp8" => Op::CastFp8 {
                input: inputs[0],
                output,
            },
            "reshape" => Op::Reshape {
                input: inputs[0],
                output,
            },
            _ => Op::Broadcast {
                input: inputs[0],
                output,
            },
        };
        self.next_op(decl)?;
        self.ops.push(op);
        self.op_paths.push((decl.path.clone(), iteration));
        Ok(())
    }

    fn resolve(
        &self,
        field: &Child<'_>,
        iteration: Option<u32>,
        params: &Params,
    ) -> Result<TensorId, FixtureError> {
        let name = instantiate(field, iteration, params)?;
        self.names
            .get(&name)
            .copied()
            .ok_or_else(|| FixtureError::UnknownTensor {
                path: field.path.clone(),
                name,
                iteration: IterationNote(iteration),
            })
    }
}

fn too_many(at: &Child<'_>, what: &'static str) -> FixtureError {
    FixtureError::Value {
        path: at.path.clone(),
        message: format!("the fixture declares more {what} than 32-bit ids can name"),
    }
}

fn precision(obj: &json::Object<'_>) -> Result<Precision, FixtureError> {
    let field = obj.required("precision")?;
    let format = match field.node().str()? {
        "F32" => None,
        "F16" => None,
        "F143" => Some(Fp8Format::F143),
        "F152" => Some(Fp8Format::F152),
        other => {
            return Err(FixtureError::Value {
                path: field.path.clone(),
                message: format!("`{other}` is not a precision; use F32, F16, F143 or F152"),
            });
        }
    };
    let scale = obj.optional("scale");
    match (format, scale) {
        (Some(format), Some(scale)) => {
            let value = scale.node().i64()?;
            let scale = i8::try_from(value).map_err(|_| FixtureError::Value {
                path: scale.path.clone(),
                message: format!("scale {value} is outside -128..=127"),
            })?;
            Ok(Precision::F8 { format, scale })
        }
        (Some(_), None) => Err(FixtureError::MissingField {
            path: obj.path().to_owned(),
            field: "scale",
        }),
        (None, Some(scale)) => Err(FixtureError::Value {
            path: scale.path.clone(),
            message: "a scale is only allowed with the FP8 precisions F143 and F152".to_owned(),
        }),
        (None, None) => Ok(if field.value == "F32" {
            Precision::F32
        } else {
            Precision::F16
        }),
    }
}

/// Expands `{i}`, `{i+c}` and `{i-c}` in a name for one repeat iteration,
/// and `{param}` to a fixture parameter's value.
fn instantiate(
    field: &Child<'_>,
    iteration: Option<u32>,
    params: &Params,
) -> Result<String, FixtureError> {
    let template = field.node().str()?;
    let fail = |message: String| FixtureError::Template {
        path: field.path.clone(),
        template: template.to_owned(),
        message,
    };
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        out.push_str(&rest[..open]);
        if rest[open..].starts_with('}') {
            return Err(fail("`}` without a matching `{`".to_owned()));
        }
        let Some(close) = rest[open..].find('}') else {
            return Err(fail("`{` without a matching `}`".to_owned()));
        };
        let inner = &rest[open + 1..open + close];
        let is_iteration = inner == "i" || inner.starts_with("i+") || inner.starts_with("i-");
        if !is_iteration {
            let Some(value) = params.get(inner) else {
                return Err(fail(format!(
                    "`{{{inner}}}` is neither {{i}}, {{i+c}}, {{i-c}} nor one of the fixture's params"
                )));
            };
            out.push_str(&value.to_string());
            rest = &rest[open + close + 1..];
            continue;
        }
        let Some(k) = iteration else {
            return Err(fail(
                "`{i}` templates are only allowed in layers with a repeat count".to_owned(),
            ));
        };
        let offset: i64 = match &inner[1..] {
            "" => 0,
            tail => {
                let (sign, digits) = tail.split_at(1);
                let sign = if sign == "+" { 1 } else { -1 };
                let c: i64 = digits
                    .parse()
                    .map_err(|_| fail(format!("`{digits}` in `{{{inner}}}` is not a number")))?;
                sign * c
            }
        };
        let index = i64::from(k) + offset;
        if index < 0 {
            return Err(fail(format!(
                "`{{{inner}}}` is negative in iteration {k}; read the first iteration's input from a tensor named without the template"
            )));
        }
        out.push_str(&index.to_string());
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
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
