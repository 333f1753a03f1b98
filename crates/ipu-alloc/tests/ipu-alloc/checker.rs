//! Known-bad placements that `check_placement` must reject, each with the
//! error it must name, beside the good placement they were derived from.

use ipu_alloc::{
    PlaceConfig, Placement, PlacementCheckError as E, Problem, RequestId, check_placement, place,
};
use ipu_layout::{MemoryClass, TileId};

use crate::support::{one_tile, req, reserve};

fn problem() -> Problem {
    let mut p = one_tile(
        vec![reserve(0x4c000, 0x50000, "runtime")],
        vec![
            req(0, MemoryClass::Ipu21Standard, 4096, 8, 0, 3),
            req(1, MemoryClass::Ipu21Standard, 4096, 8, 2, 5),
            req(2, MemoryClass::Ipu21Interleaved, 8192, 32, 0, 5),
            req(3, MemoryClass::Ipu21Interleaved, 1024, 32, 1, 1),
        ],
    );
    // req3 (GEMM output) must not share an element with req2 (weights).
    p.tiles[0].requests[3]
        .separate_from
        .push(RequestId::from_u32(2));
    p
}

fn given(entries: &[(u32, u32)]) -> Placement {
    Placement::from_addresses(vec![(
        TileId::from_u32(0),
        entries
            .iter()
            .map(|&(id, a)| (RequestId::from_u32(id), a))
            .collect(),
    )])
}

const GOOD: [(u32, u32); 4] = [(0, 0x50000), (1, 0x51000), (2, 0x80000), (3, 0x88000)];

fn errors(entries: &[(u32, u32)]) -> Vec<E> {
    check_placement(&problem(), &given(entries))
        .err()
        .unwrap_or_default()
}

#[test]
fn the_good_placement_passes_and_place_agrees() {
    assert_eq!(errors(&GOOD), vec![]);
    let p = problem();
    let placed = place(&p, &PlaceConfig::default()).unwrap();
    check_placement(&p, &placed).unwrap();
}

#[test]
fn overlap_of_live_requests_is_rejected() {
    let e = errors(&[(0, 0x50000), (1, 0x50800), (2, 0x80000), (3, 0x88000)]);
    assert!(e.iter().any(|e| matches!(e, E::Overlap { .. })), "{e:?}");
}

#[test]
fn overlap_of_requests_with_disjoint_lifetimes_is_fine() {
    // req0 (0..=3) and req3 (1..=1) overlap in time; req0 and a request
    // living only at 4..=5 do not: share bytes with req1's lifetime instead.
    let mut p = problem();
    p.tiles[0].requests[1].first_step = 4;
    let placement = given(&[(0, 0x50000), (1, 0x50000), (2, 0x80000), (3, 0x88000)]);
    check_placement(&p, &placement).unwrap();
}

#[test]
fn misalignment_is_rejected() {
    let e = errors(&[(0, 0x50004), (1, 0x51000), (2, 0x80000), (3, 0x88000)]);
    assert!(
        e.iter().any(|e| matches!(
            e,
            E::Misaligned {
                address: 0x50004,
                ..
            }
        )),
        "{e:?}"
    );
}

#[test]
fn interleaved_in_region0_is_rejected() {
    let e = errors(&[(0, 0x50000), (1, 0x51000), (2, 0x60000), (3, 0x88000)]);
    assert!(
        e.iter().any(|e| matches!(e, E::OutsideClass { .. })),
        "{e:?}"
    );
}

#[test]
fn crossing_the_region_boundary_is_rejected() {
    let e = errors(&[(0, 0x7f800), (1, 0x51000), (2, 0x90000), (3, 0x88000)]);
    assert!(
        e.iter().any(|e| matches!(e, E::CrossesRegion { .. })),
        "{e:?}"
    );
    assert!(
        e.iter().any(|e| matches!(e, E::OutsideClass { .. })),
        "{e:?}"
    );
}

#[test]
fn beyond_the_loader_limit_is_rejected() {
    let e = errors(&[(0, 0x50000), (1, 0x51000), (2, 0xe7b00), (3, 0x88000)]);
    assert!(
        e.iter().any(|e| matches!(e, E::OutsideClass { .. })),
        "{e:?}"
    );
}

#[test]
fn overlapping_a_reservation_is_rejected() {
    let e = errors(&[(0, 0x4f000), (1, 0x51000), (2, 0x80000), (3, 0x88000)]);
    assert!(
        e.iter().any(
            |e| matches!(e, E::OverlapsReservation { reservation, .. } if reservation == "runtime")
        ),
        "{e:?}"
    );
}

#[test]
fn sharing_an_element_with_a_separated_request_is_rejected() {
    // 0x80000 + 8192 and 0x84000 do not overlap but share the 32 KiB pair.
    let e = errors(&[(0, 0x50000), (1, 0x51000), (2, 0x80000), (3, 0x84000)]);
    assert!(
        e.iter().any(|e| matches!(
            e,
            E::SharesElement {
                element: 0x80000,
                ..
            }
        )),
        "{e:?}"
    );
}

#[test]
fn missing_duplicate_and_unknown_requests_are_rejected() {
    let e = errors(&[
        (0, 0x50000),
        (0, 0x52000),
        (2, 0x80000),
        (3, 0x88000),
        (9, 0x90000),
    ]);
    assert!(e.iter().any(|e| matches!(e, E::Missing { .. })), "{e:?}");
    assert!(e.iter().any(|e| matches!(e, E::Duplicate { .. })), "{e:?}");
    assert!(e.iter().any(|e| matches!(e, E::Unknown { .. })), "{e:?}");
}

#[test]
fn wrong_tiles_are_rejected_and_every_error_is_collected() {
    let placement = Placement::from_addresses(vec![]);
    let e = check_placement(&problem(), &placement).unwrap_err();
    assert!(matches!(
        e[0],
        E::TileCount {
            expected: 1,
            got: 0
        }
    ));
    let placement = Placement::from_addresses(vec![(TileId::from_u32(5), vec![])]);
    let e = check_placement(&problem(), &placement).unwrap_err();
    assert!(matches!(e[0], E::TileMismatch { .. }));
    // Several defects at once are all reported.
    let e = errors(&[(0, 0x50004), (1, 0x50000), (2, 0x60000), (3, 0x80000)]);
    assert!(e.len() >= 3, "{e:?}");
}
