//! The (sender, receiver) index of the core: which pair, if any, two nodes
//! form, as a bit set of each sender's receivers with a running count.
//!
//! Pairs are numbered in (sender, receiver) order, so the pair of a
//! sender and receiver is the number of pairs before the receiver's block
//! of 64 plus the receivers below it in the block: one 16-byte entry per
//! sender and 64 receivers, read once per look-up. On a whole chip it is
//! about a sixteenth of a table of `nodes²` ids, whose look-ups (one per
//! job start) missed the caches.

/// Per sender and block of 64 receivers: the receivers it has a pair with,
/// and the id of the first of those pairs.
#[derive(Clone, Copy, Debug, Default)]
struct Block {
    receivers: u64,
    first: u32,
}

/// Where each (sender, receiver) pair is.
#[derive(Debug)]
pub(super) struct PairIndex {
    /// Blocks per sender.
    words: usize,
    blocks: Vec<Block>,
    /// Pairs inserted so far.
    len: u32,
}

impl PairIndex {
    /// An empty index of `nodes` senders and receivers.
    pub(super) fn new(nodes: usize) -> PairIndex {
        let words = nodes.div_ceil(64);
        PairIndex {
            words,
            blocks: vec![Block::default(); nodes * words],
            len: 0,
        }
    }

    /// Adds the next pair, which comes after every pair added so far in
    /// (sender, receiver) order, and returns its id.
    pub(super) fn push(&mut self, sender: u32, receiver: u32) -> u32 {
        let id = self.len;
        let block = &mut self.blocks[sender as usize * self.words + receiver as usize / 64];
        let bit = 1u64 << (receiver % 64);
        debug_assert!(block.receivers < bit, "pairs come in order");
        if block.receivers == 0 {
            block.first = id;
        }
        block.receivers |= bit;
        self.len += 1;
        id
    }

    /// The id of the pair of `sender` and `receiver` (nodes of the index),
    /// if they form one.
    pub(super) fn get(&self, sender: u32, receiver: u32) -> Option<u32> {
        let block = self
            .blocks
            .get(sender as usize * self.words + receiver as usize / 64)?;
        let bit = 1u64 << (receiver % 64);
        (block.receivers & bit != 0)
            .then(|| block.first + (block.receivers & (bit - 1)).count_ones())
    }
}

#[cfg(test)]
mod tests {
    use super::PairIndex;

    #[test]
    fn every_pair_is_found_under_its_id_and_no_other_is() {
        let nodes = 150u32;
        // A fixed pseudo-random set of pairs, in (sender, receiver) order.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut pairs = Vec::new();
        for s in 0..nodes {
            for r in 0..nodes {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                if state % 5 == 0 {
                    pairs.push((s, r));
                }
            }
        }
        let mut index = PairIndex::new(nodes as usize);
        for (id, &(s, r)) in pairs.iter().enumerate() {
            assert_eq!(index.push(s, r), id as u32);
        }
        for s in 0..nodes {
            for r in 0..nodes {
                let want = pairs.binary_search(&(s, r)).ok().map(|i| i as u32);
                assert_eq!(index.get(s, r), want, "pair ({s}, {r})");
            }
        }
        assert_eq!(index.get(nodes, 0), None, "a sender beyond the nodes");
    }
}
