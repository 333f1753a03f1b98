//! Lifetime-aware placement of tile memory for IPU21.
//!
//! Per tile, [`place`] gives every [`Request`] an address inside the ranges
//! its memory class may use ([`MemoryMap::class_ranges`], already split at
//! region boundaries and cut at the loader limit), around fixed
//! [`Reservation`]s, so that requests live at the same step never share
//! bytes and separated requests never share a memory element.
//!
//! ```text
//! Problem ──validate──► per tile (rayon, results in tile order):
//!    lower_bound ─────────────────────────────► TileBound
//!    greedy passes (size/area/lifetime/start order, best/first fit)
//!      └─ all fail and the bound does not prove infeasibility
//!           └─ exact search (canonical, bounded) ─► placement | proof | unknown
//!    failure ─► FitFailure (ranges, free gaps, live set, verdict), logged as
//!               `tile allocation does not fit`
//! Placement ──check_placement (independent)──► Ok | every defect
//! ```
//!
//! The same greedy passes and exact search, with a skyline heuristic for
//! large traces and proofs for degenerate inputs, solve single-arena
//! MiniMalloc-style CSV problems ([`CsvProblem::solve`]), the standard
//! research benchmark for this problem. The `generate` module, behind the
//! `testing` feature, builds zero-slack, ML-trace-shaped and SigLIP-scale
//! instances for tests and benchmarks.

#![forbid(unsafe_code)]

mod arena;
mod bound;
mod check;
mod csv;
mod error;
mod exact;
mod explain;
#[cfg(feature = "testing")]
pub mod generate;
mod greedy;
mod map;
mod place;
mod problem;
mod profile;
mod regions;
mod sections;
mod skyline;
mod solve;
mod squeaky;
mod stage;

pub use bound::{ClassBound, Shortfall, TileBound, lower_bound};
pub use check::{PlacementCheckError, check_placement};
pub use csv::{CsvBuffer, CsvCheckError, CsvError, CsvProblem};
pub use error::{FitFailure, LiveRange, Occupant, PlaceError, Verdict};
pub use exact::SearchStats;
pub use greedy::{Fit, GreedyOrder, GreedyStrategy};
pub use map::{MemoryElement, MemoryMap, Region};
pub use place::{
    PlaceConfig, PlaceMethod, Placement, PlacementSummary, TilePlacement, place, place_tile,
};
pub use problem::{
    Problem, ProblemError, Request, RequestId, Reservation, TileProblem, validate, validate_tile,
};
pub use profile::{MemoryProfile, PROFILE_SCHEMA, ProfileRun, TileProfile};
pub use solve::{Infeasibility, SolveConfig, SolveMethod, SolveOutcome, SolveResult};
pub use stage::{BuiltinPlacer, Placer};
