//! `cargo xtask exchange`: exchange scheduling figures.
//!
//! Times are meaningful only from an optimised build:
//! `cargo run --release -p xtask -- exchange ...`.
//!
//! `cargo xtask exchange FILE.json` schedules every phase of a snapshot and
//! prints transfers, bounds, horizon, gap, row bytes and time per phase and
//! in total. `cargo xtask exchange --families` does the same for the
//! generated phase families shaped like the seed log (unicast), then the
//! multicast and paired families, the multicast families with fanouts up to
//! 400, the split-K reduce families and the GEMM operand grids. `--check` also runs the checker on
//! every schedule (its time is reported apart); `--write DIR` stores the generated
//! families as snapshots; `--only TEXT` keeps the families whose name
//! contains TEXT. `--slack-ppm N` sets the target horizon slack and
//! `--no-fanout-split` keeps multicast transfers whole;
//! `--presplit-max-fanout N` splits multicasts only up to fanout N before
//! scheduling (the package builder's choice is 2, with `--no-core-split`);
//! `--no-receiver-sets` leaves every phase to the event core;
//! `--split-jobs N` schedules job sets of N jobs or more as two halves in
//! time, one per thread.
//! The exit status is 1, with an `error:` line, when a phase does not
//! validate (the scheduler refuses it) or, with `--check`, a schedule fails
//! the checker.

use std::process::ExitCode;

use ipu_exchange::generate::{
    generate_phase, grid_families, grid_phase, multicast_families, other_families, reduce_families,
    reduce_phase, seed_families,
};
use ipu_exchange::report::{PhaseFigures, format_figures, phase_figures};
use ipu_exchange::{Fabric, Phase, ScheduleConfig, Snapshot};

/// The phases that failed, as `Err` with a reason: a phase the scheduler
/// refused (its phase did not validate) or whose schedule the checker
/// refused.
fn failures(figures: &[PhaseFigures]) -> Result<(), String> {
    let failed: Vec<String> = figures
        .iter()
        .filter_map(|f| match &f.outcome {
            Err(e) => Some(format!("phase {}: {e}", f.phase)),
            Ok(o) => match o.check {
                Some((n, _)) if n > 0 => Some(format!("phase {}: {n} checker error(s)", f.phase)),
                _ => None,
            },
        })
        .collect();
    match failed.first() {
        None => Ok(()),
        Some(first) => Err(format!(
            "{} of {} phase(s) failed; first: {first}",
            failed.len(),
            figures.len()
        )),
    }
}

pub fn run(args: &[String]) -> Result<ExitCode, String> {
    let fabric = Fabric::ipu21().map_err(|e| e.to_string())?;
    // The checker runs separately (with --check) so that times are the
    // scheduler's alone.
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u32>().ok())
    };
    let defaults = ScheduleConfig::default();
    let whole = args.iter().any(|a| a == "--no-fanout-split");
    let config = ScheduleConfig {
        verify: false,
        fanout_split: !whole && !args.iter().any(|a| a == "--no-core-split"),
        presplit_max_fanout: if whole {
            0
        } else {
            value("--presplit-max-fanout").unwrap_or(defaults.presplit_max_fanout)
        },
        target_slack_ppm: value("--slack-ppm").unwrap_or(defaults.target_slack_ppm),
        receiver_sets: !args.iter().any(|a| a == "--no-receiver-sets"),
        split_jobs: value("--split-jobs").map_or(defaults.split_jobs, |n| n as usize),
        ..defaults
    };
    let check = args.iter().any(|a| a == "--check");
    let write = args
        .iter()
        .position(|a| a == "--write")
        .and_then(|i| args.get(i + 1));
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1));
    if args.iter().any(|a| a == "--families") {
        // Only the families kept by --only are generated.
        let keep = |name: &String| only.is_none_or(|o| name.contains(o.as_str()));
        // Each family's phase, generated only when --only keeps it.
        fn generated<C>(
            families: Vec<(String, C)>,
            keep: impl Fn(&String) -> bool,
            make: impl Fn(&C) -> Phase,
        ) -> Vec<(String, Option<Phase>)> {
            families
                .into_iter()
                .map(|(name, c)| {
                    let phase = keep(&name).then(|| make(&c));
                    (name, phase)
                })
                .collect()
        }
        let named = |families| generated(families, keep, generate_phase);
        let grid = generated(grid_families(), keep, grid_phase);
        let reduce = generated(reduce_families(), keep, reduce_phase);
        for (title, families) in [
            ("seed-shaped unicast families", named(seed_families())),
            ("multicast and paired families", named(other_families())),
            (
                "wide-multicast families (fanout up to 400)",
                named(multicast_families()),
            ),
            ("reduce families (split-K partial-sum gathers)", reduce),
            (
                "grid families (GEMM operands to row and column groups)",
                grid,
            ),
        ] {
            let phases: Vec<(u32, Phase)> = families
                .iter()
                .enumerate()
                .filter_map(|(i, (_, p))| p.clone().map(|p| (i as u32, p)))
                .collect();
            if phases.is_empty() {
                continue;
            }
            println!("{title}:");
            for (i, (name, _)) in families.iter().enumerate() {
                println!("  phase {i}: {name}");
            }
            if let Some(dir) = write {
                let file = format!("{dir}/{}.json", title.split(' ').next().unwrap_or("phases"));
                let only: Vec<Phase> = phases.iter().map(|(_, p)| p.clone()).collect();
                let snapshot = Snapshot::from_phases(fabric.tile_count(), &only);
                std::fs::write(&file, snapshot.to_json())
                    .map_err(|e| format!("cannot write {file}: {e}"))?;
                println!("  wrote {file}");
            }
            let figures = phase_figures(&phases, &fabric, &config, check);
            print!("{}", format_figures(&figures));
            failures(&figures)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(file) = args.iter().find(|a| !a.starts_with("--")) else {
        return Err(
            "usage: cargo xtask exchange FILE.json [--check] | --families [--check] [--write DIR]"
                .to_owned(),
        );
    };
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let snapshot = Snapshot::from_json(&text).map_err(|e| format!("{file}: {e}"))?;
    let labels: Vec<u32> = snapshot.phases.iter().map(|p| p.phase).collect();
    let phases: Vec<(u32, Phase)> = labels.into_iter().zip(snapshot.phases()).collect();
    let figures = phase_figures(&phases, &fabric, &config, check);
    print!("{}", format_figures(&figures));
    failures(&figures)?;
    Ok(ExitCode::SUCCESS)
}
