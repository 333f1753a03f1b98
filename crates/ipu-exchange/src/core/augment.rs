//! Covering a free critical node: a short look, then an alternating path
//! that moves running unicast jobs (one preemption per move), then a full
//! look.

use smallvec::SmallVec;

use super::{Core, SEND};

/// Jobs a critical node looks at before searching alternating paths.
const CRITICAL_LOOK: usize = 64;

impl Core {
    /// Covers a free critical node: a short look, then an alternating path
    /// over unicast jobs, then a full look (which also finds multicast jobs
    /// and fanout splits).
    pub(super) fn cover(&mut self, side: usize, v: usize) -> bool {
        let split = u64::from(self.config.fanout_split);
        self.try_start(side, v, split, CRITICAL_LOOK)
            || self.augment(side, v)
            || self.try_start(side, v, split, usize::MAX)
    }

    /// Covers the free critical node `v` by an alternating path over
    /// running unicast jobs. Returns whether it succeeded.
    fn augment(&mut self, side: usize, v: usize) -> bool {
        let other = 1 - side;
        self.mark_epoch = self.mark_epoch.wrapping_add(1);
        if self.mark_epoch == 0 {
            for m in &mut self.mark {
                m.iter_mut().for_each(|x| *x = 0);
            }
            self.mark_epoch = 1;
        }
        let epoch = self.mark_epoch;
        // BFS over nodes on `side`. parent[k] = (node index in queue of the
        // predecessor, job taken by the node at k's predecessor...).
        // Each queue entry: (node, job it will give up (running), parent entry, job the parent takes).
        struct Entry {
            node: usize,
            parent: usize,
            take: u32,
        }
        let mut queue: Vec<Entry> = vec![Entry {
            node: v,
            parent: usize::MAX,
            take: u32::MAX,
        }];
        self.mark[side][v] = epoch;
        let mut head = 0;
        // The end of the path: (queue index of the node that takes the last
        // job, the job, whether the partner is displaced (Some(running job))).
        let mut found: Option<(usize, u32)> = None;
        while head < queue.len() && found.is_none() {
            if queue.len() > self.config.path_search_limit {
                break;
            }
            let x = queue[head].node;
            let words = self.words;
            // Partners with unicast work left, from the bit set: a node's
            // job list also holds multicast and finished jobs, and scanning
            // it at every step of a search costs more than the search.
            'partners: for w in 0..words {
                let mut m = self.partner_bits[side][x * words + w];
                while m != 0 {
                    let partner = w * 64 + m.trailing_zeros() as usize;
                    m &= m - 1;
                    if self.mark[other][partner] == epoch {
                        continue;
                    }
                    let (sender, receiver) = if side == SEND {
                        (x as u32, partner as u32)
                    } else {
                        (partner as u32, x as u32)
                    };
                    // A pending job of the pair (the running one, if any,
                    // is the job `x` gives up, and is Active).
                    let Some(j) = self.pending_of_pair(sender, receiver) else {
                        continue;
                    };
                    self.mark[other][partner] = epoch;
                    match self.busy[other][partner] {
                        None => {
                            found = Some((head, j));
                            break 'partners;
                        }
                        Some(f) => {
                            let fu = f as usize;
                            if fu >= self.first_own {
                                continue;
                            }
                            let y = if side == SEND {
                                self.rt[fu].sender as usize
                            } else {
                                self.rt[fu].node as usize
                            };
                            if self.mark[side][y] == epoch {
                                continue;
                            }
                            self.mark[side][y] = epoch;
                            queue.push(Entry {
                                node: y,
                                parent: head,
                                take: j,
                            });
                            if !self.is_critical(side, y) {
                                // y can give up its job and stay idle.
                                found = Some((queue.len() - 1, u32::MAX));
                                break 'partners;
                            }
                        }
                    }
                }
            }
            head += 1;
        }
        let Some((mut at, mut take)) = found else {
            return false;
        };
        // Walk back: the node at `at` takes `take` (if any) after giving up
        // its running job; its parent takes queue[at].take, and so on.
        let mut to_stop: SmallVec<[u32; 8]> = SmallVec::new();
        let mut to_start: SmallVec<[u32; 8]> = SmallVec::new();
        loop {
            if take != u32::MAX {
                to_start.push(take);
            }
            if at != 0 {
                if let Some(f) = self.busy[side][queue[at].node] {
                    to_stop.push(f);
                }
            }
            if at == 0 {
                break;
            }
            take = queue[at].take;
            at = queue[at].parent;
        }
        for &f in &to_stop {
            self.stop(f);
        }
        for &j in &to_start {
            self.start(j);
        }
        true
    }
}
