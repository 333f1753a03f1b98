//! The placement stage behind a trait, so that a toolchain embedding the
//! package builder can bring its own placer.
//!
//! A placer turns a [`Problem`] into a [`Placement`]. Whoever calls it holds
//! the result to the same invariants as this crate's own: the package
//! builder runs [`check_placement`](crate::check_placement), which shares
//! nothing with any placer, on whatever comes back.

use crate::{PlaceConfig, PlaceError, Placement, Problem, place};

/// A placement stage.
pub trait Placer: Send + Sync {
    /// A short name for logs and errors (`ipu-alloc` for the built-in one).
    fn name(&self) -> &str;

    /// Places every request of every tile of `problem`.
    ///
    /// A placer that finds no placement returns
    /// [`PlaceError::DoesNotFit`] when it can say where (the package builder
    /// then trades cycles for memory and tries again) or
    /// [`PlaceError::Placer`] with its own cause.
    fn place(&self, problem: &Problem) -> Result<Placement, PlaceError>;
}

/// This crate's placer: [`place`] with a configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuiltinPlacer {
    /// Budgets and switches.
    pub config: PlaceConfig,
}

impl Placer for BuiltinPlacer {
    fn name(&self) -> &str {
        "ipu-alloc"
    }

    fn place(&self, problem: &Problem) -> Result<Placement, PlaceError> {
        place(problem, &self.config)
    }
}
