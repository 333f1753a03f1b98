//! The critical-set event scheduler over abstract senders and receivers.
//!
//! Jobs are (hyper)edges: one sender node, one or more receiver nodes and a
//! length in items. A node does one job at a time. The scheduler aims at a
//! target horizon `T` (the endpoint bound plus a configurable slack). At
//! time `t` a node is *critical* when its remaining load equals `T - t`: it
//! must work in every remaining cycle. Preemptive open-shop theory (König;
//! Gonzalez–Sahni) says that for unicast jobs there is always a matching
//! covering every critical node, so if the scheduler covers them at every
//! event, every node finishes by `T`.
//!
//! The matching is kept between events and repaired only at events: when a
//! job finishes (its nodes become free), and when a free node becomes
//! critical. Repair first tries a job whose other endpoints are free (no
//! preemption), then an alternating path that moves running unicast jobs
//! (each move is one preemption, i.e. one extra segment), found by walking
//! the nodes' partner bit sets. Free non-critical
//! nodes are filled greedily with the job whose partner is most loaded.
//! Finding that job must not cost a scan of the node's jobs at every event
//! (a tile may have hundreds): per node a bit set of the partners it still
//! has unicast work with is ANDed with the bit set of free nodes, and a
//! (sender, receiver) index finds the pair.
//!
//! A unicast pair is one core job that runs the caller's single-pair jobs
//! between its two nodes one after another, in their order: each is a
//! *pick* of the pair, and the pair's running state is that of its current
//! pick, so a pick ends (and frees the nodes) just as a job of its own
//! would. A pair, rather than each of its jobs, holds running state, and
//! whether it has work left is the state itself, not a count kept apart (a
//! cache miss at every job's end on the seed-shaped phase of 586,368
//! transfers, where the 293,000 jobs of each half fall in 274,000 pairs).
//!
//! Multicast jobs start only when the sender and every receiver are free,
//! and are never preempted by alternating paths. When a multicast job's
//! receivers are partly busy and the sender has slack for a second send,
//! the job is split by fanout: the free receivers become a new job started
//! now, and the job keeps the busy ones (the sender pays the items twice).
//! A critical node splits whenever the sender can pay once more; a greedy
//! fill only where the sender has several times the items to spare
//! ([`FILL_SPLIT_SLACK`]).
//! Only the new part is registered with its receivers, so a broadcast split
//! many times costs the receivers each part serves, not its whole fanout
//! each time; the entries the served receivers still hold for the job are
//! stale, found by a binary search in its sorted receivers when the job is
//! about to be chosen, and dropped once the job is done. A multicast job
//! remembers the receiver that last blocked it, so a look at a wide
//! multicast that cannot start costs one test while that receiver stays
//! busy.
//!
//! If a critical node cannot be covered (multicast, or a capped path
//! search), the target grows just enough for it to finish after the next
//! event; the schedule stays valid, only longer.
//!
//! Invariant: every job's items are covered exactly once per receiver by
//! the emitted segments, in order of offset; a node is in at most one
//! running job.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rayon::prelude::*;
use smallvec::SmallVec;

use crate::grouped::Grouped;

mod augment;
mod fill;
mod pairs;
mod split;

use pairs::PairIndex;
pub(crate) use split::{SPLIT_JOBS, run_split};

/// A job given to the scheduler.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    /// Sender node.
    pub sender: u32,
    /// Receiver nodes (distinct).
    pub receivers: SmallVec<[u32; 2]>,
    /// Items to move.
    pub len: u32,
    /// Caller's tag (transfer index).
    pub origin: u32,
    /// The further nodes a paired item occupies; `None` for every other
    /// job (most of them: boxed, the partners cost those jobs a pointer).
    pub paired: Option<Box<Partners>>,
    /// Caller's tags for the receivers (destination indices), aligned with
    /// `receivers`.
    pub dests: SmallVec<[u32; 2]>,
}

/// The nodes a paired item occupies besides its sender and receivers.
#[derive(Clone, Debug)]
pub(crate) struct Partners {
    /// The sender's partner, whose lane the item borrows.
    pub sender: u32,
    /// Each receiver's partner, whose receive port the item blocks.
    pub receivers: Box<[u32]>,
}

impl Job {
    /// Further sender-side nodes the job occupies (they carry no tags).
    pub fn extra_senders(&self) -> &[u32] {
        self.paired
            .as_deref()
            .map_or(&[], |p| std::slice::from_ref(&p.sender))
    }

    /// Further receiver-side nodes the job occupies.
    pub fn extra_receivers(&self) -> &[u32] {
        self.paired.as_deref().map_or(&[], |p| &p.receivers)
    }

    /// A job of one sender and one receiver and nothing else: the kind the
    /// bit sets and alternating paths handle.
    fn simple(&self) -> bool {
        self.receivers.len() == 1 && self.paired.is_none()
    }

    /// Every node the job occupies, as (side, node).
    fn endpoints(&self) -> SmallVec<[(usize, usize); 6]> {
        let mut out = SmallVec::new();
        self.endpoints_into(&mut out);
        out
    }

    /// Appends [`Job::endpoints`] to `out`.
    fn endpoints_into(&self, out: &mut impl Extend<(usize, usize)>) {
        out.extend([(SEND, self.sender as usize)]);
        out.extend(self.extra_senders().iter().map(|&s| (SEND, s as usize)));
        out.extend(self.receivers.iter().map(|&r| (RECV, r as usize)));
        out.extend(self.extra_receivers().iter().map(|&r| (RECV, r as usize)));
    }
}

/// A piece of a job run without interruption.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    /// The job's id: in [`CoreOutput`], an index into its jobs; out of
    /// [`run`], as [`RunOutput`] numbers them.
    pub job: u32,
    /// First cycle.
    pub start: u64,
    /// Items (= cycles).
    pub len: u32,
    /// Items of the job done before this segment.
    pub offset: u32,
}

/// A schedule of a whole job list: what [`run_split`] returns.
#[derive(Debug)]
pub(crate) struct CoreOutput {
    /// The caller's jobs, then the core's own (see [`RunOutput::own`]).
    /// Jobs no segment names (a job the core copied, a job split by
    /// fanout after its last segment) describe their transfer all the
    /// same.
    pub jobs: Vec<Job>,
    /// Segments in emission order.
    pub segments: Vec<Segment>,
    /// Cycle after the last segment.
    pub horizon: u64,
    /// Whether every job was scheduled (false only on an internal error).
    pub complete: bool,
}

/// Output of [`run`] on picks of a caller's job list of `n` jobs. A
/// segment's job below `n` is the caller's job of that index; `n + k` is
/// `own[k]`.
#[derive(Debug)]
pub(crate) struct RunOutput {
    /// The core's own jobs: copies of the picked jobs that are not a single
    /// sender–receiver pair (the core sorts their receivers and splits them
    /// by fanout), and the parts split off them.
    pub own: Vec<Job>,
    /// Segments in emission order.
    pub segments: Vec<Segment>,
    /// Cycle after the last segment.
    pub horizon: u64,
    /// Whether every job was scheduled (false only on an internal error).
    pub complete: bool,
}

impl RunOutput {
    /// The whole schedule of `jobs`, the list this output's picks came
    /// from.
    pub fn into_output(self, mut jobs: Vec<Job>) -> CoreOutput {
        jobs.extend(self.own);
        CoreOutput {
            jobs,
            segments: self.segments,
            horizon: self.horizon,
            complete: self.complete,
        }
    }
}

/// Tuning knobs of the core.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CoreConfig {
    /// Initial target horizon.
    pub target: u64,
    /// Largest number of nodes an alternating-path search may visit.
    pub path_search_limit: usize,
    /// Whether to split multicast jobs by fanout.
    pub fanout_split: bool,
    /// How many of a node's jobs a greedy fill looks at (critical nodes
    /// look at all).
    pub fill_budget: usize,
    /// Job sets from this size on are split in time (see [`run_split`]).
    pub split_jobs: usize,
}

/// The scheduler's per-job state: for a pair, that of its current pick.
#[derive(Clone, Copy, Debug)]
struct JobRt {
    since: u64,
    rem: u32,
    offset: u32,
    version: u32,
    sender: u32,
    /// For a pair: where its next pick is in `Core::later_picks`, or
    /// `NO_PICK` when the current one is its last. For any other job (ids
    /// from `Core::first_own` on): the index, in its receivers, of the
    /// receiver last found busy. One field serves both, so that the state
    /// of a job fits 40 bytes rather than 48: the core reads it at random
    /// on every start, so a smaller state is measurably faster on the
    /// seed-shaped phase (`cargo bench -p ipu-exchange`).
    index: u32,
    /// For a pair: its receiver. For any other job: the node of the
    /// receiver `index` names (`receivers[index % receivers.len()]`, or
    /// `MULTI` when it has none), kept here so that a look at a blocked
    /// multicast job does not touch the job list (a cache miss per look on
    /// wide phases).
    node: u32,
    /// The job's id in [`RunOutput`]'s numbering, which its segments carry.
    out: u32,
    state: State,
}

const _: () = assert!(std::mem::size_of::<JobRt>() == 40);

/// `JobRt::index` of a pair with no pick after the current one.
const NO_PICK: u32 = u32::MAX;

/// A pick of a pair after its first (whose own fields are in the pair's
/// [`JobRt`] from the start).
#[derive(Clone, Copy, Debug)]
struct LaterPick {
    /// The caller's job, the id its segments carry.
    out: u32,
    first: u32,
    items: u32,
    /// Whether it is the pair's last pick.
    last: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
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
const FILL_SPLIT_SLACK: u64 = 8;

/// Partner marker of a multicast job in a sender's adjacency.
const MULTI: u32 = u32::MAX;

const SEND: usize = 0;
const RECV: usize = 1;

struct Core {
    /// The jobs that are not a single pair, and the parts split off them:
    /// core job `first_own + k` is `own[k]`. A pair needs no copy: its
    /// running state holds its two nodes.
    own: Vec<Job>,
    /// Core id of `own[0]`: the number of unicast pairs, which come first.
    first_own: usize,
    /// The picks of pairs after each one's first, by pair.
    later_picks: Vec<LaterPick>,
    /// Jobs in the caller's list: `RunOutput` numbers own jobs from here.
    caller_jobs: u32,
    /// Per job: its running state, kept together for locality.
    rt: Vec<JobRt>,
    /// Per side, per node: the jobs the unicast bit sets do not cover
    /// (multicast jobs and parts of split ones), as (job id, partner node
    /// on the other side; for a multicast job seen from the sender,
    /// `MULTI`). Entries of finished jobs, and of split jobs that no longer
    /// hold the node, are dropped lazily.
    others: [Vec<Vec<(u32, u32)>>; 2],
    /// Per side, per node: remaining load as of `node_since` (busy) or now
    /// (free).
    load: [Vec<u64>; 2],
    /// Per side, per node: the running job.
    busy: [Vec<Option<u32>>; 2],
    node_since: [Vec<u64>; 2],
    node_version: [Vec<u32>; 2],
    /// Free nodes by load (max first), lazily invalidated.
    free_heap: BinaryHeap<u128>,
    /// Running jobs by end time (min first), lazily invalidated.
    finish: BinaryHeap<Reverse<u128>>,
    segments: Vec<Segment>,
    t: u64,
    target: u64,
    pending_count: usize,
    config: CoreConfig,
    // Scratch for path searches.
    mark: [Vec<u32>; 2],
    mark_epoch: u32,
    /// Nodes freed since the last greedy fill.
    freed: Vec<(usize, usize)>,
    /// Scratch: the nodes of the job being started or stopped.
    ends: Vec<(usize, usize)>,
    /// Per side, per node: where the next look at its jobs starts.
    cursor: [Vec<u32>; 2],
    /// u64 words per node bit set.
    words: usize,
    /// Per side: bit set of free nodes.
    free_bits: [Vec<u64>; 2],
    /// Per side, per node (`words` each): partners it has a unicast job
    /// not yet done with.
    partner_bits: [Vec<u64>; 2],
    /// (sender, receiver) → the pair's core job.
    pair_index: PairIndex,
}

/// Part of a caller's job for [`run`] to schedule: items `first..end` of
/// job `job` (a job split in time is two picks, see [`run_split`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pick {
    /// Index in the caller's job list.
    pub job: u32,
    /// First item to move.
    pub first: u32,
    /// One past the last item to move.
    pub end: u32,
}

impl Pick {
    /// Every item of job `job` of `jobs`.
    pub fn whole(jobs: &[Job], job: usize) -> Pick {
        Pick {
            job: job as u32,
            first: 0,
            end: jobs[job].len,
        }
    }

    /// Items to move.
    pub fn items(self) -> u32 {
        self.end - self.first
    }
}

/// Schedules the `picks` of `jobs` on `nodes` senders and `nodes`
/// receivers.
pub(crate) fn run(nodes: usize, jobs: &[Job], picks: &[Pick], config: CoreConfig) -> RunOutput {
    // Unicast jobs first, grouped by (sender, receiver): a pair's jobs get
    // consecutive ids. Keys are sorted rather than the (large) jobs
    // themselves, and hold all the core needs of a single-pair job, so the
    // job list is read again only for the others.
    let packed: Vec<u128> = picks
        .par_iter()
        .enumerate()
        .map(|(i, p)| {
            let j = &jobs[p.job as usize];
            if j.simple() {
                pack_key((0, j.sender, j.receivers[0], i as u32))
            } else {
                pack_key((1, j.sender, 0, i as u32))
            }
        })
        .collect();
    // Packed, the keys compare as one integer, in the order of the tuples.
    // They are made in pick order, so two stable counting sorts, by
    // receiver and then by (kind, sender), put them in that order, on one
    // thread and whatever the thread count, faster than a parallel
    // comparison sort of the same keys on the seed-shaped phase.
    let packed = sort_keys(nodes, packed);
    let mut core = Core::new(nodes, jobs, picks, &packed, config);
    core.solve();
    let horizon = core
        .segments
        .iter()
        .map(|s| s.start + u64::from(s.len))
        .max()
        .unwrap_or(0);
    RunOutput {
        complete: core.pending_count == 0,
        own: core.own,
        segments: core.segments,
        horizon,
    }
}

/// `keys` (from [`pack_key`], in pick order, kind 0 or 1, sender and
/// receiver below `nodes`) sorted.
fn sort_keys(nodes: usize, keys: Vec<u128>) -> Vec<u128> {
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
fn pack_key((kind, sender, receiver, pick): (u32, u32, u32, u32)) -> u128 {
    (u128::from(kind) << 96)
        | (u128::from(sender) << 64)
        | (u128::from(receiver) << 32)
        | u128::from(pick)
}

/// The tuple of a [`pack_key`].
fn unpack_key(key: u128) -> (u32, u32, u32, u32) {
    let word = |shift: u32| (key >> shift) as u32;
    (word(96), word(64), word(32), word(0))
}

/// The core's copy of a job that is not a single pair: a multicast's
/// receivers in order (with their tags), so that a split part's membership
/// is a binary search.
fn own_copy(job: &Job) -> Job {
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
fn free_entry(load: u64, side: usize, v: u32, version: u32) -> u128 {
    debug_assert!(v < 1 << 31);
    (u128::from(load) << 64) | ((side as u128) << 63) | (u128::from(v) << 32) | u128::from(version)
}

/// The (load, side, node, version) of a [`free_entry`].
fn free_parts(entry: u128) -> (u64, usize, u32, u32) {
    (
        (entry >> 64) as u64,
        ((entry >> 63) & 1) as usize,
        ((entry >> 32) as u32) & 0x7fff_ffff,
        entry as u32,
    )
}

/// A running job's heap entry (end, job, version) as one integer in that
/// order.
fn finish_entry(end: u64, j: u32, version: u32) -> u128 {
    (u128::from(end) << 64) | (u128::from(j) << 32) | u128::from(version)
}

/// The (end, job, version) of a [`finish_entry`].
fn finish_parts(entry: u128) -> (u64, u32, u32) {
    ((entry >> 64) as u64, (entry >> 32) as u32, entry as u32)
}

/// A freed node's place in the order nodes are looked at: most loaded
/// first, then by side and node. Packed into one integer, with the load
/// read once, so that the sort at every event compares integers instead of
/// reading loads at every comparison. A node freed twice has one key (its
/// load does not change meanwhile), so sorting puts the two together.
fn scan_key(load: u64, side: usize, v: usize) -> u128 {
    (u128::from(!load) << 64) | ((side as u128) << 32) | v as u128
}

/// The (side, node) of a [`scan_key`].
fn scan_node(key: u128) -> (usize, usize) {
    (((key >> 32) & 1) as usize, (key & 0xffff_ffff) as usize)
}

impl Core {
    /// The core over `picks` of `jobs`, in the order of the sorted
    /// [`pack_key`]s `keys` (see [`run`]): the single-pair keys of one
    /// (sender, receiver) become one pair job, in key order, and each other
    /// key a core copy after them.
    fn new(nodes: usize, jobs: &[Job], picks: &[Pick], keys: &[u128], config: CoreConfig) -> Core {
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
    fn own(&self, j: usize) -> &Job {
        &self.own[j - self.first_own]
    }

    /// Remaining load of a node now.
    fn load_now(&self, side: usize, v: usize) -> u64 {
        match self.busy[side][v] {
            Some(_) => self.load[side][v] - (self.t - self.node_since[side][v]),
            None => self.load[side][v],
        }
    }

    /// The `split` of a greedy fill's [`Core::try_start`]: with fanout
    /// splits on, a node that is not critical may split a multicast whose
    /// sender has [`FILL_SPLIT_SLACK`] times the part's items to spare.
    fn fill_split(&self) -> u64 {
        if self.config.fanout_split {
            FILL_SPLIT_SLACK
        } else {
            0
        }
    }

    fn is_critical(&self, side: usize, v: usize) -> bool {
        let l = self.load_now(side, v);
        l > 0 && l + self.t >= self.target
    }

    fn push_free(&mut self, side: usize, v: usize) {
        self.node_version[side][v] = self.node_version[side][v].wrapping_add(1);
        let l = self.load[side][v];
        if l > 0 {
            self.free_heap
                .push(free_entry(l, side, v as u32, self.node_version[side][v]));
        }
    }

    fn start(&mut self, j: u32) {
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
    fn take_endpoints(&mut self, j: usize) -> Vec<(usize, usize)> {
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
    fn stop(&mut self, j: u32) {
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
    fn pair_done(&mut self, j: usize) {
        if j >= self.first_own {
            return;
        }
        let s = self.rt[j].sender as usize;
        let r = self.rt[j].node as usize;
        let words = self.words;
        self.partner_bits[SEND][s * words + r / 64] &= !(1 << (r % 64));
        self.partner_bits[RECV][r * words + s / 64] &= !(1 << (s % 64));
    }

    fn solve(&mut self) {
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

    fn next_finish(&mut self) -> Option<u64> {
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
