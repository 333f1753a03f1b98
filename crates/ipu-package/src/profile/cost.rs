//! The cycles of one codelet call on one tile.
//!
//! Every codelet but the GEMM is costed by the vector model of the device
//! description's `[vector]` section, in the shape of the AMP kernels' cost
//! model (`ipu_kernels::estimate_cycles`): a call takes
//!
//! ```text
//! call_cycles + worker_contexts × (instructions of the busiest worker)
//! ```
//!
//! tile cycles, because a worker issues one instruction every
//! `worker_contexts` cycles and the six workers run side by side. A worker's
//! instructions are `worker_setup_instructions` plus its share of the work:
//!
//! | work | unit split over the workers | instructions per unit |
//! |---|---|---|
//! | add, activation, convert | vectors of the elements | `add`/`convert_instructions_per_vector`; per activation `gelu`/`gelu_erf`/`quick_gelu`/`tanh_instructions_per_vector` |
//! | sum of `p` partials | vectors of one partial | `p × reduce_instructions_per_vector` |
//! | layer norm | rows (or, with fewer rows than workers, parts of a row) | `layer_norm_row_instructions + vectors of a row (part) × layer_norm_instructions_per_vector` (+ parts × `layer_norm_combine_instructions_per_part` and a second worker start when split) |
//! | attention block | query rows | `attention_row_instructions + kv × ⌈d / dot_macs⌉ + vectors of kv scores × exp + kv × ⌈d / axpy_macs⌉` |
//! | attention combine, F32 blocks | query rows | `attention_row_instructions + blocks × (exp + ⌈d / axpy_macs⌉) + ⌈d / axpy_macs⌉` |
//! | attention combine, F16 blocks (in F16) | query rows | `attention_row_instructions + blocks × (exp + vectors of d × combine_f16) + vectors of d × add` |
//! | attention softmax | query rows | `attention_row_instructions + vectors of a row's key scores × (softmax_scale, or softmax_max where the queries carry the scale) + vectors of its keys' F16 probabilities × (exp + softmax_sum, or softmax_store where the AMP sums the row) + (vectors past the keys, and a part-filled last vector of each) × softmax_tail` |
//! | panels, transposed | groups of 4 source rows | `transpose_group + ⌈out_rows / 4⌉ × transpose_block` |
//! | panels, not transposed | groups of 4 rows | `transpose_group + 4 × ⌈2 · out_cols / copy_bytes⌉` |
//! | zero, on-tile copy | `copy_bytes_per_instruction` bytes | 1 |
//! | gather | indices | `gather_row_instructions + vectors of a row × gather_instructions_per_vector` |
//!
//! A vector is `datapath_bytes` of the wider of the elements read and
//! written (4 F16, 2 F32 or 8 FP8 lanes); units are dealt out evenly, so
//! the busiest worker has `⌈units / worker_contexts⌉`. The softmax's
//! exponentials are charged per vector of scores whatever their precision,
//! which is PopLibs' F16 figure and flatters F32 scores (PopLibs charges 6
//! instructions per F32 pair).
//!
//! The cost is a function of a [`Work`] value only, so that the estimate
//! (which reads a codelet's arguments, [`codelet_work`]) and the tile
//! model's accounting (which counts what each codelet it runs actually
//! touched) convert their counts the same way and differ only in the counts.
//!
//! GEMM calls are costed in `kernel_cost.rs`.

use ipu_layout::Precision;
use ipu_target::{Target, VectorSpec};
use serde::{Deserialize, Serialize};

use super::causal::{MAX_COUNTED_CAUSAL_ROWS, causal_busiest, visible_pairs};
use crate::graph::Activation;
use crate::program::{CausalRows, Codelet};

/// Whether an attention combine of blocks stored in `blocks` works in F16
/// rather than F32: the arithmetic follows the blocks' precision
/// ([`crate::program::Codelet::AttentionCombine`]). The one rule the tile
/// model's codelet and its cost share.
pub fn combines_in_f16(blocks: Precision) -> bool {
    blocks == Precision::F16
}

/// What one call of a codelet other than the GEMM does, counted in the
/// units its cost depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Work {
    /// Element-wise additions.
    Add {
        /// Elements written.
        elements: u64,
        /// Elements per vector.
        lanes: u32,
    },
    /// An activation function of each element.
    Activation {
        /// The function.
        function: Activation,
        /// Elements written.
        elements: u64,
        /// Elements per vector.
        lanes: u32,
    },
    /// Conversions between precisions.
    Convert {
        /// Elements written.
        elements: u64,
        /// Elements per vector (of the wider precision).
        lanes: u32,
    },
    /// Sums of partials.
    Reduce {
        /// Partials summed into each element.
        partials: u64,
        /// Elements written.
        elements: u64,
        /// Elements per vector.
        lanes: u32,
    },
    /// Layer normalisation of rows.
    LayerNorm {
        /// Rows.
        rows: u64,
        /// Elements per row.
        columns: u64,
        /// Elements per vector.
        lanes: u32,
    },
    /// One attention block.
    AttentionBlock {
        /// Query rows.
        q_rows: u64,
        /// Key and value rows.
        kv_rows: u64,
        /// Columns per head.
        head_dim: u64,
        /// Scores per vector (F16 or F32 softmax).
        score_lanes: u32,
        /// A causal block's diagonal ([`crate::program::CausalRows::diagonal`]):
        /// row `r` works on keys `j ≤ r + diagonal` only. Absent: every key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diagonal: Option<i64>,
        /// Whether each vector of exponentials is also rounded to FP8 (an
        /// F16-FP8 softmax), one conversion a vector.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        probs_fp8: bool,
    },
    /// Combining attention blocks.
    AttentionCombine {
        /// Blocks combined.
        blocks: u64,
        /// Query rows.
        q_rows: u64,
        /// Columns per head.
        head_dim: u64,
        /// The precision the partial outputs are stored in: F32, or F16
        /// (combined in F16, [`combines_in_f16`]).
        block_precision: Precision,
    },
    /// The softmax between attention's AMP products.
    AttentionSoftmax {
        /// Query rows.
        rows: u64,
        /// Columns of each row written (keys and the zeros after them).
        columns: u64,
        /// Keys of each row: the scores read and the exponentials taken
        /// (at most `columns`).
        keys: u64,
        /// Scores per vector (F32 or F16 scores).
        score_lanes: u32,
        /// Probabilities per vector: F16, or FP8 (the exponentials are
        /// still taken a vector of F16 lanes at a time, then converted).
        prob_lanes: u32,
        /// Whether the scores are softmaxed as they are (a scale of
        /// exactly 1: the queries carry `1/√head_dim`), so each vector of
        /// scores only joins the row maximum.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unscaled: bool,
        /// Whether the values' product sums the probabilities (a column
        /// of ones in its weights), so the softmax adds no row sum.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        sums_on_amp: bool,
    },
    /// A 16-bit or FP8 block written as AMP panels.
    Panels {
        /// Output rows, padding included.
        out_rows: u64,
        /// Output columns, padding included.
        out_cols: u64,
        /// Whether the block is transposed.
        transpose: bool,
        /// Whether the elements are FP8 (8-bit, copied twice as many an
        /// instruction) rather than 16-bit (`panel_element_bytes`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        fp8: bool,
    },
    /// Zeroing runs of bytes.
    Zero {
        /// Bytes of each run.
        bytes: u64,
        /// Runs written (1 for a plain clear).
        runs: u64,
    },
    /// On-tile copies of an exchange step.
    Copy {
        /// Bytes copied.
        bytes: u64,
    },
    /// Table rows picked by index: every index costs the same, whether
    /// its row is the shard's (copied) or not (zeros), so the cost does
    /// not depend on the indices.
    Gather {
        /// Indices (output rows written).
        rows: u64,
        /// Elements per row.
        columns: u64,
        /// Elements per vector (of the wider of table and output).
        lanes: u32,
    },
}

impl Work {
    /// The codelet kind the work belongs to, as [`CODELET_KINDS`] names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Work::Add { .. } => "add",
            Work::Activation { function, .. } => function.name(),
            Work::Convert { .. } => "convert",
            Work::Reduce { .. } => "reduce_sum",
            Work::LayerNorm { .. } => "layer_norm",
            Work::AttentionBlock { .. } => "attention_block",
            Work::AttentionCombine { .. } => "attention_combine",
            Work::AttentionSoftmax { .. } => "attention_softmax",
            Work::Panels { .. } => "panels",
            Work::Zero { .. } => "zero",
            Work::Copy { .. } => "copy",
            Work::Gather { .. } => "gather",
        }
    }
}

/// The kinds of work a tile does, in the order profiles list them: the
/// codelets (GEMM first) and the on-tile copies of exchange steps.
pub const CODELET_KINDS: [&str; 16] = [
    "gemm",
    "add",
    "layer_norm",
    "gelu",
    "gelu_erf",
    "quick_gelu",
    "tanh",
    "convert",
    "reduce_sum",
    "attention_block",
    "attention_combine",
    "attention_softmax",
    "panels",
    "zero",
    "gather",
    "copy",
];

/// Bytes of an element of [`Work::Panels`]: FP8 or 16-bit.
fn panel_element_bytes(fp8: bool) -> u64 {
    if fp8 { 1 } else { 2 }
}

/// Worker instructions per vector of `function` (the device description's
/// figure).
fn activation_instructions(s: &VectorSpec, function: Activation) -> u32 {
    match function {
        Activation::GeluTanh => s.gelu_instructions_per_vector,
        Activation::GeluErf => s.gelu_erf_instructions_per_vector,
        Activation::QuickGelu => s.quick_gelu_instructions_per_vector,
        Activation::Tanh => s.tanh_instructions_per_vector,
    }
}

/// The position of `kind` in [`CODELET_KINDS`].
pub(crate) fn kind_index(kind: &str) -> usize {
    CODELET_KINDS
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(CODELET_KINDS.len() - 1)
}

/// The vector model of a target: cycles of a [`Work`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorModel {
    workers: u64,
    spec: VectorSpec,
}

impl VectorModel {
    /// The model of `target` (its worker count and `[vector]` section).
    pub fn new(target: &Target) -> VectorModel {
        VectorModel {
            workers: u64::from(target.worker_contexts().max(1)),
            spec: target.vector().clone(),
        }
    }

    /// Bytes of one datapath vector.
    pub fn datapath_bytes(&self) -> u32 {
        self.spec.datapath_bytes
    }

    /// Elements of `precision` per vector (at least 1).
    pub fn lanes(&self, precision: Precision) -> u32 {
        let lanes = u64::from(self.spec.datapath_bytes) / precision.element_bytes().max(1);
        u32::try_from(lanes.max(1)).unwrap_or(u32::MAX)
    }

    /// Elements per vector when all of `precisions` are read or written:
    /// those of the widest.
    pub fn lanes_of(&self, precisions: &[Precision]) -> u32 {
        precisions.iter().map(|&p| self.lanes(p)).min().unwrap_or(1)
    }

    /// Tile cycles of one call doing `work`.
    pub fn cycles(&self, work: &Work) -> u64 {
        let s = &self.spec;
        let w = self.workers;
        let per = |units: u64| units.div_ceil(w);
        let vectors = |elements: u64, lanes: u32| elements.div_ceil(u64::from(lanes.max(1)));
        // 1 where the last of `elements`' vectors is filled only in part.
        let part_filled =
            |elements: u64, lanes: u32| u64::from(elements % u64::from(lanes.max(1)) != 0);
        let dot = u64::from(s.dot_macs_per_instruction.max(1));
        let axpy = u64::from(s.axpy_macs_per_instruction.max(1));
        let exp = u64::from(s.exp_instructions_per_vector);
        let row = u64::from(s.attention_row_instructions);
        let busiest = match *work {
            Work::Add { elements, lanes } => per(vectors(elements, lanes))
                .saturating_mul(u64::from(s.add_instructions_per_vector)),
            Work::Activation {
                function,
                elements,
                lanes,
            } => per(vectors(elements, lanes))
                .saturating_mul(u64::from(activation_instructions(s, function))),
            Work::Convert { elements, lanes } => per(vectors(elements, lanes))
                .saturating_mul(u64::from(s.convert_instructions_per_vector)),
            Work::Reduce {
                partials,
                elements,
                lanes,
            } => per(vectors(elements, lanes))
                .saturating_mul(partials)
                .saturating_mul(u64::from(s.reduce_instructions_per_vector)),
            Work::LayerNorm {
                rows,
                columns,
                lanes,
            } => {
                let row = u64::from(s.layer_norm_row_instructions);
                let per_vector = u64::from(s.layer_norm_instructions_per_vector);
                let whole_rows = per(rows).saturating_mul(
                    row.saturating_add(vectors(columns, lanes).saturating_mul(per_vector)),
                );
                let parts = w
                    .checked_div(rows)
                    .map_or(1, |p| p.min(vectors(columns, lanes)));
                if parts < 2 {
                    whole_rows
                } else {
                    // Fewer rows than workers: each row's vectors are split
                    // over `parts` workers, in two passes (statistics, then
                    // scale and shift) with a second worker start between
                    // them, and one worker per row combines the parts'
                    // statistics. Taken only where it is cheaper.
                    let split =
                        vectors(columns, lanes)
                            .div_ceil(parts)
                            .saturating_mul(per_vector)
                            .saturating_add(row)
                            .saturating_add(parts.saturating_mul(u64::from(
                                s.layer_norm_combine_instructions_per_part,
                            )));
                    let second_start = u64::from(s.call_cycles)
                        .div_ceil(w)
                        .saturating_add(u64::from(s.worker_setup_instructions));
                    whole_rows.min(split.saturating_add(second_start))
                }
            }
            Work::AttentionBlock {
                q_rows,
                kv_rows,
                head_dim,
                score_lanes,
                diagonal,
                probs_fp8,
            } => {
                // One row against `keys` keys: its scores, softmax and
                // weighted values.
                let convert = if probs_fp8 {
                    u64::from(s.convert_instructions_per_vector)
                } else {
                    0
                };
                let row_cycles = |keys: u64| {
                    let scores = keys.saturating_mul(head_dim.div_ceil(dot));
                    let softmax =
                        vectors(keys, score_lanes).saturating_mul(exp.saturating_add(convert));
                    let values = keys.saturating_mul(head_dim.div_ceil(axpy));
                    row.saturating_add(scores)
                        .saturating_add(softmax)
                        .saturating_add(values)
                };
                match diagonal {
                    Some(d) if q_rows <= MAX_COUNTED_CAUSAL_ROWS => {
                        causal_busiest(q_rows, kv_rows, d, w, row_cycles)
                    }
                    // Unmasked, or more rows than a tile holds (then the
                    // unmasked cost bounds it).
                    _ => per(q_rows).saturating_mul(row_cycles(kv_rows)),
                }
            }
            Work::AttentionCombine {
                blocks,
                q_rows,
                head_dim,
                block_precision,
            } => {
                // F32 blocks are weighed and added by F32 axpys and divided
                // by the row's sum likewise; F16 blocks in F16, a vector of
                // the blocks' lanes at a time, and multiplied by the sum's
                // reciprocal (a vector multiply costs what an add does).
                let (weigh, scale) = if combines_in_f16(block_precision) {
                    let v = vectors(head_dim, self.lanes(block_precision));
                    (
                        v.saturating_mul(u64::from(s.combine_f16_instructions_per_vector)),
                        v.saturating_mul(u64::from(s.add_instructions_per_vector)),
                    )
                } else {
                    (head_dim.div_ceil(axpy), head_dim.div_ceil(axpy))
                };
                let per_block = exp.saturating_add(weigh);
                per(q_rows).saturating_mul(
                    row.saturating_add(blocks.saturating_mul(per_block))
                        .saturating_add(scale),
                )
            }
            Work::AttentionSoftmax {
                rows,
                columns,
                keys,
                score_lanes,
                prob_lanes,
                unscaled,
                sums_on_amp,
            } => {
                // The scores and exponentials of the keys only; past them
                // the row is written as zeros (the padding the values'
                // product reads), and a part-filled last vector of scores
                // or probabilities is masked once.
                let keys = keys.min(columns);
                let tail_instructions = u64::from(s.softmax_tail_instructions_per_vector);
                let per_scores = if unscaled {
                    s.softmax_max_instructions_per_vector
                } else {
                    s.softmax_scale_instructions_per_vector
                };
                let scale = vectors(keys, score_lanes)
                    .saturating_mul(u64::from(per_scores))
                    .saturating_add(
                        part_filled(keys, score_lanes).saturating_mul(tail_instructions),
                    );
                let per_probs = u64::from(if sums_on_amp {
                    s.softmax_store_instructions_per_vector
                } else {
                    s.softmax_sum_instructions_per_vector
                });
                // The exponentials are F16 vectors; FP8 probabilities are
                // converted from them, one conversion a vector (the cast
                // loops' rate), before they are stored.
                let f16_lanes = self.lanes(Precision::F16);
                let (exp_lanes, convert) = if prob_lanes > f16_lanes {
                    (f16_lanes, u64::from(s.convert_instructions_per_vector))
                } else {
                    (prob_lanes, 0)
                };
                let sum = vectors(keys, exp_lanes)
                    .saturating_mul(exp.saturating_add(per_probs).saturating_add(convert));
                let lanes = u64::from(prob_lanes.max(1));
                let tail = vectors(columns, prob_lanes)
                    .saturating_sub(keys / lanes)
                    .saturating_mul(tail_instructions);
                per(rows).saturating_mul(
                    row.saturating_add(scale)
                        .saturating_add(sum)
                        .saturating_add(tail),
                )
            }
            Work::Panels {
                out_rows,
                out_cols,
                transpose,
                fp8,
            } => {
                let group = u64::from(s.transpose_group_instructions);
                if transpose {
                    // Four source rows at a time, each 4 × 4 block turned
                    // in registers (PopLibs' fast 16-bit transpose).
                    let blocks = out_rows
                        .div_ceil(4)
                        .saturating_mul(u64::from(s.transpose_block_instructions));
                    per(out_cols.div_ceil(4)).saturating_mul(group.saturating_add(blocks))
                } else {
                    // Four rows at a time, each row's 16-bit or 8-bit
                    // elements copied a copy instruction at a time.
                    let row = out_cols
                        .saturating_mul(panel_element_bytes(fp8))
                        .div_ceil(u64::from(s.copy_bytes_per_instruction.max(1)));
                    per(out_rows.div_ceil(4))
                        .saturating_mul(group.saturating_add(row.saturating_mul(4)))
                }
            }
            Work::Copy { bytes } => {
                per(bytes.div_ceil(u64::from(s.copy_bytes_per_instruction.max(1))))
            }
            Work::Zero { bytes, runs } => {
                let stores = bytes.div_ceil(u64::from(s.copy_bytes_per_instruction.max(1)));
                if runs <= 1 {
                    // One run is split over the workers.
                    per(stores)
                } else {
                    // Whole runs to each worker, each with its step.
                    per(runs)
                        .saturating_mul(stores.saturating_add(u64::from(s.zero_run_instructions)))
                }
            }
            Work::Gather {
                rows,
                columns,
                lanes,
            } => per(rows).saturating_mul(u64::from(s.gather_row_instructions).saturating_add(
                vectors(columns, lanes).saturating_mul(u64::from(s.gather_instructions_per_vector)),
            )),
        };
        u64::from(s.call_cycles).saturating_add(
            w.saturating_mul(u64::from(s.worker_setup_instructions).saturating_add(busiest)),
        )
    }
}

/// The least tile cycles `work` could take: its multiply-accumulates at
/// the AMP's F16 peak (`f16_macs_per_cycle`: the attention block's two
/// products, which any implementation must do) and every other element
/// it reads or writes at one datapath vector a cycle (the tile issues one
/// instruction a cycle across its workers), with no call or setup cost.
/// A step's floor is its busiest tile's Σ of these (`docs/PROFILE.md`).
pub fn work_floor(work: &Work, datapath_bytes: u32, f16_macs_per_cycle: u64) -> u64 {
    let vectors = |elements: u64, lanes: u32| elements.div_ceil(u64::from(lanes.max(1)));
    let macs = |m: u64| m.div_ceil(f16_macs_per_cycle.max(1));
    match *work {
        Work::Add { elements, lanes }
        | Work::Activation {
            elements, lanes, ..
        }
        | Work::Convert { elements, lanes } => vectors(elements, lanes),
        Work::Reduce {
            partials,
            elements,
            lanes,
        } => vectors(elements, lanes).saturating_mul(partials),
        Work::LayerNorm {
            rows,
            columns,
            lanes,
        } => rows.saturating_mul(vectors(columns, lanes)),
        Work::AttentionBlock {
            q_rows,
            kv_rows,
            head_dim,
            score_lanes,
            diagonal,
            ..
        } => {
            let pairs = visible_pairs(q_rows, kv_rows, diagonal);
            let products = pairs.saturating_mul(head_dim).saturating_mul(2);
            // Softmax vectors: per row over its visible keys; unmasked
            // rows all see `kv_rows`.
            let softmax = match diagonal {
                None => q_rows.saturating_mul(vectors(kv_rows, score_lanes)),
                Some(_) => vectors(pairs, score_lanes),
            };
            macs(products).saturating_add(softmax)
        }
        Work::AttentionCombine {
            blocks,
            q_rows,
            head_dim,
            block_precision,
        } => {
            // A vector of each block's row, in the arithmetic's lanes: F32,
            // or the F16 blocks' own.
            let element_bytes = if combines_in_f16(block_precision) {
                u32::try_from(block_precision.element_bytes()).unwrap_or(u32::MAX)
            } else {
                4
            };
            let lanes = (datapath_bytes / element_bytes).max(1);
            q_rows
                .saturating_mul(blocks)
                .saturating_mul(vectors(head_dim, lanes))
        }
        Work::AttentionSoftmax {
            rows,
            keys,
            score_lanes,
            prob_lanes,
            ..
        } => rows
            .saturating_mul(vectors(keys, score_lanes).saturating_add(vectors(keys, prob_lanes))),
        Work::Panels {
            out_rows,
            out_cols,
            fp8,
            ..
        } => {
            // 16-bit or 8-bit elements written.
            let lanes = (datapath_bytes / panel_element_bytes(fp8) as u32).max(1);
            vectors(out_cols.saturating_mul(out_rows), lanes)
        }
        Work::Copy { bytes } => bytes.div_ceil(u64::from(datapath_bytes.max(1))),
        Work::Zero { bytes, runs } => bytes
            .saturating_mul(runs.max(1))
            .div_ceil(u64::from(datapath_bytes.max(1))),
        // Every output row is written, a vector at a time.
        Work::Gather {
            rows,
            columns,
            lanes,
        } => rows.saturating_mul(vectors(columns, lanes)),
    }
}

/// The work of a codelet other than the GEMM, read from its arguments
/// (`None` for a GEMM). `precision` gives a buffer's element precision.
pub fn codelet_work(
    model: &VectorModel,
    codelet: &Codelet,
    precision: impl Fn(crate::program::BufferId) -> Precision,
) -> Option<Work> {
    let p = |o: &crate::program::Operand| precision(o.buffer);
    Some(match codelet {
        Codelet::Gemm { .. } => return None,
        Codelet::Add {
            a,
            b,
            out,
            rows,
            cols,
            ..
        } => Work::Add {
            elements: u64::from(*rows) * u64::from(*cols),
            lanes: model.lanes_of(&[p(a), p(b), p(out)]),
        },
        Codelet::LayerNorm {
            input,
            output,
            rows,
            cols,
            ..
        } => Work::LayerNorm {
            rows: u64::from(*rows),
            columns: u64::from(*cols),
            lanes: model.lanes_of(&[p(input), p(output)]),
        },
        Codelet::Activation {
            input,
            output,
            elements,
            function,
        } => Work::Activation {
            function: *function,
            elements: u64::from(*elements),
            lanes: model.lanes_of(&[p(input), p(output)]),
        },
        Codelet::Convert {
            input,
            output,
            elements,
        } => Work::Convert {
            elements: u64::from(*elements),
            lanes: model.lanes_of(&[p(input), p(output)]),
        },
        Codelet::ReduceSum {
            input,
            output,
            count,
            elements,
        } => Work::Reduce {
            partials: u64::from(*count),
            elements: u64::from(*elements),
            lanes: model.lanes_of(&[p(input), p(output)]),
        },
        Codelet::AttentionBlock {
            q_rows,
            kv_rows,
            head_dim,
            softmax_f16,
            causal,
            probs_fp8,
            ..
        } => Work::AttentionBlock {
            probs_fp8: *probs_fp8,
            diagonal: causal.map(CausalRows::diagonal),
            q_rows: u64::from(*q_rows),
            kv_rows: u64::from(*kv_rows),
            head_dim: u64::from(*head_dim),
            score_lanes: model.lanes(if *softmax_f16 {
                Precision::F16
            } else {
                Precision::F32
            }),
        },
        Codelet::AttentionCombine {
            out,
            blocks,
            q_rows,
            head_dim,
            ..
        } => Work::AttentionCombine {
            blocks: u64::from(*blocks),
            q_rows: u64::from(*q_rows),
            head_dim: u64::from(*head_dim),
            block_precision: p(out),
        },
        Codelet::AttentionSoftmax {
            scores,
            probs,
            rows,
            columns,
            stride,
            scale,
            sum,
            ..
        } => Work::AttentionSoftmax {
            rows: u64::from(*rows),
            columns: u64::from(*stride),
            keys: u64::from(*columns),
            score_lanes: model.lanes(p(scores)),
            prob_lanes: model.lanes(p(probs)),
            unscaled: *scale == 1.0,
            sums_on_amp: sum.is_none(),
        },
        Codelet::Panels {
            output,
            out_rows,
            out_cols,
            transpose,
            ..
        } => Work::Panels {
            out_rows: u64::from(*out_rows),
            out_cols: u64::from(*out_cols),
            transpose: *transpose,
            fp8: p(output).is_fp8(),
        },
        Codelet::Zero { bytes, runs, .. } => Work::Zero {
            bytes: u64::from(*bytes),
            runs: u64::from(*runs),
        },
        Codelet::Gather {
            table,
            output,
            rows,
            cols,
            ..
        } => Work::Gather {
            rows: u64::from(*rows),
            columns: u64::from(*cols),
            lanes: model.lanes_of(&[p(table), p(output)]),
        },
    })
}
