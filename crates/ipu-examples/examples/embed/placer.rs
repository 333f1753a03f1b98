//! The example's placer: first fit in request order, and a copy with a
//! bug (two shards that are live at once share memory).

use ipu_alloc::{MemoryMap, PlaceError, Placement, Placer, Problem, RequestId, TileProblem};

/// First fit in request order: each shard at the lowest address of its
/// class where it overlaps no shard placed before it that is live at the
/// same time. Requests that must not share a memory element with another
/// start on an element of their own and pad to its end.
pub struct FirstFitPlacer {
    /// Whether to move one shard of tile 0 onto another that is live at
    /// the same time: a placer with a bug, for the checker to catch.
    pub overlap: bool,
}

impl Placer for FirstFitPlacer {
    fn name(&self) -> &str {
        if self.overlap {
            "first-fit-overlapping"
        } else {
            "first-fit"
        }
    }

    fn place(&self, problem: &Problem) -> Result<Placement, PlaceError> {
        let mut tiles = Vec::with_capacity(problem.tiles.len());
        for tile in &problem.tiles {
            let mut placed = place_tile(tile, &problem.map).map_err(|why| failed(tile, why))?;
            if self.overlap && tile.tile.as_u32() == 0 {
                overlap_two(tile, &mut placed);
            }
            tiles.push((tile.tile, placed));
        }
        Ok(Placement::from_addresses(tiles))
    }
}

/// A placer's own failure, with its cause kept as a typed error.
fn failed(tile: &TileProblem, why: String) -> PlaceError {
    #[derive(Debug)]
    struct NoRoom(String);
    impl std::fmt::Display for NoRoom {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }
    impl std::error::Error for NoRoom {}
    PlaceError::Placer {
        placer: "first-fit".into(),
        source: std::sync::Arc::new(NoRoom(format!("{}: {why}", tile.tile))),
    }
}

fn place_tile(tile: &TileProblem, map: &MemoryMap) -> Result<Vec<(RequestId, u32)>, String> {
    // Busy byte ranges with their lifetimes: reservations (always) and the
    // shards placed so far.
    let mut busy: Vec<(u32, u32, u32, u32)> = tile
        .reservations
        .iter()
        .map(|r| (r.start, r.end, 0, u32::MAX))
        .collect();
    let mut out = Vec::with_capacity(tile.requests.len());
    for r in &tile.requests {
        let separated = !r.separate_from.is_empty()
            || tile
                .requests
                .iter()
                .any(|o| o.separate_from.contains(&r.id));
        let clashes = |at: u32, stop: u32| {
            busy.iter()
                .find(|b| at < b.1 && b.0 < stop && r.first_step <= b.3 && b.2 <= r.last_step)
        };
        let mut placed = None;
        'ranges: for &(start, end) in map.class_ranges(r.class) {
            let mut next = Some(start);
            // Addresses are checked: past the address space nothing fits.
            while let Some(mut at) =
                next.and_then(|a| a.checked_next_multiple_of(r.alignment.max(1)))
            {
                let mut stop = at.checked_add(r.bytes);
                if separated && let Some(e) = map.element_of(at) {
                    // An element of its own: start on one, pad to its end.
                    if at != e.start {
                        at = e.end;
                    }
                    stop = at
                        .checked_add(r.bytes)
                        .and_then(|s| s.checked_next_multiple_of(e.end - e.start));
                }
                let Some(stop) = stop.filter(|&s| s <= end) else {
                    break;
                };
                match clashes(at, stop) {
                    Some(b) => next = Some(b.1),
                    None => {
                        placed = Some((at, stop));
                        break 'ranges;
                    }
                }
            }
        }
        let (at, stop) = placed
            .ok_or_else(|| format!("{} ({} bytes) fits no {} range", r.id, r.bytes, r.class))?;
        busy.push((at, stop, r.first_step, r.last_step));
        out.push((r.id, at));
    }
    Ok(out)
}

/// Moves the second of the first two requests of one class and alignment
/// that are live at the same time onto the first.
fn overlap_two(tile: &TileProblem, placed: &mut [(RequestId, u32)]) {
    let rs = &tile.requests;
    let pair = (0..rs.len())
        .flat_map(|a| (a + 1..rs.len()).map(move |b| (a, b)))
        .find(|&(a, b)| {
            rs[a].class == rs[b].class
                && rs[a].alignment == rs[b].alignment
                && rs[a].first_step <= rs[b].last_step
                && rs[b].first_step <= rs[a].last_step
        });
    if let Some((a, b)) = pair {
        placed[b].1 = placed[a].1;
    }
}
