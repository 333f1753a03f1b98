//! Figures per phase and in total, for `cargo xtask exchange`.
//!
//! The tool's logic lives here, not in xtask, so that tests can feed it
//! arbitrary snapshots and assert it never panics.

use std::fmt::Write as _;
use std::time::Instant;

use crate::check::check_schedule;
use crate::error::ScheduleError;
use crate::fabric::Fabric;
use crate::model::Phase;
use crate::schedule::{ScheduleConfig, schedule};
use crate::snapshot::{Snapshot, SnapshotError};

/// Figures of one scheduled phase.
#[derive(Clone, Debug)]
pub struct PhaseFigures {
    /// The phase's number.
    pub phase: u32,
    /// Transfers.
    pub transfers: usize,
    /// Endpoint lower bound.
    pub endpoint_bound: u64,
    /// Stronger lower bound.
    pub stronger_bound: u64,
    /// Multicast lower bound.
    pub multicast_bound: u64,
    /// Achieved horizon, or the error that stopped scheduling.
    pub outcome: Result<PhaseOutcome, ScheduleError>,
}

/// What scheduling a phase achieved.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseOutcome {
    /// Horizon in cycles.
    pub horizon: u64,
    /// "ordinary" or "paired".
    pub kind: &'static str,
    /// Uninterrupted send segments.
    pub segments: usize,
    /// Bytes of all distinct rows.
    pub total_row_bytes: u64,
    /// Bytes of the longest row.
    pub largest_row_bytes: u64,
    /// Milliseconds to schedule and encode.
    pub elapsed_ms: f64,
    /// Checker errors and milliseconds, if the checker ran.
    pub check: Option<(usize, f64)>,
}

/// Schedules (and, with `check`, checks) every phase in order.
pub fn phase_figures(
    phases: &[(u32, Phase)],
    fabric: &Fabric,
    config: &ScheduleConfig,
    check: bool,
) -> Vec<PhaseFigures> {
    phases
        .iter()
        .map(|(label, phase)| {
            let endpoint_bound = crate::endpoint_lower_bound(phase, fabric);
            let stronger_bound = crate::stronger_lower_bound(phase, fabric);
            let config = ScheduleConfig {
                phase_label: *label,
                ..config.clone()
            };
            let started = Instant::now();
            let scheduled = schedule(phase, fabric, &config);
            let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
            let multicast_bound = match &scheduled {
                Ok(s) => s.multicast_lower_bound(),
                Err(_) => crate::multicast_lower_bound(phase, fabric).max(stronger_bound),
            };
            let outcome = scheduled.map(|s| {
                let check = check.then(|| {
                    let started = Instant::now();
                    let errors = check_schedule(phase, fabric, s.rows())
                        .err()
                        .map_or(0, |e| e.len());
                    (errors, started.elapsed().as_secs_f64() * 1e3)
                });
                PhaseOutcome {
                    horizon: s.horizon(),
                    kind: s.kind().name(),
                    segments: s.segments(),
                    total_row_bytes: s.rows().total_bytes(),
                    largest_row_bytes: s.rows().largest_row().map_or(0, |(_, b)| b),
                    elapsed_ms,
                    check,
                }
            });
            PhaseFigures {
                phase: *label,
                transfers: phase.transfers.len(),
                endpoint_bound,
                stronger_bound,
                multicast_bound,
                outcome,
            }
        })
        .collect()
}

/// The figures as a text table with a total line.
pub fn format_figures(figures: &[PhaseFigures]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>11} {:>9} {:>10} {:>6} {:>9}",
        "phase",
        "transfers",
        "endpoint",
        "stronger",
        "multicast",
        "horizon",
        "gap%",
        "mgap%",
        "kind",
        "segments",
        "row_bytes",
        "max_row",
        "ms",
        "check",
        "check_ms"
    );
    let (mut transfers, mut endpoint, mut stronger, mut multicast) = (0usize, 0u64, 0u64, 0u64);
    let (mut horizon, mut bytes, mut largest) = (0u64, 0u64, 0u64);
    let (mut ms, mut check_ms, mut failures) = (0f64, 0f64, 0usize);
    for f in figures {
        match &f.outcome {
            Ok(o) => {
                transfers += f.transfers;
                endpoint += f.endpoint_bound;
                stronger += f.stronger_bound;
                multicast += f.multicast_bound;
                horizon += o.horizon;
                bytes += o.total_row_bytes;
                largest = largest.max(o.largest_row_bytes);
                ms += o.elapsed_ms;
                check_ms += o.check.map_or(0.0, |c| c.1);
                let _ = writeln!(
                    out,
                    "{:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8.3} {:>8.3} {:>8} {:>9} {:>11} {:>9} {:>10.1} {:>6} {:>9}",
                    f.phase,
                    f.transfers,
                    f.endpoint_bound,
                    f.stronger_bound,
                    f.multicast_bound,
                    o.horizon,
                    gap_percent(o.horizon, f.endpoint_bound),
                    gap_percent(o.horizon, f.multicast_bound),
                    o.kind,
                    o.segments,
                    o.total_row_bytes,
                    o.largest_row_bytes,
                    o.elapsed_ms,
                    match o.check {
                        None => "-".to_owned(),
                        Some((0, _)) => "ok".to_owned(),
                        Some((n, _)) => n.to_string(),
                    },
                    o.check.map_or("-".to_owned(), |c| format!("{:.1}", c.1)),
                );
            }
            Err(e) => {
                failures += 1;
                let _ = writeln!(out, "{:>6} {:>9} error: {e}", f.phase, f.transfers);
            }
        }
    }
    let _ = writeln!(
        out,
        "{:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8.3} {:>8.3} {:>8} {:>9} {:>11} {:>9} {:>10.1} {:>6} {:>9.1}",
        "total",
        transfers,
        endpoint,
        stronger,
        multicast,
        horizon,
        gap_percent(horizon, endpoint),
        gap_percent(horizon, multicast),
        "",
        "",
        bytes,
        largest,
        ms,
        "",
        check_ms
    );
    let _ = writeln!(
        out,
        "sum horizon / sum endpoint bound = {:.4}; / sum stronger bound = {:.4}; / sum multicast bound = {:.4}; {failures} phase(s) failed",
        ratio(horizon, endpoint),
        ratio(horizon, stronger),
        ratio(horizon, multicast)
    );
    out
}

fn gap_percent(horizon: u64, bound: u64) -> f64 {
    (ratio(horizon, bound) - 1.0) * 100.0
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 1.0 } else { a as f64 / b as f64 }
}

/// Parses a snapshot and reports on every phase (a phase that fails to
/// schedule is a line of the report).
pub fn snapshot_report(
    text: &str,
    fabric: &Fabric,
    config: &ScheduleConfig,
    check: bool,
) -> Result<String, SnapshotError> {
    let snapshot = Snapshot::from_json(text)?;
    let labels: Vec<u32> = snapshot.phases.iter().map(|p| p.phase).collect();
    let phases: Vec<(u32, Phase)> = labels.into_iter().zip(snapshot.phases()).collect();
    Ok(format_figures(&phase_figures(
        &phases, fabric, config, check,
    )))
}
