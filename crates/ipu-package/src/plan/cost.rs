//! The planner's cost model: cycles of compute and exchange per tile.
//!
//! Every figure comes from the target's description, which says where it
//! comes from. The model ranks plans; it does not promise runtimes.

use ipu_layout::Precision;
use ipu_target::Target;

/// Per-tile throughput figures used to rank plans.
#[derive(Clone, Debug)]
pub struct CostModel {
    /// AMP multiply-accumulates per cycle with F16 inputs
    /// (`f16v4hihov4amp`, IPU21.md).
    pub f16_macs_per_cycle: u64,
    /// AMP multiply-accumulates per cycle with FP8 inputs
    /// (`f8v8hihov4amp`, IPU21.md).
    pub fp8_macs_per_cycle: u64,
    /// Cycles per 32-bit word a tile receives in an exchange phase: one word
    /// per cycle in each direction (IPU21.md, "Exchange").
    pub cycles_per_exchange_word: u64,
    /// Fixed cycles per exchange phase for the sync and the fabric latency;
    /// an estimate until measured on hardware.
    pub exchange_phase_cycles: u64,
    /// Fixed cycles per compute step for the sync and vertex dispatch; an
    /// estimate until measured on hardware.
    pub compute_step_cycles: u64,
    /// Cycles per element for row-wise vector work (layer norm, GELU, adds)
    /// across the six workers, counting about four F16 lanes per worker
    /// cycle; an estimate.
    pub vector_cycles_per_element: f64,
    /// Output columns per AMP instruction (`amp.column_multiple`): a GEMM's
    /// columns are split in whole blocks of them.
    pub amp_columns: u64,
    /// The package estimate's step costs (kernel cost model, vector model,
    /// sync), by which a GEMM's grid is chosen (`choose.rs`).
    pub steps: super::StepCosts,
}

impl CostModel {
    /// The figures of `target`: the AMP's MACs per tile cycle (six
    /// workers, each issuing one AMP instruction every `worker_contexts`
    /// cycles, reach one instruction's MACs per cycle), one exchange word
    /// per cycle, and the target's step and vector timing.
    pub fn new(target: &Target) -> Self {
        let amp = target.amp();
        let timing = target.timing();
        Self {
            f16_macs_per_cycle: u64::from(amp.f16_macs_per_instruction),
            fp8_macs_per_cycle: u64::from(amp.fp8_macs_per_instruction),
            cycles_per_exchange_word: 1,
            exchange_phase_cycles: timing.exchange_phase_cycles,
            compute_step_cycles: timing.compute_step_cycles,
            vector_cycles_per_element: timing.vector_cycles_per_element,
            amp_columns: u64::from(amp.column_multiple),
            steps: super::StepCosts::new(target),
        }
    }

    /// The figures of the built-in IPU21 target.
    pub fn ipu21() -> Self {
        Self::new(Target::ipu21())
    }

    /// AMP throughput for a GEMM with these operand precisions: FP8 rate
    /// only when both operands are FP8.
    pub fn macs_per_cycle(&self, left: Precision, right: Precision) -> u64 {
        if left.is_fp8() && right.is_fp8() {
            self.fp8_macs_per_cycle
        } else {
            self.f16_macs_per_cycle
        }
    }

    /// Cycles to receive `bytes` in one exchange phase.
    pub fn exchange_cycles(&self, bytes: u64) -> u64 {
        if bytes == 0 {
            return 0;
        }
        self.exchange_phase_cycles + bytes.div_ceil(4) * self.cycles_per_exchange_word
    }
}

impl Default for CostModel {
    fn default() -> Self {
        Self::ipu21()
    }
}
