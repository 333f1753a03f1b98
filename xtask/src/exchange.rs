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

use std::path::{Path, PathBuf};
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

/// Options of `exchange`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A phase snapshot to schedule (e.g. from `build-package
    /// --write-phases`)
    #[arg(
        value_name = "FILE.json",
        required_unless_present = "families",
        conflicts_with = "families"
    )]
    file: Option<PathBuf>,
    /// Schedule the generated phase families instead of a snapshot
    #[arg(long)]
    families: bool,
    /// Also run the checker on every schedule (its time is reported apart)
    #[arg(long)]
    check: bool,
    /// With --families: also write the generated families as snapshots
    /// into DIR
    #[arg(long, value_name = "DIR", conflicts_with = "file")]
    write: Option<PathBuf>,
    /// With --families: keep the families whose name contains TEXT
    #[arg(long, value_name = "TEXT", conflicts_with = "file")]
    only: Option<String>,
    #[command(flatten)]
    settings: Settings,
}

/// The scheduler settings `exchange` takes.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct Settings {
    /// The target horizon slack, in parts per million
    #[arg(long, value_name = "N")]
    slack_ppm: Option<u32>,
    /// Keep multicast transfers whole (no split by fanout, in the core or
    /// before scheduling)
    #[arg(long)]
    no_fanout_split: bool,
    /// The core does not split multicasts by fanout while it schedules
    /// (the package builder's choice)
    #[arg(long)]
    no_core_split: bool,
    /// Split multicasts only up to this fanout before scheduling (the
    /// package builder's choice is 2)
    #[arg(long, value_name = "N")]
    presplit_max_fanout: Option<u32>,
    /// Do not schedule by receiver sets first: leave every phase to the
    /// event core
    #[arg(long)]
    no_receiver_sets: bool,
    /// Schedule job sets of N jobs or more as two halves in time, one per
    /// thread
    #[arg(long, value_name = "N")]
    split_jobs: Option<usize>,
}

impl Settings {
    /// The scheduler's configuration. The checker runs separately (with
    /// --check) so that times are the scheduler's alone.
    pub(crate) fn config(&self) -> ScheduleConfig {
        let defaults = ScheduleConfig::default();
        let whole = self.no_fanout_split;
        ScheduleConfig {
            verify: false,
            fanout_split: !whole && !self.no_core_split,
            presplit_max_fanout: if whole {
                0
            } else {
                self.presplit_max_fanout
                    .unwrap_or(defaults.presplit_max_fanout)
            },
            target_slack_ppm: self.slack_ppm.unwrap_or(defaults.target_slack_ppm),
            receiver_sets: !self.no_receiver_sets,
            split_jobs: self.split_jobs.unwrap_or(defaults.split_jobs),
            ..defaults
        }
    }
}

pub fn run(args: &Args) -> Result<ExitCode, String> {
    let config = args.settings.config();
    match &args.file {
        Some(file) => snapshot(file, &config, args.check),
        None => families(args, &config),
    }
}

/// Schedules every phase of the snapshot in `file` with `config` and
/// prints the figures; `Err` when a phase fails.
pub(crate) fn snapshot(
    file: &Path,
    config: &ScheduleConfig,
    check: bool,
) -> Result<ExitCode, String> {
    let fabric = Fabric::ipu21().map_err(|e| e.to_string())?;
    let name = file.display();
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {name}: {e}"))?;
    let snapshot = Snapshot::from_json(&text).map_err(|e| format!("{name}: {e}"))?;
    let labels: Vec<u32> = snapshot.phases.iter().map(|p| p.phase).collect();
    let phases: Vec<(u32, Phase)> = labels.into_iter().zip(snapshot.phases()).collect();
    let figures = phase_figures(&phases, &fabric, config, check);
    print!("{}", format_figures(&figures));
    failures(&figures)?;
    Ok(ExitCode::SUCCESS)
}

/// `--families`: the generated families, scheduled and printed.
fn families(args: &Args, config: &ScheduleConfig) -> Result<ExitCode, String> {
    let fabric = Fabric::ipu21().map_err(|e| e.to_string())?;
    let (check, write, only) = (args.check, &args.write, &args.only);
    // Only the families kept by --only are generated.
    let keep = |name: &String| only.as_deref().is_none_or(|o| name.contains(o));
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
            let file = dir.join(format!(
                "{}.json",
                title.split(' ').next().unwrap_or("phases")
            ));
            let only: Vec<Phase> = phases.iter().map(|(_, p)| p.clone()).collect();
            let snapshot = Snapshot::from_phases(fabric.tile_count(), &only);
            std::fs::write(&file, snapshot.to_json())
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
            println!("  wrote {}", file.display());
        }
        let figures = phase_figures(&phases, &fabric, config, check);
        print!("{}", format_figures(&figures));
        failures(&figures)?;
    }
    Ok(ExitCode::SUCCESS)
}
