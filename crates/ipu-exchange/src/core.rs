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

use rayon::prelude::*;
use smallvec::SmallVec;

mod augment;
mod events;
mod fill;
mod pairs;
mod split;

use events::{Core, JobRt, MULTI, RECV, SEND, State, pack_key, sort_keys};
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
