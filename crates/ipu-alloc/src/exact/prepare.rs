//! The static part of an exact search: everything about an arena that no
//! decision changes, computed once and shared by every run of the
//! portfolio.
//!
//! Free items get dense local indices `0..m` so that the search's hot
//! arrays are small and contiguous; fixed items become per-item obstacles
//! (`statics`) and per-section blocked bytes; time overlaps between free
//! items become a compressed adjacency list, which lets the search keep each
//! item's floor up to date in time proportional to its neighbours.

use smallvec::SmallVec;

use super::search::Cut;
use crate::arena::{Arena, TimeIndex, merge_intervals};

/// The most adjacency entries the search keeps (64 MiB of `u32`); larger
/// problems are not searched exactly.
pub(super) const MAX_ADJACENCY: usize = 16 << 20;

/// A static branching order: which keys, compared in turn (largest first),
/// rank the items. The rank breaks ties between items at the same address
/// and orders the children of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Preorder {
    /// Length of the lifetime, area, then the largest section total.
    LengthAreaTotal,
    /// Largest section total, area, then length.
    TotalAreaLength,
    /// Largest section total, length, then area.
    TotalLengthArea,
    /// Size, then the latest end.
    SizeEnd,
}

/// Static data of one arena orientation.
#[derive(Debug)]
pub(super) struct Prepared {
    /// Arena index of every free item.
    pub ids: Vec<u32>,
    /// Arena items that take no decision (never live or empty).
    pub trivial: Vec<u32>,
    pub start: Vec<u32>,
    pub end: Vec<u32>,
    pub size: Vec<u64>,
    pub align: Vec<u64>,
    /// Window set index per free item.
    pub windows: Vec<u32>,
    /// Separation partners, as local indices.
    pub partners: Vec<SmallVec<[u32; 2]>>,
    /// Whether any free item has a partner.
    pub any_partners: bool,
    /// Fixed items live at the same time as the item, merged.
    pub statics: Vec<Vec<(u64, u64)>>,
    /// Per section: bytes no free item may use (outside every window, or
    /// under a fixed item), merged, and suffix sums of their lengths.
    pub blocked: Vec<Vec<(u64, u64)>>,
    pub blocked_suffix: Vec<Vec<u64>>,
    /// Time-overlap neighbours (compressed rows).
    pub adj_start: Vec<u32>,
    pub adj: Vec<u32>,
    /// Free items by first section.
    pub by_start: Vec<Vec<u32>>,
    /// The previous interchangeable item (same lifetime, size, alignment,
    /// windows, no partners), or `NO_TWIN`.
    pub twin_prev: Vec<u32>,
    /// Per free item: the largest total of free bytes live in any of its
    /// sections (the "total" key).
    pub total: Vec<u64>,
    /// Number of sections.
    pub sections: usize,
    /// Section start times (see [`Arena::times`]).
    pub time: Vec<u64>,
    /// One window, no fixed items and no partners: positions are a single
    /// alignment and bound test.
    pub simple: Option<(u64, u64)>,
    /// The lowest window boundary no item crosses, for the cut test.
    pub cut: Option<Cut>,
    pub base: u64,
    pub limit: u64,
}

pub(super) const NO_TWIN: u32 = u32::MAX;

impl Prepared {
    /// Prepares `arena`; `None` when the overlap graph is too large to keep.
    pub fn new(arena: &Arena) -> Option<Prepared> {
        let sections = arena.sections as usize;
        let mut ids = Vec::new();
        let mut trivial = Vec::new();
        let mut local = vec![u32::MAX; arena.items.len()];
        for (i, it) in arena.items.iter().enumerate() {
            if it.fixed.is_some() {
                continue;
            }
            if it.live() && it.size > 0 {
                local[i] = ids.len() as u32;
                ids.push(i as u32);
            } else {
                trivial.push(i as u32);
            }
        }
        let m = ids.len();
        let item = |k: usize| &arena.items[ids[k] as usize];
        let start: Vec<u32> = (0..m).map(|k| item(k).start).collect();
        let end: Vec<u32> = (0..m).map(|k| item(k).end).collect();
        let size: Vec<u64> = (0..m).map(|k| item(k).size).collect();
        let align: Vec<u64> = (0..m).map(|k| item(k).align.max(1)).collect();
        let windows: Vec<u32> = (0..m).map(|k| item(k).windows).collect();
        let partners: Vec<SmallVec<[u32; 2]>> = (0..m)
            .map(|k| {
                item(k)
                    .partners
                    .iter()
                    .map(|&p| local[p as usize])
                    .filter(|&p| p != u32::MAX)
                    .collect()
            })
            .collect();
        let any_partners = partners.iter().any(|p| !p.is_empty());

        let statics = fixed_obstacles(arena, &start, &end);
        let any_fixed = arena.items.iter().any(|it| it.fixed.is_some() && it.live());
        let (blocked, blocked_suffix) = blocked_bytes(arena, &windows, sections);
        let (adj_start, adj) = overlap_adjacency(&start, &end)?;

        let mut by_start = vec![Vec::new(); sections];
        let mut live = vec![0u64; sections];
        for k in 0..m {
            by_start[start[k] as usize].push(k as u32);
            for s in start[k]..end[k] {
                live[s as usize] = live[s as usize].saturating_add(size[k]);
            }
        }
        let total: Vec<u64> = (0..m)
            .map(|k| {
                (start[k]..end[k])
                    .map(|s| live[s as usize])
                    .max()
                    .unwrap_or(0)
            })
            .collect();

        let mut twin_prev = vec![NO_TWIN; m];
        let key = |k: usize| (start[k], end[k], size[k], align[k], windows[k]);
        let mut keyed: Vec<usize> = (0..m).filter(|&k| partners[k].is_empty()).collect();
        keyed.sort_by_key(|&k| (key(k), k));
        for w in keyed.windows(2) {
            if key(w[0]) == key(w[1]) {
                twin_prev[w[1]] = w[0] as u32;
            }
        }

        let simple = match arena.window_sets.as_slice() {
            [only] if only.len() == 1 && !any_fixed && !any_partners => Some(only[0]),
            _ => None,
        };
        let cut = if simple.is_none() {
            Cut::find(arena, &windows, &size, &start, &end)
        } else {
            None
        };
        Some(Prepared {
            cut,
            ids,
            trivial,
            start,
            end,
            size,
            align,
            windows,
            partners,
            any_partners,
            statics,
            blocked,
            blocked_suffix,
            adj_start,
            adj,
            by_start,
            twin_prev,
            total,
            sections,
            time: if arena.times.len() == sections + 1 {
                arena.times.clone()
            } else {
                (0..=sections as u64).collect()
            },
            simple,
            base: arena.base,
            limit: arena.limit,
        })
    }

    /// The rank of every free item under `order` (0 first), perturbed by
    /// random adjacent swaps when `seed` is not zero (restarts then explore
    /// different parts of the tree).
    pub fn ranks(&self, order: Preorder, seed: u64) -> Vec<u32> {
        let m = self.ids.len();
        let length = |k: usize| self.time[self.end[k] as usize] - self.time[self.start[k] as usize];
        let area = |k: usize| u128::from(self.size[k]) * u128::from(length(k));
        let key = |k: usize| -> (u128, u128, u128) {
            let (t, l, a) = (u128::from(self.total[k]), u128::from(length(k)), area(k));
            match order {
                Preorder::LengthAreaTotal => (l, a, t),
                Preorder::TotalAreaLength => (t, a, l),
                Preorder::TotalLengthArea => (t, l, a),
                Preorder::SizeEnd => (u128::from(self.size[k]), u128::from(self.end[k]), 0),
            }
        };
        let mut order_list: Vec<usize> = (0..m).collect();
        // Largest keys first; ties by index, so twins keep index order.
        order_list.sort_by(|&a, &b| key(b).cmp(&key(a)).then(a.cmp(&b)));
        if seed != 0 {
            let mut rng = ipu_layout::rng::SplitMix64::new(seed);
            for _ in 0..2 {
                for i in 0..m.saturating_sub(1) {
                    if rng.next_u64() % 8 < 3 {
                        order_list.swap(i, i + 1);
                    }
                }
            }
        }
        let mut rank = vec![0u32; m];
        for (r, &k) in order_list.iter().enumerate() {
            rank[k] = r as u32;
        }
        rank
    }
}

/// Sorted, disjoint byte intervals `[start, end)`.
type Intervals = Vec<(u64, u64)>;

/// Per free item (`start`, `end` its sections), the merged byte intervals
/// of the fixed items live beside it.
fn fixed_obstacles(arena: &Arena, start: &[u32], end: &[u32]) -> Vec<Intervals> {
    let m = start.len();
    let index = TimeIndex::new(&arena.items);
    let mut statics = vec![Vec::new(); m];
    let any_fixed = arena.items.iter().any(|it| it.fixed.is_some() && it.live());
    if any_fixed {
        let mut hits = Vec::new();
        for k in 0..m {
            hits.clear();
            index.query(start[k], end[k], &mut hits);
            let mut list: Vec<(u64, u64)> = hits
                .iter()
                .filter_map(|&q| {
                    let it = &arena.items[q as usize];
                    let o = it.fixed?;
                    (it.size > 0).then(|| (o, o.saturating_add(it.size)))
                })
                .collect();
            merge_intervals(&mut list);
            statics[k] = list;
        }
    }
    statics
}

/// Per section, the merged byte intervals no free item may use (outside
/// every window of the items' window sets, or held by a fixed item live
/// there), and per section the suffix sums of their lengths inside the
/// arena.
fn blocked_bytes(
    arena: &Arena,
    windows: &[u32],
    sections: usize,
) -> (Vec<Intervals>, Vec<Vec<u64>>) {
    let mut allowed: Vec<(u64, u64)> = Vec::new();
    let mut seen = vec![false; arena.window_sets.len()];
    for &w in windows {
        if !seen[w as usize] {
            seen[w as usize] = true;
            allowed.extend(arena.window_sets[w as usize].iter().copied());
        }
    }
    merge_intervals(&mut allowed);
    let mut outside = Vec::new();
    let mut cur = arena.base;
    for &(a, b) in &allowed {
        if a > cur {
            outside.push((cur, a.min(arena.limit)));
        }
        cur = cur.max(b);
    }
    if cur < arena.limit {
        outside.push((cur, arena.limit));
    }
    let mut blocked = vec![outside; sections];
    for it in &arena.items {
        if let (Some(o), true) = (it.fixed, it.live()) {
            for s in it.start..it.end {
                blocked[s as usize].push((o, o.saturating_add(it.size)));
            }
        }
    }
    let mut blocked_suffix = Vec::with_capacity(sections);
    for list in &mut blocked {
        merge_intervals(list);
        let mut suffix = vec![0u64; list.len() + 1];
        for k in (0..list.len()).rev() {
            let (a, b) = list[k];
            let len = b.min(arena.limit).saturating_sub(a.max(arena.base));
            suffix[k] = suffix[k + 1].saturating_add(len);
        }
        blocked_suffix.push(suffix);
    }
    (blocked, blocked_suffix)
}

/// The overlap graph of items live over `start..end` sections, by a sweep
/// in start order: per item the offset of its neighbours in the flat
/// list, and the list. `None` past [`MAX_ADJACENCY`] pairs.
fn overlap_adjacency(start: &[u32], end: &[u32]) -> Option<(Vec<u32>, Vec<u32>)> {
    let m = start.len();
    let mut order: Vec<u32> = (0..m as u32).collect();
    order.sort_unstable_by_key(|&k| (start[k as usize], k));
    let mut degree = vec![0u32; m + 1];
    let mut active: Vec<u32> = Vec::new();
    let mut pairs = 0usize;
    for &k in &order {
        let s = start[k as usize];
        active.retain(|&q| end[q as usize] > s);
        pairs += active.len();
        if pairs > MAX_ADJACENCY / 2 {
            return None;
        }
        for &q in &active {
            degree[k as usize + 1] += 1;
            degree[q as usize + 1] += 1;
        }
        active.push(k);
    }
    for k in 0..m {
        degree[k + 1] += degree[k];
    }
    let adj_start = degree;
    let mut fill: Vec<u32> = adj_start[..m].to_vec();
    let mut adj = vec![0u32; pairs * 2];
    active.clear();
    for &k in &order {
        let s = start[k as usize];
        active.retain(|&q| end[q as usize] > s);
        for &q in &active {
            adj[fill[k as usize] as usize] = q;
            fill[k as usize] += 1;
            adj[fill[q as usize] as usize] = k;
            fill[q as usize] += 1;
        }
        active.push(k);
    }
    Some((adj_start, adj))
}
