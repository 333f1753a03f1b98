//! The cycle estimate of a built package: how long one run takes on the
//! device, where the time goes, and how far it is from the roofline.
//!
//! ```text
//! Package ──► every step, in program order (repeat bodies once, × count):
//!   compute step   busiest tile's Σ codelet cycles + sync
//!                    GEMM: ipu_kernels::estimate_cycles on the kernel's variant
//!                    other codelets: the [vector] model (cost.rs)
//!   exchange step  phase horizon (phases[i].info.horizon)
//!                    + busiest tile's on-tile copies + sync
//! ──► Profile: per step, per repeat iteration (layer), per op kind, per
//!     codelet kind, per kernel; totals; roofline (work.rs)
//! ```
//!
//! The estimate is a model, held to what can be checked here: every AMP
//! program in the package's objects is costed again from its ops and must
//! equal the closed form the estimate uses ([`check_kernels`], recorded in
//! [`Profile::kernel_check`]); the tile model counts what it executes in
//! the same units ([`Work`], GEMM programs, replayed exchange rows) and the
//! tests compare the two step by step. Every constant is in the device
//! description (`[amp]`, `[vector]`, `[sync]`) with its source.
//!
//! A step's time is its busiest tile's: tiles run a step side by side and
//! the sync at its end waits for the last. Steps add up; a repeat body's
//! steps run once per iteration (iterations differ only in addresses, which
//! cost nothing here). Step names are lowering's `KIND OP` (`gemm enc0.qkv`,
//! `reduce enc0.qkv`, `attention combine enc0.attn`): the last word is the
//! op, the words before it the kind.
//!
//! # `profile.json` (`ipu-package/profile/v1`)
//!
//! The serde form of [`Profile`]; `docs/FORMAT.md` lists the fields. All
//! figures are integers (cycles, MACs, parts per million), so the file is
//! byte-identical whatever the machine; rates and times are derived by
//! readers from `clock_hz` ([`Profile::micros`]).

mod causal;
mod cost;
mod kernel_cost;
mod walk;
mod work;

use ipu_exchange::DecodeError;
use ipu_kernels::KernelError;
use serde::{Deserialize, Serialize};

pub use cost::{CODELET_KINDS, VectorModel, Work, codelet_work, combines_in_f16, work_floor};
pub use kernel_cost::{KernelCheck, KernelCosts, check_kernels, kernel_variant};
pub use work::{MacCounts, ModelWork, RepeatWork};

use crate::graph::Graph;
use crate::package::Package;
use crate::program::KernelId;

/// The schema identifier written into every profile.
pub const PROFILE_SCHEMA: &str = "ipu-package/profile/v1";

/// What the estimate needs beyond the package.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProfileConfig {
    /// The model's arithmetic, for the roofline and the items per run.
    pub work: ModelWork,
}

impl ProfileConfig {
    /// The configuration for a package built from `graph`.
    pub fn for_graph(graph: &Graph) -> ProfileConfig {
        ProfileConfig {
            work: ModelWork::of_graph(graph),
        }
    }
}

/// Why a package could not be profiled. Each names what is inconsistent;
/// a package that [`Package::validate`] accepts and that a build wrote
/// never fails here.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// The package has another number of kernel objects than kernel specs.
    #[error("the package has {objects} kernel objects for {specs} kernel specs; rebuild it")]
    KernelCount {
        /// Objects (`kernels.json`).
        objects: usize,
        /// Specs (`program.json`).
        specs: usize,
    },
    /// A kernel's `kernel.json` does not parse.
    #[error("the metadata of kernel {kernel} does not parse: {source}")]
    KernelMetadata {
        /// The kernel.
        kernel: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A kernel's metadata describes no valid variant for the target.
    #[error("kernel {kernel} describes no valid variant for the package's target: {source}")]
    Variant {
        /// The kernel.
        kernel: String,
        /// Why.
        #[source]
        source: KernelError,
    },
    /// A kernel's variant has another key on this target than recorded: it
    /// was compiled for another AMP model.
    #[error(
        "kernel {kernel} was compiled for another AMP model than the package's target describes; rebuild the package"
    )]
    VariantKey {
        /// The kernel.
        kernel: String,
    },
    /// A kernel object cannot be read.
    #[error("the object of kernel {kernel} cannot be read: {source}")]
    KernelObject {
        /// The kernel.
        kernel: String,
        /// Why.
        #[source]
        source: KernelError,
    },
    /// A kernel object lacks an entry's program.
    #[error("the object of kernel {kernel} has no program for entry {symbol}")]
    MissingEntry {
        /// The kernel.
        kernel: String,
        /// The entry symbol.
        symbol: String,
    },
    /// A GEMM call names a kernel the package does not have.
    #[error("a GEMM call names {kernel}, but the package has {kernels} kernels")]
    MissingKernel {
        /// The kernel named.
        kernel: KernelId,
        /// Kernels in the package.
        kernels: usize,
    },
    /// A GEMM call's rows differ from its entry's.
    #[error("a GEMM call of {kernel} has {rows} rows, but its entry multiplies {expected}")]
    GemmRows {
        /// The kernel.
        kernel: KernelId,
        /// Rows of the call.
        rows: u32,
        /// Rows of the entry.
        expected: u32,
    },
    /// A codelet runs on a tile the package does not have.
    #[error("step {step} runs a codelet on tile {tile}, but the package has {tiles} tiles")]
    Tile {
        /// The step's name.
        step: String,
        /// The tile.
        tile: u32,
        /// Tiles of the package.
        tiles: u32,
    },
    /// A codelet names a buffer the program does not have.
    #[error("step {step} names buffer {buffer}, but the program has {buffers} buffers")]
    MissingBuffer {
        /// The step's name.
        step: String,
        /// The buffer's number.
        buffer: u32,
        /// Buffers of the program.
        buffers: usize,
    },
    /// The program's exchange steps and the package's phases differ in
    /// number.
    #[error(
        "the program has {steps} exchange steps (repeat bodies once) but the package {phases} phases"
    )]
    PhaseCount {
        /// Exchange steps.
        steps: usize,
        /// Phases.
        phases: usize,
    },
    /// A phase's exchange rows do not decode.
    #[error("the rows of phase {phase} do not decode: {source}")]
    Rows {
        /// The phase.
        phase: usize,
        /// Why.
        #[source]
        source: DecodeError,
    },
    /// `profile.json` is not a profile of this schema.
    #[error("profile.json is not an {PROFILE_SCHEMA} profile: {reason}")]
    Format {
        /// What is wrong.
        reason: String,
    },
    /// `profile.json` is not JSON of the profile's form.
    #[error("profile.json is not an {PROFILE_SCHEMA} profile: {source}")]
    Json {
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
}

/// Compute or exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StepKind {
    /// Tiles run codelets.
    Compute,
    /// Tiles exchange data (and copy within themselves).
    Exchange,
}

/// Cycles and calls of one kind of work on a step's busiest tile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindCycles {
    /// The kind ([`CODELET_KINDS`]).
    pub kind: String,
    /// Calls on the busiest tile.
    pub calls: u64,
    /// Their cycles.
    pub cycles: u64,
}

/// What an exchange step's phase says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExchangeStep {
    /// The phase (index into `phases.json`).
    pub phase: u32,
    /// The schedule's horizon.
    pub horizon: u64,
    /// The endpoint lower bound.
    pub endpoint_lower_bound: u64,
    /// The stronger lower bound.
    pub stronger_lower_bound: u64,
    /// The tile whose exchange row runs longest (lowest such tile), if any
    /// tile has a row.
    pub longest_row_tile: Option<u32>,
    /// That row's length in cycles.
    pub longest_row_cycles: u64,
    /// The tile with the most on-tile copy cycles, if any.
    pub copy_tile: Option<u32>,
    /// Its copy cycles.
    pub copy_cycles: u64,
}

/// One step of the program, run `runs` times.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepProfile {
    /// The step's number in program order, repeat bodies once (the step
    /// numbers of `memory-profile.json`).
    pub index: u32,
    /// The step's name.
    pub name: String,
    /// Compute or exchange.
    pub kind: StepKind,
    /// The op kind: the name without its last word (`gemm`, `reduce`,
    /// `attention combine`, `clear gemm`).
    pub op_kind: String,
    /// The op: the name's last word (`enc0.qkv`), empty for one-word names.
    pub op: String,
    /// The repeat whose body holds the step (innermost; index into
    /// [`Profile::repeats`]).
    pub repeat: Option<u32>,
    /// Times the step runs in one run of the program.
    pub runs: u64,
    /// Cycles of one run of the step: `work_cycles + sync_cycles`.
    pub cycles: u64,
    /// The busiest tile's cycles (compute), or the horizon plus the
    /// busiest tile's copies (exchange).
    pub work_cycles: u64,
    /// The sync that ends the step.
    pub sync_cycles: u64,
    /// The tile that decides the step's time: the one with the most codelet
    /// cycles (compute), or with the longest exchange row (exchange).
    pub busiest_tile: Option<u32>,
    /// Tiles with work in the step.
    pub active_tiles: u32,
    /// Mean cycles over the active tiles (compute), to show balance.
    pub mean_tile_cycles: u64,
    /// The busiest tile's work by kind (compute).
    pub busiest_kinds: Vec<KindCycles>,
    /// AMP MACs of the step's GEMM calls on all tiles (padded shards).
    pub amp_macs: u64,
    /// Σ over the step's GEMM calls of their cycles at the AMP's peak, on
    /// all tiles.
    pub amp_ideal_tile_cycles: u64,
    /// The least work cycles the step could take as planned (no sync): for
    /// a compute step, the busiest tile's multiply-accumulates at the AMP's
    /// peak for their precision and its other elements at one datapath
    /// vector a cycle; for an exchange step, the phase's endpoint bound
    /// (the busiest tile's 32-bit items sent or received, one a cycle)
    /// plus the busiest tile's on-tile copies at one vector a cycle.
    pub floor_cycles: u64,
    /// The phase, for an exchange step.
    pub exchange: Option<ExchangeStep>,
}

/// One repeat (a layer, for SigLIP's encoder).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepeatProfile {
    /// The repeat's name.
    pub name: String,
    /// Iterations per run of the enclosing program.
    pub count: u32,
    /// Number of the body's first step.
    pub first_step: u32,
    /// Steps of the body (repeat bodies within once).
    pub steps: u32,
    /// Cycles of one iteration.
    pub cycles: u64,
    /// Of which compute steps' work.
    pub compute_cycles: u64,
    /// Of which exchange steps' work.
    pub exchange_cycles: u64,
    /// Of which syncs.
    pub sync_cycles: u64,
    /// The roofline of one iteration (from the graph's repeat of the same
    /// name; 0 when the graph has none).
    pub roofline_cycles: u64,
    /// One iteration with every step at its floor, syncs included.
    pub floor_cycles: u64,
}

/// Totals of one op kind over a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpKindProfile {
    /// The op kind.
    pub op_kind: String,
    /// Step runs.
    pub step_runs: u64,
    /// Compute steps' work.
    pub compute_cycles: u64,
    /// Exchange steps' work.
    pub exchange_cycles: u64,
    /// Syncs.
    pub sync_cycles: u64,
}

/// Totals of one kind of tile work over a run, on the steps' busiest tiles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeletProfile {
    /// The kind ([`CODELET_KINDS`]).
    pub kind: String,
    /// Calls on all tiles.
    pub calls: u64,
    /// Cycles on the busiest tile of each step, summed over step runs: the
    /// kind's share of the run's compute time.
    pub busiest_cycles: u64,
}

/// One entry of a GEMM kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryProfile {
    /// The entry symbol.
    pub symbol: String,
    /// Rows it multiplies.
    pub rows: u32,
    /// Whether it accumulates.
    pub accumulate: bool,
    /// Cycles per call.
    pub cycles: u64,
    /// MACs per call (padded shard).
    pub macs: u64,
    /// AMP utilisation of a call, parts per million.
    pub utilisation_ppm: u32,
    /// Calls in one run, on all tiles.
    pub calls: u64,
}

/// One GEMM kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelProfile {
    /// The kernel's name in the package.
    pub name: String,
    /// The AMP instruction.
    pub instruction: String,
    /// Inner block, column block, small and large rows.
    pub blocks: [u32; 4],
    /// Shard inner and columns.
    pub shape: [u32; 2],
    /// The four entries.
    pub entries: Vec<EntryProfile>,
}

/// Totals of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Cycles of one run.
    pub cycles: u64,
    /// Compute steps' work.
    pub compute_cycles: u64,
    /// Exchange steps' work (horizons and on-tile copies).
    pub exchange_cycles: u64,
    /// Syncs.
    pub sync_cycles: u64,
    /// AMP MACs done (padded shards, all tiles).
    pub amp_macs: u64,
    /// Σ over GEMM calls of their cycles at the AMP's peak.
    pub amp_ideal_tile_cycles: u64,
    /// Σ over step runs of the steps' floors (`StepProfile::floor_cycles`)
    /// and syncs: the run's time if every step ran at its floor.
    pub floor_cycles: u64,
}

/// The cycle estimate of a package (`profile.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Always [`PROFILE_SCHEMA`].
    pub schema: String,
    /// The target's name.
    pub target: String,
    /// Tiles.
    pub tile_count: u32,
    /// The tile clock in Hz.
    pub clock_hz: u64,
    /// The sync cost charged per step.
    pub sync_cycles_per_step: u64,
    /// The model's arithmetic.
    pub work: ModelWork,
    /// Totals of one run.
    pub totals: Totals,
    /// The model's MACs at each one's AMP peak rate on every tile.
    pub roofline_cycles: u64,
    /// The model's MACs at the FP8 peak rate on every tile.
    pub fp8_roofline_cycles: u64,
    /// The AMP programs against the kernel cost model.
    pub kernel_check: KernelCheck,
    /// Every repeat.
    pub repeats: Vec<RepeatProfile>,
    /// Every step, in program order with repeat bodies once.
    pub steps: Vec<StepProfile>,
    /// Totals per op kind, largest first.
    pub op_kinds: Vec<OpKindProfile>,
    /// Totals per kind of tile work, in [`CODELET_KINDS`] order.
    pub codelets: Vec<CodeletProfile>,
    /// Every GEMM kernel.
    pub kernels: Vec<KernelProfile>,
}

/// Estimates how long one run of `package` takes (see the module header).
pub fn estimate(package: &Package, config: &ProfileConfig) -> Result<Profile, ProfileError> {
    walk::estimate(package, config)
}

impl Profile {
    /// Microseconds of `cycles` at the target's clock.
    pub fn micros(&self, cycles: u64) -> f64 {
        cycles as f64 * 1e6 / self.clock_hz.max(1) as f64
    }

    /// Items (images) per second: items per run over the run's time.
    pub fn items_per_second(&self) -> f64 {
        let seconds = self.micros(self.totals.cycles) / 1e6;
        if seconds > 0.0 {
            self.work.items as f64 / seconds
        } else {
            0.0
        }
    }

    /// The roofline over the estimate: 1 means the run takes exactly as
    /// long as its MACs at the AMP's peak.
    pub fn roofline_ratio(&self) -> f64 {
        ratio(self.roofline_cycles, self.totals.cycles)
    }

    /// The FP8 roofline over the estimate.
    pub fn fp8_roofline_ratio(&self) -> f64 {
        ratio(self.fp8_roofline_cycles, self.totals.cycles)
    }

    /// The AMP utilisation over the whole run: the cycles the GEMM calls
    /// would take at the AMP's peak, over every tile's cycles.
    pub fn amp_utilisation(&self) -> f64 {
        ratio(
            self.totals.amp_ideal_tile_cycles,
            self.totals
                .cycles
                .saturating_mul(u64::from(self.tile_count)),
        )
    }

    /// Reads a profile from `profile.json` text.
    pub fn from_json(text: &str) -> Result<Profile, ProfileError> {
        let p: Profile =
            serde_json::from_str(text).map_err(|source| ProfileError::Json { source })?;
        if p.schema != PROFILE_SCHEMA {
            return Err(ProfileError::Format {
                reason: format!("its schema is {:?}", p.schema),
            });
        }
        Ok(p)
    }

    /// The profile as `profile.json` text (pretty JSON).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// One line for a build summary.
    pub fn summary_line(&self) -> String {
        let t = &self.totals;
        let share = |c: u64| 100.0 * ratio(c, t.cycles);
        format!(
            "estimate cycles={} ({:.1} us at {:.2} GHz) items_per_s={:.1} compute={:.1}% exchange={:.1}% sync={:.1}% amp_utilisation={:.1}% roofline={:.1}% fp8_roofline={:.1}%",
            t.cycles,
            self.micros(t.cycles),
            self.clock_hz as f64 / 1e9,
            self.items_per_second(),
            share(t.compute_cycles),
            share(t.exchange_cycles),
            share(t.sync_cycles),
            100.0 * self.amp_utilisation(),
            100.0 * self.roofline_ratio(),
            100.0 * self.fp8_roofline_ratio(),
        )
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}
