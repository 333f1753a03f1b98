//! `build_package`: the whole pipeline, stage by stage.
//!
//! ```text
//! plan_package      lower the graph, plan storage, then:
//!   plan_kernels      one AMP variant per GEMM kernel spec (kernels.rs)
//!   compile_kernels   objects through the kernel store and toolchain
//!   shape_exchange    every exchange step's transfers in buffer terms,
//!                     once per plan (exchange.rs, crate::phases)
//!   size_tile_code    runtime, code, control program and row estimate per
//!                     tile, reserved in the code region (support.rs)
//!   place_storage     every shard on every tile, by the placer, checked
//!                     by check_placement (place.rs)
//!   schedule_exchange every phase at the placed addresses, by the exchange
//!                     scheduler, checked by check_schedule (exchange.rs)
//! ```
//!
//! The device is one value, [`BuildConfig::target`]; the stages are values
//! behind small traits ([`Stages`]): a placer, an exchange scheduler, a
//! kernel toolchain and a kernel store, with this workspace's as defaults.
//! The checkers are not stages: they run on whatever a stage returns, so a
//! user's stage is held to the same invariants as ours.
//!
//! Support memory (runtime, kernel code, control program, exchange rows,
//! repeat patches) must sit in the code region, but exchange rows hold
//! addresses that only placement decides. The circularity is broken by
//! reservation then verification: the support of each tile is estimated
//! from what every step's shape makes it send and receive and reserved (in
//! whole memory elements, so that rows never share an element with the
//! data their phase moves); data is placed around the reservation; the
//! rows are then encoded with the real addresses and every tile's support
//! is checked against its reservation. The first reservation is generous,
//! so that one scheduling round is the rule; if placement fails with it,
//! the likely figure is reserved instead (memory is short, and every
//! element it saves is data space). A tile whose support outgrows its
//! reservation gets the measured size and placement runs again; a step
//! none of whose data moved keeps its rows, and the others have their
//! timing re-encoded rather than scheduled again — never an overlap.
//!
//! When placement fails, the plan trades cycles for memory where it
//! failed: the operation at the failing step gets half its transient
//! budget and the graph is lowered again; only when that changes nothing
//! is every operation's budget halved. Up to [`BuildConfig::max_replans`]
//! replans run, and a plan whose storage is the failed one's is not placed
//! again.

mod error;
mod exchange;
mod kernels;
mod place;
mod summary;
mod support;

use std::time::Instant;

use ipu_alloc::{BuiltinPlacer, MemoryMap, PlaceConfig, PlaceError, Placer, Verdict};
use ipu_exchange::{BuiltinScheduler, ExchangeScheduler, Fabric, ScheduleConfig};
use ipu_kernels::{HostToolchain, KernelCache, KernelStore, MemoryStore, Toolchain};
use ipu_target::Target;
use rayon::prelude::*;
use tracing::{debug, info, info_span, warn};

pub use error::{BuildError, Culprit, Culprits};

use crate::graph::{Graph, Op, OpId};
use crate::lower::{LowerConfig, amp_attention_bytes, least_amp_attention_bytes, lower};
use crate::package::{
    BufferAddresses, FORMAT_VERSION, Manifest, Package, PackagePhase, PackagePlacement,
};
use crate::phases::FragmentCache;
use crate::plan::CostModel;
use crate::program::StepLabel;
use crate::storage::plan_storage;

/// What to build, for which device.
#[derive(Clone, Debug)]
pub struct BuildConfig {
    /// The device. Every device fact the build uses comes from here.
    pub target: Target,
    /// Tiles to use; `None` uses every tile of the target.
    pub tiles: Option<u32>,
    /// Lowering options. Its `tiles` and `cost` are replaced by the
    /// build's tile count and the target's cost model.
    pub lower: LowerConfig,
    /// Run every checker (placement, schedules) before returning.
    pub verify: bool,
    /// How many times to lower again with a smaller budget when placement
    /// fails.
    pub max_replans: u32,
}

impl Default for BuildConfig {
    fn default() -> Self {
        Self {
            target: Target::ipu21().clone(),
            tiles: None,
            lower: LowerConfig::default(),
            verify: true,
            max_replans: 3,
        }
    }
}

/// The stages a build runs, each behind a small trait so that an embedding
/// toolchain can bring its own.
pub struct Stages {
    /// Places every shard on every tile.
    pub placer: Box<dyn Placer>,
    /// Schedules and encodes every exchange phase.
    pub scheduler: Box<dyn ExchangeScheduler>,
    /// Compiles GEMM kernel variants into objects.
    pub toolchain: Box<dyn Toolchain>,
    /// Keeps compiled kernels between builds.
    pub kernel_store: Box<dyn KernelStore>,
}

impl Stages {
    /// This workspace's stages with kernels kept in `store`: ipu-alloc's
    /// placer (the build runs the checker itself, so the placer's own
    /// check is off), ipu-exchange's scheduler and the host toolchain.
    ///
    /// The scheduler keeps multicasts whole except fanout-2 ones, which it
    /// may split where the sender has spare lane time. A plan's multicasts
    /// are replicated GEMM operands and attention blocks (fanout 5–45) on
    /// receive-bound steps: split into unicasts they become many more jobs
    /// and segments and the steps get longer, and split by the core while
    /// scheduling they cost three times the time for a horizon within 1 %.
    /// Those steps are mostly scheduled by receiver sets, which do not
    /// split anything (`ScheduleConfig::receiver_sets`). `cargo xtask
    /// exchange` on a build's phases compares these settings with
    /// ipu-exchange's defaults.
    pub fn builtin(store: Box<dyn KernelStore>) -> Stages {
        Stages {
            placer: Box::new(BuiltinPlacer {
                config: PlaceConfig {
                    verify: false,
                    ..PlaceConfig::default()
                },
            }),
            scheduler: Box::new(BuiltinScheduler {
                config: ScheduleConfig {
                    verify: false,
                    fanout_split: false,
                    presplit_max_fanout: 2,
                    ..ScheduleConfig::default()
                },
            }),
            toolchain: Box::new(HostToolchain),
            kernel_store: store,
        }
    }

    /// The built-in stages with the disk kernel cache the environment
    /// names ([`KernelCache::from_env`]).
    pub fn with_disk_cache() -> Result<Stages, BuildError> {
        let cache = KernelCache::from_env().map_err(|source| BuildError::KernelStore { source })?;
        Ok(Stages::builtin(Box::new(cache)))
    }

    /// The built-in stages with kernels kept in memory for the life of the
    /// value.
    pub fn in_memory() -> Stages {
        Stages::builtin(Box::new(MemoryStore::new()))
    }
}

impl std::fmt::Debug for Stages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stages")
            .field("placer", &self.placer.name())
            .field("scheduler", &self.scheduler.name())
            .field("toolchain", &self.toolchain.identity())
            .field("kernel_store", &self.kernel_store.name())
            .finish()
    }
}

/// Elapsed milliseconds of each build phase, in the order they ran.
pub(crate) type PhaseTimes = Vec<(String, u64)>;

/// Runs `f` as a named build phase: a span `phase{phase=...}` and the
/// seed's closing event `package build phase finished`.
fn phase<T, E>(
    name: &'static str,
    times: &mut PhaseTimes,
    f: impl FnOnce(&mut PhaseTimes) -> Result<T, E>,
) -> Result<T, E> {
    let span = info_span!("phase", phase = name);
    let _enter = span.enter();
    let start = Instant::now();
    let r = f(times);
    let elapsed_ms = start.elapsed().as_millis() as u64;
    info!(
        phase = name,
        elapsed_ms,
        success = r.is_ok(),
        "package build phase finished"
    );
    times.push((name.to_owned(), elapsed_ms));
    r
}

/// The device as each stage sees it.
pub(crate) struct Device<'a> {
    pub target: &'a Target,
    pub map: MemoryMap,
    pub fabric: Fabric,
    pub tiles: u32,
}

/// Builds the package of `graph` with `stages`.
pub fn build_package(
    graph: &Graph,
    config: &BuildConfig,
    stages: &Stages,
) -> Result<Package, BuildError> {
    let target = &config.target;
    let tiles = config.tiles.unwrap_or(target.tile_count());
    let span = info_span!(
        "ipu_backend.package.build",
        tile_count = tiles,
        operations = graph.ops().len()
    );
    let _enter = span.enter();
    if tiles == 0 || tiles > target.tile_count() {
        return Err(BuildError::Tiles {
            asked: tiles,
            target: target.name().to_owned(),
            available: target.tile_count(),
        });
    }
    crate::graph::check_buildable(graph).map_err(BuildError::Unbuildable)?;
    check_capacity(graph, target, tiles)?;
    let device = Device {
        target,
        map: MemoryMap::new(target),
        fabric: Fabric::new(target)?,
        tiles,
    };
    let mut times = PhaseTimes::new();
    let mut lower_config = config.lower.clone();
    lower_config.tiles = tiles;
    lower_config.cost = CostModel::new(target);
    let planned = phase("plan_package", &mut times, |times| {
        plan(graph, config, stages, &device, &mut lower_config, times)
    })?;
    let summary = summary::summarise(&device, &planned, &times, lower_config.transient_budget);
    let problem = planned.problem;
    let mut package = Package {
        manifest: Manifest {
            format_version: FORMAT_VERSION,
            name: graph.name().to_owned(),
            target: target.name().to_owned(),
            tile_count: tiles,
            summary,
            files: Vec::new(),
        },
        target: target.clone(),
        program: planned.program,
        placement: PackagePlacement {
            addresses: planned.addresses,
            support: planned.support,
        },
        phases: planned.phases,
        kernels: planned.kernels,
        memory_profile: String::new(),
        profile: None,
        fixture: None,
        weights: None,
        model: None,
    };
    // The cycle estimate does not read the memory profile: the two are
    // made side by side.
    let (profile, memory_profile) = rayon::join(
        || crate::profile::estimate(&package, &crate::profile::ProfileConfig::for_graph(graph)),
        || ipu_alloc::MemoryProfile::from_problem(&problem).to_json(),
    );
    package.memory_profile = memory_profile;
    package.profile = Some(profile.map_err(|source| BuildError::Profile { source })?);
    Ok(package)
}

/// Everything a successful plan produced.
pub(crate) struct Planned {
    pub program: crate::program::Program,
    pub storage: crate::storage::StoragePlan,
    pub kernels: Vec<crate::package::PackageKernel>,
    pub problem: ipu_alloc::Problem,
    pub placement: ipu_alloc::Placement,
    pub addresses: BufferAddresses,
    pub phases: Vec<PackagePhase>,
    pub support: Vec<crate::package::TileSupport>,
}

/// Lowers, places and schedules; while placement fails and replans
/// remain, lowers again with less memory where it failed.
///
/// A replan targets the failing step: the operation that runs there (a
/// GEMM or attention, or the GEMM whose partial sums a reduction sums) gets
/// half its transient budget (an attention on the AMP: a budget just
/// below its plan's bytes, [`attention_replan_budget`]), and the rest of
/// the plan keeps its cycles.
/// Only when the step runs no such operation, or its plan no longer
/// changes, is the budget of every operation halved. A plan whose storage
/// is the failed one's is not placed again.
fn plan(
    graph: &Graph,
    config: &BuildConfig,
    stages: &Stages,
    device: &Device<'_>,
    lower_config: &mut LowerConfig,
    times: &mut PhaseTimes,
) -> Result<Planned, BuildError> {
    let mut memory = Replans::default();
    let mut attempt = 0;
    loop {
        match plan_once(
            graph,
            config,
            stages,
            device,
            lower_config,
            times,
            &mut memory,
        ) {
            Err(BuildError::DoesNotFit { error, culprits }) if attempt < config.max_replans => {
                attempt += 1;
                let target = culprits
                    .label
                    .as_ref()
                    .and_then(|label| failing_operation(graph, label));
                let repeated = memory.failed.as_ref().is_some_and(|f| f.repeated);
                let step = culprits
                    .label
                    .as_ref()
                    .map_or_else(|| "?".to_owned(), ToString::to_string);
                match target {
                    Some(op) if !repeated => {
                        let budget = match graph.op(op) {
                            Op::Attention { .. } => attention_replan_budget(
                                lower_config.attention_budget_for(op),
                                amp_attention_bytes(graph, op, lower_config),
                                least_amp_attention_bytes(graph, op, lower_config),
                                proven_lack(&error),
                                lower_config.op_budgets.contains_key(&op),
                            ),
                            _ => lower_config.budget_for(op) / 2,
                        };
                        warn!(
                            tile = culprits.tile,
                            step = %step,
                            operation = %op,
                            output = graph.tensor(graph.op(op).output()).name(),
                            budget,
                            error = %error,
                            "placement failed; trading cycles for memory in the operation at the failing step"
                        );
                        lower_config.op_budgets.insert(op, budget);
                    }
                    _ => {
                        lower_config.transient_budget /= 2;
                        warn!(
                            tile = culprits.tile,
                            step = %step,
                            budget = lower_config.transient_budget,
                            error = %error,
                            "placement failed; trading cycles for memory with a smaller transient budget"
                        );
                    }
                }
            }
            other => return other,
        }
    }
}

/// The bytes a failing step lacks, where the placer's lower bound proves
/// it.
fn proven_lack(error: &PlaceError) -> Option<u64> {
    match error {
        PlaceError::DoesNotFit(failure) => match failure.verdict {
            Verdict::BoundExceeded { needs_bytes, .. } => Some(needs_bytes),
            _ => None,
        },
        _ => None,
    }
}

/// The budget a replan gives an attention whose budget was `budget` and
/// whose AMP plan takes `planned` bytes a tile (`None`: on the vector
/// unit): below the plan, by twice what the failing step `lacks` where the
/// lower bound proves it and by an eighth of the plan otherwise, so that
/// the next AMP plan (more passes, another grid) is the fastest that
/// takes less. Halving instead can leave no AMP plan at all and move the
/// attention to the vector unit: on SigLIP b3, 1,049,046 estimated cycles
/// a layer against 182,927 on the AMP. Never below half the budget, which
/// is also the vector attention's step, nor below the `least` bytes of
/// any AMP plan while the plan takes more. An attention failing `again`
/// after a replan of its own goes straight to that floor: each step down
/// costs a round of planning and placement (SigLIP b6 took four rounds
/// inching down, three of them for its attention, and did not fit within
/// the default three).
fn attention_replan_budget(
    budget: u64,
    planned: Option<u64>,
    least: Option<u64>,
    lacks: Option<u64>,
    again: bool,
) -> u64 {
    let half = budget / 2;
    let Some(planned) = planned else {
        return half;
    };
    let cut = match lacks {
        _ if again => planned,
        Some(b) => b.saturating_mul(2),
        None => planned / 8,
    };
    let next = planned.min(budget).saturating_sub(cut.max(1)).max(half);
    match least {
        // Not below the smallest AMP plan while the plan is larger: the
        // vector attention costs several times the AMP's cycles, so the
        // next replans take memory from elsewhere first.
        Some(least) if least < planned => next.max(least),
        _ => next,
    }
}

#[cfg(test)]
mod replan_tests {
    use super::attention_replan_budget;

    #[test]
    fn an_attention_replans_just_below_its_plan() {
        // (budget, planned, least AMP plan, lacks, again) → next budget.
        let cases = [
            // A plan of 180,000 bytes under a 204,800-byte budget, a step
            // short of 3,000 bytes: the next plan must take 6,000 fewer.
            ((204_800, Some(180_000), None, Some(3_000), false), 174_000),
            // Without a proof of the shortfall, an eighth of the plan.
            ((204_800, Some(180_000), None, None, false), 157_500),
            // Never below half; on the vector unit, half.
            ((204_800, Some(180_000), None, Some(90_000), false), 102_400),
            ((204_800, None, None, Some(3_000), false), 102_400),
            // Not below the smallest AMP plan while the plan is larger; at
            // the smallest plan, below it (the vector unit's budget).
            (
                (204_800, Some(180_000), Some(170_000), Some(30_000), false),
                170_000,
            ),
            (
                (204_800, Some(180_000), Some(150_000), Some(3_000), false),
                174_000,
            ),
            (
                (204_800, Some(170_000), Some(170_000), Some(3_000), false),
                164_000,
            ),
            // Again after a replan of its own: the smallest AMP plan at
            // once, or half the budget where that is below it.
            (
                (204_800, Some(180_000), Some(150_000), Some(3_000), true),
                150_000,
            ),
            ((204_800, Some(180_000), Some(60_000), None, true), 102_400),
        ];
        for ((budget, planned, least, lacks, again), next) in cases {
            assert_eq!(
                attention_replan_budget(budget, planned, least, lacks, again),
                next,
                "{budget} {planned:?} {least:?} {lacks:?} {again}"
            );
        }
    }
}

/// The operation whose plan decides what is live at a failing step, if
/// its plan has a budget: a GEMM's or an attention's, whichever of its
/// steps (clears, operands, the kernel calls, the reduction or the
/// combination) failed.
fn failing_operation(graph: &Graph, label: &StepLabel) -> Option<OpId> {
    let op = label.op?;
    let budgeted = matches!(graph.ops().get(op)?, Op::Gemm { .. } | Op::Attention { .. });
    budgeted.then_some(op)
}

/// What one plan tells the next.
#[derive(Default)]
struct Replans {
    /// Per tile, the support an earlier plan grew it to (0 where it did
    /// not grow): a replan starts from it, since the estimate was already
    /// shown too small there.
    measured: Option<Vec<u32>>,
    /// The last plan that did not fit.
    failed: Option<FailedPlan>,
}

/// The storage of a plan that did not fit, and its failure: a replan whose
/// storage is the same would fail the same way.
struct FailedPlan {
    tiles: Vec<crate::storage::TileStorage>,
    culprits: Box<Culprits>,
    error: Box<PlaceError>,
    /// Whether the last plan came back unchanged.
    repeated: bool,
}

/// Raises each tile's support reservation to what an earlier round
/// measured there, if one did.
fn raise_to_measured(reserved: &mut [u32], measured: Option<&[u32]>) {
    if let Some(m) = measured {
        for (r, &m) in reserved.iter_mut().zip(m) {
            *r = (*r).max(m);
        }
    }
}

/// One plan at the current transient budget.
fn plan_once(
    graph: &Graph,
    config: &BuildConfig,
    stages: &Stages,
    device: &Device<'_>,
    lower_config: &LowerConfig,
    times: &mut PhaseTimes,
    memory: &mut Replans,
) -> Result<Planned, BuildError> {
    let Replans { measured, failed } = memory;
    let program = lower(graph, lower_config)?;
    // Every exchange step's shape (fragments, multicast grouping) is
    // computed once per plan, for the estimate and for every scheduling
    // round. Neither it nor the storage plan reads the other, and the
    // storage plan runs on one thread: the two run side by side (a plan
    // whose storage repeats a failed one is refused after its shaping).
    let (storage, shapes) = rayon::join(
        || plan_storage(&program, device.tiles),
        || {
            phase("shape_exchange", times, |_| {
                let mut fragments = FragmentCache::default();
                exchange::shape_steps(&program, device.tiles, &mut fragments)
            })
        },
    );
    let storage = storage?;
    if let Some(f) = failed.as_mut() {
        f.repeated = f.tiles == storage.tiles;
        if f.repeated {
            // The same storage as the plan that did not fit: it would not
            // fit again.
            return Err(BuildError::DoesNotFit {
                error: f.error.clone(),
                culprits: f.culprits.clone(),
            });
        }
    }
    let variants = phase("plan_kernels", times, |_| {
        kernels::plan_kernels(&program, device.target)
    })?;
    let kernels = phase("compile_kernels", times, |_| {
        kernels::compile_kernels(&variants, device.target, stages)
    })?;
    let shapes = shapes?;
    info!(
        phases = shapes.len(),
        transfers = shapes
            .iter()
            .map(|s| s.first().transfer_count())
            .sum::<usize>(),
        "shaped exchange phases"
    );
    let sizes = phase("size_tile_code", times, |_| {
        Ok::<_, BuildError>(support::TileCode::size(
            &program, &variants, device, &shapes,
        ))
    })?;
    let mut reserved = sizes.reservations(support::Estimate::Generous);
    info!(
        max_reserved_bytes = reserved.iter().max().copied().unwrap_or(0),
        mean_reserved_bytes =
            reserved.iter().map(|&b| u64::from(b)).sum::<u64>() / u64::from(device.tiles.max(1)),
        "reserved support memory"
    );
    raise_to_measured(&mut reserved, measured.as_deref());
    // Reservation, then verification of the real rows against it.
    let mut rounds = 0;
    // The previous round: placing again moves data but not the transfers,
    // so a step keeps its rows when none of its data moved, and has its
    // timing re-encoded, not scheduled again, when some did.
    let mut previous: Option<exchange::Round> = None;
    let mut estimate = support::Estimate::Generous;
    loop {
        let placed = phase("place_storage", times, |_| {
            place::place_storage(&program, &storage, &reserved, device, stages, config.verify)
        });
        let (problem, placement) = match placed {
            Err(BuildError::DoesNotFit { error, .. })
                if estimate == support::Estimate::Generous && rounds == 0 =>
            {
                // Memory is short: reserve what the rows are likely to
                // need instead of the generous figure; the tiles whose
                // rows outgrow it are placed again.
                estimate = support::Estimate::Likely;
                reserved = sizes.reservations(estimate);
                raise_to_measured(&mut reserved, measured.as_deref());
                warn!(
                    error = %error,
                    max_reserved_bytes = reserved.iter().max().copied().unwrap_or(0),
                    "placement failed; reserving the likely support instead of a generous estimate"
                );
                continue;
            }
            Err(e @ BuildError::DoesNotFit { .. }) => {
                if let BuildError::DoesNotFit { error, culprits } = &e {
                    *failed = Some(FailedPlan {
                        tiles: storage.tiles.clone(),
                        culprits: culprits.clone(),
                        error: error.clone(),
                        repeated: false,
                    });
                }
                return Err(e);
            }
            other => other?,
        };
        let addresses = place::buffer_addresses(&program, &storage, &placement);
        let scheduled = phase("schedule_exchange", times, |_| {
            exchange::schedule_phases(
                &program,
                &shapes,
                &addresses,
                device,
                stages.scheduler.as_ref(),
                config.verify,
                previous.take(),
            )
        })?;
        let support = sizes.measure(scheduled.iter().map(|s| &s.phase), &reserved);
        let (below, margin) = sizes.likely_against(&support);
        debug!(
            likely_below_measured_tiles = below,
            mean_likely_margin_bytes = margin,
            "measured exchange rows against their likely estimate"
        );
        let outgrown: Vec<usize> = (0..device.tiles as usize)
            .filter(|&t| support[t].used() > reserved[t])
            .collect();
        if outgrown.is_empty() {
            // The schedules (segments, relocations) are dropped here, on
            // every thread: hundreds of thousands of allocations.
            let phases = scheduled.into_par_iter().map(|s| s.phase).collect();
            return Ok(Planned {
                program,
                storage,
                kernels,
                problem,
                placement,
                addresses,
                phases,
                support,
            });
        }
        if rounds >= 2 {
            return Err(BuildError::SupportOutgrown {
                tiles: outgrown.len(),
            });
        }
        warn!(
            tiles = outgrown.len(),
            "support memory outgrew its reservation; placing again"
        );
        let grown = measured.get_or_insert_with(|| vec![0; device.tiles as usize]);
        for t in outgrown {
            reserved[t] = sizes.grown_reservation(support[t].used());
            grown[t] = grown[t].max(reserved[t]);
        }
        previous = Some(exchange::Round {
            steps: scheduled,
            addresses,
        });
        rounds += 1;
    }
}

impl From<ipu_exchange::FabricError> for BuildError {
    fn from(source: ipu_exchange::FabricError) -> Self {
        BuildError::Fabric { source }
    }
}

impl BuildError {
    /// Wraps a placer's failure: a does-not-fit report gets the culprits
    /// the build knows, anything else keeps the placer's name.
    pub(crate) fn from_placer(
        placer: &str,
        error: PlaceError,
        culprits: impl FnOnce(&ipu_alloc::FitFailure) -> Culprits,
    ) -> BuildError {
        match error {
            PlaceError::DoesNotFit(f) => BuildError::DoesNotFit {
                culprits: Box::new(culprits(&f)),
                error: Box::new(PlaceError::DoesNotFit(f)),
            },
            other => BuildError::Place {
                placer: placer.to_owned(),
                source: Box::new(other),
            },
        }
    }
}

/// Refuses, before any work, a graph that cannot fit whatever the plan:
/// its weights together, or its largest tensor alone, need more bytes
/// than the tiles hold. Both are lower bounds of what any placement
/// holds at once, so nothing that could fit is refused; a graph of
/// 65536 layers on 16 tiles is refused at once instead of after minutes of
/// lowering.
fn check_capacity(graph: &Graph, target: &Target, tiles: u32) -> Result<(), BuildError> {
    let available = u64::from(target.usable_bytes()) * u64::from(tiles);
    // Each tensor's bytes fit in 64 bits (a graph invariant); their sum is
    // taken in 128.
    let weights: u128 = graph
        .weights()
        .iter()
        .map(|&t| u128::from(graph.tensor(t).bytes()))
        .sum();
    let largest = graph
        .tensors()
        .iter()
        .map(|(_, t)| (t.bytes(), t.name()))
        .max();
    let too_large = |what: String, bytes: u128| BuildError::CapacityExceeded {
        what,
        bytes,
        tiles,
        available,
    };
    if weights > u128::from(available) {
        return Err(too_large("its weights together".to_owned(), weights));
    }
    if let Some((bytes, name)) = largest
        && bytes > available
    {
        return Err(too_large(
            format!("tensor `{name}` alone"),
            u128::from(bytes),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::failing_operation;
    use crate::graph::{Op, ParseOptions, parse_fixture_for_build};
    use crate::lower::{LowerConfig, lower};
    use crate::program::{StepRole, WalkEvent};

    #[test]
    fn a_failing_step_names_the_operation_whose_plan_decides_it() {
        let text = include_str!("../../../../fixtures/tiny-2l-h64.json");
        let graph = parse_fixture_for_build(text, &ParseOptions::default()).expect("parses");
        let config = LowerConfig {
            tiles: 16,
            ..LowerConfig::default()
        };
        let program = lower(&graph, &config).expect("lowers");
        let mut seen = std::collections::BTreeSet::new();
        for event in program.walk() {
            let label = match event {
                WalkEvent::Compute(step, _) => &step.label,
                WalkEvent::Exchange(step, _) => &step.label,
                WalkEvent::Enter(..) | WalkEvent::Leave(..) => continue,
            };
            let found = failing_operation(&graph, label);
            let budgeted = label
                .op
                .is_some_and(|op| matches!(graph.op(op), Op::Gemm { .. } | Op::Attention { .. }));
            assert_eq!(found, if budgeted { label.op } else { None }, "{label}");
            if let Some(op) = found {
                // Every step of a budgeted operation leads back to it:
                // its clears, operands, calls, reduction or combination.
                assert!(
                    matches!(
                        label.role,
                        StepRole::Clear
                            | StepRole::Gemm
                            | StepRole::Reduce
                            | StepRole::Attention
                            | StepRole::Panels
                            | StepRole::Combine
                    ),
                    "{label}"
                );
                seen.insert((label.role, op));
            }
        }
        for role in [StepRole::Gemm, StepRole::Attention, StepRole::Combine] {
            assert!(seen.iter().any(|(r, _)| *r == role), "no {role} step");
        }
    }
}
