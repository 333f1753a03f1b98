//! Placement failures that explain themselves.
//!
//! A failure names the tile, the request, its class, size, alignment and
//! lifetime, the class's allowed ranges, the free gaps and the live set at
//! the step where the request fits worst, and a verdict that says the
//! truth about the tile: proved impossible (by the lower bound, by a
//! request larger than any gap, or by exhaustive search, each with the step
//! and bytes of the proof) or undecided within the search's node budget.

use ipu_layout::{MemoryClass, TileId};
use serde::{Deserialize, Serialize};

use crate::{PlacementCheckError, ProblemError, RequestId};

/// What occupied memory at the failing step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Occupant {
    /// A request placed before the failure.
    Request(RequestId),
    /// A reservation, by label.
    Reservation(String),
}

/// One live range at the failing step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveRange {
    /// What it is.
    pub occupant: Occupant,
    /// Its last live step; `None` when always live.
    pub last_step: Option<u32>,
    /// Its first address.
    pub start: u32,
    /// Its size in bytes.
    pub bytes: u32,
}

/// Why a request could not be placed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// The lower bound proves the tile infeasible: at `step`, the live
    /// bytes of `class` (`None`: all classes) exceed the usable bytes.
    BoundExceeded {
        /// The class, or `None` for all classes together.
        class: Option<MemoryClass>,
        /// The step.
        step: u32,
        /// How many bytes more that step needs.
        needs_bytes: u64,
    },
    /// The request does not fit in any of its ranges even with no other
    /// request placed: only reservations and region boundaries are in the
    /// way.
    TooLarge {
        /// The largest gap left by reservations over the request's lifetime.
        largest_gap: u32,
    },
    /// The live bytes fit, but an exhaustive search proved that no
    /// placement exists: region boundaries, reservations, alignment or
    /// separation fragment the space. `class`, `step`, `live_bytes` and
    /// `usable_bytes` name the tightest step of the tile, where shrinking
    /// pays first.
    Exhausted {
        /// Search nodes of the proof.
        nodes: u64,
        /// The proof ignored separation partners (a placement without them
        /// does not exist, so none with them does); the region relaxation's
        /// proof (no split of the requests between the windows fits every
        /// step) ignores alignment and order too.
        relaxed: bool,
        /// The class of the tightest step (`None`: all classes).
        class: Option<MemoryClass>,
        /// The tightest step.
        step: u32,
        /// Live bytes of that class at that step.
        live_bytes: u64,
        /// Usable bytes of that class at that step.
        usable_bytes: u64,
    },
    /// Undecided: the live bytes fit, no greedy pass placed the tile, and
    /// the exact search neither found a placement nor proved that none
    /// exists within its node budget. More search effort may place it.
    Unknown {
        /// Search nodes used.
        nodes: u64,
        /// The node budget of each search (the tile's own and, where it has
        /// separation partners, the one without them); 0: the search did
        /// not run (the tile has more requests than it takes, or the budget
        /// is 0).
        budget: u64,
        /// The class of the tightest step (`None`: all classes).
        class: Option<MemoryClass>,
        /// The tightest step.
        step: u32,
        /// Live bytes of that class at that step.
        live_bytes: u64,
        /// Usable bytes of that class at that step.
        usable_bytes: u64,
    },
}

impl Verdict {
    /// Whether the verdict proves that the tile cannot be placed (as
    /// opposed to [`Verdict::Unknown`]).
    pub fn is_proof(&self) -> bool {
        !matches!(self, Verdict::Unknown { .. })
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let class_name =
            |c: &Option<MemoryClass>| c.map_or_else(|| "all classes".to_owned(), |c| c.to_string());
        match self {
            Verdict::BoundExceeded {
                class,
                step,
                needs_bytes,
            } => {
                let what = class_name(class);
                write!(
                    f,
                    "proved impossible by the lower bound: {what} needs {needs_bytes} bytes \
                     more at step {step}; shrink or shorten what is live there"
                )
            }
            Verdict::TooLarge { largest_gap } => write!(
                f,
                "proved impossible: the request is larger than any gap its class's ranges leave \
                 around the reservations ({largest_gap} bytes); split it or move reservations"
            ),
            Verdict::Exhausted {
                nodes,
                relaxed,
                class,
                step,
                live_bytes,
                usable_bytes,
            } => write!(
                f,
                "proved impossible by exhaustive search ({nodes} nodes{}): the live bytes fit \
                 but region boundaries, reservations, alignment or separation fragment the \
                 space; the tightest step is {step}, where {} holds {live_bytes} live bytes \
                 in {usable_bytes} usable; reduce what is live there or relax constraints",
                if *relaxed {
                    ", even without separation"
                } else {
                    ""
                },
                class_name(class)
            ),
            Verdict::Unknown {
                nodes,
                budget: 0,
                class,
                step,
                live_bytes,
                usable_bytes,
            } => write!(
                f,
                "undecided: no greedy pass placed the tile and the exact search did not run \
                 ({nodes} nodes: the tile has more requests than PlaceConfig::exact_max_requests \
                 or the node budget is 0); the tightest step is {step}, where {} holds \
                 {live_bytes} live bytes in {usable_bytes} usable; raise the limits or reduce \
                 what is live there",
                class_name(class)
            ),
            Verdict::Unknown {
                nodes,
                budget,
                class,
                step,
                live_bytes,
                usable_bytes,
            } => write!(
                f,
                "undecided: the exact search found no placement and no proof within its budget \
                 of {budget} nodes ({nodes} used); the tightest step is {step}, where {} holds \
                 {live_bytes} live bytes in {usable_bytes} usable; give the search more nodes \
                 (PlaceConfig::exact_node_budget) or reduce what is live there",
                class_name(class)
            ),
        }
    }
}

/// The full report of a tile that could not be placed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FitFailure {
    /// The tile.
    pub tile: TileId,
    /// The request that could not be placed.
    pub request: RequestId,
    /// Its class.
    pub class: MemoryClass,
    /// Its size.
    pub bytes: u32,
    /// Its alignment.
    pub alignment: u32,
    /// Its first live step.
    pub first_step: u32,
    /// Its last live step.
    pub last_step: u32,
    /// The ranges its class may use.
    pub allowed_ranges: Vec<(u32, u32)>,
    /// The step of its lifetime where the largest free gap is smallest.
    pub step: u32,
    /// Free gaps inside the allowed ranges at that step (never across a
    /// region boundary).
    pub free: Vec<(u32, u32)>,
    /// The largest of those gaps, in bytes.
    pub largest_free_gap: u32,
    /// What is live at that step.
    pub live: Vec<LiveRange>,
    /// Why it failed.
    pub verdict: Verdict,
    /// How many tiles no greedy pass placed. The exact search runs on them
    /// in problem order and stops at the first it cannot place, which this
    /// report is for; so at least one and at most this many tiles fail.
    pub failing_tiles: usize,
}

/// Why [`place`](crate::place), or another [`Placer`](crate::Placer),
/// failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PlaceError {
    /// The problem is malformed.
    #[error(transparent)]
    Invalid(#[from] ProblemError),
    /// A tile's requests were not placed: proved impossible, or undecided
    /// within the search budget ([`FitFailure::verdict`] says which).
    #[error(
        "{} did not place {} ({}, {} bytes, alignment {}, steps {}..={}): the largest free gap \
         in its ranges at step {} is {} bytes; {} ({} tile(s) left to the exact search)",
        .0.tile, .0.request, .0.class, .0.bytes, .0.alignment, .0.first_step, .0.last_step,
        .0.step, .0.largest_free_gap, .0.verdict, .0.failing_tiles
    )]
    DoesNotFit(Box<FitFailure>),
    /// The placement failed its own checker: a bug in this crate.
    #[error(
        "bug in ipu-alloc: the placement failed its checker with {} error(s), first: {}; \
         please report it with the problem",
        .0.len(),
        .0.first().map_or_else(String::new, ToString::to_string)
    )]
    CheckFailed(Vec<PlacementCheckError>),
    /// Another placer failed for a reason of its own.
    #[error("placer {placer} failed: {source}")]
    Placer {
        /// The placer's [`name`](crate::Placer::name).
        placer: String,
        /// Its cause.
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
}
