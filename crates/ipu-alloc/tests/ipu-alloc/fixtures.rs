//! The allocation fixtures in `fixtures/alloc`: zero-slack CSV instances
//! (capacity 1 MiB, optimum at the bound) and the seed's failing tile.

use ipu_alloc::{
    CsvProblem, MemoryMap, PlaceConfig, PlaceError, Problem, SolveConfig, SolveResult, TileProblem,
    Verdict, place,
};

const N150: &str = include_str!("../../../../fixtures/alloc/zero-slack-n150-seed1.csv");
const N300: &str = include_str!("../../../../fixtures/alloc/zero-slack-n300-seed2.csv");
const N450: &str = include_str!("../../../../fixtures/alloc/zero-slack-n450-seed3.csv");
const SEED_TILE: &str = include_str!("../../../../fixtures/alloc/seed-tile69.json");

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
