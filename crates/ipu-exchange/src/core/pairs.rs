//! The (sender, receiver) index of the core: where a unicast pair's first
//! job is, as a dense table for small machines and a hash map otherwise.

/// A multiply-shift hasher for the pair map: keys are already
/// well-spread `u64`s and the default hasher costs more than the lookup.
#[derive(Clone, Copy, Default)]
pub(super) struct PairHasher(u64);

impl std::hash::Hasher for PairHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (x ^ (x >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

pub(super) type PairMap =
    std::collections::HashMap<u64, u32, std::hash::BuildHasherDefault<PairHasher>>;

/// Up to this many nodes, the pair index is a dense table.
pub(super) const DENSE_PAIR_NODES: usize = 2048;

/// Where each pair's first job is. The dense table holds the job id plus
/// one, so that an empty table is zeroed memory: the allocator hands it
/// out without writing it, and a phase touches only the pages of the
/// pairs it has (the table has `nodes²` entries, megabytes on a whole
/// chip).
pub(super) enum PairIndex {
    Dense(Vec<u32>),
    Sparse(PairMap),
}

impl PairIndex {
    pub(super) fn insert(&mut self, nodes: usize, sender: u32, receiver: u32, job: u32) {
        match self {
            PairIndex::Dense(table) => {
                // A job id is below the number of jobs, which fits in u32.
                table[sender as usize * nodes + receiver as usize] = job.saturating_add(1);
            }
            PairIndex::Sparse(map) => {
                map.insert(pair_key(sender, receiver), job);
            }
        }
    }

    pub(super) fn get(&self, nodes: usize, sender: u32, receiver: u32) -> Option<u32> {
        match self {
            PairIndex::Dense(table) => table
                .get(sender as usize * nodes + receiver as usize)
                .copied()
                .and_then(|j| j.checked_sub(1)),
            PairIndex::Sparse(map) => map.get(&pair_key(sender, receiver)).copied(),
        }
    }
}

fn pair_key(sender: u32, receiver: u32) -> u64 {
    (u64::from(sender) << 32) | u64::from(receiver)
}
