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

/// The AMP unit and the overheads of the GEMM kernels' cost model.
///
/// Overheads are counted in worker instructions unless the name says
/// cycles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmpSpec {
    /// MACs of one F16-input AMP instruction with F16 partials.
    pub f16_macs_per_instruction: u32,
    /// MACs of one FP8-input AMP instruction with F16 partials.
    pub fp8_macs_per_instruction: u32,
    /// F32 partials divide the rate by this.
    pub f32_partials_rate_divisor: u32,
    /// The inner block is a multiple of this for F16 weights.
    pub f16_micro_inner: u32,
    /// The inner block is a multiple of this for FP8 weights.
    pub fp8_micro_inner: u32,
    /// AMP output columns per instruction.
    pub column_multiple: u32,
    /// Tile cycles of a call outside the workers.
    pub call_cycles: u32,
    /// Instructions of the supervisor entry (plus two per worker).
    pub supervisor_instructions: u32,
    /// Worker prologue and exit instructions.
    pub worker_setup_instructions: u32,
    /// Instructions per coefficient block load (plus one per run).
    pub coefficient_setup_instructions: u32,
    /// Bytes per load from interleaved memory.
    pub interleaved_load_bytes: u32,
    /// Bytes per load from standard memory.
    pub standard_load_bytes: u32,
    /// Instructions per row stream (plus one per run).
    pub stream_setup_instructions: u32,
    /// AMP pipeline fill and drain instructions per row stream.
    pub pipeline_instructions: u32,
    /// Instructions per partial load or store (plus one per run).
    pub partial_setup_instructions: u32,
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
    /// Bytes one copy or clear instruction moves.
    pub copy_bytes_per_instruction: u32,
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
