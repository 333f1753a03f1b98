//! `cargo xtask report PKG --out report.html`: one self-contained HTML page
//! a person reads to see where a package's time and memory go.
//!
//! The page holds the timeline of steps (compute against exchange, each
//! repeat's body once with its count, the busiest tile named), live memory
//! per tile over steps as a heatmap with the fullest tile and step marked,
//! the largest buffers on a chosen tile at its fullest step, the exchange
//! phases' horizons against their bounds, and the GEMM kernel table with
//! AMP utilisation. Figures come from the fresh cycle estimate
//! (`profile::fresh_profile`, checked against the package's
//! `profile.json`), the package's memory profile and the storage plan of
//! its program (which buffers each tile holds, from when to when).
//!
//! The HTML, CSS and JavaScript are this crate's files (`src/report/`),
//! embedded with `include_str!`; the data goes in a JSON block inside the
//! page. The page loads nothing: no network, no external scripts, and a
//! Content-Security-Policy that forbids both. When its script has drawn
//! everything it writes what it drew, and every error it met, into
//! `#selfcheck`, which the headless-browser test reads.

use std::path::PathBuf;
use std::process::ExitCode;

use ipu_alloc::MemoryProfile;
use ipu_layout::{EntityId, MemoryClass};
use ipu_package::package::Package;
use ipu_package::profile::{Profile, StepKind};
use ipu_package::{StoragePlan, plan_storage};
use serde_json::{Value, json};

const PAGE: &str = include_str!("report/page.html");
const CSS: &str = include_str!("report/page.css");
const JS: &str = include_str!("report/page.js");

/// Buffers listed per tile.
const BUFFERS_PER_TILE: usize = 12;

/// Options of `report`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The package directory.
    package: PathBuf,
    /// The HTML file to write.
    #[arg(long)]
    out: PathBuf,
    /// The tile whose largest buffers the page shows first (default: the
    /// tile with the fullest step).
    #[arg(long)]
    tile: Option<u32>,
}

pub fn run(args: &Args) -> Result<ExitCode, String> {
    let package = Package::read(&args.package)
        .map_err(|e| format!("reading the package {}: {e}", args.package.display()))?;
    let tiles = package.manifest.tile_count;
    if let Some(t) = args.tile
        && t >= tiles
    {
        eprintln!(
            "error: '--tile {t}': the package has {tiles} tiles; give 0 to {}",
            tiles - 1
        );
        return Ok(ExitCode::from(2));
    }
    let profile = crate::profile::fresh_profile(&package)?;
    let memory = MemoryProfile::from_json(&package.memory_profile)
        .map_err(|e| format!("the package's memory-profile.json: {e}"))?;
    let storage = plan_storage(&package.program, tiles)
        .map_err(|e| format!("the storage plan of the package's program: {e}"))?;
    let data = report_data(&package, &profile, &memory, &storage, args.tile);
    let html = page(
        &format!("{} — package report", package.manifest.name),
        &data,
    )?;
    write_atomically(&args.out, html.as_bytes())?;
    println!(
        "report written to {} ({} bytes)",
        args.out.display(),
        html.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// The page with its styles, data and script filled in.
pub(crate) fn page(title: &str, data: &Value) -> Result<String, String> {
    let json = serde_json::to_string(data).map_err(|e| format!("the report data: {e}"))?;
    // `<` appears in JSON only inside strings, where `\u003c` is the same
    // character: no string can then close the script element early.
    let json = json.replace('<', "\\u003c");
    let title = title
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    Ok(PAGE
        .replacen("@TITLE@", &title, 1)
        .replacen("@CSS@", CSS, 1)
        .replacen("@JS@", JS, 1)
        .replacen("@DATA@", &json, 1))
}

/// Writes `bytes` to `path` through a temporary file beside it, so that a
/// reader never sees half a report.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<(), String> {
    let name = path
        .file_name()
        .ok_or_else(|| format!("--out {}: give a file name", path.display()))?;
    let mut temporary = name.to_owned();
    temporary.push(format!(".tmp-{}", std::process::id()));
    let temporary = path.with_file_name(temporary);
    std::fs::write(&temporary, bytes)
        .map_err(|e| format!("writing {}: {e}", temporary.display()))?;
    std::fs::rename(&temporary, path).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        format!("writing {}: {e}", path.display())
    })
}

/// Everything the page draws.
fn report_data(
    package: &Package,
    profile: &Profile,
    memory: &MemoryProfile,
    storage: &StoragePlan,
    tile: Option<u32>,
) -> Value {
    let t = &profile.totals;
    let target = &package.target;
    let usable = u64::from(target.usable_bytes());
    let steps: Vec<Value> = profile
        .steps
        .iter()
        .map(|s| {
            json!({
                "i": s.index,
                "name": s.name,
                "kind": match s.kind { StepKind::Compute => "compute", StepKind::Exchange => "exchange" },
                "op_kind": s.op_kind,
                "op": s.op,
                "repeat": s.repeat,
                "runs": s.runs,
                "cycles": s.cycles,
                "work": s.work_cycles,
                "floor": s.floor_cycles,
                "sync": s.sync_cycles,
                "busiest": s.busiest_tile,
                "active": s.active_tiles,
                "mean": s.mean_tile_cycles,
                "x": s.exchange.as_ref().map(|x| json!({
                    "phase": x.phase,
                    "horizon": x.horizon,
                    "bound": x.endpoint_lower_bound,
                    "stronger": x.stronger_lower_bound,
                    "row_tile": x.longest_row_tile,
                    "row_cycles": x.longest_row_cycles,
                    "copy_tile": x.copy_tile,
                    "copy": x.copy_cycles,
                })),
            })
        })
        .collect();
    let step_count = profile.steps.len();
    let tiles = package.manifest.tile_count as usize;
    // Live bytes per tile and step, from the memory profile's runs.
    let mut live = vec![vec![0u64; step_count]; tiles];
    let mut tile_peak_step = vec![0u32; tiles];
    for tp in &memory.tiles {
        let t = tp.tile.index();
        let Some(row) = live.get_mut(t) else {
            continue;
        };
        tile_peak_step[t] = tp.peak_step;
        for run in &tp.runs {
            let last = (run.last_step as usize).min(step_count.saturating_sub(1));
            for slot in row.iter_mut().take(last + 1).skip(run.first_step as usize) {
                *slot = run.total();
            }
        }
    }
    let (names, buffers) = largest_buffers(package, storage, &tile_peak_step);
    let support: Vec<u32> = package
        .placement
        .support
        .iter()
        .map(|s| s.reserved)
        .collect();
    let default_tile = tile.or(memory.peak_tile.map(|t| t.as_u32())).unwrap_or(0);
    json!({
        "name": package.manifest.name,
        "target": profile.target,
        "tiles": profile.tile_count,
        "clock_hz": profile.clock_hz,
        "items": profile.work.items,
        "sync_per_step": profile.sync_cycles_per_step,
        "usable_bytes": usable,
        "totals": {
            "cycles": t.cycles,
            "compute": t.compute_cycles,
            "exchange": t.exchange_cycles,
            "sync": t.sync_cycles,
            "amp_macs": t.amp_macs,
        },
        "derived": {
            "items_per_s": profile.items_per_second(),
            "amp_util": profile.amp_utilisation(),
            "roofline_ratio": profile.roofline_ratio(),
            "fp8_roofline_ratio": profile.fp8_roofline_ratio(),
        },
        "roofline_cycles": profile.roofline_cycles,
        "fp8_roofline_cycles": profile.fp8_roofline_cycles,
        "model_macs": profile.work.macs.total(),
        "attention_macs": profile.work.macs.attention,
        "kernel_check": {
            "entries": profile.kernel_check.entries,
            "agreeing": profile.kernel_check.agreeing,
        },
        "repeats": profile.repeats.iter().map(|r| json!({
            "name": r.name,
            "count": r.count,
            "first": r.first_step,
            "steps": r.steps,
            "cycles": r.cycles,
            "compute": r.compute_cycles,
            "exchange": r.exchange_cycles,
            "sync": r.sync_cycles,
            "roofline": r.roofline_cycles,
        })).collect::<Vec<_>>(),
        "steps": steps,
        "op_kinds": profile.op_kinds.iter().map(|k| json!({
            "kind": k.op_kind,
            "runs": k.step_runs,
            "compute": k.compute_cycles,
            "exchange": k.exchange_cycles,
            "sync": k.sync_cycles,
        })).collect::<Vec<_>>(),
        "codelets": profile.codelets.iter().map(|c| json!({
            "kind": c.kind,
            "calls": c.calls,
            "cycles": c.busiest_cycles,
        })).collect::<Vec<_>>(),
        "kernels": profile.kernels.iter().map(|k| json!({
            "name": k.name,
            "instruction": k.instruction,
            "blocks": k.blocks,
            "shape": k.shape,
            "entries": k.entries.iter().map(|e| json!({
                "rows": e.rows,
                "accumulate": e.accumulate,
                "cycles": e.cycles,
                "macs": e.macs,
                "util_ppm": e.utilisation_ppm,
                "calls": e.calls,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "memory": {
            "steps": step_count,
            "tiles": tiles,
            "live": live,
            "peak_tile": memory.peak_tile.map(|t| t.as_u32()),
            "peak_step": memory.peak_step,
            "peak_bytes": memory.effective_peak_bytes,
            "tile_peak_step": tile_peak_step,
        },
        "buffers": {
            "names": names,
            "tiles": buffers,
            "support": support,
        },
        "default_tile": default_tile,
    })
}

/// Per tile, its largest requests live at `peak_step[tile]`, as `[name
/// index, bytes, first step, last step, interleaved (0/1), address]`, and
/// the interned names. A stacked request (a repeat's per-iteration weights)
/// is named after its first buffer with the number of buffers it holds.
fn largest_buffers(
    package: &Package,
    storage: &StoragePlan,
    peak_step: &[u32],
) -> (Vec<String>, Vec<Vec<Value>>) {
    let mut names: Vec<String> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(storage.tiles.len());
    for (t, ts) in storage.tiles.iter().enumerate() {
        let step = peak_step.get(t).copied().unwrap_or(0);
        let mut live: Vec<usize> = (0..ts.requests.len())
            .filter(|&i| {
                let r = &ts.requests[i];
                r.first_step <= step && step <= r.last_step
            })
            .collect();
        live.sort_by(|&a, &b| {
            ts.requests[b]
                .bytes
                .cmp(&ts.requests[a].bytes)
                .then(a.cmp(&b))
        });
        let rows = live
            .into_iter()
            .take(BUFFERS_PER_TILE)
            .map(|i| {
                let r = &ts.requests[i];
                let members = &ts.members[i];
                let first = members.first().map(|m| m.0);
                let mut name = first
                    .and_then(|b| package.program.buffers.values().get(b.index()))
                    .map_or_else(|| "?".to_owned(), |b| b.name.clone());
                if members.len() > 1 {
                    name.push_str(&format!(" (+{} per-iteration copies)", members.len() - 1));
                }
                let id = *index.entry(name.clone()).or_insert_with(|| {
                    names.push(name);
                    names.len() - 1
                });
                let address = first.and_then(|b| {
                    package
                        .placement
                        .addresses
                        .get(b, ipu_layout::TileId::from_u32(t as u32))
                });
                json!([
                    id,
                    r.bytes,
                    r.first_step,
                    r.last_step,
                    u8::from(r.class == MemoryClass::Ipu21Interleaved),
                    address
                ])
            })
            .collect();
        out.push(rows);
    }
    (names, out)
}
