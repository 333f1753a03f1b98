//! The IPU21 backend's orchestrator.
//!
//! This crate turns a model into a loadable package. So far it holds the
//! front end: the graph IR with its validation, the versioned JSON fixture
//! format, and the deterministic values every tensor is given
//! ([`graph`]). Layout planning, lowering and package files build on it.

#![forbid(unsafe_code)]

pub mod graph;

pub use graph::{Graph, GraphError, Op, OpId, Tensor, TensorId, TensorKind};
