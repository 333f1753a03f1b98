//! Lower bounds per tile.
//!
//! At every step the requests live then need at least their total bytes of
//! distinct memory, and each class's requests must fit in the bytes its
//! ranges leave free of the reservations live at that step. The peak of live
//! bytes therefore bounds the address use of any placement from below, and a
//! step where live bytes exceed the usable bytes proves the tile infeasible.

use ipu_layout::{MemoryClass, TileId};
use serde::{Deserialize, Serialize};

use crate::sections::Sections;
use crate::{MemoryMap, TileProblem};

/// Live bytes exceeding usable bytes at one step: proof of infeasibility.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shortfall {
    /// The first step of the worst run of steps.
    pub step: u32,
    /// How many bytes more the step needs than the memory leaves usable.
    pub bytes: u64,
}

/// The bound for one memory class (or for all classes together).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassBound {
    /// The class; `None` for all classes together.
    pub class: Option<MemoryClass>,
    /// The largest total of live request bytes at any step.
    pub peak_live_bytes: u64,
    /// The first step where that peak is reached.
    pub peak_step: u32,
    /// Usable bytes of the class's ranges at that step (reservations
    /// live then removed).
    pub usable_bytes_at_peak: u64,
    /// The worst step where live bytes exceed usable bytes, if any.
    pub shortfall: Option<Shortfall>,
}

/// Lower bounds for one tile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileBound {
    /// The tile.
    pub tile: TileId,
    /// All classes together.
    pub all: ClassBound,
    /// Per class, in [`MemoryClass::ALL`] order.
    pub classes: [ClassBound; 2],
    /// The largest total of live request and reservation bytes at any step:
    /// a lower bound on the address use `max end - sram_start` of any
    /// placement.
    pub peak_with_reservations: u64,
}

impl TileBound {
    /// Whether the bound alone proves the tile cannot be placed.
    pub fn proves_infeasible(&self) -> bool {
        self.worst_shortfall().is_some()
    }

    /// The largest shortfall over all classes, with its class (`None` for
    /// all classes together).
    pub fn worst_shortfall(&self) -> Option<(Option<MemoryClass>, Shortfall)> {
        let mut worst: Option<(Option<MemoryClass>, Shortfall)> = None;
        for c in std::iter::once(&self.all).chain(self.classes.iter()) {
            if let Some(s) = c.shortfall {
                if worst.is_none_or(|(_, w)| s.bytes > w.bytes) {
                    worst = Some((c.class, s));
                }
            }
        }
        worst
    }
}

/// Total length of `ranges` minus the union of `holes` (both sorted lists
/// of half-open ranges; holes may overlap each other).
pub(crate) fn usable_bytes(ranges: &[(u32, u32)], holes: &[(u32, u32)]) -> u64 {
    let mut total = 0u64;
    for &(a, b) in ranges {
        let mut cur = u64::from(a);
        let end = u64::from(b);
        let mut free = 0u64;
        for &(h0, h1) in holes {
            let (h0, h1) = (u64::from(h0), u64::from(h1));
            if h1 <= cur || h0 >= end {
                continue;
            }
            if h0 > cur {
                free += h0 - cur;
            }
            cur = cur.max(h1.min(end));
        }
        if cur < end {
            free += end - cur;
        }
        total += free;
    }
    total
}

/// Bytes covered by a sorted list of possibly overlapping ranges.
fn union_bytes(sorted: &[(u32, u32)]) -> u64 {
    let mut total = 0u64;
    let mut reach = 0u64;
    for &(a, b) in sorted {
        let (a, b) = (u64::from(a).max(reach), u64::from(b));
        if b > a {
            total += b - a;
        }
        reach = reach.max(b);
    }
    total
}

/// The lower bound of one tile.
pub fn lower_bound(tile: &TileProblem, map: &MemoryMap) -> TileBound {
    let sections = Sections::of(tile);
    let segments = sections.count();
    let mut delta = vec![[0i64; 2]; segments + 1];
    for r in &tile.requests {
        let (a, b) = sections.span(r.first_step, r.last_step);
        delta[a][r.class.index()] += i64::from(r.bytes);
        delta[b][r.class.index()] -= i64::from(r.bytes);
    }
    let all_ranges: Vec<(u32, u32)> = {
        let mut v: Vec<(u32, u32)> = MemoryClass::ALL
            .iter()
            .flat_map(|&c| map.class_ranges(c).iter().copied())
            .collect();
        v.sort_unstable();
        let mut out: Vec<(u32, u32)> = Vec::new();
        for (a, b) in v {
            match out.last_mut() {
                Some(l) if a <= l.1 => l.1 = l.1.max(b),
                _ => out.push((a, b)),
            }
        }
        out
    };
    let fresh = |class| ClassBound {
        class,
        peak_live_bytes: 0,
        peak_step: 0,
        usable_bytes_at_peak: 0,
        shortfall: None,
    };
    let mut bound = TileBound {
        tile: tile.tile,
        all: fresh(None),
        classes: MemoryClass::ALL.map(|c| fresh(Some(c))),
        peak_with_reservations: 0,
    };
    let mut live = [0i64; 2];
    let mut holes: Vec<(u32, u32)> = Vec::new();
    for (k, d) in delta.iter().take(segments).enumerate() {
        live[0] += d[0];
        live[1] += d[1];
        let step = sections.first_step(k);
        holes.clear();
        for r in &tile.reservations {
            let on = r.steps.is_none_or(|(a, b)| a <= step && step <= b);
            if on {
                holes.push((r.start, r.end));
            }
        }
        holes.sort_unstable();
        let reserved = union_bytes(&holes);
        let per_class = [live[0].max(0) as u64, live[1].max(0) as u64];
        let total = per_class[0] + per_class[1];
        if total + reserved > bound.peak_with_reservations {
            bound.peak_with_reservations = total + reserved;
        }
        let update = |cb: &mut ClassBound, need: u64, ranges: &[(u32, u32)]| {
            let usable = usable_bytes(ranges, &holes);
            if need > cb.peak_live_bytes {
                cb.peak_live_bytes = need;
                cb.peak_step = step;
                cb.usable_bytes_at_peak = usable;
            }
            if need > usable && cb.shortfall.is_none_or(|s| need - usable > s.bytes) {
                cb.shortfall = Some(Shortfall {
                    step,
                    bytes: need - usable,
                });
            }
        };
        update(&mut bound.all, total, &all_ranges);
        for c in MemoryClass::ALL {
            update(
                &mut bound.classes[c.index()],
                per_class[c.index()],
                map.class_ranges(c),
            );
        }
    }
    // Reservations that are always live count even on a tile with no steps.
    if segments == 0 {
        let mut all: Vec<(u32, u32)> = tile.reservations.iter().map(|r| (r.start, r.end)).collect();
        all.sort_unstable();
        bound.peak_with_reservations = union_bytes(&all);
    }
    bound
}
