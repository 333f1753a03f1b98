//! The exchange stage's adapter: every exchange step is shaped once per plan
//! (its transfers in buffer terms, [`PhaseShape`]), becomes a phase at the
//! placed addresses, the build's scheduler schedules and encodes it, and
//! `check_schedule` — which reads only the decoded rows — judges the rows.
//!
//! A repeat body's phases are encoded once. When a phase reads or writes a
//! per-iteration buffer, its next iteration is the same transfers at other
//! addresses: the scheduler re-encodes the first iteration's timing there,
//! and the words that differ become per-iteration patches.

use std::collections::HashMap;

use ipu_exchange::{
    EncodedRows, ExchangeScheduler, Schedule, ScheduleError, ScheduleRequest, ValidPhase,
    check_valid_schedule,
};
use ipu_layout::TileId;
use ipu_layout::hash::FoldBuildHasher;
use rayon::prelude::*;

use super::{BuildError, Device};
use crate::package::{BufferAddresses, PackagePhase, PhaseInfo, RowPatch};
use crate::phases::{FragmentCache, PhaseBuild, PhaseShape};
use crate::program::{BufferId, Program, Redistribute, Step};

/// Each per-iteration buffer of a repeat body mapped to its buffer in
/// iteration 1. Looked up for every transfer of the body's steps when they
/// are shaped, so with the cheap [`FoldBuildHasher`].
type NextIteration = HashMap<BufferId, BufferId, FoldBuildHasher>;

/// One exchange step to schedule.
struct Job<'a> {
    name: String,
    copies: &'a [Redistribute],
    /// For a step in a repeat body: each per-iteration buffer's buffer in
    /// iteration 1.
    next: Option<NextIteration>,
}

fn collect<'a>(steps: &'a [Step], next: Option<&NextIteration>, out: &mut Vec<Job<'a>>) {
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
                let subst: NextIteration = if *count > 1 {
                    iteration_buffers
                        .iter()
                        .filter_map(|(b, list)| list.get(1).map(|&n| (*b, n)))
                        .collect()
                } else {
                    HashMap::default()
                };
                collect(body, Some(&subst), out);
            }
            Step::Compute { .. } => {}
        }
    }
}

/// An exchange step in buffer terms: iteration 0's shape and, for a step
/// of a repeat body that reads or writes per-iteration buffers, iteration
/// 1's.
pub(super) struct StepShape {
    name: String,
    first: PhaseShape,
    next: Option<PhaseShape>,
}

impl StepShape {
    /// Iteration 0's shape.
    pub(super) fn first(&self) -> &PhaseShape {
        &self.first
    }

    /// Whether the step's rows are patched per iteration.
    pub(super) fn patched(&self) -> bool {
        self.next.is_some()
    }
}

/// The shape of every exchange step in program order (each repeat body
/// once): fragments and multicast grouping, computed once per plan, the
/// steps in parallel; the first error in step order is the one returned,
/// whatever the thread count.
///
/// A redistribution that several steps make is computed once, first, and
/// kept in `cache`; every other one is computed by its step's worker and
/// dropped once the step is shaped. SigLIP's steps make 63
/// redistributions, 60 of them different, with 3.2 million fragments in
/// all: kept together until every step was shaped, their vectors were
/// 100 MB of fresh memory, which the kernel zeroes page by page, and that
/// zeroing was the largest single cost of shaping.
pub(super) fn shape_steps(
    program: &Program,
    tiles: u32,
    cache: &mut FragmentCache,
) -> Result<Vec<StepShape>, BuildError> {
    let mut jobs = Vec::new();
    collect(&program.steps, None, &mut jobs);
    let key = |c: &Redistribute| {
        (
            program.buffers[c.source].ty.clone(),
            c.view.clone(),
            program.buffers[c.destination].ty.clone(),
        )
    };
    let mut uses: HashMap<_, u32> = HashMap::new();
    for c in jobs.iter().flat_map(|job| job.copies) {
        *uses.entry(key(c)).or_default() += 1;
    }
    cache.fill(
        jobs.iter()
            .flat_map(|job| job.copies)
            .map(key)
            .filter(|k| uses.get(k).is_some_and(|&n| n > 1)),
    );
    let cache = &*cache;
    let shaped: Vec<Result<StepShape, BuildError>> = jobs
        .par_iter()
        .map(|job| {
            let identity = |b: BufferId| b;
            let first = PhaseShape::build(program, job.copies, tiles, cache, &identity)?;
            let next = match &job.next {
                Some(subst) if first.touches(&|b| subst.contains_key(&b)) => {
                    let resolve = |b: BufferId| subst.get(&b).copied().unwrap_or(b);
                    // Per-iteration buffers share their type, so the next
                    // iteration is the same shape on other buffers; a
                    // substitution that changed a type is shaped anew.
                    let same_types = subst
                        .iter()
                        .all(|(&a, &b)| program.buffers[a].ty == program.buffers[b].ty);
                    Some(if same_types {
                        first.map_buffers(&resolve)
                    } else {
                        PhaseShape::build(program, job.copies, tiles, cache, &resolve)?
                    })
                }
                _ => None,
            };
            Ok(StepShape {
                name: job.name.clone(),
                first,
                next,
            })
        })
        .collect();
    shaped.into_iter().collect()
}

/// A scheduling round's result for one step: what goes in the package,
/// and the schedule (for a later round to encode again elsewhere).
pub(super) struct Scheduled {
    pub phase: PackagePhase,
    pub schedule: Schedule,
}

/// An earlier scheduling round of the same plan: its steps and the
/// addresses they were scheduled at.
pub(super) struct Round {
    pub steps: Vec<Scheduled>,
    pub addresses: BufferAddresses,
}

/// Schedules and encodes every exchange step at the placed addresses,
/// with patches for repeat bodies whose phases read per-iteration buffers.
/// With `previous` — an earlier round of the same plan, placed elsewhere —
/// a step whose transfers did not move keeps its rows, and one that moved
/// has its timing re-encoded with the new addresses instead of being
/// scheduled again. Whether a step moved is found by building its phases
/// at the earlier addresses again, rather than keeping every step's
/// phases from the earlier round: a build that needs no second round
/// (most) would hold them all at its peak, 80 MB on SigLIP.
pub(super) fn schedule_phases(
    program: &Program,
    shapes: &[StepShape],
    addresses: &BufferAddresses,
    device: &Device<'_>,
    scheduler: &dyn ExchangeScheduler,
    verify: bool,
    previous: Option<Round>,
) -> Result<Vec<Scheduled>, BuildError> {
    let address = |b: BufferId, t: TileId| addresses.get(b, t);
    let fabric = &device.fabric;
    let (mut previous, before): (Vec<Option<Scheduled>>, _) = match previous {
        Some(r) => (r.steps.into_iter().map(Some).collect(), Some(r.addresses)),
        None => (Vec::new(), None),
    };
    // Whether a step's phases at the earlier round's addresses are the
    // ones built now.
    let unmoved = |shape: &StepShape, b0: &PhaseBuild, b1: Option<&PhaseBuild>| {
        let Some(before) = &before else {
            return false;
        };
        let then = |b: BufferId, t: TileId| before.get(b, t);
        let same_at = |s: &PhaseShape, now: &PhaseBuild| {
            s.at(program, &then)
                .is_ok_and(|earlier| same(&earlier, now))
        };
        same_at(&shape.first, b0)
            && match (&shape.next, b1) {
                (Some(next), Some(b1)) => same_at(next, b1),
                (None, None) => true,
                _ => false,
            }
    };
    previous.resize_with(shapes.len(), || None);
    // Largest steps first: the workers take steps in this order, so the
    // longest ones do not start last and leave one core idle (a step with
    // a next iteration is scheduled once and readdressed, and checked
    // twice). Results are put back in step order, and the first error in
    // step order is the one reported, whatever the thread count.
    let mut order: Vec<(usize, &StepShape, Option<Scheduled>)> = shapes
        .iter()
        .zip(previous)
        .enumerate()
        .map(|(i, (shape, prev))| (i, shape, prev))
        .collect();
    order.sort_by_key(|(i, shape, _)| {
        let weight = shape.first.work() * if shape.next.is_some() { 2 } else { 1 };
        (std::cmp::Reverse(weight), *i)
    });
    let mut done: Vec<(usize, Result<Scheduled, BuildError>)> = order
        .into_iter()
        .par_bridge()
        .map(|(i, shape, prev)| {
            let result = (|| {
                let name = shape.name.clone();
                let b0 = shape.first.at(program, &address)?;
                let b1 = match &shape.next {
                    Some(next) => Some(next.at(program, &address)?),
                    None => None,
                };
                let prev = match prev {
                    // Nothing this step moves was moved: its rows stand, and
                    // they were checked when they were made.
                    Some(p) if unmoved(shape, &b0, b1.as_ref()) => {
                        return Ok(p);
                    }
                    other => other,
                };
                let scheduler_error = |source| BuildError::Schedule {
                    phase: i,
                    name: name.clone(),
                    scheduler: scheduler.name().to_owned(),
                    source,
                };
                let rejected = |next_iteration, errors| BuildError::ScheduleRejected {
                    phase: i,
                    name: name.clone(),
                    scheduler: scheduler.name().to_owned(),
                    next_iteration,
                    errors,
                };
                // A phase patched per iteration needs rows whose instructions
                // do not depend on its addresses.
                let request = ScheduleRequest {
                    label: i as u32,
                    relocatable: b1.is_some(),
                };
                // Each phase is validated once, here; the scheduler and
                // the checker take the proof instead of validating again.
                let valid = |phase| {
                    ValidPhase::new(phase).map_err(|source| {
                        scheduler_error(ScheduleError::Phase {
                            phase: i as u32,
                            source,
                        })
                    })
                };
                let v0 = valid(&b0.phase)?;
                let s0 = match &prev {
                    Some(p) => scheduler.readdress_valid(&p.schedule, v0, fabric, request),
                    None => scheduler.schedule_valid(v0, fabric, request),
                }
                .map_err(scheduler_error)?;
                // The first iteration's rows are checked while the next
                // iteration's are made and checked: the two are independent,
                // and on the largest phases they are most of a step's time.
                // The first iteration's errors are reported first.
                let (checked0, next) = rayon::join(
                    || {
                        if verify {
                            check_valid_schedule(v0, fabric, s0.rows())
                        } else {
                            Ok(())
                        }
                    },
                    || {
                        b1.as_ref().map(|b1| {
                            // The next iteration moves the same transfers: the
                            // same timing with its addresses.
                            let v1 = valid(&b1.phase)?;
                            let s1 = scheduler
                                .readdress_valid(&s0, v1, fabric, request)
                                .map_err(scheduler_error)?;
                            if verify
                                && let Err(errors) = check_valid_schedule(v1, fabric, s1.rows())
                            {
                                return Err(rejected(true, errors));
                            }
                            Ok(s1)
                        })
                    },
                );
                if let Err(errors) = checked0 {
                    return Err(rejected(false, errors));
                }
                let s1 = next.transpose()?;
                let mut local = b0.local.clone();
                let patches = match (&b1, &s1) {
                    (Some(b1), Some(s1)) => {
                        // On-tile copies of per-iteration buffers move by a
                        // stride per iteration, like the rows' addresses.
                        let differ = || BuildError::LocalCopiesDiffer {
                            phase: i,
                            name: name.clone(),
                        };
                        if b1.local.len() != local.len() {
                            return Err(differ());
                        }
                        for (c0, c1) in local.iter_mut().zip(&b1.local) {
                            if (c0.tile, c0.bytes) != (c1.tile, c1.bytes) {
                                return Err(differ());
                            }
                            c0.source_stride = c1.source.wrapping_sub(c0.source);
                            c0.destination_stride = c1.destination.wrapping_sub(c0.destination);
                        }
                        row_patches(s0.rows(), s1.rows()).map_err(|(tile, first, next)| {
                            BuildError::RowsNotRelocatable {
                                phase: i,
                                name: name.clone(),
                                scheduler: scheduler.name().to_owned(),
                                tile,
                                first,
                                next,
                            }
                        })?
                    }
                    _ => Vec::new(),
                };
                tracing::debug!(
                    phase = i,
                    name = %name,
                    transfers = b0.phase.transfers.len(),
                    local_copies = local.len(),
                    horizon = s0.horizon(),
                    endpoint_lower_bound = s0.endpoint_lower_bound(),
                    "scheduled exchange step"
                );
                Ok(Scheduled {
                    phase: PackagePhase {
                        info: PhaseInfo {
                            name,
                            local,
                            patches,
                            horizon: s0.horizon(),
                            endpoint_lower_bound: s0.endpoint_lower_bound(),
                            stronger_lower_bound: s0.stronger_lower_bound(),
                        },
                        rows: s0.rows().clone(),
                    },
                    schedule: s0,
                })
            })();
            (i, result)
        })
        .collect();
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, result)| result).collect()
}

/// Whether two builds of a step move the same words between and within
/// tiles at the same addresses.
fn same(a: &PhaseBuild, b: &PhaseBuild) -> bool {
    a.phase == b.phase && a.local == b.local
}

/// The words that differ between iteration 0's and iteration 1's rows, or
/// the first tile whose row changes length (with both lengths).
fn row_patches(
    r0: &EncodedRows,
    r1: &EncodedRows,
) -> Result<Vec<RowPatch>, (TileId, usize, usize)> {
    let mut patches = Vec::new();
    for t in 0..r0.tile_count() {
        let tile = TileId::from_u32(t);
        let (a, b) = (r0.row(tile), r1.row(tile));
        if a.len() != b.len() {
            return Err((tile, a.len(), b.len()));
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
