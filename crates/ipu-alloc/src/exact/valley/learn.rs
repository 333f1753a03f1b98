//! Failures remembered by region: a failed state's sections, not the
//! whole state, decide where it fails again.
//!
//! A failure carries the sections it depends on: it holds in any state
//! with the same skyline there and the same items placed among those
//! that cover them (`reasons.rs`). The memo of whole states only
//! finds a failure again in the very state it was met in, so a region
//! that failed is searched again whenever a region it does not touch is
//! arranged differently: after each restart, and wherever the search has
//! moved on elsewhere and come back. Here a failure is also remembered by
//! the state of a region around its sections alone.
//!
//! The regions are pairs of adjacent aligned blocks of sections, of `2^L`
//! sections each at level `L`, so any range of sections lies in the pair
//! of the smallest level that holds it, and each block keeps a digest of
//! its part of the state, kept up to date as items are placed and taken
//! back: the skyline and the holes below it in each of its sections, and
//! the unplaced items that cover any of them (which also fixes how much
//! of each section is hole, and so its slack). Two states with the same
//! digest of a pair agree on everything a failure within it reads.
//!
//! A placement changes the digests only of the blocks it covers, so a
//! pair it leaves alone was looked up before. A node looks up, at each
//! level that holds a failure, the pairs that hold either end of the last
//! placement: looking up every pair it meets cost a look-up per section
//! at the lowest levels and made nodes twice as slow for the same
//! verdicts (MiniMalloc's benchmark J, 409 buffers with slack: about
//! 31,000 nodes in 1.2 s, then 0.5 s, as before the memo; `cargo xtask
//! alloc bench` kept every verdict). Failures and regions share the memo
//! of whole states, with keys of their own.

use super::{Valley, mix};

/// The digests of every level's blocks.
#[derive(Debug, Default)]
pub(super) struct Regions {
    /// Per level `L`, per block `k` (sections `k << L ..`), its digest.
    blocks: Vec<Vec<u128>>,
    /// The levels at which a failure was remembered (a bit each).
    stored: u64,
}

/// The digest a block takes for item `hash` covering it: turned by the
/// block's index, so an item covering both blocks of a pair still counts.
fn item_in_block(hash: u128, k: usize) -> u128 {
    hash.rotate_left((k % 128) as u32)
}

impl Regions {
    /// Digests for `sections` sections, all empty.
    pub(super) fn new(sections: usize) -> Regions {
        let mut blocks = Vec::new();
        let mut level = 0;
        loop {
            blocks.push(vec![0u128; (sections >> level) + 1]);
            if sections >> level <= 1 {
                break;
            }
            level += 1;
        }
        Regions { blocks, stored: 0 }
    }

    /// Changes section `s`'s part of the digests by `delta`.
    pub(super) fn section(&mut self, s: usize, delta: u128) {
        for (level, blocks) in self.blocks.iter_mut().enumerate() {
            blocks[s >> level] ^= delta;
        }
    }

    /// Adds or removes an unplaced item of digest `hash` that covers
    /// sections `s0..s1`.
    pub(super) fn item(&mut self, hash: u128, s0: usize, s1: usize) {
        for (level, blocks) in self.blocks.iter_mut().enumerate() {
            let (first, last) = (s0 >> level, (s1 - 1) >> level);
            for (k, block) in blocks.iter_mut().enumerate().take(last + 1).skip(first) {
                *block ^= item_in_block(hash, k);
            }
        }
    }

    /// The levels of blocks: 1 section, 2, 4, ... up to all of them.
    #[cfg(test)]
    pub(super) fn levels(&self) -> usize {
        self.blocks.len()
    }

    /// The memo key of the pair of blocks `k` and `k + 1` at `level`.
    pub(super) fn key(&self, level: usize, k: usize) -> u128 {
        let blocks = &self.blocks[level];
        let pair = blocks[k] ^ blocks.get(k + 1).map_or(0, |b| b.rotate_left(64));
        mix(pair ^ mix(((level as u128) << 64 | k as u128) ^ 0x5ec7_1075))
    }

    /// The smallest level whose pair from `lo`'s block holds `lo..hi`,
    /// with that block.
    fn pair_of(&self, lo: usize, hi: usize) -> (usize, usize) {
        let last = hi.saturating_sub(1).max(lo);
        let level = (0..self.blocks.len())
            .find(|&l| (last >> l) - (lo >> l) <= 1)
            .unwrap_or(self.blocks.len() - 1);
        (level, lo >> level)
    }
}

impl Valley<'_> {
    /// Remembers that the current state fails for a reason within
    /// sections `lo..hi`.
    pub(super) fn remember_region(&mut self, (lo, hi): (u32, u32)) {
        if hi <= lo {
            return;
        }
        let (level, k) = self.regions.pair_of(lo as usize, hi as usize);
        self.regions.stored |= 1 << level.min(63);
        self.failed.insert(self.regions.key(level, k), (lo, hi));
    }

    /// A remembered failure whose region's state is the current one's, of
    /// the regions the last placement changed.
    pub(super) fn failed_region(&self) -> Option<(u32, u32)> {
        let (s0, s1) = self.recent?;
        let stored = self.regions.stored;
        (0..self.regions.blocks.len())
            .filter(|&level| stored >> level.min(63) & 1 == 1)
            .find_map(|level| {
                // The pairs that hold either end of the placement: at most
                // four a level, where every pair it meets would cost a
                // look-up per section at the lowest levels.
                let (first, last) = (s0 >> level, (s1.max(s0 + 1) - 1) >> level);
                let mut pairs = [first.saturating_sub(1), first, last.saturating_sub(1), last];
                pairs.sort_unstable();
                let mut previous = None;
                pairs.into_iter().find_map(|k| {
                    if previous.replace(k) == Some(k) {
                        return None;
                    }
                    self.failed.get(&self.regions.key(level, k)).copied()
                })
            })
    }
}
