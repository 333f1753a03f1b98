//! The headline figures of a build, computed from the problem, the checked
//! placement and the scheduled phases — not from any stage's own report,
//! so a user's placer gets the same figures as ours — and the support
//! events the seed system logged.

use ipu_alloc::lower_bound;
use ipu_layout::EntityId;
use rayon::prelude::*;
use tracing::info;

use super::{Device, PhaseTimes, Planned};
use crate::package::{BuildSummary, TileSupport};

/// The build's summary.
pub(super) fn summarise(
    device: &Device<'_>,
    planned: &Planned,
    times: &PhaseTimes,
    budget: u64,
) -> BuildSummary {
    let map = &device.map;
    let usable = u64::from(map.loader_limit() - map.sram_start());
    let support = &planned.support;
    // Per tile: its address use, and the most bytes live at any step (data
    // plus reservations), whatever the addresses.
    let per_tile: Vec<(u64, u64)> = planned
        .problem
        .tiles
        .par_iter()
        .zip(planned.placement.tiles())
        .map(|(tp, placed)| {
            let live = match placed.bound() {
                Some(b) => b.peak_with_reservations,
                None => lower_bound(tp, map).peak_with_reservations,
            };
            let mut end = u64::from(map.sram_start());
            for r in &tp.reservations {
                end = end.max(u64::from(r.end));
            }
            for &(id, address) in placed.entries() {
                if let Some(r) = tp.requests.get(id.index()) {
                    end = end.max(u64::from(address) + u64::from(r.bytes));
                }
            }
            (end - u64::from(map.sram_start()), live)
        })
        .collect();
    let mut peak = 0u64;
    let mut headroom = (u64::MAX, 0u32);
    for (t, &(used, live)) in per_tile.iter().enumerate() {
        peak = peak.max(used);
        // Headroom in bytes: the most live at any step, less the part of
        // the support reservation that is not used.
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
        exchange_table_bytes = worst.exchange_bytes,
        host_code_bytes = worst.runtime_bytes,
        generated_code_bytes = worst.kernel_code_bytes,
        reserved_bytes = worst.reserved,
        "allocated package support memory"
    );
    let phases = &planned.phases;
    BuildSummary {
        tile_count: device.tiles,
        requests: planned.storage.request_count(),
        peak_bytes: peak,
        min_headroom_bytes: if headroom.0 == u64::MAX {
            usable
        } else {
            headroom.0
        },
        min_headroom_tile: headroom.1,
        exchange_horizon: phases.iter().map(|p| p.info.horizon).sum(),
        exchange_endpoint_bound: phases.iter().map(|p| p.info.endpoint_lower_bound).sum(),
        exchange_stronger_bound: phases.iter().map(|p| p.info.stronger_lower_bound).sum(),
        kernels: planned.kernels.len(),
        max_support_bytes: support.iter().map(TileSupport::used).max().unwrap_or(0),
        phase_ms: times.to_vec(),
        transient_budget: budget,
    }
}
