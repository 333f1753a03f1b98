//! SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
//! generators", 2014): a small, fast, well-mixed deterministic generator.
//!
//! The workspace's one generator, for seeded test data and instance
//! generators: a seed fixes every value, on any machine and thread count.
//! It is not for anything that must be unpredictable.

/// A SplitMix64 generator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0). The modulo's bias is below
    /// `n / 2^64`, far under what test data notices.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// A number in `lo..=hi` (`lo` when `hi <= lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.next_u64() % span,
            // The whole u64 range.
            None => self.next_u64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn the_published_sequence() {
        // The first outputs for seed 1234567 (the reference implementation's
        // test vector).
        let mut rng = SplitMix64::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn ranges_stay_inside() {
        let mut rng = SplitMix64::new(9);
        for _ in 0..1000 {
            let v = rng.range(10, 20);
            assert!((10..=20).contains(&v));
            assert!(rng.below(7) < 7);
        }
        assert_eq!(rng.range(5, 5), 5);
        assert_eq!(rng.below(0), 0);
        let _ = rng.range(0, u64::MAX);
    }
}
