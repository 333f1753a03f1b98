//! The allocation fixtures in `fixtures/alloc`: zero-slack CSV instances
//! (capacity 1 MiB, optimum at the bound), the seed's failing tile, and a
//! tile of SigLIP so400m at batch 5 (`build-package --batch 5
//! --write-failed-tile`) and one of its text tower at batch 42 that the
//! exact search left undecided.

use ipu_alloc::{
    CsvProblem, MemoryMap, PlaceConfig, PlaceError, PlaceMethod, Problem, SolveConfig, SolveResult,
    TileProblem, Verdict, check_placement, place,
};

const N150: &str = include_str!("../../../../fixtures/alloc/zero-slack-n150-seed1.csv");
const N300: &str = include_str!("../../../../fixtures/alloc/zero-slack-n300-seed2.csv");
const N450: &str = include_str!("../../../../fixtures/alloc/zero-slack-n450-seed3.csv");
const SEED_TILE: &str = include_str!("../../../../fixtures/alloc/seed-tile69.json");
const SIGLIP_B5_TILE: &str = include_str!("../../../../fixtures/alloc/siglip-b5-tile723.json");
const SIGLIP_TEXT_B42_TILE: &str =
    include_str!("../../../../fixtures/alloc/siglip-text-b42-tile1186.json");

#[test]
fn zero_slack_fixtures_have_their_bound_at_the_capacity() {
    for (text, n) in [(N150, 150), (N300, 300), (N450, 450)] {
        let p = CsvProblem::parse(text).unwrap();
        assert_eq!(p.buffers.len(), n);
        assert_eq!(p.lower_bound(), 1 << 20);
    }
    // All three are solved at the bound by node budget alone.
    let config = SolveConfig {
        max_nodes: 2_000_000,
        timeout: None,
        parallel_search: false,
        ..SolveConfig::default()
    };
    for text in [N150, N300, N450] {
        let p = CsvProblem::parse(text).unwrap();
        let out = p.solve(1 << 20, &config);
        assert_eq!(out.result, SolveResult::Fits);
        p.check(1 << 20, &out.offsets.unwrap()).unwrap();
        assert_eq!(out.peak, p.lower_bound());
    }
}

#[test]
fn the_seed_tile_fixture_fails_with_an_explanation() {
    let tile: TileProblem = serde_json::from_str(SEED_TILE).unwrap();
    let problem = Problem {
        map: MemoryMap::ipu21(),
        tiles: vec![tile],
    };
    let Err(PlaceError::DoesNotFit(f)) = place(&problem, &PlaceConfig::default()) else {
        panic!("the seed tile must not fit");
    };
    assert_eq!(f.tile.as_u32(), 69);
    assert_eq!(f.free, vec![(491_520, 524_288), (524_288, 589_824)]);
    assert!(matches!(
        f.verdict,
        Verdict::TooLarge {
            largest_gap: 65_536
        }
    ));
    assert_eq!(f.live.len(), 2);
}

/// SigLIP so400m b5's tile 723: its weights, stacked for all 27 layers and
/// live throughout, fill the region below the interleaved one if a greedy
/// pass takes them first, and then a step's GEMM operands and partial sums,
/// which must keep to memory elements of their own, do not fit (the exact
/// search left it undecided after 1,000,000 nodes). Kept in the upper
/// region, they leave the lower one to the short-lived buffers, and a
/// greedy pass places the tile.
#[test]
fn a_tile_whose_resident_weights_crowd_the_lower_region_places_with_them_high() {
    let tile: TileProblem = serde_json::from_str(SIGLIP_B5_TILE).unwrap();
    let resident: Vec<_> = tile
        .requests
        .iter()
        .filter(|r| r.first_step == 0 && r.last_step == 78)
        .map(|r| r.id)
        .collect();
    assert!(resident.len() >= 4);
    let problem = Problem {
        map: MemoryMap::ipu21(),
        tiles: vec![tile],
    };
    let placement = place(&problem, &PlaceConfig::default()).expect("the tile places");
    check_placement(&problem, &placement).expect("the checker accepts it");
    let placed = &placement.tiles()[0];
    assert!(matches!(placed.method(), PlaceMethod::ResidentHigh(_)));
    // Every resident request is in the upper region.
    for id in resident {
        assert!(placed.address(id).expect("placed") >= 0x80000);
    }
    let bound = placed.bound().expect("a bound").peak_with_reservations;
    assert!(bound <= placed.achieved_peak_bytes());
}

/// SigLIP so400m's text tower at batch 42, tile 1186: the live bytes fit
/// at every step, but no split of the requests between region 0 (beside
/// the support) and region 1 fits every step, so the tile is impossible;
/// the exact search alone stopped at its budget, undecided.
#[test]
fn a_tile_no_split_between_the_regions_fits_is_proved_impossible() {
    let tile: TileProblem = serde_json::from_str(SIGLIP_TEXT_B42_TILE).unwrap();
    let problem = Problem {
        map: MemoryMap::ipu21(),
        tiles: vec![tile],
    };
    let Err(PlaceError::DoesNotFit(f)) = place(&problem, &PlaceConfig::default()) else {
        panic!("the tile must not fit");
    };
    assert_eq!(f.tile.as_u32(), 1186);
    let Verdict::Exhausted {
        relaxed,
        live_bytes,
        usable_bytes,
        ..
    } = f.verdict
    else {
        panic!("expected a proof by search, got {}", f.verdict);
    };
    assert!(relaxed);
    // Not a proof the lower bound could give: the bytes fit.
    assert!(live_bytes <= usable_bytes);
}

/// The placer's exact search recurses once per decision, so on a tile of
/// hundreds of requests that no greedy pass places it goes deeper than a
/// worker thread's stack may allow (SigLIP so400m at batch 8 with
/// `--alloc-effort 2000000` overflowed a pool thread's stack). It runs on
/// a thread of its own: `place_tile` succeeds here even when called from
/// a thread with a 48 KiB stack (the search on it overflows without its
/// own thread). The tile is a zero-slack guillotine cut
/// of 200 requests into exactly 256 KiB of standard memory.
#[test]
fn the_exact_search_of_a_tile_does_not_need_its_callers_stack() {
    use ipu_alloc::generate::zero_slack_grid;
    use ipu_alloc::{Request, RequestId, Reservation, place_tile};
    use ipu_layout::{MemoryClass, TileId};

    let (grain, width) = (256u64, 256u64 << 10);
    let (cut, _) = zero_slack_grid(7, 200, width, width, grain);
    let map = MemoryMap::ipu21();
    let ranges = map.class_ranges(MemoryClass::Ipu21Standard).to_vec();
    let (start, end) = *ranges
        .iter()
        .find(|(s, e)| u64::from(e - s) >= width)
        .expect("a standard range of 256 KiB");
    let window_end = start + width as u32;
    let mut reservations = vec![Reservation {
        start: window_end,
        end,
        steps: None,
        label: "outside the window".into(),
    }];
    for &(s, e) in ranges.iter().filter(|&&r| r != (start, end)) {
        reservations.push(Reservation {
            start: s,
            end: e,
            steps: None,
            label: "outside the window".into(),
        });
    }
    let requests = cut
        .buffers
        .iter()
        .enumerate()
        .map(|(i, b)| Request {
            id: RequestId::from_u32(i as u32),
            class: MemoryClass::Ipu21Standard,
            bytes: b.size as u32,
            alignment: 8,
            first_step: (b.lower / grain) as u32,
            last_step: (b.upper / grain) as u32 - 1,
            separate_from: Default::default(),
        })
        .collect();
    let tile = TileProblem {
        tile: TileId::from_u32(0),
        reservations,
        requests,
    };
    let requests = tile.requests.clone();
    let placed = std::thread::Builder::new()
        .stack_size(48 << 10)
        .spawn(move || {
            place_tile(&tile, &map, &PlaceConfig::default()).map_err(|f| format!("{:?}", f.verdict))
        })
        .expect("a thread")
        .join()
        .expect("the placer returns");
    let placed = placed.expect("the cut places");
    assert!(
        matches!(placed.method(), PlaceMethod::Exact { .. }),
        "{:?}",
        placed.method()
    );
    // Inside the window, and no two requests live together overlap.
    let at: Vec<(u64, &Request)> = requests
        .iter()
        .map(|r| (u64::from(placed.address(r.id).expect("placed")), r))
        .collect();
    for (i, &(a, r)) in at.iter().enumerate() {
        assert!(a >= u64::from(start) && a + u64::from(r.bytes) <= u64::from(window_end));
        for &(b, s) in &at[i + 1..] {
            let together = r.first_step <= s.last_step && s.first_step <= r.last_step;
            let apart = a + u64::from(r.bytes) <= b || b + u64::from(s.bytes) <= a;
            assert!(!together || apart, "{:?} and {:?} overlap", r.id, s.id);
        }
    }
}
