//! The arithmetic a model graph asks for, whatever the program that runs
//! it: multiply-accumulates of its GEMMs and attention products, by the
//! AMP rate each can run at, for the roofline.
//!
//! The roofline of a model on a target is the time its MACs take with every
//! tile's AMP busy at its peak rate: FP8 × FP8 GEMMs at the FP8 rate
//! (`f8v8hihov4amp`), F16 and mixed GEMMs and the attention products (F16
//! queries, keys and values) at the F16 rate (`f16v4hihov4amp`), and F32
//! partials at the F16 rate divided by `f32_partials_rate_divisor`. The
//! FP8 roofline puts every MAC at the FP8 rate, the goal the design sets.
//! Padding, replication and overheads are the program's, not the model's,
//! and count only in the estimate.

use ipu_kernels::{AmpModel, Arithmetic};
use serde::{Deserialize, Serialize};

use crate::graph::{Graph, Op, OpId};

/// Multiply-accumulates by the AMP rate they can run at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MacCounts {
    /// GEMM MACs with FP8 on both sides (FP8 rate).
    pub fp8: u64,
    /// GEMM MACs with F16 partials and an F16 operand, and attention
    /// products (F16 rate).
    pub f16: u64,
    /// GEMM MACs with F32 partials or F32 operands (F16 rate divided by
    /// the F32 partials divisor).
    pub f32_partials: u64,
    /// Of all the above, those of attention products.
    pub attention: u64,
}

impl MacCounts {
    /// All MACs.
    pub fn total(&self) -> u64 {
        self.fp8
            .saturating_add(self.f16)
            .saturating_add(self.f32_partials)
    }

    fn add(&mut self, other: &MacCounts) {
        self.fp8 = self.fp8.saturating_add(other.fp8);
        self.f16 = self.f16.saturating_add(other.f16);
        self.f32_partials = self.f32_partials.saturating_add(other.f32_partials);
        self.attention = self.attention.saturating_add(other.attention);
    }

    /// Tile cycles of these MACs on `tiles` tiles with every AMP at the
    /// peak rate of each MAC's arithmetic (rounded up).
    pub fn roofline_cycles(&self, model: &AmpModel, tiles: u32) -> u64 {
        let tiles = f64::from(tiles.max(1));
        let fp8 = f64::from(model.fp8_macs_per_instruction.max(1));
        let f16 = f64::from(model.f16_macs_per_instruction.max(1));
        let f32 = f16 / f64::from(model.f32_partials_rate_divisor.max(1));
        let cycles =
            (self.fp8 as f64 / fp8 + self.f16 as f64 / f16 + self.f32_partials as f64 / f32)
                / tiles;
        cycles.ceil() as u64
    }

    /// Tile cycles of every MAC at the FP8 rate on `tiles` tiles.
    pub fn fp8_roofline_cycles(&self, model: &AmpModel, tiles: u32) -> u64 {
        let rate = u64::from(model.fp8_macs_per_instruction.max(1))
            .saturating_mul(u64::from(tiles.max(1)));
        self.total().div_ceil(rate)
    }
}

/// What one iteration of a repeat asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepeatWork {
    /// The repeat's name.
    pub name: String,
    /// Iterations.
    pub count: u32,
    /// MACs of one iteration.
    pub macs: MacCounts,
}

/// The arithmetic of a model graph.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelWork {
    /// Items one run processes: the leading extent of the graph's first
    /// input (SigLIP: images).
    pub items: u64,
    /// MACs of the whole graph.
    pub macs: MacCounts,
    /// Per repeat, one iteration's MACs.
    pub repeats: Vec<RepeatWork>,
}

impl ModelWork {
    /// The work of `graph`.
    pub fn of_graph(graph: &Graph) -> ModelWork {
        let items = graph
            .inputs()
            .first()
            .and_then(|&t| graph.tensor(t).extents().first().copied())
            .unwrap_or(1);
        let mut macs = MacCounts::default();
        for i in 0..graph.ops().len() {
            macs.add(&op_macs(graph, OpId::from_u32(i as u32)));
        }
        let repeats = graph
            .repeats()
            .iter()
            .map(|r| {
                let mut one = MacCounts::default();
                for i in r.iteration_ops(0) {
                    one.add(&op_macs(graph, OpId::from_u32(i as u32)));
                }
                RepeatWork {
                    name: r.name().to_owned(),
                    count: r.count(),
                    macs: one,
                }
            })
            .collect();
        ModelWork {
            items,
            macs,
            repeats,
        }
    }
}

/// The MACs of one operation.
fn op_macs(graph: &Graph, op: OpId) -> MacCounts {
    let mut out = MacCounts::default();
    match graph.op(op) {
        Op::Gemm {
            left,
            right,
            output,
            ..
        } => {
            let l = graph.tensor(*left);
            let r = graph.tensor(*right);
            let inner = l.extents().last().copied().unwrap_or(1);
            let rows = l.element_count() / inner.max(1);
            let columns = r.extents().last().copied().unwrap_or(1);
            let macs = rows.saturating_mul(inner).saturating_mul(columns);
            let precision = graph.tensor(*output).precision();
            match Arithmetic::select(l.precision(), r.precision(), precision) {
                Some(Arithmetic::Fp8HalfPartials) => out.fp8 = macs,
                Some(Arithmetic::F16HalfPartials | Arithmetic::MixedHalfPartials) => out.f16 = macs,
                Some(_) | None => out.f32_partials = macs,
            }
        }
        Op::Attention { q, k, heads, .. } => {
            // Scores q·kᵀ and values p·v: per (batch, head), tq × tkv × d
            // MACs each, d = hidden / heads.
            let q = graph.tensor(*q).extents();
            let k = graph.tensor(*k).extents();
            if let ([batch, tq, hidden], [_, tkv, _]) = (q, k) {
                let d = hidden / u64::from((*heads).max(1));
                let products = batch
                    .saturating_mul(u64::from(*heads))
                    .saturating_mul(*tq)
                    .saturating_mul(*tkv)
                    .saturating_mul(d)
                    .saturating_mul(2);
                out.f16 = products;
                out.attention = products;
            }
        }
        _ => {}
    }
    out
}
