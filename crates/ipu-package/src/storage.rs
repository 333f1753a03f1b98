//! Storage requests: what every tile must hold, from when to when.
//!
//! Steps are numbered in program order with each repeat body counted once,
//! so one placement serves every iteration. A buffer lives from the first
//! step that touches it to the last; one that a repeat body touches and
//! that also lives outside the body lives across the whole body, because
//! the body runs again after its last use. Host-written buffers live from
//! step 0, weights for the whole program, outputs to the end.
//!
//! A repeat's per-iteration weights (same type, one buffer per iteration)
//! become one stacked request per tile, so that iteration `i`'s weights
//! sit at `base + i · stride`: per-iteration address patches are then a
//! single stride per patched word.

use std::collections::HashMap;

use ipu_alloc::{Request, RequestId};
use ipu_layout::hash::FoldBuildHasher;
use ipu_layout::{EntityId, MemoryClass, TileId};
use smallvec::SmallVec;

use crate::program::{BufferId, BufferRole, Codelet, Program, StepLabel, WalkEvent};

/// The buffers one request holds, each at a byte offset from its start: one
/// buffer at 0, or a stack of per-iteration buffers.
pub type Members = SmallVec<[(BufferId, u32); 1]>;

/// One tile's requests: placement requests (request `i` has id `i`) and
/// the buffers each holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TileStorage {
    /// What ipu-alloc places, with lifetimes in program-order steps.
    pub requests: Vec<Request>,
    /// `members[i]`: the buffers request `i` holds.
    pub members: Vec<Members>,
}

/// Every tile's requests.
#[derive(Clone, Debug, Default)]
pub struct StoragePlan {
    /// The steps' labels in program order, each repeat body once.
    pub step_labels: Vec<StepLabel>,
    /// Per tile, its requests.
    pub tiles: Vec<TileStorage>,
    /// Per buffer, its lifetime `(first, last)`.
    pub lifetimes: HashMap<BufferId, (u32, u32)>,
}

impl StoragePlan {
    /// Total requests over all tiles.
    pub fn request_count(&self) -> usize {
        self.tiles.iter().map(|t| t.requests.len()).sum()
    }
}

/// Why storage could not be planned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// A shard is larger than a 32-bit address space.
    #[error("{buffer} needs {bytes} bytes on {tile}, more than a tile can address")]
    TooLarge {
        /// The buffer's name.
        buffer: String,
        /// The tile.
        tile: TileId,
        /// The bytes needed.
        bytes: u64,
    },
}

/// What the walk over the steps finds: when each buffer is touched, the
/// buffers each repeat body touches, and the GEMM calls whose output must
/// not share memory elements with their operands.
#[derive(Default)]
struct Touched {
    labels: Vec<StepLabel>,
    touched: HashMap<BufferId, (u32, u32)>,
    /// Per repeat body: its step range and the buffers it touches.
    bodies: Vec<((u32, u32), Vec<BufferId>)>,
    /// GEMM separations: (tile, output, left, right).
    separations: Vec<(TileId, BufferId, BufferId, BufferId)>,
    /// Every repeat's per-iteration buffer lists.
    stacks: Vec<Vec<BufferId>>,
}

impl Touched {
    fn touch(&mut self, b: BufferId, step: u32) {
        let e = self.touched.entry(b).or_insert((step, step));
        e.0 = e.0.min(step);
        e.1 = e.1.max(step);
    }

    fn of(program: &Program) -> Touched {
        let mut t = Touched::default();
        // Per open repeat body: its first step and the buffers touched in
        // it so far (nested bodies included).
        let mut open: Vec<(u32, Vec<BufferId>)> = Vec::new();
        for event in program.walk() {
            match event {
                WalkEvent::Compute(step, at) => {
                    t.labels.push(step.label.clone());
                    for (tile, c) in &step.calls {
                        for b in codelet_buffers(c) {
                            t.touch(b, at.index);
                            if let Some((_, inside)) = open.last_mut() {
                                inside.push(b);
                            }
                        }
                        if let Codelet::Gemm {
                            left,
                            right,
                            output,
                            ..
                        } = c
                        {
                            t.separations
                                .push((*tile, output.buffer, left.buffer, right.buffer));
                        }
                    }
                }
                WalkEvent::Exchange(step, at) => {
                    t.labels.push(step.label.clone());
                    for c in &step.copies {
                        for b in [c.source, c.destination] {
                            t.touch(b, at.index);
                            if let Some((_, inside)) = open.last_mut() {
                                inside.push(b);
                            }
                        }
                    }
                }
                WalkEvent::Enter(repeat, at) => {
                    open.push((at.index, Vec::new()));
                    t.stacks
                        .extend(repeat.iteration_buffers.iter().map(|(_, l)| l.clone()));
                }
                WalkEvent::Leave(repeat, at) => {
                    let Some((start, mut touched)) = open.pop() else {
                        continue;
                    };
                    let end = at.index.saturating_sub(1).max(start);
                    for (b, list) in &repeat.iteration_buffers {
                        for &bi in list {
                            if let Some(&(f, l)) = t.touched.get(b) {
                                t.touch(bi, f);
                                t.touch(bi, l);
                            }
                        }
                    }
                    if let Some((_, inside)) = open.last_mut() {
                        inside.extend(touched.iter().copied());
                    }
                    touched.sort();
                    touched.dedup();
                    t.bodies.push(((start, end), touched));
                }
            }
        }
        t
    }
}

/// The buffers a codelet reads or writes.
pub fn codelet_buffers(c: &Codelet) -> SmallVec<[BufferId; 7]> {
    let ops: SmallVec<[_; 7]> = match *c {
        Codelet::Gemm {
            left,
            right,
            output,
            ..
        } => smallvec::smallvec![left, right, output],
        Codelet::Add { a, b, out, .. } => smallvec::smallvec![a, b, out],
        Codelet::LayerNorm {
            input,
            scale,
            bias,
            output,
            ..
        } => smallvec::smallvec![input, scale, bias, output],
        Codelet::Activation { input, output, .. } | Codelet::Convert { input, output, .. } => {
            smallvec::smallvec![input, output]
        }
        Codelet::ReduceSum { input, output, .. } => smallvec::smallvec![input, output],
        Codelet::AttentionBlock {
            q,
            k,
            v,
            out,
            max,
            sum,
            workspace,
            ..
        } => smallvec::smallvec![q, k, v, out, max, sum, workspace],
        Codelet::AttentionCombine {
            out,
            max,
            sum,
            output,
            ..
        } => smallvec::smallvec![out, max, sum, output],
        Codelet::AttentionSoftmax {
            scores,
            probs,
            max,
            sum,
            ..
        } => {
            let mut operands = smallvec::smallvec![scores, probs, max];
            operands.extend(sum);
            operands
        }
        Codelet::Panels { input, output, .. } => smallvec::smallvec![input, output],
        Codelet::Zero { target, .. } => smallvec::smallvec![target],
        Codelet::Gather {
            table,
            indices,
            output,
            ..
        } => smallvec::smallvec![table, indices, output],
    };
    ops.into_iter().map(|o| o.buffer).collect()
}

fn align_up(value: u64, alignment: u64) -> u64 {
    value.div_ceil(alignment.max(1)) * alignment.max(1)
}

/// Plans the storage requests of every one of `tiles` tiles for `program`.
pub fn plan_storage(program: &Program, tiles: u32) -> Result<StoragePlan, StorageError> {
    let walk = Touched::of(program);
    let last = (walk.labels.len() as u32).saturating_sub(1);

    let mut lifetimes = walk.touched.clone();
    // Buffers a body touches that also live outside it span the body.
    for ((start, end), touched) in &walk.bodies {
        for b in touched {
            let Some(&(f, l)) = lifetimes.get(b) else {
                continue;
            };
            if f < *start || l > *end {
                let e = lifetimes.get_mut(b).expect("present");
                e.0 = e.0.min(*start);
                e.1 = e.1.max(*end);
            }
        }
    }
    for (id, b) in program.buffers.iter() {
        let e = lifetimes.entry(id).or_insert((0, 0));
        match b.role {
            BufferRole::Weight => *e = (0, last),
            BufferRole::Input => e.0 = 0,
            BufferRole::Output => e.1 = last,
            BufferRole::Activation | BufferRole::Temporary => {}
        }
    }

    // Stacks of per-iteration weights.
    let mut stacked: HashMap<BufferId, (BufferId, u32)> = HashMap::new();
    let stacks = &walk.stacks;
    for list in stacks {
        for (i, &b) in list.iter().enumerate() {
            stacked.insert(b, (list[0], i as u32));
        }
    }

    let tile_count = program
        .buffers
        .values()
        .iter()
        .map(|b| b.ty.tiling().tile_count())
        .max()
        .unwrap_or(0)
        .max(tiles) as usize;
    let mut tiles: Vec<TileStorage> = vec![TileStorage::default(); tile_count];
    // One entry per shard of every buffer (a stacked weight's members
    // each): hundreds of thousands of inserts on one thread, before
    // placement can start, so the cheap hasher.
    let mut index_of: HashMap<(TileId, BufferId), RequestId, FoldBuildHasher> = HashMap::default();
    for (id, b) in program.buffers.iter() {
        if let Some(&(head, i)) = stacked.get(&id)
            && (head != id || i != 0)
        {
            continue;
        }
        let members: Vec<BufferId> = match stacked.get(&id) {
            Some(_) => stacks
                .iter()
                .find(|l| l[0] == id)
                .cloned()
                .unwrap_or_else(|| vec![id]),
            None => vec![id],
        };
        let (first, lastl) = lifetimes[&id];
        let alignment = b.alignment.max(8);
        for s in b.ty.shards() {
            if s.bytes == 0 {
                continue;
            }
            let one = s.bytes + u64::from(b.tail_bytes);
            let stride = align_up(one, u64::from(alignment));
            let total = stride * (members.len() as u64 - 1) + one;
            let bytes = u32::try_from(total).map_err(|_| StorageError::TooLarge {
                buffer: b.name.clone(),
                tile: s.tile,
                bytes: total,
            })?;
            let members: Members = members
                .iter()
                .enumerate()
                .map(|(i, &m)| (m, (stride * i as u64) as u32))
                .collect();
            let tile = &mut tiles[s.tile.index()];
            let id = RequestId::from_u32(tile.requests.len() as u32);
            for &(m, _) in &members {
                index_of.insert((s.tile, m), id);
            }
            tile.members.push(members);
            tile.requests.push(Request {
                id,
                class: b.ty.memory_class(),
                bytes,
                alignment,
                first_step: first,
                last_step: lastl,
                separate_from: SmallVec::new(),
            });
        }
    }
    for (tile, output, left, right) in walk.separations {
        let Some(&o) = index_of.get(&(tile, output)) else {
            continue;
        };
        let mut others = vec![left];
        if program.buffers[right].ty.memory_class() == MemoryClass::Ipu21Interleaved {
            others.push(right);
        }
        for other in others {
            if let Some(&x) = index_of.get(&(tile, other))
                && x != o
            {
                let request = &mut tiles[tile.index()].requests[o.index()];
                if !request.separate_from.contains(&x) {
                    request.separate_from.push(x);
                }
            }
        }
    }
    Ok(StoragePlan {
        step_labels: walk.labels,
        tiles,
        lifetimes,
    })
}
