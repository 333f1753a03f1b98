//! The logical model: a program run on buffers, before placement.
//!
//! Each buffer's shard on each tile is its own byte array, so this model
//! checks lowering alone — layouts, redistributions, codelet arguments and
//! repeats — without addresses, exchange schedules or kernel objects. Buffers
//! that the host does not fill start as `0xff` bytes (NaN in F16 and F32),
//! so a codelet that reads padding nobody cleared, or data nobody wrote,
//! spoils its result instead of reading lucky zeros.
//!
//! GEMMs here use a plain loop over the AMP operand layouts with F32 sums;
//! the tile model runs the kernels' AMP programs instead.

use std::collections::HashMap;

use ipu_layout::{ElementOrder, EntityId, IdVec, RedistributeConfig, TileId, redistribute_view};
use ipu_package::graph::{Graph, ValueSet};
use ipu_package::program::{
    BufferId, BufferRole, GemmEntry, KernelId, Operand, Program, Redistribute, RepeatStep, Step,
};

use crate::SimError;
use crate::codelets::{CodeletMemory, run_codelet};

/// Runs `program` (lowered from `graph`) on `values` (every input and
/// weight) and returns the values of the graph's outputs.
pub fn run_program(
    program: &Program,
    graph: &Graph,
    values: &ValueSet,
) -> Result<ValueSet, SimError> {
    let mut m = Logical::new(program, graph, values)?;
    m.run_steps(&program.steps, &HashMap::new())?;
    m.outputs(graph)
}

struct Logical<'p> {
    program: &'p Program,
    /// Per buffer, per tile of its tiling: the shard's bytes.
    shards: IdVec<BufferId, Vec<Vec<u8>>>,
    /// The substitution of the repeat iteration being run.
    subst: HashMap<BufferId, BufferId>,
}

impl<'p> Logical<'p> {
    fn new(program: &'p Program, graph: &Graph, values: &ValueSet) -> Result<Self, SimError> {
        let mut shards = IdVec::new();
        for (_, b) in program.buffers.iter() {
            let host = matches!(b.role, BufferRole::Input | BufferRole::Weight);
            let fill = if host { 0u8 } else { 0xff };
            let mut per_tile = Vec::new();
            for s in b.ty.shards() {
                let mut bytes = vec![fill; (s.bytes + u64::from(b.tail_bytes)) as usize];
                if host {
                    let tensor = graph
                        .tensor_by_name(&b.name)
                        .and_then(|t| values.get(t))
                        .ok_or_else(|| SimError::MissingValues {
                            tensor: b.name.clone(),
                        })?;
                    b.ty.pack_shard(s.tile, tensor, &mut bytes)
                        .map_err(|source| SimError::Layout {
                            what: b.name.clone(),
                            source,
                        })?;
                }
                per_tile.push(bytes);
            }
            shards.push(per_tile);
        }
        Ok(Self {
            program,
            shards,
            subst: HashMap::new(),
        })
    }

    fn resolve(&self, b: BufferId) -> BufferId {
        self.subst.get(&b).copied().unwrap_or(b)
    }

    /// Buffer `b`, or an error naming it when the program has no such
    /// buffer.
    fn buffer(&self, b: BufferId) -> Result<&ipu_package::program::Buffer, SimError> {
        self.program.buffers.get(b).ok_or(SimError::UnknownBuffer {
            buffer: b,
            buffers: self.program.buffers.len(),
            context: "an operand".to_owned(),
        })
    }

    fn run_steps(
        &mut self,
        steps: &[Step],
        subst: &HashMap<BufferId, BufferId>,
    ) -> Result<(), SimError> {
        for step in steps {
            self.subst = subst.clone();
            match step {
                Step::Compute(step) => {
                    for (tile, c) in &step.calls {
                        run_codelet(self, *tile, c)?;
                    }
                }
                Step::Exchange(step) => {
                    for c in &step.copies {
                        self.redistribute(c)?;
                    }
                }
                Step::Repeat(RepeatStep {
                    count,
                    body,
                    iteration_buffers,
                    ..
                }) => {
                    for i in 0..*count as usize {
                        let mut inner = subst.clone();
                        for (b, list) in iteration_buffers {
                            if let Some(&bi) = list.get(i) {
                                inner.insert(*b, bi);
                            }
                        }
                        self.run_steps(body, &inner)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn redistribute(&mut self, c: &Redistribute) -> Result<(), SimError> {
        let (src, dst) = (self.resolve(c.source), self.resolve(c.destination));
        let (sb, db) = (self.buffer(src)?, self.buffer(dst)?);
        let r = redistribute_view(&sb.ty, &c.view, &db.ty, &RedistributeConfig::default())
            .map_err(|source| SimError::Layout {
                what: format!("{} -> {}", sb.name, db.name),
                source,
            })?;
        let (source_name, destination_name) = (sb.name.clone(), db.name.clone());
        for f in r.fragments() {
            let (so, doff, n) = (
                f.source_offset as usize,
                f.destination_offset as usize,
                f.bytes as usize,
            );
            let outside =
                |tile: TileId, buffer: &str, offset: usize, limit: usize| SimError::OutOfRange {
                    tile,
                    buffer: buffer.to_owned(),
                    offset: offset as u64,
                    bytes: n as u64,
                    limit: limit as u64,
                };
            let source = self
                .shards
                .get(src)
                .and_then(|s| s.get(f.source.index()))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let data = source
                .get(so..so.saturating_add(n))
                .ok_or_else(|| outside(f.source, &source_name, so, source.len()))?
                .to_vec();
            let destination = self
                .shards
                .get_mut(dst)
                .and_then(|s| s.get_mut(f.destination.index()));
            let limit = destination.as_ref().map_or(0, |d| d.len());
            destination
                .and_then(|d| d.get_mut(doff..doff.saturating_add(n)))
                .ok_or_else(|| outside(f.destination, &destination_name, doff, limit))?
                .copy_from_slice(&data);
        }
        Ok(())
    }

    fn shard(
        &self,
        tile: TileId,
        at: Operand,
        bytes: u64,
    ) -> Result<(BufferId, usize, usize), SimError> {
        let b = self.resolve(at.buffer);
        let name = &self.buffer(b)?.name;
        let shard = self
            .shards
            .get(b)
            .and_then(|s| s.get(tile.index()))
            .map(Vec::len)
            .unwrap_or(0) as u64;
        let end = u64::from(at.offset).saturating_add(bytes);
        if end > shard {
            return Err(SimError::OutOfRange {
                tile,
                buffer: name.clone(),
                offset: u64::from(at.offset),
                bytes,
                limit: shard,
            });
        }
        Ok((b, at.offset as usize, end as usize))
    }

    fn outputs(&self, graph: &Graph) -> Result<ValueSet, SimError> {
        crate::collect_outputs(
            self.program.buffers.values().iter(),
            graph,
            |id, tile, _| Ok(self.shards[BufferId::from_u32(id as u32)][tile.index()].clone()),
        )
    }
}

impl CodeletMemory for Logical<'_> {
    fn precision(
        &self,
        _tile: TileId,
        buffer: BufferId,
    ) -> Result<ipu_layout::Precision, SimError> {
        Ok(self.buffer(self.resolve(buffer))?.ty.precision())
    }

    fn read(&self, tile: TileId, at: Operand, bytes: u64) -> Result<Vec<u8>, SimError> {
        let (b, start, end) = self.shard(tile, at, bytes)?;
        Ok(self.shards[b][tile.index()][start..end].to_vec())
    }

    fn extent(&self, tile: TileId, at: Operand, bytes: u64) -> Result<(), SimError> {
        self.shard(tile, at, bytes).map(|_| ())
    }

    fn write(&mut self, tile: TileId, at: Operand, data: &[u8]) -> Result<(), SimError> {
        let (b, start, end) = self.shard(tile, at, data.len() as u64)?;
        self.shards[b][tile.index()][start..end].copy_from_slice(data);
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
        let k = self
            .program
            .kernels
            .get(kernel)
            .ok_or(SimError::UnknownKernel {
                kernel,
                kernels: self.program.kernels.len(),
            })?;
        let (r, inner, cols) = (u64::from(rows), u64::from(k.inner), u64::from(k.columns));
        let left_order = self.buffer(self.resolve(left.buffer))?.ty.order();
        let right_order = self.buffer(self.resolve(right.buffer))?.ty.order();
        let out_order = self.buffer(self.resolve(output.buffer))?.ty.order();
        let (lp, rp, op) = (
            self.precision(tile, left.buffer)?,
            self.precision(tile, right.buffer)?,
            self.precision(tile, output.buffer)?,
        );
        let lbytes = self.read(tile, left, r * inner * lp.element_bytes())?;
        let rbytes = self.read(tile, right, inner * cols * rp.element_bytes())?;
        let at = |order: ElementOrder, p: ipu_layout::Precision, widths: &[u64], local: &[u64]| {
            order.byte_offset(p, widths, local) as usize
        };
        let element = |bytes: &[u8], p: ipu_layout::Precision, at: usize| {
            p.decode_from(&bytes[at..at + p.element_bytes() as usize])
        };
        let mut out = if entry.accumulate {
            let bytes = self.read(tile, output, r * cols * op.element_bytes())?;
            (0..r * cols)
                .map(|i| {
                    let (row, col) = (i / cols, i % cols);
                    element(&bytes, op, at(out_order, op, &[r, cols], &[row, col]))
                })
                .collect()
        } else {
            vec![0.0f32; (r * cols) as usize]
        };
        for row in 0..r {
            for c in 0..cols {
                let mut acc = 0.0f32;
                for kk in 0..inner {
                    let a = element(&lbytes, lp, at(left_order, lp, &[r, inner], &[row, kk]));
                    let b = element(&rbytes, rp, at(right_order, rp, &[inner, cols], &[kk, c]));
                    acc += a * b;
                }
                out[(row * cols + c) as usize] += acc;
            }
        }
        let mut bytes = vec![0u8; (r * cols * op.element_bytes()) as usize];
        let eb = op.element_bytes() as usize;
        for row in 0..r {
            for c in 0..cols {
                let o = at(out_order, op, &[r, cols], &[row, c]);
                op.encode_into(out[(row * cols + c) as usize], &mut bytes[o..o + eb]);
            }
        }
        self.write(tile, output, &bytes)
    }
}
