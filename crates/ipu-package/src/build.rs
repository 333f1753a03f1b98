//! `build_package`: the whole pipeline, phase by phase.
//!
//! ```text
//! compile_runtime   sizes of the runtime and the codelets' code
//! plan_package      lower the graph, plan storage, then:
//!   plan_kernels      one AMP variant per GEMM kernel spec
//!   compile_kernels   objects through the content-addressed cache
//!   link_runtime      control-program bytes per tile
//!   size_tile_code    support memory per tile, reserved in region 0
//!   place_storage     every shard on every tile (ipu-alloc), checked
//! schedule_exchange every phase scheduled and encoded (ipu-exchange), checked
//! ```
//!
//! Support memory (runtime, kernel code, control program, exchange rows,
//! repeat patches) must sit in region 0, but exchange rows hold addresses
//! that only placement decides. The circularity is broken by reservation
//! then verification: the support of each tile is estimated generously from
//! its transfer counts and reserved (in whole memory elements, so that rows
//! never share an element with the data their phase moves); data is placed
//! around the reservation; the rows are then encoded with the real
//! addresses and every tile's support is checked against its reservation.
//! If a tile's support outgrows it, the reservation grows to the measured
//! size and placement runs again — never an overlap.
//!
//! When placement fails, the plan trades cycles for memory: the per-op
//! transient budget is lowered and the graph lowered again, up to
//! [`BuildConfig::max_replans`] times.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use ipu_alloc::{
    MemoryMap, PlaceConfig, PlaceError, Problem, Request, RequestId, Reservation, TileProblem,
};
use ipu_exchange::{EncodedRows, Fabric, Schedule, ScheduleConfig, check_schedule, schedule};
use ipu_kernels::{
    GemmShape, HostToolchain, KernelCache, Mode, PlanConfig, RowSize, Variant, plan_variant,
};
use ipu_layout::{ElementOrder, EntityId, TileId};
use rayon::prelude::*;
use tracing::{debug, info, info_span, warn};

use crate::graph::Graph;
use crate::lower::{LowerConfig, LowerError, lower};
use crate::package::{
    BuildSummary, FORMAT_VERSION, Manifest, Package, PackageKernel, PackagePhase, PackageProgram,
    PhaseInfo, RowPatch, TileSupport,
};
use crate::phases::{FragmentCache, PhaseBuild, PhaseBuildError, build_phase};
use crate::program::{BufferId, Codelet, Program, Step};
use crate::storage::{StorageError, StoragePlan, plan_storage};

/// Bytes of the runtime: the control-program interpreter, sync and the
/// non-GEMM codelets. An estimate from the seed's host code (8940 bytes)
/// plus the codelets.
const RUNTIME_BYTES: u32 = 12 * 1024;
/// Control-program bytes per step and per codelet argument word.
const CONTROL_STEP_BYTES: u32 = 8;
const CONTROL_WORD_BYTES: u32 = 4;
/// Region-0 memory elements: support is reserved in whole elements.
const ELEMENT_BYTES: u32 = 16 * 1024;

/// What to build and how.
#[derive(Clone, Debug)]
pub struct BuildConfig {
    /// Tiles of the target.
    pub tiles: u32,
    /// Lowering options (its `tiles` is overridden by [`BuildConfig::tiles`]).
    pub lower: LowerConfig,
    /// Placement budgets.
    pub place: PlaceConfig,
    /// Exchange scheduling options.
    pub schedule: ScheduleConfig,
    /// Run every checker (placement, schedules) before returning.
    pub verify: bool,
    /// The kernel cache root; `None` uses the environment's default.
    pub kernel_cache: Option<PathBuf>,
    /// How many times to lower again with a smaller budget when placement
    /// fails.
    pub max_replans: u32,
}

impl Default for BuildConfig {
    fn default() -> Self {
        Self {
            tiles: 1472,
            lower: LowerConfig::default(),
            place: PlaceConfig {
                verify: true,
                ..PlaceConfig::default()
            },
            // The build runs `check_schedule` itself when `verify` is on.
            schedule: ScheduleConfig {
                verify: false,
                ..ScheduleConfig::default()
            },
            verify: true,
            kernel_cache: None,
            max_replans: 3,
        }
    }
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Lowering failed.
    #[error(transparent)]
    Lower(#[from] LowerError),
    /// Storage planning failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The workload does not fit, even after trading cycles for memory.
    #[error("the workload does not fit: {error}; {culprits}")]
    DoesNotFit {
        /// The placement failure (first failing tile).
        error: Box<PlaceError>,
        /// The largest buffers live on that tile at the failing step.
        culprits: String,
    },
    /// Placement failed for another reason.
    #[error("placement failed: {0}")]
    Place(Box<PlaceError>),
    /// A kernel could not be planned or compiled.
    #[error("kernel {name}: {source}")]
    Kernel {
        /// The kernel.
        name: String,
        /// The error.
        source: ipu_kernels::KernelError,
    },
    /// An exchange phase could not be built.
    #[error(transparent)]
    Phase(#[from] PhaseBuildError),
    /// An exchange phase could not be scheduled.
    #[error("exchange phase {phase} ({name}): {reason}")]
    Schedule {
        /// The phase index.
        phase: usize,
        /// Its step name.
        name: String,
        /// What failed.
        reason: String,
    },
    /// A checker rejected a result: a bug in the crate that produced it.
    #[error("bug: {what} failed its checker: {detail}")]
    Check {
        /// What was checked.
        what: String,
        /// The first error.
        detail: String,
    },
    /// The device description is invalid.
    #[error("device description: {0}")]
    Device(String),
}

/// Runs `f` as a named build phase: a span `phase{phase=...}` and the
/// seed's closing event `package build phase finished`.
fn phase<T, E>(
    name: &'static str,
    times: &mut Vec<(String, u64)>,
    f: impl FnOnce(&mut Vec<(String, u64)>) -> Result<T, E>,
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

/// Builds the package of `graph`.
pub fn build_package(graph: &Graph, config: &BuildConfig) -> Result<Package, BuildError> {
    let span = info_span!(
        "ipu_backend.package.build",
        tile_count = config.tiles,
        operations = graph.ops().len()
    );
    let _enter = span.enter();
    let mut times = Vec::new();
    let map = MemoryMap::ipu21();
    let fabric = Fabric::ipu21().map_err(|e| BuildError::Device(e.to_string()))?;
    if config.tiles == 0 || config.tiles > fabric.tile_count() {
        return Err(BuildError::Device(format!(
            "{} tiles asked for; the device has {} (give 1..={})",
            config.tiles,
            fabric.tile_count(),
            fabric.tile_count()
        )));
    }
    phase("compile_runtime", &mut times, |_| Ok::<_, BuildError>(()))?;

    let mut lower_config = config.lower.clone();
    lower_config.tiles = config.tiles;
    let mut attempt = 0;
    // Support measured by an earlier plan: a replan starts from it, since
    // the estimate was already shown too small there.
    let mut measured: Option<Vec<u32>> = None;
    let built = phase("plan_package", &mut times, |times| {
        loop {
            let program = lower(graph, &lower_config)?;
            let storage = plan_storage(&program, config.tiles)?;
            let kernels = phase("plan_kernels", times, |_| plan_kernels(&program))?;
            let compiled = phase("compile_kernels", times, |_| {
                compile_kernels(&kernels, config)
            })?;
            let control = phase("link_runtime", times, |_| {
                Ok::<_, BuildError>(control_bytes(&program, config.tiles))
            })?;
            // Fragments are computed once per plan, for the estimate and
            // for every scheduling round.
            let mut fragments = FragmentCache::default();
            let estimate = phase("size_tile_code", times, |_| {
                Ok::<_, BuildError>(estimate_support(
                    &program,
                    &kernels,
                    &control,
                    config.tiles,
                    &mut fragments,
                ))
            })?;
            info!(
                max_reserved_bytes = estimate.iter().max().copied().unwrap_or(0),
                mean_reserved_bytes = estimate.iter().map(|&b| u64::from(b)).sum::<u64>()
                    / u64::from(config.tiles.max(1)),
                "reserved support memory"
            );
            let mut reserved = estimate;
            if let Some(m) = &measured {
                for (r, &m) in reserved.iter_mut().zip(m) {
                    *r = (*r).max(m);
                }
            }
            // Reservation, then verification of the real rows against it.
            let mut rounds = 0;
            // Schedules of the previous round: placing again moves data but
            // not the transfers, so their timing is reused.
            let mut previous: Option<Vec<Schedule>> = None;
            let outcome = loop {
                let placed = phase("place_storage", times, |_| {
                    place_storage(&program, &storage, &reserved, &map, config)
                });
                let (problem, placement) = match placed {
                    Ok(p) => p,
                    Err(e) => break Err(e),
                };
                let addresses = buffer_addresses(&storage, &problem, &placement);
                let (phases, schedules) = phase("schedule_exchange", times, |_| {
                    schedule_phases(
                        &program,
                        &addresses,
                        config.tiles,
                        &fabric,
                        config,
                        &mut fragments,
                        previous.as_deref(),
                    )
                })?;
                previous = Some(schedules);
                let support = measure_support(
                    &program,
                    &kernels,
                    &control,
                    &phases,
                    config.tiles,
                    &reserved,
                );
                let outgrown: Vec<usize> = (0..config.tiles as usize)
                    .filter(|&t| support[t].used() > reserved[t])
                    .collect();
                if outgrown.is_empty() || rounds >= 2 {
                    if !outgrown.is_empty() {
                        return Err(BuildError::Check {
                            what: "support memory".into(),
                            detail: format!(
                                "{} tiles outgrew their reservation twice",
                                outgrown.len()
                            ),
                        });
                    }
                    break Ok((problem, placement, addresses, phases, support));
                }
                warn!(
                    tiles = outgrown.len(),
                    "support memory outgrew its reservation; placing again"
                );
                // Rows of phases that are not relocatable can change a
                // little with the new addresses: reserve a 1/32 margin.
                for t in outgrown {
                    let used = support[t].used();
                    reserved[t] = round_up(used.saturating_add(used / 32), ELEMENT_BYTES);
                }
                measured = Some(reserved.clone());
                rounds += 1;
            };
            match outcome {
                Ok((problem, placement, addresses, phases, support)) => {
                    break Ok((
                        program, storage, kernels, compiled, problem, placement, addresses, phases,
                        support,
                    ));
                }
                Err(BuildError::DoesNotFit { error: e, .. }) if attempt < config.max_replans => {
                    attempt += 1;
                    lower_config.transient_budget /= 2;
                    warn!(budget = lower_config.transient_budget, error = %e, "placement failed; trading cycles for memory with a smaller transient budget");
                }
                Err(e) => break Err(e),
            }
        }
    })?;
    let (program, storage, _kernels, compiled, problem, placement, addresses, phases, support) =
        built;

    let profile = ipu_alloc::MemoryProfile::from_problem(&problem);
    info!(
        path = "memory-profile.json",
        scope = "baseline",
        peak_step = profile.peak_step,
        effective_peak_bytes = profile.effective_peak_bytes,
        "wrote planner memory profile"
    );
    let summary = summarise(
        config,
        &storage,
        &placement,
        &phases,
        &support,
        compiled.len(),
        &times,
        lower_config.transient_budget,
        &map,
    );
    let package_program = PackageProgram {
        buffers: program.buffers.values().to_vec(),
        kernels: program.kernels.values().to_vec(),
        steps: program.steps.clone(),
        addresses: program
            .buffers
            .keys()
            .map(|b| addresses.get(&b).cloned().unwrap_or_default())
            .collect(),
        support,
        phases: phases
            .iter()
            .map(|p| PhaseInfo {
                name: p.name.clone(),
                local: p.local.clone(),
                patches: p.patches.clone(),
                horizon: p.horizon,
                endpoint_lower_bound: p.endpoint_lower_bound,
                stronger_lower_bound: p.stronger_lower_bound,
            })
            .collect(),
        compiled,
    };
    Ok(Package {
        manifest: Manifest {
            format_version: FORMAT_VERSION,
            name: graph.name().to_owned(),
            tile_count: config.tiles,
            summary,
            files: Vec::new(),
        },
        program: package_program,
        rows: phases.into_iter().map(|p| p.rows).collect(),
        memory_profile: profile.to_json(),
        fixture: None,
    })
}

fn round_up(value: u32, multiple: u32) -> u32 {
    value.div_ceil(multiple).saturating_mul(multiple)
}

/// One AMP variant per kernel spec of the program.
fn plan_kernels(program: &Program) -> Result<Vec<Variant>, BuildError> {
    let config = PlanConfig::default();
    program
        .kernels
        .values()
        .iter()
        .map(|k| {
            let shape = GemmShape {
                rows: k.rows_large,
                inner: k.inner,
                columns: k.columns,
                left: k.left,
                left_order: k.left_order,
                right: k.right,
                output: k.output,
                output_order: ElementOrder::RowMajor,
                right_class: k.right_class,
            };
            plan_variant(&shape, k.rows_small, k.rows_large, &config).map_err(|source| {
                BuildError::Kernel {
                    name: format!("{k:?}"),
                    source,
                }
            })
        })
        .collect()
}

fn compile_kernels(
    variants: &[Variant],
    config: &BuildConfig,
) -> Result<Vec<PackageKernel>, BuildError> {
    let cache = match &config.kernel_cache {
        Some(root) => KernelCache::open(root.clone()),
        None => KernelCache::from_env(),
    }
    .map_err(|source| BuildError::Kernel {
        name: "cache".into(),
        source,
    })?;
    let toolchain = HostToolchain;
    let results: Vec<Result<PackageKernel, BuildError>> = variants
        .par_iter()
        .map(|v| {
            let k = cache
                .get_or_compile(v, &toolchain)
                .map_err(|source| BuildError::Kernel {
                    name: v.name().to_owned(),
                    source,
                })?;
            let mut entries: [String; 4] = Default::default();
            for e in v.entry_points() {
                let index = usize::from(e.size == RowSize::Large) * 2
                    + usize::from(e.mode == Mode::Accumulate);
                entries[index] = e.symbol;
            }
            let metadata =
                std::fs::read_to_string(&k.metadata_path).map_err(|e| BuildError::Kernel {
                    name: v.name().to_owned(),
                    source: ipu_kernels::KernelError::Io {
                        action: "reading kernel metadata",
                        path: k.metadata_path.clone(),
                        source: e,
                    },
                })?;
            Ok(PackageKernel {
                name: format!(
                    "{}_{}",
                    v.name(),
                    &k.metadata.input_hash.get(..8).unwrap_or("")
                ),
                entries,
                object: k.object,
                metadata,
            })
        })
        .collect();
    results.into_iter().collect()
}

/// Control-program bytes per tile: a header per step, one word per codelet
/// kind and argument.
fn control_bytes(program: &Program, tiles: u32) -> Vec<u32> {
    let mut bytes = vec![0u32; tiles as usize];
    fn walk(steps: &[Step], bytes: &mut [u32]) {
        for step in steps {
            match step {
                Step::Compute { calls, .. } => {
                    for b in bytes.iter_mut() {
                        *b += CONTROL_STEP_BYTES;
                    }
                    for (tile, c) in calls {
                        if let Some(b) = bytes.get_mut(tile.index()) {
                            *b += CONTROL_WORD_BYTES * (1 + codelet_words(c));
                        }
                    }
                }
                Step::Exchange { .. } => {
                    for b in bytes.iter_mut() {
                        *b += CONTROL_STEP_BYTES;
                    }
                }
                Step::Repeat { body, .. } => walk(body, bytes),
            }
        }
    }
    walk(&program.steps, &mut bytes);
    bytes
}

/// Argument words of a codelet call.
fn codelet_words(c: &Codelet) -> u32 {
    match c {
        Codelet::Gemm { .. } => 5,
        Codelet::Add { .. } => 5,
        Codelet::LayerNorm { .. } => 7,
        Codelet::Gelu { .. } | Codelet::Convert { .. } => 3,
        Codelet::ReduceSum { .. } => 4,
        Codelet::AttentionBlock { .. } => 15,
        Codelet::AttentionCombine { .. } => 11,
        Codelet::Zero { .. } => 2,
    }
}

/// Kernel code bytes per tile: every distinct variant a tile calls.
fn kernel_code(program: &Program, variants: &[Variant], tiles: u32) -> Vec<u32> {
    let mut used: Vec<Vec<usize>> = vec![Vec::new(); tiles as usize];
    fn walk(steps: &[Step], used: &mut [Vec<usize>]) {
        for step in steps {
            match step {
                Step::Compute { calls, .. } => {
                    for (tile, c) in calls {
                        if let Codelet::Gemm { kernel, .. } = c
                            && let Some(u) = used.get_mut(tile.index())
                            && !u.contains(&kernel.index())
                        {
                            u.push(kernel.index());
                        }
                    }
                }
                Step::Exchange { .. } => {}
                Step::Repeat { body, .. } => walk(body, used),
            }
        }
    }
    walk(&program.steps, &mut used);
    used.iter()
        .map(|u| {
            u.iter()
                .map(|&k| ipu_kernels::code_bytes(&variants[k]))
                .sum()
        })
        .collect()
}

/// The support estimate before placement: runtime, kernel code, control
/// program, and exchange rows at 4 bytes per transfer a tile sends or
/// receives plus 16 per phase, all rounded up to whole elements. Tiles whose
/// real rows outgrow it are placed again with their measured size.
fn estimate_support(
    program: &Program,
    variants: &[Variant],
    control: &[u32],
    tiles: u32,
    cache: &mut FragmentCache,
) -> Vec<u32> {
    let code = kernel_code(program, variants, tiles);
    let mut rows = vec![0u64; tiles as usize];
    let identity = |b: BufferId| b;
    let fake = |_: BufferId, _: TileId| Some(0x80000u32);
    let mut phase_count = 0u64;
    for copies in exchange_steps(&program.steps) {
        phase_count += 1;
        if let Ok(build) = build_phase_counts(program, copies, tiles, cache, &identity, &fake) {
            for (t, n) in build.into_iter().enumerate() {
                rows[t] += 4 * n;
            }
        }
    }
    (0..tiles as usize)
        .map(|t| {
            let total = u64::from(RUNTIME_BYTES)
                + u64::from(code[t])
                + u64::from(control[t])
                + rows[t]
                + 16 * phase_count;
            round_up(u32::try_from(total).unwrap_or(u32::MAX), ELEMENT_BYTES)
        })
        .collect()
}

/// Transfers (sent or received) per tile of one exchange step.
fn build_phase_counts(
    program: &Program,
    copies: &[crate::program::Redistribute],
    tiles: u32,
    cache: &mut FragmentCache,
    resolve: &dyn Fn(BufferId) -> BufferId,
    address: &dyn Fn(BufferId, TileId) -> Option<u32>,
) -> Result<Vec<u64>, PhaseBuildError> {
    let b = build_phase(program, copies, tiles, cache, resolve, address)?;
    let mut n = vec![0u64; tiles as usize];
    for t in &b.phase.transfers {
        n[t.source.index()] += 1;
        for (d, _) in &t.destinations {
            n[d.index()] += 1;
        }
    }
    Ok(n)
}

/// The exchange steps in program order, each repeat body once.
fn exchange_steps(steps: &[Step]) -> Vec<&[crate::program::Redistribute]> {
    let mut out = Vec::new();
    for step in steps {
        match step {
            Step::Exchange { copies, .. } => out.push(copies.as_slice()),
            Step::Repeat { body, .. } => out.extend(exchange_steps(body)),
            Step::Compute { .. } => {}
        }
    }
    out
}

type Placed = (Problem, ipu_alloc::Placement);

/// Builds the placement problem and places it.
fn place_storage(
    program: &Program,
    storage: &StoragePlan,
    reserved: &[u32],
    map: &MemoryMap,
    config: &BuildConfig,
) -> Result<Placed, BuildError> {
    let start = Instant::now();
    let base = map.sram_start();
    let mut tiles = Vec::with_capacity(config.tiles as usize);
    for (t, &reserve) in reserved.iter().enumerate().take(config.tiles as usize) {
        let requests = storage.tiles.get(t).map(Vec::as_slice).unwrap_or(&[]);
        let mut list = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            list.push(Request {
                id: RequestId::from_u32(i as u32),
                class: r.class,
                bytes: r.bytes,
                alignment: r.alignment,
                first_step: r.first_step,
                last_step: r.last_step,
                separate_from: r
                    .separate_from
                    .iter()
                    .map(|&x| RequestId::from_u32(x))
                    .collect(),
            });
        }
        let reservations = vec![Reservation {
            start: base,
            end: base + reserve,
            steps: None,
            label: "support".into(),
        }];
        tiles.push(TileProblem {
            tile: TileId::from_u32(t as u32),
            reservations,
            requests: list,
        });
    }
    let problem = Problem {
        map: map.clone(),
        tiles,
    };
    let placement = ipu_alloc::place(&problem, &config.place).map_err(|e| match &e {
        PlaceError::DoesNotFit(f) => BuildError::DoesNotFit {
            culprits: culprits(program, storage, f.tile.index(), f.step, reserved),
            error: Box::new(e),
        },
        _ => BuildError::Place(Box::new(e)),
    })?;
    if config.verify
        && let Err(errors) = ipu_alloc::check_placement(&problem, &placement)
    {
        return Err(BuildError::Check {
            what: "placement".into(),
            detail: errors.first().map(ToString::to_string).unwrap_or_default(),
        });
    }
    debug!(
        tiles = config.tiles,
        shards = storage.request_count(),
        elapsed_us = start.elapsed().as_micros() as u64,
        "placed tile storage"
    );
    Ok((problem, placement))
}

/// The buffers live on `tile` at `step`, largest first: what a user must
/// shrink or shorten to make the tile fit.
fn culprits(
    program: &Program,
    storage: &StoragePlan,
    tile: usize,
    step: u32,
    reserved: &[u32],
) -> String {
    let Some(requests) = storage.tiles.get(tile) else {
        return String::new();
    };
    let mut live: Vec<&crate::storage::StorageRequest> = requests
        .iter()
        .filter(|r| r.first_step <= step && step <= r.last_step)
        .collect();
    live.sort_by_key(|r| std::cmp::Reverse(r.bytes));
    let total: u64 = live.iter().map(|r| u64::from(r.bytes)).sum();
    let step_name = storage
        .step_names
        .get(step as usize)
        .map(String::as_str)
        .unwrap_or("?");
    let mut out = format!(
        "at step {step} ({step_name}) tile{tile} holds {total} bytes of data in {} buffers and {} bytes of support; the largest:",
        live.len(),
        reserved.get(tile).copied().unwrap_or(0)
    );
    for r in live.iter().take(6) {
        let name = program
            .buffers
            .get(r.members[0].0)
            .map_or("?", |b| b.name.as_str());
        let stack = if r.members.len() > 1 {
            format!(" (×{} iterations)", r.members.len())
        } else {
            String::new()
        };
        out.push_str(&format!(" {name}{stack} {} bytes,", r.bytes));
    }
    out.pop();
    out
}

/// Every buffer's `(tile, address)` list from the placement.
fn buffer_addresses(
    storage: &StoragePlan,
    problem: &Problem,
    placement: &ipu_alloc::Placement,
) -> HashMap<BufferId, Vec<(u32, u32)>> {
    let mut out: HashMap<BufferId, Vec<(u32, u32)>> = HashMap::new();
    for (t, tile) in problem.tiles.iter().enumerate() {
        for (i, r) in storage.tiles[t].iter().enumerate() {
            let Some(base) = placement.address(t, RequestId::from_u32(i as u32)) else {
                continue;
            };
            for &(b, offset) in &r.members {
                out.entry(b)
                    .or_default()
                    .push((tile.tile.as_u32(), base + offset));
            }
        }
    }
    for list in out.values_mut() {
        list.sort_unstable();
    }
    out
}

/// The address lookup of a buffer map.
fn lookup(
    addresses: &HashMap<BufferId, Vec<(u32, u32)>>,
) -> impl Fn(BufferId, TileId) -> Option<u32> + '_ {
    move |b, t| {
        let list = addresses.get(&b)?;
        let i = list.binary_search_by_key(&t.as_u32(), |e| e.0).ok()?;
        Some(list[i].1)
    }
}

/// Schedules and encodes every exchange step, with patches for repeat
/// bodies whose phases read per-iteration buffers. With `previous`
/// schedules of the same program (placed elsewhere), their timing is
/// re-encoded with the new addresses instead of scheduling again.
fn schedule_phases(
    program: &Program,
    addresses: &HashMap<BufferId, Vec<(u32, u32)>>,
    tiles: u32,
    fabric: &Fabric,
    config: &BuildConfig,
    cache: &mut FragmentCache,
    previous: Option<&[Schedule]>,
) -> Result<(Vec<PackagePhase>, Vec<Schedule>), BuildError> {
    // Collect (copies, name, substitution for iteration 1 if in a body).
    struct Job<'a> {
        name: String,
        copies: &'a [crate::program::Redistribute],
        next: Option<HashMap<BufferId, BufferId>>,
    }
    fn collect<'a>(
        steps: &'a [Step],
        next: Option<&HashMap<BufferId, BufferId>>,
        out: &mut Vec<Job<'a>>,
    ) {
        for step in steps {
            match step {
                Step::Exchange { name, copies } => out.push(Job {
                    name: name.clone(),
                    copies,
                    next: next.cloned(),
                }),
                Step::Repeat {
                    body,
                    iteration_buffers,
                    count,
                    ..
                } => {
                    let subst: HashMap<BufferId, BufferId> = if *count > 1 {
                        iteration_buffers
                            .iter()
                            .filter_map(|(b, list)| list.get(1).map(|&n| (*b, n)))
                            .collect()
                    } else {
                        HashMap::new()
                    };
                    collect(body, Some(&subst), out);
                }
                Step::Compute { .. } => {}
            }
        }
    }
    let mut jobs = Vec::new();
    collect(&program.steps, None, &mut jobs);
    let address = lookup(addresses);
    // Build phases (fragments are memoised), then schedule in parallel.
    let mut builds: Vec<(String, PhaseBuild, Option<PhaseBuild>)> = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let identity = |b: BufferId| b;
        let b0 = build_phase(program, job.copies, tiles, cache, &identity, &address)?;
        let b1 = match &job.next {
            Some(subst)
                if job.copies.iter().any(|c| {
                    subst.contains_key(&c.source) || subst.contains_key(&c.destination)
                }) =>
            {
                let resolve = |b: BufferId| subst.get(&b).copied().unwrap_or(b);
                Some(build_phase(
                    program, job.copies, tiles, cache, &resolve, &address,
                )?)
            }
            _ => None,
        };
        builds.push((job.name.clone(), b0, b1));
    }
    builds
        .into_par_iter()
        .enumerate()
        .map(|(i, (name, b0, b1))| {
            let err = |reason: String| BuildError::Schedule {
                phase: i,
                name: name.clone(),
                reason,
            };
            // A phase patched per iteration needs rows whose instructions
            // do not depend on its addresses.
            let cfg = ScheduleConfig {
                phase_label: i as u32,
                relocatable: b1.is_some(),
                ..config.schedule.clone()
            };
            let s0 = match previous.and_then(|p| p.get(i)) {
                Some(p) => p.readdress(&b0.phase, fabric, &cfg),
                None => schedule(&b0.phase, fabric, &cfg),
            }
            .map_err(|e| err(e.to_string()))?;
            if config.verify
                && let Err(errors) = check_schedule(&b0.phase, fabric, s0.rows())
            {
                return Err(BuildError::Check {
                    what: format!("exchange phase {i} ({name})"),
                    detail: errors.first().map(ToString::to_string).unwrap_or_default(),
                });
            }
            let mut local = b0.local;
            let patches = match b1 {
                Some(b1) => {
                    // The next iteration moves the same transfers: the same
                    // timing with its addresses.
                    let s1 = s0
                        .readdress(&b1.phase, fabric, &cfg)
                        .map_err(|e| err(e.to_string()))?;
                    if config.verify
                        && let Err(errors) = check_schedule(&b1.phase, fabric, s1.rows())
                    {
                        return Err(BuildError::Check {
                            what: format!("exchange phase {i} ({name}), next iteration"),
                            detail: errors.first().map(ToString::to_string).unwrap_or_default(),
                        });
                    }
                    // On-tile copies of per-iteration buffers move by a
                    // stride per iteration, like the rows' addresses.
                    if b1.local.len() != local.len() {
                        return Err(err("on-tile copies change between iterations".into()));
                    }
                    for (c0, c1) in local.iter_mut().zip(&b1.local) {
                        if (c0.tile, c0.bytes) != (c1.tile, c1.bytes) {
                            return Err(err("on-tile copies change between iterations".into()));
                        }
                        c0.source_stride = c1.source.wrapping_sub(c0.source);
                        c0.destination_stride = c1.destination.wrapping_sub(c0.destination);
                    }
                    row_patches(s0.rows(), s1.rows()).map_err(err)?
                }
                None => Vec::new(),
            };
            Ok((
                PackagePhase {
                    name,
                    horizon: s0.horizon(),
                    endpoint_lower_bound: s0.endpoint_lower_bound(),
                    stronger_lower_bound: s0.stronger_lower_bound(),
                    rows: s0.rows().clone(),
                    local,
                    patches,
                },
                s0,
            ))
        })
        .collect::<Result<Vec<_>, BuildError>>()
        .map(|v| v.into_iter().unzip())
}

/// The words that differ between iteration 0's and iteration 1's rows.
fn row_patches(r0: &EncodedRows, r1: &EncodedRows) -> Result<Vec<RowPatch>, String> {
    let mut patches = Vec::new();
    for t in 0..r0.tile_count() {
        let tile = TileId::from_u32(t);
        let (a, b) = (r0.row(tile), r1.row(tile));
        if a.len() != b.len() {
            return Err(format!(
                "{tile}'s row changes length between iterations ({} and {} words); the schedule depends on addresses",
                a.len(),
                b.len()
            ));
        }
        for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
            if x != y {
                patches.push(RowPatch {
                    tile,
                    index: i as u32,
                    delta: y.wrapping_sub(x),
                });
            }
        }
    }
    Ok(patches)
}

/// The measured support of every tile.
fn measure_support(
    program: &Program,
    variants: &[Variant],
    control: &[u32],
    phases: &[PackagePhase],
    tiles: u32,
    reserved: &[u32],
) -> Vec<TileSupport> {
    let code = kernel_code(program, variants, tiles);
    let mut rows = vec![0u64; tiles as usize];
    let mut patches = vec![0u64; tiles as usize];
    for p in phases {
        for t in 0..tiles {
            // One return word ends each row.
            let bytes = p.rows.row_bytes(TileId::from_u32(t));
            if bytes > 0 {
                rows[t as usize] += bytes + 4;
            }
        }
        // Patches are stored as (word index, delta) pairs.
        for patch in &p.patches {
            patches[patch.tile.index()] += 8;
        }
    }
    (0..tiles as usize)
        .map(|t| TileSupport {
            start: 0x4c000,
            reserved: reserved[t],
            runtime_bytes: RUNTIME_BYTES,
            kernel_code_bytes: code[t],
            control_bytes: control[t],
            exchange_bytes: u32::try_from(rows[t]).unwrap_or(u32::MAX),
            patch_bytes: u32::try_from(patches[t]).unwrap_or(u32::MAX),
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn summarise(
    config: &BuildConfig,
    storage: &StoragePlan,
    placement: &ipu_alloc::Placement,
    phases: &[PackagePhase],
    support: &[TileSupport],
    kernels: usize,
    times: &[(String, u64)],
    budget: u64,
    map: &MemoryMap,
) -> BuildSummary {
    let usable = u64::from(map.loader_limit() - map.sram_start());
    let mut peak = 0u64;
    let mut headroom = (u64::MAX, 0u32);
    for (t, tp) in placement.tiles().iter().enumerate() {
        peak = peak.max(tp.achieved_peak_bytes());
        // Headroom in bytes: the most live at any step (data plus the
        // support actually used, not its element-rounded reservation),
        // whatever the addresses.
        let live = tp
            .bound()
            .map_or(tp.achieved_peak_bytes(), |b| b.peak_with_reservations);
        let unused_reservation = support
            .get(t)
            .map_or(0, |s| u64::from(s.reserved.saturating_sub(s.used())));
        let free = usable.saturating_sub(live.saturating_sub(unused_reservation));
        if free < headroom.0 {
            headroom = (free, t as u32);
        }
    }
    let exchange_table = support.iter().map(|s| s.exchange_bytes).max().unwrap_or(0);
    let patch = support.iter().map(|s| s.patch_bytes).max().unwrap_or(0);
    info!(
        exchange_table_bytes = exchange_table,
        maximum_uncompressed_repeat_patch_bytes = patch,
        "exchange table and repeat patch storage"
    );
    let worst = support
        .iter()
        .max_by_key(|s| s.used())
        .copied()
        .unwrap_or_default();
    info!(
        host_code_bytes = worst.runtime_bytes,
        generated_code_bytes = worst.kernel_code_bytes + worst.control_bytes,
        exchange_table_bytes = worst.exchange_bytes,
        code_address = worst.start,
        "placing generated tile programs"
    );
    info!(
        profile_bytes = 0,
        exchange_table_bytes = worst.exchange_bytes,
        host_code_bytes = worst.runtime_bytes,
        generated_code_bytes = worst.kernel_code_bytes,
        reserved_bytes = worst.reserved,
        "allocated package support memory"
    );
    BuildSummary {
        fits: true,
        tile_count: config.tiles,
        requests: storage.request_count(),
        peak_bytes: peak,
        min_headroom_bytes: if headroom.0 == u64::MAX {
            usable
        } else {
            headroom.0
        },
        min_headroom_tile: headroom.1,
        exchange_horizon: phases.iter().map(|p| p.horizon).sum(),
        exchange_endpoint_bound: phases.iter().map(|p| p.endpoint_lower_bound).sum(),
        exchange_stronger_bound: phases.iter().map(|p| p.stronger_lower_bound).sum(),
        kernels,
        max_support_bytes: support.iter().map(TileSupport::used).max().unwrap_or(0),
        phase_ms: times.to_vec(),
        transient_budget: budget,
    }
}
