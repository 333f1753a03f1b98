//! Splitting a large phase in time, so that both halves are scheduled at
//! once, one per thread.
//!
//! The core is one sequential event loop, and on a phase of hundreds of
//! thousands of jobs it is most of the schedule's time. A schedule may
//! instead run one set of jobs and then another: the phase ends after the
//! first set's horizon plus the second's. When every node's load is split
//! evenly, each set's bound is half the phase's, and so is the sum of the
//! two horizons, while the two sets are scheduled in parallel and each on
//! half the memory.
//!
//! The split keeps every job whole where it can:
//! 1. Jobs that are not a single sender–receiver pair (multicasts, paired
//!    items) go first, longest first, to the half whose busiest node is
//!    less loaded.
//! 2. Single-pair jobs go, in order, to the half that brings their two
//!    nodes' halves closer together (the choice that lowers the sum of the
//!    two nodes' squared differences). It reads only the two nodes' loads,
//!    so the pass streams through the jobs; on the seed-shaped phase of
//!    586,368 transfers step 3 then splits one job in time. (Pairing
//!    each node's jobs and colouring the pairs' paths and cycles bounds
//!    every node's difference by its longest job, but walking those paths
//!    jumps across the whole job list, many times slower than this pass.)
//! 3. A node still above half the bound in one half moves items of its jobs
//!    to the other half, whole jobs first, where every other node of the
//!    job has room there; a job moved in part runs its first items in the
//!    first half and the rest in the second (one preemption). A move never
//!    takes a node over half the bound, so one pass over the nodes, most
//!    loaded first, suffices.
//!
//! Halves are split again while they hold at least
//! [`CoreConfig::split_jobs`] jobs. The split depends only on the jobs,
//! never on the number of threads.

use rayon::prelude::*;
use smallvec::SmallVec;

use super::{CoreConfig, CoreOutput, Job, MULTI, Pick, RECV, RunOutput, SEND, Segment, run};

/// The default [`CoreConfig::split_jobs`]: job sets from this size on are
/// scheduled as two halves in time.
///
/// Each split lengthens the rows a little. On the seed-shaped phase of
/// 586,368 transfers (`cargo xtask exchange --families --only seed-586
/// --split-jobs N`) the rows grew by 0.5 % with two sets, 3.9 % with four
/// and 7.8 % with eight, while the horizon stayed at the bound; two sets
/// already give both cores of the target machine a half each.
pub(crate) const SPLIT_JOBS: usize = 300_000;

/// Schedules `jobs` on `nodes` senders and receivers, as [`run`] does,
/// splitting the set in time while it holds at least `config.split_jobs` jobs.
/// `bound` is at least every node's load, and `config.target` is at least
/// `bound`.
///
/// Sets split off aim at their own bound exactly: the target's slack lets
/// the core end a little late, and a set that ends late delays every set
/// after it. On the seed-shaped phase of 586,368 transfers, eight sets that
/// each had the default slack (0.2 %) ended 21 cycles above the bound, four
/// sets with the slack on the last alone 7 above, and sets without slack
/// at the bound.
pub(crate) fn run_split(
    nodes: usize,
    jobs: Vec<Job>,
    bound: u64,
    config: CoreConfig,
) -> CoreOutput {
    let picks: Vec<Pick> = (0..jobs.len())
        .into_par_iter()
        .map(|j| Pick::whole(&jobs, j))
        .collect();
    if picks.len() < config.split_jobs.max(2) {
        return run(nodes, &jobs, &picks, config).into_output(jobs);
    }
    let pairs = jobs
        .par_iter()
        .map(|j| {
            if j.simple() {
                (j.sender, j.receivers[0])
            } else {
                (j.sender, MULTI)
            }
        })
        .collect();
    let out = split(nodes, &JobSet { jobs: &jobs, pairs }, picks, bound, config);
    out.into_output(jobs)
}

/// [`run_split`] of `picks`, the whole set (aiming at `config.target`) or
/// a set split off a larger one (aiming at its bound exactly).
fn split(
    nodes: usize,
    set: &JobSet<'_>,
    picks: Vec<Pick>,
    bound: u64,
    config: CoreConfig,
) -> RunOutput {
    let leaf = |picks: &[Pick]| run(nodes, set.jobs, picks, config);
    if picks.len() < config.split_jobs.max(2) || bound < 2 || !mostly_pairs(set, &picks) {
        return leaf(&picks);
    }
    let halves = Halves::balance(nodes, set, &picks, bound);
    let (first_bound, second_bound) = (halves.bound(0), halves.bound(1));
    // A split that leaves a half with every job, or with the whole bound
    // (a node whose load could not move for want of room at its jobs'
    // other nodes), gains nothing and would be split the same way again.
    let (first_jobs, second_jobs) = halves.counts(&picks);
    if first_jobs == 0 || second_jobs == 0 || first_bound >= bound || second_bound >= bound {
        return leaf(&picks);
    }
    tracing::debug!(
        jobs = picks.len(),
        bound,
        first_bound,
        second_bound,
        split = first_jobs + second_jobs - picks.len(),
        "split exchange jobs in time"
    );
    let (first, second) = halves.into_picks(picks);
    let part = |bound| CoreConfig {
        target: bound,
        ..config
    };
    let (a, b) = rayon::join(
        || split(nodes, set, first, first_bound, part(first_bound)),
        || split(nodes, set, second, second_bound, part(second_bound)),
    );
    concat(a, b, set.jobs.len())
}

/// Whether single-pair jobs carry all but [`OTHER_SHARE`] of `picks`'
/// items.
///
/// The core ends a set of unicast jobs at its bound, so halves cost
/// nothing at the seam; multicasts leave a tail at the end of each set
/// (fanout splits need the sender time that a set's end no longer has).
/// Split once, the generated multicast family of 40,000 transfers of
/// fanout up to 8 ended 5 % later (6,491 cycles against 6,188), that of
/// 33,534 transfers 0.3 % later.
fn mostly_pairs(set: &JobSet<'_>, picks: &[Pick]) -> bool {
    let (pairs, others) = picks
        .par_iter()
        .map(|&p| match set.pair(p) {
            Some(_) => (u64::from(p.items()), 0),
            None => (0, u64::from(p.items())),
        })
        .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    others.saturating_mul(OTHER_SHARE) <= pairs + others
}

/// [`mostly_pairs`] allows other jobs one part in this many of the items.
const OTHER_SHARE: u64 = 32;

/// The second set's schedule after the first's: its own jobs follow the
/// first's, its segments start at the first's horizon. Both number the
/// caller's `caller_jobs` jobs alike.
fn concat(mut a: RunOutput, b: RunOutput, caller_jobs: usize) -> RunOutput {
    let base = a.own.len() as u32;
    let caller_jobs = caller_jobs as u32;
    let shift = a.horizon;
    a.segments.extend(b.segments.into_iter().map(|s| Segment {
        job: if s.job < caller_jobs {
            s.job
        } else {
            s.job + base
        },
        start: s.start + shift,
        ..s
    }));
    a.own.extend(b.own);
    RunOutput {
        own: a.own,
        segments: a.segments,
        horizon: a.horizon + b.horizon,
        complete: a.complete && b.complete,
    }
}

/// The jobs being split, with each one's sender and receiver kept apart
/// from the (large) jobs, which the split reads only for the others.
struct JobSet<'a> {
    jobs: &'a [Job],
    /// Per job: (sender, receiver) of a single-pair job, else
    /// (sender, `MULTI`).
    pairs: Vec<(u32, u32)>,
}

impl JobSet<'_> {
    /// The single pair of `pick`'s job, if it is one.
    fn pair(&self, pick: Pick) -> Option<(u32, u32)> {
        let p = self.pairs[pick.job as usize];
        (p.1 != MULTI).then_some(p)
    }

    /// Calls `f` with every (side, node) `pick`'s job occupies; `scratch`
    /// holds the nodes of a job that is not a single pair (a single pair's
    /// two are passed directly: this runs for every pick of a set).
    fn for_each_endpoint(
        &self,
        pick: Pick,
        scratch: &mut SmallVec<[(usize, usize); 6]>,
        mut f: impl FnMut(usize, usize),
    ) {
        match self.pair(pick) {
            Some((s, r)) => {
                f(SEND, s as usize);
                f(RECV, r as usize);
            }
            None => {
                self.endpoints(pick, scratch);
                for &(side, v) in scratch.iter() {
                    f(side, v);
                }
            }
        }
    }

    /// Every node `pick`'s job occupies, as (side, node), into `out`.
    fn endpoints(&self, pick: Pick, out: &mut SmallVec<[(usize, usize); 6]>) {
        out.clear();
        match self.pair(pick) {
            Some((s, r)) => out.extend([(SEND, s as usize), (RECV, r as usize)]),
            None => self.jobs[pick.job as usize].endpoints_into(out),
        }
    }
}

/// A split of a set of picks into two halves in time.
struct Halves {
    /// Per pick: how many of its items run in the first half.
    take: Vec<u32>,
    /// Per half, per side, per node: load.
    load: [[Vec<u64>; 2]; 2],
    /// Per half: the load no node should exceed.
    limit: [u64; 2],
}

/// Per side: the picks at each wanted node, as offsets into one list.
struct Incidence {
    start: [Vec<u32>; 2],
    picks: [Vec<u32>; 2],
}

impl Incidence {
    /// Lists the picks at the nodes `wanted` marks (the others' lists are
    /// empty).
    fn new(set: &JobSet<'_>, picks: &[Pick], wanted: &[Vec<bool>; 2]) -> Incidence {
        let nodes = wanted[SEND].len();
        let mut count = [vec![0u32; nodes + 1], vec![0u32; nodes + 1]];
        let mut ends: SmallVec<[(usize, usize); 6]> = SmallVec::new();
        for &pick in picks {
            set.for_each_endpoint(pick, &mut ends, |side, v| {
                count[side][v] += u32::from(wanted[side][v]);
            });
        }
        let start = count.map(|c| {
            let mut acc = 0u32;
            c.into_iter()
                .map(|n| {
                    let at = acc;
                    acc += n;
                    at
                })
                .collect::<Vec<u32>>()
        });
        let mut fill = start.clone();
        let mut list = [
            vec![0u32; start[SEND][nodes] as usize],
            vec![0u32; start[RECV][nodes] as usize],
        ];
        for (i, &pick) in picks.iter().enumerate() {
            set.for_each_endpoint(pick, &mut ends, |side, v| {
                if wanted[side][v] {
                    list[side][fill[side][v] as usize] = i as u32;
                    fill[side][v] += 1;
                }
            });
        }
        Incidence { start, picks: list }
    }

    fn of(&self, side: usize, v: usize) -> &[u32] {
        &self.picks[side][self.start[side][v] as usize..self.start[side][v + 1] as usize]
    }
}

impl Halves {
    fn balance(nodes: usize, set: &JobSet<'_>, picks: &[Pick], bound: u64) -> Halves {
        let first_limit = bound.div_ceil(2);
        let mut halves = Halves {
            take: vec![0; picks.len()],
            load: [
                [vec![0; nodes], vec![0; nodes]],
                [vec![0; nodes], vec![0; nodes]],
            ],
            limit: [first_limit, bound - first_limit],
        };
        halves.place_others(set, picks);
        halves.place_pairs(set, picks);
        halves.even_out(nodes, set, picks);
        halves
    }

    /// The largest node load of `half`.
    fn bound(&self, half: usize) -> u64 {
        self.load[half]
            .iter()
            .flat_map(|l| l.iter().copied())
            .max()
            .unwrap_or(0)
    }

    /// Picks with items in the first half, and in the second.
    fn counts(&self, picks: &[Pick]) -> (usize, usize) {
        let first = self.take.iter().filter(|&&t| t > 0).count();
        let second = self
            .take
            .iter()
            .zip(picks)
            .filter(|&(&t, p)| t < p.items())
            .count();
        (first, second)
    }

    /// Adds `items` to `half` at every node in `ends`.
    fn add(&mut self, half: usize, ends: &[(usize, usize)], items: u32) {
        for &(side, v) in ends {
            self.load[half][side][v] += u64::from(items);
        }
    }

    /// Step 1: picks that are not a single sender–receiver pair, longest
    /// first, each to the half where its busiest node is less loaded.
    fn place_others(&mut self, set: &JobSet<'_>, picks: &[Pick]) {
        let mut others: Vec<(std::cmp::Reverse<u32>, u32)> = picks
            .iter()
            .enumerate()
            .filter(|&(_, &p)| set.pair(p).is_none())
            .map(|(i, p)| (std::cmp::Reverse(p.items()), i as u32))
            .collect();
        others.sort_unstable();
        let mut ends: SmallVec<[(usize, usize); 6]> = SmallVec::new();
        for (_, i) in others {
            let pick = picks[i as usize];
            set.endpoints(pick, &mut ends);
            let peak = |half: usize| {
                ends.iter()
                    .map(|&(side, v)| self.load[half][side][v])
                    .max()
                    .unwrap_or(0)
            };
            let half = usize::from(peak(1) < peak(0));
            self.take[i as usize] = if half == 0 { pick.items() } else { 0 };
            self.add(half, &ends, pick.items());
        }
    }

    /// Step 2: single-pair picks, in order, each to the half that brings
    /// its two nodes' halves closer together.
    fn place_pairs(&mut self, set: &JobSet<'_>, picks: &[Pick]) {
        let [first, second] = &mut self.load;
        for (i, &pick) in picks.iter().enumerate() {
            let Some((s, r)) = set.pair(pick) else {
                continue;
            };
            let (s, r) = (s as usize, r as usize);
            let items = u64::from(pick.items());
            // The half that lowers the sum of the two nodes' squared
            // differences between halves: the first exactly when the
            // differences sum below zero.
            let lean = first[SEND][s] as i64 - second[SEND][s] as i64 + first[RECV][r] as i64
                - second[RECV][r] as i64;
            let half = if lean < 0 { &mut *first } else { &mut *second };
            half[SEND][s] += items;
            half[RECV][r] += items;
            self.take[i] = if lean < 0 { pick.items() } else { 0 };
        }
    }

    /// Step 3: nodes above their half's limit move items to the other half.
    fn even_out(&mut self, nodes: usize, set: &JobSet<'_>, picks: &[Pick]) {
        // Per half: the nodes above its limit, most loaded first. Moves
        // never take a node above a limit, so the lists stay complete.
        let over: [Vec<(std::cmp::Reverse<u64>, usize, usize)>; 2] = [0, 1].map(|half| {
            let mut over: Vec<_> = [SEND, RECV]
                .iter()
                .flat_map(|&side| (0..nodes).map(move |v| (side, v)))
                .filter_map(|(side, v)| {
                    let l = self.load[half][side][v];
                    (l > self.limit[half]).then_some((std::cmp::Reverse(l), side, v))
                })
                .collect();
            over.sort_unstable();
            over
        });
        if over.iter().all(Vec::is_empty) {
            return;
        }
        let mut wanted = [vec![false; nodes], vec![false; nodes]];
        for &(_, side, v) in over.iter().flatten() {
            wanted[side][v] = true;
        }
        let incidence = Incidence::new(set, picks, &wanted);
        let mut ends: SmallVec<[(usize, usize); 6]> = SmallVec::new();
        for (from, over) in over.into_iter().enumerate() {
            let to = 1 - from;
            for (_, side, v) in over {
                // Whole picks first (no preemption), then parts.
                for whole in [true, false] {
                    for &i in incidence.of(side, v) {
                        let excess = self.load[from][side][v].saturating_sub(self.limit[from]);
                        if excess == 0 {
                            break;
                        }
                        let i = i as usize;
                        let pick = picks[i];
                        let here = if from == 0 {
                            self.take[i]
                        } else {
                            pick.items() - self.take[i]
                        };
                        if whole && (here != pick.items() || u64::from(here) > excess) {
                            continue;
                        }
                        set.endpoints(pick, &mut ends);
                        let room = ends
                            .iter()
                            .map(|&(side, v)| self.limit[to].saturating_sub(self.load[to][side][v]))
                            .min()
                            .unwrap_or(0);
                        let want = if whole {
                            u64::from(here)
                        } else {
                            excess.min(u64::from(here))
                        };
                        if whole && room < want {
                            continue;
                        }
                        let moved = want.min(room) as u32;
                        if moved == 0 {
                            continue;
                        }
                        self.take[i] = if from == 0 {
                            self.take[i] - moved
                        } else {
                            self.take[i] + moved
                        };
                        for &(side, v) in &ends {
                            self.load[from][side][v] -= u64::from(moved);
                            self.load[to][side][v] += u64::from(moved);
                        }
                    }
                }
            }
        }
    }

    /// The two halves' picks: a pick split in time runs its first `take`
    /// items in the first half and the rest in the second.
    fn into_picks(self, picks: Vec<Pick>) -> (Vec<Pick>, Vec<Pick>) {
        let mut first = Vec::with_capacity(picks.len() / 2 + 1);
        let mut second = Vec::with_capacity(picks.len() / 2 + 1);
        for (pick, take) in picks.into_iter().zip(self.take) {
            if take == pick.items() {
                first.push(pick);
            } else if take == 0 {
                second.push(pick);
            } else {
                let cut = pick.first + take;
                first.push(Pick { end: cut, ..pick });
                second.push(Pick { first: cut, ..pick });
            }
        }
        (first, second)
    }
}
