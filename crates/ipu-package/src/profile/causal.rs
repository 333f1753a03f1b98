//! The cost of a causal attention block: its rows see different numbers
//! of keys ([`AttentionMask::visible_keys`]), so its busiest worker and
//! its (query row, key) pairs are counted row by row or in closed form.
//! The estimate and the tile model's count both go through these, from
//! the same [`super::Work`].

use crate::graph::AttentionMask;

/// Query rows up to which a causal attention block's cost is counted row
/// by row; more than a tile's memory holds, so past it only a hostile
/// package's block, whose unmasked cost bounds it.
pub(super) const MAX_COUNTED_CAUSAL_ROWS: u64 = 1 << 18;

/// Cycles of the busiest worker of a causal attention block: rows go to
/// the `workers` round-robin (row `r` to worker `r mod workers`), row `r`
/// costing `row_cycles` of its visible keys
/// ([`AttentionMask::visible_keys`]).
pub(super) fn causal_busiest(
    q_rows: u64,
    kv_rows: u64,
    diagonal: i64,
    workers: u64,
    row_cycles: impl Fn(u64) -> u64,
) -> u64 {
    let workers = workers.max(1);
    let mut busiest = 0u64;
    for first in 0..workers.min(q_rows) {
        let mut sum = 0u64;
        let mut r = first;
        while r < q_rows {
            let keys = AttentionMask::visible_keys(Some(diagonal), r, kv_rows);
            sum = sum.saturating_add(row_cycles(keys));
            r = r.saturating_add(workers);
        }
        busiest = busiest.max(sum);
    }
    busiest
}

/// The (query row, key) pairs a block computes: every pair unmasked, else
/// `Σ_r visible_keys(r)` in closed form.
pub(super) fn visible_pairs(q_rows: u64, kv_rows: u64, diagonal: Option<i64>) -> u64 {
    let Some(d) = diagonal else {
        return q_rows.saturating_mul(kv_rows);
    };
    // Row r sees clamp(r + a, 0, kv) keys with a = d + 1: none before row
    // `lo`, r + a from `lo` to `hi`, all from `hi` on.
    let (q, kv, a) = (i128::from(q_rows), i128::from(kv_rows), i128::from(d) + 1);
    let lo = (1 - a).clamp(0, q);
    let hi = (kv - a).clamp(lo, q);
    let n = hi - lo;
    let total = n
        .checked_mul(lo + hi - 1)
        .map(|x| x / 2)
        .and_then(|x| x.checked_add(n.checked_mul(a)?))
        .and_then(|x| x.checked_add((q - hi).checked_mul(kv)?));
    total
        .and_then(|t| u64::try_from(t).ok())
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_pairs_in_closed_form_equal_the_row_sum() {
        for (q, kv) in [(0u64, 0u64), (1, 1), (5, 5), (4, 9), (9, 4)] {
            for d in -12i64..12 {
                let sum: u64 = (0..q)
                    .map(|r| AttentionMask::visible_keys(Some(d), r, kv))
                    .sum();
                assert_eq!(visible_pairs(q, kv, Some(d)), sum, "q {q} kv {kv} d {d}");
            }
            assert_eq!(visible_pairs(q, kv, None), q * kv);
        }
    }

    #[test]
    fn the_busiest_worker_takes_every_workers_th_row() {
        // Rows 0..7 see 1..=7 keys; costing a row by its keys, worker 0 of
        // 3 takes rows 0, 3, 6: 1 + 4 + 7 keys.
        assert_eq!(causal_busiest(7, 7, 0, 3, |k| k), 12);
        // Fewer rows than workers: the longest row.
        assert_eq!(causal_busiest(2, 8, 0, 6, |k| k), 2);
    }
}
