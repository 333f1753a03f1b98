//! The scheduler's entry points: from a phase to checked, encoded rows.
//!
//! ```text
//! Phase ──validate──► jobs ──presplit narrow multicasts──► core
//!   (critical-set events) ──► segments
//!   ordinary: every transfer as 32-bit words, tile-level jobs
//!   paired:   Paired64 transfers as 64-bit items that also hold the
//!             partner tiles' lanes and ports (the fabric names partners),
//!             the rest as 32-bit words
//! keep the shorter ──► per-tile send/receive pieces (rayon, per tile)
//!   ──► rows (rayon)
//! beside the plans: the overlap check and the multicast bound
//! ```
//!
//! Results never depend on the thread count: parallel loops only map over
//! independent items and collect in order.

use ipu_layout::TileId;
use rayon::prelude::*;

use crate::address::Relocation;
use crate::bounds::{lane_loads, multicast_bound_of, stronger_lower_bound};
use crate::core::CoreOutput;
use crate::encode::{Activity, EncodedRows, encode_tile};
use crate::error::{ReaddressMismatch, ScheduleError};
use crate::fabric::Fabric;
use crate::model::{Phase, ValidPhase, Width, validate_overlaps, validate_structure};
use crate::relocate::relocate_rows;

mod activity;
mod plan;
mod sets;
mod wide;

use activity::add_activity;
use plan::{PRESPLIT_MAX_FANOUT, plan};

/// Knobs of [`schedule`].
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleConfig {
    /// Target horizon slack over the endpoint bound, in parts per million.
    /// Zero aims at the bound exactly (most preemptions); a little slack
    /// lets the scheduler keep running jobs instead of moving them, so
    /// there are fewer segments and shorter rows.
    pub target_slack_ppm: u32,
    /// Largest number of nodes one alternating-path search visits.
    pub path_search_limit: usize,
    /// Whether the core may split a multicast transfer by fanout while it
    /// schedules (the receivers free now get their own part).
    pub fanout_split: bool,
    /// Multicasts up to this fanout may be split into receiver groups
    /// before scheduling where their sender has lane time to spare (see
    /// `presplit`); below 2 nothing is. Independent of `fanout_split`.
    pub presplit_max_fanout: u32,
    /// How many of a free node's pending multicast transfers the greedy
    /// fill looks at per event (unicast ones are found through bit sets;
    /// nodes that must work look at all). Smaller is faster; the
    /// critical-set repair keeps the horizon either way.
    pub fill_budget: usize,
    /// Whether to try a paired schedule when a phase has Paired64 transfers.
    pub try_paired: bool,
    /// Phases with at least this many transfers are logged at info level.
    pub large_phase_transfers: usize,
    /// The phase number used in log events by [`schedule`]
    /// ([`schedule_phases`] uses each phase's index).
    pub phase_label: u32,
    /// Whether to run [`check_schedule`](crate::check_schedule) on the
    /// result before returning it (on by default).
    pub verify: bool,
    /// Encode rows whose instruction choice does not depend on addresses:
    /// two transfers are never treated as contiguous in memory, even when
    /// their addresses are. Rows of the same phase with addresses moved
    /// (one repeat iteration and the next) then have the same length and
    /// differ only in address fields, so the next iteration's row is the
    /// first one plus per-word deltas. Costs a few more instructions.
    pub relocatable: bool,
    /// Whether to build a schedule by receiver sets first where multicasts
    /// to a few groups of tiles carry the phase: kept without running the
    /// core when within 0.5 % of the endpoint bound, else when shorter than
    /// the core's (see `schedule/sets.rs`).
    pub receiver_sets: bool,
    /// Job sets of at least this many jobs are scheduled as two halves in
    /// time, one per thread, each half split again while it is this large
    /// (see `core/split.rs`); `usize::MAX` never splits. The halves are
    /// chosen from the jobs alone, so the schedule does not depend on the
    /// number of threads.
    pub split_jobs: usize,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            target_slack_ppm: 2000,
            path_search_limit: 512,
            fanout_split: true,
            presplit_max_fanout: PRESPLIT_MAX_FANOUT,
            fill_budget: 16,
            try_paired: true,
            large_phase_transfers: 1000,
            phase_label: 0,
            verify: true,
            relocatable: false,
            receiver_sets: true,
            split_jobs: crate::core::SPLIT_JOBS,
        }
    }
}

/// Which kind of schedule was kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScheduleKind {
    /// Every transfer as 32-bit words.
    Ordinary,
    /// Paired64 transfers as 64-bit items (occupying both tiles of the
    /// sender's and of each receiver's pair), the rest as 32-bit words,
    /// scheduled together.
    Paired,
}

impl ScheduleKind {
    /// The name used in logs.
    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::Ordinary => "ordinary",
            ScheduleKind::Paired => "paired",
        }
    }
}

/// A scheduled and encoded phase.
#[derive(Clone, Debug)]
pub struct Schedule {
    horizon: u64,
    endpoint_lower_bound: u64,
    stronger_lower_bound: u64,
    multicast_lower_bound: u64,
    kind: ScheduleKind,
    ordinary_horizon: u64,
    paired_horizon: Option<u64>,
    segments: usize,
    rows: EncodedRows,
    /// The core's segments, kept so that the same timing can be encoded
    /// again with other addresses ([`Schedule::readdress`]).
    core: std::sync::Arc<CoreOutput>,
    /// Of relocatable rows, where each tile's address fields point, so
    /// that a readdress moves the rows instead of encoding them again.
    relocations: Option<TileRelocations>,
}

impl Schedule {
    /// The same schedule — every segment at the same cycle — encoded for
    /// `phase`, which must be the scheduled phase with only its addresses
    /// changed (same transfers in the same order: sources, destination
    /// tiles, words, widths, gather lengths). Scheduling depends on the
    /// addresses only through the encoding, so this costs an encoding, not
    /// a schedule — and for relocatable rows (`ScheduleConfig::relocatable`
    /// on both calls) only a rewrite of their address fields: a build uses
    /// it when placement moves data after the phases were scheduled, and
    /// for the next iteration of a repeat body.
    pub fn readdress(
        &self,
        phase: &Phase,
        fabric: &Fabric,
        config: &ScheduleConfig,
    ) -> Result<Schedule, ScheduleError> {
        let valid = ValidPhase::new(phase).map_err(|source| ScheduleError::Phase {
            phase: config.phase_label,
            source,
        })?;
        self.readdress_valid(valid, fabric, config)
    }

    /// [`Schedule::readdress`] for a phase already validated.
    pub fn readdress_valid(
        &self,
        phase: ValidPhase<'_>,
        fabric: &Fabric,
        config: &ScheduleConfig,
    ) -> Result<Schedule, ScheduleError> {
        let phase = phase.phase();
        let label = config.phase_label;
        if phase.tile_count != self.rows.tile_count() {
            return Err(ScheduleError::Readdress {
                phase: label,
                transfer: None,
                reason: ReaddressMismatch::TileCount {
                    phase_tiles: phase.tile_count,
                    schedule_tiles: self.rows.tile_count(),
                },
            });
        }
        let origins = self.core.jobs.iter().map(|j| j.origin).max();
        if origins.is_some_and(|o| o as usize >= phase.transfers.len()) {
            return Err(ScheduleError::Readdress {
                phase: label,
                transfer: None,
                reason: ReaddressMismatch::FewerTransfers {
                    transfers: phase.transfers.len(),
                },
            });
        }
        // Every job must describe its transfer exactly as when scheduled.
        for job in &self.core.jobs {
            let t = &phase.transfers[job.origin as usize];
            let wide = job.paired.is_some();
            let dests_match = job.dests.iter().zip(&job.receivers).all(|(&k, &r)| {
                t.destinations
                    .get(k as usize)
                    .is_some_and(|&(d, _)| d.as_u32() == r)
            });
            let words = if wide { 2 * job.len } else { job.len };
            if t.source.as_u32() != job.sender || !dests_match || t.words != words {
                return Err(ScheduleError::Readdress {
                    phase: label,
                    transfer: Some(job.origin),
                    reason: ReaddressMismatch::Transfer,
                });
            }
            if wide && (t.width != Width::Paired64 || t.source_addresses.len() != 1) {
                return Err(ScheduleError::Readdress {
                    phase: label,
                    transfer: Some(job.origin),
                    reason: ReaddressMismatch::NoLongerPaired,
                });
            }
        }
        // Relocatable rows only move: their instructions do not depend
        // on the addresses. Others are encoded again.
        let (rows, relocations) = match &self.relocations {
            Some(r) if config.relocatable => {
                let rows = relocate_rows(&self.rows, r, phase, label)?;
                verify_rows(phase, fabric, &rows, config, label)?;
                (rows, Some(r.clone()))
            }
            _ => {
                let latency = u64::from(fabric.latency_cycles());
                let activity = add_activity(phase, &self.core, latency, config.relocatable);
                encode_rows(phase, &activity, fabric, config, label)?
            }
        };
        Ok(Schedule {
            rows,
            core: self.core.clone(),
            relocations,
            ..*self
        })
    }

    /// Cycles from the phase start until the last word is written.
    pub fn horizon(&self) -> u64 {
        self.horizon
    }
    /// [`endpoint_lower_bound`](crate::endpoint_lower_bound) of the phase.
    pub fn endpoint_lower_bound(&self) -> u64 {
        self.endpoint_lower_bound
    }
    /// [`stronger_lower_bound`] of the phase.
    pub fn stronger_lower_bound(&self) -> u64 {
        self.stronger_lower_bound
    }
    /// [`multicast_lower_bound`](crate::multicast_lower_bound) of the phase (at least the stronger
    /// bound).
    pub fn multicast_lower_bound(&self) -> u64 {
        self.multicast_lower_bound
    }
    /// The kind kept.
    pub fn kind(&self) -> ScheduleKind {
        self.kind
    }
    /// Horizon of the ordinary schedule.
    pub fn ordinary_horizon(&self) -> u64 {
        self.ordinary_horizon
    }
    /// Horizon of the paired schedule, if one was built.
    pub fn paired_horizon(&self) -> Option<u64> {
        self.paired_horizon
    }
    /// Uninterrupted send segments in the kept schedule (a transfer sent in
    /// one piece counts once; each preemption or fanout split adds one).
    pub fn segments(&self) -> usize {
        self.segments
    }
    /// The encoded rows.
    pub fn rows(&self) -> &EncodedRows {
        &self.rows
    }
    /// The encoded rows, by value.
    pub fn into_rows(self) -> EncodedRows {
        self.rows
    }
}

/// A schedule before encoding.
struct Plan {
    kind: ScheduleKind,
    /// Send horizon (cycle after the last send).
    send_horizon: u64,
    activity: Activity,
    segments: usize,
    /// Whether the core scheduled every job.
    complete: bool,
    /// The core's output the activity came from.
    core: std::sync::Arc<CoreOutput>,
}

/// Schedules one phase and encodes its rows.
pub fn schedule(
    phase: &Phase,
    fabric: &Fabric,
    config: &ScheduleConfig,
) -> Result<Schedule, ScheduleError> {
    schedule_labeled(phase, fabric, config, config.phase_label, false)
}

/// [`schedule`] for a phase already validated.
pub fn schedule_valid(
    phase: ValidPhase<'_>,
    fabric: &Fabric,
    config: &ScheduleConfig,
) -> Result<Schedule, ScheduleError> {
    schedule_labeled(phase.phase(), fabric, config, config.phase_label, true)
}

/// Schedules many phases in parallel; the result is the same whatever the
/// thread count. The first error (by phase index) is returned.
pub fn schedule_phases(
    phases: &[Phase],
    fabric: &Fabric,
    config: &ScheduleConfig,
) -> Result<Vec<Schedule>, ScheduleError> {
    phases
        .par_iter()
        .enumerate()
        .map(|(i, p)| schedule_labeled(p, fabric, config, i as u32, false))
        .collect::<Vec<_>>()
        .into_iter()
        .collect()
}

/// Schedules `phase`, which was validated already when `valid` (the core
/// needs only the structural rules, so otherwise the overlap check runs
/// beside the planning).
fn schedule_labeled(
    phase: &Phase,
    fabric: &Fabric,
    config: &ScheduleConfig,
    label: u32,
    valid: bool,
) -> Result<Schedule, ScheduleError> {
    let invalid = |source| ScheduleError::Phase {
        phase: label,
        source,
    };
    if !valid {
        validate_structure(phase).map_err(invalid)?;
    }
    if phase.tile_count > fabric.tile_count() {
        return Err(ScheduleError::TileCount {
            phase: label,
            tile_count: phase.tile_count,
            fabric_tiles: fabric.tile_count(),
        });
    }
    let large = phase.transfers.len() >= config.large_phase_transfers;
    let loads = lane_loads(phase, fabric);
    let endpoint = loads.endpoint;
    let stronger = if phase.transfers.is_empty() {
        0
    } else {
        endpoint + u64::from(fabric.latency_cycles())
    };
    debug_assert_eq!(stronger, stronger_lower_bound(phase, fabric));
    if large {
        let fanout = phase
            .transfers
            .par_iter()
            .map(|t| t.destinations.len())
            .max()
            .unwrap_or(0);
        tracing::info!(
            phase = label,
            transfers = phase.transfers.len(),
            maximum_identical_destinations = fanout,
            "prepared large physical exchange phase"
        );
    }
    let candidates = phase
        .transfers
        .par_iter()
        .filter(|t| t.width == Width::Paired64)
        .count();
    let word32_only = candidates == 0;
    let want_paired = config.try_paired && !word32_only;
    let latency = u64::from(fabric.latency_cycles());
    // The overlap check and the multicast bound run beside the planning;
    // the check's verdict decides.
    let ((overlaps, multicast), (ordinary, paired)) = rayon::join(
        || {
            (
                if valid {
                    Ok(())
                } else {
                    validate_overlaps(phase)
                },
                multicast_bound_of(phase, fabric, &loads).max(stronger),
            )
        },
        || plans(phase, fabric, config, endpoint, word32_only, want_paired),
    );
    overlaps.map_err(invalid)?;
    let finish = |p: &Plan| {
        if p.send_horizon == 0 {
            0
        } else {
            p.send_horizon + latency
        }
    };
    let ordinary_horizon = finish(&ordinary);
    let paired_horizon = paired.as_ref().map(finish);
    let use_paired = paired_horizon.is_some_and(|p| p < ordinary_horizon);
    if want_paired {
        tracing::info!(
            phase = label,
            candidates,
            ordinary_horizon,
            paired_horizon = paired_horizon.unwrap_or(0),
            use_paired,
            "compared ordinary and paired exchange schedules"
        );
    }
    let kept = match paired {
        Some(p) if use_paired => p,
        _ => ordinary,
    };
    if !kept.complete {
        return Err(ScheduleError::Incomplete { phase: label });
    }
    let horizon = finish(&kept);
    if horizon > 1 << 40 {
        return Err(ScheduleError::TooLong {
            phase: label,
            horizon,
        });
    }
    if large {
        tracing::info!(
            phase = label,
            initial_horizon = ordinary_horizon,
            selected_horizon = horizon,
            endpoint_lower_bound = endpoint,
            lower_bound_gap = horizon.saturating_sub(endpoint),
            selected_kind = kept.kind.name(),
            neighborhood_improvements = 0u32,
            "optimized physical exchange schedule"
        );
    }
    let (rows, relocations) = encode_rows(phase, &kept.activity, fabric, config, label)?;
    if large {
        let (tile, bytes) = rows.largest_row().unwrap_or((TileId::from_u32(0), 0));
        tracing::info!(
            phase = label,
            tile = tile.as_u32(),
            row_words = bytes / 4,
            horizon,
            "finished large physical exchange phase"
        );
    }
    Ok(Schedule {
        horizon,
        endpoint_lower_bound: endpoint,
        stronger_lower_bound: stronger,
        multicast_lower_bound: multicast,
        kind: kept.kind,
        ordinary_horizon,
        paired_horizon,
        segments: kept.segments,
        rows,
        core: kept.core,
        relocations,
    })
}

/// The ordinary plan of `phase` and, when `want_paired`, the paired one:
/// every Paired64 transfer that can go wide, or the share that balances
/// each pair's lanes and ports (see `schedule/wide.rs`), whichever sends
/// sooner. The plans are made in parallel.
fn plans(
    phase: &Phase,
    fabric: &Fabric,
    config: &ScheduleConfig,
    endpoint: u64,
    word32_only: bool,
    want_paired: bool,
) -> (Plan, Option<Plan>) {
    if want_paired {
        // Every Paired64 transfer that can go wide, and the share
        // that balances each pair's lanes and ports (see
        // `schedule/wide.rs`); the shorter of the two is the paired
        // plan.
        let all: Vec<bool> = phase
            .transfers
            .iter()
            .map(|t| wide::goes_wide(t, phase.tile_count, fabric))
            .collect();
        let balanced = wide::balanced(phase, fabric);
        let (ordinary, (all, balanced)) = rayon::join(
            || plan(phase, fabric, config, endpoint, word32_only, None),
            || {
                rayon::join(
                    || plan(phase, fabric, config, endpoint, word32_only, Some(&all)),
                    || {
                        (balanced != all).then(|| {
                            plan(
                                phase,
                                fabric,
                                config,
                                endpoint,
                                word32_only,
                                Some(&balanced),
                            )
                        })
                    },
                )
            },
        );
        let paired = match balanced {
            Some(b) if b.send_horizon < all.send_horizon => b,
            _ => all,
        };
        (ordinary, Some(paired))
    } else {
        (
            plan(phase, fabric, config, endpoint, word32_only, None),
            None,
        )
    }
}

/// Per tile, where relocatable rows' address fields point.
type TileRelocations = std::sync::Arc<Vec<Vec<Relocation>>>;

/// Encodes every tile's row, with the rows' relocations when
/// `config.relocatable`, and checks the rows against `phase` when
/// `config.verify` is on.
fn encode_rows(
    phase: &Phase,
    activity: &Activity,
    fabric: &Fabric,
    config: &ScheduleConfig,
    label: u32,
) -> Result<(EncodedRows, Option<TileRelocations>), ScheduleError> {
    let latency = u64::from(fabric.latency_cycles());
    let (rows, relocations): (Vec<Vec<u32>>, Vec<Vec<Relocation>>) = (0..activity.tiles())
        .into_par_iter()
        .map(|t| {
            encode_tile(t, activity, latency, config.relocatable).map_err(|source| {
                ScheduleError::Encode {
                    phase: label,
                    tile: TileId::from_u32(t as u32),
                    source,
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip();
    let rows = EncodedRows::from_tile_rows(rows);
    verify_rows(phase, fabric, &rows, config, label)?;
    Ok((
        rows,
        config.relocatable.then(|| std::sync::Arc::new(relocations)),
    ))
}

/// Checks `rows` against `phase` when `config.verify` is on.
fn verify_rows(
    phase: &Phase,
    fabric: &Fabric,
    rows: &EncodedRows,
    config: &ScheduleConfig,
    label: u32,
) -> Result<(), ScheduleError> {
    if config.verify {
        crate::check::check_schedule(phase, fabric, rows).map_err(|errors| {
            ScheduleError::Check {
                phase: label,
                errors,
            }
        })?;
    }
    Ok(())
}
