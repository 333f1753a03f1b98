//! The seed's failure as a regression: a 70656-byte standard request beside
//! a free range (491520, 589824) that the region boundary at 0x80000 splits
//! into 32768 + 65536 bytes must not be placed across it.

use ipu_alloc::{PlaceConfig, PlaceError, Verdict, check_placement, place};
use ipu_layout::MemoryClass;

use crate::support::{one_tile, req, reserve};

fn seed_problem(bytes: u32) -> ipu_alloc::Problem {
    // Everything but [491520, 589824) is reserved.
    one_tile(
        vec![
            reserve(0x4c000, 491_520, "below"),
            reserve(589_824, 0xe7bb0, "above"),
        ],
        vec![req(0, MemoryClass::Ipu21Standard, bytes, 8, 174, 175)],
    )
}

#[test]
fn seed_request_is_not_placed_across_the_region_boundary() {
    let problem = seed_problem(70_656);
    let err = place(&problem, &PlaceConfig::default()).unwrap_err();
    let PlaceError::DoesNotFit(f) = &err else {
        panic!("expected DoesNotFit, got {err}");
    };
    assert_eq!(f.bytes, 70_656);
    assert_eq!(f.class, MemoryClass::Ipu21Standard);
    assert_eq!((f.first_step, f.last_step), (174, 175));
    // The free list is split at the boundary: no 96 KiB hole.
    assert_eq!(f.free, vec![(491_520, 524_288), (524_288, 589_824)]);
    assert_eq!(f.largest_free_gap, 65_536);
    // The bytes fit in total, so this is fragmentation, not too much data;
    // the request alone does not fit any gap the reservations leave.
    assert!(
        matches!(
            f.verdict,
            Verdict::TooLarge {
                largest_gap: 65_536
            }
        ),
        "{:?}",
        f.verdict
    );
    let text = err.to_string();
    assert!(
        text.contains("tile0") && text.contains("req0") && text.contains("65536"),
        "{text}"
    );
}

#[test]
fn a_request_that_fits_above_the_boundary_goes_there() {
    let problem = seed_problem(60_000);
    let placement = place(&problem, &PlaceConfig::default()).unwrap();
    let addr = placement
        .address(0, ipu_alloc::RequestId::from_u32(0))
        .unwrap();
    assert!(addr >= 524_288 && addr + 60_000 <= 589_824, "{addr}");
    check_placement(&problem, &placement).unwrap();
}

#[test]
fn two_requests_live_together_in_the_split_range_are_fragmented_not_too_big() {
    // 40000 + 40000 <= 98304 free bytes, but each half holds only one of
    // them... and the lower half (32768) holds neither: proved by search.
    let mut problem = seed_problem(40_000);
    problem.tiles[0]
        .requests
        .push(req(1, MemoryClass::Ipu21Standard, 40_000, 8, 175, 176));
    let err = place(&problem, &PlaceConfig::default()).unwrap_err();
    let PlaceError::DoesNotFit(f) = &err else {
        panic!("expected DoesNotFit, got {err}");
    };
    assert!(
        matches!(f.verdict, Verdict::Exhausted { .. }),
        "{:?}",
        f.verdict
    );
    assert!(err.to_string().contains("fragment"), "{err}");
}

#[test]
fn too_much_live_data_is_proved_by_the_bound() {
    let mut problem = seed_problem(60_000);
    problem.tiles[0]
        .requests
        .push(req(1, MemoryClass::Ipu21Standard, 60_000, 8, 175, 175));
    let err = place(&problem, &PlaceConfig::default()).unwrap_err();
    let PlaceError::DoesNotFit(f) = &err else {
        panic!("expected DoesNotFit, got {err}");
    };
    assert_eq!(
        f.verdict,
        Verdict::BoundExceeded {
            class: None,
            step: 175,
            needs_bytes: 120_000 - 98_304
        }
    );
}

#[test]
fn separated_requests_that_cannot_fit_without_separation_are_proved() {
    // The fragmented case above with the two requests as separation
    // partners: the search with partners is not complete and proves
    // nothing, the one without them proves the tile impossible.
    let mut problem = seed_problem(40_000);
    let mut second = req(1, MemoryClass::Ipu21Standard, 40_000, 8, 175, 176);
    second.separate_from.push(ipu_alloc::RequestId::from_u32(0));
    problem.tiles[0].requests.push(second);
    let err = place(&problem, &PlaceConfig::default()).unwrap_err();
    let PlaceError::DoesNotFit(f) = &err else {
        panic!("expected DoesNotFit, got {err}");
    };
    assert!(
        matches!(f.verdict, Verdict::Exhausted { relaxed: true, .. }),
        "{:?}",
        f.verdict
    );
    assert!(f.verdict.is_proof());
    assert!(err.to_string().contains("even without separation"), "{err}");
}

#[test]
fn an_undecided_tile_says_so_and_names_the_budget() {
    let verdict = Verdict::Unknown {
        nodes: 200_000,
        budget: 200_000,
        class: Some(MemoryClass::Ipu21Interleaved),
        step: 31,
        live_bytes: 400_000,
        usable_bytes: 410_000,
    };
    assert!(!verdict.is_proof());
    let text = verdict.to_string();
    assert!(text.starts_with("undecided"), "{text}");
    assert!(
        text.contains("200000 nodes") && text.contains("step is 31"),
        "{text}"
    );
    assert!(text.contains("exact_node_budget"), "{text}");
}
