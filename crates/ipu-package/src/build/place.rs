//! The placement stage's adapter: the storage plan becomes an
//! `ipu_alloc::Problem` around each tile's support reservation, the
//! build's placer places it, and `check_placement` — which shares nothing
//! with any placer — judges the result before anything uses it.

use std::time::Instant;

use ipu_alloc::{Placement, Problem, Reservation, TileProblem, Verdict};
use ipu_layout::{EntityId, TileId};
use tracing::debug;

use super::{BuildError, Culprit, Culprits, Device, Stages};
use crate::package::BufferAddresses;
use crate::program::Program;
use crate::storage::StoragePlan;

/// Builds the placement problem, places it with the build's placer and
/// checks the result.
pub(super) fn place_storage(
    program: &Program,
    storage: &StoragePlan,
    reserved: &[u32],
    device: &Device<'_>,
    stages: &Stages,
    verify: bool,
) -> Result<(Problem, Placement), BuildError> {
    let start = Instant::now();
    let region = device.target.code_region();
    let base = region.start;
    // A reservation past the code region is a workload that does not fit,
    // not a malformed placement problem.
    let available = u64::from(region.end.saturating_sub(base));
    if let Some((t, &bytes)) = reserved
        .iter()
        .enumerate()
        .find(|&(_, &r)| u64::from(r) > available)
    {
        return Err(BuildError::SupportDoesNotFit {
            tile: TileId::from_u32(t as u32),
            bytes: u64::from(bytes),
            available,
        });
    }
    let tiles = (0..device.tiles as usize)
        .map(|t| TileProblem {
            tile: TileId::from_u32(t as u32),
            reservations: vec![Reservation {
                start: base,
                end: base.saturating_add(reserved[t]),
                steps: None,
                label: "support".into(),
            }],
            requests: storage
                .tiles
                .get(t)
                .map(|s| s.requests.clone())
                .unwrap_or_default(),
        })
        .collect();
    let problem = Problem {
        map: device.map.clone(),
        tiles,
    };
    let placer = stages.placer.as_ref();
    let placement = placer.place(&problem).map_err(|e| {
        BuildError::from_placer(placer.name(), e, |f| {
            // Where the bound proves the tile infeasible, that step is what
            // must shrink; the step where the request found no gap may only
            // be where the excess first showed.
            let step = match f.verdict {
                Verdict::BoundExceeded { step, .. } => step,
                _ => f.step,
            };
            let mut c = culprits(program, storage, f.tile.index(), step, reserved);
            c.problem = problem.tiles.get(f.tile.index()).cloned().map(Box::new);
            c
        })
    })?;
    if verify && let Err(errors) = ipu_alloc::check_placement(&problem, &placement) {
        return Err(BuildError::PlacementRejected {
            placer: placer.name().to_owned(),
            errors,
        });
    }
    debug!(
        tiles = device.tiles,
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
) -> Culprits {
    let mut out = Culprits {
        step,
        label: storage.step_labels.get(step as usize).cloned(),
        tile,
        support_bytes: reserved.get(tile).copied().unwrap_or(0),
        ..Culprits::default()
    };
    let Some(t) = storage.tiles.get(tile) else {
        return out;
    };
    let mut live: Vec<usize> = (0..t.requests.len())
        .filter(|&i| t.requests[i].first_step <= step && step <= t.requests[i].last_step)
        .collect();
    live.sort_by_key(|&i| std::cmp::Reverse(t.requests[i].bytes));
    out.live_buffers = live.len();
    out.live_bytes = live.iter().map(|&i| u64::from(t.requests[i].bytes)).sum();
    out.largest = live
        .iter()
        .take(6)
        .map(|&i| Culprit {
            name: t.members[i]
                .first()
                .and_then(|&(b, _)| program.buffers.get(b))
                .map_or_else(|| "?".into(), |b| b.name.clone()),
            iterations: t.members[i].len(),
            bytes: t.requests[i].bytes,
        })
        .collect();
    out
}

/// The addresses of `placement`, which placed `storage`.
pub(super) fn buffer_addresses(
    program: &Program,
    storage: &StoragePlan,
    placement: &Placement,
) -> BufferAddresses {
    let mut lists: Vec<Vec<(u32, u32)>> = vec![Vec::new(); program.buffers.len()];
    for (t, placed) in placement.tiles().iter().enumerate() {
        let Some(tile) = storage.tiles.get(t) else {
            continue;
        };
        for &(id, base) in placed.entries() {
            let Some(members) = tile.members.get(id.index()) else {
                continue;
            };
            for &(b, offset) in members {
                if let Some(list) = lists.get_mut(b.index()) {
                    list.push((placed.tile().as_u32(), base + offset));
                }
            }
        }
    }
    BufferAddresses::from_lists(lists)
}
