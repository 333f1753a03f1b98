//! Why a build failed: one typed error that keeps every cause.

use ipu_alloc::{PlaceError, PlacementCheckError, TileProblem};
use ipu_exchange::{ExchangeCheckError, FabricError, ScheduleError};
use ipu_kernels::KernelError;
use ipu_layout::TileId;

use crate::lower::LowerError;
use crate::phases::PhaseBuildError;
use crate::program::StepLabel;
use crate::storage::StorageError;

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The build asks for more tiles than the target has, or none.
    #[error("{asked} tiles asked for; the target {target} has {available} (give 1..={available})")]
    Tiles {
        /// Tiles asked for.
        asked: u32,
        /// The target's name.
        target: String,
        /// Tiles the target has.
        available: u32,
    },
    /// The graph is valid but breaks a rule of the build
    /// ([`check_buildable`](crate::graph::check_buildable)).
    #[error("the graph cannot be built into a package: {0}")]
    Unbuildable(#[source] crate::graph::GraphError),
    /// The exchange model does not support the target's fabric.
    #[error("the target's exchange fabric: {source}")]
    Fabric {
        /// The cause.
        #[source]
        source: FabricError,
    },
    /// Lowering failed.
    #[error(transparent)]
    Lower(#[from] LowerError),
    /// Storage planning failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The workload was not placed, even after trading cycles for memory:
    /// proved not to fit, or undecided within the placer's search budget
    /// (the placer's verdict says which).
    #[error("the workload {}: {error}; {culprits}", fit_outcome(error))]
    DoesNotFit {
        /// The placer's report (of the first failing tile).
        #[source]
        error: Box<PlaceError>,
        /// The largest buffers live on that tile at the failing step, and
        /// the tile's placement problem.
        culprits: Box<Culprits>,
    },
    /// The placer failed for another reason.
    #[error("placer {placer}: {source}")]
    Place {
        /// The placer's name.
        placer: String,
        /// The cause.
        #[source]
        source: Box<PlaceError>,
    },
    /// `check_placement` rejected the placer's result.
    #[error(
        "the placement of placer {placer} fails its check with {} error(s); first: {}",
        errors.len(),
        errors.first().map(ToString::to_string).unwrap_or_default()
    )]
    PlacementRejected {
        /// The placer's name.
        placer: String,
        /// Every error the checker found.
        errors: Vec<PlacementCheckError>,
    },
    /// The kernel store could not be opened.
    #[error("kernel store: {source}")]
    KernelStore {
        /// The cause.
        #[source]
        source: KernelError,
    },
    /// A kernel could not be planned, compiled or stored, or what the
    /// toolchain compiled ([`KernelError::CompiledRejected`]) or the store
    /// returned ([`KernelError::StoredRejected`]) failed its check.
    #[error("kernel {name}: {source}")]
    Kernel {
        /// The kernel.
        name: String,
        /// The cause.
        #[source]
        source: KernelError,
    },
    /// The cycle estimate of the built package failed: the build made a
    /// package its own estimate cannot read, a bug.
    #[error("bug: the cycle estimate of the built package failed: {source}")]
    Profile {
        /// The cause.
        #[source]
        source: crate::profile::ProfileError,
    },
    /// An exchange phase could not be built.
    #[error(transparent)]
    Phase(#[from] PhaseBuildError),
    /// The exchange scheduler failed on a phase.
    #[error("exchange phase {phase} ({name}), scheduler {scheduler}: {source}")]
    Schedule {
        /// The phase index.
        phase: usize,
        /// Its step name.
        name: String,
        /// The scheduler's name.
        scheduler: String,
        /// The cause.
        #[source]
        source: ScheduleError,
    },
    /// `check_schedule` rejected a phase's rows.
    #[error(
        "exchange phase {phase} ({name}){}: the rows of scheduler {scheduler} fail their check with {} error(s); first: {}",
        if *iteration > 0 { format!(", repeat iteration {iteration}") } else { String::new() },
        errors.len(),
        errors.first().map(ToString::to_string).unwrap_or_default()
    )]
    ScheduleRejected {
        /// The phase index.
        phase: usize,
        /// Its step name.
        name: String,
        /// The scheduler's name.
        scheduler: String,
        /// The repeat iteration whose rows were checked (0 outside a
        /// repeat body): 1 for the next iteration's rows as scheduled or
        /// readdressed, a later one for the rows the patches make.
        iteration: u32,
        /// Every error the checker found.
        errors: Vec<ExchangeCheckError>,
    },
    /// A repeat body's phase does not move by a stride per iteration.
    #[error(
        "bug in the package builder: exchange phase {phase} ({name}) does not move by a stride per repeat iteration"
    )]
    IterationsNotStrided {
        /// The phase index.
        phase: usize,
        /// Its step name.
        name: String,
    },
    /// A repeat body's rows differ in structure between iterations, so one
    /// set of rows plus per-iteration patches cannot serve every iteration.
    #[error(
        "exchange phase {phase} ({name}): {tile}'s row is {first} words in one iteration and {next} in the next; the scheduler {scheduler} must make relocatable rows (instruction choices that do not depend on addresses)"
    )]
    RowsNotRelocatable {
        /// The phase index.
        phase: usize,
        /// Its step name.
        name: String,
        /// The scheduler's name.
        scheduler: String,
        /// The tile.
        tile: TileId,
        /// Row words in iteration 0.
        first: usize,
        /// Row words in iteration 1.
        next: usize,
    },
    /// A repeat body's on-tile copies differ between iterations.
    #[error(
        "bug in the package builder: exchange phase {phase} ({name}) copies differently within tiles in the next iteration"
    )]
    LocalCopiesDiffer {
        /// The phase index.
        phase: usize,
        /// Its step name.
        name: String,
    },
    /// The graph needs more bytes than the tiles hold, whatever the plan.
    #[error(
        "the workload does not fit: {what} need {bytes} bytes, the {tiles} tiles hold {available}; use more tiles or a smaller workload"
    )]
    CapacityExceeded {
        /// What needs the bytes.
        what: String,
        /// The bytes needed.
        bytes: u128,
        /// Tiles of the build.
        tiles: u32,
        /// Usable bytes of those tiles together.
        available: u64,
    },
    /// A tile's support memory does not fit the code region.
    #[error(
        "the workload does not fit: {tile}'s support memory (runtime, kernel code, control program and exchange rows) needs {bytes} bytes, its code region holds {available}; use more tiles or a smaller workload"
    )]
    SupportDoesNotFit {
        /// The tile.
        tile: TileId,
        /// Bytes reserved for its support memory.
        bytes: u64,
        /// Bytes of the code region.
        available: u64,
    },
    /// Support memory kept outgrowing its reservation.
    #[error(
        "bug in the package builder: the support memory of {tiles} tile(s) outgrew its reservation three times"
    )]
    SupportOutgrown {
        /// Tiles whose support outgrew the reservation in the last round.
        tiles: usize,
    },
}

/// The head of a does-not-fit message: whether the placer proved it.
fn fit_outcome(error: &PlaceError) -> &'static str {
    match error {
        PlaceError::DoesNotFit(f) if !f.verdict.is_proof() => {
            "was not placed within the search budget (undecided, not proved)"
        }
        _ => "does not fit",
    }
}

/// A buffer live on the failing tile at the failing step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Culprit {
    /// The buffer's name (the first of a stack).
    pub name: String,
    /// Iterations stacked in the request (1 for a single buffer).
    pub iterations: usize,
    /// Bytes of the request.
    pub bytes: u32,
}

/// What a tile holds at the step where it does not fit: what a user must
/// shrink or shorten.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Culprits {
    /// The step.
    pub step: u32,
    /// The step's label (none if the step number is outside the
    /// program, which would be a bug in the storage plan).
    pub label: Option<StepLabel>,
    /// The tile.
    pub tile: usize,
    /// Data bytes live there.
    pub live_bytes: u64,
    /// Buffers live there.
    pub live_buffers: usize,
    /// Support bytes reserved on the tile.
    pub support_bytes: u32,
    /// The largest live buffers, largest first (at most six).
    pub largest: Vec<Culprit>,
    /// The tile's placement problem as the placer was given it (its
    /// support reservation and every request), so that the failure can
    /// be reproduced, or given more search, without building again:
    /// `cargo xtask build-package --write-failed-tile FILE` writes it and
    /// `cargo xtask alloc tile FILE` places it.
    pub problem: Option<Box<TileProblem>>,
}

impl BuildError {
    /// The placement problem of the tile that did not fit, when placement
    /// is what failed ([`Culprits::problem`]).
    pub fn failed_tile(&self) -> Option<&TileProblem> {
        match self {
            BuildError::DoesNotFit { culprits, .. } => culprits.problem.as_deref(),
            _ => None,
        }
    }
}

impl std::fmt::Display for Culprits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "at step {} ({}) tile{} holds {} bytes of data in {} buffers and {} bytes of support; the largest:",
            self.step,
            self.label
                .as_ref()
                .map_or_else(|| "?".to_owned(), ToString::to_string),
            self.tile,
            self.live_bytes,
            self.live_buffers,
            self.support_bytes
        )?;
        for (i, c) in self.largest.iter().enumerate() {
            let sep = if i + 1 == self.largest.len() { "" } else { "," };
            if c.iterations > 1 {
                write!(
                    f,
                    " {} (×{} iterations) {} bytes{sep}",
                    c.name, c.iterations, c.bytes
                )?;
            } else {
                write!(f, " {} {} bytes{sep}", c.name, c.bytes)?;
            }
        }
        Ok(())
    }
}
