//! Lowering the fixtures: structure of the programs and consistency of
//! every codelet's operands with the buffers' shards.

use ipu_layout::{EntityId, TileId};
use ipu_package::graph::parse_fixture;
use ipu_package::lower::{LowerConfig, lower};
use ipu_package::program::{Codelet, Operand, Program, Step, WalkEvent};

use crate::fixture_text;

fn operands(c: &Codelet) -> Vec<Operand> {
    match *c {
        Codelet::Gemm {
            left,
            right,
            output,
            ..
        } => vec![left, right, output],
        Codelet::Add { a, b, out, .. } => vec![a, b, out],
        Codelet::LayerNorm {
            input,
            scale,
            bias,
            output,
            ..
        } => vec![input, scale, bias, output],
        Codelet::Activation { input, output, .. } | Codelet::Convert { input, output, .. } => {
            vec![input, output]
        }
        Codelet::ReduceSum { input, output, .. } => vec![input, output],
        Codelet::AttentionBlock {
            q,
            k,
            v,
            out,
            max,
            sum,
            workspace,
            ..
        } => vec![q, k, v, out, max, sum, workspace],
        Codelet::AttentionCombine {
            out,
            max,
            sum,
            output,
            ..
        } => vec![out, max, sum, output],
        Codelet::AttentionSoftmax {
            scores,
            probs,
            max,
            sum,
            ..
        } => [scores, probs, max].into_iter().chain(sum).collect(),
        Codelet::Panels { input, output, .. } => vec![input, output],
        Codelet::Zero { target, .. } => vec![target],
        Codelet::Gather {
            table,
            indices,
            output,
            ..
        } => vec![table, indices, output],
    }
}

/// Every operand's buffer has a non-empty shard on the calling tile and
/// the operand's offset lies inside it.
fn check_operands(program: &Program) -> usize {
    let mut calls = 0;
    for event in program.walk() {
        match event {
            WalkEvent::Compute(step, _) => {
                let name = &step.label;
                for (tile, c) in &step.calls {
                    // The block scores one query row at a time: its
                    // scratch is one row of key scores, and no more.
                    if let Codelet::AttentionBlock {
                        workspace, kv_rows, ..
                    } = *c
                    {
                        let b = &program.buffers[workspace.buffer];
                        let shard = b.ty.shard(*tile).unwrap_or_else(|e| panic!("{name}: {e}"));
                        assert!(
                            shard.bytes >= 4 * u64::from(kv_rows),
                            "{name}: scratch of {} bytes on {tile} for {kv_rows} key rows",
                            shard.bytes
                        );
                        assert!(
                            b.ty.max_shard_bytes() <= 4 * u64::from(kv_rows) + 64,
                            "{name}: scratch of {} bytes for {kv_rows} key rows",
                            b.ty.max_shard_bytes()
                        );
                    }
                    for op in operands(c) {
                        let b = &program.buffers[op.buffer];
                        let shard = b.ty.shard(*tile).unwrap_or_else(|e| panic!("{name}: {e}"));
                        assert!(
                            u64::from(op.offset) < shard.bytes,
                            "{name}: {} on {tile} offset {} of {}",
                            b.name,
                            op.offset,
                            shard.bytes
                        );
                    }
                    calls += 1;
                }
            }
            WalkEvent::Exchange(step, _) => {
                for c in &step.copies {
                    assert_ne!(c.source, c.destination);
                }
            }
            WalkEvent::Enter(..) | WalkEvent::Leave(..) => {}
        }
    }
    calls
}

fn lowered(fixture: &str, tiles: u32) -> Program {
    let graph = parse_fixture(&fixture_text(fixture)).expect("fixture parses");
    let config = LowerConfig {
        tiles,
        ..LowerConfig::default()
    };
    lower(&graph, &config).unwrap_or_else(|e| panic!("{fixture} on {tiles} tiles: {e}"))
}

#[test]
fn small_fixtures_lower_on_16_and_64_tiles() {
    for fixture in [
        "tiny-2l-h64.json",
        "micro-1l-h32.json",
        "micro-text-1l-h32.json",
    ] {
        for tiles in [16, 64] {
            let p = lowered(fixture, tiles);
            assert!(check_operands(&p) > 0);
            assert!(!p.kernels.is_empty());
        }
    }
}

#[test]
fn siglip_lowers_with_one_body_for_27_layers() {
    let p = lowered("siglip-so400m-b2.json", 1472);
    check_operands(&p);
    let repeat = p.steps.iter().find_map(|s| match s {
        Step::Repeat(r) => Some((r.count, r.body.len(), r.iteration_buffers.len())),
        _ => None,
    });
    let (count, body, weights) = repeat.expect("the encoder stays a repeat");
    assert_eq!(count, 27);
    assert!(body > 0);
    // Each layer has 12 weight tensors (4 GEMMs with bias, 2 layer norms).
    assert_eq!(weights, 12);
    let _ = TileId::new(0);
}

/// The lowered SigLIP program's live bytes per tile stay within the tile
/// by the peak-live lower bound, in all and in the interleaved region, with
/// room for support memory (code, exchange rows) in region 0.
#[test]
fn siglip_storage_peaks_fit_a_tile() {
    use ipu_layout::MemoryClass;
    use ipu_package::plan_storage;
    const USABLE: u64 = 0xe7bb0 - 0x4c000;
    const REGION1: u64 = 0xe7bb0 - 0x80000;
    const SUPPORT: u64 = 96 * 1024;
    let p = lowered("siglip-so400m-b2.json", 1472);
    let s = plan_storage(&p, 1472).unwrap();
    let steps = s.step_labels.len();
    assert!(s.request_count() > 100_000);
    for (t, reqs) in s.tiles.iter().enumerate() {
        let mut live = vec![0u64; steps];
        let mut interleaved = vec![0u64; steps];
        for r in &reqs.requests {
            for st in r.first_step..=r.last_step {
                live[st as usize] += u64::from(r.bytes);
                if r.class == MemoryClass::Ipu21Interleaved {
                    interleaved[st as usize] += u64::from(r.bytes);
                }
            }
        }
        let peak = live.iter().max().copied().unwrap_or(0);
        let peak_interleaved = interleaved.iter().max().copied().unwrap_or(0);
        assert!(peak + SUPPORT <= USABLE, "tile {t}: peak {peak}");
        assert!(
            peak_interleaved <= REGION1,
            "tile {t}: interleaved peak {peak_interleaved}"
        );
    }
}

/// The token table rests split into row parts × column blocks: every
/// table tile picks rows for every index, and the row parts' results are
/// summed by a reduce (one part per tile of a column block at most).
#[test]
fn a_gather_picks_rows_on_every_table_tile_and_reduces_the_parts() {
    use ipu_package::program::StepRole;
    let p = lowered("micro-text-1l-h32.json", 16);
    let mut gathers = 0;
    let mut reduce_after_gather = false;
    let mut last_was_gather = false;
    for event in p.walk() {
        if let WalkEvent::Compute(step, _) = event {
            if step.label.role == StepRole::Gather {
                for (_, c) in &step.calls {
                    let Codelet::Gather {
                        rows,
                        table_rows,
                        first_row,
                        total_rows,
                        cols,
                        ..
                    } = *c
                    else {
                        panic!("a gather step runs only gathers: {c:?}");
                    };
                    // 2 × 8 indices; 32 columns in blocks of 4 (FP8
                    // table) on 8 tiles each, so 40 rows in 2 parts.
                    assert_eq!((rows, total_rows, cols), (16, 40, 4));
                    assert_eq!(table_rows, 20);
                    assert_eq!(first_row % 20, 0);
                    gathers += 1;
                }
                last_was_gather = true;
            } else {
                if last_was_gather && step.label.role == StepRole::Reduce {
                    reduce_after_gather = true;
                }
                last_was_gather = false;
            }
        }
    }
    // 8 column blocks × 2 row parts fill the 16 tiles.
    assert_eq!(gathers, 16);
    assert!(reduce_after_gather);
}

/// A residual add that is a split-K GEMM's only reader runs in the GEMM's
/// reduce step, on the sum's shards, and has no step of its own: SigLIP's
/// two adds a layer (after the attention's out projection and after fc2),
/// and on 64 tiles the tiny fixture's first (its fc2 is not split in K),
/// which the tile model's per-op tests run.
#[test]
fn a_residual_add_runs_in_the_reduce_step_of_the_gemm_it_adds_to() {
    use ipu_package::program::StepRole;
    let both: &[(&str, &str)] = &[("enc0.out", "enc0.res"), ("enc0.fc2", "x1")];
    for (fixture, tiles, pairs) in [
        ("siglip-so400m-b2.json", 1472, both),
        ("tiny-2l-h64.json", 64, &both[..1]),
    ] {
        let p = lowered(fixture, tiles);
        let mut folded = Vec::new();
        for event in p.walk() {
            let label = match event {
                WalkEvent::Compute(step, _) => {
                    if step.label.role == StepRole::Reduce {
                        let sums: Vec<_> = step
                            .calls
                            .iter()
                            .filter_map(|(_, c)| match *c {
                                Codelet::ReduceSum { output, .. } => Some(output.buffer),
                                _ => None,
                            })
                            .collect();
                        // An add of the sum the same step's reduce wrote.
                        let adds = step.calls.iter().any(|(_, c)| {
                            matches!(*c, Codelet::Add { a, broadcast_rows: false, .. }
                                if sums.contains(&a.buffer))
                        });
                        if adds {
                            folded.push(step.label.name.clone());
                        }
                    }
                    &step.label
                }
                WalkEvent::Exchange(step, _) => &step.label,
                WalkEvent::Enter(..) | WalkEvent::Leave(..) => continue,
            };
            assert!(
                !pairs.iter().any(|(_, add)| label.name == *add),
                "{fixture}: {} has a step of its own ({:?})",
                label.name,
                label.role
            );
        }
        for (gemm, _) in pairs.iter() {
            assert!(
                folded.iter().any(|f| f == gemm),
                "{fixture}: {gemm}'s reduce runs no residual add (folded: {folded:?})"
            );
        }
    }
}

/// A clear of padding alone runs after the exchange that fills its
/// buffer, in the first compute step that follows, before any call of
/// that step on its tile; the padding of fc2's left operand at b2 is
/// cleared in fc2's GEMM step, on the tiles of its last inner block,
/// and no step of fc2 is a clear of its own.
#[test]
fn padding_clears_run_in_the_first_compute_step_after_the_fill() {
    use ipu_package::program::StepRole;
    use std::collections::HashMap;
    for (fixture, tiles) in [
        ("siglip-so400m-b2.json", 1472),
        ("tiny-2l-h64.json", 16),
        ("tiny-2l-h64.json", 64),
    ] {
        let p = lowered(fixture, tiles);
        // Per buffer, the position of the last exchange that filled it;
        // per position, whether it is the first compute step after an
        // exchange.
        let mut filled: HashMap<_, usize> = HashMap::new();
        let mut last_exchange = None;
        let mut after_fill = 0;
        for (position, event) in p.walk().enumerate() {
            match event {
                WalkEvent::Exchange(step, _) => {
                    for c in &step.copies {
                        filled.insert(c.destination, position);
                    }
                    last_exchange = Some(position);
                }
                WalkEvent::Compute(step, _) => {
                    let first_after = last_exchange.take();
                    let mut read: std::collections::HashSet<(TileId, _)> =
                        std::collections::HashSet::new();
                    for (tile, c) in &step.calls {
                        if let Codelet::Zero { target, .. } = *c {
                            if let Some(&at) = filled.get(&target.buffer) {
                                assert_eq!(
                                    first_after,
                                    Some(at),
                                    "{fixture} on {tiles}: {} cleared in {}, not the first compute step after its fill",
                                    p.buffers[target.buffer].name,
                                    step.label
                                );
                                assert!(
                                    !read.contains(&(*tile, target.buffer)),
                                    "{fixture} on {tiles}: {} cleared on {tile} after a call read it",
                                    p.buffers[target.buffer].name
                                );
                                after_fill += 1;
                            }
                            continue;
                        }
                        for op in operands(c) {
                            read.insert((*tile, op.buffer));
                        }
                    }
                    if fixture.starts_with("siglip") && step.label.name == "enc0.fc2" {
                        assert_ne!(step.label.role, StepRole::Clear, "{}", step.label);
                        if step.label.role == StepRole::Gemm {
                            let clearing: std::collections::HashSet<_> = step
                                .calls
                                .iter()
                                .filter(|(_, c)| matches!(c, Codelet::Zero { .. }))
                                .map(|(t, _)| *t)
                                .collect();
                            let computing: std::collections::HashSet<_> =
                                step.calls.iter().map(|(t, _)| *t).collect();
                            // Only the tiles of the last inner block (4,304
                            // does not split into whole AMP blocks) clear.
                            assert!(
                                !clearing.is_empty() && clearing.len() * 4 < computing.len(),
                                "{}: {} of {} tiles clear",
                                step.label,
                                clearing.len(),
                                computing.len()
                            );
                        }
                    }
                }
                WalkEvent::Enter(..) | WalkEvent::Leave(..) => {}
            }
        }
        assert!(
            after_fill > 0,
            "{fixture} on {tiles}: no clear after a fill"
        );
    }
}
