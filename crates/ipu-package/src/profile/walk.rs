//! The estimate itself: one walk over the program's steps in program order
//! (repeat bodies once, their step runs multiplied by the count), costing
//! every step by its busiest tile, then the totals.

use std::collections::BTreeMap;

use ipu_exchange::row_end;
use ipu_kernels::AmpModel;
use ipu_layout::{EntityId, Precision, TileId};
use rayon::prelude::*;

use super::cost::{CODELET_KINDS, VectorModel, Work, codelet_work, kind_index, work_floor};
use super::kernel_cost::{KernelCosts, check_kernels};
use super::{
    CodeletProfile, EntryProfile, ExchangeStep, KernelProfile, KindCycles, OpKindProfile,
    PROFILE_SCHEMA, Profile, ProfileConfig, ProfileError, RepeatProfile, StepKind, StepProfile,
    Totals,
};
use crate::package::{Package, PackagePhase};
use crate::phases::LocalCopy;
use crate::program::{Codelet, Program, StepLabel, WalkEvent};
use crate::storage::codelet_buffers;

struct Walker<'p> {
    package: &'p Package,
    tiles: u32,
    vector: VectorModel,
    costs: KernelCosts,
    sync: u64,
    /// The AMP's F16 multiply-accumulates per cycle, for the floors of
    /// products the vector unit does.
    f16_macs: u64,
    precisions: Vec<Precision>,
    steps: Vec<StepProfile>,
    repeats: Vec<RepeatProfile>,
    /// The next exchange step's phase.
    phase: usize,
    /// Per kernel and entry: calls in one run.
    entry_calls: Vec<[u64; 4]>,
    /// Per kind: calls in one run, on all tiles.
    kind_calls: [u64; CODELET_KINDS.len()],
}

pub(super) fn estimate(package: &Package, config: &ProfileConfig) -> Result<Profile, ProfileError> {
    let target = &package.target;
    let costs = KernelCosts::new(package)?;
    let kernel_check = check_kernels(package, &costs)?;
    let mut w = Walker {
        package,
        tiles: package.manifest.tile_count,
        vector: VectorModel::new(target),
        entry_calls: vec![[0; 4]; package.kernels.len()],
        costs,
        sync: target.sync().sync_cycles,
        f16_macs: u64::from(AmpModel::new(target).f16_macs_per_instruction),
        precisions: package
            .program
            .buffers
            .values()
            .iter()
            .map(|b| b.ty.precision())
            .collect(),
        steps: Vec::new(),
        repeats: Vec::new(),
        phase: 0,
        kind_calls: [0; CODELET_KINDS.len()],
    };
    w.walk(&package.program)?;
    if w.phase != package.phases.len() {
        return Err(ProfileError::PhaseCount {
            steps: w.phase,
            phases: package.phases.len(),
        });
    }
    let model = AmpModel::new(target);
    for r in &mut w.repeats {
        r.roofline_cycles = config
            .work
            .repeats
            .iter()
            .find(|g| g.name == r.name)
            .map_or(0, |g| g.macs.roofline_cycles(&model, w.tiles));
    }
    let mut totals = Totals::default();
    let mut kinds: BTreeMap<&str, OpKindProfile> = BTreeMap::new();
    let mut busiest = [0u64; CODELET_KINDS.len()];
    for s in &w.steps {
        let work = s.work_cycles.saturating_mul(s.runs);
        let sync = s.sync_cycles.saturating_mul(s.runs);
        totals.cycles = totals
            .cycles
            .saturating_add(s.cycles.saturating_mul(s.runs));
        totals.sync_cycles = totals.sync_cycles.saturating_add(sync);
        totals.amp_macs = totals
            .amp_macs
            .saturating_add(s.amp_macs.saturating_mul(s.runs));
        totals.amp_ideal_tile_cycles = totals
            .amp_ideal_tile_cycles
            .saturating_add(s.amp_ideal_tile_cycles.saturating_mul(s.runs));
        totals.floor_cycles = totals.floor_cycles.saturating_add(
            s.floor_cycles
                .saturating_add(s.sync_cycles)
                .saturating_mul(s.runs),
        );
        let k = kinds
            .entry(s.op_kind.as_str())
            .or_insert_with(|| OpKindProfile {
                op_kind: s.op_kind.clone(),
                step_runs: 0,
                compute_cycles: 0,
                exchange_cycles: 0,
                sync_cycles: 0,
            });
        k.step_runs = k.step_runs.saturating_add(s.runs);
        k.sync_cycles = k.sync_cycles.saturating_add(sync);
        match s.kind {
            StepKind::Compute => {
                totals.compute_cycles = totals.compute_cycles.saturating_add(work);
                k.compute_cycles = k.compute_cycles.saturating_add(work);
            }
            StepKind::Exchange => {
                totals.exchange_cycles = totals.exchange_cycles.saturating_add(work);
                k.exchange_cycles = k.exchange_cycles.saturating_add(work);
            }
        }
        for kc in &s.busiest_kinds {
            let i = kind_index(&kc.kind);
            busiest[i] = busiest[i].saturating_add(kc.cycles.saturating_mul(s.runs));
        }
    }
    let mut op_kinds: Vec<OpKindProfile> = kinds.into_values().collect();
    op_kinds.sort_by(|a, b| {
        let total = |k: &OpKindProfile| k.compute_cycles + k.exchange_cycles + k.sync_cycles;
        total(b)
            .cmp(&total(a))
            .then_with(|| a.op_kind.cmp(&b.op_kind))
    });
    let codelets = CODELET_KINDS
        .iter()
        .enumerate()
        .map(|(i, k)| CodeletProfile {
            kind: (*k).to_owned(),
            calls: w.kind_calls[i],
            busiest_cycles: busiest[i],
        })
        .collect();
    let kernels = w
        .costs
        .iter()
        .zip(&package.kernels)
        .zip(&w.entry_calls)
        .map(|(((variant, estimates), k), calls)| KernelProfile {
            name: k.name.clone(),
            instruction: variant.arithmetic().instruction().to_owned(),
            blocks: [
                variant.k(),
                variant.c(),
                variant.r_small(),
                variant.r_large(),
            ],
            shape: [variant.shape().inner, variant.shape().columns],
            entries: (0..4)
                .map(|i| EntryProfile {
                    symbol: k.entries[i].clone(),
                    rows: if i >= 2 {
                        variant.r_large()
                    } else {
                        variant.r_small()
                    },
                    accumulate: i % 2 == 1,
                    cycles: estimates[i].cycles,
                    macs: estimates[i].macs,
                    utilisation_ppm: (estimates[i].utilisation() * 1e6).round() as u32,
                    calls: calls[i],
                })
                .collect(),
        })
        .collect();
    let roofline_cycles = config.work.macs.roofline_cycles(&model, w.tiles);
    let fp8_roofline_cycles = config.work.macs.fp8_roofline_cycles(&model, w.tiles);
    let profile = Profile {
        schema: PROFILE_SCHEMA.to_owned(),
        target: target.name().to_owned(),
        tile_count: w.tiles,
        clock_hz: target.clock_hz(),
        sync_cycles_per_step: w.sync,
        work: config.work.clone(),
        totals,
        roofline_cycles,
        fp8_roofline_cycles,
        kernel_check,
        repeats: w.repeats,
        steps: w.steps,
        op_kinds,
        codelets,
        kernels,
    };
    tracing::info!(
        cycles = profile.totals.cycles,
        compute_cycles = profile.totals.compute_cycles,
        exchange_cycles = profile.totals.exchange_cycles,
        sync_cycles = profile.totals.sync_cycles,
        roofline_cycles,
        kernel_entries_agreeing = profile.kernel_check.agreeing,
        kernel_entries = profile.kernel_check.entries,
        "estimated package cycles"
    );
    Ok(profile)
}

impl Walker<'_> {
    fn walk(&mut self, program: &Program) -> Result<(), ProfileError> {
        // Per open repeat: its profile's index.
        let mut open: Vec<u32> = Vec::new();
        for event in program.walk() {
            let repeat = open.last().copied();
            match event {
                WalkEvent::Compute(step, at) => {
                    let s = self.compute(&step.label, &step.calls, at.runs, repeat)?;
                    self.steps.push(s);
                }
                WalkEvent::Exchange(step, at) => {
                    let index = self.phase;
                    self.phase += 1;
                    // Counted on: the totals check the phase count.
                    if let Some(phase) = self.package.phases.get(index) {
                        let s = self.exchange(&step.label, index, phase, at.runs, repeat)?;
                        self.steps.push(s);
                    }
                }
                WalkEvent::Enter(r, _) => {
                    open.push(self.repeats.len() as u32);
                    self.repeats.push(RepeatProfile {
                        name: r.name.clone(),
                        count: r.count,
                        first_step: self.steps.len() as u32,
                        steps: 0,
                        cycles: 0,
                        compute_cycles: 0,
                        exchange_cycles: 0,
                        sync_cycles: 0,
                        roofline_cycles: 0,
                        floor_cycles: 0,
                    });
                }
                WalkEvent::Leave(r, at) => {
                    let Some(index) = open.pop() else {
                        continue;
                    };
                    let inner = at.runs.saturating_mul(u64::from(r.count));
                    let mut p = self.repeats[index as usize].clone();
                    let first = p.first_step as usize;
                    p.steps = (self.steps.len() - first) as u32;
                    for s in &self.steps[first..] {
                        // Steps of nested repeats run a whole multiple of
                        // this body's runs.
                        let per = s.runs / inner.max(1);
                        let work = s.work_cycles.saturating_mul(per);
                        p.cycles = p.cycles.saturating_add(s.cycles.saturating_mul(per));
                        p.floor_cycles = p.floor_cycles.saturating_add(
                            s.floor_cycles
                                .saturating_add(s.sync_cycles)
                                .saturating_mul(per),
                        );
                        p.sync_cycles = p
                            .sync_cycles
                            .saturating_add(s.sync_cycles.saturating_mul(per));
                        match s.kind {
                            StepKind::Compute => {
                                p.compute_cycles = p.compute_cycles.saturating_add(work)
                            }
                            StepKind::Exchange => {
                                p.exchange_cycles = p.exchange_cycles.saturating_add(work)
                            }
                        }
                    }
                    self.repeats[index as usize] = p;
                }
            }
        }
        Ok(())
    }

    fn step_profile(
        &self,
        label: &StepLabel,
        kind: StepKind,
        runs: u64,
        repeat: Option<u32>,
    ) -> StepProfile {
        StepProfile {
            index: self.steps.len() as u32,
            name: label.to_string(),
            kind,
            op_kind: label.role.name().to_owned(),
            op: label.name.clone(),
            repeat,
            runs,
            cycles: self.sync,
            work_cycles: 0,
            sync_cycles: self.sync,
            busiest_tile: None,
            active_tiles: 0,
            mean_tile_cycles: 0,
            busiest_kinds: Vec::new(),
            amp_macs: 0,
            amp_ideal_tile_cycles: 0,
            floor_cycles: 0,
            exchange: None,
        }
    }

    /// The cycles and kind of one call.
    fn call(&self, step: &str, tile: TileId, c: &Codelet) -> Result<Call, ProfileError> {
        if tile.as_u32() >= self.tiles {
            return Err(ProfileError::Tile {
                step: step.to_owned(),
                tile: tile.as_u32(),
                tiles: self.tiles,
            });
        }
        for b in codelet_buffers(c) {
            if b.index() >= self.precisions.len() {
                return Err(ProfileError::MissingBuffer {
                    step: step.to_owned(),
                    buffer: b.as_u32(),
                    buffers: self.precisions.len(),
                });
            }
        }
        match c {
            Codelet::Gemm {
                kernel,
                entry,
                rows,
                ..
            } => {
                let e = self.costs.call(*kernel, *entry, *rows)?;
                Ok(Call {
                    cycles: e.cycles,
                    kind: 0,
                    macs: e.macs,
                    ideal: e.lower_bound_cycles(),
                    floor: e.lower_bound_cycles(),
                })
            }
            other => {
                let precision = |b: crate::program::BufferId| self.precisions[b.index()];
                // Every codelet but the GEMM has a work.
                let work = codelet_work(&self.vector, other, precision)
                    .unwrap_or(Work::Zero { bytes: 0, runs: 1 });
                Ok(Call {
                    cycles: self.vector.cycles(&work),
                    kind: kind_index(work.kind()),
                    macs: 0,
                    ideal: 0,
                    floor: work_floor(&work, self.vector.datapath_bytes(), self.f16_macs),
                })
            }
        }
    }

    fn compute(
        &mut self,
        label: &StepLabel,
        calls: &[(TileId, Codelet)],
        runs: u64,
        repeat: Option<u32>,
    ) -> Result<StepProfile, ProfileError> {
        let mut s = self.step_profile(label, StepKind::Compute, runs, repeat);
        let name = s.name.as_str();
        let costed: Vec<(TileId, Call)> = calls
            .iter()
            .map(|(t, c)| Ok((*t, self.call(name, *t, c)?)))
            .collect::<Result<_, ProfileError>>()?;
        let mut per_tile = vec![0u64; self.tiles as usize];
        let mut floor_per_tile = vec![0u64; self.tiles as usize];
        for (t, call) in &costed {
            let slot = &mut per_tile[t.index()];
            *slot = slot.saturating_add(call.cycles);
            let floor = &mut floor_per_tile[t.index()];
            *floor = floor.saturating_add(call.floor);
            self.kind_calls[call.kind] = self.kind_calls[call.kind].saturating_add(runs);
            s.amp_macs = s.amp_macs.saturating_add(call.macs);
            s.amp_ideal_tile_cycles = s.amp_ideal_tile_cycles.saturating_add(call.ideal);
        }
        s.floor_cycles = floor_per_tile.iter().copied().max().unwrap_or(0);
        for (_, c) in calls {
            if let Codelet::Gemm { kernel, entry, .. } = c
                && let Some(e) = self.entry_calls.get_mut(kernel.as_u32() as usize)
            {
                e[entry.index()] = e[entry.index()].saturating_add(runs);
            }
        }
        let (busiest, work) = busiest_of(&per_tile);
        let active: Vec<u64> = per_tile.iter().copied().filter(|&c| c > 0).collect();
        s.active_tiles = active.len() as u32;
        s.mean_tile_cycles = if active.is_empty() {
            0
        } else {
            active.iter().sum::<u64>() / active.len() as u64
        };
        s.work_cycles = work;
        s.cycles = work.saturating_add(self.sync);
        s.busiest_tile = busiest;
        if let Some(b) = busiest {
            let mut kinds = [(0u64, 0u64); CODELET_KINDS.len()];
            for (t, call) in &costed {
                if t.as_u32() == b {
                    kinds[call.kind].0 += 1;
                    kinds[call.kind].1 = kinds[call.kind].1.saturating_add(call.cycles);
                }
            }
            s.busiest_kinds = kinds_list(&kinds);
        }
        Ok(s)
    }

    fn exchange(
        &mut self,
        label: &StepLabel,
        index: usize,
        phase: &PackagePhase,
        runs: u64,
        repeat: Option<u32>,
    ) -> Result<StepProfile, ProfileError> {
        let mut s = self.step_profile(label, StepKind::Exchange, runs, repeat);
        let info = &phase.info;
        let (longest_row_tile, longest_row_cycles) = longest_row(index, phase)?;
        let (copy_tile, copy_cycles, copying) = self.copies(&info.local)?;
        self.kind_calls[kind_index("copy")] =
            self.kind_calls[kind_index("copy")].saturating_add(runs.saturating_mul(copying));
        s.work_cycles = info.horizon.saturating_add(copy_cycles);
        s.floor_cycles = info
            .endpoint_lower_bound
            .saturating_add(self.copy_floor(&info.local));
        s.cycles = s.work_cycles.saturating_add(self.sync);
        s.busiest_tile = longest_row_tile.or(copy_tile);
        s.active_tiles = u32::try_from(
            (0..phase.rows.tile_count())
                .filter(|&t| !phase.rows.row(TileId::from_u32(t)).is_empty())
                .count(),
        )
        .unwrap_or(u32::MAX);
        if copy_cycles > 0 {
            s.busiest_kinds = vec![KindCycles {
                kind: "copy".to_owned(),
                calls: 1,
                cycles: copy_cycles,
            }];
        }
        s.exchange = Some(ExchangeStep {
            phase: index as u32,
            horizon: info.horizon,
            endpoint_lower_bound: info.endpoint_lower_bound,
            stronger_lower_bound: info.stronger_lower_bound,
            longest_row_tile,
            longest_row_cycles,
            copy_tile,
            copy_cycles,
        });
        Ok(s)
    }

    /// The floor of the busiest tile's on-tile copies: its bytes at one
    /// datapath vector a cycle.
    fn copy_floor(&self, local: &[LocalCopy]) -> u64 {
        let mut bytes: BTreeMap<u32, u64> = BTreeMap::new();
        for c in local {
            let b = bytes.entry(c.tile.as_u32()).or_insert(0);
            *b = b.saturating_add(u64::from(c.bytes));
        }
        let datapath = self.vector.datapath_bytes();
        bytes
            .values()
            .map(|&b| work_floor(&Work::Copy { bytes: b }, datapath, self.f16_macs))
            .max()
            .unwrap_or(0)
    }

    /// The tile with the most on-tile copy cycles, its cycles, and how many
    /// tiles copy. Each tile's copies are one call of copy work.
    fn copies(&self, local: &[LocalCopy]) -> Result<(Option<u32>, u64, u64), ProfileError> {
        let mut bytes: BTreeMap<u32, u64> = BTreeMap::new();
        for c in local {
            if c.tile.as_u32() >= self.tiles {
                return Err(ProfileError::Tile {
                    step: "an on-tile copy".to_owned(),
                    tile: c.tile.as_u32(),
                    tiles: self.tiles,
                });
            }
            let b = bytes.entry(c.tile.as_u32()).or_insert(0);
            *b = b.saturating_add(u64::from(c.bytes));
        }
        let mut best: (Option<u32>, u64) = (None, 0);
        for (&tile, &b) in &bytes {
            let cycles = self.vector.cycles(&Work::Copy { bytes: b });
            if cycles > best.1 {
                best = (Some(tile), cycles);
            }
        }
        Ok((best.0, best.1, bytes.len() as u64))
    }
}

/// One codelet call on one tile, costed.
struct Call {
    /// Its cycles.
    cycles: u64,
    /// Its kind's index in `CODELET_KINDS`.
    kind: usize,
    /// AMP MACs (GEMM calls).
    macs: u64,
    /// Its cycles at the AMP's peak (GEMM calls).
    ideal: u64,
    /// The least cycles its work could take (`work_floor`).
    floor: u64,
}

/// The lowest tile with the largest value and that value.
fn busiest_of(per_tile: &[u64]) -> (Option<u32>, u64) {
    let mut best: (Option<u32>, u64) = (None, 0);
    for (t, &c) in per_tile.iter().enumerate() {
        if c > best.1 {
            best = (Some(t as u32), c);
        }
    }
    best
}

fn kinds_list(kinds: &[(u64, u64); CODELET_KINDS.len()]) -> Vec<KindCycles> {
    kinds
        .iter()
        .enumerate()
        .filter(|(_, (calls, _))| *calls > 0)
        .map(|(i, &(calls, cycles))| KindCycles {
            kind: CODELET_KINDS[i].to_owned(),
            calls,
            cycles,
        })
        .collect()
}

/// The tile whose decoded exchange row ends last (lowest such tile) and
/// the cycle it ends at.
fn longest_row(index: usize, phase: &PackagePhase) -> Result<(Option<u32>, u64), ProfileError> {
    let unique = phase.rows.unique_rows();
    let ends: Vec<u64> = unique
        .par_iter()
        .map(|row| row_end(row))
        .collect::<Result<_, _>>()
        .map_err(|source| ProfileError::Rows {
            phase: index,
            source,
        })?;
    let mut best: (Option<u32>, u64) = (None, 0);
    for t in 0..phase.rows.tile_count() {
        if let Some(id) = phase.rows.row_id(TileId::from_u32(t))
            && let Some(&end) = ends.get(id as usize)
            && end > best.1
        {
            best = (Some(t), end);
        }
    }
    Ok(best)
}
