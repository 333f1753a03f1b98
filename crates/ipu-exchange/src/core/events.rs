//! The event loop of the core scheduler: per-job running state, the
//! critical and free node queues and the keys they sort by, and [`Core`],
//! which starts, stops and repairs jobs event by event (see the parent
//! module for the method).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rayon::prelude::*;
use smallvec::SmallVec;

use super::pairs::PairIndex;
use super::{CoreConfig, Job, Pick, Segment};
use crate::grouped::Grouped;

/// The scheduler's per-job state: for a pair, that of its current pick.
#[derive(Clone, Copy, Debug)]
pub(super) struct JobRt {
    pub(super) since: u64,
    pub(super) rem: u32,
    pub(super) offset: u32,
    pub(super) version: u32,
    pub(super) sender: u32,
    /// For a pair: where its next pick is in `Core::later_picks`, or
    /// `NO_PICK` when the current one is its last. For any other job (ids
    /// from `Core::first_own` on): the index, in its receivers, of the
    /// receiver last found busy. One field serves both, so that the state
    /// of a job fits 40 bytes rather than 48: the core reads it at random
    /// on every start, so a smaller state is measurably faster on the
    /// seed-shaped phase (`cargo bench -p ipu-exchange`).
    pub(super) index: u32,
    /// For a pair: its receiver. For any other job: the node of the
    /// receiver `index` names (`receivers[index % receivers.len()]`, or
    /// `MULTI` when it has none), kept here so that a look at a blocked
    /// multicast job does not touch the job list (a cache miss per look on
    /// wide phases).
    pub(super) node: u32,
    /// The job's id in [`RunOutput`]'s numbering, which its segments carry.
    pub(super) out: u32,
    pub(super) state: State,
}

const _: () = assert!(std::mem::size_of::<JobRt>() == 40);

/// `JobRt::index` of a pair with no pick after the current one.
pub(super) const NO_PICK: u32 = u32::MAX;

/// A pick of a pair after its first (whose own fields are in the pair's
/// [`JobRt`] from the start).
#[derive(Clone, Copy, Debug)]
pub(super) struct LaterPick {
    /// The caller's job, the id its segments carry.
    pub(super) out: u32,
    pub(super) first: u32,
    pub(super) items: u32,
    /// Whether it is the pair's last pick.
    pub(super) last: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    Pending,
    Active,
    Done,
}

/// How many times a multicast part's items its sender must have to spare
/// for a free node that is not critical to split the job (a critical node
/// splits whenever the sender can afford the part once).
///
/// Without such splits a wide multicast starts whole only while all its
/// receivers happen to be free, so receivers sit idle until they become
/// critical; then every receiver splits at once, each part costing its
/// sender a send, and near the end a critical receiver finds every one of
/// its remaining senders busy (the target grows by one cycle at a time,
/// 550 times on multicast-400-2000). Measured on the wide-multicast
/// families and two other draws of them (`cargo xtask exchange
/// --families`): Σ horizon / Σ endpoint bound 1.0178, 1.0193, 1.0203 with
/// no fill splits; 1.0064, 1.0087, 1.0080 at 8; 1.0073, 1.0107, 1.0096 at
/// 16; 1.0079 at 4 and 1.0097 at 64 on the first. The other families are
/// within 0.07 % of their figures without.
pub(super) const FILL_SPLIT_SLACK: u64 = 8;

/// Partner marker of a multicast job in a sender's adjacency.
pub(super) const MULTI: u32 = u32::MAX;

pub(super) const SEND: usize = 0;
pub(super) const RECV: usize = 1;

pub(super) struct Core {
    /// The jobs that are not a single pair, and the parts split off them:
    /// core job `first_own + k` is `own[k]`. A pair needs no copy: its
    /// running state holds its two nodes.
    pub(super) own: Vec<Job>,
    /// Core id of `own[0]`: the number of unicast pairs, which come first.
    pub(super) first_own: usize,
    /// The picks of pairs after each one's first, by pair.
    pub(super) later_picks: Vec<LaterPick>,
    /// Jobs in the caller's list: `RunOutput` numbers own jobs from here.
    pub(super) caller_jobs: u32,
    /// Per job: its running state, kept together for locality.
    pub(super) rt: Vec<JobRt>,
    /// Per side, per node: the jobs the unicast bit sets do not cover
    /// (multicast jobs and parts of split ones), as (job id, partner node
    /// on the other side; for a multicast job seen from the sender,
    /// `MULTI`). Entries of finished jobs, and of split jobs that no longer
    /// hold the node, are dropped lazily.
    pub(super) others: [Vec<Vec<(u32, u32)>>; 2],
    /// Per side, per node: remaining load as of `node_since` (busy) or now
    /// (free).
    pub(super) load: [Vec<u64>; 2],
    /// Per side, per node: the running job.
    pub(super) busy: [Vec<Option<u32>>; 2],
    pub(super) node_since: [Vec<u64>; 2],
    pub(super) node_version: [Vec<u32>; 2],
    /// Free nodes by load (max first), lazily invalidated.
    pub(super) free_heap: BinaryHeap<u128>,
    /// Running jobs by end time (min first), lazily invalidated.
    pub(super) finish: BinaryHeap<Reverse<u128>>,
    pub(super) segments: Vec<Segment>,
    pub(super) t: u64,
    pub(super) target: u64,
    pub(super) pending_count: usize,
    pub(super) config: CoreConfig,
    // Scratch for path searches.
    pub(super) mark: [Vec<u32>; 2],
    pub(super) mark_epoch: u32,
    /// Nodes freed since the last greedy fill.
    pub(super) freed: Vec<(usize, usize)>,
    /// Scratch: the nodes of the job being started or stopped.
    pub(super) ends: Vec<(usize, usize)>,
    /// Per side, per node: where the next look at its jobs starts.
    pub(super) cursor: [Vec<u32>; 2],
    /// u64 words per node bit set.
    pub(super) words: usize,
    /// Per side: bit set of free nodes.
    pub(super) free_bits: [Vec<u64>; 2],
    /// Per side, per node (`words` each): partners it has a unicast job
    /// not yet done with.
    pub(super) partner_bits: [Vec<u64>; 2],
    /// (sender, receiver) → the pair's core job.
    pub(super) pair_index: PairIndex,
}

/// `keys` (from [`pack_key`], in pick order, kind 0 or 1, sender and
/// receiver below `nodes`) sorted.
pub(super) fn sort_keys(nodes: usize, keys: Vec<u128>) -> Vec<u128> {
    let by_receiver = Grouped::new(
        nodes,
        std::iter::once(keys.iter().map(|&k| (unpack_key(k).2, k))),
    );
    drop(keys);
    let by_sender = Grouped::new(
        2 * nodes,
        std::iter::once(by_receiver.order.iter().map(|&k| {
            let (kind, sender, _, _) = unpack_key(k);
            (kind * nodes as u32 + sender, k)
        })),
    );
    by_sender.order
}

/// A core sort key (kind, sender, receiver, pick) as one integer whose
/// order is the tuple's.
pub(super) fn pack_key((kind, sender, receiver, pick): (u32, u32, u32, u32)) -> u128 {
    (u128::from(kind) << 96)
        | (u128::from(sender) << 64)
        | (u128::from(receiver) << 32)
        | u128::from(pick)
}

/// The tuple of a [`pack_key`].
pub(super) fn unpack_key(key: u128) -> (u32, u32, u32, u32) {
    let word = |shift: u32| (key >> shift) as u32;
    (word(96), word(64), word(32), word(0))
}

/// The core's copy of a job that is not a single pair: a multicast's
/// receivers in order (with their tags), so that a split part's membership
/// is a binary search.
pub(super) fn own_copy(job: &Job) -> Job {
    let mut j = job.clone();
    if j.receivers.len() > 1 && j.paired.is_none() {
        let mut pairs: SmallVec<[(u32, u32); 2]> = j
            .receivers
            .iter()
            .copied()
            .zip(j.dests.iter().copied())
            .collect();
        pairs.sort_unstable();
        j.receivers = pairs.iter().map(|p| p.0).collect();
        j.dests = pairs.iter().map(|p| p.1).collect();
    }
    j
}

/// A free node's heap entry (load, side, node, version) as one integer
/// in that order, so that the heap compares integers. Nodes are tiles,
/// below `MAX_TILES` (2^13), so a node fits in 31 bits.
pub(super) fn free_entry(load: u64, side: usize, v: u32, version: u32) -> u128 {
    debug_assert!(v < 1 << 31);
    (u128::from(load) << 64) | ((side as u128) << 63) | (u128::from(v) << 32) | u128::from(version)
}

/// The (load, side, node, version) of a [`free_entry`].
pub(super) fn free_parts(entry: u128) -> (u64, usize, u32, u32) {
    (
        (entry >> 64) as u64,
        ((entry >> 63) & 1) as usize,
        ((entry >> 32) as u32) & 0x7fff_ffff,
        entry as u32,
    )
}

/// A running job's heap entry (end, job, version) as one integer in that
/// order.
pub(super) fn finish_entry(end: u64, j: u32, version: u32) -> u128 {
    (u128::from(end) << 64) | (u128::from(j) << 32) | u128::from(version)
}

/// The (end, job, version) of a [`finish_entry`].
pub(super) fn finish_parts(entry: u128) -> (u64, u32, u32) {
    ((entry >> 64) as u64, (entry >> 32) as u32, entry as u32)
}

/// A freed node's place in the order nodes are looked at: most loaded
/// first, then by side and node. Packed into one integer, with the load
/// read once, so that the sort at every event compares integers instead of
/// reading loads at every comparison. A node freed twice has one key (its
/// load does not change meanwhile), so sorting puts the two together.
pub(super) fn scan_key(load: u64, side: usize, v: usize) -> u128 {
    (u128::from(!load) << 64) | ((side as u128) << 32) | v as u128
}

/// The (side, node) of a [`scan_key`].
pub(super) fn scan_node(key: u128) -> (usize, usize) {
    (((key >> 32) & 1) as usize, (key & 0xffff_ffff) as usize)
}

impl Core {
    /// The core over `picks` of `jobs`, in the order of the sorted
    /// [`pack_key`]s `keys` (see [`run`]): the single-pair keys of one
    /// (sender, receiver) become one pair job, in key order, and each other
    /// key a core copy after them.
    pub(super) fn new(
        nodes: usize,
        jobs: &[Job],
        picks: &[Pick],
        keys: &[u128],
        config: CoreConfig,
    ) -> Core {
        let unicast = keys.partition_point(|&k| unpack_key(k).0 == 0);
        let caller_jobs = jobs.len() as u32;
        let words = nodes.div_ceil(64);
        let mut partner_bits = [vec![0u64; nodes * words], vec![0u64; nodes * words]];
        let mut free_bits = [vec![0u64; words], vec![0u64; words]];
        for side in [SEND, RECV] {
            for v in 0..nodes {
                free_bits[side][v / 64] |= 1 << (v % 64);
            }
        }
        let mut load = [vec![0u64; nodes], vec![0u64; nodes]];
        // Single-pair picks, grouped by (sender, receiver): the keys are
        // sorted, so a pair's picks are consecutive.
        let mut pair_index = PairIndex::new(nodes);
        let mut rt: Vec<JobRt> = Vec::with_capacity(unicast);
        let mut later_picks: Vec<LaterPick> = Vec::new();
        for &key in &keys[..unicast] {
            let (_, sender, receiver, i) = unpack_key(key);
            let pick = picks[i as usize];
            let (s, r) = (sender as usize, receiver as usize);
            load[SEND][s] += u64::from(pick.items());
            load[RECV][r] += u64::from(pick.items());
            if let Some(pair) = rt
                .last_mut()
                .filter(|p| (p.sender, p.node) == (sender, receiver))
            {
                // A pick after the pair's first: the one before it is no
                // longer the last.
                if pair.index == NO_PICK {
                    // Picks number at most `keys.len()`, which fits in u32.
                    pair.index = later_picks.len() as u32;
                } else if let Some(before) = later_picks.last_mut() {
                    before.last = false;
                }
                later_picks.push(LaterPick {
                    out: pick.job,
                    first: pick.first,
                    items: pick.items(),
                    last: true,
                });
                continue;
            }
            let id = pair_index.push(sender, receiver);
            debug_assert_eq!(id as usize, rt.len());
            partner_bits[SEND][s * words + r / 64] |= 1 << (r % 64);
            partner_bits[RECV][r * words + s / 64] |= 1 << (s % 64);
            rt.push(JobRt {
                since: 0,
                rem: pick.items(),
                offset: pick.first,
                version: 0,
                sender,
                index: NO_PICK,
                node: receiver,
                out: pick.job,
                state: State::Pending,
            });
        }
        let first_own = rt.len();
        let own: Vec<Job> = keys[unicast..]
            .par_iter()
            .map(|&k| own_copy(&jobs[picks[unpack_key(k).3 as usize].job as usize]))
            .collect();
        rt.par_extend(
            keys[unicast..]
                .par_iter()
                .zip(&own)
                .enumerate()
                .map(|(k, (&key, job))| {
                    let pick = picks[unpack_key(key).3 as usize];
                    JobRt {
                        since: 0,
                        rem: pick.items(),
                        offset: pick.first,
                        version: 0,
                        sender: job.sender,
                        index: 0,
                        node: job.receivers.first().copied().unwrap_or(MULTI),
                        out: caller_jobs + k as u32,
                        state: State::Pending,
                    }
                }),
        );
        let n = rt.len();
        let mut others = [vec![Vec::new(); nodes], vec![Vec::new(); nodes]];
        for (k, job) in own.iter().enumerate() {
            let j = first_own + k;
            for (side, v) in job.endpoints() {
                let entry = (j as u32, if side == SEND { MULTI } else { job.sender });
                others[side][v].push(entry);
                load[side][v] += u64::from(rt[j].rem);
            }
        }
        Core {
            pair_index,
            later_picks,
            rt,
            own,
            first_own,
            caller_jobs,
            others,
            load,
            busy: [vec![None; nodes], vec![None; nodes]],
            node_since: [vec![0; nodes], vec![0; nodes]],
            node_version: [vec![0; nodes], vec![0; nodes]],
            free_heap: BinaryHeap::new(),
            finish: BinaryHeap::new(),
            segments: Vec::with_capacity(n + n / 8),
            t: 0,
            target: config.target,
            pending_count: n,
            config,
            mark: [vec![0; nodes], vec![0; nodes]],
            mark_epoch: 0,
            freed: Vec::new(),
            ends: Vec::new(),
            cursor: [vec![0; nodes], vec![0; nodes]],
            words,
            free_bits,
            partner_bits,
        }
    }

    /// Core job `j`, which is not a single-pair job.
    pub(super) fn own(&self, j: usize) -> &Job {
        &self.own[j - self.first_own]
    }

    /// Remaining load of a node now.
    pub(super) fn load_now(&self, side: usize, v: usize) -> u64 {
        match self.busy[side][v] {
            Some(_) => self.load[side][v] - (self.t - self.node_since[side][v]),
            None => self.load[side][v],
        }
    }

    /// The `split` of a greedy fill's [`Core::try_start`]: with fanout
    /// splits on, a node that is not critical may split a multicast whose
    /// sender has [`FILL_SPLIT_SLACK`] times the part's items to spare.
    pub(super) fn fill_split(&self) -> u64 {
        if self.config.fanout_split {
            FILL_SPLIT_SLACK
        } else {
            0
        }
    }

    pub(super) fn is_critical(&self, side: usize, v: usize) -> bool {
        let l = self.load_now(side, v);
        l > 0 && l + self.t >= self.target
    }

    pub(super) fn push_free(&mut self, side: usize, v: usize) {
        self.node_version[side][v] = self.node_version[side][v].wrapping_add(1);
        let l = self.load[side][v];
        if l > 0 {
            self.free_heap
                .push(free_entry(l, side, v as u32, self.node_version[side][v]));
        }
    }

    pub(super) fn start(&mut self, j: u32) {
        let ju = j as usize;
        debug_assert!(self.rt[ju].state == State::Pending);
        self.rt[ju].state = State::Active;
        self.rt[ju].since = self.t;
        self.rt[ju].version = self.rt[ju].version.wrapping_add(1);
        self.finish.push(Reverse(finish_entry(
            self.t + u64::from(self.rt[ju].rem),
            j,
            self.rt[ju].version,
        )));
        let ends = self.take_endpoints(ju);
        for &(side, v) in &ends {
            self.busy[side][v] = Some(j);
            self.free_bits[side][v / 64] &= !(1 << (v % 64));
            self.node_since[side][v] = self.t;
            self.node_version[side][v] = self.node_version[side][v].wrapping_add(1);
        }
        self.ends = ends;
    }

    /// Every node job `j` occupies, without touching the job list for
    /// simple jobs, in the core's scratch list (taken out: give it back
    /// when done, so that a wide multicast's list is not allocated at
    /// every start and stop).
    pub(super) fn take_endpoints(&mut self, j: usize) -> Vec<(usize, usize)> {
        let mut ends = std::mem::take(&mut self.ends);
        ends.clear();
        if j >= self.first_own {
            self.own(j).endpoints_into(&mut ends);
        } else {
            let rt = &self.rt[j];
            ends.extend([(SEND, rt.sender as usize), (RECV, rt.node as usize)]);
        }
        ends
    }

    /// Stops a running job at the current time, emitting its segment and
    /// freeing its nodes (which are returned to the free heap).
    pub(super) fn stop(&mut self, j: u32) {
        let ju = j as usize;
        let ran = self.t - self.rt[ju].since;
        let ran32 = ran as u32;
        if ran > 0 {
            self.segments.push(Segment {
                job: self.rt[ju].out,
                start: self.rt[ju].since,
                len: ran32,
                offset: self.rt[ju].offset,
            });
        }
        self.rt[ju].rem -= ran32;
        self.rt[ju].offset += ran32;
        self.rt[ju].version = self.rt[ju].version.wrapping_add(1);
        self.rt[ju].state = if self.rt[ju].rem > 0 {
            State::Pending
        } else if let Some(&next) = (ju < self.first_own)
            .then(|| self.later_picks.get(self.rt[ju].index as usize))
            .flatten()
        {
            // The pair's next pick becomes its current one.
            let rt = &mut self.rt[ju];
            rt.rem = next.items;
            rt.offset = next.first;
            rt.out = next.out;
            rt.index = if next.last { NO_PICK } else { rt.index + 1 };
            State::Pending
        } else {
            self.pending_count -= 1;
            self.pair_done(ju);
            State::Done
        };
        let ends = self.take_endpoints(ju);
        for &(side, v) in &ends {
            self.load[side][v] -= ran;
            self.busy[side][v] = None;
            self.free_bits[side][v / 64] |= 1 << (v % 64);
            self.node_version[side][v] = self.node_version[side][v].wrapping_add(1);
            self.freed.push((side, v));
        }
        self.ends = ends;
    }

    /// A job is done: when it is a pair, the partners forget each other.
    pub(super) fn pair_done(&mut self, j: usize) {
        if j >= self.first_own {
            return;
        }
        let s = self.rt[j].sender as usize;
        let r = self.rt[j].node as usize;
        let words = self.words;
        self.partner_bits[SEND][s * words + r / 64] &= !(1 << (r % 64));
        self.partner_bits[RECV][r * words + s / 64] &= !(1 << (s % 64));
    }

    pub(super) fn solve(&mut self) {
        let nodes = self.busy[SEND].len();
        for side in [SEND, RECV] {
            for v in 0..nodes {
                if self.load[side][v] > 0 {
                    self.freed.push((side, v));
                }
            }
        }
        let mut uncovered: Vec<(usize, usize)> = Vec::new();
        // Freed nodes as packed sort keys (see `scan_key`).
        let mut scan: Vec<u128> = Vec::new();
        let mut still_free: Vec<(usize, usize)> = Vec::new();
        let mut due: Vec<(u32, u32)> = Vec::new();
        loop {
            // 1. Finished jobs free their nodes. The due entries leave the
            // heap first (stopping a job pushes nothing), and their jobs'
            // states are read in one pass before any is stopped: on a large
            // phase each read misses the cache, and reads that do not wait
            // for one another overlap (on the seed-shaped phase of 586,368
            // transfers, 40 jobs end at each event on average).
            due.clear();
            while let Some(&Reverse(entry)) = self.finish.peek() {
                let (end, j, ver) = finish_parts(entry);
                if end > self.t {
                    break;
                }
                self.finish.pop();
                due.push((j, ver));
            }
            let current = due
                .iter()
                .filter(|&&(j, ver)| self.rt[j as usize].version == ver)
                .count();
            std::hint::black_box(current);
            for &(j, ver) in &due {
                if self.rt[j as usize].version == ver && self.rt[j as usize].state == State::Active
                {
                    self.stop(j);
                }
            }
            uncovered.clear();
            // 2. Freed nodes, most loaded first: critical ones must be
            // covered, the others are filled greedily. Path moves free more
            // nodes; they are handled in the next round.
            while !self.freed.is_empty() {
                scan.clear();
                let load = &self.load;
                scan.extend(
                    self.freed
                        .drain(..)
                        .map(|(side, v)| scan_key(load[side][v], side, v)),
                );
                scan.sort_unstable();
                scan.dedup();
                for &key in &scan {
                    let (side, v) = scan_node(key);
                    if self.busy[side][v].is_some() || self.load[side][v] == 0 {
                        continue;
                    }
                    if self.is_critical(side, v) {
                        if !self.cover(side, v) {
                            uncovered.push((side, v));
                        }
                    } else if !self.try_start(side, v, self.fill_split(), self.config.fill_budget) {
                        still_free.push((side, v));
                    }
                }
            }
            // 3. Nodes that were already free and have become critical.
            while let Some(&entry) = self.free_heap.peek() {
                let (l, side, v, ver) = free_parts(entry);
                let vu = v as usize;
                if ver != self.node_version[side][vu] || self.busy[side][vu].is_some() {
                    self.free_heap.pop();
                    continue;
                }
                if l + self.t < self.target {
                    break;
                }
                self.free_heap.pop();
                if !self.cover(side, vu) {
                    uncovered.push((side, vu));
                }
                // Path moves may free nodes: give them a greedy chance and
                // a place in the heap.
                for (side, v) in std::mem::take(&mut self.freed) {
                    if self.busy[side][v].is_none()
                        && self.load[side][v] > 0
                        && !self.try_start(side, v, self.fill_split(), self.config.fill_budget)
                    {
                        still_free.push((side, v));
                    }
                }
            }
            if self.pending_count == 0 && self.finish.is_empty() {
                break;
            }
            // 4. Nodes left free wait in the heap until they become
            // critical; uncovered critical ones make the target grow so that
            // they are looked at again after the next job ends.
            let next_finish = self.next_finish();
            for (side, v) in still_free.drain(..) {
                if self.busy[side][v].is_none() && self.load[side][v] > 0 {
                    self.push_free(side, v);
                }
            }
            for &(side, v) in &uncovered {
                if self.busy[side][v].is_none() {
                    let l = self.load[side][v];
                    let from = next_finish.unwrap_or(self.t + 1);
                    self.target = self.target.max(from + l);
                    self.push_free(side, v);
                }
            }
            // 5. Next event: a job ends or a free node becomes critical.
            let mut next = next_finish.unwrap_or(u64::MAX);
            while let Some(&entry) = self.free_heap.peek() {
                let (l, side, v, ver) = free_parts(entry);
                let vu = v as usize;
                if ver != self.node_version[side][vu] || self.busy[side][vu].is_some() || l == 0 {
                    self.free_heap.pop();
                    continue;
                }
                let critical_at = self.target.saturating_sub(l).max(self.t + 1);
                next = next.min(critical_at);
                break;
            }
            if next == u64::MAX {
                // Nothing runs and nothing is free with work: cannot happen
                // while jobs are pending, but never loop forever.
                debug_assert!(false, "scheduler stalled with pending jobs");
                break;
            }
            self.t = next;
        }
    }

    pub(super) fn next_finish(&mut self) -> Option<u64> {
        while let Some(&Reverse(entry)) = self.finish.peek() {
            let (end, j, ver) = finish_parts(entry);
            if self.rt[j as usize].version == ver && self.rt[j as usize].state == State::Active {
                return Some(end);
            }
            self.finish.pop();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{pack_key, sort_keys};

    #[test]
    fn counting_sorted_keys_are_in_the_order_of_their_tuples() {
        let nodes = 37u32;
        // Pseudo-random keys in pick order, with repeated pairs and both
        // kinds.
        let mut rng = ipu_layout::rng::SplitMix64::new(0x9e37_79b9_7f4a_7c15);
        let keys: Vec<u128> = (0..5000u32)
            .map(|pick| {
                let kind = u32::from(rng.below(4) == 0);
                let sender = rng.below(u64::from(nodes)) as u32;
                let receiver = if kind == 0 {
                    rng.below(u64::from(nodes)) as u32
                } else {
                    0
                };
                pack_key((kind, sender, receiver, pick))
            })
            .collect();
        let mut want = keys.clone();
        want.sort_unstable();
        assert_eq!(sort_keys(nodes as usize, keys), want);
        assert_eq!(sort_keys(nodes as usize, Vec::new()), Vec::<u128>::new());
    }
}
