//! The tile model: a package run on per-tile SRAM images.
//!
//! Every tile has a byte image of its SRAM (`0x4c000..0xe8000`), filled
//! with `0xff` so that data nobody wrote reads as NaN. The host writes
//! inputs and weights at their placed addresses (padding zeroed), then the
//! steps run: compute steps run each tile's codelets on its image at the
//! placed addresses — GEMMs through the AMP programs read back from the
//! package's kernel objects — and exchange steps replay the decoded
//! exchange rows word by word (with the repeat patches of the iteration)
//! and do the on-tile copies. Every access must stay inside the ranges
//! placed on that tile; anything else is an error, not a silent success.
//!
//! Before anything is allocated the package is validated
//! (`validate.rs`): the graph must be the one the package was built from,
//! every id a step names must exist, and the run's whole work (step
//! executions, codelet elements and exchange words across all repeat
//! iterations) must lie inside [`Limits`], so that no package, however
//! edited, makes the model panic, run for ever or exhaust memory.
//!
//! With [`RunConfig::check_ops`] (the default) every op's device result is
//! checked against the reference on the device's own inputs as the run
//! goes ([`crate::oracle`]), and the first op out of tolerance stops the
//! run with [`SimError::OpMismatch`]. A [`ProgressHook`] in the
//! [`RunConfig`] is told of every step run, against the total the
//! validation counted (a long run's progress on a terminal).
//!
//! A codelet touches only the image of the tile it runs on, so the tiles of
//! one compute step run in parallel, each on its own image, with each
//! tile's calls in program order: the bytes are those of a sequential run
//! whatever the thread count, and when several tiles fail the error of the
//! lowest tile is reported. [`run_package_with`] also says where the time
//! went, and counts the run's device cycles from what it executed
//! ([`CycleCount`]), an account independent of the package's cycle
//! estimate that the tests hold it to.

mod config;
mod memory;
mod validate;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use ipu_exchange::{EncodedRows, Fabric, replay};
use ipu_kernels::{AmpModel, PreparedProgram, ProductTables, program_cycles, programs_from_object};
use ipu_layout::{EntityId, TileId};
use ipu_package::graph::{Graph, Repeat, ValueSet};
use ipu_package::package::Package;
use ipu_package::profile::{VectorModel, Work, kernel_variant};
use ipu_package::program::{
    BufferId, BufferRole, Codelet, ComputeStep, ExchangeStep, Program, RepeatStep, Step, Walk,
    WalkEvent,
};
use rayon::prelude::*;

use crate::SimError;
use crate::codelets::{Access, codelet_operands, run_codelet_counted};
use crate::oracle::Oracle;
use config::codelet_kind;
pub use config::{
    CODELET_KINDS, CycleCount, Fault, KindStats, Limits, ProgressHook, RunConfig, RunStats,
    StepCycles, StepProgress,
};
use memory::{Shared, TileView, Words};
pub use validate::check_fixture;

/// Runs `package` (built from `graph`) on `values` (every input and weight)
/// with the per-op check, and returns the values of the graph's outputs.
pub fn run_package(
    package: &Package,
    graph: &Graph,
    values: &ValueSet,
) -> Result<ValueSet, SimError> {
    run_package_with(package, graph, values, &RunConfig::default()).map(|(out, _)| out)
}

/// [`run_package`], also returning where the time went.
pub fn run_package_with_stats(
    package: &Package,
    graph: &Graph,
    values: &ValueSet,
) -> Result<(ValueSet, RunStats), SimError> {
    run_package_with(package, graph, values, &RunConfig::default())
}

/// Runs `package` (built from `graph`) on `values` with options, returning
/// the outputs and where the time went.
pub fn run_package_with(
    package: &Package,
    graph: &Graph,
    values: &ValueSet,
    config: &RunConfig,
) -> Result<(ValueSet, RunStats), SimError> {
    let start = Instant::now();
    let cpu_start = process_cpu();
    check_fixture(package, graph)?;
    let work = validate::validate(package, &config.limits)?;
    let mut m = Tiles::new(package, graph)?;
    m.stats.setup = start.elapsed();
    let start = Instant::now();
    m.load(graph, values)?;
    for fault in &config.faults {
        m.inject(fault)?;
    }
    m.stats.load = start.elapsed();
    let mut oracle = config.check_ops.then(|| Oracle::new(graph, values));
    let mut run = Run {
        phase: 0,
        exchange_words: 0,
        limit: config.limits.max_exchange_words,
        progress: config.progress.as_ref(),
        done: StepProgress {
            done: 0,
            total: work.step_runs,
        },
    };
    run.report();
    m.run_steps(
        &package.program.steps,
        &HashMap::new(),
        None,
        &mut run,
        0,
        &mut oracle,
    )?;
    if let Some(o) = &oracle {
        m.stats.ops_checked = o.checked;
    }
    let start = Instant::now();
    let out = m.outputs(graph)?;
    m.stats.outputs = start.elapsed();
    m.stats.cpu = cpu_start
        .zip(process_cpu())
        .map(|(a, b)| b.saturating_sub(a));
    Ok((out, m.stats))
}

/// CPU time (user and system, all threads) this process has used, from
/// `/proc/self/stat` in clock ticks of 1/100 s (Linux reports USER_HZ = 100
/// there whatever the kernel's own tick).
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name may hold spaces; the fields follow its `)`.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after
    // the name.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let total = ticks(11)?.checked_add(ticks(12)?)?;
    Some(Duration::from_millis(total.saturating_mul(10)))
}

/// Where a run is: the next phase and the exchange words so far (patched
/// rows are counted again as they are built, against the same limit).
struct Run<'c> {
    phase: usize,
    exchange_words: u64,
    limit: u64,
    /// Told of every step run.
    progress: Option<&'c ProgressHook>,
    /// Steps run so far, of the total.
    done: StepProgress,
}

impl Run<'_> {
    fn report(&self) {
        if let Some(hook) = self.progress {
            hook.report(self.done);
        }
    }

    /// One more compute or exchange step run.
    fn step_done(&mut self) {
        self.done.done = self.done.done.saturating_add(1);
        self.report();
    }
}

struct Tiles<'p> {
    shared: Shared<'p>,
    graph: &'p Graph,
    images: Vec<Vec<u8>>,
    stats: RunStats,
    costs: Costs,
}

/// What the cycle count converts executed work with.
struct Costs {
    vector: VectorModel,
    /// Per kernel and entry: the cycles of the AMP program run for it, by
    /// its ops (`None` when the kernel's variant cannot be rebuilt or the
    /// entry has no program).
    gemm: Vec<[Option<u64>; 4]>,
    sync: u64,
}

impl<'p> Tiles<'p> {
    /// Sets up the images of a validated package.
    fn new(package: &'p Package, graph: &'p Graph) -> Result<Self, SimError> {
        let tiles = package.manifest.tile_count;
        let p = &package.program;
        let memory = package.target.memory();
        let (sram_start, sram_end) = (memory.sram_start, memory.sram_end);
        let mut placed = vec![Vec::new(); tiles as usize];
        let mut ranges = Vec::with_capacity(p.buffers.len());
        for (id, b) in p.buffers.iter() {
            let list = package.placement.addresses.of(id);
            let mut map = HashMap::new();
            for &(tile, address) in list {
                let t = TileId::from_u32(tile);
                let slot = placed.get_mut(tile as usize).ok_or(SimError::UnknownTile {
                    tile: t,
                    tiles,
                    what: format!("the placement of {}", b.name),
                })?;
                let shard = b.ty.shard_bytes(t).map_err(|source| SimError::Layout {
                    what: b.name.clone(),
                    source,
                })?;
                let limit = shard.saturating_add(u64::from(b.tail_bytes));
                let end = u64::from(address).saturating_add(limit);
                if address < sram_start || end > u64::from(sram_end) {
                    return Err(SimError::PlacedOutside {
                        buffer: b.name.clone(),
                        tile: t,
                        address,
                        bytes: limit,
                        start: sram_start,
                        end: sram_end,
                    });
                }
                slot.push((address, end as u32));
                map.insert(tile, (address, limit));
            }
            ranges.push(map);
        }
        // Buffers with disjoint lifetimes share addresses: keep the union.
        for list in &mut placed {
            list.sort_unstable();
            let mut union: Vec<(u32, u32)> = Vec::with_capacity(list.len());
            for &(start, end) in list.iter() {
                match union.last_mut() {
                    Some(last) if start <= last.1 => last.1 = last.1.max(end),
                    _ => union.push((start, end)),
                }
            }
            *list = union;
        }
        let mut programs = Vec::new();
        let amp_model = AmpModel::new(&package.target);
        let mut gemm_cycles = Vec::with_capacity(package.kernels.len());
        // One product table per precision combination, shared by every
        // kernel entry and bounded in number.
        let mut tables = ProductTables::new();
        for k in &package.kernels {
            let parsed =
                programs_from_object(&k.object).map_err(|source| SimError::KernelObject {
                    kernel: k.name.clone(),
                    source,
                })?;
            // The cycles of each program, by its ops, for the cycle count.
            let variant = kernel_variant(k, &amp_model).ok();
            let mut cycles: [Option<u64>; 4] = [None; 4];
            for (slot, symbol) in cycles.iter_mut().zip(&k.entries) {
                if let (Some(v), Some((_, program))) =
                    (&variant, parsed.iter().find(|(s, _)| s == symbol))
                {
                    *slot = Some(program_cycles(v, program).cycles);
                }
            }
            gemm_cycles.push(cycles);
            let mut by_symbol: HashMap<String, _> = parsed.into_iter().collect();
            let mut entry: [Option<PreparedProgram>; 4] = Default::default();
            for (slot, symbol) in entry.iter_mut().zip(&k.entries) {
                if let Some(program) = by_symbol.remove(symbol) {
                    let prepared =
                        PreparedProgram::with_tables(program, &mut tables).map_err(|source| {
                            SimError::KernelProgram {
                                kernel: k.name.clone(),
                                symbol: symbol.clone(),
                                source,
                            }
                        })?;
                    *slot = Some(prepared);
                }
            }
            programs.push(entry);
        }
        let fabric = Fabric::new(&package.target).map_err(SimError::Fabric)?;
        // The FP8 precisions casts write (the ids were validated).
        let casts = cast_outputs(p);
        let fp8_tables = casts
            .into_iter()
            .filter_map(|b| p.buffers.get(b))
            .map(|b| b.ty.precision())
            .filter(|p| p.is_fp8())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|p| (p, memory::fp8_table(p)))
            .collect();
        Ok(Self {
            shared: Shared {
                package,
                ranges,
                placed,
                programs,
                fabric,
                fp8_tables,
                sram_start,
            },
            graph,
            images: vec![vec![0xff; (sram_end - sram_start) as usize]; tiles as usize],
            stats: RunStats::default(),
            costs: Costs {
                vector: VectorModel::new(&package.target),
                gemm: gemm_cycles,
                sync: package.target.sync().sync_cycles,
            },
        })
    }

    /// Writes every input and weight shard at its placed address, padding
    /// zeroed. Packing runs per tile in parallel (each tile's shards in
    /// buffer order), as it only reads the values and writes its own image.
    fn load(&mut self, graph: &Graph, values: &ValueSet) -> Result<(), SimError> {
        let package = self.shared.package;
        let tiles = self.images.len();
        let buffers = &package.program.buffers;
        // Per tile: (buffer index, the tensor's values, shard bytes).
        let mut jobs: Vec<Vec<(usize, &[f32], u64)>> = vec![Vec::new(); tiles];
        for (id, b) in buffers.values().iter().enumerate() {
            if !matches!(b.role, BufferRole::Input | BufferRole::Weight) {
                continue;
            }
            let tensor = graph
                .tensor_by_name(&b.name)
                .and_then(|t| values.get(t))
                .ok_or_else(|| SimError::MissingValues {
                    tensor: b.name.clone(),
                })?;
            for s in b.ty.shards() {
                if s.bytes == 0 {
                    continue;
                }
                jobs.get_mut(s.tile.index())
                    .ok_or_else(|| SimError::UnknownTile {
                        tile: s.tile,
                        tiles: tiles as u32,
                        what: format!("a shard of {}", b.name),
                    })?
                    .push((id, tensor, s.bytes));
            }
        }
        let shared = &self.shared;
        let results: Vec<Result<(), SimError>> = self
            .images
            .par_iter_mut()
            .zip(jobs.par_iter())
            .enumerate()
            .map(|(t, (image, list))| {
                let tile = TileId::from_u32(t as u32);
                for &(id, tensor, bytes) in list {
                    let b = &buffers.values()[id];
                    let (address, _) = shared.range(BufferId::from_u32(id as u32), tile)?;
                    let range = shared.placed_range(tile, address, bytes)?;
                    let shard = image.get_mut(range).ok_or(SimError::Unplaced {
                        tile,
                        address,
                        bytes,
                    })?;
                    shard.fill(0);
                    b.ty.pack_shard(tile, tensor, shard)
                        .map_err(|source| SimError::Layout {
                            what: b.name.clone(),
                            source,
                        })?;
                }
                Ok(())
            })
            .collect();
        results.into_iter().collect()
    }

    /// Applies a fault: adds `delta` to every element of a shard.
    fn inject(&mut self, fault: &Fault) -> Result<(), SimError> {
        let b = self.shared.buffer(fault.buffer)?;
        let bytes =
            b.ty.shard_bytes(fault.tile)
                .map_err(|source| SimError::Layout {
                    what: b.name.clone(),
                    source,
                })?;
        let (address, _) = self.shared.range(fault.buffer, fault.tile)?;
        let range = self.shared.placed_range(fault.tile, address, bytes)?;
        let count =
            b.ty.shape()
                .element_count()
                .map_err(|source| SimError::Layout {
                    what: b.name.clone(),
                    source,
                })?;
        let image = self
            .images
            .get_mut(fault.tile.index())
            .ok_or(SimError::Unplaced {
                tile: fault.tile,
                address,
                bytes,
            })?;
        let shard = image.get_mut(range).ok_or(SimError::Unplaced {
            tile: fault.tile,
            address,
            bytes,
        })?;
        // Unpack into a whole tensor of NaN, shift this shard's elements
        // and pack them back.
        let layout = |source| SimError::Layout {
            what: b.name.clone(),
            source,
        };
        let mut values = vec![f32::NAN; usize::try_from(count).unwrap_or(0)];
        b.ty.unpack_shard(fault.tile, shard, &mut values)
            .map_err(layout)?;
        for v in values.iter_mut().filter(|v| !v.is_nan()) {
            *v += fault.delta;
        }
        b.ty.pack_shard(fault.tile, &values, shard).map_err(layout)
    }

    fn run_steps(
        &mut self,
        steps: &'p [Step],
        subst: &HashMap<BufferId, BufferId>,
        context: Option<(&'p Repeat, u32)>,
        run: &mut Run<'_>,
        depth: usize,
        oracle: &mut Option<Oracle<'p>>,
    ) -> Result<(), SimError> {
        for step in steps {
            match step {
                Step::Compute(ComputeStep { label, calls }) => {
                    let name = &label.to_string();
                    let start = Instant::now();
                    self.compute(name, calls, subst)?;
                    let took = start.elapsed();
                    self.stats.compute += took;
                    self.stats.steps.push((name.clone(), took));
                    if let Some(o) = oracle {
                        let written = calls.iter().flat_map(|(_, c)| {
                            codelet_operands(c)
                                .into_iter()
                                .filter(|(_, a)| *a == Access::Write)
                                .map(|(o, _)| o.buffer)
                        });
                        self.check_results(o, written, subst, context, true, name)?;
                    }
                    run.step_done();
                }
                Step::Exchange(ExchangeStep { label, copies }) => {
                    let name = &label.to_string();
                    let start = Instant::now();
                    let iteration = context.map_or(0, |(_, k)| k);
                    self.exchange(name, run, iteration)?;
                    let took = start.elapsed();
                    self.stats.exchange += took;
                    self.stats.exchange_steps += 1;
                    self.stats.steps.push((name.clone(), took));
                    run.phase += 1;
                    if let Some(o) = oracle {
                        let written = copies.iter().map(|c| c.destination);
                        self.check_results(o, written, subst, context, false, name)?;
                    }
                    run.step_done();
                }
                Step::Repeat(RepeatStep {
                    name,
                    count,
                    body,
                    iteration_buffers,
                }) => {
                    let start = run.phase;
                    let graph_repeat = self.graph.repeats().iter().find(|r| r.name() == name);
                    for i in 0..*count {
                        let began = Instant::now();
                        let checking = self.stats.op_check;
                        run.phase = start;
                        let mut inner = subst.clone();
                        for (b, list) in iteration_buffers {
                            if let Some(&bi) = list.get(i as usize) {
                                inner.insert(*b, bi);
                            }
                        }
                        let context = graph_repeat.map(|r| (r, i)).or(context);
                        self.run_steps(body, &inner, context, run, depth + 1, oracle)?;
                        if depth == 0 {
                            let checked = self.stats.op_check.saturating_sub(checking);
                            self.stats.iterations.push((
                                name.clone(),
                                i,
                                began.elapsed().saturating_sub(checked),
                            ));
                        }
                    }
                    // The phases of a body run no times still come before
                    // the ones after the repeat.
                    run.phase = start + phases_in(body);
                }
            }
        }
        Ok(())
    }

    /// Hands the graph tensors a step wrote to the per-op check.
    #[allow(clippy::too_many_arguments)]
    fn check_results(
        &mut self,
        oracle: &mut Oracle<'p>,
        written: impl Iterator<Item = BufferId>,
        subst: &HashMap<BufferId, BufferId>,
        context: Option<(&'p Repeat, u32)>,
        by_compute: bool,
        step: &str,
    ) -> Result<(), SimError> {
        let start = Instant::now();
        let cpu_start = process_cpu();
        let buffers: BTreeSet<BufferId> = written.map(|b| self.shared.resolve(subst, b)).collect();
        // A step may write a tensor and an op's result computed from it (a
        // reduce running a residual add): the producer's result is taken
        // first, so that it is checked on its own rather than stood in for
        // by the reference when the later op is evaluated.
        let mut held = Vec::new();
        for b in buffers {
            let buffer = self.shared.buffer(b)?;
            if let Some(tensor) = oracle.holder(buffer, context, by_compute) {
                held.push((oracle.producer_position(tensor), b, tensor));
            }
        }
        held.sort_unstable();
        let mut result = Ok(());
        for (_, b, tensor) in held {
            if !oracle.wants(tensor) {
                continue;
            }
            result = self
                .buffer_values(b)
                .and_then(|values| oracle.capture(tensor, values, step));
            if result.is_err() {
                break;
            }
        }
        self.stats.op_check += start.elapsed();
        if let Some(spent) = cpu_start
            .zip(process_cpu())
            .map(|(a, b)| b.saturating_sub(a))
        {
            *self.stats.op_check_cpu.get_or_insert(Duration::ZERO) += spent;
        }
        result
    }

    /// Runs one compute step: the tiles in parallel, each tile's calls in
    /// program order on its own image.
    fn compute(
        &mut self,
        name: &str,
        calls: &[(TileId, Codelet)],
        subst: &HashMap<BufferId, BufferId>,
    ) -> Result<(), SimError> {
        let tiles = self.images.len();
        // Call indices grouped by tile, program order kept (a counting
        // sort): `order[offsets[t]..offsets[t + 1]]` are tile t's calls.
        // Validation checked every tile, so the indexing below is in range.
        let mut offsets = vec![0usize; tiles + 1];
        for (tile, _) in calls {
            let slot = offsets
                .get_mut(tile.index() + 1)
                .ok_or_else(|| SimError::UnknownTile {
                    tile: *tile,
                    tiles: tiles as u32,
                    what: "a codelet".to_owned(),
                })?;
            *slot += 1;
        }
        for t in 0..tiles {
            offsets[t + 1] += offsets[t];
        }
        let mut next = offsets.clone();
        let mut order = vec![0usize; calls.len()];
        for (i, (tile, _)) in calls.iter().enumerate() {
            order[next[tile.index()]] = i;
            next[tile.index()] += 1;
        }
        let shared = &self.shared;
        let costs = &self.costs;
        // Per tile: its calls' statistics, its device cycles and the GEMM
        // calls it could not cost.
        type TileResult = ([KindStats; CODELET_KINDS.len()], u64, u64);
        let results: Vec<Result<TileResult, SimError>> = self
            .images
            .par_iter_mut()
            .enumerate()
            .map(|(t, image)| {
                let mut kinds = [KindStats::default(); CODELET_KINDS.len()];
                let (mut cycles, mut uncounted) = (0u64, 0u64);
                let list = &order[offsets[t]..offsets[t + 1]];
                if list.is_empty() {
                    return Ok((kinds, cycles, uncounted));
                }
                let tile = TileId::from_u32(t as u32);
                let mut view = TileView {
                    shared,
                    subst,
                    tile,
                    image,
                };
                for &i in list {
                    let codelet = &calls[i].1;
                    let start = Instant::now();
                    let work = run_codelet_counted(&mut view, tile, codelet, Some(&costs.vector))?;
                    let call = match (work, codelet) {
                        (Some(work), _) => Some(costs.vector.cycles(&work)),
                        (None, Codelet::Gemm { kernel, entry, .. }) => {
                            costs.gemm.get(kernel.index()).and_then(|e| {
                                e[usize::from(entry.large) * 2 + usize::from(entry.accumulate)]
                            })
                        }
                        (None, _) => None,
                    };
                    match call {
                        Some(c) => cycles = cycles.saturating_add(c),
                        None => uncounted += 1,
                    }
                    let k = &mut kinds[codelet_kind(codelet)];
                    k.calls += 1;
                    k.busy += start.elapsed();
                }
                Ok((kinds, cycles, uncounted))
            })
            .collect();
        let mut busiest: (Option<TileId>, u64) = (None, 0);
        for (t, r) in results.into_iter().enumerate() {
            let (kinds, cycles, uncounted) = r?;
            for (total, k) in self.stats.codelets.iter_mut().zip(kinds) {
                total.calls += k.calls;
                total.busy += k.busy;
            }
            self.stats.cycles.uncounted_gemm_calls += uncounted;
            if cycles > busiest.1 {
                busiest = (Some(TileId::from_u32(t as u32)), cycles);
            }
        }
        let sync = self.costs.sync;
        self.stats.cycles.push(
            StepCycles {
                name: name.to_owned(),
                exchange: false,
                cycles: busiest.1.saturating_add(sync),
                busiest_tile: busiest.0,
            },
            busiest.1,
            sync,
        );
        Ok(())
    }

    /// Runs exchange step `name`, phase `run.phase`, in `iteration`.
    fn exchange(&mut self, name: &str, run: &mut Run<'_>, iteration: u32) -> Result<(), SimError> {
        let package = self.shared.package;
        let phase = run.phase;
        let missing = || SimError::MissingPhase {
            step: name.to_owned(),
            phase,
            phases: package.phases.len(),
            rows: package.phases.len(),
        };
        let scheduled = package.phases.get(phase).ok_or_else(missing)?;
        let (info, base) = (&scheduled.info, &scheduled.rows);
        let patched;
        let rows = if info.patches.is_empty() || iteration == 0 {
            base
        } else {
            let mut per_tile: Vec<Vec<u32>> = (0..base.tile_count())
                .map(|t| base.row(TileId::from_u32(t)).to_vec())
                .collect();
            for p in &info.patches {
                let word = per_tile
                    .get_mut(p.tile.index())
                    .and_then(|r| r.get_mut(p.index as usize))
                    .ok_or(SimError::PatchOutsideRow {
                        phase,
                        tile: p.tile,
                        index: p.index,
                    })?;
                *word = word.wrapping_add(p.delta.wrapping_mul(iteration));
            }
            patched = EncodedRows::from_tile_rows(per_tile);
            // Patches may change what the rows send: count it again.
            let words = patched.replay_words().saturating_sub(base.replay_words());
            run.exchange_words = run.exchange_words.saturating_add(words);
            if run.exchange_words > run.limit {
                return Err(SimError::WorkLimit {
                    what: "exchange words beyond the validated count (patched rows)",
                    needed: run.exchange_words,
                    limit: run.limit,
                });
            }
            &patched
        };
        // Local copies read before the exchange writes anything.
        let mut copies = Vec::with_capacity(info.local.len());
        for c in info.local.iter().map(|c| c.in_iteration(iteration)) {
            let data = self.bytes(c.tile, c.source, u64::from(c.bytes))?.to_vec();
            copies.push((c.tile, c.destination, data));
        }
        let mut words = Words::new(&self.shared, &mut self.images);
        let stats =
            replay(rows, &self.shared.fabric, &mut words).map_err(|source| SimError::Replay {
                step: name.to_owned(),
                phase,
                source,
            })?;
        self.stats.exchange_words += stats.words_written;
        // The busiest tile's on-tile copies follow the replayed rows.
        let mut copied: std::collections::BTreeMap<TileId, u64> = Default::default();
        for (tile, at, data) in copies {
            self.store(tile, at, &data)?;
            let b = copied.entry(tile).or_insert(0);
            *b = b.saturating_add(data.len() as u64);
        }
        let mut busiest: (Option<TileId>, u64) = (None, 0);
        for (&tile, &bytes) in &copied {
            let c = self.costs.vector.cycles(&Work::Copy { bytes });
            if c > busiest.1 {
                busiest = (Some(tile), c);
            }
        }
        let (work, sync) = (stats.cycles.saturating_add(busiest.1), self.costs.sync);
        self.stats.cycles.push(
            StepCycles {
                name: name.to_owned(),
                exchange: true,
                cycles: work.saturating_add(sync),
                busiest_tile: busiest.0,
            },
            work,
            sync,
        );
        Ok(())
    }

    fn bytes(&self, tile: TileId, address: u32, bytes: u64) -> Result<&[u8], SimError> {
        let range = self.shared.placed_range(tile, address, bytes)?;
        self.images
            .get(tile.index())
            .and_then(|image| image.get(range))
            .ok_or(SimError::Unplaced {
                tile,
                address,
                bytes,
            })
    }

    fn store(&mut self, tile: TileId, address: u32, data: &[u8]) -> Result<(), SimError> {
        let bytes = data.len() as u64;
        let range = self.shared.placed_range(tile, address, bytes)?;
        self.images
            .get_mut(tile.index())
            .and_then(|image| image.get_mut(range))
            .ok_or(SimError::Unplaced {
                tile,
                address,
                bytes,
            })?
            .copy_from_slice(data);
        Ok(())
    }

    /// The values of buffer `b`, read shard by shard (replica 0).
    fn buffer_values(&self, b: BufferId) -> Result<Vec<f32>, SimError> {
        let buffer = self.shared.buffer(b)?;
        crate::buffer_values(buffer, |tile, bytes| {
            let (address, _) = self.shared.range(b, tile)?;
            self.bytes(tile, address, bytes).map(<[u8]>::to_vec)
        })
    }

    fn outputs(&self, graph: &Graph) -> Result<ValueSet, SimError> {
        crate::collect_outputs(
            self.shared.package.program.buffers.values().iter(),
            graph,
            |id, tile, bytes| {
                let (address, _) = self.shared.range(BufferId::from_u32(id as u32), tile)?;
                self.bytes(tile, address, bytes).map(<[u8]>::to_vec)
            },
        )
    }
}

/// The buffers cast codelets write in `program`, with every buffer a
/// repeat substitutes for them.
fn cast_outputs(program: &Program) -> BTreeSet<BufferId> {
    let mut out = BTreeSet::new();
    for event in program.walk() {
        match event {
            WalkEvent::Compute(step, _) => {
                for (_, c) in &step.calls {
                    if let Codelet::Convert { output, .. } = c {
                        out.insert(output.buffer);
                    }
                }
            }
            // After the body, whose casts are in by then.
            WalkEvent::Leave(repeat, _) => {
                for (b, list) in &repeat.iteration_buffers {
                    if out.contains(b) {
                        out.extend(list.iter().copied());
                    }
                }
            }
            WalkEvent::Exchange(..) | WalkEvent::Enter(..) => {}
        }
    }
    out
}

/// Exchange steps (phases) in `steps`, a repeat body counted once.
fn phases_in(steps: &[Step]) -> usize {
    Walk::new(steps)
        .filter(|e| matches!(e, WalkEvent::Exchange(..)))
        .count()
}
