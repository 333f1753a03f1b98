//! The exchange stage's adapter: every exchange step becomes a phase at the
//! placed addresses, the build's scheduler schedules and encodes it, and
//! `check_schedule` — which reads only the decoded rows — judges the rows.
//!
//! A repeat body's phases are encoded once. When a phase reads or writes a
//! per-iteration buffer, its next iteration is the same transfers at other
//! addresses: the scheduler re-encodes the first iteration's timing there,
//! and the words that differ become per-iteration patches.

use std::collections::HashMap;

use ipu_exchange::{EncodedRows, ExchangeScheduler, Schedule, ScheduleRequest, check_schedule};
use ipu_layout::TileId;
use rayon::prelude::*;

use super::{BuildError, Device};
use crate::package::{BufferAddresses, PackagePhase, PhaseInfo, RowPatch};
use crate::phases::{FragmentCache, PhaseBuild, build_phase};
use crate::program::{BufferId, Program, Redistribute, Step};

/// One exchange step to schedule.
struct Job<'a> {
    name: String,
    copies: &'a [Redistribute],
    /// For a step in a repeat body: each per-iteration buffer's buffer in
    /// iteration 1.
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

/// Schedules and encodes every exchange step, with patches for repeat
/// bodies whose phases read per-iteration buffers. With `previous`
/// schedules of the same program (placed elsewhere), their timing is
/// re-encoded with the new addresses instead of scheduling again.
pub(super) fn schedule_phases(
    program: &Program,
    addresses: &BufferAddresses,
    device: &Device<'_>,
    scheduler: &dyn ExchangeScheduler,
    verify: bool,
    cache: &mut FragmentCache,
    previous: Option<&[Schedule]>,
) -> Result<(Vec<PackagePhase>, Vec<Schedule>), BuildError> {
    let mut jobs = Vec::new();
    collect(&program.steps, None, &mut jobs);
    let address = |b: BufferId, t: TileId| addresses.get(b, t);
    // Phases are built in order (fragments are memoised), then scheduled
    // in parallel.
    let mut builds: Vec<(String, PhaseBuild, Option<PhaseBuild>)> = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let identity = |b: BufferId| b;
        let b0 = build_phase(
            program,
            job.copies,
            device.tiles,
            cache,
            &identity,
            &address,
        )?;
        let b1 = match &job.next {
            Some(subst)
                if job.copies.iter().any(|c| {
                    subst.contains_key(&c.source) || subst.contains_key(&c.destination)
                }) =>
            {
                let resolve = |b: BufferId| subst.get(&b).copied().unwrap_or(b);
                Some(build_phase(
                    program,
                    job.copies,
                    device.tiles,
                    cache,
                    &resolve,
                    &address,
                )?)
            }
            _ => None,
        };
        builds.push((job.name.clone(), b0, b1));
    }
    let fabric = &device.fabric;
    builds
        .into_par_iter()
        .enumerate()
        .map(|(i, (name, b0, b1))| {
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
            let s0 = match previous.and_then(|p| p.get(i)) {
                Some(p) => scheduler.readdress(p, &b0.phase, fabric, request),
                None => scheduler.schedule(&b0.phase, fabric, request),
            }
            .map_err(scheduler_error)?;
            if verify && let Err(errors) = check_schedule(&b0.phase, fabric, s0.rows()) {
                return Err(rejected(false, errors));
            }
            let mut local = b0.local;
            let patches = match b1 {
                Some(b1) => {
                    // The next iteration moves the same transfers: the same
                    // timing with its addresses.
                    let s1 = scheduler
                        .readdress(&s0, &b1.phase, fabric, request)
                        .map_err(scheduler_error)?;
                    if verify && let Err(errors) = check_schedule(&b1.phase, fabric, s1.rows()) {
                        return Err(rejected(true, errors));
                    }
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
                None => Vec::new(),
            };
            Ok((
                PackagePhase {
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
                s0,
            ))
        })
        .collect::<Result<Vec<_>, BuildError>>()
        .map(|v| v.into_iter().unzip())
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
