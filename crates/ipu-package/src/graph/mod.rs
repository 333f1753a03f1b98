//! The graph IR, its validation, the JSON fixture format, deterministic
//! weight and input values, and the safetensors-style weight loader.
//!
//! ```text
//! fixture JSON ──fixture::parse_fixture──► Graph (validated, repeats kept)
//!                 (parse_fixture_for_build also checks check_buildable)
//!                                            │ values::generate (seed, tensor name)
//!                                            ▼ or safetensors::read_values
//!                                          ValueSet ──► ipu-sim reference / package weights
//! ```

mod activation;
mod buildable;
mod fixture;
mod ir;
mod queries;
pub mod safetensors;
mod validate;
pub mod values;

pub use activation::Activation;
pub(crate) use buildable::WORD_BYTES;
pub use buildable::check_buildable;
pub use fixture::{
    FIXTURE_SCHEMA_VERSION, FixtureError, IterationNote, MAX_GRAPH_ITEMS, ParseOptions, WriteError,
    parse_fixture, parse_fixture_bounded, parse_fixture_for_build, parse_fixture_with,
    write_fixture,
};
pub use ir::{
    AttentionMask, Carry, FP8_PROBABILITIES, Graph, GraphBuilder, MAX_GATHER_ROWS, Op, OpId,
    Repeat, SoftmaxPrecision, Tensor, TensorId, TensorKind, gather_table_rows,
};
pub use queries::{QueryColumns, query_columns, query_factor};
pub use validate::{ErrorLocation, GraphError, Slot, broadcast_shapes, validate_graph};
pub use values::ValueSet;
