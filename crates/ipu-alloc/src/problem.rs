//! The placement problem as plain data, and its validation.
//!
//! A problem is per tile: fixed reservations and requests, each request with
//! a memory class, a size, an alignment, an inclusive lifetime in steps and
//! optional element-separation partners. Validation is its own function so
//! that every algorithm can assume well-formed input.

use ipu_layout::{MemoryClass, TileId};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::MemoryMap;

ipu_layout::define_id!(
    /// A request, unique within its tile (not globally).
    pub struct RequestId, "req"
);

/// A fixed range of tile memory that placement must avoid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// First reserved address.
    pub start: u32,
    /// One past the last reserved address.
    pub end: u32,
    /// The inclusive steps `first..=last` during which the range is in use;
    /// `None` means always.
    pub steps: Option<(u32, u32)>,
    /// What the range holds (runtime, code, exchange tables), for reports.
    pub label: String,
}

/// A piece of memory to place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The request's id, unique within its tile.
    pub id: RequestId,
    /// The memory class: which address ranges the request may use.
    pub class: MemoryClass,
    /// Size in bytes, including any access tail.
    pub bytes: u32,
    /// Required alignment of the address: a power of two.
    pub alignment: u32,
    /// First step the request is live.
    pub first_step: u32,
    /// Last step the request is live (inclusive).
    pub last_step: u32,
    /// Requests this one must not share a memory element with.
    pub separate_from: SmallVec<[RequestId; 2]>,
}

/// Everything to place on one tile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileProblem {
    /// The tile.
    pub tile: TileId,
    /// Fixed ranges to avoid.
    pub reservations: Vec<Reservation>,
    /// Requests to place.
    pub requests: Vec<Request>,
}

/// A whole placement problem: the map and every tile's requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The memory map every tile shares.
    pub map: MemoryMap,
    /// Per-tile problems; tiles are placed independently.
    pub tiles: Vec<TileProblem>,
}

/// Why a problem is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProblemError {
    /// Two requests of a tile share an id.
    #[error("{tile} has two requests with id {request}; give every request of a tile its own id")]
    DuplicateRequest {
        /// The tile.
        tile: TileId,
        /// The repeated id.
        request: RequestId,
    },
    /// An alignment is zero or not a power of two.
    #[error(
        "{tile} {request} asks for alignment {alignment}, which is not a power of two; \
         use 1, 2, 4, 8, ..."
    )]
    BadAlignment {
        /// The tile.
        tile: TileId,
        /// The request.
        request: RequestId,
        /// The alignment given.
        alignment: u32,
    },
    /// A lifetime ends before it starts.
    #[error(
        "{tile} {request} has lifetime {first}..={last}, which ends before it starts; \
         give last_step >= first_step"
    )]
    BadLifetime {
        /// The tile.
        tile: TileId,
        /// The request.
        request: RequestId,
        /// First step.
        first: u32,
        /// Last step.
        last: u32,
    },
    /// A separation partner is not a request of the tile, or is the request itself.
    #[error(
        "{tile} {request} must be separated from {partner}, which is not another request of \
         this tile; fix separate_from"
    )]
    UnknownPartner {
        /// The tile.
        tile: TileId,
        /// The request.
        request: RequestId,
        /// The unknown partner.
        partner: RequestId,
    },
    /// A reservation is empty, outside SRAM or has a backwards lifetime.
    #[error(
        "{tile} reservation `{label}` [{start:#x}, {end:#x}) is empty, outside SRAM or has a \
         lifetime that ends before it starts; fix the reservation"
    )]
    BadReservation {
        /// The tile.
        tile: TileId,
        /// The reservation's label.
        label: String,
        /// First address.
        start: u32,
        /// One past the last address.
        end: u32,
    },
}

/// Checks that a problem is well formed: ids unique per tile, alignments
/// powers of two, lifetimes ordered, partners known, reservations inside SRAM.
pub fn validate(problem: &Problem) -> Result<(), ProblemError> {
    for tile in &problem.tiles {
        validate_tile(tile, &problem.map)?;
    }
    Ok(())
}

/// [`validate`] for one tile.
pub fn validate_tile(tile: &TileProblem, map: &MemoryMap) -> Result<(), ProblemError> {
    let t = tile.tile;
    for r in &tile.reservations {
        let steps_ok = r.steps.is_none_or(|(a, b)| a <= b);
        if r.start >= r.end || r.start < map.sram_start() || r.end > map.sram_end() || !steps_ok {
            return Err(ProblemError::BadReservation {
                tile: t,
                label: r.label.clone(),
                start: r.start,
                end: r.end,
            });
        }
    }
    let mut ids: Vec<RequestId> = tile.requests.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(ProblemError::DuplicateRequest {
            tile: t,
            request: w[0],
        });
    }
    for r in &tile.requests {
        if !r.alignment.is_power_of_two() {
            return Err(ProblemError::BadAlignment {
                tile: t,
                request: r.id,
                alignment: r.alignment,
            });
        }
        if r.last_step < r.first_step {
            return Err(ProblemError::BadLifetime {
                tile: t,
                request: r.id,
                first: r.first_step,
                last: r.last_step,
            });
        }
        for &p in &r.separate_from {
            if p == r.id || ids.binary_search(&p).is_err() {
                return Err(ProblemError::UnknownPartner {
                    tile: t,
                    request: r.id,
                    partner: p,
                });
            }
        }
    }
    Ok(())
}
