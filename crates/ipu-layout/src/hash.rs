//! A fast hasher for the planner's internal maps, whose keys are small
//! integers or hashes already (fragment runs, row digests) and which are
//! looked up, never iterated for output: a multiply-rotate fold, far
//! cheaper than the standard library's SipHash, which the planners'
//! hottest maps spent a visible share of a build in. Output never depends
//! on it; only lookups do.

use std::hash::{BuildHasherDefault, Hasher};

/// Folds each written integer into the state with a rotation and a
/// multiply by an odd constant near `2^64 / φ`.
#[derive(Clone, Copy, Debug, Default)]
pub struct FoldHasher(u64);

/// Builds [`FoldHasher`]s, for `HashMap::default()`.
pub type FoldBuildHasher = BuildHasherDefault<FoldHasher>;

impl FoldHasher {
    fn add(&mut self, x: u64) {
        // The rotation keeps earlier fields from cancelling later ones.
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        // Mix the high bits down: the table indexes by the low ones.
        self.0 ^ (self.0 >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }
    fn write_u32(&mut self, x: u32) {
        self.add(u64::from(x));
    }
    fn write_u64(&mut self, x: u64) {
        self.add(x);
    }
    fn write_usize(&mut self, x: usize) {
        self.add(x as u64);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Keys of several small fields land in many buckets (the low bits of
    /// the hash differ), and the map finds every key again.
    #[test]
    fn small_integer_keys_spread() {
        let mut map: HashMap<(u32, u32, u32), u32, FoldBuildHasher> = HashMap::default();
        let mut low_bits = std::collections::HashSet::new();
        for a in 0..16u32 {
            for b in 0..16u32 {
                let key = (a, b, a ^ b);
                let mut h = FoldHasher::default();
                std::hash::Hash::hash(&key, &mut h);
                low_bits.insert(h.finish() & 1023);
                map.insert(key, a * 16 + b);
            }
        }
        assert!(
            low_bits.len() > 200,
            "{} distinct low-bit patterns",
            low_bits.len()
        );
        for a in 0..16u32 {
            for b in 0..16u32 {
                assert_eq!(map[&(a, b, a ^ b)], a * 16 + b);
            }
        }
    }
}
