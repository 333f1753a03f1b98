//! The description's data, section by section, in the serde form of the
//! TOML file. Every field is documented with its unit; the built-in file
//! says where each IPU21 value comes from.

use ipu_layout::MemoryClass;
use serde::{Deserialize, Serialize};

/// A device description as written in its file. [`crate::Target::new`]
/// validates it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// A short name (`ipu21`), recorded in packages and cache keys.
    pub name: String,
    /// Tiles on the device.
    pub tile_count: u32,
    /// Worker contexts per tile (barrel-scheduled: each issues one
    /// instruction every `worker_contexts` cycles).
    pub worker_contexts: u32,
    /// Tile clock in Hz.
    pub clock_hz: u64,
    /// Tile memory.
    pub memory: MemorySpec,
    /// The exchange fabric.
    pub exchange: ExchangeSpec,
    /// The AMP unit and the GEMM kernels' cost figures.
    pub amp: AmpSpec,
    /// Support memory of the runtime.
    pub runtime: RuntimeSpec,
    /// Cycle figures for steps and vector work.
    pub timing: TimingSpec,
    /// The vector unit and the non-GEMM codelets' cost figures.
    pub vector: VectorSpec,
    /// The sync that ends every step.
    pub sync: SyncSpec,
}

/// Tile memory: the SRAM, its regions and what each memory class may use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// First SRAM address.
    pub sram_start: u32,
    /// One past the last SRAM address.
    pub sram_end: u32,
    /// Nothing may be placed at or above this address (the loader fills
    /// only below it).
    pub loader_limit: u32,
    /// The regions, in address order.
    pub regions: Vec<RegionSpec>,
    /// The address ranges each memory class may use (before the loader
    /// limit cuts them).
    pub classes: Vec<ClassSpec>,
    /// Every GEMM operand address is a multiple of this.
    pub operand_alignment: u32,
    /// Bytes the AMP reads past the end of an F16 or FP8 left operand.
    pub amp_left_tail_bytes_f16: u32,
    /// Bytes the AMP reads past the end of an F32 left operand.
    pub amp_left_tail_bytes_f32: u32,
}

/// One region of tile memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionSpec {
    /// The region's name (`region0`).
    pub name: String,
    /// First address.
    pub start: u32,
    /// One past the last address.
    pub end: u32,
    /// The memory element: the unit of access contention (and of support
    /// reservations in an executable region).
    pub element_bytes: u32,
    /// Whether instructions may be fetched from the region.
    pub executable: bool,
}

/// The address ranges one memory class may use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    /// The class.
    pub class: MemoryClass,
    /// `[start, end)` ranges.
    pub ranges: Vec<(u32, u32)>,
}

/// The exchange fabric's timing and structure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeSpec {
    /// Cycles from a send to the write at every listening receiver.
    pub latency_cycles: u32,
    /// Cycles a receiver loses when it switches source.
    pub source_switch_cycles: u32,
    /// Cycles a receiver loses when its write pointer is set.
    pub pointer_switch_cycles: u32,
    /// Paired64 sends borrow the transmit lane of tile `t ^ partner_xor`.
    pub partner_xor: u32,
    /// Whether a tile's send read and incoming write may not touch the same
    /// memory element in one cycle.
    pub memory_element_hazards: bool,
}

/// The AMP unit and the GEMM kernels' cost model.
///
/// A call is a sequence of passes: the supervisor loads one weight tile
/// into the tile's single set of coefficient registers, starts the workers
/// and syncs; each worker streams its own rows. Figures are tile cycles
/// unless the name says instructions (a worker's, each taking
/// `worker_contexts` cycles). The `f16_*` overheads are those of the F16-row
/// path, the `fp8_*` ones those of FP8 rows and weights.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmpSpec {
    /// MACs of one F16-input AMP instruction with F16 partials.
    pub f16_macs_per_instruction: u32,
    /// MACs of one FP8-input AMP instruction with F16 partials.
    pub fp8_macs_per_instruction: u32,
    /// F32 partials divide the rate by this.
    pub f32_partials_rate_divisor: u32,
    /// Inner extent of one pass (one coefficient tile) with F16 weights.
    pub f16_micro_inner: u32,
    /// Inner extent of one pass with FP8 weights.
    pub fp8_micro_inner: u32,
    /// AMP output columns per instruction, and per pass.
    pub column_multiple: u32,
    /// Bytes per coefficient load from interleaved memory.
    pub interleaved_load_bytes: u32,
    /// Bytes per coefficient load from standard memory.
    pub standard_load_bytes: u32,
    /// F16 path: cycles of a call outside its groups and passes.
    pub f16_call_cycles: u32,
    /// F16 path: cycles per group of its outer loop (an inner slice).
    pub f16_group_cycles: u32,
    /// F16 path: supervisor cycles per pass besides the weight load.
    pub f16_pass_cycles: u32,
    /// F16 path: worker instructions per row stream besides the rows.
    pub f16_stream_instructions: u32,
    /// F16 path: worker instructions of a one-row stream.
    pub f16_one_row_stream_instructions: u32,
    /// F16 path: worker instructions of a two-row stream.
    pub f16_two_row_stream_instructions: u32,
    /// F16 path: cycles the least busy worker of a pass adds to its end.
    pub f16_tail_cycles: u32,
    /// F16 path: extra worker instructions of a stream whose partials
    /// start from the output rather than from zero.
    pub f16_partial_load_instructions: u32,
    /// FP8 path: cycles of a call outside its groups and passes.
    pub fp8_call_cycles: u32,
    /// FP8 path: cycles per group of its outer loop (a column slice).
    pub fp8_group_cycles: u32,
    /// FP8 path: supervisor cycles per pass besides the weight load.
    pub fp8_pass_cycles: u32,
    /// FP8 path: worker instructions per row stream besides the rows.
    pub fp8_stream_instructions: u32,
    /// FP8 path: worker instructions of a one-row stream.
    pub fp8_one_row_stream_instructions: u32,
    /// FP8 path: worker instructions of a two-row stream.
    pub fp8_two_row_stream_instructions: u32,
    /// FP8 path: cycles the least busy worker of a pass adds to its end.
    pub fp8_tail_cycles: u32,
    /// FP8 path: extra worker instructions of a stream whose partials
    /// start from the output.
    pub fp8_partial_load_instructions: u32,
    /// Code-size model: supervisor instructions besides the unrolled
    /// coefficient loads.
    pub supervisor_code_instructions: u32,
    /// Code-size model: worker instructions.
    pub worker_code_instructions: u32,
    /// Code bytes per instruction in the code-size model.
    pub instruction_bytes: u32,
}

/// Support memory of the runtime, reserved on every tile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSpec {
    /// Bytes of the control-program interpreter, sync and the non-GEMM
    /// codelets.
    pub runtime_bytes: u32,
    /// Control-program bytes per step.
    pub control_step_bytes: u32,
    /// Control-program bytes per codelet argument word.
    pub control_word_bytes: u32,
}

/// Cycle figures the planner ranks plans with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingSpec {
    /// Fixed cycles of an exchange phase (sync and fabric latency).
    pub exchange_phase_cycles: u64,
    /// Fixed cycles of a compute step (sync and vertex dispatch).
    pub compute_step_cycles: u64,
    /// Cycles per element of row-wise vector work across the workers.
    pub vector_cycles_per_element: f64,
}

/// The vector unit and the cost figures of every codelet but the GEMM.
///
/// A codelet call takes `call_cycles + worker_contexts × (instructions of
/// its busiest worker)` tile cycles; figures are in worker instructions
/// unless the name says otherwise. A vector is `datapath_bytes` of
/// elements.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorSpec {
    /// Bytes of one vector operation's operands (64-bit datapath: 4 F16,
    /// 2 F32 or 8 FP8 lanes).
    pub datapath_bytes: u32,
    /// Tile cycles of a call outside the workers.
    pub call_cycles: u32,
    /// Worker prologue and exit.
    pub worker_setup_instructions: u32,
    /// An element-wise add, per vector.
    pub add_instructions_per_vector: u32,
    /// GELU (tanh approximation), per vector.
    pub gelu_instructions_per_vector: u32,
    /// GELU in its exact form (with the error function), per vector.
    pub gelu_erf_instructions_per_vector: u32,
    /// Quick GELU, `x·sigmoid(1.702·x)`, per vector.
    pub quick_gelu_instructions_per_vector: u32,
    /// The hyperbolic tangent, per vector.
    pub tanh_instructions_per_vector: u32,
    /// A precision conversion, per vector.
    pub convert_instructions_per_vector: u32,
    /// A sum of partials, per partial and vector.
    pub reduce_instructions_per_vector: u32,
    /// Layer normalisation, per vector of a row.
    pub layer_norm_instructions_per_vector: u32,
    /// Layer normalisation, per row.
    pub layer_norm_row_instructions: u32,
    /// Layer normalisation of a row split over several workers (a tile
    /// with fewer rows than workers): per part, combining its sum and sum
    /// of squares into the row's.
    pub layer_norm_combine_instructions_per_part: u32,
    /// Exponentials, per vector.
    pub exp_instructions_per_vector: u32,
    /// Multiply-accumulates of one dot-product instruction (F16 inputs).
    pub dot_macs_per_instruction: u32,
    /// Multiply-adds of one axpy instruction (F32).
    pub axpy_macs_per_instruction: u32,
    /// Attention, per query row and block.
    pub attention_row_instructions: u32,
    /// The combine of F16 attention blocks, per vector of a block's row:
    /// multiplying it by the block's weight and adding it to the row's
    /// sum, in F16.
    pub combine_f16_instructions_per_vector: u32,
    /// The softmax between the AMP's two attention products, per vector
    /// of scores: scaling them and taking the row maximum.
    pub softmax_scale_instructions_per_vector: u32,
    /// The same, per vector of scores that are not scaled (the queries
    /// carry the factor): taking the row maximum only.
    pub softmax_max_instructions_per_vector: u32,
    /// The same softmax, per vector of F16 exponentials besides the
    /// exponential itself: subtracting the maximum, adding to the row sum
    /// and storing.
    pub softmax_sum_instructions_per_vector: u32,
    /// The same where the values' product sums the probabilities (a
    /// column of ones in its weights): subtracting the maximum and
    /// storing, per vector of F16 exponentials besides the exponential.
    pub softmax_store_instructions_per_vector: u32,
    /// The same softmax, per vector of a row past its keys (the padding
    /// the values' product reads as zeros), and once more for a last
    /// vector the keys fill only in part: storing zeros, or clearing the
    /// lanes past the keys (the exponential of a padded score is not 0).
    pub softmax_tail_instructions_per_vector: u32,
    /// A transpose into AMP panels, per group of four source rows.
    pub transpose_group_instructions: u32,
    /// The same transpose, per four-by-four block of 16-bit elements.
    pub transpose_block_instructions: u32,
    /// Bytes one copy or clear instruction moves.
    pub copy_bytes_per_instruction: u32,
    /// A strided clear, per run besides its stores: the loop's step to
    /// the next run's address.
    pub zero_run_instructions: u32,
    /// A gather, per index: read it, test it against the shard's rows and
    /// choose the source row (the table's, or zeros).
    pub gather_row_instructions: u32,
    /// A gather, per vector of a picked row: load, convert to the output
    /// precision, store.
    pub gather_instructions_per_vector: u32,
}

/// The sync of all tiles that ends every compute step and exchange phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncSpec {
    /// Tile cycles of one sync.
    pub sync_cycles: u64,
}
