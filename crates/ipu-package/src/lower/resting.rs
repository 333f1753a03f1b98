//! Where GEMM weights rest between uses, chosen against the weights already
//! resting.
//!
//! A GEMM whose grid has several row blocks receives its weights by
//! exchange from where they rest, so any resting tiling with the smallest
//! largest shard serves it equally ([`resting_candidates`]). Which one
//! matters for memory: a layer's weights rest for the whole run, once per
//! iteration of a repeated layer, and each GEMM's ragged split puts its
//! larger shards on some tiles. Taken alone, every GEMM of a SigLIP layer
//! puts them on the same tiles: 12 KiB a layer where the average is about
//! 10 KiB, and 11 can be had. The lowering therefore keeps the bytes at
//! rest per tile and gives each new GEMM's weights the candidate and
//! rotation that leave the fullest tile lowest, then the fewest tiles at
//! that level: on SigLIP b2 the fullest tile rests 322,304 bytes where it
//! rested 351,696 (docs/PROFILE.md, "Resting weights, balanced").

use super::*;
use crate::plan::{GemmGrid, GemmProblem, resting_candidates, rotated};

/// Bytes of weights at rest on each tile so far, counting a repeated
/// layer's weights once per iteration.
#[derive(Clone, Debug)]
pub(super) struct RestingBytes {
    per_tile: Vec<u64>,
}

impl RestingBytes {
    pub(super) fn new(tiles: u32) -> Self {
        Self {
            per_tile: vec![0; tiles as usize],
        }
    }

    /// Adds the shards of `ty`, `copies` times each.
    pub(super) fn add(&mut self, ty: &TensorType, copies: u64) {
        for s in ty.shards() {
            if let Some(b) = self.per_tile.get_mut(s.tile.as_u32() as usize) {
                *b = b.saturating_add(s.bytes.saturating_mul(copies));
            }
        }
    }

    /// The tile with the most bytes at rest (the lowest such), and its bytes.
    pub(super) fn fullest(&self) -> (usize, u64) {
        let mut fullest = (0, 0);
        for (tile, &bytes) in self.per_tile.iter().enumerate() {
            if bytes > fullest.1 {
                fullest = (tile, bytes);
            }
        }
        fullest
    }

    /// The fullest tile's bytes and how many tiles hold that much, with
    /// `shard_bytes[t]` more on tile `(t + rotation) % shard_bytes.len()`;
    /// `None` as soon as the fullest exceeds `limit`.
    fn fullest_with(&self, shard_bytes: &[u64], rotation: usize, limit: u64) -> Option<(u64, u32)> {
        let count = shard_bytes.len();
        let mut fullest = (0u64, 0u32);
        let mut take = |bytes: u64| {
            if bytes > fullest.0 {
                fullest = (bytes, 1);
            } else if bytes == fullest.0 {
                fullest.1 += 1;
            }
            bytes <= limit
        };
        for (t, &extra) in shard_bytes.iter().enumerate() {
            let tile = (t + rotation) % count;
            let here = self.per_tile.get(tile).copied().unwrap_or(0);
            if !take(here.saturating_add(extra)) {
                return None;
            }
        }
        for &here in self.per_tile.iter().skip(count) {
            if !take(here) {
                return None;
            }
        }
        Some(fullest)
    }

    /// Among `candidates` (unrotated types, each with its shards' bytes per
    /// tile, `copies` times), the index and rotation that leave the fewest
    /// bytes on the fullest tile, then the fewest tiles that full; the
    /// earliest candidate and lowest rotation on ties.
    fn best(&self, candidates: &[Vec<u64>], copies: u64) -> Option<(usize, usize)> {
        let mut best: Option<((u64, u32), usize, usize)> = None;
        for (i, bytes) in candidates.iter().enumerate() {
            let scaled: Vec<u64> = bytes.iter().map(|b| b.saturating_mul(copies)).collect();
            for rotation in 0..scaled.len() {
                let limit = best.map_or(u64::MAX, |(key, _, _)| key.0);
                let Some(key) = self.fullest_with(&scaled, rotation, limit) else {
                    continue;
                };
                if best.is_none_or(|(b, _, _)| key < b) {
                    best = Some((key, i, rotation));
                }
            }
        }
        best.map(|(_, i, rotation)| (i, rotation))
    }
}

impl Lowerer<'_> {
    /// How many copies of a weight tensor rest: a repeated layer's own
    /// weights once per iteration, any other weight once.
    pub(super) fn resting_copies(&self, tensor: TensorId) -> u64 {
        match self.body {
            Some(r) if matches!(r.locate_tensor(tensor), Some((0, _))) => u64::from(r.count()),
            _ => 1,
        }
    }

    /// The type GEMM weights `right` rest in when the GEMM on `grid` copies
    /// them to its row blocks: the resting candidate and rotation that keep
    /// the tiles' resting bytes most even (see the module header), or
    /// `fallback` (the plan's own) when rotations are off or the weights
    /// already rest somewhere.
    pub(super) fn balanced_resting(
        &self,
        right: TensorId,
        problem: &GemmProblem,
        grid: GemmGrid,
        fallback: &TensorType,
    ) -> Result<TensorType, LowerError> {
        if grid.pm == 1 || !self.config.rotate || self.home.contains_key(&right) {
            return Ok(fallback.clone());
        }
        let what = || format!("resting weights {}", self.graph.tensor(right).name());
        let candidates = self.layout(what(), resting_candidates(problem, grid))?;
        let bytes: Vec<Vec<u64>> = candidates
            .iter()
            .map(|ty| ty.shards().map(|s| s.bytes).collect())
            .collect();
        let Some((i, rotation)) = self.resting.best(&bytes, self.resting_copies(right)) else {
            return Ok(fallback.clone());
        };
        self.layout(what(), rotated(&candidates[i], rotation as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ragged weights whose larger shards would meet on the same tiles
    /// rest apart, and the choice is the lowest rotation that does it.
    #[test]
    fn larger_shards_rest_on_different_tiles() {
        let mut resting = RestingBytes::new(4);
        resting.per_tile = vec![3, 3, 2, 2];
        // One candidate whose first two tiles take more.
        let candidates = vec![vec![3, 3, 2, 2]];
        assert_eq!(resting.best(&candidates, 1), Some((0, 2)));
        // Per-iteration copies scale the shards, not the choice here.
        assert_eq!(resting.best(&candidates, 27), Some((0, 2)));
        // A candidate on fewer tiles leaves the others as they are.
        let candidates = vec![vec![4, 4, 4], vec![2, 2, 3, 3]];
        assert_eq!(resting.best(&candidates, 1), Some((1, 0)));
        assert_eq!(
            resting.fullest_with(&candidates[1], 0, u64::MAX),
            Some((5, 4))
        );
        assert_eq!(resting.fullest_with(&candidates[0], 0, 6), None);
        assert_eq!(resting.fullest(), (0, 3));
    }
}
