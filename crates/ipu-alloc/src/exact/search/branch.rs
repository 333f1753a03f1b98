//! Where a node of the exact search branches, and on what.
//!
//! *Fill or close.* Take an open section `s0` at the lowest level `h`.
//! Every item still to place sits at or above `h`, so in a pushed-down
//! completion the byte at `h` in `s0` is either the bottom of an item
//! placed at `h` that covers `s0` (a *fill* child per such item), or it
//! stays empty (the *close* child). After a close every item covering `s0`
//! sits above `h`, on a support of its own: the top of an item still to
//! place (which sits at or above `h`) or an edge of its windows and
//! obstacles ([`Search::support_from`]). So `s0` is empty up to the lowest
//! of those supports; the close raises its level there, and the floors of
//! the items covering it. A section without slack has no close child (the
//! forced point): its bytes are all needed. The section with the fewest
//! children is chosen (ties: the leftmost), so a section with one child is
//! an inference, not a choice, and one with none fails the node.
//!
//! The same section rule without the close child, used only where a
//! section has no slack, is the forced point of the canonical runs.

use super::{CLOSED, Child, NO_TWIN, Search, Undo, key_rank, unpack};
use crate::greedy::UNPLACED;

impl Search<'_> {
    /// Whether item `k` may be placed now at the lowest level `level`: it
    /// sits there, belongs to some tiling of its valley, and is the first
    /// unplaced one of its interchangeable twins.
    fn fills_at(&self, k: usize, level: u64) -> bool {
        let twin = self.p.twin_prev[k];
        self.pos[k] == level
            && self.viable(k)
            && (twin == NO_TWIN || self.offsets[twin as usize] != UNPLACED)
    }

    /// Whether leaving section `s` empty at `level` can still fit: it has
    /// slack, or the byte there is blocked anyway.
    fn may_close(&self, s: usize, level: u64) -> bool {
        self.free_above(s, level) > self.rem[s] || self.blocked_at(s, level)
    }

    /// Fill-or-close children: the fills in `children`, the close (section
    /// and new level) in `close`. `false` if there is neither.
    pub(super) fn section_children(
        &mut self,
        level: u64,
        order: &[u128],
        children: &mut Vec<Child>,
        close: &mut Option<(usize, u64)>,
    ) -> bool {
        for i in 0..self.lowest.len() {
            let s = self.lowest[i] as usize;
            self.count[s] = 0;
        }
        // `order` is by release address, and no item is released below the
        // lowest level.
        for &key in order {
            let (at, k) = unpack(key);
            if at > level {
                break;
            }
            if self.fills_at(k, level) {
                for s in self.p.start[k]..self.p.end[k] {
                    self.count[s as usize] += 1;
                }
            }
        }
        let mut s0 = usize::MAX;
        let mut best = u32::MAX;
        for &s in &self.lowest {
            let s = s as usize;
            let branches = self.count[s] + u32::from(self.may_close(s, level));
            if branches < best {
                (best, s0) = (branches, s);
                if !self.style.fewest || best <= 1 {
                    break;
                }
            }
        }
        if best == 0 || s0 == usize::MAX {
            return false;
        }
        for &key in order {
            let (at, k) = unpack(key);
            if at > level {
                break;
            }
            let covers = (self.p.start[k] as usize) <= s0 && s0 < self.p.end[k] as usize;
            if covers && self.fills_at(k, level) {
                children.push((level, key_rank(key), k as u32));
            }
        }
        self.sort_children(level, children);
        if self.may_close(s0, level) {
            *close = self.close_level(s0, level, order).map(|to| (s0, to));
        }
        !children.is_empty() || close.is_some()
    }

    /// The level section `s0` rises to when it stays empty at `level`: the
    /// lowest address above `level` any item covering it can sit at.
    /// `None` if some item covering it has none (it must fill `s0` at
    /// `level`).
    fn close_level(&mut self, s0: usize, level: u64, order: &[u128]) -> Option<u64> {
        let mut to = u64::MAX;
        for &key in order {
            let (at, k) = unpack(key);
            if !((self.p.start[k] as usize) <= s0 && s0 < self.p.end[k] as usize) {
                continue;
            }
            let lowest = self.pos[k].max(at);
            let above = if lowest > level {
                lowest
            } else {
                self.support_from(k, level, level.checked_add(1)?)?
            };
            to = to.min(above);
        }
        (to != u64::MAX).then_some(to)
    }

    /// Leaves section `s0` empty up to `to`: its level and the floors of
    /// the items covering it rise there. The open items are the order of
    /// the node at `depth`.
    pub(super) fn close(&mut self, depth: usize, s0: usize, to: u64) {
        self.history.push(Undo {
            item: CLOSED,
            last: self.last,
            last_rank: self.last_rank,
            sky_mark: self.sky_trail.len(),
            floor_mark: self.floor_trail.len(),
        });
        if self.sky[s0] < to {
            self.sky_trail.push((s0 as u32, self.sky[s0]));
            self.sky[s0] = to;
        }
        for i in 0..self.orders[depth].len() {
            let (_, k) = unpack(self.orders[depth][i]);
            let covers = (self.p.start[k] as usize) <= s0 && s0 < self.p.end[k] as usize;
            if covers && self.offsets[k] == UNPLACED && self.floor[k] < to {
                self.floor_trail.push((k as u32, self.floor[k]));
                self.floor[k] = to;
            }
        }
        self.stats.closed += 1;
    }

    /// Children when a section at `level` has no slack: the items at
    /// `level` covering the chosen tight section, in rank order. `false` if
    /// none exists.
    pub(super) fn forced_children(
        &mut self,
        level: u64,
        order: &[u128],
        children: &mut Vec<Child>,
    ) -> bool {
        let s0 = if self.style.fewest && self.tight.len() > 1 {
            for &s in &self.tight {
                self.count[s as usize] = 0;
            }
            for &key in order {
                let (_, ku) = unpack(key);
                if self.pos[ku] != level || !self.viable(ku) {
                    continue;
                }
                for s in self.p.start[ku]..self.p.end[ku] {
                    self.count[s as usize] += 1;
                }
            }
            let mut best = (u32::MAX, 0usize);
            for &s in &self.tight {
                let c = self.count[s as usize];
                if c < best.0 {
                    best = (c, s as usize);
                }
            }
            best.1
        } else {
            self.tight[0] as usize
        };
        for &key in order {
            let (at, ku) = unpack(key);
            let (rank, k) = (key_rank(key), ku as u32);
            if at > level {
                break;
            }
            let (a, b) = (self.p.start[ku] as usize, self.p.end[ku] as usize);
            if self.pos[ku] != level || s0 < a || s0 >= b || !self.viable(ku) {
                continue;
            }
            let twin = self.p.twin_prev[ku];
            if twin == NO_TWIN || self.offsets[twin as usize] != UNPLACED {
                children.push((level, rank, k));
            }
        }
        self.sort_children(level, children);
        !children.is_empty()
    }

    /// Puts first the children whose top meets a neighbour's level: they
    /// leave the skyline flat, as the pieces of a cut do. Then rank.
    fn sort_children(&self, level: u64, children: &mut [Child]) {
        if self.style.flush {
            children.sort_by_key(|c| (!self.top_meets(level, c.2 as usize), c.1));
        }
    }

    /// Whether item `k` placed at `at` has its top at the level of a
    /// section next to its lifetime.
    fn top_meets(&self, at: u64, k: usize) -> bool {
        let top = at.saturating_add(self.p.size[k]);
        let (a, b) = (self.p.start[k] as usize, self.p.end[k] as usize);
        let meets = |x: usize| self.rem[x] > 0 && self.sky[x].max(self.last) == top;
        a.checked_sub(1).is_some_and(meets) || (b < self.p.sections && meets(b))
    }
}
