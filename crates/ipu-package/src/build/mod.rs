//! `build_package`: the whole pipeline, stage by stage.
//!
//! ```text
//! plan_package      lower the graph, plan storage, then:
//!   plan_kernels      one AMP variant per GEMM kernel spec (kernels.rs)
//!   compile_kernels   objects through the kernel store and toolchain
//!   size_tile_code    runtime, code, control program and row estimate per
//!                     tile, reserved in the code region (support.rs)
//!   place_storage     every shard on every tile, by the placer, checked
//!                     by check_placement (place.rs)
//!   schedule_exchange every phase, by the exchange scheduler, checked by
//!                     check_schedule (exchange.rs)
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
//! generously from its transfer counts and reserved (in whole memory
//! elements, so that rows never share an element with the data their phase
//! moves); data is placed around the reservation; the rows are then encoded
//! with the real addresses and every tile's support is checked against its
//! reservation. If a tile's support outgrows it, the reservation grows to
//! the measured size and placement runs again, re-encoding the earlier
//! schedules' timing rather than scheduling again — never an overlap.
//!
//! When placement fails, the plan trades cycles for memory: the per-op
//! transient budget is lowered and the graph lowered again, up to
//! [`BuildConfig::max_replans`] times.

mod error;
mod exchange;
mod kernels;
mod place;
mod summary;
mod support;

use std::time::Instant;

use ipu_alloc::{BuiltinPlacer, MemoryMap, PlaceConfig, PlaceError, Placer};
use ipu_exchange::{BuiltinScheduler, ExchangeScheduler, Fabric, Schedule, ScheduleConfig};
use ipu_kernels::{HostToolchain, KernelCache, KernelStore, MemoryStore, Toolchain};
use ipu_target::Target;
use tracing::{info, info_span, warn};

pub use error::{BuildError, Culprit, Culprits};

use crate::graph::Graph;
use crate::lower::{LowerConfig, lower};
use crate::package::{
    BufferAddresses, FORMAT_VERSION, Manifest, Package, PackagePhase, PackagePlacement,
};
use crate::phases::FragmentCache;
use crate::plan::CostModel;
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
    let memory_profile = ipu_alloc::MemoryProfile::from_problem(&planned.problem).to_json();
    Ok(Package {
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
        memory_profile,
        fixture: None,
        weights: None,
        siglip: None,
    })
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

/// Lowers, places and schedules, lowering again with a smaller transient
/// budget while placement fails and replans remain.
fn plan(
    graph: &Graph,
    config: &BuildConfig,
    stages: &Stages,
    device: &Device<'_>,
    lower_config: &mut LowerConfig,
    times: &mut PhaseTimes,
) -> Result<Planned, BuildError> {
    // Support measured by an earlier plan: a replan starts from it, since
    // the estimate was already shown too small there.
    let mut measured: Option<Vec<u32>> = None;
    let mut attempt = 0;
    loop {
        match plan_once(
            graph,
            config,
            stages,
            device,
            lower_config,
            times,
            &mut measured,
        ) {
            Err(BuildError::DoesNotFit { error, .. }) if attempt < config.max_replans => {
                attempt += 1;
                lower_config.transient_budget /= 2;
                warn!(
                    budget = lower_config.transient_budget,
                    error = %error,
                    "placement failed; trading cycles for memory with a smaller transient budget"
                );
            }
            other => return other,
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
    measured: &mut Option<Vec<u32>>,
) -> Result<Planned, BuildError> {
    let program = lower(graph, lower_config)?;
    let storage = plan_storage(&program, device.tiles)?;
    let variants = phase("plan_kernels", times, |_| {
        kernels::plan_kernels(&program, device.target)
    })?;
    let kernels = phase("compile_kernels", times, |_| {
        kernels::compile_kernels(&variants, stages)
    })?;
    // Fragments are computed once per plan, for the estimate and for every
    // scheduling round.
    let mut fragments = FragmentCache::default();
    let sizes = phase("size_tile_code", times, |_| {
        Ok::<_, BuildError>(support::TileCode::size(
            &program,
            &variants,
            device,
            &mut fragments,
        ))
    })?;
    let mut reserved = sizes.reservations();
    info!(
        max_reserved_bytes = reserved.iter().max().copied().unwrap_or(0),
        mean_reserved_bytes =
            reserved.iter().map(|&b| u64::from(b)).sum::<u64>() / u64::from(device.tiles.max(1)),
        "reserved support memory"
    );
    if let Some(m) = measured.as_ref() {
        for (r, &m) in reserved.iter_mut().zip(m) {
            *r = (*r).max(m);
        }
    }
    // Reservation, then verification of the real rows against it.
    let mut rounds = 0;
    // Schedules of the previous round: placing again moves data but not
    // the transfers, so their timing is re-encoded, not scheduled again.
    let mut previous: Option<Vec<Schedule>> = None;
    loop {
        let (problem, placement) = phase("place_storage", times, |_| {
            place::place_storage(&program, &storage, &reserved, device, stages, config.verify)
        })?;
        let addresses = place::buffer_addresses(&program, &storage, &placement);
        let (phases, schedules) = phase("schedule_exchange", times, |_| {
            exchange::schedule_phases(
                &program,
                &addresses,
                device,
                stages.scheduler.as_ref(),
                config.verify,
                &mut fragments,
                previous.as_deref(),
            )
        })?;
        previous = Some(schedules);
        let support = sizes.measure(&phases, &reserved);
        let outgrown: Vec<usize> = (0..device.tiles as usize)
            .filter(|&t| support[t].used() > reserved[t])
            .collect();
        if outgrown.is_empty() {
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
        for t in outgrown {
            reserved[t] = sizes.grown_reservation(support[t].used());
        }
        *measured = Some(reserved.clone());
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
                culprits: culprits(&f),
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
