//! The independent placement checker.
//!
//! It checks only the output against the original problem, with its own data
//! structures and none of the placer's: for every tile, that
//! - the placement covers the same tiles, in order;
//! - every request has exactly one address, and no unknown request has one;
//! - every address is a multiple of the request's alignment;
//! - every request lies inside a single allowed range of its class (so below
//!   the loader limit) and inside a single region (never across a boundary);
//! - no request overlaps a reservation while both are live;
//! - no two requests overlap while both are live (lifetimes are inclusive);
//! - requests that must be separated touch no common memory element.
//!
//! It collects every error rather than stopping at the first.

use std::collections::BTreeMap;

use ipu_layout::{MemoryClass, TileId};
use rayon::prelude::*;

use crate::{MemoryMap, Placement, Problem, Request, RequestId};

/// One defect of a placement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlacementCheckError {
    /// The placement has a different number of tiles than the problem.
    #[error("the placement has {got} tiles but the problem has {expected}")]
    TileCount {
        /// Tiles in the problem.
        expected: usize,
        /// Tiles in the placement.
        got: usize,
    },
    /// The tile at an index is not the problem's tile there.
    #[error("placement tile at index {index} is {got} but the problem has {expected} there")]
    TileMismatch {
        /// Position in the tile list.
        index: usize,
        /// The problem's tile.
        expected: TileId,
        /// The placement's tile.
        got: TileId,
    },
    /// A request has no address.
    #[error("{tile} {request} has no address")]
    Missing {
        /// The tile.
        tile: TileId,
        /// The request.
        request: RequestId,
    },
    /// A request has more than one address.
    #[error("{tile} {request} has more than one address")]
    Duplicate {
        /// The tile.
        tile: TileId,
        /// The request.
        request: RequestId,
    },
    /// An address is given for a request the tile does not have.
    #[error("{tile} has an address for {request}, which is not one of its requests")]
    Unknown {
        /// The tile.
        tile: TileId,
        /// The unknown request.
        request: RequestId,
    },
    /// An address is not a multiple of the alignment.
    #[error("{tile} {request} at {address:#x} is not aligned to {alignment}")]
    Misaligned {
        /// The tile.
        tile: TileId,
        /// The request.
        request: RequestId,
        /// Its address.
        address: u32,
        /// The alignment asked for.
        alignment: u32,
    },
    /// A request is not inside one allowed range of its class.
    #[error(
        "{tile} {request} at [{address:#x}, +{bytes}) is not inside one allowed range of {class}"
    )]
    OutsideClass {
        /// The tile.
        tile: TileId,
        /// The request.
        request: RequestId,
        /// Its class.
        class: MemoryClass,
        /// Its address.
        address: u32,
        /// Its size.
        bytes: u32,
    },
    /// A request crosses a region boundary or lies outside every region.
    #[error("{tile} {request} at [{address:#x}, +{bytes}) crosses a region boundary")]
    CrossesRegion {
        /// The tile.
        tile: TileId,
        /// The request.
        request: RequestId,
        /// Its address.
        address: u32,
        /// Its size.
        bytes: u32,
    },
    /// A request overlaps a reservation while both are live.
    #[error(
        "{tile} {request} at {address:#x} overlaps reservation `{reservation}` while both are live"
    )]
    OverlapsReservation {
        /// The tile.
        tile: TileId,
        /// The request.
        request: RequestId,
        /// Its address.
        address: u32,
        /// The reservation's label.
        reservation: String,
    },
    /// Two requests overlap while both are live.
    #[error("{tile} {a} and {b} overlap in memory while both are live")]
    Overlap {
        /// The tile.
        tile: TileId,
        /// One request.
        a: RequestId,
        /// The other.
        b: RequestId,
    },
    /// Two requests that must be separated share a memory element.
    #[error(
        "{tile} {a} and {b} must not share a memory element but both touch the one at {element:#x}"
    )]
    SharesElement {
        /// The tile.
        tile: TileId,
        /// One request.
        a: RequestId,
        /// The other.
        b: RequestId,
        /// Start of a shared element.
        element: u32,
    },
}

/// Checks `placement` against `problem`; returns every defect found.
pub fn check_placement(
    problem: &Problem,
    placement: &Placement,
) -> Result<(), Vec<PlacementCheckError>> {
    let mut errors = Vec::new();
    let placed = placement.tiles();
    if placed.len() != problem.tiles.len() {
        errors.push(PlacementCheckError::TileCount {
            expected: problem.tiles.len(),
            got: placed.len(),
        });
    }
    // Tiles are checked in parallel (a build checks every placement before
    // anything uses it, and waits for it); errors keep tile order.
    let per_tile: Vec<Vec<PlacementCheckError>> = problem
        .tiles
        .par_iter()
        .zip(placed)
        .enumerate()
        .map(|(index, (tp, pl))| {
            let mut errors = Vec::new();
            if tp.tile != pl.tile() {
                errors.push(PlacementCheckError::TileMismatch {
                    index,
                    expected: tp.tile,
                    got: pl.tile(),
                });
            } else {
                check_tile(&problem.map, tp, pl.entries(), &mut errors);
            }
            errors
        })
        .collect();
    errors.extend(per_tile.into_iter().flatten());
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn lifetimes_meet(a: &Request, b: &Request) -> bool {
    a.first_step <= b.last_step && b.first_step <= a.last_step
}

/// The element numbers `[first, last]` touched by `[addr, addr + bytes)`,
/// counted across all regions, or `None` when outside the regions.
fn elements_touched(map: &MemoryMap, addr: u64, bytes: u64) -> Option<(u64, u64, u64)> {
    let mut first_index = 0u64;
    for r in map.regions() {
        let (s, e, eb) = (
            u64::from(r.start),
            u64::from(r.end),
            u64::from(r.element_bytes),
        );
        let count = (e - s).div_ceil(eb.max(1));
        if s <= addr && addr < e {
            let last = addr + bytes - 1;
            let last_in = last.min(e - 1);
            let a = first_index + (addr - s) / eb.max(1);
            let b = first_index + (last_in - s) / eb.max(1);
            return Some((a, b, s + (addr - s) / eb.max(1) * eb.max(1)));
        }
        first_index += count;
    }
    None
}

fn check_tile(
    map: &MemoryMap,
    tp: &crate::TileProblem,
    entries: &[(RequestId, u32)],
    errors: &mut Vec<PlacementCheckError>,
) {
    let tile = tp.tile;
    let mut by_id: BTreeMap<RequestId, usize> = BTreeMap::new();
    for (k, r) in tp.requests.iter().enumerate() {
        by_id.insert(r.id, k);
    }
    let mut address: Vec<Option<u32>> = vec![None; tp.requests.len()];
    for &(id, a) in entries {
        match by_id.get(&id) {
            None => errors.push(PlacementCheckError::Unknown { tile, request: id }),
            Some(&k) => {
                if address[k].is_some() {
                    errors.push(PlacementCheckError::Duplicate { tile, request: id });
                } else {
                    address[k] = Some(a);
                }
            }
        }
    }
    let mut placed: Vec<(u64, u64, usize)> = Vec::new();
    for (k, r) in tp.requests.iter().enumerate() {
        let Some(a) = address[k] else {
            errors.push(PlacementCheckError::Missing {
                tile,
                request: r.id,
            });
            continue;
        };
        let start = u64::from(a);
        let end = start + u64::from(r.bytes);
        if r.alignment == 0 || a % r.alignment != 0 {
            errors.push(PlacementCheckError::Misaligned {
                tile,
                request: r.id,
                address: a,
                alignment: r.alignment,
            });
        }
        let in_class = map
            .class_ranges(r.class)
            .iter()
            .any(|&(s, e)| u64::from(s) <= start && end <= u64::from(e));
        if !in_class {
            errors.push(PlacementCheckError::OutsideClass {
                tile,
                request: r.id,
                class: r.class,
                address: a,
                bytes: r.bytes,
            });
        }
        let in_region = map
            .regions()
            .iter()
            .any(|g| u64::from(g.start) <= start && end <= u64::from(g.end));
        if !in_region {
            errors.push(PlacementCheckError::CrossesRegion {
                tile,
                request: r.id,
                address: a,
                bytes: r.bytes,
            });
        }
        for res in &tp.reservations {
            let live_together = res
                .steps
                .is_none_or(|(f, l)| f <= r.last_step && r.first_step <= l);
            let meet = start < u64::from(res.end) && u64::from(res.start) < end;
            if live_together && meet && r.bytes > 0 {
                errors.push(PlacementCheckError::OverlapsReservation {
                    tile,
                    request: r.id,
                    address: a,
                    reservation: res.label.clone(),
                });
            }
        }
        if r.bytes > 0 {
            placed.push((start, end, k));
        }
    }
    // Pairwise overlap, by a sweep over addresses: each request is compared
    // with the earlier-starting requests whose memory it still reaches.
    placed.sort_unstable();
    let mut open: Vec<(u64, usize)> = Vec::new();
    for &(start, end, k) in &placed {
        open.retain(|&(e, _)| e > start);
        for &(_, j) in &open {
            let (x, y) = (&tp.requests[j], &tp.requests[k]);
            if lifetimes_meet(x, y) {
                errors.push(PlacementCheckError::Overlap {
                    tile,
                    a: x.id,
                    b: y.id,
                });
            }
        }
        open.push((end, k));
    }
    for (k, r) in tp.requests.iter().enumerate() {
        for &p in &r.separate_from {
            let Some(&j) = by_id.get(&p) else { continue };
            // Each unordered pair once (partners may be listed on both sides).
            let listed_both = tp.requests[j].separate_from.contains(&r.id);
            if listed_both && j < k {
                continue;
            }
            let (Some(a), Some(b)) = (address[k], address[j]) else {
                continue;
            };
            let q = &tp.requests[j];
            if r.bytes == 0 || q.bytes == 0 {
                continue;
            }
            let ea = elements_touched(map, u64::from(a), u64::from(r.bytes));
            let eb = elements_touched(map, u64::from(b), u64::from(q.bytes));
            if let (Some((a0, a1, first_a)), Some((b0, b1, first_b))) = (ea, eb) {
                if a0 <= b1 && b0 <= a1 {
                    let element = if a0 >= b0 { first_a } else { first_b };
                    errors.push(PlacementCheckError::SharesElement {
                        tile,
                        a: r.id,
                        b: p,
                        element: u32::try_from(element).unwrap_or(u32::MAX),
                    });
                }
            }
        }
    }
}
