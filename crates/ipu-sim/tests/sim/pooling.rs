//! A gather from a `[batch, tokens, d]` activation (CLIP's pooled row):
//! the reference picks row `b·tokens + p` of the flattened table, and a
//! package built on a few tile counts gives the same rows on the tile
//! model, with the estimate equal to its count; an index past the rows is
//! a typed error.

use ipu_layout::Precision;
use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::values::ValueSet;
use ipu_package::graph::{GraphBuilder, Op, TensorKind};
use ipu_sim::tiles::{RunConfig, run_package_with};

const F32: Precision = Precision::F32;

#[test]
fn a_gather_from_a_batch_of_token_rows_picks_each_texts_row() {
    let (batch, tokens, d) = (3u64, 5u64, 8u64);
    let mut b = GraphBuilder::new("pool");
    let x = b.tensor("x", [batch, tokens, d], F32, TensorKind::Input);
    let rows = b.tensor("rows", [batch], F32, TensorKind::Input);
    let y = b.tensor("y", [batch, d], F32, TensorKind::Output);
    b.op(Op::Gather {
        table: x,
        indices: rows,
        output: y,
    });
    let graph = b.finish().expect("valid");
    let table: Vec<f32> = (0..batch * tokens * d).map(|i| i as f32 * 0.5).collect();
    let picks = [2u64, 0, 4];
    let index: Vec<f32> = picks
        .iter()
        .enumerate()
        .map(|(t, &p)| (t as u64 * tokens + p) as f32)
        .collect();
    let mut inputs = ValueSet::new();
    inputs.insert(x, table.clone());
    inputs.insert(rows, index.clone());
    let reference = ipu_sim::evaluate(&graph, &inputs).expect("evaluates");
    let want: Vec<f32> = index
        .iter()
        .flat_map(|&r| table[r as usize * d as usize..][..d as usize].to_vec())
        .collect();
    assert_eq!(reference.get(y).expect("y"), want.as_slice());
    for tiles in [4, 16] {
        let config = BuildConfig {
            tiles: Some(tiles),
            ..BuildConfig::default()
        };
        let package = build_package(&graph, &config, &Stages::in_memory())
            .unwrap_or_else(|e| panic!("{tiles} tiles: {e}"));
        let run = RunConfig {
            check_ops: true,
            ..RunConfig::default()
        };
        let (out, _) = run_package_with(&package, &graph, &inputs, &run)
            .unwrap_or_else(|e| panic!("{tiles} tiles: {e}"));
        assert_eq!(out.get(y).expect("y"), want.as_slice(), "{tiles} tiles");
        crate::cycles::assert_estimate_is_the_count(
            &graph,
            &package,
            &format!("pool on {tiles} tiles"),
        );
    }
    // Row 15 is past the 15 rows.
    inputs.insert(rows, vec![0.0, 15.0, 1.0]);
    assert!(ipu_sim::evaluate(&graph, &inputs).is_err());
}
