//! Small builders shared by the tests.

use ipu_alloc::{MemoryMap, Problem, Request, RequestId, Reservation, TileProblem};
use ipu_layout::{MemoryClass, TileId};
use smallvec::SmallVec;

/// A request with no separation partners.
pub fn req(id: u32, class: MemoryClass, bytes: u32, align: u32, first: u32, last: u32) -> Request {
    Request {
        id: RequestId::from_u32(id),
        class,
        bytes,
        alignment: align,
        first_step: first,
        last_step: last,
        separate_from: SmallVec::new(),
    }
}

/// An always-live reservation.
pub fn reserve(start: u32, end: u32, label: &str) -> Reservation {
    Reservation {
        start,
        end,
        steps: None,
        label: label.to_owned(),
    }
}

/// A one-tile IPU21 problem.
pub fn one_tile(reservations: Vec<Reservation>, requests: Vec<Request>) -> Problem {
    Problem {
        map: MemoryMap::ipu21(),
        tiles: vec![TileProblem {
            tile: TileId::from_u32(0),
            reservations,
            requests,
        }],
    }
}
