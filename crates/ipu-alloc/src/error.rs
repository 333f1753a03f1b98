//! Placement failures that explain themselves.
//!
//! A failure names the tile, the request, its class, size, alignment and
//! lifetime, the class's allowed ranges, the free gaps and the live set at
//! the step where the request fits worst, and a verdict that tells "simply
//! too big" (the lower bound proves it) from "fragmented".

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
    /// The live bytes fit but no placement was found: fragmentation by
    /// region boundaries, reservations, alignment or separation.
    Fragmented {
        /// Whether the exact search proved that no placement exists.
        proved: bool,
        /// Exact-search nodes used.
        nodes: u64,
    },
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::BoundExceeded {
                class,
                step,
                needs_bytes,
            } => {
                let what = class.map_or_else(|| "all classes".to_owned(), |c| c.to_string());
                write!(
                    f,
                    "the lower bound proves the tile infeasible: {what} needs {needs_bytes} bytes \
                     more at step {step}; shrink or shorten what is live there"
                )
            }
            Verdict::TooLarge { largest_gap } => write!(
                f,
                "the request is larger than any gap its class's ranges leave around the \
                 reservations ({largest_gap} bytes); split it or move reservations"
            ),
            Verdict::Fragmented {
                proved: true,
                nodes,
            } => write!(
                f,
                "the live bytes fit but exhaustive search ({nodes} nodes) proved that no \
                 placement exists: region boundaries, reservations, alignment or separation \
                 fragment the space; reduce live sizes or relax constraints"
            ),
            Verdict::Fragmented {
                proved: false,
                nodes,
            } => write!(
                f,
                "the live bytes fit, so this is fragmentation; the exact search found no \
                 placement within {nodes} nodes; raise PlaceConfig::exact_node_budget or \
                 reduce live sizes"
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
    /// A tile's requests do not fit.
    #[error(
        "{} cannot place {} ({}, {} bytes, alignment {}, steps {}..={}): the largest free gap \
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
