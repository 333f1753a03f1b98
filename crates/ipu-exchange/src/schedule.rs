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
use smallvec::SmallVec;

use crate::bounds::{endpoint_lower_bound, multicast_lower_bound, stronger_lower_bound};
use crate::core::{self, CoreConfig, CoreOutput, Job};
use crate::encode::{EncodedRows, RecvPiece, SendPiece, TileActivity, encode_tile};
use crate::fabric::Fabric;
use crate::isa::EncodeError;
use crate::model::{Phase, PhaseError, Width, validate_overlaps, validate_structure};

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
    /// Whether multicast transfers may be split by fanout.
    pub fanout_split: bool,
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
    /// result before returning it (on by default in debug builds).
    pub verify: bool,
    /// Encode rows whose instruction choice does not depend on addresses:
    /// two transfers are never treated as contiguous in memory, even when
    /// their addresses are. Rows of the same phase with addresses moved
    /// (one repeat iteration and the next) then have the same length and
    /// differ only in address fields, so the next iteration's row is the
    /// first one plus per-word deltas. Costs a few more instructions.
    pub relocatable: bool,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            target_slack_ppm: 2000,
            path_search_limit: 512,
            fanout_split: true,
            fill_budget: 16,
            try_paired: true,
            large_phase_transfers: 1000,
            phase_label: 0,
            verify: cfg!(debug_assertions),
            relocatable: false,
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
}

impl Schedule {
    /// The same schedule — every segment at the same cycle — encoded for
    /// `phase`, which must be the scheduled phase with only its addresses
    /// changed (same transfers in the same order: sources, destination
    /// tiles, words, widths, gather lengths). Scheduling depends on the
    /// addresses only through the encoding, so this costs an encoding, not
    /// a schedule: a build uses it when placement moves data after the
    /// phases were scheduled, and for the next iteration of a repeat body.
    pub fn readdress(
        &self,
        phase: &Phase,
        fabric: &Fabric,
        config: &ScheduleConfig,
    ) -> Result<Schedule, ScheduleError> {
        let label = config.phase_label;
        let invalid = |source| ScheduleError::Phase {
            phase: label,
            source,
        };
        validate_structure(phase).map_err(invalid)?;
        validate_overlaps(phase).map_err(invalid)?;
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
            let wide = !job.extra_senders.is_empty();
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
        let latency = u64::from(fabric.latency_cycles());
        let mut activity = vec![TileActivity::default(); phase.tile_count as usize];
        add_activity(
            phase,
            &self.core,
            latency,
            config.relocatable,
            &mut activity,
        );
        let rows = encode_rows(phase, &activity, fabric, config, label)?;
        Ok(Schedule {
            rows,
            core: self.core.clone(),
            ..*self
        })
    }

    /// Cycles from the phase start until the last word is written.
    pub fn horizon(&self) -> u64 {
        self.horizon
    }
    /// [`endpoint_lower_bound`] of the phase.
    pub fn endpoint_lower_bound(&self) -> u64 {
        self.endpoint_lower_bound
    }
    /// [`stronger_lower_bound`] of the phase.
    pub fn stronger_lower_bound(&self) -> u64 {
        self.stronger_lower_bound
    }
    /// [`multicast_lower_bound`] of the phase (at least the stronger bound).
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

/// How a phase given to [`Schedule::readdress`] differs from the scheduled
/// one beyond its addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReaddressMismatch {
    /// The tile counts differ.
    #[error("it has {phase_tiles} tiles, the schedule {schedule_tiles}")]
    TileCount {
        /// Tiles of the phase given.
        phase_tiles: u32,
        /// Tiles of the scheduled phase.
        schedule_tiles: u32,
    },
    /// The phase has fewer transfers than the schedule moves.
    #[error("it has fewer transfers ({transfers}) than the scheduled phase")]
    FewerTransfers {
        /// Transfers of the phase given.
        transfers: usize,
    },
    /// A transfer's source, destination tiles or word count differ.
    #[error("its source, destination tiles or words differ")]
    Transfer,
    /// A transfer sent as 64-bit items is no longer a contiguous Paired64
    /// transfer.
    #[error("it was scheduled as 64-bit items but is no longer paired")]
    NoLongerPaired,
}

/// Why a phase could not be scheduled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The phase breaks a modelling rule.
    #[error("phase {phase}: {source}")]
    Phase {
        /// The phase number.
        phase: u32,
        /// What is wrong.
        source: PhaseError,
    },
    /// The phase has more tiles than the fabric.
    #[error(
        "phase {phase} has {tile_count} tiles but the fabric has {fabric_tiles}; build the phase for this device"
    )]
    TileCount {
        /// The phase number.
        phase: u32,
        /// The phase's tile count.
        tile_count: u32,
        /// The fabric's tile count.
        fabric_tiles: u32,
    },
    /// A row could not be encoded (a bug in this crate).
    #[error("phase {phase}, {tile}: {source}")]
    Encode {
        /// The phase number.
        phase: u32,
        /// The tile.
        tile: TileId,
        /// The encoder's complaint.
        source: EncodeError,
    },
    /// The scheduler lost track of a transfer (a bug in this crate).
    #[error("phase {phase}: the scheduler left transfers unscheduled (a bug in ipu-exchange)")]
    Incomplete {
        /// The phase number.
        phase: u32,
    },
    /// The checker rejected the rows (a bug in this crate); with
    /// `verify` on, nothing unchecked is returned.
    #[error(
        "phase {phase}: the checker rejects the encoded rows ({} errors, first: {}) (a bug in ipu-exchange)",
        errors.len(),
        errors.first().map(ToString::to_string).unwrap_or_default()
    )]
    Check {
        /// The phase number.
        phase: u32,
        /// Every error the checker found.
        errors: Vec<crate::check::ExchangeCheckError>,
    },
    /// [`Schedule::readdress`] was given a phase that is not the scheduled
    /// one with other addresses.
    #[error(
        "phase {phase}: cannot reuse the schedule{}: {reason}",
        transfer.map(|t| format!(" for transfer {t}")).unwrap_or_default()
    )]
    Readdress {
        /// The phase number.
        phase: u32,
        /// The first transfer that differs, if one does.
        transfer: Option<u32>,
        /// How it differs.
        #[source]
        reason: ReaddressMismatch,
    },
    /// A horizon does not fit the instruction set (more than 2^40 cycles).
    #[error("phase {phase} needs {horizon} cycles, more than rows can express; split the phase")]
    TooLong {
        /// The phase number.
        phase: u32,
        /// The horizon.
        horizon: u64,
    },
}

/// A schedule before encoding.
struct Plan {
    kind: ScheduleKind,
    /// Send horizon (cycle after the last send).
    send_horizon: u64,
    activity: Vec<TileActivity>,
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
    schedule_labeled(phase, fabric, config, config.phase_label)
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
        .map(|(i, p)| schedule_labeled(p, fabric, config, i as u32))
        .collect::<Vec<_>>()
        .into_iter()
        .collect()
}

fn schedule_labeled(
    phase: &Phase,
    fabric: &Fabric,
    config: &ScheduleConfig,
    label: u32,
) -> Result<Schedule, ScheduleError> {
    let invalid = |source| ScheduleError::Phase {
        phase: label,
        source,
    };
    validate_structure(phase).map_err(invalid)?;
    if phase.tile_count > fabric.tile_count() {
        return Err(ScheduleError::TileCount {
            phase: label,
            tile_count: phase.tile_count,
            fabric_tiles: fabric.tile_count(),
        });
    }
    let large = phase.transfers.len() >= config.large_phase_transfers;
    let endpoint = endpoint_lower_bound(phase, fabric);
    let stronger = if phase.transfers.is_empty() {
        0
    } else {
        endpoint + u64::from(fabric.latency_cycles())
    };
    debug_assert_eq!(stronger, stronger_lower_bound(phase, fabric));
    if large {
        let fanout = phase
            .transfers
            .iter()
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
        .iter()
        .filter(|t| t.width == Width::Paired64)
        .count();
    let want_paired = config.try_paired && candidates > 0;
    let latency = u64::from(fabric.latency_cycles());
    // The overlap check and the multicast bound run beside the planning;
    // the check's verdict decides.
    let ((overlaps, multicast), (ordinary, paired)) = rayon::join(
        || {
            (
                validate_overlaps(phase),
                multicast_lower_bound(phase, fabric).max(stronger),
            )
        },
        || {
            if want_paired {
                rayon::join(
                    || plan(phase, fabric, config, endpoint, false),
                    || Some(plan(phase, fabric, config, endpoint, true)),
                )
            } else {
                (plan(phase, fabric, config, endpoint, false), None)
            }
        },
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
    let rows = encode_rows(phase, &kept.activity, fabric, config, label)?;
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
    })
}

/// Encodes every tile's row, and checks the rows against `phase` when
/// `config.verify` is on.
fn encode_rows(
    phase: &Phase,
    activity: &[TileActivity],
    fabric: &Fabric,
    config: &ScheduleConfig,
    label: u32,
) -> Result<EncodedRows, ScheduleError> {
    let latency = u64::from(fabric.latency_cycles());
    let rows: Vec<Vec<u32>> = (0..activity.len())
        .into_par_iter()
        .map(|t| {
            encode_tile(t, activity, latency).map_err(|source| ScheduleError::Encode {
                phase: label,
                tile: TileId::from_u32(t as u32),
                source,
            })
        })
        .collect::<Result<_, _>>()?;
    let rows = EncodedRows::from_tile_rows(rows);
    if config.verify {
        crate::check::check_schedule(phase, fabric, &rows).map_err(|errors| {
            ScheduleError::Check {
                phase: label,
                errors,
            }
        })?;
    }
    Ok(rows)
}

/// Whether a transfer can go as 64-bit items in a phase of `tiles` tiles:
/// Paired64, every partner exists, and no two destinations share a pair.
fn goes_wide(t: &crate::model::Transfer, tiles: u32, fabric: &Fabric) -> bool {
    if t.width != Width::Paired64 || fabric.partner(t.source).as_u32() >= tiles {
        return false;
    }
    let mut pairs: SmallVec<[u32; 4]> = SmallVec::new();
    for &(d, _) in &t.destinations {
        let partner = fabric.partner(d).as_u32();
        if partner >= tiles {
            return false;
        }
        // A tile and its partner form one pair: both must not be
        // destinations, as the wide item occupies both receive ports.
        let pair = d.as_u32().min(partner);
        if pairs.contains(&pair) {
            return false;
        }
        pairs.push(pair);
    }
    true
}

fn plan(
    phase: &Phase,
    fabric: &Fabric,
    config: &ScheduleConfig,
    endpoint: u64,
    paired: bool,
) -> Plan {
    let latency = u64::from(fabric.latency_cycles());
    let tiles = phase.tile_count;
    let slack = |bound: u64| bound + bound * u64::from(config.target_slack_ppm) / 1_000_000;
    let core_config = |target| CoreConfig {
        target,
        path_search_limit: config.path_search_limit,
        fanout_split: config.fanout_split,
        fill_budget: config.fill_budget,
    };
    // A 64-bit job also occupies the partner's lane and each destination
    // partner's receive port.
    let make_job = |index: usize, wide: bool| {
        let t = &phase.transfers[index];
        let partner = |tile: TileId| fabric.partner(tile).as_u32();
        Job {
            sender: t.source.as_u32(),
            receivers: t.destinations.iter().map(|&(d, _)| d.as_u32()).collect(),
            extra_senders: if wide {
                smallvec::smallvec![partner(t.source)]
            } else {
                SmallVec::new()
            },
            extra_receivers: if wide {
                t.destinations.iter().map(|&(d, _)| partner(d)).collect()
            } else {
                SmallVec::new()
            },
            len: if wide { t.words / 2 } else { t.words },
            origin: index as u32,
            dests: (0..t.destinations.len() as u32).collect(),
        }
    };
    let mut activity = vec![TileActivity::default(); tiles as usize];
    let jobs: Vec<Job> = (0..phase.transfers.len())
        .into_par_iter()
        .map(|i| make_job(i, paired && goes_wide(&phase.transfers[i], tiles, fabric)))
        .collect();
    let jobs = if config.fanout_split {
        presplit(jobs, tiles as usize, endpoint)
    } else {
        jobs
    };
    let bound = job_bound(&jobs, tiles as usize).max(endpoint);
    let out = core::run(tiles as usize, jobs, core_config(slack(bound)));
    let segments = add_activity(phase, &out, latency, config.relocatable, &mut activity);
    let send_horizon = out.horizon;
    let complete = out.complete;
    Plan {
        kind: if paired {
            ScheduleKind::Paired
        } else {
            ScheduleKind::Ordinary
        },
        send_horizon,
        activity,
        segments,
        complete,
        core: std::sync::Arc::new(out),
    }
}

/// Multicasts up to this fanout may be split before scheduling (see
/// [`presplit`]). Wider ones are left to the core's fanout splitting: split
/// up front, their groups hold too much of the sender's spare time, and the
/// generated wide-multicast and reduce families get longer.
const PRESPLIT_MAX_FANOUT: usize = 16;

/// The share of a sender's spare lane time [`presplit`] may spend, in
/// percent. Measured on the generated multicast families: 80 and 85 give
/// the shortest phases; 50, 70 and 95 leave the fanout-16 family 4–11 %
/// longer (too little lets only pairs form, too much leaves the senders no
/// room for the core's own splits).
const PRESPLIT_BUDGET_PERCENT: u64 = 80;

/// Splits narrow multicast jobs into groups of receivers where their sender
/// has lane time to spare, before the core sees them.
///
/// A multicast starts only when its sender and every receiver are free at
/// once, and is never moved by the alternating paths that keep unicast
/// work at the bound; sending the same words to smaller groups (down to
/// single receivers, which are unicast jobs) costs the sender the words
/// once more per extra group. Each sender spends at most
/// [`PRESPLIT_BUDGET_PERCENT`] of its spare lane time (`bound` minus its
/// load) on this: all its multicast jobs of
/// fanout up to [`PRESPLIT_MAX_FANOUT`] get the smallest group size (1, 2,
/// 4, …) whose extra cost fits. Groups are runs of the job's receivers in
/// order, so the result depends only on the jobs.
fn presplit(jobs: Vec<Job>, nodes: usize, bound: u64) -> Vec<Job> {
    let splittable = |j: &Job| {
        (2..=PRESPLIT_MAX_FANOUT).contains(&j.receivers.len())
            && j.extra_senders.is_empty()
            && j.extra_receivers.is_empty()
    };
    let mut load = vec![0u64; nodes];
    // Per sender: (fanout, items) of its splittable multicast jobs.
    let mut multi: Vec<Vec<(u64, u64)>> = vec![Vec::new(); nodes];
    for j in &jobs {
        for &s in std::iter::once(&j.sender).chain(&j.extra_senders) {
            load[s as usize] += u64::from(j.len);
        }
        if splittable(j) {
            multi[j.sender as usize].push((j.receivers.len() as u64, u64::from(j.len)));
        }
    }
    let group: Vec<u64> = multi
        .iter()
        .zip(&load)
        .map(|(list, &own)| {
            let budget = bound.saturating_sub(own) * PRESPLIT_BUDGET_PERCENT / 100;
            let widest = list.iter().map(|&(f, _)| f).max().unwrap_or(1);
            let cost = |g: u64| -> u64 {
                list.iter()
                    .map(|&(f, w)| (f.div_ceil(g) - 1).saturating_mul(w))
                    .fold(0u64, u64::saturating_add)
            };
            let mut g = 1;
            while g < widest && cost(g) > budget {
                g *= 2;
            }
            g
        })
        .collect();
    let splits = |j: &Job| splittable(j) && j.receivers.len() as u64 > group[j.sender as usize];
    if !jobs.iter().any(splits) {
        return jobs;
    }
    let mut out = Vec::with_capacity(jobs.len());
    for job in jobs {
        if !splits(&job) {
            out.push(job);
            continue;
        }
        let g = group[job.sender as usize] as usize;
        for (receivers, dests) in job.receivers.chunks(g).zip(job.dests.chunks(g)) {
            out.push(Job {
                receivers: receivers.iter().copied().collect(),
                dests: dests.iter().copied().collect(),
                extra_senders: SmallVec::new(),
                extra_receivers: SmallVec::new(),
                ..job
            });
        }
    }
    out
}

/// The largest node load of a job set.
fn job_bound(jobs: &[Job], nodes: usize) -> u64 {
    let mut send = vec![0u64; nodes];
    let mut recv = vec![0u64; nodes];
    for j in jobs {
        for &s in std::iter::once(&j.sender).chain(&j.extra_senders) {
            send[s as usize] += u64::from(j.len);
        }
        for &r in j.receivers.iter().chain(&j.extra_receivers) {
            recv[r as usize] += u64::from(j.len);
        }
    }
    send.into_iter().chain(recv).max().unwrap_or(0)
}

/// (segment, end of the source's send before it — set on the segment's
/// first piece —, start of the source's send after it — set on its last).
type QuietMark = (u32, Option<Option<u64>>, Option<Option<u64>>);

/// Segment indices grouped by tile: `order[offsets[t]..offsets[t + 1]]`
/// are tile `t`'s, in segment order.
struct Grouped {
    offsets: Vec<usize>,
    order: Vec<u32>,
}

impl Grouped {
    /// Groups `items` (tile, payload) by tile with a counting sort, keeping
    /// their order within a tile.
    fn new(tiles: usize, items: impl Iterator<Item = (u32, u32)> + Clone) -> Grouped {
        let mut offsets = vec![0usize; tiles + 1];
        for (tile, _) in items.clone() {
            offsets[tile as usize + 1] += 1;
        }
        for t in 0..tiles {
            offsets[t + 1] += offsets[t];
        }
        let mut next = offsets.clone();
        let mut order = vec![0u32; offsets[tiles]];
        for (tile, payload) in items {
            let at = &mut next[tile as usize];
            order[*at] = payload;
            *at += 1;
        }
        Grouped { offsets, order }
    }

    fn of(&self, tile: usize) -> &[u32] {
        &self.order[self.offsets[tile]..self.offsets[tile + 1]]
    }
}

/// Turns core segments into per-tile pieces sorted by start; receive
/// pieces start `latency` cycles after their send. Returns the number of
/// segments.
///
/// Segments are grouped by sending and by receiving tile first (counting
/// sorts), so that each tile's pieces are built in parallel from its own
/// segments, reading the phase's transfers of that tile together; the
/// result does not depend on the thread count.
fn add_activity(
    phase: &Phase,
    out: &CoreOutput,
    latency: u64,
    relocatable: bool,
    activity: &mut [TileActivity],
) -> usize {
    // Structural addresses: each transfer's words in a space of their own,
    // so that pieces of different transfers are never adjacent (see
    // `ScheduleConfig::relocatable`); a gather's words, whose addresses are
    // arbitrary, each in a space of its own too.
    let structural =
        |origin: u32, word: u32| ((u128::from(origin) + 1) << 66) + 4 * u128::from(word);
    let scattered =
        |origin: u32, word: u32| ((u128::from(origin) + 1) << 66) + ((u128::from(word) + 1) << 34);
    let tiles = activity.len();
    let segments = &out.segments;
    let by_source = Grouped::new(
        tiles,
        segments
            .iter()
            .enumerate()
            .map(|(i, seg)| (out.jobs[seg.job as usize].sender, i as u32)),
    );
    // Per tile: its send pieces sorted by start, and per segment of the
    // tile the end of the tile's send before it and the start of the one
    // after it.
    let sends: Vec<(Vec<SendPiece>, Vec<QuietMark>)> = (0..tiles)
        .into_par_iter()
        .map(|tile| {
            let mut pieces: Vec<(SendPiece, u32)> = Vec::with_capacity(by_source.of(tile).len());
            for &index in by_source.of(tile) {
                let seg = &segments[index as usize];
                let job = &out.jobs[seg.job as usize];
                let t = &phase.transfers[job.origin as usize];
                let wide = !job.extra_senders.is_empty();
                let per = if wide { 2 } else { 1 };
                let first_word = seg.offset * per;
                let words = seg.len * per;
                // Source runs: contiguous pieces of the segment's words.
                let mut i = 0;
                while i < words {
                    let Some(address) = t.source_word_address(first_word + i) else {
                        break;
                    };
                    let mut n = if t.source_addresses.len() == 1 {
                        words - i
                    } else {
                        per
                    };
                    // A gather's runs depend on its addresses; relocatable
                    // rows send it word by word.
                    while !(relocatable && t.source_addresses.len() > 1)
                        && i + n < words
                        && t.source_word_address(first_word + i + n) == Some(address + 4 * n)
                    {
                        n += per;
                    }
                    let piece = SendPiece {
                        start: seg.start + u64::from(i / per),
                        items: n / per,
                        wide,
                        byte_address: address,
                        vaddr: if !relocatable {
                            u128::from(address)
                        } else if t.source_addresses.len() > 1 {
                            scattered(job.origin, first_word + i)
                        } else {
                            structural(job.origin, first_word + i)
                        },
                    };
                    pieces.push((piece, index));
                    i += n;
                }
            }
            pieces.sort_by_key(|(p, _)| p.start);
            let mut marks = Vec::with_capacity(by_source.of(tile).len());
            for (k, &(_, seg)) in pieces.iter().enumerate() {
                let first = k == 0 || pieces[k - 1].1 != seg;
                let last = pieces.get(k + 1).is_none_or(|n| n.1 != seg);
                if first {
                    let before = k
                        .checked_sub(1)
                        .map(|q| pieces[q].0.start + u64::from(pieces[q].0.items));
                    marks.push((seg, Some(before), None));
                }
                if last {
                    let after = pieces.get(k + 1).map(|n| n.0.start);
                    marks.push((seg, None, Some(after)));
                }
            }
            (pieces.into_iter().map(|(p, _)| p).collect(), marks)
        })
        .collect();
    // Per segment: the end of its source's previous send and the start of
    // its next one.
    let mut before = vec![None; segments.len()];
    let mut after = vec![None; segments.len()];
    for (_, marks) in &sends {
        for &(seg, b, a) in marks {
            if let Some(b) = b {
                before[seg as usize] = b;
            }
            if let Some(a) = a {
                after[seg as usize] = a;
            }
        }
    }
    // Receive pieces, grouped by receiving tile. One pass over the
    // segments (in parallel, in order) reads each job and transfer once and
    // lists (segment, receiving tile, destination byte address); a
    // broadcast's hundreds of receivers then read only this list.
    let receptions: Vec<(u32, u32, u32)> = segments
        .par_iter()
        .enumerate()
        .flat_map_iter(|(i, seg)| {
            let job = &out.jobs[seg.job as usize];
            let t = &phase.transfers[job.origin as usize];
            job.dests.iter().map(move |&k| {
                let (d, address) = t.destinations[k as usize];
                (i as u32, d.as_u32(), address)
            })
        })
        .collect();
    // Per segment: what a receive piece needs of it besides its address.
    let info: Vec<(u32, bool, u32)> = segments
        .par_iter()
        .map(|seg| {
            let job = &out.jobs[seg.job as usize];
            let wide = !job.extra_senders.is_empty();
            (job.origin, wide, job.sender)
        })
        .collect();
    let by_dest = Grouped::new(
        tiles,
        receptions
            .iter()
            .enumerate()
            .map(|(p, &(_, d, _))| (d, p as u32)),
    );
    let recvs: Vec<Vec<RecvPiece>> = (0..tiles)
        .into_par_iter()
        .map(|tile| {
            let mut pieces: Vec<RecvPiece> = by_dest
                .of(tile)
                .iter()
                .map(|&p| {
                    let (index, _, address) = receptions[p as usize];
                    let seg = &segments[index as usize];
                    let (origin, wide, source) = info[index as usize];
                    let first_word = seg.offset * if wide { 2 } else { 1 };
                    RecvPiece {
                        start: seg.start + latency,
                        items: seg.len,
                        wide,
                        source,
                        byte_address: address + 4 * first_word,
                        vaddr: if relocatable {
                            structural(origin, first_word)
                        } else {
                            u128::from(address + 4 * first_word)
                        },
                        source_quiet_from: before[index as usize],
                        source_next_send: after[index as usize],
                    }
                })
                .collect();
            pieces.sort_by_key(|p| p.start);
            pieces
        })
        .collect();
    for ((a, (s, _)), r) in activity.iter_mut().zip(sends).zip(recvs) {
        a.sends = s;
        a.recvs = r;
    }
    segments.len()
}
