//! Planning one schedule of a phase: transfers become core jobs (32-bit
//! words, or 64-bit items that also hold the partner tiles), narrow
//! multicasts are presplit where the sender has lane time to spare, and the
//! core's segments become per-tile activity.

use ipu_layout::TileId;
use rayon::prelude::*;

use super::sets::schedule_by_sets;
use super::{Plan, ScheduleConfig, ScheduleKind, add_activity};
use crate::core::{self, CoreConfig, Job, Partners};
use crate::fabric::Fabric;
use crate::model::Phase;

/// One plan of `phase`, whose endpoint bound is `endpoint`; `word32_only`
/// says it has no Paired64 transfer, and `wide` (a paired plan) which
/// transfers go as 64-bit items.
pub(super) fn plan(
    phase: &Phase,
    fabric: &Fabric,
    config: &ScheduleConfig,
    endpoint: u64,
    word32_only: bool,
    wide: Option<&[bool]>,
) -> Plan {
    let paired = wide.is_some();
    let latency = u64::from(fabric.latency_cycles());
    let tiles = phase.tile_count;
    let slack = |bound: u64| bound + bound * u64::from(config.target_slack_ppm) / 1_000_000;
    let core_config = |target| CoreConfig {
        target,
        path_search_limit: config.path_search_limit,
        fanout_split: config.fanout_split,
        fill_budget: config.fill_budget,
        split_jobs: config.split_jobs,
    };
    // A 64-bit job also occupies the partner's lane and each destination
    // partner's receive port.
    let make_job = |index: usize, wide: bool| {
        let t = &phase.transfers[index];
        let partner = |tile: TileId| fabric.partner(tile).as_u32();
        Job {
            sender: t.source.as_u32(),
            receivers: match t.destinations.as_slice() {
                // Most transfers have one destination: no collecting.
                &[(d, _)] => smallvec::smallvec![d.as_u32()],
                all => all.iter().map(|&(d, _)| d.as_u32()).collect(),
            },
            paired: wide.then(|| {
                Box::new(Partners {
                    sender: partner(t.source),
                    receivers: t.destinations.iter().map(|&(d, _)| partner(d)).collect(),
                })
            }),
            len: if wide { t.words / 2 } else { t.words },
            origin: index as u32,
            dests: match t.destinations.len() {
                1 => smallvec::smallvec![0],
                n => (0..n as u32).collect(),
            },
        }
    };
    let jobs: Vec<Job> = (0..phase.transfers.len())
        .into_par_iter()
        .map(|i| make_job(i, wide.is_some_and(|w| w[i])))
        .collect();
    // Where multicasts to a few receiver sets carry most of the phase, a
    // schedule by receiver sets is built first, from the jobs as they are
    // (splitting narrow multicasts into groups would only blur the sets),
    // and the shorter of it and the core's is kept (the core's on a tie).
    let presplit_and_run = |jobs: Vec<Job>| {
        let (jobs, split) = presplit(
            jobs,
            tiles as usize,
            endpoint,
            config.presplit_max_fanout as usize,
        );
        // In a phase of Word32 transfers only, the jobs as made load each
        // node with the words its tile sends or receives, whose largest is
        // `endpoint` (a pair's bound, half the words of both, is never
        // more); split jobs load a sender more, and Paired64 words count
        // half in the endpoint bound.
        let bound = if split || !word32_only {
            job_bound(&jobs, tiles as usize).max(endpoint)
        } else {
            endpoint
        };
        core::run_split(tiles as usize, jobs, bound, core_config(slack(bound)))
    };
    // The schedule by receiver sets costs a fraction of the core's on these
    // phases (SigLIP b2's attention and GEMM operand steps), even built
    // twice; when it is already within `SETS_ACCEPT_PPM` of the bound, the
    // core is not run.
    let by_sets = (!paired && config.receiver_sets)
        .then(|| schedule_by_sets(&jobs, tiles as usize))
        .flatten();
    let accept = endpoint + endpoint * SETS_ACCEPT_PPM / 1_000_000;
    let out = match by_sets {
        Some(s) if s.horizon <= accept => {
            tracing::debug!(
                phase = config.phase_label,
                sets_horizon = s.horizon,
                "kept the schedule by receiver sets, within its acceptance of the bound"
            );
            s.into_output(jobs)
        }
        Some(s) => {
            // The core presplits its own copy: the sets schedule's
            // segments index these jobs.
            let core = presplit_and_run(jobs.clone());
            if s.horizon < core.horizon {
                tracing::debug!(
                    phase = config.phase_label,
                    core_horizon = core.horizon,
                    sets_horizon = s.horizon,
                    "kept the schedule by receiver sets"
                );
                s.into_output(jobs)
            } else {
                core
            }
        }
        None => presplit_and_run(jobs),
    };
    let activity = add_activity(phase, &out, latency, config.relocatable);
    let segments = out.segments.len();
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

/// The default [`ScheduleConfig::presplit_max_fanout`]: multicasts up to
/// this fanout may be split before scheduling (see [`presplit`]). Wider
/// ones are left to the core's fanout splitting: split up front, their
/// groups hold too much of the sender's spare time, and the generated
/// wide-multicast and reduce families get longer.
pub(super) const PRESPLIT_MAX_FANOUT: u32 = 16;

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
/// load) on this: all its multicast jobs of fanout up to `max_fanout` get
/// the smallest group size (1, 2, 4, …) whose extra cost fits. Groups are
/// runs of the job's receivers in order, so the result depends only on the
/// jobs. Also says whether any job was split.
fn presplit(jobs: Vec<Job>, nodes: usize, bound: u64, max_fanout: usize) -> (Vec<Job>, bool) {
    if max_fanout < 2 {
        return (jobs, false);
    }
    let splittable = |j: &Job| (2..=max_fanout).contains(&j.receivers.len()) && j.paired.is_none();
    // A unicast phase has nothing to split: one parallel look, not the
    // sequential passes below.
    if !jobs.par_iter().any(splittable) {
        return (jobs, false);
    }
    let mut load = vec![0u64; nodes];
    // Per sender: (fanout, items) of its splittable multicast jobs.
    let mut multi: Vec<Vec<(u64, u64)>> = vec![Vec::new(); nodes];
    for j in &jobs {
        for &s in std::iter::once(&j.sender).chain(j.extra_senders()) {
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
        return (jobs, false);
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
                paired: None,
                ..job
            });
        }
    }
    (out, true)
}

/// The largest node load of a job set.
fn job_bound(jobs: &[Job], nodes: usize) -> u64 {
    // Per-thread load tables summed at the end: the same sums whatever the
    // thread count.
    let (send, recv) = jobs
        .par_iter()
        .fold(
            || (vec![0u64; nodes], vec![0u64; nodes]),
            |(mut send, mut recv), j| {
                for &s in std::iter::once(&j.sender).chain(j.extra_senders()) {
                    send[s as usize] += u64::from(j.len);
                }
                for &r in j.receivers.iter().chain(j.extra_receivers()) {
                    recv[r as usize] += u64::from(j.len);
                }
                (send, recv)
            },
        )
        .reduce(
            || (vec![0u64; nodes], vec![0u64; nodes]),
            |(mut send, mut recv), (s, r)| {
                send.iter_mut().zip(s).for_each(|(a, b)| *a += b);
                recv.iter_mut().zip(r).for_each(|(a, b)| *a += b);
                (send, recv)
            },
        );
    send.into_iter().chain(recv).max().unwrap_or(0)
}

/// How far above the endpoint bound (in parts per million of it) a
/// schedule by receiver sets may end for the core not to be run. Measured
/// on SigLIP b2's phases, where the core ends 0.2–1.5 % above the bound on
/// the phases the sets schedule finishes within 0.5 %.
const SETS_ACCEPT_PPM: u64 = 5_000;
