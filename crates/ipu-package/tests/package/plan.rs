//! GEMM grids: every candidate the planner offers for the SigLIP GEMMs
//! builds valid layouts whose shards match the estimate.

use ipu_layout::{Fp8Format, Precision, TileId};
use ipu_package::plan::{CostModel, GemmProblem, gemm_candidates, gemm_layouts};

fn fp8() -> Precision {
    Precision::F8 {
        format: Fp8Format::F143,
        scale: -4,
    }
}

fn siglip_gemms() -> Vec<(&'static str, GemmProblem)> {
    let problem = |inner, columns| GemmProblem {
        outer: vec![2, 729],
        inner,
        columns,
        left: fp8(),
        right: fp8(),
        output: Precision::F16,
    };
    vec![
        ("patch", problem(588, 1152)),
        ("qkv", problem(1152, 3456)),
        ("proj", problem(1152, 1152)),
        ("fc1", problem(1152, 4304)),
        ("fc2", problem(4304, 1152)),
    ]
}

#[test]
fn candidates_build_layouts_matching_their_estimates() {
    let cost = CostModel::ipu21();
    for (name, problem) in siglip_gemms() {
        let candidates = gemm_candidates(&problem, 1472, &cost);
        assert!(!candidates.is_empty(), "{name}");
        // Costs are sorted.
        assert!(
            candidates
                .windows(2)
                .all(|w| w[0].1.cycles() <= w[1].1.cycles())
        );
        for (grid, estimate) in candidates.iter().take(8) {
            assert!(grid.tiles() <= 1472);
            let layouts =
                gemm_layouts(&problem, *grid).unwrap_or_else(|e| panic!("{name} {grid:?}: {e}"));
            // The estimate's transient bytes bound the real left + output shards.
            let left = layouts.left.max_shard_bytes();
            let out = layouts.output.max_shard_bytes();
            assert!(left + out <= estimate.transient_bytes, "{name} {grid:?}");
            // Resident weights hold each element once.
            let resident: u64 = layouts
                .right_resident
                .shards()
                .map(|s| s.data_elements())
                .sum();
            assert_eq!(resident, problem.inner * problem.columns, "{name} {grid:?}");
            // Tile 0 holds block (0, 0, 0) of every operand.
            let shard = layouts.left.shard(TileId::from_u32(0)).unwrap();
            assert_eq!(shard.axes.last().unwrap().start, 0);
        }
    }
}
