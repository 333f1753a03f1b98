//! The exchange stage's adapter: every exchange step is shaped once per plan
//! (its transfers in buffer terms, [`PhaseShape`]), becomes a phase at the
//! placed addresses, the build's scheduler schedules and encodes it, and
//! `check_schedule` — which reads only the decoded rows — judges the rows.
//! Nothing the scheduler says about its rows is taken on trust: the
//! horizon recorded is the one the checker reads from the rows, and the
//! lower bounds are computed from the phase.
//!
//! A repeat body's phases are encoded once. When a phase reads or writes a
//! per-iteration buffer, its next iteration is the same transfers at other
//! addresses: where the scheduler's output can be readdressed
//! ([`Readdress`]) the first iteration's timing is encoded there, else the
//! next iteration is scheduled again; either way the rows are checked, must
//! keep their lengths, and the words that differ become per-iteration
//! patches.

use std::collections::HashMap;

use ipu_exchange::{
    EncodedRows, ExchangeCheckError, ExchangeScheduler, Fabric, Phase, Readdress, ScheduleError,
    ScheduleOutput, ScheduleRequest, Transfer, ValidPhase, check_valid_schedule,
    endpoint_lower_bound, stronger_lower_bound,
};
use ipu_layout::TileId;
use ipu_layout::hash::FoldBuildHasher;
use rayon::prelude::*;

use super::{BuildError, Device};
use crate::package::{BufferAddresses, PackagePhase, PhaseInfo, RowPatch};
use crate::phases::{FragmentCache, PhaseBuild, PhaseShape};
use crate::program::{BufferId, Program, Redistribute, WalkEvent};

/// Each per-iteration buffer of a repeat body mapped to its buffer in
/// iteration 1. Looked up for every transfer of the body's steps when they
/// are shaped, so with the cheap [`FoldBuildHasher`].
type NextIteration = HashMap<BufferId, BufferId, FoldBuildHasher>;

/// One exchange step to schedule.
struct Job<'a> {
    name: String,
    copies: &'a [Redistribute],
    /// For a step in a repeat body: each per-iteration buffer's buffer in
    /// iteration 1, and the body's iterations.
    next: Option<(NextIteration, u32)>,
}

/// Every exchange step of `program` in program order (each repeat body
/// once), with iteration 1's buffers and the iteration count for a step in
/// a repeat body.
fn collect(program: &Program) -> Vec<Job<'_>> {
    let mut out = Vec::new();
    for event in program.walk() {
        let WalkEvent::Exchange(step, at) = event else {
            continue;
        };
        let next = at.repeat.map(|r| -> (NextIteration, u32) {
            let subst = if r.count > 1 {
                r.iteration_buffers
                    .iter()
                    .filter_map(|(b, list)| list.get(1).map(|&n| (*b, n)))
                    .collect()
            } else {
                HashMap::default()
            };
            (subst, r.count)
        });
        out.push(Job {
            name: step.label.to_string(),
            copies: &step.copies,
            next,
        });
    }
    out
}

/// An exchange step in buffer terms: iteration 0's shape and, for a step
/// of a repeat body that reads or writes per-iteration buffers, iteration
/// 1's.
pub(super) struct StepShape {
    name: String,
    first: PhaseShape,
    next: Option<PhaseShape>,
    /// Iterations of the repeat body the step is in (1 outside one).
    iterations: u32,
}

impl StepShape {
    /// Iteration 0's shape.
    pub(super) fn first(&self) -> &PhaseShape {
        &self.first
    }

    /// Whether the step's rows are patched per iteration.
    pub(super) fn patched(&self) -> bool {
        self.next.is_some()
    }
}

/// The shape of every exchange step in program order (each repeat body
/// once): fragments and multicast grouping, computed once per plan, the
/// steps in parallel; the first error in step order is the one returned,
/// whatever the thread count.
///
/// A redistribution that several steps make is computed once, first, and
/// kept in `cache`; every other one is computed by its step's worker and
/// dropped once the step is shaped. SigLIP's steps make millions of
/// fragments, nearly all in redistributions made once: kept together
/// until every step was shaped, their vectors were a hundred megabytes of
/// fresh memory, which the kernel zeroes page by page, and that zeroing
/// was the largest single cost of shaping.
pub(super) fn shape_steps(
    program: &Program,
    tiles: u32,
    cache: &mut FragmentCache,
) -> Result<Vec<StepShape>, BuildError> {
    let jobs = collect(program);
    let key = |c: &Redistribute| {
        (
            program.buffers[c.source].ty.clone(),
            c.view.clone(),
            program.buffers[c.destination].ty.clone(),
        )
    };
    let mut uses: HashMap<_, u32> = HashMap::new();
    for c in jobs.iter().flat_map(|job| job.copies) {
        *uses.entry(key(c)).or_default() += 1;
    }
    cache.fill(
        jobs.iter()
            .flat_map(|job| job.copies)
            .map(key)
            .filter(|k| uses.get(k).is_some_and(|&n| n > 1)),
    );
    let cache = &*cache;
    let shaped: Vec<Result<StepShape, BuildError>> = jobs
        .par_iter()
        .map(|job| {
            let identity = |b: BufferId| b;
            let first = PhaseShape::build(program, job.copies, tiles, cache, &identity)?;
            let next = match &job.next {
                Some((subst, _)) if first.touches(&|b| subst.contains_key(&b)) => {
                    let resolve = |b: BufferId| subst.get(&b).copied().unwrap_or(b);
                    // Per-iteration buffers share their type, so the next
                    // iteration is the same shape on other buffers; a
                    // substitution that changed a type is shaped anew.
                    let same_types = subst
                        .iter()
                        .all(|(&a, &b)| program.buffers[a].ty == program.buffers[b].ty);
                    Some(if same_types {
                        first.map_buffers(&resolve)
                    } else {
                        PhaseShape::build(program, job.copies, tiles, cache, &resolve)?
                    })
                }
                _ => None,
            };
            Ok(StepShape {
                name: job.name.clone(),
                first,
                next,
                iterations: job.next.as_ref().map_or(1, |&(_, count)| count),
            })
        })
        .collect();
    shaped.into_iter().collect()
}

/// A scheduling round's result for one step: what goes in the package,
/// and the scheduler's output (for a later round to readdress).
pub(super) struct Scheduled {
    pub phase: PackagePhase,
    pub output: ScheduleOutput,
}

/// An earlier scheduling round of the same plan: its steps and the
/// addresses they were scheduled at.
pub(super) struct Round {
    pub steps: Vec<Scheduled>,
    pub addresses: BufferAddresses,
}

/// Schedules and encodes every exchange step at the placed addresses,
/// with patches for repeat bodies whose phases read per-iteration buffers.
/// With `previous` — an earlier round of the same plan, placed elsewhere —
/// a step whose transfers did not move keeps its rows, and one that moved
/// has its timing readdressed, where its scheduler can, instead of being
/// scheduled again. Whether a step moved is found by building its phases
/// at the earlier addresses again, rather than keeping every step's
/// phases from the earlier round: a build that needs no second round
/// (most) would hold them all at its peak, tens of megabytes on SigLIP.
pub(super) fn schedule_phases(
    program: &Program,
    shapes: &[StepShape],
    addresses: &BufferAddresses,
    device: &Device<'_>,
    scheduler: &dyn ExchangeScheduler,
    verify: bool,
    previous: Option<Round>,
) -> Result<Vec<Scheduled>, BuildError> {
    let address = |b: BufferId, t: TileId| addresses.get(b, t);
    let (mut previous, before): (Vec<Option<Scheduled>>, _) = match previous {
        Some(r) => (r.steps.into_iter().map(Some).collect(), Some(r.addresses)),
        None => (Vec::new(), None),
    };
    // Whether a step's phases at the earlier round's addresses are the
    // ones built now.
    let unmoved = |shape: &StepShape, b0: &PhaseBuild, b1: Option<&PhaseBuild>| {
        let Some(before) = &before else {
            return false;
        };
        let then = |b: BufferId, t: TileId| before.get(b, t);
        let same_at = |s: &PhaseShape, now: &PhaseBuild| {
            s.at(program, &then)
                .is_ok_and(|earlier| same(&earlier, now))
        };
        same_at(&shape.first, b0)
            && match (&shape.next, b1) {
                (Some(next), Some(b1)) => same_at(next, b1),
                (None, None) => true,
                _ => false,
            }
    };
    previous.resize_with(shapes.len(), || None);
    // Largest steps first: the workers take steps in this order, so the
    // longest ones do not start last and leave one core idle (a step with
    // a next iteration is scheduled once and readdressed, and checked
    // twice). Results are put back in step order, and the first error in
    // step order is the one reported, whatever the thread count.
    let mut order: Vec<(usize, &StepShape, Option<Scheduled>)> = shapes
        .iter()
        .zip(previous)
        .enumerate()
        .map(|(i, (shape, prev))| (i, shape, prev))
        .collect();
    order.sort_by_key(|(i, shape, _)| {
        let weight = shape.first.work() * if shape.next.is_some() { 2 } else { 1 };
        (std::cmp::Reverse(weight), *i)
    });
    let stage = Stage {
        scheduler,
        fabric: &device.fabric,
        verify,
    };
    let mut done: Vec<(usize, Result<Scheduled, BuildError>)> = order
        .into_iter()
        .par_bridge()
        .map(|(i, shape, prev)| {
            let result = (|| {
                let b0 = shape.first.at(program, &address)?;
                let b1 = match &shape.next {
                    Some(next) => Some(next.at(program, &address)?),
                    None => None,
                };
                match prev {
                    // Nothing this step moves was moved: its rows stand, and
                    // they were checked when they were made.
                    Some(p) if unmoved(shape, &b0, b1.as_ref()) => Ok(p),
                    prev => stage.step(i, shape, &b0, b1.as_ref(), prev),
                }
            })();
            (i, result)
        })
        .collect();
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, result)| result).collect()
}

/// The scheduler stage and how the build holds it to account.
struct Stage<'a> {
    scheduler: &'a dyn ExchangeScheduler,
    fabric: &'a Fabric,
    verify: bool,
}

impl Stage<'_> {
    /// Schedules step `i` (iteration 0's phase `b0`, and iteration 1's,
    /// `b1`, for a step patched per iteration), readdressing the earlier
    /// round's output `prev` where it can, and checks the rows; the
    /// package records the horizon the rows run to and the bounds of the
    /// phase, computed here, not reported by the scheduler.
    fn step(
        &self,
        i: usize,
        shape: &StepShape,
        b0: &PhaseBuild,
        b1: Option<&PhaseBuild>,
        prev: Option<Scheduled>,
    ) -> Result<Scheduled, BuildError> {
        let name = shape.name.as_str();
        let fabric = self.fabric;
        // A phase patched per iteration needs rows whose instructions
        // do not depend on its addresses.
        let request = ScheduleRequest {
            label: i as u32,
            relocatable: b1.is_some(),
        };
        // Each phase is validated once, here; the scheduler and the
        // checker take the proof instead of validating again.
        let valid = |phase| {
            ValidPhase::new(phase).map_err(|source| {
                self.scheduler_error(
                    i,
                    name,
                    ScheduleError::Phase {
                        phase: i as u32,
                        source,
                    },
                )
            })
        };
        let v0 = valid(&b0.phase)?;
        let earlier = prev.and_then(|p| p.output.readdress);
        let out0 = self
            .schedule(earlier.as_deref(), v0, request)
            .map_err(|e| self.scheduler_error(i, name, e))?;
        // The first iteration's rows are checked (and the phase's bounds
        // computed) while the next iteration's are made and checked: the
        // two are independent, and on the largest phases they are most of
        // a step's time. The first iteration's errors are reported first.
        let ((checked0, bounds), next) = rayon::join(
            || {
                rayon::join(
                    || self.check(v0, &out0.rows),
                    || {
                        (
                            endpoint_lower_bound(v0.phase(), fabric),
                            stronger_lower_bound(v0.phase(), fabric),
                        )
                    },
                )
            },
            || {
                b1.map(|b1| {
                    // The next iteration moves the same transfers: the
                    // same timing with its addresses, where the scheduler
                    // can readdress, else scheduled again.
                    let v1 = valid(&b1.phase)?;
                    let out1 = self
                        .schedule(out0.readdress.as_deref(), v1, request)
                        .map_err(|e| self.scheduler_error(i, name, e))?;
                    self.check(v1, &out1.rows)
                        .map_err(|errors| self.rejected(i, name, 1, errors))?;
                    Ok::<_, BuildError>(out1)
                })
            },
        );
        let horizon = checked0.map_err(|errors| self.rejected(i, name, 0, errors))?;
        let out1 = next.transpose()?;
        let (endpoint_lower_bound, stronger_lower_bound) = bounds;
        let mut local = b0.local.clone();
        let patches = match (b1, &out1) {
            (Some(b1), Some(out1)) => {
                // On-tile copies of per-iteration buffers move by a
                // stride per iteration, like the rows' addresses.
                let differ = || BuildError::LocalCopiesDiffer {
                    phase: i,
                    name: name.to_owned(),
                };
                if b1.local.len() != local.len() {
                    return Err(differ());
                }
                for (c0, c1) in local.iter_mut().zip(&b1.local) {
                    if (c0.tile, c0.bytes) != (c1.tile, c1.bytes) {
                        return Err(differ());
                    }
                    c0.source_stride = c1.source.wrapping_sub(c0.source);
                    c0.destination_stride = c1.destination.wrapping_sub(c0.destination);
                }
                row_patches(&out0.rows, &out1.rows).map_err(|(tile, first, next)| {
                    BuildError::RowsNotRelocatable {
                        phase: i,
                        name: name.to_owned(),
                        scheduler: self.scheduler.name().to_owned(),
                        tile,
                        first,
                        next,
                    }
                })?
            }
            _ => Vec::new(),
        };
        tracing::debug!(
            phase = i,
            name = %name,
            transfers = b0.phase.transfers.len(),
            local_copies = local.len(),
            horizon,
            endpoint_lower_bound,
            "scheduled exchange step"
        );
        let phase = PackagePhase {
            info: PhaseInfo {
                name: name.to_owned(),
                local,
                patches,
                horizon,
                endpoint_lower_bound,
                stronger_lower_bound,
            },
            rows: out0.rows.clone(),
        };
        // Iteration 1's rows scheduled again (no readdress) may have the
        // lengths of iteration 0's and pass their check, yet not differ
        // from them only in where they point: the patches would then make
        // other rows for later iterations. Those are checked at the last
        // iteration. Readdressed rows keep iteration 0's timing by the
        // capability's contract, and the built-in one's by construction.
        if let (Some(b1), true, true) = (b1, out0.readdress.is_none(), self.verify) {
            self.check_last_iteration(i, name, shape.iterations, &b0.phase, &b1.phase, &phase)?;
        }
        Ok(Scheduled {
            phase,
            output: out0,
        })
    }

    /// Checks the rows the package makes for the last iteration of a
    /// repeat body of `iterations` (iteration 0's rows with the patches
    /// applied) against the phase of that iteration, whose addresses lie on
    /// the line through iteration 0's (`p0`) and 1's (`p1`).
    fn check_last_iteration(
        &self,
        i: usize,
        name: &str,
        iterations: u32,
        p0: &Phase,
        p1: &Phase,
        phase: &PackagePhase,
    ) -> Result<(), BuildError> {
        let last = iterations.saturating_sub(1);
        if last < 2 {
            return Ok(());
        }
        let not_strided = || BuildError::IterationsNotStrided {
            phase: i,
            name: name.to_owned(),
        };
        let moved = iteration_phase(p0, p1, last).ok_or_else(not_strided)?;
        let valid = ValidPhase::new(&moved).map_err(|_| not_strided())?;
        self.check(valid, &phase.rows_at(last))
            .map(drop)
            .map_err(|errors| self.rejected(i, name, last, errors))
    }

    /// The rows of `phase`: readdressed from an earlier output that can
    /// be, else scheduled.
    fn schedule(
        &self,
        earlier: Option<&dyn Readdress>,
        phase: ValidPhase<'_>,
        request: ScheduleRequest,
    ) -> Result<ScheduleOutput, ScheduleError> {
        match earlier {
            Some(r) => r.readdress(phase, self.fabric, request),
            None => self.scheduler.schedule(phase, self.fabric, request),
        }
    }

    /// The horizon `rows` run to, after `check_schedule` accepted them
    /// when `verify` is on.
    fn check(
        &self,
        phase: ValidPhase<'_>,
        rows: &EncodedRows,
    ) -> Result<u64, Vec<ExchangeCheckError>> {
        if self.verify {
            check_valid_schedule(phase, self.fabric, rows).map(|c| c.horizon)
        } else {
            rows.end()
                .map_err(|(tile, error)| vec![ExchangeCheckError::Decode { tile, error }])
        }
    }

    fn scheduler_error(&self, i: usize, name: &str, source: ScheduleError) -> BuildError {
        BuildError::Schedule {
            phase: i,
            name: name.to_owned(),
            scheduler: self.scheduler.name().to_owned(),
            source,
        }
    }

    fn rejected(
        &self,
        i: usize,
        name: &str,
        iteration: u32,
        errors: Vec<ExchangeCheckError>,
    ) -> BuildError {
        BuildError::ScheduleRejected {
            phase: i,
            name: name.to_owned(),
            scheduler: self.scheduler.name().to_owned(),
            iteration,
            errors,
        }
    }
}

/// Iteration `k` of a phase whose iterations 0 and 1 are `p0` and `p1`:
/// every address moved `k` times as far as from `p0` to `p1`. A repeat
/// body's per-iteration buffers are stacked at a stride, so every
/// iteration's addresses lie on that line. `None` when `p1` is not `p0`'s
/// transfers or an address leaves the 32-bit space.
fn iteration_phase(p0: &Phase, p1: &Phase, k: u32) -> Option<Phase> {
    let at = |a0: u32, a1: u32| {
        let moved = i64::from(a0) + i64::from(k) * (i64::from(a1) - i64::from(a0));
        u32::try_from(moved).ok()
    };
    if p0.tile_count != p1.tile_count || p0.transfers.len() != p1.transfers.len() {
        return None;
    }
    let transfers = p0
        .transfers
        .iter()
        .zip(&p1.transfers)
        .map(|(t0, t1)| {
            let same = t0.source == t1.source
                && t0.words == t1.words
                && t0.width == t1.width
                && t0.source_addresses.len() == t1.source_addresses.len()
                && t0.destinations.len() == t1.destinations.len();
            if !same {
                return None;
            }
            let source_addresses = t0
                .source_addresses
                .iter()
                .zip(&t1.source_addresses)
                .map(|(&a0, &a1)| at(a0, a1))
                .collect::<Option<_>>()?;
            let destinations = t0
                .destinations
                .iter()
                .zip(&t1.destinations)
                .map(|(&(d0, a0), &(d1, a1))| (d0 == d1).then_some(d0).zip(at(a0, a1)))
                .collect::<Option<_>>()?;
            Some(Transfer {
                source: t0.source,
                source_addresses,
                destinations,
                words: t0.words,
                width: t0.width,
            })
        })
        .collect::<Option<_>>()?;
    Some(Phase {
        tile_count: p0.tile_count,
        transfers,
    })
}

/// Whether two builds of a step move the same words between and within
/// tiles at the same addresses.
fn same(a: &PhaseBuild, b: &PhaseBuild) -> bool {
    a.phase == b.phase && a.local == b.local
}

/// The words that differ between iteration 0's and iteration 1's rows, or
/// the first tile whose row changes length (with both lengths).
fn row_patches(
    r0: &EncodedRows,
    r1: &EncodedRows,
) -> Result<Vec<RowPatch>, (TileId, usize, usize)> {
    let mut patches = Vec::new();
    for t in 0..r0.tile_count() {
        let tile = TileId::from_u32(t);
        let (a, b) = (r0.row(tile), r1.row(tile));
        if a.len() != b.len() {
            return Err((tile, a.len(), b.len()));
        }
        for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
            if x != y {
                patches.push(RowPatch {
                    tile,
                    index: i as u32,
                    delta: y.wrapping_sub(x),
                });
            }
        }
    }
    Ok(patches)
}

#[cfg(test)]
mod tests {
    use ipu_exchange::{BuiltinScheduler, Instr, Width, Xpic, check_schedule};
    use smallvec::smallvec;

    use super::*;

    const STRIDE: u32 = 0x1000;

    /// Tile 0 sends A and B, four words each, to tile 1; iteration `k`'s
    /// addresses are `k` strides further.
    fn phase(k: u32) -> Phase {
        let transfer = |source: u32, destination: u32| Transfer {
            source: TileId::from_u32(0),
            source_addresses: smallvec![source + k * STRIDE],
            destinations: smallvec![(TileId::from_u32(1), destination + k * STRIDE)],
            words: 4,
            width: Width::Word32,
        };
        Phase {
            tile_count: 2,
            transfers: vec![transfer(0x4c000, 0x90000), transfer(0x4c100, 0x90100)],
        }
    }

    /// Rows that send the phase's transfers in `order`, back to back.
    fn rows(phase: &Phase, order: [usize; 2], latency: u32) -> EncodedRows {
        let encode = |instrs: &[Instr]| {
            let mut row = Vec::new();
            for i in instrs {
                i.encode(&mut row).expect("fields fit");
            }
            row
        };
        let [a, b] = order.map(|i| &phase.transfers[i]);
        let send = |t: &Transfer| Instr::Send {
            items: 4,
            word_address: t.source_addresses[0] / 4,
            sctl: 3,
        };
        let pic = |t: &Transfer, cycles| Instr::DelayPic {
            cycles,
            sel: 0,
            value: t.destinations[0].1 / 4,
        };
        let listen = Instr::DelayXpic {
            cycles: 1,
            xpic: Xpic::Listen(TileId::from_u32(0)),
        };
        EncodedRows::from_tile_rows(vec![
            encode(&[send(a), send(b)]),
            encode(&[listen, pic(a, latency + 3), pic(b, 4)]),
        ])
    }

    /// Iteration 1's rows that send the transfers in another order pass
    /// their own check and keep the row lengths, but the patches made from
    /// them are wrong from iteration 2 on, which the last iteration's check
    /// finds; rows that keep the order pass it.
    #[test]
    fn the_last_iteration_of_rows_scheduled_again_is_checked() {
        let fabric = Fabric::ipu21().expect("the built-in device");
        let latency = fabric.latency_cycles();
        let scheduler = BuiltinScheduler::default();
        let stage = Stage {
            scheduler: &scheduler,
            fabric: &fabric,
            verify: true,
        };
        let (p0, p1) = (phase(0), phase(1));
        assert_eq!(iteration_phase(&p0, &p1, 5), Some(phase(5)));
        let r0 = rows(&p0, [0, 1], latency);
        check_schedule(&p0, &fabric, &r0).expect("iteration 0 checks");
        for (order, good) in [([0, 1], true), ([1, 0], false)] {
            let r1 = rows(&p1, order, latency);
            check_schedule(&p1, &fabric, &r1).expect("iteration 1 checks");
            let patches = row_patches(&r0, &r1).expect("the same lengths");
            let package_phase = PackagePhase {
                info: PhaseInfo {
                    name: "test".to_owned(),
                    local: Vec::new(),
                    patches,
                    horizon: 0,
                    endpoint_lower_bound: 0,
                    stronger_lower_bound: 0,
                },
                rows: r0.clone(),
            };
            let verdict = stage.check_last_iteration(0, "test", 4, &p0, &p1, &package_phase);
            match verdict {
                Ok(()) => assert!(good),
                Err(BuildError::ScheduleRejected { iteration, .. }) => {
                    assert!(!good);
                    assert_eq!(iteration, 3);
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
    }
}
