//! The AMP unit and kernel cost model of a target, as data.
//!
//! The numbers live in the `[amp]` section of `device/ipu21.toml` (with the
//! worker count from the file's top level, and the left-operand read tail
//! and operand alignment from `[memory]`), so a new target is a new file. [`AmpModel::ipu21`] returns
//! the IPU21 values as constants so that it cannot fail; a test checks that
//! they equal what [`AmpModel::from_device_toml`] reads from the file.

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

/// The parts of a device file this crate reads.
#[derive(Deserialize)]
struct DeviceFile {
    worker_contexts: u32,
    memory: MemorySection,
    amp: AmpSection,
}

#[derive(Deserialize)]
struct MemorySection {
    amp_left_tail_bytes_f16: u32,
    amp_left_tail_bytes_f32: u32,
    operand_alignment: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AmpSection {
    f16_macs_per_instruction: u32,
    fp8_macs_per_instruction: u32,
    f32_partials_rate_divisor: u32,
    f16_micro_inner: u32,
    fp8_micro_inner: u32,
    column_multiple: u32,
    call_cycles: u32,
    supervisor_instructions: u32,
    worker_setup_instructions: u32,
    coefficient_setup_instructions: u32,
    interleaved_load_bytes: u32,
    standard_load_bytes: u32,
    stream_setup_instructions: u32,
    pipeline_instructions: u32,
    partial_setup_instructions: u32,
    instruction_bytes: u32,
}

impl AmpModel {
    /// The IPU21 values (the same as `device/ipu21.toml`).
    pub const fn ipu21() -> Self {
        Self {
            worker_contexts: 6,
            f16_macs_per_instruction: 64,
            fp8_macs_per_instruction: 128,
            f32_partials_rate_divisor: 2,
            f16_micro_inner: 16,
            fp8_micro_inner: 32,
            column_multiple: 16,
            call_cycles: 60,
            supervisor_instructions: 12,
            worker_setup_instructions: 10,
            coefficient_setup_instructions: 4,
            interleaved_load_bytes: 16,
            standard_load_bytes: 8,
            stream_setup_instructions: 6,
            pipeline_instructions: 4,
            partial_setup_instructions: 3,
            instruction_bytes: 4,
            left_tail_bytes_f16: 16,
            left_tail_bytes_f32: 32,
            operand_alignment: 32,
        }
    }

    /// Reads a model from a device description in the `device/ipu21.toml`
    /// format.
    pub fn from_device_toml(text: &str) -> Result<Self, KernelError> {
        let file: DeviceFile = toml::from_str(text).map_err(|e| KernelError::Device {
            reason: e.to_string(),
        })?;
        let a = file.amp;
        let model = Self {
            worker_contexts: file.worker_contexts,
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
            left_tail_bytes_f16: file.memory.amp_left_tail_bytes_f16,
            left_tail_bytes_f32: file.memory.amp_left_tail_bytes_f32,
            operand_alignment: file.memory.operand_alignment,
        };
        model.validate()?;
        Ok(model)
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
