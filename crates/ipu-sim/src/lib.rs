//! Runs IPU21 packages on a host model of the tiles and checks them.
//!
//! So far this crate holds the oracle: [`reference`](mod@reference)
//! evaluates a graph on whole tensors in plain f32, independent of
//! layouts, and compares device results with it under documented
//! tolerances. The tile model that
//! executes packages builds on it.

#![forbid(unsafe_code)]

pub mod codelets;
mod error;
pub mod logical;
pub mod reference;
pub mod tiles;

pub use error::SimError;

pub use reference::{ReferenceConfig, ReferenceError, evaluate, evaluate_op, evaluate_with};
