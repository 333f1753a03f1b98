//! `cargo xtask alloc tile FILE.json`: places one tile's placement problem
//! again, as the build's placer does, with as many exact-search nodes as
//! asked.
//!
//! `build-package --write-failed-tile FILE` writes the problem of the tile
//! a build could not place (`ipu_alloc::TileProblem` as JSON: the support
//! reservation and every request, with its memory class, alignment,
//! lifetime and separation partners). Placing it here takes seconds where
//! the build took a minute, so a user can give the search more nodes
//! (`--nodes`) or try another device's memory map (`--device`) and see
//! whether the tile fits, is proved impossible, or stays undecided.
//!
//! Prints one line, `result=fits|infeasible|undecided tile=... requests=...
//! nodes_budget=... elapsed_ms=...`, with `peak=` (bytes above the SRAM
//! start, reservations included) when it fits; otherwise the placer's
//! report goes out as the `error:` line and the exit status is 1.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use ipu_alloc::{MemoryMap, PlaceConfig, PlaceError, Problem, TileProblem, check_placement, place};

/// Options of `alloc tile`.
#[derive(clap::Args, Debug)]
pub struct TileArgs {
    /// The tile problem (JSON, as `build-package --write-failed-tile`
    /// writes it).
    #[arg(value_name = "FILE.json")]
    file: PathBuf,
    /// The device description whose memory map the tile has (default: the
    /// built-in IPU21 of the C600).
    #[arg(long, value_name = "FILE")]
    device: Option<PathBuf>,
    /// Exact-search nodes for the tile (default: the build's).
    #[arg(long, value_name = "NODES")]
    nodes: Option<u64>,
}

/// Largest tile-problem file read: a tile holds at most a few thousand
/// requests, each under 200 bytes of JSON.
const MAX_FILE_BYTES: u64 = 64 << 20;

pub fn alloc_tile(args: &TileArgs) -> Result<ExitCode, String> {
    let file = args.file.display();
    let size = std::fs::metadata(&args.file)
        .map_err(|e| format!("cannot read {file}: {e}"))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(format!(
            "{file} is {size} bytes; a tile problem is at most {MAX_FILE_BYTES}"
        ));
    }
    let text =
        std::fs::read_to_string(&args.file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let tile: TileProblem = serde_json::from_str(&text)
        .map_err(|e| format!("{file} is not a tile problem (JSON): {e}"))?;
    let target = crate::device::read(args.device.as_deref()).map_err(|e| e.to_string())?;
    let config = PlaceConfig {
        exact_node_budget: args
            .nodes
            .unwrap_or(PlaceConfig::default().exact_node_budget),
        ..PlaceConfig::default()
    };
    let name = tile.tile;
    let requests = tile.requests.len();
    let problem = Problem {
        map: MemoryMap::new(&target),
        tiles: vec![tile],
    };
    let started = Instant::now();
    let placed = place(&problem, &config);
    let line = |result: &str| {
        format!(
            "result={result} tile={name} requests={requests} nodes_budget={} elapsed_ms={}",
            config.exact_node_budget,
            started.elapsed().as_millis()
        )
    };
    match placed {
        Ok(placement) => {
            // The placer checks its own result; this is the independent
            // checker's word.
            check_placement(&problem, &placement).map_err(|errors| {
                format!(
                    "the placement does not check: {}",
                    errors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            })?;
            let peak = placement
                .tiles()
                .first()
                .map_or(0, |t| t.achieved_peak_bytes());
            println!("{} peak={peak}", line("fits"));
            Ok(ExitCode::SUCCESS)
        }
        Err(PlaceError::DoesNotFit(failure)) => {
            let result = if failure.verdict.is_proof() {
                "infeasible"
            } else {
                "undecided"
            };
            println!("{}", line(result));
            Err(PlaceError::DoesNotFit(failure).to_string())
        }
        Err(other) => Err(format!("{file}: {other}")),
    }
}
