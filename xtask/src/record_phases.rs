//! `build-package --write-phases FILE`: the exchange phases a build
//! schedules, written as a snapshot that `cargo xtask exchange FILE`
//! schedules again with other settings.
//!
//! The recorder is an [`ExchangeScheduler`] around the build's own: the
//! package builder calls it like any scheduler stage, so the phases are
//! exactly the ones the build scheduled, at their placed addresses, and
//! the package is the same with or without it. Readdressed phases are not
//! recorded (the inner scheduler's outputs keep their readdress
//! capability, which does not pass through the recorder): the next
//! iteration of a repeat body is the same transfers elsewhere, and a step a
//! later placement round only readdresses keeps the addresses it was first
//! scheduled at in the file.

use std::sync::{Arc, Mutex, PoisonError};

use ipu_exchange::{
    ExchangeScheduler, Fabric, Phase, ScheduleError, ScheduleOutput, ScheduleRequest, Snapshot,
    ValidPhase,
};

/// The phases scheduled so far, by label.
pub(crate) type Recorded = Arc<Mutex<Vec<(u32, Phase)>>>;

/// Schedules with `inner` and keeps a copy of every phase it was given.
pub(crate) struct Recorder {
    pub inner: Box<dyn ExchangeScheduler>,
    pub phases: Recorded,
}

impl ExchangeScheduler for Recorder {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn schedule(
        &self,
        phase: ValidPhase<'_>,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<ScheduleOutput, ScheduleError> {
        self.phases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((request.label, phase.phase().clone()));
        self.inner.schedule(phase, fabric, request)
    }
}

/// Refuses, before any work, a `--write-phases` path that cannot be
/// written: a directory, or a file in a directory that does not exist.
pub(crate) fn check_file(file: &std::path::Path) -> Result<(), String> {
    if file.is_dir() {
        return Err(format!(
            "--write-phases {}: it is a directory; give a file name",
            file.display()
        ));
    }
    let parent = file.parent().unwrap_or(std::path::Path::new(""));
    if !parent.as_os_str().is_empty() && !parent.is_dir() {
        return Err(format!(
            "--write-phases {}: the directory {} does not exist",
            file.display(),
            parent.display()
        ));
    }
    Ok(())
}

/// Writes the recorded phases in label order (a label scheduled twice
/// keeps its last phase); snapshot phase `i` is the build's step `i` when
/// every step was scheduled.
pub(crate) fn write(
    phases: &Recorded,
    tile_count: u32,
    file: &std::path::Path,
) -> Result<usize, String> {
    let mut list = std::mem::take(&mut *phases.lock().unwrap_or_else(PoisonError::into_inner));
    // Stable: of a label's phases, the last scheduled is kept.
    list.sort_by_key(|(label, _)| *label);
    let mut last: Vec<(u32, Phase)> = Vec::with_capacity(list.len());
    for (label, phase) in list {
        match last.last_mut() {
            Some((l, p)) if *l == label => *p = phase,
            _ => last.push((label, phase)),
        }
    }
    let ordered: Vec<Phase> = last.into_iter().map(|(_, p)| p).collect();
    let snapshot = Snapshot::from_phases(tile_count, &ordered);
    std::fs::write(file, snapshot.to_json())
        .map_err(|e| format!("--write-phases {}: {e}", file.display()))?;
    Ok(ordered.len())
}
