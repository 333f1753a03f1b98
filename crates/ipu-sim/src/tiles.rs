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

use std::collections::HashMap;

use ipu_exchange::{EncodedRows, ExchangeMemory, Fabric, MemoryError, replay};
use ipu_kernels::{AmpProgram, KernelArgs, emulate, programs_from_object};
use ipu_layout::{EntityId, Precision, TileId};
use ipu_package::graph::{Graph, ValueSet};
use ipu_package::package::Package;
use ipu_package::program::{BufferId, BufferRole, GemmEntry, KernelId, Operand, Step};

use crate::SimError;
use crate::codelets::{CodeletMemory, run_codelet};

/// First address of tile SRAM.
pub const SRAM_START: u32 = 0x4c000;
/// One past the last address of tile SRAM.
pub const SRAM_END: u32 = 0xe8000;

/// Runs `package` (built from `graph`) on `values` (every input and weight)
/// and returns the values of the graph's outputs.
pub fn run_package(
    package: &Package,
    graph: &Graph,
    values: &ValueSet,
) -> Result<ValueSet, SimError> {
    let mut m = Tiles::new(package)?;
    m.load(graph, values)?;
    let mut phase = 0usize;
    m.run_steps(&package.program.steps, &HashMap::new(), 0, &mut phase)?;
    m.outputs(graph)
}

struct Tiles<'p> {
    package: &'p Package,
    images: Vec<Vec<u8>>,
    /// Per buffer: tile → address.
    addresses: Vec<HashMap<u32, u32>>,
    /// Per tile: the union of placed ranges `(start, end)`, sorted.
    placed: Vec<Vec<(u32, u32)>>,
    /// Per kernel: programs by entry `[small init, small acc, large init, large acc]`.
    programs: Vec<[Option<AmpProgram>; 4]>,
    subst: HashMap<BufferId, BufferId>,
    fabric: Fabric,
}

impl<'p> Tiles<'p> {
    fn new(package: &'p Package) -> Result<Self, SimError> {
        let tiles = package.manifest.tile_count as usize;
        let p = &package.program;
        let mut placed = vec![Vec::new(); tiles];
        let mut addresses = Vec::with_capacity(p.buffers.len());
        for (b, list) in p.buffers.iter().zip(&p.addresses) {
            let mut map = HashMap::new();
            for &(tile, address) in list {
                let shard = b.ty.shard_bytes(TileId::from_u32(tile)).map_err(|source| {
                    SimError::Layout {
                        what: b.name.clone(),
                        source,
                    }
                })?;
                let end = u64::from(address) + shard + u64::from(b.tail_bytes);
                if address < SRAM_START || end > u64::from(SRAM_END) || tile as usize >= tiles {
                    return Err(SimError::Package(format!(
                        "{} on tile{tile} is placed outside tile memory",
                        b.name
                    )));
                }
                placed[tile as usize].push((address, end as u32));
                map.insert(tile, address);
            }
            addresses.push(map);
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
            let by_symbol: HashMap<String, AmpProgram> = parsed.into_iter().collect();
            let mut entry: [Option<AmpProgram>; 4] = Default::default();
            for (i, symbol) in k.entries.iter().enumerate() {
                entry[i] = by_symbol.get(symbol).cloned();
            }
            programs.push(entry);
        }
        let fabric = Fabric::ipu21().map_err(|e| SimError::Package(e.to_string()))?;
        let size = (SRAM_END - SRAM_START) as usize;
        Ok(Self {
            package,
            images: vec![vec![0xff; size]; tiles],
            addresses,
            placed,
            programs,
            subst: HashMap::new(),
            fabric,
        })
    }

    fn resolve(&self, b: BufferId) -> BufferId {
        self.subst.get(&b).copied().unwrap_or(b)
    }

    /// The placed range of `b` on `tile`: `(address, bytes with tail)`.
    fn range(&self, b: BufferId, tile: TileId) -> Result<(u32, u64), SimError> {
        let buffer = &self.package.program.buffers[b.index()];
        let address = *self.addresses[b.index()]
            .get(&tile.as_u32())
            .ok_or_else(|| SimError::OutOfRange {
                tile,
                buffer: buffer.name.clone(),
                offset: 0,
                bytes: 0,
                limit: 0,
            })?;
        let shard = buffer
            .ty
            .shard_bytes(tile)
            .map_err(|source| SimError::Layout {
                what: buffer.name.clone(),
                source,
            })?;
        Ok((address, shard + u64::from(buffer.tail_bytes)))
    }

    fn load(&mut self, graph: &Graph, values: &ValueSet) -> Result<(), SimError> {
        for (id, b) in self.package.program.buffers.iter().enumerate() {
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
                let (address, _) = self.range(BufferId::from_u32(id as u32), s.tile)?;
                let mut bytes = vec![0u8; s.bytes as usize];
                b.ty.pack_shard(s.tile, tensor, &mut bytes)
                    .map_err(|source| SimError::Layout {
                        what: b.name.clone(),
                        source,
                    })?;
                let at = (address - SRAM_START) as usize;
                self.images[s.tile.index()][at..at + bytes.len()].copy_from_slice(&bytes);
            }
        }
        Ok(())
    }

    fn run_steps(
        &mut self,
        steps: &[Step],
        subst: &HashMap<BufferId, BufferId>,
        iteration: u32,
        phase: &mut usize,
    ) -> Result<(), SimError> {
        for step in steps {
            self.subst = subst.clone();
            match step {
                Step::Compute { calls, .. } => {
                    for (tile, c) in calls {
                        run_codelet(self, *tile, c)?;
                    }
                }
                Step::Exchange { name, .. } => {
                    self.exchange(*phase, iteration)
                        .map_err(|e| SimError::Package(format!("exchange {name}: {e}")))?;
                    *phase += 1;
                }
                Step::Repeat {
                    count,
                    body,
                    iteration_buffers,
                    ..
                } => {
                    let start = *phase;
                    for i in 0..*count {
                        *phase = start;
                        let mut inner = subst.clone();
                        for (b, list) in iteration_buffers {
                            if let Some(&bi) = list.get(i as usize) {
                                inner.insert(*b, bi);
                            }
                        }
                        self.run_steps(body, &inner, i, phase)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn exchange(&mut self, phase: usize, iteration: u32) -> Result<(), String> {
        let info = self
            .package
            .program
            .phases
            .get(phase)
            .ok_or("the package has fewer phases than exchange steps")?;
        let base = self.package.rows.get(phase).ok_or("missing rows")?;
        let rows = if info.patches.is_empty() || iteration == 0 {
            base.clone()
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
            EncodedRows::from_tile_rows(per_tile)
        };
        // Local copies read before the exchange writes anything.
        let mut copies = Vec::new();
        for c in info.local.iter().map(|c| c.in_iteration(iteration)) {
            let data = self
                .bytes(c.tile, c.source, c.bytes)
                .map_err(|e| e.to_string())?;
            copies.push((c.tile, c.destination, data));
        }
        let fabric = self.fabric.clone();
        replay(&rows, &fabric, &mut Words(self)).map_err(|e| e.to_string())?;
        for (tile, at, data) in copies {
            self.store(tile, at, &data).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn is_placed(&self, tile: TileId, address: u32, bytes: u32) -> bool {
        let Some(list) = self.placed.get(tile.index()) else {
            return false;
        };
        let end = u64::from(address) + u64::from(bytes);
        let i = list.partition_point(|r| r.0 <= address);
        i > 0 && u64::from(list[i - 1].1) >= end
    }

    fn bytes(&self, tile: TileId, address: u32, bytes: u32) -> Result<Vec<u8>, SimError> {
        if !self.is_placed(tile, address, bytes) {
            return Err(SimError::Unplaced {
                tile,
                address,
                bytes: u64::from(bytes),
            });
        }
        let at = (address - SRAM_START) as usize;
        Ok(self.images[tile.index()][at..at + bytes as usize].to_vec())
    }

    fn store(&mut self, tile: TileId, address: u32, data: &[u8]) -> Result<(), SimError> {
        if !self.is_placed(tile, address, data.len() as u32) {
            return Err(SimError::Unplaced {
                tile,
                address,
                bytes: data.len() as u64,
            });
        }
        let at = (address - SRAM_START) as usize;
        self.images[tile.index()][at..at + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn operand(&self, tile: TileId, at: Operand, bytes: u64) -> Result<u32, SimError> {
        let b = self.resolve(at.buffer);
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

    fn outputs(&self, graph: &Graph) -> Result<ValueSet, SimError> {
        crate::collect_outputs(
            self.package.program.buffers.iter(),
            graph,
            |id, tile, bytes| {
                let (address, _) = self.range(BufferId::from_u32(id as u32), tile)?;
                self.bytes(tile, address, bytes as u32)
            },
        )
    }
}

/// The images as the exchange replay sees them: words at placed addresses.
struct Words<'a, 'p>(&'a mut Tiles<'p>);

impl ExchangeMemory for Words<'_, '_> {
    fn read_word(&self, tile: TileId, byte_address: u32) -> Result<u32, MemoryError> {
        let b = self
            .0
            .bytes(tile, byte_address, 4)
            .map_err(|_| MemoryError { tile, byte_address })?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn write_word(
        &mut self,
        tile: TileId,
        byte_address: u32,
        word: u32,
    ) -> Result<(), MemoryError> {
        self.0
            .store(tile, byte_address, &word.to_le_bytes())
            .map_err(|_| MemoryError { tile, byte_address })
    }
}

impl CodeletMemory for Tiles<'_> {
    fn precision(&self, buffer: BufferId) -> Precision {
        self.package.program.buffers[self.resolve(buffer).index()]
            .ty
            .precision()
    }

    fn read(&self, tile: TileId, at: Operand, bytes: u64) -> Result<Vec<u8>, SimError> {
        let address = self.operand(tile, at, bytes)?;
        let len = u32::try_from(bytes).map_err(|_| SimError::Argument {
            what: "read length".into(),
        })?;
        self.bytes(tile, address, len)
    }

    fn write(&mut self, tile: TileId, at: Operand, data: &[u8]) -> Result<(), SimError> {
        let address = self.operand(tile, at, data.len() as u64)?;
        self.store(tile, address, data)
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
        let index = usize::from(entry.large) * 2 + usize::from(entry.accumulate);
        let name = self
            .package
            .program
            .compiled
            .get(kernel.index())
            .map(|k| k.name.clone())
            .unwrap_or_default();
        let program = self
            .programs
            .get(kernel.index())
            .and_then(|e| e[index].clone())
            .ok_or_else(|| SimError::Kernel {
                tile,
                kernel: name.clone(),
                reason: "no program for the entry".into(),
            })?;
        // Every operand the kernel touches must lie in its placed range.
        let spec = self
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
            left: self.operand(tile, left, r * k * eb(left))?,
            right: self.operand(tile, right, k * c * eb(right))?,
            output: self.operand(tile, output, r * c * eb(output))?,
        };
        emulate(&program, &mut self.images[tile.index()], SRAM_START, &args).map_err(|e| {
            SimError::Kernel {
                tile,
                kernel: name,
                reason: e.to_string(),
            }
        })?;
        Ok(())
    }
}
