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
//! A codelet touches only the image of the tile it runs on, so the tiles of
//! one compute step run in parallel, each on its own image, with each
//! tile's calls in program order: the bytes are those of a sequential run
//! whatever the thread count, and when several tiles fail the error of the
//! lowest tile is reported. [`run_package_with_stats`] also says where the
//! time went.

use std::cell::Cell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use ipu_exchange::{EncodedRows, ExchangeMemory, Fabric, MemoryError, replay};
use ipu_kernels::{
    EmulateOptions, KernelArgs, PreparedProgram, emulate_prepared, programs_from_object,
};
use ipu_layout::{EntityId, Precision, TileId};
use ipu_package::graph::{Graph, ValueSet};
use ipu_package::package::Package;
use ipu_package::program::{BufferId, BufferRole, Codelet, GemmEntry, KernelId, Operand, Step};
use rayon::prelude::*;

use crate::SimError;
use crate::codelets::{CodeletMemory, run_codelet};

/// First address of tile SRAM.
pub const SRAM_START: u32 = 0x4c000;
/// One past the last address of tile SRAM.
pub const SRAM_END: u32 = 0xe8000;

/// The codelet kinds [`RunStats::codelets`] reports, in that order.
pub const CODELET_KINDS: [&str; 9] = [
    "gemm",
    "add",
    "layer_norm",
    "gelu",
    "convert",
    "reduce_sum",
    "attention_block",
    "attention_combine",
    "zero",
];

fn codelet_kind(c: &Codelet) -> usize {
    match c {
        Codelet::Gemm { .. } => 0,
        Codelet::Add { .. } => 1,
        Codelet::LayerNorm { .. } => 2,
        Codelet::Gelu { .. } => 3,
        Codelet::Convert { .. } => 4,
        Codelet::ReduceSum { .. } => 5,
        Codelet::AttentionBlock { .. } => 6,
        Codelet::AttentionCombine { .. } => 7,
        Codelet::Zero { .. } => 8,
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
    /// Setting up the images and decoding the kernel programs.
    pub setup: Duration,
    /// Writing inputs and weights into the images.
    pub load: Duration,
    /// Wall time of the compute steps.
    pub compute: Duration,
    /// Per codelet kind (indexed like [`CODELET_KINDS`]).
    pub codelets: [KindStats; 9],
    /// Wall time of the exchange steps (row decoding, replay and on-tile
    /// copies).
    pub exchange: Duration,
    /// Exchange steps run.
    pub exchange_steps: u64,
    /// Words the exchange replays wrote.
    pub exchange_words: u64,
    /// Reading the outputs back.
    pub outputs: Duration,
    /// Wall time of each iteration of the program's outermost repeats:
    /// `(repeat name, iteration, time)`.
    pub iterations: Vec<(String, u32, Duration)>,
    /// Wall time of every compute and exchange step run, by the step's
    /// name, in run order (a repeat's steps once per iteration).
    pub steps: Vec<(String, Duration)>,
}

/// Runs `package` (built from `graph`) on `values` (every input and weight)
/// and returns the values of the graph's outputs.
pub fn run_package(
    package: &Package,
    graph: &Graph,
    values: &ValueSet,
) -> Result<ValueSet, SimError> {
    run_package_with_stats(package, graph, values).map(|(out, _)| out)
}

/// [`run_package`], also returning where the time went.
pub fn run_package_with_stats(
    package: &Package,
    graph: &Graph,
    values: &ValueSet,
) -> Result<(ValueSet, RunStats), SimError> {
    let start = Instant::now();
    let mut m = Tiles::new(package)?;
    m.stats.setup = start.elapsed();
    let start = Instant::now();
    m.load(graph, values)?;
    m.stats.load = start.elapsed();
    let mut phase = 0usize;
    m.run_steps(&package.program.steps, &HashMap::new(), 0, &mut phase, 0)?;
    let start = Instant::now();
    let out = m.outputs(graph)?;
    m.stats.outputs = start.elapsed();
    Ok((out, m.stats))
}

/// What every tile's view needs and nobody changes during a run.
struct Shared<'p> {
    package: &'p Package,
    /// Per buffer: tile → (address, shard bytes with the access tail).
    ranges: Vec<HashMap<u32, (u32, u64)>>,
    /// Per tile: the union of placed ranges `(start, end)`, sorted.
    placed: Vec<Vec<(u32, u32)>>,
    /// Per kernel: programs by entry `[small init, small acc, large init,
    /// large acc]`, decoded once from the objects.
    programs: Vec<[Option<PreparedProgram>; 4]>,
    fabric: Fabric,
}

struct Tiles<'p> {
    shared: Shared<'p>,
    images: Vec<Vec<u8>>,
    stats: RunStats,
}

impl<'p> Tiles<'p> {
    fn new(package: &'p Package) -> Result<Self, SimError> {
        let tiles = package.manifest.tile_count as usize;
        let p = &package.program;
        let mut placed = vec![Vec::new(); tiles];
        let mut ranges = Vec::with_capacity(p.buffers.len());
        for (b, list) in p.buffers.iter().zip(&p.addresses) {
            let mut map = HashMap::new();
            for &(tile, address) in list {
                let shard = b.ty.shard_bytes(TileId::from_u32(tile)).map_err(|source| {
                    SimError::Layout {
                        what: b.name.clone(),
                        source,
                    }
                })?;
                let limit = shard + u64::from(b.tail_bytes);
                let end = u64::from(address) + limit;
                if address < SRAM_START || end > u64::from(SRAM_END) || tile as usize >= tiles {
                    return Err(SimError::Package(format!(
                        "{} on tile{tile} is placed outside tile memory",
                        b.name
                    )));
                }
                placed[tile as usize].push((address, end as u32));
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
        for k in &p.compiled {
            let parsed = programs_from_object(&k.object)
                .map_err(|e| SimError::Package(format!("kernel {}: {e}", k.name)))?;
            let mut by_symbol: HashMap<String, _> = parsed.into_iter().collect();
            let mut entry: [Option<PreparedProgram>; 4] = Default::default();
            for (i, symbol) in k.entries.iter().enumerate() {
                entry[i] = match by_symbol.remove(symbol) {
                    Some(program) => Some(PreparedProgram::new(program).map_err(|e| {
                        SimError::Package(format!("kernel {} entry {symbol}: {e}", k.name))
                    })?),
                    None => None,
                };
            }
            programs.push(entry);
        }
        let fabric = Fabric::ipu21().map_err(|e| SimError::Package(e.to_string()))?;
        let size = (SRAM_END - SRAM_START) as usize;
        Ok(Self {
            shared: Shared {
                package,
                ranges,
                placed,
                programs,
                fabric,
            },
            images: vec![vec![0xff; size]; tiles],
            stats: RunStats::default(),
        })
    }

    /// Writes every input and weight shard at its placed address, padding
    /// zeroed. Packing runs per tile in parallel (each tile's shards in
    /// buffer order), as it only reads the values and writes its own image.
    fn load(&mut self, graph: &Graph, values: &ValueSet) -> Result<(), SimError> {
        let package = self.shared.package;
        check_fixture(package, graph)?;
        let tiles = self.images.len();
        let buffers = &package.program.buffers;
        // Per tile: (buffer index, the tensor's values, shard bytes).
        let mut jobs: Vec<Vec<(usize, &[f32], u64)>> = vec![Vec::new(); tiles];
        for (id, b) in buffers.iter().enumerate() {
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
                    .ok_or_else(|| {
                        SimError::Package(format!(
                            "{} has a shard on {} of a {tiles}-tile package",
                            b.name, s.tile
                        ))
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
                    let b = &buffers[id];
                    let (address, _) = shared.range(BufferId::from_u32(id as u32), tile)?;
                    let len = u32::try_from(bytes).map_err(|_| SimError::Unplaced {
                        tile,
                        address,
                        bytes,
                    })?;
                    let at = shared.placed_offset(tile, address, len)?;
                    let shard = &mut image[at..at + bytes as usize];
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

    fn run_steps(
        &mut self,
        steps: &[Step],
        subst: &HashMap<BufferId, BufferId>,
        iteration: u32,
        phase: &mut usize,
        depth: usize,
    ) -> Result<(), SimError> {
        for step in steps {
            match step {
                Step::Compute { name, calls } => {
                    let start = Instant::now();
                    self.compute(calls, subst)?;
                    let took = start.elapsed();
                    self.stats.compute += took;
                    self.stats.steps.push((name.clone(), took));
                }
                Step::Exchange { name, .. } => {
                    let start = Instant::now();
                    self.exchange(*phase, iteration)
                        .map_err(|e| SimError::Package(format!("exchange {name}: {e}")))?;
                    let took = start.elapsed();
                    self.stats.exchange += took;
                    self.stats.exchange_steps += 1;
                    self.stats.steps.push((name.clone(), took));
                    *phase += 1;
                }
                Step::Repeat {
                    name,
                    count,
                    body,
                    iteration_buffers,
                } => {
                    let start = *phase;
                    for i in 0..*count {
                        let began = Instant::now();
                        *phase = start;
                        let mut inner = subst.clone();
                        for (b, list) in iteration_buffers {
                            if let Some(&bi) = list.get(i as usize) {
                                inner.insert(*b, bi);
                            }
                        }
                        self.run_steps(body, &inner, i, phase, depth + 1)?;
                        if depth == 0 {
                            self.stats
                                .iterations
                                .push((name.clone(), i, began.elapsed()));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs one compute step: the tiles in parallel, each tile's calls in
    /// program order on its own image.
    fn compute(
        &mut self,
        calls: &[(TileId, Codelet)],
        subst: &HashMap<BufferId, BufferId>,
    ) -> Result<(), SimError> {
        let tiles = self.images.len();
        // Call indices grouped by tile, program order kept (a counting
        // sort): `order[offsets[t]..offsets[t + 1]]` are tile t's calls.
        let mut offsets = vec![0usize; tiles + 1];
        for (tile, _) in calls {
            let slot = offsets.get_mut(tile.index() + 1).ok_or_else(|| {
                SimError::Package(format!(
                    "a codelet runs on {tile} of a {tiles}-tile package"
                ))
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
        let results: Vec<Result<[KindStats; 9], SimError>> = self
            .images
            .par_iter_mut()
            .enumerate()
            .map(|(t, image)| {
                let mut kinds = [KindStats::default(); 9];
                let list = &order[offsets[t]..offsets[t + 1]];
                if list.is_empty() {
                    return Ok(kinds);
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
                    run_codelet(&mut view, tile, codelet)?;
                    let k = &mut kinds[codelet_kind(codelet)];
                    k.calls += 1;
                    k.busy += start.elapsed();
                }
                Ok(kinds)
            })
            .collect();
        for r in results {
            for (total, k) in self.stats.codelets.iter_mut().zip(r?) {
                total.calls += k.calls;
                total.busy += k.busy;
            }
        }
        Ok(())
    }

    fn exchange(&mut self, phase: usize, iteration: u32) -> Result<(), String> {
        let package = self.shared.package;
        let info = package
            .program
            .phases
            .get(phase)
            .ok_or("the package has fewer phases than exchange steps")?;
        let base = package.rows.get(phase).ok_or("missing rows")?;
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
                    .ok_or("a patch is outside its row")?;
                *word = word.wrapping_add(p.delta.wrapping_mul(iteration));
            }
            patched = EncodedRows::from_tile_rows(per_tile);
            &patched
        };
        // Local copies read before the exchange writes anything.
        let mut copies = Vec::new();
        for c in info.local.iter().map(|c| c.in_iteration(iteration)) {
            let data = self
                .bytes(c.tile, c.source, c.bytes)
                .map_err(|e| e.to_string())?
                .to_vec();
            copies.push((c.tile, c.destination, data));
        }
        let mut words = Words::new(&self.shared, &mut self.images);
        let stats = replay(rows, &self.shared.fabric, &mut words).map_err(|e| e.to_string())?;
        self.stats.exchange_words += stats.words_written;
        for (tile, at, data) in copies {
            self.store(tile, at, &data).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn bytes(&self, tile: TileId, address: u32, bytes: u32) -> Result<&[u8], SimError> {
        let at = self.shared.placed_offset(tile, address, bytes)?;
        let image = self.image(tile, address, bytes)?;
        Ok(&image[at..at + bytes as usize])
    }

    fn store(&mut self, tile: TileId, address: u32, data: &[u8]) -> Result<(), SimError> {
        let at = self
            .shared
            .placed_offset(tile, address, data.len() as u32)?;
        let image = self
            .images
            .get_mut(tile.index())
            .ok_or(SimError::Unplaced {
                tile,
                address,
                bytes: data.len() as u64,
            })?;
        image[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn image(&self, tile: TileId, address: u32, bytes: u32) -> Result<&[u8], SimError> {
        self.images
            .get(tile.index())
            .map(Vec::as_slice)
            .ok_or(SimError::Unplaced {
                tile,
                address,
                bytes: u64::from(bytes),
            })
    }

    fn outputs(&self, graph: &Graph) -> Result<ValueSet, SimError> {
        crate::collect_outputs(
            self.shared.package.program.buffers.iter(),
            graph,
            |id, tile, bytes| {
                let (address, _) = self.shared.range(BufferId::from_u32(id as u32), tile)?;
                self.bytes(tile, address, bytes as u32).map(<[u8]>::to_vec)
            },
        )
    }
}

/// Checks that `graph` is the graph `package` was built from, as far as the
/// host sees it: every input, weight and output of the graph has a buffer
/// of the same name and element count, and every input and weight buffer
/// has a tensor. A package whose stored fixture lost the parameter
/// overrides it was built with (say 27 layers against a 1-layer package)
/// would otherwise run and fail the comparison with no hint why.
fn check_fixture(package: &Package, graph: &Graph) -> Result<(), SimError> {
    let buffers = &package.program.buffers;
    let by_name: HashMap<&str, usize> = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| (b.name.as_str(), i))
        .collect();
    let mismatch = |tensor: &str, reason: String| SimError::FixtureMismatch {
        tensor: tensor.to_owned(),
        reason,
    };
    for (_, t) in graph.tensors().iter() {
        if t.kind().is_computed() && t.kind() != ipu_package::TensorKind::Output {
            continue;
        }
        let Some(&i) = by_name.get(t.name()) else {
            return Err(mismatch(
                t.name(),
                format!("the package has no buffer for this {}", t.kind().as_str()),
            ));
        };
        let b = &buffers[i];
        let count =
            b.ty.shape()
                .element_count()
                .map_err(|source| SimError::Layout {
                    what: b.name.clone(),
                    source,
                })?;
        if count != t.element_count() {
            return Err(mismatch(
                t.name(),
                format!(
                    "the fixture's tensor has {} elements ({:?}) but the package's buffer has {count}",
                    t.element_count(),
                    t.extents()
                ),
            ));
        }
    }
    for b in buffers {
        if matches!(b.role, BufferRole::Input | BufferRole::Weight)
            && graph.tensor_by_name(&b.name).is_none()
        {
            return Err(mismatch(
                &b.name,
                "the package reads this buffer from the host but the fixture has no such tensor"
                    .to_owned(),
            ));
        }
    }
    Ok(())
}

impl Shared<'_> {
    fn resolve(&self, subst: &HashMap<BufferId, BufferId>, b: BufferId) -> BufferId {
        subst.get(&b).copied().unwrap_or(b)
    }

    /// The placed range of `b` on `tile`: `(address, bytes with tail)`.
    fn range(&self, b: BufferId, tile: TileId) -> Result<(u32, u64), SimError> {
        let missing = || SimError::OutOfRange {
            tile,
            buffer: self
                .package
                .program
                .buffers
                .get(b.index())
                .map(|x| x.name.clone())
                .unwrap_or_else(|| b.to_string()),
            offset: 0,
            bytes: 0,
            limit: 0,
        };
        self.ranges
            .get(b.index())
            .and_then(|m| m.get(&tile.as_u32()))
            .copied()
            .ok_or_else(missing)
    }

    /// The image offset of `bytes` bytes at `address` on `tile`, if they
    /// lie inside one placed range.
    fn placed_offset(&self, tile: TileId, address: u32, bytes: u32) -> Result<usize, SimError> {
        let unplaced = SimError::Unplaced {
            tile,
            address,
            bytes: u64::from(bytes),
        };
        let Some(list) = self.placed.get(tile.index()) else {
            return Err(unplaced);
        };
        let end = u64::from(address) + u64::from(bytes);
        let i = list.partition_point(|r| r.0 <= address);
        if i > 0 && u64::from(list[i - 1].1) >= end {
            Ok((address - SRAM_START) as usize)
        } else {
            Err(unplaced)
        }
    }

    /// The address of `bytes` bytes at operand `at` on `tile`, checked
    /// against the (substituted) buffer's placed range.
    fn operand(
        &self,
        subst: &HashMap<BufferId, BufferId>,
        tile: TileId,
        at: Operand,
        bytes: u64,
    ) -> Result<u32, SimError> {
        let b = self.resolve(subst, at.buffer);
        let (address, limit) = self.range(b, tile)?;
        if u64::from(at.offset) + bytes > limit {
            return Err(SimError::OutOfRange {
                tile,
                buffer: self.package.program.buffers[b.index()].name.clone(),
                offset: u64::from(at.offset),
                bytes,
                limit,
            });
        }
        Ok(address + at.offset)
    }
}

/// The images as the exchange replay sees them: words at placed addresses.
///
/// A replay moves runs of consecutive words, so the placed range that held
/// the last word usually holds the next: it is remembered and tried before
/// the binary search (the check itself is the same).
struct Words<'a, 'p> {
    shared: &'a Shared<'p>,
    images: &'a mut [Vec<u8>],
    /// The last placed range hit: `(tile, start, end)`.
    last: Cell<(u32, u32, u32)>,
}

impl Words<'_, '_> {
    fn new<'a, 'p>(shared: &'a Shared<'p>, images: &'a mut [Vec<u8>]) -> Words<'a, 'p> {
        Words {
            shared,
            images,
            last: Cell::new((u32::MAX, 0, 0)),
        }
    }

    /// The image range of the word at `byte_address` on `tile`, if a
    /// placed range holds it.
    fn word(&self, tile: TileId, byte_address: u32) -> Result<std::ops::Range<usize>, MemoryError> {
        let error = MemoryError { tile, byte_address };
        let end = byte_address.checked_add(4).ok_or(error)?;
        let (t, start, stop) = self.last.get();
        if !(t == tile.as_u32() && start <= byte_address && end <= stop) {
            let list = self.shared.placed.get(tile.index()).ok_or(error)?;
            let i = list.partition_point(|r| r.0 <= byte_address);
            match i.checked_sub(1).and_then(|i| list.get(i)) {
                Some(&(start, stop)) if end <= stop => {
                    self.last.set((tile.as_u32(), start, stop));
                }
                _ => return Err(error),
            }
        }
        let at = (byte_address - SRAM_START) as usize;
        Ok(at..at + 4)
    }
}

impl ExchangeMemory for Words<'_, '_> {
    fn read_word(&self, tile: TileId, byte_address: u32) -> Result<u32, MemoryError> {
        let range = self.word(tile, byte_address)?;
        let word = self
            .images
            .get(tile.index())
            .and_then(|image| image.get(range))
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .ok_or(MemoryError { tile, byte_address })?;
        Ok(u32::from_le_bytes(word))
    }

    fn write_word(
        &mut self,
        tile: TileId,
        byte_address: u32,
        word: u32,
    ) -> Result<(), MemoryError> {
        let range = self.word(tile, byte_address)?;
        self.images
            .get_mut(tile.index())
            .and_then(|image| image.get_mut(range))
            .ok_or(MemoryError { tile, byte_address })?
            .copy_from_slice(&word.to_le_bytes());
        Ok(())
    }
}

/// One tile's image as its codelets see it during a compute step.
struct TileView<'a, 'p> {
    shared: &'a Shared<'p>,
    subst: &'a HashMap<BufferId, BufferId>,
    tile: TileId,
    image: &'a mut Vec<u8>,
}

impl TileView<'_, '_> {
    /// Refuses an access to another tile's memory: the parallel run relies
    /// on each codelet touching only its own tile.
    fn own(&self, tile: TileId) -> Result<(), SimError> {
        if tile == self.tile {
            Ok(())
        } else {
            Err(SimError::Package(format!(
                "a codelet of {} accessed {tile}",
                self.tile
            )))
        }
    }
}

impl CodeletMemory for TileView<'_, '_> {
    fn precision(&self, buffer: BufferId) -> Precision {
        self.shared.package.program.buffers[self.shared.resolve(self.subst, buffer).index()]
            .ty
            .precision()
    }

    fn read(&self, tile: TileId, at: Operand, bytes: u64) -> Result<Vec<u8>, SimError> {
        self.own(tile)?;
        let address = self.shared.operand(self.subst, tile, at, bytes)?;
        let len = u32::try_from(bytes).map_err(|_| SimError::Argument {
            what: "read length".into(),
        })?;
        let at = self.shared.placed_offset(tile, address, len)?;
        Ok(self.image[at..at + len as usize].to_vec())
    }

    fn write(&mut self, tile: TileId, at: Operand, data: &[u8]) -> Result<(), SimError> {
        self.own(tile)?;
        let address = self
            .shared
            .operand(self.subst, tile, at, data.len() as u64)?;
        let at = self
            .shared
            .placed_offset(tile, address, data.len() as u32)?;
        self.image[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn gemm(
        &mut self,
        tile: TileId,
        kernel: KernelId,
        entry: GemmEntry,
        rows: u32,
        left: Operand,
        right: Operand,
        output: Operand,
    ) -> Result<(), SimError> {
        self.own(tile)?;
        let shared = self.shared;
        let index = usize::from(entry.large) * 2 + usize::from(entry.accumulate);
        let name = || {
            shared
                .package
                .program
                .compiled
                .get(kernel.index())
                .map(|k| k.name.clone())
                .unwrap_or_default()
        };
        let program = shared
            .programs
            .get(kernel.index())
            .and_then(|e| e[index].as_ref())
            .ok_or_else(|| SimError::Kernel {
                tile,
                kernel: name(),
                reason: "no program for the entry".into(),
            })?;
        // Every operand the kernel touches must lie in its placed range.
        let spec = shared
            .package
            .program
            .kernels
            .get(kernel.index())
            .ok_or_else(|| SimError::Package(format!("no kernel {kernel}")))?;
        let (r, k, c) = (
            u64::from(rows),
            u64::from(spec.inner),
            u64::from(spec.columns),
        );
        let eb = |o: Operand| self.precision(o.buffer).element_bytes();
        let args = KernelArgs {
            left: shared.operand(self.subst, tile, left, r * k * eb(left))?,
            right: shared.operand(self.subst, tile, right, k * c * eb(right))?,
            output: shared.operand(self.subst, tile, output, r * c * eb(output))?,
        };
        emulate_prepared(
            program,
            self.image,
            SRAM_START,
            &args,
            &EmulateOptions::default(),
        )
        .map_err(|e| SimError::Kernel {
            tile,
            kernel: name(),
            reason: e.to_string(),
        })?;
        Ok(())
    }
}
