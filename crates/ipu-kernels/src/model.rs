//! The AMP unit and kernel cost model of a target, as data.
//!
//! [`AmpModel::new`] takes the numbers from a device description (the `amp`
//! section of an `ipu_target::Target`, with the worker count, the
//! left-operand read tails and the operand alignment), so a new target is a
//! new description. The model is a plain value because it is hashed into
//! kernel cache keys (with the target's name).

use ipu_target::Target;
use serde::{Deserialize, Serialize};

use crate::KernelError;

/// Throughput, blocking rules and overheads of the AMP GEMM kernels.
///
/// Overheads are counted in *worker instructions*: a worker context issues
/// one instruction every `worker_contexts` tile cycles, so a call takes
/// `call_cycles + worker_contexts × (instructions of the busiest worker)`
/// tile cycles.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AmpModel {
    /// Worker contexts per tile (6 on IPU21).
    pub worker_contexts: u32,
    /// MACs of one F16-input AMP instruction with F16 partials (64).
    pub f16_macs_per_instruction: u32,
    /// MACs of one FP8-input AMP instruction with F16 partials (128).
    pub fp8_macs_per_instruction: u32,
    /// F32 partials divide the rate by this (an assumption, see the device file).
    pub f32_partials_rate_divisor: u32,
    /// The inner block `k` is a multiple of this for F16 weights (16).
    pub f16_micro_inner: u32,
    /// The inner block `k` is a multiple of this for FP8 weights (32).
    pub fp8_micro_inner: u32,
    /// The column block `c` is a multiple of this (16).
    pub column_multiple: u32,
    /// Tile cycles of a call outside the workers: entry, run, sync.
    pub call_cycles: u32,
    /// Instructions of the supervisor entry, plus two per worker it starts.
    pub supervisor_instructions: u32,
    /// Worker prologue and exit instructions.
    pub worker_setup_instructions: u32,
    /// Instructions to set up one coefficient block load (plus one per run).
    pub coefficient_setup_instructions: u32,
    /// Bytes per load instruction from interleaved memory.
    pub interleaved_load_bytes: u32,
    /// Bytes per load instruction from standard memory.
    pub standard_load_bytes: u32,
    /// Instructions to set up one row stream (plus one per run).
    pub stream_setup_instructions: u32,
    /// AMP pipeline fill and drain instructions per row stream.
    pub pipeline_instructions: u32,
    /// Instructions to set up one partial load or store (plus one per run);
    /// the partial data moves in load/store bundles co-issued with the AMP
    /// instructions.
    pub partial_setup_instructions: u32,
    /// Code bytes per instruction in the code-size model.
    pub instruction_bytes: u32,
    /// Bytes the AMP reads past the end of an F16 or FP8 left operand.
    pub left_tail_bytes_f16: u32,
    /// Bytes the AMP reads past the end of an F32 left operand.
    pub left_tail_bytes_f32: u32,
    /// Every GEMM operand address is a multiple of this (32).
    pub operand_alignment: u32,
}

impl Default for AmpModel {
    fn default() -> Self {
        Self::ipu21()
    }
}

impl AmpModel {
    /// The AMP model of `target`.
    pub fn new(target: &Target) -> Self {
        let a = target.amp();
        let m = target.memory();
        Self {
            worker_contexts: target.worker_contexts(),
            f16_macs_per_instruction: a.f16_macs_per_instruction,
            fp8_macs_per_instruction: a.fp8_macs_per_instruction,
            f32_partials_rate_divisor: a.f32_partials_rate_divisor,
            f16_micro_inner: a.f16_micro_inner,
            fp8_micro_inner: a.fp8_micro_inner,
            column_multiple: a.column_multiple,
            call_cycles: a.call_cycles,
            supervisor_instructions: a.supervisor_instructions,
            worker_setup_instructions: a.worker_setup_instructions,
            coefficient_setup_instructions: a.coefficient_setup_instructions,
            interleaved_load_bytes: a.interleaved_load_bytes,
            standard_load_bytes: a.standard_load_bytes,
            stream_setup_instructions: a.stream_setup_instructions,
            pipeline_instructions: a.pipeline_instructions,
            partial_setup_instructions: a.partial_setup_instructions,
            instruction_bytes: a.instruction_bytes,
            left_tail_bytes_f16: m.amp_left_tail_bytes_f16,
            left_tail_bytes_f32: m.amp_left_tail_bytes_f32,
            operand_alignment: m.operand_alignment,
        }
    }

    /// The AMP model of the built-in IPU21 target ([`Target::ipu21`]).
    pub fn ipu21() -> Self {
        Self::new(Target::ipu21())
    }

    /// Checks the values the arithmetic divides by or blocks on.
    pub fn validate(&self) -> Result<(), KernelError> {
        let positive = [
            (self.worker_contexts, "worker_contexts"),
            (self.f16_macs_per_instruction, "f16_macs_per_instruction"),
            (self.fp8_macs_per_instruction, "fp8_macs_per_instruction"),
            (self.f32_partials_rate_divisor, "f32_partials_rate_divisor"),
            (self.f16_micro_inner, "f16_micro_inner"),
            (self.fp8_micro_inner, "fp8_micro_inner"),
            (self.column_multiple, "column_multiple"),
            (self.operand_alignment, "operand_alignment"),
            (self.interleaved_load_bytes, "interleaved_load_bytes"),
            (self.standard_load_bytes, "standard_load_bytes"),
        ];
        for (value, name) in positive {
            if value == 0 {
                return Err(KernelError::Device {
                    reason: format!("{name} is zero; it must be at least 1"),
                });
            }
        }
        if self.worker_contexts > 64 {
            return Err(KernelError::Device {
                reason: format!(
                    "worker_contexts is {}; at most 64 contexts are modelled",
                    self.worker_contexts
                ),
            });
        }
        Ok(())
    }
}
