//! Starting jobs at free nodes without preemption: the unicast look through
//! the partner and free-node bit sets, the scan of a node's multicast jobs
//! and split parts, and the fanout split of a multicast job.

use smallvec::SmallVec;

use super::{Core, Job, JobRt, MULTI, RECV, SEND, State};

/// Free partners a unicast look compares.
const UNICAST_LOOK: usize = 32;

impl Core {
    /// Tries to start a job at free node `v` without preempting anything,
    /// looking at up to `budget` of its jobs (round robin from where the
    /// last look stopped). With `split` above 0, a multicast job may be
    /// split by fanout when its sender has `split` times the remaining
    /// items to spare. Returns whether a job started.
    pub(super) fn try_start(&mut self, side: usize, v: usize, split: u64, budget: usize) -> bool {
        self.try_start_unicast(side, v) || self.try_start_scan(side, v, split, budget)
    }

    /// Starts the unicast job of free node `v` whose partner is free and
    /// most loaded, found through the partner and free-node bit sets.
    fn try_start_unicast(&mut self, side: usize, v: usize) -> bool {
        let other = 1 - side;
        let words = self.words;
        let mut best: Option<(u64, usize)> = None;
        let mut looked = 0;
        'scan: for w in 0..words {
            let mut m = self.partner_bits[side][v * words + w] & self.free_bits[other][w];
            while m != 0 {
                let p = w * 64 + m.trailing_zeros() as usize;
                m &= m - 1;
                let score = self.load[other][p];
                if best.is_none_or(|(b, _)| score > b) {
                    best = Some((score, p));
                }
                looked += 1;
                if looked >= UNICAST_LOOK {
                    break 'scan;
                }
            }
        }
        let Some((_, p)) = best else {
            return false;
        };
        let (sender, receiver) = if side == SEND {
            (v as u32, p as u32)
        } else {
            (p as u32, v as u32)
        };
        match self.pending_of_pair(sender, receiver) {
            Some(j) => {
                self.start(j);
                true
            }
            None => false,
        }
    }

    /// The job of a unicast pair, if it is pending.
    pub(super) fn pending_of_pair(&self, sender: u32, receiver: u32) -> Option<u32> {
        let j = self.pair_index.get(sender, receiver)?;
        (self.rt.get(j as usize)?.state == State::Pending).then_some(j)
    }

    /// Looks at up to `budget` of `v`'s jobs for one whose other endpoints
    /// are all free (multicast jobs, and split parts).
    fn try_start_scan(&mut self, side: usize, v: usize, split: u64, budget: usize) -> bool {
        let other = 1 - side;
        let mut best: Option<(u64, usize)> = None;
        let mut best_split: Option<(u64, usize)> = None;
        let mut len = self.others[side][v].len();
        if len == 0 {
            return false;
        }
        let mut i = self.cursor[side][v] as usize % len;
        let mut seen = 0;
        while seen < budget.min(len) {
            seen += 1;
            let (j, partner) = self.others[side][v][i];
            let j = j as usize;
            // The partner's state is in a small, hot array: look there first.
            if partner != MULTI && self.busy[other][partner as usize].is_some() {
                i = if i + 1 == len { 0 } else { i + 1 };
                continue;
            }
            if self.rt[j].state == State::Done {
                self.others[side][v].swap_remove(i);
                len -= 1;
                if len == 0 {
                    break;
                }
                if i >= len {
                    i = 0;
                }
                continue;
            }
            i = if i + 1 == len { 0 } else { i + 1 };
            if self.rt[j].state != State::Pending {
                continue;
            }
            // A job whose sender is busy cannot start (seen from the sender
            // itself, it is free); without splits, neither can one whose
            // last blocking receiver is still busy (for a unicast part that
            // receiver is its only one, which is busy, or not `v`). Both
            // tests need only the job's running state, not the job list.
            let rt = &self.rt[j];
            let blocked = |side: usize, node: u32| {
                self.busy[side]
                    .get(node as usize)
                    .is_some_and(Option::is_some)
            };
            if blocked(SEND, rt.sender) || (split == 0 && blocked(RECV, rt.node)) {
                continue;
            }
            let job = &self.own[j - self.first_own];
            if job.simple() {
                // Unicast (a split part, or a multicast job split down to
                // one receiver, whose entry may not name the partner).
                let p = if side == SEND {
                    job.receivers[0]
                } else {
                    job.sender
                } as usize;
                let stale = side == RECV && job.receivers[0] as usize != v;
                if stale || self.busy[other][p].is_some() {
                    continue;
                }
                let score = self.load[other][p];
                if best.is_none_or(|(b, _)| score > b) {
                    best = Some((score, j));
                }
                continue;
            }
            let sender_load = self.load[SEND][job.sender as usize];
            let lanes_busy = std::iter::once(&job.sender)
                .chain(job.extra_senders())
                .any(|&s| self.busy[SEND][s as usize].is_some());
            if lanes_busy {
                continue;
            }
            let ports_busy = job
                .extra_receivers()
                .iter()
                .any(|&r| self.busy[RECV][r as usize].is_some());
            let splittable = split > 0
                && job.paired.is_none()
                && self.target.saturating_sub(self.t + sender_load)
                    >= split * u64::from(self.rt[j].rem);
            // A wide multicast is rejected by the receiver that last
            // blocked it while that one stays busy, so a look costs one
            // test instead of a pass over hundreds of receivers.
            let receivers = job.receivers.len();
            let blocker = self.rt[j].index as usize % receivers;
            if self.busy[RECV][job.receivers[blocker] as usize].is_some() && !splittable {
                continue;
            }
            let busy_at = (blocker..receivers)
                .chain(0..blocker)
                .find(|&k| self.busy[RECV][job.receivers[k] as usize].is_some());
            if let Some(k) = busy_at {
                self.rt[j].index = k as u32;
                self.rt[j].node = job.receivers[k];
            }
            let all_free = busy_at.is_none();
            // A split multicast job keeps only the receivers it has not
            // served, so a receiver's entry may be stale; its receivers are
            // sorted, and only a job about to become the choice is searched.
            // Paired jobs are never split, and their receivers are not sorted.
            let holds = |core: &Core| {
                let job = core.own(j);
                side == SEND
                    || job.paired.is_some()
                    || job.receivers.binary_search(&(v as u32)).is_ok()
            };
            if all_free && !ports_busy {
                let score = if side == SEND {
                    job.receivers
                        .iter()
                        .map(|&r| self.load[RECV][r as usize])
                        .max()
                        .unwrap_or(0)
                } else {
                    sender_load
                };
                if best.is_none_or(|(b, _)| score > b) && holds(self) {
                    best = Some((score, j));
                }
            } else if splittable && best.is_none() {
                // Seen from a free receiver, that receiver is free; seen
                // from the sender, the part started now is the receivers
                // free now. Either way the score is the other side's load
                // (for the sender, the free receiver first found).
                let score = if side == SEND {
                    job.receivers
                        .iter()
                        .find(|&&r| self.busy[RECV][r as usize].is_none())
                        .map(|&r| self.load[RECV][r as usize])
                } else {
                    Some(sender_load)
                };
                if let Some(score) = score {
                    if best_split.is_none_or(|(b, _)| score > b) && holds(self) {
                        best_split = Some((score, j));
                    }
                }
            }
        }
        self.cursor[side][v] = i as u32;
        if let Some((_, j)) = best {
            self.start(j as u32);
            return true;
        }
        if let Some((_, j)) = best_split {
            return self.split_and_start(j);
        }
        false
    }

    /// Splits a pending multicast job into the part whose receivers are free
    /// (started now) and the rest (pending). The sender's load grows by the
    /// remaining items.
    fn split_and_start(&mut self, j: usize) -> bool {
        let job = self.own(j);
        let free = |r: &u32| self.busy[RECV][*r as usize].is_none();
        let free_count = job.receivers.iter().filter(|r| free(r)).count();
        if free_count == 0 || free_count == job.receivers.len() {
            return false;
        }
        // The free receivers become a new job, started now; the original
        // job keeps the busy ones. Only the new part is registered, so a
        // split costs the receivers it serves, not the job's whole fanout;
        // the entries the served receivers still hold for the original job
        // are dropped when a scan finds them stale.
        let mut now = Job {
            receivers: SmallVec::with_capacity(free_count),
            paired: None,
            dests: SmallVec::with_capacity(free_count),
            sender: job.sender,
            len: job.len,
            origin: job.origin,
        };
        let mut keep = 0;
        let busy = &self.busy[RECV];
        let job = &mut self.own[j - self.first_own];
        for k in 0..job.receivers.len() {
            let (r, d) = (job.receivers[k], job.dests[k]);
            if busy[r as usize].is_none() {
                now.receivers.push(r);
                now.dests.push(d);
            } else {
                job.receivers[keep] = r;
                job.dests[keep] = d;
                keep += 1;
            }
        }
        job.receivers.truncate(keep);
        job.dests.truncate(keep);
        self.rt[j].index = 0;
        self.rt[j].node = job.receivers.first().copied().unwrap_or(MULTI);
        let rem = self.rt[j].rem;
        let offset = self.rt[j].offset;
        let sender = now.sender;
        self.load[SEND][sender as usize] += u64::from(rem);
        let id = (self.first_own + self.own.len()) as u32;
        let out = self.caller_jobs + self.own.len() as u32;
        let partner = match now.receivers.as_slice() {
            [r] => *r,
            _ => MULTI,
        };
        self.others[SEND][sender as usize].push((id, partner));
        for &r in &now.receivers {
            self.others[RECV][r as usize].push((id, sender));
        }
        let first_receiver = now.receivers.first().copied().unwrap_or(MULTI);
        self.own.push(now);
        self.rt.push(JobRt {
            since: 0,
            rem,
            offset,
            version: 0,
            sender,
            index: 0,
            node: first_receiver,
            out,
            state: State::Pending,
        });
        self.pending_count += 1;
        self.start(id);
        true
    }
}
