//! GEMM grids: every candidate the planner offers for the SigLIP GEMMs
//! builds valid layouts whose shards match the estimate.

use ipu_layout::{
    ElementOrder, Fp8Format, MemoryClass, Precision, RedistributeConfig, TileId, redistribute,
};
use ipu_package::plan::{
    CostModel, GemmProblem, gemm_candidates, gemm_layouts, reduce_layout, tensor_type,
};

fn fp8() -> Precision {
    Precision::F8 {
        format: Fp8Format::F143,
        scale: -4,
    }
}

/// SigLIP so400m's GEMMs at batch 2: the patch embedding and the four of
/// an encoder layer.
pub(crate) fn siglip_gemms() -> Vec<(&'static str, GemmProblem)> {
    siglip_gemms_at(2)
}

/// SigLIP so400m's GEMMs at `batch` images.
pub(crate) fn siglip_gemms_at(batch: u64) -> Vec<(&'static str, GemmProblem)> {
    let problem = |inner, columns| GemmProblem {
        outer: vec![batch, 729],
        inner,
        columns,
        left: fp8(),
        right: fp8(),
        output: Precision::F16,
        amp_columns: CostModel::ipu21().amp_columns,
        residual: None,
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

/// Split-K partial sums are reduced in the grid's own blocks: every tile
/// gathers its rows of its column block from the other inner blocks, in a
/// few runs per tile instead of one per row, column block and inner
/// block.
#[test]
fn reductions_gather_few_runs_per_tile() {
    let cost = CostModel::ipu21();
    for (name, problem) in siglip_gemms() {
        let candidates = gemm_candidates(&problem, 1472, &cost);
        for (grid, _) in candidates.iter().filter(|(g, _)| g.pk > 1).take(4) {
            let layouts = gemm_layouts(&problem, *grid).unwrap();
            let Some(reduced) = reduce_layout(&problem, *grid, Precision::F16).unwrap() else {
                continue;
            };
            let mut extents = vec![u64::from(grid.pk)];
            extents.extend_from_slice(reduced.shape().extents());
            let gathered = tensor_type(
                &extents,
                problem.output,
                ElementOrder::RowMajor,
                MemoryClass::Ipu21Standard,
                reduced.tiling().clone(),
            )
            .unwrap();
            let fragments =
                redistribute(&layouts.output, &gathered, &RedistributeConfig::default())
                    .unwrap()
                    .into_fragments();
            let (pk, batch) = (u64::from(grid.pk), problem.outer[0]);
            // Each tile reads from each inner block one run per batch row
            // group, and from at most one more where a ragged row split
            // moved its part onto the next row block.
            let bound = grid.tiles() * pk * batch * 2;
            assert!(
                fragments.len() as u64 <= bound,
                "{name} {grid:?}: {} fragments, bound {bound}",
                fragments.len()
            );
            let rows = problem.outer.iter().product::<u64>();
            let old = rows * u64::from(grid.pn) * pk;
            assert!(
                fragments.len() as u64 * 2 < old,
                "{name} {grid:?}: {} fragments against {old} on an element layout",
                fragments.len()
            );
        }
    }
}
