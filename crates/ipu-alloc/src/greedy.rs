//! Greedy placement: items in a fixed order, each at the best-fitting (or
//! lowest) free gap among the items already placed that overlap it in time.
//!
//! This is the fast path for every tile and for large traces. Several orders
//! are tried and the lowest peak kept; the exact search (`exact.rs`) runs only
//! where all of them fail.

use serde::{Deserialize, Serialize};

use crate::arena::{Arena, Neighbours, align_up, for_each_gap, merge_intervals};

/// The order in which a greedy pass places items.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GreedyOrder {
    /// Largest size first (ties: longest lifetime).
    SizeDesc,
    /// Largest size × lifetime first.
    AreaDesc,
    /// Longest lifetime first (ties: largest size).
    LifeDesc,
    /// Earliest start first (ties: largest size): the online order.
    StartAsc,
}

/// How a greedy pass chooses among the free gaps that fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Fit {
    /// The smallest gap that fits (ties: lowest address).
    Best,
    /// The lowest gap that fits.
    First,
}

/// One greedy pass: an order and a fit rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GreedyStrategy {
    /// Placement order.
    pub order: GreedyOrder,
    /// Gap choice.
    pub fit: Fit,
}

impl GreedyStrategy {
    /// The default set of passes, best first on typical inputs.
    pub const DEFAULT_SET: [GreedyStrategy; 5] = [
        GreedyStrategy {
            order: GreedyOrder::SizeDesc,
            fit: Fit::Best,
        },
        GreedyStrategy {
            order: GreedyOrder::AreaDesc,
            fit: Fit::Best,
        },
        GreedyStrategy {
            order: GreedyOrder::LifeDesc,
            fit: Fit::Best,
        },
        GreedyStrategy {
            order: GreedyOrder::SizeDesc,
            fit: Fit::First,
        },
        GreedyStrategy {
            order: GreedyOrder::StartAsc,
            fit: Fit::First,
        },
    ];
}

/// Marks an item not yet placed.
pub(crate) const UNPLACED: u64 = u64::MAX;

/// A greedy pass that could not place `item`; `offsets` holds what it had
/// placed before (others are [`UNPLACED`]).
#[derive(Debug)]
pub(crate) struct GreedyFailure {
    pub item: u32,
    pub offsets: Vec<u64>,
}

/// Runs one greedy pass.
pub(crate) fn greedy(
    arena: &Arena,
    neighbours: &Neighbours,
    strategy: GreedyStrategy,
) -> Result<Vec<u64>, GreedyFailure> {
    let order = strategy_order(arena, strategy.order);
    let (offsets, failed) = place_in_order(arena, neighbours, &order, strategy.fit, true);
    match failed.first() {
        Some(&item) => Err(GreedyFailure { item, offsets }),
        None => Ok(offsets),
    }
}

/// The free items of `arena` in the placement order `order`.
pub(crate) fn strategy_order(arena: &Arena, order: GreedyOrder) -> Vec<u32> {
    let items = &arena.items;
    let mut out: Vec<u32> = (0..items.len() as u32)
        .filter(|&i| items[i as usize].fixed.is_none())
        .collect();
    let life = |i: u32| {
        let it = &items[i as usize];
        it.end - it.start
    };
    match order {
        GreedyOrder::SizeDesc => out.sort_by(|&a, &b| {
            (items[b as usize].size, life(b), a).cmp(&(items[a as usize].size, life(a), b))
        }),
        GreedyOrder::AreaDesc => out.sort_by(|&a, &b| {
            let area = |i: u32| u128::from(items[i as usize].size) * u128::from(life(i));
            (area(b), items[b as usize].size, a).cmp(&(area(a), items[a as usize].size, b))
        }),
        GreedyOrder::LifeDesc => out.sort_by(|&a, &b| {
            (life(b), items[b as usize].size, a).cmp(&(life(a), items[a as usize].size, b))
        }),
        GreedyOrder::StartAsc => out.sort_by(|&a, &b| {
            (items[a as usize].start, items[b as usize].size, a).cmp(&(
                items[b as usize].start,
                items[a as usize].size,
                b,
            ))
        }),
    }
    out
}

/// Places the free items in `order`, each in the gap `fit` chooses among
/// the placed items that overlap it in time. Returns the offsets (fixed
/// items at their addresses, unplaced ones [`UNPLACED`]) and the items
/// that found no gap, in order: only the first when `stop` is set, every
/// one otherwise (the pass goes on without them).
pub(crate) fn place_in_order(
    arena: &Arena,
    neighbours: &Neighbours,
    order: &[u32],
    fit: Fit,
    stop: bool,
) -> (Vec<u64>, Vec<u32>) {
    let items = &arena.items;
    let mut offsets = vec![UNPLACED; items.len()];
    for (i, it) in items.iter().enumerate() {
        if let Some(a) = it.fixed {
            offsets[i] = a;
        }
    }
    let mut failed = Vec::new();
    let mut overlapping = Vec::new();
    let mut obstacles: Vec<(u64, u64)> = Vec::new();
    for &i in order {
        match lowest_gap(
            arena,
            neighbours,
            &offsets,
            i,
            fit,
            &mut overlapping,
            &mut obstacles,
        ) {
            Some(a) => offsets[i as usize] = a,
            None => {
                failed.push(i);
                if stop {
                    break;
                }
            }
        }
    }
    (offsets, failed)
}

/// The address `fit` chooses for item `i` among the gaps the placed items
/// (`offsets`) leave in its windows, or `None` when none fits.
fn lowest_gap(
    arena: &Arena,
    neighbours: &Neighbours,
    offsets: &[u64],
    i: u32,
    fit: Fit,
    overlapping: &mut Vec<u32>,
    obstacles: &mut Vec<(u64, u64)>,
) -> Option<u64> {
    let items = &arena.items;
    let it = &items[i as usize];
    let windows = &arena.window_sets[it.windows as usize];
    if it.size == 0 {
        return windows
            .iter()
            .find_map(|&(a, b)| align_up(a, it.align).filter(|&x| x <= b));
    }
    obstacles.clear();
    for &q in neighbours.of(i, items, overlapping) {
        let o = offsets[q as usize];
        if o != UNPLACED {
            obstacles.push((o, o.saturating_add(items[q as usize].size)));
        }
    }
    for &p in &it.partners {
        let o = offsets[p as usize];
        if o != UNPLACED {
            if let Some(span) = arena.element_span(o, items[p as usize].size) {
                obstacles.push(span);
            }
        }
    }
    merge_intervals(obstacles);
    let mut chosen: Option<(u64, u64)> = None;
    for_each_gap(windows, obstacles, |g0, g1| {
        let Some(a) = align_up(g0, it.align) else {
            return true;
        };
        let fits = a.checked_add(it.size).is_some_and(|e| e <= g1);
        if !fits {
            return true;
        }
        match fit {
            Fit::First => {
                chosen = Some((0, a));
                false
            }
            Fit::Best => {
                let len = g1 - g0;
                if chosen.is_none_or(|(best, _)| len < best) {
                    chosen = Some((len, a));
                }
                true
            }
        }
    });
    chosen.map(|(_, a)| a)
}

/// The highest end address of any live item in a complete placement.
pub(crate) fn peak_of(arena: &Arena, offsets: &[u64]) -> u64 {
    arena
        .items
        .iter()
        .zip(offsets)
        .filter(|(it, _)| it.live() && it.size > 0)
        .map(|(it, &o)| o.saturating_add(it.size))
        .max()
        .unwrap_or(arena.base)
}
