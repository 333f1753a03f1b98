//! The exchange-scheduling stage behind a trait, so that a toolchain
//! embedding the package builder can bring its own scheduler.
//!
//! A scheduler turns a validated [`Phase`](crate::Phase) into a
//! [`ScheduleOutput`]: plain data, the encoded rows of every tile, which
//! anyone can build ([`EncodedRows::from_tile_rows`] of words written with
//! [`Instr::encode`](crate::Instr::encode)). Whoever calls it holds the rows
//! to the same invariants as this crate's own and takes nothing else on
//! trust: the package builder runs [`check_schedule`](crate::check_schedule),
//! which reads only the decoded rows, on whatever comes back, reads the
//! horizon from the rows ([`CheckedRows`](crate::CheckedRows)) and computes
//! the lower bounds from the phase itself.
//!
//! Encoding the same timing at other addresses (the next iteration of a
//! repeat body, data that a later placement moved) is an optional
//! capability, [`Readdress`], that a scheduler may attach to its output;
//! without it the caller schedules the moved phase again.

use std::sync::Arc;

use crate::{
    EncodedRows, Fabric, Schedule, ScheduleConfig, ScheduleError, ValidPhase, schedule_valid,
};

/// What the caller asks of one phase's schedule, beyond the phase itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScheduleRequest {
    /// The phase's number in logs and errors.
    pub label: u32,
    /// Rows whose instruction choice does not depend on addresses, so that
    /// the same phase with its addresses moved (the next iteration of a
    /// repeat body) gets rows of the same lengths that differ only in
    /// address fields ([`ScheduleConfig::relocatable`]).
    pub relocatable: bool,
}

/// What a scheduler returns for one phase.
#[derive(Clone, Debug)]
pub struct ScheduleOutput {
    /// One row of supervisor instruction words per tile of the phase; they
    /// alone determine the exchange.
    pub rows: EncodedRows,
    /// How to encode the same timing for the phase with its addresses
    /// moved, if the scheduler can do that more cheaply than scheduling
    /// again; `None` makes the caller schedule the moved phase again.
    pub readdress: Option<Arc<dyn Readdress>>,
}

impl ScheduleOutput {
    /// Rows without a readdress capability.
    pub fn new(rows: EncodedRows) -> ScheduleOutput {
        ScheduleOutput {
            rows,
            readdress: None,
        }
    }
}

/// A scheduler's optional capability, attached to one phase's output:
/// the same timing encoded for that phase with its addresses moved.
pub trait Readdress: Send + Sync + std::fmt::Debug {
    /// The rows of `phase`, which must be the scheduled phase with only its
    /// addresses changed (the same transfers in the same order: sources,
    /// destination tiles, words, widths, gather lengths); a phase that
    /// differs otherwise is refused with [`ScheduleError::Readdress`]. With
    /// `request.relocatable`, rows of the same lengths as the scheduled
    /// ones that differ only in address fields.
    fn readdress(
        &self,
        phase: ValidPhase<'_>,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<ScheduleOutput, ScheduleError>;
}

/// An exchange-scheduling stage.
pub trait ExchangeScheduler: Send + Sync {
    /// A short name for logs and errors (`ipu-exchange` for the built-in one).
    fn name(&self) -> &str;

    /// Schedules `phase` on `fabric` and encodes its rows. The phase was
    /// validated by the caller ([`ValidPhase`]). A scheduler that fails for
    /// a reason of its own returns [`ScheduleError::Scheduler`].
    fn schedule(
        &self,
        phase: ValidPhase<'_>,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<ScheduleOutput, ScheduleError>;
}

/// This crate's scheduler: [`schedule_valid`] with a configuration, whose
/// `phase_label` and `relocatable` each request overrides. Its outputs can
/// be readdressed: the schedule's segments (and, for relocatable rows,
/// where their address fields point) stay with the output, so a readdress
/// encodes the kept timing again, or for relocatable rows only rewrites
/// their address fields ([`Schedule::readdress_valid`]).
#[derive(Clone, Debug, Default)]
pub struct BuiltinScheduler {
    /// Scheduling options.
    pub config: ScheduleConfig,
}

impl BuiltinScheduler {
    fn config_for(&self, request: ScheduleRequest) -> ScheduleConfig {
        config_for(&self.config, request)
    }
}

fn config_for(config: &ScheduleConfig, request: ScheduleRequest) -> ScheduleConfig {
    ScheduleConfig {
        phase_label: request.label,
        relocatable: request.relocatable,
        ..config.clone()
    }
}

impl ExchangeScheduler for BuiltinScheduler {
    fn name(&self) -> &str {
        "ipu-exchange"
    }

    fn schedule(
        &self,
        phase: ValidPhase<'_>,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<ScheduleOutput, ScheduleError> {
        let schedule = schedule_valid(phase, fabric, &self.config_for(request))?;
        Ok(Kept::output(schedule, &self.config))
    }
}

/// The built-in scheduler's readdress capability: the schedule, whose
/// segments and relocations are its own business, and the options to
/// encode with.
struct Kept {
    schedule: Schedule,
    config: ScheduleConfig,
}

impl Kept {
    fn output(schedule: Schedule, config: &ScheduleConfig) -> ScheduleOutput {
        ScheduleOutput {
            rows: schedule.rows().clone(),
            readdress: Some(Arc::new(Kept {
                schedule,
                config: config.clone(),
            })),
        }
    }
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("horizon", &self.schedule.horizon())
            .field("segments", &self.schedule.segments())
            .finish_non_exhaustive()
    }
}

impl Readdress for Kept {
    fn readdress(
        &self,
        phase: ValidPhase<'_>,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<ScheduleOutput, ScheduleError> {
        let moved =
            self.schedule
                .readdress_valid(phase, fabric, &config_for(&self.config, request))?;
        Ok(Kept::output(moved, &self.config))
    }
}
