//! A schedule built around receiver sets, for phases whose multicasts go to
//! a few groups of tiles that overlap in a grid (a GEMM's row blocks and
//! column blocks, attention's blocks).
//!
//! The event core starts a multicast only when all its receivers are free
//! at once. On such phases nearly every receiver is within 1 % of the
//! bound, and receivers that sit in a row group and a column group wait for
//! each other at every switch between the two. Yet a schedule at the
//! receive bound exists when the groups form two families of disjoint sets
//! (call them rows and columns): every row active from cycle 0 for its
//! items, every column active up to the horizon `H` for its items. A row
//! and a column meeting at receiver `r` overlap only if their items exceed
//! `H`, which is at least `r`'s load.
//!
//! So: sets (distinct receiver lists; a unicast job's set is its one
//! receiver) are coloured greedily, largest first, into classes of
//! pairwise disjoint sets. Class 0 is placed from cycle 0, class 1 against
//! the horizon (and then the other way round; the shorter schedule is
//! kept), the others in the earliest windows all their receivers
//! leave free; cycles no set holds are spare windows for the sets whose
//! receivers they are. Each set owns its receivers in its windows; its
//! senders take turns in them (a free sender with the most work left goes
//! first, and sets with fewer senders choose first), one job at a time,
//! cut at window ends. Work a set could not place in its windows (its
//! senders were busy elsewhere) goes to the earliest holes its sender and
//! receivers all share. Every segment is valid by construction; the caller
//! keeps this schedule where it is shorter than the core's or close enough
//! to the bound that the core is not run, and the checker reads the rows
//! either way.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use ipu_layout::hash::FoldBuildHasher;
use rayon::prelude::*;
use smallvec::SmallVec;

use crate::core::{CoreOutput, Job, Segment};

/// Work the schedule by receiver sets may do per job (events, and busy
/// intervals merged for leftovers) before it gives up, plus a fixed
/// allowance: SigLIP b2's GEMM and attention phases take 1.0–5.5 per job.
const WORK_PER_JOB: usize = 64;

/// See [`schedule_by_sets`]: SigLIP b2's GEMM and attention phases have
/// 23–218 jobs per receiver set; the generated wide-multicast families
/// about one.
const MIN_JOBS_PER_SET: usize = 8;

/// Whether multicast jobs carry at least half the items received.
fn multicast_carried(jobs: &[Job]) -> bool {
    let (received, multicast) = jobs
        .par_iter()
        .map(|j| {
            let items = u64::from(j.len) * j.receivers.len() as u64;
            (items, if j.receivers.len() > 1 { items } else { 0 })
        })
        .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    multicast * 2 >= received
}

/// A schedule by receiver sets: segments of the jobs it was given.
pub(super) struct SetsSchedule {
    /// Segments in emission order.
    pub segments: Vec<Segment>,
    /// Cycle after the last segment.
    pub horizon: u64,
}

impl SetsSchedule {
    /// The schedule as the core's output, with `jobs` (the ones it was
    /// built from, moved rather than copied: at SigLIP scale a copy of the
    /// jobs cost more than a tenth of the schedule).
    pub(super) fn into_output(self, jobs: Vec<Job>) -> CoreOutput {
        CoreOutput {
            jobs,
            segments: self.segments,
            horizon: self.horizon,
            complete: true,
        }
    }
}

/// One receiver set and its work.
struct Set {
    receivers: SmallVec<[u32; 2]>,
    items: u64,
    /// (sender, its jobs to this set in job order), by sender.
    senders: Vec<(u32, Vec<u32>)>,
    /// Windows the set owns its receivers in, by start.
    windows: Vec<(u64, u64)>,
}

/// Schedules `jobs` (32-bit items, no partner nodes) by receiver sets; see
/// the module docs. `None` when a job has partner nodes, when the phase is
/// not one for it (multicast jobs carry less than half the items received,
/// or there are fewer than [`MIN_JOBS_PER_SET`] jobs per receiver set:
/// unicast-heavy phases are the core's, which reaches their bound, and
/// phases of many distinct sets have no grid to exploit), or when the
/// schedule would cost more than [`WORK_PER_JOB`] steps per job (many sets
/// waiting on one sender, or leftovers with long busy lists: shapes the
/// core handles anyway).
pub(super) fn schedule_by_sets(jobs: &[Job], nodes: usize) -> Option<SetsSchedule> {
    if jobs.par_iter().any(|j| j.paired.is_some()) {
        return None;
    }
    if !multicast_carried(jobs) {
        return None;
    }
    let mut sets = collect_sets(jobs);
    if sets.len().saturating_mul(MIN_JOBS_PER_SET) > jobs.len() {
        return None;
    }
    let mut load = vec![0u64; nodes];
    for set in &sets {
        for &r in &set.receivers {
            load[r as usize] += set.items;
        }
    }
    let horizon = load.iter().copied().max().unwrap_or(0);
    // Which family starts at cycle 0 and which ends at the horizon matters
    // to the senders (their work in each family meets in other windows):
    // both ways are tried, and the shorter kept (the first on a tie).
    // Measured on SigLIP b2: `gemm enc0.fc2` 20,268 one way and 20,188 the
    // other, `gemm enc0.out` 8,178 and 8,172.
    // A first schedule that ends at the busiest node's load cannot be
    // bettered, and the second is not built (on SigLIP b2: `gemm
    // embed.y`, `enc0.qkv`, `head.kv` and three small head steps).
    let mut sender_load = vec![0u64; nodes];
    for j in jobs {
        sender_load[j.sender as usize] += u64::from(j.len);
    }
    let bound = sender_load.into_iter().max().unwrap_or(0).max(horizon);
    place_windows(&mut sets, nodes, horizon, false);
    let first = fill_windows(jobs, &sets, nodes);
    if first.as_ref().is_some_and(|a| a.horizon <= bound) {
        return first;
    }
    place_windows(&mut sets, nodes, horizon, true);
    let second = fill_windows(jobs, &sets, nodes);
    match (first, second) {
        (Some(a), Some(b)) if b.horizon < a.horizon => Some(b),
        (Some(a), _) => Some(a),
        (None, b) => b,
    }
}

/// Distinct receiver sets with their jobs, largest first (then by
/// receivers), so that everything after depends only on the jobs.
///
/// A job's receivers are sorted into scratch and looked up by slice, so
/// that only a new set allocates; each set's senders are grouped by one
/// sort of (set, sender, job) afterwards rather than a search of the set's
/// senders per job (GEMM steps have sets of 100–160 senders).
fn collect_sets(jobs: &[Job]) -> Vec<Set> {
    let mut index: HashMap<SmallVec<[u32; 2]>, u32, FoldBuildHasher> = HashMap::default();
    let mut sets: Vec<Set> = Vec::new();
    let mut scratch: Vec<u32> = Vec::new();
    let mut members: Vec<(u32, u32, u32)> = Vec::with_capacity(jobs.len());
    for (j, job) in jobs.iter().enumerate() {
        scratch.clear();
        scratch.extend_from_slice(&job.receivers);
        scratch.sort_unstable();
        let at = match index.get(scratch.as_slice()) {
            Some(&at) => at,
            None => {
                let at = sets.len() as u32;
                let receivers: SmallVec<[u32; 2]> = SmallVec::from_slice(&scratch);
                index.insert(receivers.clone(), at);
                sets.push(Set {
                    receivers,
                    items: 0,
                    senders: Vec::new(),
                    windows: Vec::new(),
                });
                at
            }
        };
        sets[at as usize].items += u64::from(job.len);
        members.push((at, job.sender, j as u32));
    }
    // Job order within a sender's list, senders by node.
    members.sort_unstable();
    for (at, sender, j) in members {
        let set = &mut sets[at as usize];
        match set.senders.last_mut() {
            Some((s, list)) if *s == sender => list.push(j),
            _ => set.senders.push((sender, vec![j])),
        }
    }
    sets.sort_by(|a, b| {
        b.items
            .cmp(&a.items)
            .then_with(|| a.receivers.cmp(&b.receivers))
    });
    sets
}

/// Gives every set windows of `items` cycles in total in which no other set
/// holds any of its receivers: class 0 from cycle 0 (with `flip`, class 1),
/// the other of the two against
/// `horizon`, later classes in the earliest common gaps (past `horizon`
/// when the gaps are too short).
fn place_windows(sets: &mut [Set], nodes: usize, horizon: u64, flip: bool) {
    let mut class_of: Vec<SmallVec<[u32; 4]>> = vec![SmallVec::new(); nodes];
    // Per receiver: the windows of its sets so far, unsorted.
    let mut held: Vec<Vec<(u64, u64)>> = vec![Vec::new(); nodes];
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for set in sets.iter_mut() {
        let mut class = 0;
        while set
            .receivers
            .iter()
            .any(|&r| class_of[r as usize].contains(&class))
        {
            class += 1;
        }
        for &r in &set.receivers {
            class_of[r as usize].push(class);
        }
        set.windows = match class {
            c if c < 2 && (c == 1) == flip => vec![(0, set.items)],
            c if c < 2 && set.items <= horizon => vec![(horizon - set.items, horizon)],
            _ => {
                busy.clear();
                for &r in &set.receivers {
                    busy.extend_from_slice(&held[r as usize]);
                }
                gaps(&mut busy, set.items)
            }
        };
        for &r in &set.receivers {
            held[r as usize].extend_from_slice(&set.windows);
        }
    }
    // Cycles where all of a set's receivers are held by no set are spare
    // room for it: a set whose senders were busy for a while catches up
    // there instead of after everything. Sets take them in order, largest
    // first, each what the ones before left.
    let end = sets
        .iter()
        .filter_map(|s| s.windows.last())
        .map(|w| w.1)
        .max()
        .unwrap_or(0);
    for set in sets.iter_mut() {
        busy.clear();
        for &r in &set.receivers {
            busy.extend_from_slice(&held[r as usize]);
        }
        let spare = free_within(&mut busy, end);
        if spare.is_empty() {
            continue;
        }
        for &r in &set.receivers {
            held[r as usize].extend_from_slice(&spare);
        }
        set.windows.extend(spare);
        set.windows.sort_unstable();
    }
}

/// The parts of `0..end` outside the `busy` intervals (sorted here).
fn free_within(busy: &mut [(u64, u64)], end: u64) -> Vec<(u64, u64)> {
    busy.sort_unstable();
    let mut out = Vec::new();
    let mut at = 0u64;
    for &(s, e) in busy.iter() {
        if s > at {
            out.push((at, s.min(end)));
        }
        at = at.max(e);
        if at >= end {
            break;
        }
    }
    if at < end {
        out.push((at, end));
    }
    out.retain(|w| w.0 < w.1);
    out
}

/// The earliest windows of `items` cycles in total outside the `busy`
/// intervals (sorted here), the last one open-ended past them if needed.
fn gaps(busy: &mut [(u64, u64)], items: u64) -> Vec<(u64, u64)> {
    busy.sort_unstable();
    let mut out = Vec::new();
    let mut need = items;
    let mut at = 0u64;
    for &(s, e) in busy.iter() {
        if need == 0 {
            break;
        }
        if s > at {
            let take = need.min(s - at);
            out.push((at, at + take));
            need -= take;
        }
        at = at.max(e);
    }
    if need > 0 {
        out.push((at, at + need));
    }
    out
}

/// Per job: items not yet sent.
struct Progress {
    left: Vec<u32>,
    done: Vec<u32>,
}

/// Senders take turns in their sets' windows; what does not fit goes after.
fn fill_windows(jobs: &[Job], sets: &[Set], nodes: usize) -> Option<SetsSchedule> {
    let mut work = jobs
        .len()
        .saturating_mul(WORK_PER_JOB)
        .saturating_add(1 << 20);
    let mut progress = Progress {
        left: jobs.iter().map(|j| j.len).collect(),
        done: vec![0; jobs.len()],
    };
    let mut sender_left = vec![0u64; nodes];
    for j in jobs {
        sender_left[j.sender as usize] += u64::from(j.len);
    }
    let mut sender_free = vec![0u64; nodes];
    // Per set: the current window and, per sender, the first job not done.
    let mut window = vec![0usize; sets.len()];
    let mut next_job: Vec<Vec<usize>> = sets.iter().map(|s| vec![0; s.senders.len()]).collect();

    let mut segments: Vec<Segment> = Vec::with_capacity(jobs.len() + jobs.len() / 4);
    // Sets wanting senders at the same cycle are served fewest senders
    // first: a set with one sender has no other choice.
    let mut by_choice: Vec<u32> = (0..sets.len() as u32).collect();
    by_choice.sort_by_key(|&i| (sets[i as usize].senders.len(), i));
    let mut turn = vec![0u32; sets.len()];
    for (k, &i) in by_choice.iter().enumerate() {
        turn[i as usize] = k as u32;
    }
    let mut events: BinaryHeap<Reverse<(u64, u32)>> = sets
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.windows.first().map(|w| Reverse((w.0, turn[i]))))
        .collect();
    while let Some(Reverse((t, place))) = events.pop() {
        work = work.checked_sub(1)?;
        let i = by_choice[place as usize];
        let set = &sets[i as usize];
        let w = &mut window[i as usize];
        while set.windows.get(*w).is_some_and(|x| x.1 <= t) {
            *w += 1;
        }
        let Some(&(w_start, w_end)) = set.windows.get(*w) else {
            continue;
        };
        if t < w_start {
            events.push(Reverse((w_start, place)));
            continue;
        }
        // A free sender with work for this set, the one with most work left.
        let mut choice: Option<(u64, usize)> = None;
        let mut wake = u64::MAX;
        for (k, (s, list)) in set.senders.iter().enumerate() {
            if next_job[i as usize][k] >= list.len() {
                continue;
            }
            let s = *s as usize;
            if sender_free[s] > t {
                wake = wake.min(sender_free[s]);
                continue;
            }
            // Measured on SigLIP b2's phases: the sender's work left
            // overall, not its work left for this set, keeps the senders
            // that are everyone's bottleneck busy (ranking by work for the
            // set left 12–45 times more items over).
            if choice.is_none_or(|(best, _)| sender_left[s] > best) {
                choice = Some((sender_left[s], k));
            }
        }
        let Some((_, k)) = choice else {
            if wake != u64::MAX {
                events.push(Reverse((wake, place)));
            }
            continue;
        };
        let (s, list) = &set.senders[k];
        let j = list[next_job[i as usize][k]] as usize;
        let len = u64::from(progress.left[j]).min(w_end - t);
        // Window lengths and job lengths are u32-bounded items.
        let len32 = len as u32;
        segments.push(Segment {
            job: j as u32,
            start: t,
            len: len32,
            offset: progress.done[j],
        });
        progress.left[j] -= len32;
        progress.done[j] += len32;
        if progress.left[j] == 0 {
            next_job[i as usize][k] += 1;
        }
        sender_free[*s as usize] = t + len;
        sender_left[*s as usize] -= len;
        events.push(Reverse((t + len, place)));
    }
    // Work left over goes to the earliest cycles its sender and all its
    // receivers are free (holes other sets left, or after everything),
    // split where the holes are.
    let left_jobs: Vec<usize> = sets
        .iter()
        .flat_map(|set| set.senders.iter().flat_map(|(_, list)| list.iter()))
        .map(|&j| j as usize)
        .filter(|&j| progress.left[j] > 0)
        .collect();
    if !left_jobs.is_empty() {
        // Busy intervals of the nodes those jobs use, per side.
        const UNUSED: u32 = u32::MAX;
        let mut slot = [vec![UNUSED; nodes], vec![UNUSED; nodes]];
        let mut busy: Vec<Vec<(u64, u64)>> = Vec::new();
        for &j in &left_jobs {
            let job = &jobs[j];
            let ends =
                std::iter::once((0, job.sender)).chain(job.receivers.iter().map(|&r| (1, r)));
            for (side, v) in ends {
                if slot[side][v as usize] == UNUSED {
                    slot[side][v as usize] = busy.len() as u32;
                    busy.push(Vec::new());
                }
            }
        }
        for seg in &segments {
            let job = &jobs[seg.job as usize];
            let span = (seg.start, seg.start + u64::from(seg.len));
            let ends =
                std::iter::once((0, job.sender)).chain(job.receivers.iter().map(|&r| (1, r)));
            for (side, v) in ends {
                let at = slot[side][v as usize];
                if at != UNUSED {
                    busy[at as usize].push(span);
                }
            }
        }
        let mut union: Vec<(u64, u64)> = Vec::new();
        for j in left_jobs {
            let job = &jobs[j];
            let ends: SmallVec<[usize; 8]> = std::iter::once((0, job.sender))
                .chain(job.receivers.iter().map(|&r| (1, r)))
                .map(|(side, v)| slot[side][v as usize] as usize)
                .collect();
            union.clear();
            for &at in &ends {
                work = work.checked_sub(busy[at].len())?;
                union.extend_from_slice(&busy[at]);
            }
            for (start, end) in gaps(&mut union, u64::from(progress.left[j])) {
                // A hole is at most the job's items long.
                let len = (end - start) as u32;
                segments.push(Segment {
                    job: j as u32,
                    start,
                    len,
                    offset: progress.done[j],
                });
                progress.done[j] += len;
                for &at in &ends {
                    busy[at].push((start, end));
                }
            }
            progress.left[j] = 0;
        }
    }
    let horizon = segments
        .iter()
        .map(|s| s.start + u64::from(s.len))
        .max()
        .unwrap_or(0);
    Some(SetsSchedule { segments, horizon })
}
