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

/// Throughput, pass shape and overheads of the AMP GEMM kernels.
///
/// A call is a sequence of passes (see `cost.rs`): per pass the supervisor
/// loads one weight tile into the tile's one set of coefficient registers,
/// starts the workers and syncs, and each worker streams its own rows.
/// Figures are tile cycles unless the name says instructions: a worker
/// context issues one instruction every `worker_contexts` tile cycles.
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
    /// Inner extent of a pass with F16 weights (16).
    pub f16_micro_inner: u32,
    /// Inner extent of a pass with FP8 weights (32).
    pub fp8_micro_inner: u32,
    /// Columns of a pass (16).
    pub column_multiple: u32,
    /// Bytes per coefficient load from interleaved memory.
    pub interleaved_load_bytes: u32,
    /// Bytes per coefficient load from standard memory.
    pub standard_load_bytes: u32,
    /// The overheads of the F16-row path.
    pub f16: PathCosts,
    /// The overheads of the FP8-row path.
    pub fp8: PathCosts,
    /// Code-size model: supervisor instructions besides the unrolled
    /// coefficient loads.
    pub supervisor_code_instructions: u32,
    /// Code-size model: worker instructions.
    pub worker_code_instructions: u32,
    /// Code bytes per instruction in the code-size model.
    pub instruction_bytes: u32,
    /// Bytes the AMP reads past the end of an F16 or FP8 left operand.
    pub left_tail_bytes_f16: u32,
    /// Bytes the AMP reads past the end of an F32 left operand.
    pub left_tail_bytes_f32: u32,
    /// Every GEMM operand address is a multiple of this (32).
    pub operand_alignment: u32,
}

/// The overheads of one kernel path (F16 rows, or FP8 rows and weights).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PathCosts {
    /// Cycles of a call outside its groups and passes.
    pub call_cycles: u32,
    /// Cycles per group of the outer loop.
    pub group_cycles: u32,
    /// Supervisor cycles per pass besides its weight load.
    pub pass_cycles: u32,
    /// Worker instructions per row stream besides its rows (from three
    /// rows on).
    pub stream_instructions: u32,
    /// Worker instructions of a one-row stream.
    pub one_row_stream_instructions: u32,
    /// Worker instructions of a two-row stream.
    pub two_row_stream_instructions: u32,
    /// Extra worker instructions of a stream whose partials start from
    /// the output instead of zero.
    pub partial_load_instructions: u32,
    /// Cycles the least busy worker of a pass adds to its end: a pass's
    /// workers take `max(contexts × busiest, contexts × least busy + tail)`.
    pub tail_cycles: u32,
}

impl PathCosts {
    /// Worker instructions of a stream of `rows` rows, each taking
    /// `row_instructions`, its partials loaded from the output or not.
    pub fn stream(&self, rows: u64, row_instructions: u64, loaded: bool) -> u64 {
        let stream = match rows {
            0 => 0,
            1 => u64::from(self.one_row_stream_instructions),
            2 => u64::from(self.two_row_stream_instructions),
            n => u64::from(self.stream_instructions)
                .saturating_add(n.saturating_mul(row_instructions)),
        };
        if loaded && rows > 0 {
            stream.saturating_add(u64::from(self.partial_load_instructions))
        } else {
            stream
        }
    }
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
            interleaved_load_bytes: a.interleaved_load_bytes,
            standard_load_bytes: a.standard_load_bytes,
            f16: PathCosts {
                call_cycles: a.f16_call_cycles,
                group_cycles: a.f16_group_cycles,
                pass_cycles: a.f16_pass_cycles,
                stream_instructions: a.f16_stream_instructions,
                one_row_stream_instructions: a.f16_one_row_stream_instructions,
                two_row_stream_instructions: a.f16_two_row_stream_instructions,
                partial_load_instructions: a.f16_partial_load_instructions,
                tail_cycles: a.f16_tail_cycles,
            },
            fp8: PathCosts {
                call_cycles: a.fp8_call_cycles,
                group_cycles: a.fp8_group_cycles,
                pass_cycles: a.fp8_pass_cycles,
                stream_instructions: a.fp8_stream_instructions,
                one_row_stream_instructions: a.fp8_one_row_stream_instructions,
                two_row_stream_instructions: a.fp8_two_row_stream_instructions,
                partial_load_instructions: a.fp8_partial_load_instructions,
                tail_cycles: a.fp8_tail_cycles,
            },
            supervisor_code_instructions: a.supervisor_code_instructions,
            worker_code_instructions: a.worker_code_instructions,
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
        // A pass's inner extent is whole AMP steps (4 F16 or 8 FP8 inner
        // elements), so pass boundaries are step boundaries.
        for (micro, step, name) in [
            (self.f16_micro_inner, 4, "f16_micro_inner"),
            (self.fp8_micro_inner, 8, "fp8_micro_inner"),
        ] {
            if micro % step != 0 {
                return Err(KernelError::Device {
                    reason: format!("{name} is {micro}; it must be a multiple of {step}"),
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
