//! The exchange-scheduling stage behind a trait, so that a toolchain
//! embedding the package builder can bring its own scheduler.
//!
//! A scheduler turns a [`Phase`] into a [`Schedule`] whose rows are what
//! the device runs. Whoever calls it holds the rows to the same invariants
//! as this crate's own: the package builder runs
//! [`check_schedule`](crate::check_schedule), which reads only the decoded
//! rows, on whatever comes back.

use crate::{
    Fabric, Phase, Schedule, ScheduleConfig, ScheduleError, ValidPhase, schedule, schedule_valid,
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

/// An exchange-scheduling stage.
pub trait ExchangeScheduler: Send + Sync {
    /// A short name for logs and errors (`ipu-exchange` for the built-in one).
    fn name(&self) -> &str;

    /// Schedules `phase` on `fabric` and encodes its rows.
    fn schedule(
        &self,
        phase: &Phase,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<Schedule, ScheduleError>;

    /// [`ExchangeScheduler::schedule`] of a phase the caller has validated
    /// ([`ValidPhase`]); a scheduler that validates its input may skip
    /// that. By default the phase is scheduled as any other.
    fn schedule_valid(
        &self,
        phase: ValidPhase<'_>,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<Schedule, ScheduleError> {
        self.schedule(phase.phase(), fabric, request)
    }

    /// [`ExchangeScheduler::readdress`] of a phase the caller has
    /// validated; by default readdressed as any other.
    fn readdress_valid(
        &self,
        earlier: &Schedule,
        phase: ValidPhase<'_>,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<Schedule, ScheduleError> {
        self.readdress(earlier, phase.phase(), fabric, request)
    }

    /// The rows of `phase`, which has the transfers of the phase `earlier`
    /// was made for at other addresses. By default the timing of `earlier`
    /// is kept and only the rows are encoded again
    /// ([`Schedule::readdress`]), which costs a fraction of scheduling.
    fn readdress(
        &self,
        earlier: &Schedule,
        phase: &Phase,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<Schedule, ScheduleError> {
        let config = ScheduleConfig {
            phase_label: request.label,
            relocatable: request.relocatable,
            verify: false,
            ..ScheduleConfig::default()
        };
        earlier.readdress(phase, fabric, &config)
    }
}

/// This crate's scheduler: [`schedule`] with a configuration, whose
/// `phase_label` and `relocatable` each request overrides.
#[derive(Clone, Debug, Default)]
pub struct BuiltinScheduler {
    /// Scheduling options.
    pub config: ScheduleConfig,
}

impl BuiltinScheduler {
    fn config_for(&self, request: ScheduleRequest) -> ScheduleConfig {
        ScheduleConfig {
            phase_label: request.label,
            relocatable: request.relocatable,
            ..self.config.clone()
        }
    }
}

impl ExchangeScheduler for BuiltinScheduler {
    fn name(&self) -> &str {
        "ipu-exchange"
    }

    fn schedule(
        &self,
        phase: &Phase,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<Schedule, ScheduleError> {
        schedule(phase, fabric, &self.config_for(request))
    }

    fn readdress(
        &self,
        earlier: &Schedule,
        phase: &Phase,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<Schedule, ScheduleError> {
        earlier.readdress(phase, fabric, &self.config_for(request))
    }

    fn schedule_valid(
        &self,
        phase: ValidPhase<'_>,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<Schedule, ScheduleError> {
        schedule_valid(phase, fabric, &self.config_for(request))
    }

    fn readdress_valid(
        &self,
        earlier: &Schedule,
        phase: ValidPhase<'_>,
        fabric: &Fabric,
        request: ScheduleRequest,
    ) -> Result<Schedule, ScheduleError> {
        earlier.readdress_valid(phase, fabric, &self.config_for(request))
    }
}
