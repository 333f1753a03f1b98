//! The pruning tests of a search node that look at the whole part: the
//! valley tiling test, the release-time bound and the well test. Each
//! returns `false` only when no completion of the node exists; see the
//! header of `search.rs` for the argument behind each.

use super::{Search, unpack};
use crate::greedy::UNPLACED;

impl Search<'_> {
    /// The valley test. Take a maximal run `[a, b)` of open sections at one
    /// level `h` whose neighbours are higher or finished (a valley; every
    /// run at the lowest level is one). No item still to place can cover a
    /// byte of the run below `h`, so in each of its sections the byte at `h`
    /// is either the bottom of an item placed at `h` or left empty, which
    /// needs slack unless the byte is blocked. Items at `h` lie wholly inside the valley and cannot
    /// overlap in time: their lifetimes, with the slack sections, must tile
    /// `[a, b)`. A forward and a backward pass over the run decide whether
    /// a tiling exists and which items belong to one ([`Self::viable`]).
    pub(super) fn valleys_ok(&mut self, lo: usize, hi: usize) -> bool {
        let level_at = |this: &Self, x: usize| {
            if this.rem[x] == 0 {
                u64::MAX
            } else {
                this.sky[x].max(this.last)
            }
        };
        let mut s = lo;
        while s < hi {
            let h = level_at(self, s);
            if h == u64::MAX {
                s += 1;
                continue;
            }
            let a = s;
            while s < hi && level_at(self, s) == h {
                s += 1;
            }
            let b = s;
            let walled =
                (a == lo || level_at(self, a - 1) > h) && (b == hi || level_at(self, b) > h);
            if !walled {
                continue;
            }
            if !self.tile_run(a, b, h) {
                return false;
            }
        }
        true
    }

    /// The two passes of the valley test over the run `[a, b)` at `h`.
    fn tile_run(&mut self, a: usize, b: usize, h: u64) -> bool {
        self.fwd[a..=b].fill(false);
        self.bwd[a..=b].fill(false);
        self.fwd[a] = true;
        for x in a..b {
            if !self.fwd[x] {
                continue;
            }
            if self.may_skip(x, h) {
                self.fwd[x + 1] = true;
            }
            for &k in &self.p.by_start[x] {
                let ku = k as usize;
                let e = self.p.end[ku] as usize;
                if e <= b && self.offsets[ku] == UNPLACED && self.pos[ku] == h {
                    self.fwd[e] = true;
                }
            }
        }
        if !self.fwd[b] {
            return false;
        }
        self.bwd[b] = true;
        for x in (a..b).rev() {
            let mut r = self.bwd[x + 1] && self.may_skip(x, h);
            if !r {
                for &k in &self.p.by_start[x] {
                    let ku = k as usize;
                    let e = self.p.end[ku] as usize;
                    if e <= b && self.bwd[e] && self.offsets[ku] == UNPLACED && self.pos[ku] == h {
                        r = true;
                        break;
                    }
                }
            }
            self.bwd[x] = r;
        }
        true
    }

    /// Whether no item needs to start at `h` in section `x`: it has slack
    /// to leave that byte empty, or the byte is blocked anyway.
    fn may_skip(&self, x: usize, h: u64) -> bool {
        self.free_above(x, h) > self.rem[x] || self.blocked_at(x, h)
    }

    /// Whether item `k`, placed at the lowest level, is part of some tiling
    /// of its run (valid after [`Self::valleys_ok`] for items at that level).
    pub(super) fn viable(&self, k: usize) -> bool {
        self.fwd[self.p.start[k] as usize] && self.bwd[self.p.end[k] as usize]
    }

    /// The release-time bound over every section of the part: items are
    /// stacked in release order, each on its lifetime's sections (a slice,
    /// which the compiler vectorises).
    pub(super) fn release_ok(&mut self, lo: usize, hi: usize, order: &[u128]) -> bool {
        let tops = &mut self.tops[lo..hi];
        tops.fill(0);
        for &key in order {
            let (at, k) = unpack(key);
            let size = self.p.size[k];
            let (a, b) = (self.p.start[k] as usize - lo, self.p.end[k] as usize - lo);
            for t in &mut tops[a..b] {
                *t = (*t).max(at).saturating_add(size);
            }
        }
        let limit = self.p.limit;
        tops.iter().all(|&t| t <= limit)
    }

    /// The well test. Take a maximal run of open sections at one level `h`
    /// whose neighbours are higher (the lower neighbour at `n`). A byte of
    /// the run at a height in `[h, n)` can only be covered by an item whose
    /// whole lifetime lies inside the run: anything reaching a neighbour
    /// sits at or above `n`. So in every section of the run, the items
    /// contained in the run plus the section's slack must cover the
    /// unblocked bytes of `[h, n)`.
    pub(super) fn wells_ok(&mut self, lo: usize, hi: usize, open: &[u32]) -> bool {
        let sections = self.p.sections;
        let limit = self.p.limit;
        self.level.clear();
        for s in 0..sections {
            self.level.push(if self.rem[s] == 0 || s < lo || s >= hi {
                u64::MAX
            } else {
                self.sky[s].max(self.last)
            });
        }
        self.run_of.clear();
        self.runs.clear();
        for s in 0..sections {
            let h = self.level[s];
            if h == u64::MAX {
                self.run_of.push(u32::MAX);
                continue;
            }
            if s > 0 && self.level[s - 1] == h {
                let r = self.runs.len() - 1;
                self.runs[r].1 = s + 1;
                self.run_of.push(r as u32);
            } else {
                self.run_of.push(self.runs.len() as u32);
                self.runs.push((s, s + 1, h, 0));
            }
        }
        let mut any_well = false;
        for r in 0..self.runs.len() {
            let (a, b, h, _) = self.runs[r];
            let left = if a > 0 { self.level[a - 1] } else { u64::MAX };
            let right = if b < sections {
                self.level[b]
            } else {
                u64::MAX
            };
            let n = left.min(right).min(limit);
            self.runs[r].3 = n;
            any_well |= n > h;
        }
        if !any_well {
            return true;
        }
        self.contained.clear();
        self.contained.resize(sections, 0);
        for &k in open {
            let ku = k as usize;
            let (st, en) = (self.p.start[ku] as usize, self.p.end[ku] as usize);
            let r = self.run_of[st];
            if r == u32::MAX || self.run_of[en - 1] != r {
                continue;
            }
            let (_, _, h, n) = self.runs[r as usize];
            if n <= h {
                continue;
            }
            for s in st..en {
                self.contained[s] += self.p.size[ku];
            }
        }
        for r in 0..self.runs.len() {
            let (a, b, h, n) = self.runs[r];
            if n <= h {
                continue;
            }
            for s in a..b {
                let need = (n - h).saturating_sub(self.blocked_between(s, h, n));
                let slack = self.free_above(s, h) - self.rem[s];
                if self.contained[s].saturating_add(slack) < need {
                    return false;
                }
            }
        }
        true
    }
}
