//! Placement of every tile: the entry point [`place`] and its result.
//!
//! Each tile becomes an [`Arena`]: requests are free items whose window set
//! is their class's ranges (already split at region boundaries and cut at the
//! loader limit by the map), reservations are fixed items, and element
//! separation uses the map's regions. Greedy passes run first (fixed
//! orders; the same with the items live throughout kept to their class's
//! highest window, [`resident_high`]; then squeaky-wheel passes that
//! reorder by failures); the exact
//! search runs only on tiles where all of them fail and the lower bound does
//! not already prove infeasibility. Tiles are independent and run in
//! parallel; results are collected in tile order and every budget is counted
//! in search nodes, never in time, so the output does not depend on the
//! thread count.

use ipu_layout::{MemoryClass, TileId};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::arena::{Arena, Item, Neighbours};
use crate::bound::{TileBound, lower_bound};
use crate::error::FitFailure;
use crate::exact::{ExactBudget, ExactOutcome, solve_exact_deep};
use crate::explain::{SearchEnd, explain};
use crate::greedy::{GreedyFailure, GreedyStrategy, UNPLACED, greedy, peak_of, strategy_order};
use crate::regions::{Split, split_between_windows};
use crate::sections::Sections;
use crate::squeaky::squeaky;
use crate::{MemoryMap, PlaceError, Problem, RequestId, TileProblem, check_placement, validate};

/// Budgets and switches for [`place`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaceConfig {
    /// Greedy passes tried on every tile; the lowest peak is kept.
    pub strategies: Vec<GreedyStrategy>,
    /// Greedy passes tried, in order, only on tiles where every pass of
    /// `strategies` fails; the first success is kept.
    pub fallback_strategies: Vec<GreedyStrategy>,
    /// Exact-search nodes per tile where every greedy pass fails; a tile
    /// with separation partners that the search leaves undecided gets as
    /// many again for the search without them, which can prove it
    /// impossible. A tile left undecided is reported as
    /// [`Verdict::Unknown`](crate::Verdict::Unknown), never as impossible.
    pub exact_node_budget: u64,
    /// Squeaky-wheel passes (greedy passes whose order puts the items that
    /// failed first) on tiles where every greedy pass fails, before the
    /// exact search.
    pub squeaky_passes: u32,
    /// Tiles with more requests than this skip the exact search (its
    /// recursion depth is the request count).
    pub exact_max_requests: usize,
    /// Run [`check_placement`] on the result before returning it (on by
    /// default).
    pub verify: bool,
}

impl Default for PlaceConfig {
    fn default() -> Self {
        PlaceConfig {
            strategies: GreedyStrategy::DEFAULT_SET[..2].to_vec(),
            fallback_strategies: GreedyStrategy::DEFAULT_SET[2..].to_vec(),
            exact_node_budget: 200_000,
            squeaky_passes: 512,
            exact_max_requests: 1024,
            verify: true,
        }
    }
}

/// How a tile's placement was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlaceMethod {
    /// A greedy pass.
    Greedy(GreedyStrategy),
    /// A greedy pass with every item live throughout the tile's steps kept
    /// to the highest window of its class (`resident_high`).
    ResidentHigh(GreedyStrategy),
    /// Squeaky-wheel greedy passes, placed by the last of them.
    Squeaky {
        /// Passes run.
        passes: u32,
    },
    /// The exact search, after this many nodes.
    Exact {
        /// Search nodes used.
        nodes: u64,
    },
    /// Addresses given from outside (for checking).
    Given,
}

/// The placement of one tile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TilePlacement {
    tile: TileId,
    /// Sorted by request id.
    entries: Vec<(RequestId, u32)>,
    bound: Option<TileBound>,
    achieved_peak_bytes: u64,
    method: PlaceMethod,
}

impl TilePlacement {
    /// The tile.
    pub fn tile(&self) -> TileId {
        self.tile
    }

    /// The address of a request, if placed.
    pub fn address(&self, id: RequestId) -> Option<u32> {
        let k = self.entries.binary_search_by_key(&id, |e| e.0).ok()?;
        Some(self.entries[k].1)
    }

    /// Every `(request, address)`, sorted by request id.
    pub fn entries(&self) -> &[(RequestId, u32)] {
        &self.entries
    }

    /// The lower bound of the tile (absent for placements given from outside).
    pub fn bound(&self) -> Option<&TileBound> {
        self.bound.as_ref()
    }

    /// Address use: the highest end address of any request or reservation,
    /// minus the SRAM start. Compare with
    /// [`TileBound::peak_with_reservations`].
    pub fn achieved_peak_bytes(&self) -> u64 {
        self.achieved_peak_bytes
    }

    /// How the placement was found.
    pub fn method(&self) -> PlaceMethod {
        self.method
    }
}

/// Totals over all tiles.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlacementSummary {
    /// Tiles placed.
    pub tiles: usize,
    /// Requests placed.
    pub requests: usize,
    /// Tiles that needed the exact search.
    pub exact_tiles: usize,
    /// Sum over tiles of the achieved address use.
    pub achieved_bytes: u64,
    /// Sum over tiles of the lower bound on address use.
    pub bound_bytes: u64,
    /// The largest achieved / bound ratio of any tile (1.0 when exact).
    pub worst_ratio: f64,
    /// The tile with that ratio.
    pub worst_tile: Option<TileId>,
    /// The smallest headroom of any tile: loader limit minus its highest
    /// end address.
    pub min_headroom_bytes: u64,
}

/// Addresses for every request of every tile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    tiles: Vec<TilePlacement>,
    summary: PlacementSummary,
}

impl Placement {
    /// Per-tile placements in problem order.
    pub fn tiles(&self) -> &[TilePlacement] {
        &self.tiles
    }

    /// The address of request `id` on the tile at `tile_index`.
    pub fn address(&self, tile_index: usize, id: RequestId) -> Option<u32> {
        self.tiles.get(tile_index)?.address(id)
    }

    /// Totals.
    pub fn summary(&self) -> &PlacementSummary {
        &self.summary
    }

    /// A placement from given addresses (for checking outside results and
    /// for tests of the checker). Duplicates are kept so the checker can
    /// report them.
    pub fn from_addresses(tiles: Vec<(TileId, Vec<(RequestId, u32)>)>) -> Placement {
        let tiles: Vec<TilePlacement> = tiles
            .into_iter()
            .map(|(tile, mut entries)| {
                entries.sort_by_key(|e| e.0);
                TilePlacement {
                    tile,
                    entries,
                    bound: None,
                    achieved_peak_bytes: 0,
                    method: PlaceMethod::Given,
                }
            })
            .collect();
        let summary = PlacementSummary {
            tiles: tiles.len(),
            requests: tiles.iter().map(|t| t.entries.len()).sum(),
            ..PlacementSummary::default()
        };
        Placement { tiles, summary }
    }
}

/// A tile as an arena: items `0..requests` are the requests in order, then
/// the reservations.
pub(crate) fn tile_arena(tile: &TileProblem, map: &MemoryMap) -> Arena {
    let steps = Sections::of(tile);
    // Section indices fit in u32: there are at most two per request or
    // reservation, and a tile's lists are bounded by validation.
    let sections = steps.count() as u32;
    let span = |a: u32, b: u32| {
        let (s, e) = steps.span(a, b);
        (s as u32, e as u32)
    };
    let mut ids: Vec<(RequestId, u32)> = tile
        .requests
        .iter()
        .enumerate()
        .map(|(k, r)| (r.id, k as u32))
        .collect();
    ids.sort_unstable();
    let find = |id: RequestId| {
        ids.binary_search_by_key(&id, |e| e.0)
            .ok()
            .map(|k| ids[k].1)
    };
    let mut items: Vec<Item> = tile
        .requests
        .iter()
        .map(|r| {
            let (start, end) = span(r.first_step, r.last_step);
            Item {
                start,
                end,
                size: u64::from(r.bytes),
                align: u64::from(r.alignment.max(1)),
                windows: r.class.index() as u32,
                fixed: None,
                partners: SmallVec::new(),
            }
        })
        .collect();
    for (k, r) in tile.requests.iter().enumerate() {
        for &p in &r.separate_from {
            if let Some(j) = find(p) {
                if j as usize != k {
                    if !items[k].partners.contains(&j) {
                        items[k].partners.push(j);
                    }
                    if !items[j as usize].partners.contains(&(k as u32)) {
                        items[j as usize].partners.push(k as u32);
                    }
                }
            }
        }
    }
    for r in &tile.reservations {
        let (start, end) = match r.steps {
            Some((a, b)) => span(a, b),
            None => (0, sections),
        };
        items.push(Item {
            start,
            end,
            size: u64::from(r.end.saturating_sub(r.start)),
            align: 1,
            windows: 0,
            fixed: Some(u64::from(r.start)),
            partners: SmallVec::new(),
        });
    }
    let window_sets = MemoryClass::ALL
        .iter()
        .map(|&c| {
            map.class_ranges(c)
                .iter()
                .map(|&(a, b)| (u64::from(a), u64::from(b)))
                .collect()
        })
        .collect();
    let elements = map
        .regions()
        .iter()
        .map(|r| {
            (
                u64::from(r.start),
                u64::from(r.end),
                u64::from(r.element_bytes),
            )
        })
        .collect();
    Arena {
        items,
        sections,
        times: steps.into_points(),
        window_sets,
        elements,
        base: u64::from(map.sram_start()),
        limit: u64::from(map.loader_limit()),
    }
}

/// Places every tile of `problem`.
///
/// The greedy passes run on every tile in parallel. The exact search then
/// runs, in parallel batches taken in problem order, on the tiles no
/// greedy pass placed, and stops after the batch holding the first tile it
/// cannot place: the error reports that tile, and no later tile could
/// change which tile it is, so a problem that does not fit fails after one
/// budget-bound search instead of one per tight tile. The result is the
/// same whatever the thread count. Each failing tile searched is logged at
/// debug level as `tile allocation does not fit`.
pub fn place(problem: &Problem, config: &PlaceConfig) -> Result<Placement, PlaceError> {
    validate(problem)?;
    let greedy: Vec<Result<TilePlacement, Box<Pending>>> = problem
        .tiles
        .par_iter()
        .map(|tile| place_greedy(tile, &problem.map, config))
        .collect();
    let unplaced = greedy.iter().filter(|r| r.is_err()).count();
    let mut tiles = Vec::with_capacity(greedy.len());
    let mut waiting: Vec<(usize, Box<Pending>)> = Vec::new();
    for (i, result) in greedy.into_iter().enumerate() {
        match result {
            Ok(t) => tiles.push(Some(t)),
            Err(p) => {
                tiles.push(None);
                waiting.push((i, p));
            }
        }
    }
    let batch = rayon::current_num_threads().max(1);
    let mut first_failure: Option<Box<FitFailure>> = None;
    let mut rest = waiting.into_iter();
    while first_failure.is_none() {
        let chunk: Vec<(usize, Box<Pending>)> = rest.by_ref().take(batch).collect();
        if chunk.is_empty() {
            break;
        }
        let searched: Vec<(usize, Result<TilePlacement, Box<FitFailure>>)> = chunk
            .into_par_iter()
            .map(|(i, pending)| {
                (
                    i,
                    place_exact(&problem.tiles[i], &problem.map, config, *pending),
                )
            })
            .collect();
        for (i, result) in searched {
            match result {
                Ok(t) => tiles[i] = Some(t),
                Err(f) => {
                    log_failure(&f);
                    if first_failure.is_none() {
                        first_failure = Some(f);
                    }
                }
            }
        }
    }
    if let Some(mut f) = first_failure {
        f.failing_tiles = unplaced;
        return Err(PlaceError::DoesNotFit(f));
    }
    let tiles: Vec<TilePlacement> = tiles.into_iter().flatten().collect();
    let summary = summarize(&tiles, &problem.map);
    let placement = Placement { tiles, summary };
    if config.verify {
        check_placement(problem, &placement).map_err(PlaceError::CheckFailed)?;
    }
    Ok(placement)
}

fn summarize(tiles: &[TilePlacement], map: &MemoryMap) -> PlacementSummary {
    let mut s = PlacementSummary {
        tiles: tiles.len(),
        worst_ratio: 1.0,
        min_headroom_bytes: u64::from(map.loader_limit() - map.sram_start()),
        ..PlacementSummary::default()
    };
    for t in tiles {
        s.requests += t.entries.len();
        if matches!(t.method, PlaceMethod::Exact { .. }) {
            s.exact_tiles += 1;
        }
        s.achieved_bytes += t.achieved_peak_bytes;
        let bound = t.bound.as_ref().map_or(0, |b| b.peak_with_reservations);
        s.bound_bytes += bound;
        if bound > 0 {
            let ratio = t.achieved_peak_bytes as f64 / bound as f64;
            if ratio > s.worst_ratio || s.worst_tile.is_none() {
                s.worst_ratio = ratio.max(s.worst_ratio);
                s.worst_tile = Some(t.tile);
            }
        }
        let end = u64::from(map.sram_start()) + t.achieved_peak_bytes;
        let headroom = u64::from(map.loader_limit()).saturating_sub(end);
        s.min_headroom_bytes = s.min_headroom_bytes.min(headroom);
    }
    s
}

fn log_failure(f: &FitFailure) {
    let active: Vec<(u32, u32, u32)> = f
        .live
        .iter()
        .map(|l| (l.last_step.unwrap_or(u32::MAX), l.start, l.bytes))
        .collect();
    tracing::debug!(
        tile = f.tile.as_u32(),
        class = %f.class,
        request = %f.request,
        bytes = f.bytes,
        alignment = f.alignment,
        first = f.first_step,
        last = f.last_step,
        free = ?f.free,
        active = ?active,
        verdict = %f.verdict,
        "tile allocation does not fit"
    );
}

/// Places one tile (public for callers that place tiles one by one).
pub fn place_tile(
    tile: &TileProblem,
    map: &MemoryMap,
    config: &PlaceConfig,
) -> Result<TilePlacement, Box<FitFailure>> {
    match place_greedy(tile, map, config) {
        Ok(placed) => Ok(placed),
        Err(pending) => place_exact(tile, map, config, *pending),
    }
}

/// A tile no greedy pass placed: what the exact search and the failure
/// report start from.
struct Pending {
    bound: TileBound,
    arena: Arena,
    failure: GreedyFailure,
}

/// The greedy passes of [`place_tile`]: the best placement they find, or
/// what the exact search needs.
fn place_greedy(
    tile: &TileProblem,
    map: &MemoryMap,
    config: &PlaceConfig,
) -> Result<TilePlacement, Box<Pending>> {
    let bound = lower_bound(tile, map);
    let arena = tile_arena(tile, map);
    let index = Neighbours::new(&arena.items);
    let mut best: Option<(u64, Vec<u64>, GreedyStrategy)> = None;
    let mut first_failure: Option<GreedyFailure> = None;
    // The primary strategies, then the fallbacks.
    let passes = || config.strategies.iter().chain(&config.fallback_strategies);
    for (k, &strategy) in passes().enumerate() {
        // Fallback passes run only while no primary pass has succeeded.
        if k >= config.strategies.len() && best.is_some() {
            break;
        }
        match greedy(&arena, &index, strategy) {
            Ok(offsets) => {
                let peak = peak_of(&arena, &offsets);
                if best.as_ref().is_none_or(|b| peak < b.0) {
                    best = Some((peak, offsets, strategy));
                }
            }
            Err(f) => {
                if first_failure.is_none() {
                    first_failure = Some(f);
                }
            }
        }
    }
    if let Some((_, offsets, strategy)) = best {
        return Ok(finish(
            tile,
            map,
            &arena,
            &bound,
            &offsets,
            PlaceMethod::Greedy(strategy),
        ));
    }
    // Items live throughout kept out of the lower windows, which are then
    // left to the short-lived ones.
    if let Some(high) = resident_high(&arena) {
        let high_index = Neighbours::new(&high.items);
        for &strategy in passes() {
            if let Ok(offsets) = greedy(&high, &high_index, strategy) {
                // The windows only narrowed: the addresses hold for the
                // tile's own arena.
                return Ok(finish(
                    tile,
                    map,
                    &arena,
                    &bound,
                    &offsets,
                    PlaceMethod::ResidentHigh(strategy),
                ));
            }
        }
    }
    // Every fixed order failed: let the order learn which items need to
    // go first, from the first strategy's order.
    if let Some(&first) = config.strategies.first() {
        let start = strategy_order(&arena, first.order);
        if let Some((offsets, passes)) =
            squeaky(&arena, &index, &start, first.fit, config.squeaky_passes)
        {
            return Ok(finish(
                tile,
                map,
                &arena,
                &bound,
                &offsets,
                PlaceMethod::Squeaky { passes },
            ));
        }
    }
    let failure = first_failure.unwrap_or(GreedyFailure {
        item: 0,
        offsets: vec![UNPLACED; arena.items.len()],
    });
    Err(Box::new(Pending {
        bound,
        arena,
        failure,
    }))
}

/// `arena` with every free item that is live in every section and may lie
/// in more than one window kept to the highest of them (a new window set
/// each), or `None` when there is no such item.
///
/// On a tile with two regions a greedy pass puts long-lived items, which
/// it takes first, at the lowest addresses: in the small region the code
/// also needs. The short-lived items, each step's operands and results,
/// then have to fit among them twice over: SigLIP so400m's batch 5 left a
/// tile whose weights, stacked for all 27 layers, took the region below
/// its interleaved one, undecided by 1,000,000 search nodes; with the
/// weights kept high, a greedy pass places it at once. Any placement found
/// so is one of the tile's own, since windows only narrow.
fn resident_high(arena: &Arena) -> Option<Arena> {
    let mut high = arena.clone();
    // Each narrowed window set, `(from, to)`.
    let mut narrowed: Vec<(u32, u32)> = Vec::new();
    for it in high.items.iter_mut() {
        if it.fixed.is_some() || it.start != 0 || it.end != arena.sections {
            continue;
        }
        let set = it.windows;
        let Some(windows) = arena.window_sets.get(set as usize) else {
            continue;
        };
        let Some(&last) = windows.last() else {
            continue;
        };
        if windows.len() < 2 {
            continue;
        }
        let new = match narrowed.iter().find(|&&(from, _)| from == set) {
            Some(&(_, to)) => to,
            None => {
                let to = high.window_sets.len() as u32;
                high.window_sets.push(vec![last]);
                narrowed.push((set, to));
                to
            }
        };
        it.windows = new;
    }
    (!narrowed.is_empty()).then_some(high)
}

/// The exact search of [`place_tile`] on a tile no greedy pass placed,
/// within the node budget; the failure report when it finds nothing.
fn place_exact(
    tile: &TileProblem,
    map: &MemoryMap,
    config: &PlaceConfig,
    pending: Pending,
) -> Result<TilePlacement, Box<FitFailure>> {
    let Pending {
        bound,
        arena,
        failure,
    } = pending;
    let mut search = SearchEnd::NotRun;
    // No split of the items between the windows fits every step: a proof
    // the search below could only reach by exhausting the placements. Like
    // the search, it recurses an item deep, so it takes the same tiles.
    let split = if bound.proves_infeasible() || tile.requests.len() > config.exact_max_requests {
        None
    } else {
        let nodes = config
            .exact_node_budget
            .saturating_mul(SPLIT_NODES_PER_SEARCH_NODE);
        match split_between_windows(&arena, nodes) {
            (Split::Impossible, nodes) => Some(nodes),
            _ => None,
        }
    };
    if let Some(nodes) = split {
        search = SearchEnd::Proved {
            nodes,
            relaxed: true,
        };
    } else if !bound.proves_infeasible() && tile.requests.len() <= config.exact_max_requests {
        let budget = ExactBudget {
            max_nodes: config.exact_node_budget,
            deadline: None,
            stop: None,
        };
        // On a thread of its own with a deep stack: the search recurses
        // once per decision, and a tile's search can go deeper than a
        // pool thread's stack (SigLIP b8 with `--alloc-effort 2000000`
        // overflowed one).
        let report = solve_exact_deep(&arena, budget.clone());
        let mut nodes = report.nodes;
        search = match report.outcome {
            ExactOutcome::Found(offsets) => {
                return Ok(finish(
                    tile,
                    map,
                    &arena,
                    &bound,
                    &offsets,
                    PlaceMethod::Exact { nodes },
                ));
            }
            ExactOutcome::Infeasible => SearchEnd::Proved {
                nodes,
                relaxed: false,
            },
            ExactOutcome::Unknown => SearchEnd::Unknown {
                nodes,
                budget: config.exact_node_budget,
            },
        };
        // With separation partners the search is not complete, so it
        // proves nothing; without them it is: a tile that cannot be placed
        // even without separation cannot be placed with it. The relaxed
        // search gets a budget of its own, and a placement it finds is
        // kept if it happens to separate the partners anyway.
        let unknown = matches!(search, SearchEnd::Unknown { .. });
        if let Some(relaxed) = without_partners(&arena).filter(|_| unknown) {
            let report = solve_exact_deep(&relaxed, budget);
            nodes += report.nodes;
            match report.outcome {
                ExactOutcome::Found(offsets) if separated(&arena, &offsets) => {
                    return Ok(finish(
                        tile,
                        map,
                        &arena,
                        &bound,
                        &offsets,
                        PlaceMethod::Exact { nodes },
                    ));
                }
                ExactOutcome::Infeasible => {
                    search = SearchEnd::Proved {
                        nodes,
                        relaxed: true,
                    };
                }
                _ => {
                    search = SearchEnd::Unknown {
                        nodes,
                        budget: config.exact_node_budget,
                    };
                }
            }
        }
    } else if !bound.proves_infeasible() {
        search = SearchEnd::Unknown {
            nodes: 0,
            budget: 0,
        };
    }
    Err(Box::new(explain(
        tile, map, &arena, &bound, failure, search,
    )))
}

/// Nodes of the region relaxation ([`split_between_windows`]) per node of
/// the exact search's budget: a relaxation node assigns one item to a
/// window and checks its sections, about 40 ns (SigLIP so400m text b42's
/// tile 1186: 2,606,166 nodes in 97 ms), where an exact-search node costs
/// microseconds.
const SPLIT_NODES_PER_SEARCH_NODE: u64 = 25;

/// The arena without separation partners, if it has any.
fn without_partners(arena: &Arena) -> Option<Arena> {
    if arena.items.iter().all(|it| it.partners.is_empty()) {
        return None;
    }
    let mut out = arena.clone();
    for it in &mut out.items {
        it.partners.clear();
    }
    Some(out)
}

/// Whether `offsets` keep every pair of partners in separate elements.
fn separated(arena: &Arena, offsets: &[u64]) -> bool {
    arena.items.iter().enumerate().all(|(i, it)| {
        it.partners.iter().all(|&j| {
            let j = j as usize;
            let a = arena.element_span(offsets[i], it.size);
            let b = arena.element_span(offsets[j], arena.items[j].size);
            match (a, b) {
                (Some(a), Some(b)) => a.1 <= b.0 || b.1 <= a.0,
                _ => true,
            }
        })
    })
}

/// The tile's placement from the offsets of its arena's items.
fn finish(
    tile: &TileProblem,
    map: &MemoryMap,
    arena: &Arena,
    bound: &TileBound,
    offsets: &[u64],
    method: PlaceMethod,
) -> TilePlacement {
    let n = tile.requests.len();
    let mut entries: Vec<(RequestId, u32)> = tile
        .requests
        .iter()
        .zip(&offsets[..n])
        .map(|(r, &o)| (r.id, u32::try_from(o).unwrap_or(u32::MAX)))
        .collect();
    entries.sort_by_key(|e| e.0);
    let peak = peak_of(arena, offsets).max(u64::from(map.sram_start()));
    TilePlacement {
        tile: tile.tile,
        entries,
        achieved_peak_bytes: peak - u64::from(map.sram_start()),
        bound: Some(bound.clone()),
        method,
    }
}
