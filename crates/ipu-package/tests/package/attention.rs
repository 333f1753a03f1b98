//! Attention plans: the AMP attention's grids cover every (pair, query,
//! key) once, its layouts hold what its codelets read, its memory estimate
//! bounds the buffers it places, and SigLIP b2 gets an AMP plan within the
//! budget that the step model prefers to the vector attention.

use ipu_layout::{Precision, TileId};
use ipu_package::graph::parse_fixture;
use ipu_package::lower::{AttentionUnit, LowerConfig, lower};
use ipu_package::plan::{
    AmpAttention, AmpAttentionScorer, AttentionShape, CostModel, KEY_BLOCK, amp_attention_grids,
    amp_attention_layouts, attention_grid, choose_amp_attention, padded_head_dim, pass_rows,
    probs_over_scores, sums_on_amp, vector_attention_cycles,
};
use ipu_package::program::{Codelet, WalkEvent};
use proptest::prelude::*;

use crate::fixture_text;

fn siglip_b2() -> AttentionShape {
    AttentionShape {
        batch: 2,
        tq: 729,
        tk: 729,
        hidden: 1152,
        heads: 16,
        queries_scaled: false,
        values: Precision::F16,
        probs: Precision::F16,
    }
}

#[test]
fn every_grid_covers_each_pair_query_and_key_once() {
    let a = AttentionShape {
        batch: 2,
        tq: 37,
        tk: 53,
        hidden: 64,
        heads: 4,
        queries_scaled: false,
        values: Precision::F16,
        probs: Precision::F16,
    };
    let d = a.head_dim();
    let grids = amp_attention_grids(&a, 64);
    assert_eq!(
        grids.len() as u64,
        (64 / 8u64).min(a.tk.div_ceil(KEY_BLOCK))
    );
    for grid in grids {
        assert_eq!((grid.pb, grid.ph), (2, 4));
        for passes in [1, 3] {
            let plan = AmpAttention {
                grid,
                passes,
                scores: Precision::F32,
                blocks: Precision::F16,
            };
            let lay = amp_attention_layouts(&a, plan, Precision::F16).expect("layouts");
            assert_eq!(lay.out_part.precision(), Precision::F16);
            assert_eq!(lay.out_combine.precision(), Precision::F16);
            let mut seen = vec![0u8; (a.batch * a.heads * a.tq * a.tk) as usize];
            let tiles = lay.q.tiling().tile_count();
            for t in 0..tiles {
                let tile = TileId::from_u32(t);
                let (q, k, v) = (
                    lay.q.shard(tile).unwrap(),
                    lay.k.shard(tile).unwrap(),
                    lay.v.shard(tile).unwrap(),
                );
                // One pair, whole head columns padded to the AMP's 16.
                assert_eq!(q.axes[0].len(), 1);
                assert_eq!(q.axes[2].len(), d);
                assert_eq!(q.axes[2].width, padded_head_dim(&a));
                assert_eq!(
                    (k.axes[0].start, k.axes[2].start),
                    (q.axes[0].start, q.axes[2].start)
                );
                assert_eq!(k, v);
                assert_eq!(k.axes[2].width, d);
                assert_eq!(k.axes[1].width % KEY_BLOCK, 0);
                // The scratch holds a pass of scores and probabilities, the
                // panels all keys and values.
                let keys_t = lay.keys_t.shard(tile).unwrap();
                assert!(keys_t.axes[2].width >= k.axes[1].width);
                assert_eq!(keys_t.axes[1].width, padded_head_dim(&a));
                let values = lay.values.shard(tile).unwrap();
                assert!(values.axes[1].width >= k.axes[1].width);
                assert_eq!(values.axes[2].width, padded_head_dim(&a));
                let scores = lay.scores.shard(tile).unwrap();
                let longest = pass_rows(q.axes[1].len(), passes).max().unwrap_or(0);
                assert!(scores.axes[1].width >= longest && scores.axes[2].width >= k.axes[1].width);
                let out = lay.out_part.shard(tile).unwrap();
                assert_eq!(out.axes[2], q.axes[1]);
                assert_eq!(out.axes[3].width, padded_head_dim(&a));
                let (b, h) = (q.axes[0].start, q.axes[2].start / d);
                for i in q.axes[1].start..q.axes[1].end {
                    for j in k.axes[1].start..k.axes[1].end {
                        let at = ((b * a.heads + h) * a.tq + i) * a.tk + j;
                        seen[at as usize] += 1;
                    }
                }
                // The block's statistics lie on the same tile, one per row.
                let stat = lay.stat_part.shard(tile).unwrap();
                assert_eq!((stat.axes[1].start, stat.axes[2].start), (b, h));
                assert_eq!(stat.axes[3], q.axes[1]);
                assert_eq!(stat.axes[0], out.axes[0]);
            }
            assert!(
                seen.iter().all(|&n| n == 1),
                "{grid:?}: each (pair, query, key) once"
            );
        }
    }
}

#[test]
fn the_memory_estimate_bounds_the_buffers_of_the_blocks_step() {
    let a = siglip_b2();
    let cost = CostModel::ipu21();
    // The row maxima, and the sums where the blocks do not hold them
    // (SigLIP's head dimension, 72, leaves the AMP a column for them).
    assert!(sums_on_amp(&a));
    let stats = if sums_on_amp(&a) { 1 } else { 2 };
    for (scores, blocks) in [
        (Precision::F32, Precision::F32),
        (Precision::F32, Precision::F16),
        (Precision::F16, Precision::F16),
    ] {
        let scorer = AmpAttentionScorer::new(a, scores, blocks, &cost);
        for grid in amp_attention_grids(&a, 1472).into_iter().step_by(5) {
            for passes in [1, 2, 4] {
                let plan = AmpAttention {
                    grid,
                    passes,
                    scores,
                    blocks,
                };
                let lay = amp_attention_layouts(&a, plan, Precision::F16).expect("layouts");
                let bytes = |ts: &[&ipu_layout::TensorType]| -> u64 {
                    ts.iter().map(|t| t.max_shard_bytes()).sum()
                };
                let panels_step = bytes(&[&lay.q, &lay.k, &lay.v, &lay.keys_t, &lay.values]);
                // F16 probabilities are written over the scores, in their
                // buffer.
                let probs = if probs_over_scores(&a, scores) {
                    0
                } else {
                    lay.probs.max_shard_bytes()
                };
                let blocks_step =
                    bytes(&[&lay.q, &lay.keys_t, &lay.values, &lay.scores, &lay.out_part])
                        + probs
                        + stats * lay.stat_part.max_shard_bytes();
                let estimate = scorer.bytes_per_tile(grid, passes);
                assert!(
                    panels_step.max(blocks_step) <= estimate,
                    "{grid:?} in {passes} passes: {panels_step} and {blocks_step} bytes placed, {estimate} estimated"
                );
                if grid.s > 1 {
                    let gather = lay.out_part.max_shard_bytes()
                        + stats * lay.stat_part.max_shard_bytes()
                        + lay.out_combine.max_shard_bytes()
                        + stats * lay.stat_combine.max_shard_bytes();
                    assert!(gather <= estimate, "{grid:?}: gather {gather} > {estimate}");
                }
            }
        }
    }
}

#[test]
fn siglip_b2_attention_runs_on_the_amp_within_the_budget() {
    let a = siglip_b2();
    let cost = CostModel::ipu21();
    let budget = 160 * 1024;
    let (plan, cycles, fits) = choose_amp_attention(&a, 1472, budget, &cost).expect("a plan");
    assert!(fits, "{plan:?}");
    assert_eq!((plan.grid.pb, plan.grid.ph), (2, 16));
    assert!(plan.grid.tiles() <= 1472);
    let scorer = AmpAttentionScorer::new(a, plan.scores, plan.blocks, &cost);
    assert!(scorer.bytes_per_tile(plan.grid, plan.passes) <= budget);
    let vector = vector_attention_cycles(
        &a,
        attention_grid(&a, 2, 1472, budget, &cost),
        2,
        true,
        &cost,
    );
    eprintln!("SigLIP b2 attention: AMP {plan:?} {cycles:?}, vector {vector:?}");
    assert!(cycles.total() < vector.total());
    // Every step is costed: the blocks cost at least both products at the
    // AMP's F16 peak.
    let (rq, rk) = (
        729u64.div_ceil(u64::from(plan.grid.gq)),
        16 * 46u64.div_ceil(u64::from(plan.grid.s)),
    );
    assert!(cycles.blocks >= 2 * rq * rk * padded_head_dim(&a) / 64);
    assert!(cycles.operands > 0 && cycles.combine > 0);
}

#[test]
fn auto_keeps_the_vector_attention_where_the_amp_is_slower_or_cannot_run() {
    // tiny-2l-h64: the vector blocks are cheaper by the step model;
    // micro-1l-h32's softmax is F32, which the AMP attention does not do.
    for (name, tiles) in [("tiny-2l-h64.json", 64), ("micro-1l-h32.json", 16)] {
        let graph = parse_fixture(&fixture_text(name)).expect("parses");
        for (unit, amp_expected) in [
            (AttentionUnit::Auto, false),
            (AttentionUnit::Vector, false),
            (AttentionUnit::Amp, name.starts_with("tiny")),
        ] {
            let config = LowerConfig {
                tiles,
                attention: unit,
                ..LowerConfig::default()
            };
            let program = lower(&graph, &config).expect("lowers");
            let mut softmax = 0;
            let mut blocks = 0;
            for event in program.walk() {
                if let WalkEvent::Compute(step, _) = event {
                    for (_, c) in &step.calls {
                        match c {
                            Codelet::AttentionSoftmax { .. } => softmax += 1,
                            Codelet::AttentionBlock { .. } => blocks += 1,
                            _ => {}
                        }
                    }
                }
            }
            assert_eq!(softmax > 0, amp_expected, "{name} {unit:?}");
            assert_eq!(blocks > 0, !amp_expected, "{name} {unit:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Passes split a block's rows evenly: they add up, the longer first,
    /// at most one row apart.
    #[test]
    fn passes_split_rows_evenly(rows in 1u64..2000, passes in 1u32..12) {
        let split: Vec<u64> = pass_rows(rows, passes).collect();
        prop_assert_eq!(split.iter().sum::<u64>(), rows);
        prop_assert_eq!(split.len() as u64, u64::from(passes).min(rows));
        prop_assert!(split.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
        prop_assert!(split.iter().all(|&r| r > 0));
    }
}

/// A replan never gives SigLIP b6's attention less than its smallest AMP
/// plan while it has a larger one: at that budget the attention still runs
/// on the AMP, one byte below it only on the vector unit, and the plan the
/// default budget gives takes at least as many bytes.
#[test]
fn below_the_smallest_amp_plan_only_the_vector_unit_is_left() {
    use ipu_package::graph::{Op, ParseOptions, parse_fixture_with};
    use ipu_package::lower::{amp_attention_bytes, least_amp_attention_bytes};

    let b6 = ParseOptions {
        overrides: vec![("batch".to_owned(), 6), ("layers".to_owned(), 1)],
    };
    let graph = parse_fixture_with(&fixture_text("siglip-so400m-b2.json"), &b6).expect("parses");
    let (op, _) = graph
        .ops()
        .iter()
        .find(|(_, o)| matches!(o, Op::Attention { .. }))
        .expect("an attention");
    let config = LowerConfig::default();
    let least = least_amp_attention_bytes(&graph, op, &config).expect("the AMP can run it");
    let planned = amp_attention_bytes(&graph, op, &config).expect("on the AMP by default");
    assert!(least <= planned, "{least} > {planned}");
    let at = |budget: u64| {
        let mut c = LowerConfig::default();
        c.op_budgets.insert(op, budget);
        amp_attention_bytes(&graph, op, &c)
    };
    let smallest = at(least).expect("the smallest plan is on the AMP");
    assert!(smallest <= least, "{smallest} > {least}");
    assert_eq!(at(least - 1), None, "below every AMP plan");
    let vector = LowerConfig {
        attention: AttentionUnit::Vector,
        ..LowerConfig::default()
    };
    assert_eq!(least_amp_attention_bytes(&graph, op, &vector), None);
}
