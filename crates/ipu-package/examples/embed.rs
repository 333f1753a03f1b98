//! Embedding the package builder in another toolchain: the tiny SigLIP
//! fixture built with a placer and a kernel toolchain of the embedder's
//! own, kernels kept in memory, and the package run on the tile model
//! against the reference evaluation.
//!
//! The placer here is a plain first fit (a few dozen lines); a second,
//! broken placer moves one shard onto another that is live at the same
//! time, and the build's placement checker, which shares nothing with any
//! placer, rejects it with an error naming both requests.
//!
//! Run it with `cargo run -p ipu-package --example embed`.

use std::sync::atomic::{AtomicUsize, Ordering};

use ipu_alloc::{PlaceError, Placement, Placer, Problem, RequestId, TileProblem};
use ipu_kernels::{CompiledKernel, HostToolchain, KernelError, MemoryStore, Toolchain, Variant};
use ipu_package::build::{BuildConfig, BuildError, Stages, build_package};
use ipu_package::graph::{parse_fixture, values};
use ipu_sim::reference::{Tolerance, compare};

/// The fixture, as a user would have it on disk.
const TINY: &str = include_str!("../../../fixtures/tiny-2l-h64.json");

/// First fit in request order: each shard at the lowest address of its
/// class where it overlaps no shard placed before it that is live at the
/// same time. Requests that must not share a memory element with another
/// start on an element of their own and pad to its end.
struct FirstFitPlacer;

impl Placer for FirstFitPlacer {
    fn name(&self) -> &str {
        "first-fit"
    }

    fn place(&self, problem: &Problem) -> Result<Placement, PlaceError> {
        let mut tiles = Vec::with_capacity(problem.tiles.len());
        for tile in &problem.tiles {
            let placed = place_tile(tile, &problem.map).map_err(|why| failed(tile, why))?;
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

fn place_tile(
    tile: &TileProblem,
    map: &ipu_alloc::MemoryMap,
) -> Result<Vec<(RequestId, u32)>, String> {
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
            let mut at = start;
            loop {
                at = at.next_multiple_of(r.alignment.max(1));
                let mut stop = at + r.bytes;
                if separated && let Some(e) = map.element_of(at) {
                    // An element of its own: start on one, pad to its end.
                    if at != e.start {
                        at = e.end;
                    }
                    stop = (at + r.bytes).next_multiple_of(e.end - e.start);
                }
                if stop > end {
                    break;
                }
                match clashes(at, stop) {
                    Some(b) => at = b.1,
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

/// First fit, then one shard of tile 0 moved onto another that is live at
/// the same time: a placer with a bug.
struct OverlappingPlacer;

impl Placer for OverlappingPlacer {
    fn name(&self) -> &str {
        "overlapping"
    }

    fn place(&self, problem: &Problem) -> Result<Placement, PlaceError> {
        let mut tiles = Vec::with_capacity(problem.tiles.len());
        for tile in &problem.tiles {
            let mut placed = place_tile(tile, &problem.map).map_err(|why| failed(tile, why))?;
            if tile.tile.as_u32() == 0 {
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
            tiles.push((tile.tile, placed));
        }
        Ok(Placement::from_addresses(tiles))
    }
}

/// A toolchain of the embedder's: it compiles through the host toolchain,
/// under an identity of its own (so its kernels are cached apart), and
/// counts what it compiles.
#[derive(Default)]
struct CountingToolchain {
    compiled: AtomicUsize,
}

impl Toolchain for CountingToolchain {
    fn identity(&self) -> String {
        format!("embed-example-1/{}", HostToolchain.identity())
    }

    fn compile(&self, variant: &Variant) -> Result<CompiledKernel, KernelError> {
        self.compiled.fetch_add(1, Ordering::Relaxed);
        HostToolchain.compile(variant)
    }
}

fn stages(placer: Box<dyn Placer>) -> Stages {
    Stages {
        placer,
        toolchain: Box::new(CountingToolchain::default()),
        kernel_store: Box::new(MemoryStore::new()),
        ..Stages::in_memory()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let graph = parse_fixture(TINY)?;
    let config = BuildConfig {
        tiles: Some(16),
        ..BuildConfig::default()
    };

    // A placer that overlaps shards is caught by the checker.
    match build_package(&graph, &config, &stages(Box::new(OverlappingPlacer))) {
        Err(BuildError::PlacementRejected { placer, errors }) => {
            println!(
                "placer {placer} rejected: {} errors, first: {}",
                errors.len(),
                errors.first().map(ToString::to_string).unwrap_or_default()
            );
        }
        Ok(_) => return Err("an overlapping placement was accepted".into()),
        Err(e) => return Err(e.into()),
    }

    // The bump placer's placement passes, and the package runs.
    let stages = stages(Box::new(FirstFitPlacer));
    let package = build_package(&graph, &config, &stages)?;
    let s = &package.manifest.summary;
    println!(
        "built {} on {} tiles with placer {}: peak {} bytes, {} kernels",
        graph.name(),
        s.tile_count,
        stages.placer.name(),
        s.peak_bytes,
        s.kernels
    );
    let mut values = values::generate_weights(&graph, 1);
    values.extend(values::generate_inputs(&graph, 1));
    let device = ipu_sim::tiles::run_package(&package, &graph, &values)?;
    let reference = ipu_sim::evaluate(&graph, &values)?;
    for output in graph.outputs() {
        let t = graph.tensor(output);
        let (Some(r), Some(d)) = (reference.get(output), device.get(output)) else {
            return Err(format!("output {} is missing", t.name()).into());
        };
        let c = compare(r, d, Tolerance::graph(t.precision()));
        println!(
            "output {}: {} elements, max_abs {:.5}, {}",
            t.name(),
            c.elements,
            c.max_abs,
            if c.pass { "pass" } else { "FAIL" }
        );
        if !c.pass {
            return Err(format!("output {} does not match the reference", t.name()).into());
        }
    }
    Ok(())
}
