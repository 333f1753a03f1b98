//! The tile model's options (per-op check, work limits, injected faults,
//! a progress hook) and the statistics of a run, with its cycle count.

use std::sync::Arc;
use std::time::Duration;

use ipu_layout::TileId;
use ipu_package::graph::Activation;
use ipu_package::program::{BufferId, Codelet};

/// The codelet kinds [`RunStats::codelets`] reports, in that order.
pub const CODELET_KINDS: [&str; 15] = [
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
];

pub(super) fn codelet_kind(c: &Codelet) -> usize {
    match c {
        Codelet::Gemm { .. } => 0,
        Codelet::Add { .. } => 1,
        Codelet::LayerNorm { .. } => 2,
        Codelet::Activation { function, .. } => match function {
            Activation::GeluTanh => 3,
            Activation::GeluErf => 4,
            Activation::QuickGelu => 5,
            Activation::Tanh => 6,
        },
        Codelet::Convert { .. } => 7,
        Codelet::ReduceSum { .. } => 8,
        Codelet::AttentionBlock { .. } => 9,
        Codelet::AttentionCombine { .. } => 10,
        Codelet::AttentionSoftmax { .. } => 11,
        Codelet::Panels { .. } => 12,
        Codelet::Zero { .. } => 13,
        Codelet::Gather { .. } => 14,
    }
}

/// How much a run may do; a package needing more is refused before it
/// runs with [`SimError::TooManyTiles`](crate::SimError::TooManyTiles) or [`SimError::WorkLimit`](crate::SimError::WorkLimit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Tiles (each holds a 624 KiB image): 8192 by default, 5 GiB of
    /// images.
    pub max_tiles: u32,
    /// Step executions, a repeat's steps once per iteration and each
    /// iteration itself: 2^24 by default.
    pub max_steps: u64,
    /// Codelet elements across all iterations (GEMM multiply-accumulates;
    /// elements of element-wise codelets; 2 × query rows × key rows × head
    /// columns per attention block; every factor counted as at least 1):
    /// 2^41 by default, about three times SigLIP so400m b2's 27 layers.
    pub max_compute_elements: u64,
    /// Exchange words across all iterations (two per item the rows send,
    /// one per row word, and the on-tile copies' words): 2^38 by default.
    pub max_exchange_words: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_tiles: 8192,
            max_steps: 1 << 24,
            max_compute_elements: 1 << 41,
            max_exchange_words: 1 << 38,
        }
    }
}

/// A change made to the images after the host has written inputs and
/// weights: every data element of `buffer`'s shard on `tile` gets `delta`
/// added (and is re-encoded in the buffer's precision). For showing that
/// the checks catch a wrong value; a real run has none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fault {
    /// The buffer (an input or weight).
    pub buffer: BufferId,
    /// The tile whose shard changes.
    pub tile: TileId,
    /// What is added to every element.
    pub delta: f32,
}

/// How far a run has come: compute and exchange step executions done (a
/// repeat's steps once per iteration) of the run's total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepProgress {
    /// Steps run so far, per-op check included.
    pub done: u64,
    /// Steps the whole run executes, counted before it starts.
    pub total: u64,
}

/// A function the tile model calls as a run goes: once with `done == 0`
/// before the first step, then after every compute and exchange step (and
/// its per-op check). It is called on the thread that called
/// [`run_package_with`](crate::tiles::run_package_with), in step order, so
/// the calls are the same whatever the thread count; it sees counts only
/// and cannot change the run. Two hooks are equal when they are the same
/// function object.
#[derive(Clone)]
pub struct ProgressHook(Arc<dyn Fn(StepProgress) + Send + Sync>);

impl ProgressHook {
    /// A hook calling `f`.
    pub fn new(f: impl Fn(StepProgress) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    pub(super) fn report(&self, progress: StepProgress) {
        (self.0)(progress);
    }
}

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressHook(..)")
    }
}

impl PartialEq for ProgressHook {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Options of [`run_package_with`](crate::tiles::run_package_with).
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    /// Check every op against the reference evaluated on the device's own
    /// inputs (on by default).
    pub check_ops: bool,
    /// Work limits.
    pub limits: Limits,
    /// Faults injected after loading (none by default).
    pub faults: Vec<Fault>,
    /// Told of every step run (none by default).
    pub progress: Option<ProgressHook>,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            check_ops: true,
            limits: Limits::default(),
            faults: Vec::new(),
            progress: None,
        }
    }
}

/// Calls and time of one codelet kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindStats {
    /// Calls run.
    pub calls: u64,
    /// Time spent in them, summed over worker threads (so it can exceed
    /// the wall time of the compute steps).
    pub busy: Duration,
}

/// Where the time of a run went. Timings vary from run to run; the
/// results do not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Validating the package, setting up the images and decoding the
    /// kernel programs.
    pub setup: Duration,
    /// Writing inputs and weights into the images.
    pub load: Duration,
    /// Wall time of the compute steps.
    pub compute: Duration,
    /// Per codelet kind (indexed like [`CODELET_KINDS`]).
    pub codelets: [KindStats; CODELET_KINDS.len()],
    /// Wall time of the exchange steps (row decoding, replay and on-tile
    /// copies).
    pub exchange: Duration,
    /// Exchange steps run.
    pub exchange_steps: u64,
    /// Words the exchange replays wrote.
    pub exchange_words: u64,
    /// Wall time of the per-op check (reading results back, evaluating
    /// and comparing).
    pub op_check: Duration,
    /// Ops the per-op check compared.
    pub ops_checked: u64,
    /// CPU time the whole process spent during the run, all threads (from
    /// `/proc/self/stat`; `None` where that cannot be read). Unlike the
    /// wall times it does not grow when other processes load the machine.
    pub cpu: Option<Duration>,
    /// The part of [`RunStats::cpu`] spent in the per-op check.
    pub op_check_cpu: Option<Duration>,
    /// Reading the outputs back.
    pub outputs: Duration,
    /// Wall time of each iteration of the program's outermost repeats:
    /// `(repeat name, iteration, time)` (per-op checking excluded).
    pub iterations: Vec<(String, u32, Duration)>,
    /// Wall time of every compute and exchange step run, by the step's
    /// name, in run order (a repeat's steps once per iteration).
    pub steps: Vec<(String, Duration)>,
    /// The device cycles of the run, counted from what the model executed.
    pub cycles: CycleCount,
}

/// One step run, as the tile model counts its device cycles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepCycles {
    /// The step's name.
    pub name: String,
    /// Whether it is an exchange step.
    pub exchange: bool,
    /// Its cycles: the busiest tile's work and the sync.
    pub cycles: u64,
    /// The tile with the most work (lowest such tile): codelet cycles in a
    /// compute step, on-tile copy cycles in an exchange step.
    pub busiest_tile: Option<TileId>,
}

/// The device cycles of a run as the tile model counts them, from what it
/// executes and independently of `ipu_package::profile`'s estimate, which
/// reads the package: a GEMM call costs what the AMP program it emulated
/// costs by its ops (`ipu_kernels::program_cycles`), every other codelet
/// the vector model's cycles of the elements, rows and partials it actually
/// read and wrote (`ipu_package::profile::Work`), an exchange step the
/// cycles its replayed rows ran for plus the on-tile copies it did, and
/// every step the target's sync. A step takes its busiest tile's cycles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleCount {
    /// Cycles of the run.
    pub total: u64,
    /// Of which compute steps' work.
    pub compute: u64,
    /// Of which exchange steps' work.
    pub exchange: u64,
    /// Of which syncs.
    pub sync: u64,
    /// GEMM calls whose kernel's variant could not be rebuilt from its
    /// metadata, counted as no cycles (0 in a package a build wrote).
    pub uncounted_gemm_calls: u64,
    /// Every step run, in run order.
    pub steps: Vec<StepCycles>,
}

impl CycleCount {
    /// Adds one step run.
    pub(super) fn push(&mut self, step: StepCycles, work: u64, sync: u64) {
        self.total = self.total.saturating_add(step.cycles);
        self.sync = self.sync.saturating_add(sync);
        if step.exchange {
            self.exchange = self.exchange.saturating_add(work);
        } else {
            self.compute = self.compute.saturating_add(work);
        }
        self.steps.push(step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_activation_is_counted_under_its_own_name() {
        let operand = BufferId::from_u32(0).into();
        for function in Activation::ALL {
            let call = Codelet::Activation {
                input: operand,
                output: operand,
                elements: 1,
                function,
            };
            assert_eq!(CODELET_KINDS[codelet_kind(&call)], function.name());
            assert_eq!(crate::codelets::codelet_name(&call), function.name());
        }
    }
}
