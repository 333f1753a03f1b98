//! AMP GEMM kernels for IPU21 tiles.
//!
//! From a tile's GEMM shard ([`GemmShape`]) this crate plans a [`Variant`]
//! (its pass shape `k × c` and the small and large row counts one object
//! serves), builds its [`AmpProgram`] (an explicit, inspectable sequence of
//! passes over operand-relative addresses: per pass the supervisor loads one
//! weight tile into the tile's shared coefficient registers and the six
//! worker contexts stream their own rows), estimates its cycles and code
//! bytes, emulates it bit-faithfully
//! on a tile memory image, checks built programs independently, and compiles
//! variants through a [`Toolchain`] into ELF32 objects (EM 248, OS ABI
//! standalone) plus `kernel.json`, kept by content key in a [`KernelStore`]
//! (the disk [`KernelCache`], a [`MemoryStore`] or the embedder's own):
//! [`fetch_kernel`] takes a kernel from a store or compiles it, and checks
//! it either way ([`check_kernel`]).
//!
//! ```text
//! GemmShape ──plan_variant──► Variant ──build_program──► AmpProgram ──emulate──► tile bytes
//!                               │                          └─check_program (independent)
//!                               ├─estimate_cycles / code_bytes (cost model, device/ipu21.toml [amp])
//!                               └─fetch_kernel: KernelStore::get, else Toolchain::compile + put
//!                                   ──check_kernel──► kernel.o + kernel.json
//!                                    kernel.o ──programs_from_object──► (symbol, AmpProgram)
//! ```
//!
//! The FP8 codec and F16 conversions are `ipu_layout::numeric`; this crate
//! uses them and has no codec of its own.

#![forbid(unsafe_code)]

mod cache;
mod check;
mod cost;
mod emulate;
mod entry;
mod error;
mod model;
mod object;
mod problem;
mod program;
#[cfg(feature = "testing")]
pub mod siglip;
mod store;
mod variant;
mod verify;

pub use cache::KernelCache;
pub use check::{CheckError, check_program};
pub use cost::{
    CycleEstimate, code_bytes, entry_code_bytes, entry_code_instructions, estimate_cycles,
    peak_macs_per_cycle, program_cycles,
};
pub use emulate::{
    EmulateOptions, EmulationStats, KernelArgs, PreparedProgram, ProductTables, Rounding, emulate,
    emulate_prepared, emulate_with, round_f16, round_f32,
};
pub use error::{EmulateError, KernelError, OpSite, Operand};
pub use model::{AmpModel, PathCosts};
pub use object::{
    AMP_SECTION, CompiledKernel, EntryMetadata, HostToolchain, KERNEL_METADATA_VERSION,
    KernelMetadata, Toolchain, assemble_kernel, programs_from_object,
};
pub use problem::{
    GemmProblem, Mismatch, ProblemError, RunOutput, image_base, pack_matrix, unpack_matrix,
};
pub use program::{
    AmpOp, AmpProgram, CoefficientLoad, OuterLoop, PROGRAM_FORMAT_VERSION, Pass, PassGroup,
    ProgramHeader, Run, WorkerProgram, build_program,
};
pub use store::{
    CacheOutcome, FetchedKernel, KernelKey, KernelStore, MemoryStore, cache_key, fetch_kernel,
};
pub use variant::{
    Arithmetic, DEFAULT_LEFT_ORDER, EntryPoint, GemmShape, Mode, PlanConfig, RowSize, Variant,
    pass_shape, plan_variant,
};
pub use verify::{KernelCheckError, check_kernel};

ipu_layout::define_id!(
    /// A worker context of a tile, `0..worker_contexts`.
    pub struct WorkerId, "worker"
);
