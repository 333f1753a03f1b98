//! Exchange phases: one per exchange step, rows for every tile, patches
//! naming existing words, on-tile copies inside placed memory in every
//! iteration, the words moved within the limits, and every row replayed
//! against the placed ranges.
//!
//! The replay is the tile model's own (`ipu_exchange::replay`), run on a
//! memory that holds no data and only checks that every word read or
//! written lies inside one placed range of its tile, as the tile model's
//! memory does. A phase without patches is replayed once; a patched phase
//! once per iteration of its repeat, with the iteration's patches applied
//! as the tile model applies them. Its cost is the run's exchange without
//! the data, and the words are counted against the limit first.

use std::cell::Cell;

use ipu_exchange::{BlockCopy, ExchangeMemory, Fabric, MemoryError, replay};
use ipu_layout::TileId;
use rayon::prelude::*;

use super::placement::Placed;
use super::steps::PhaseUse;
use super::{Errors, ValidationError};
use crate::package::{Limits, Package};

/// Checks the phases against the steps that use them.
pub(super) fn check(
    package: &Package,
    tiles: u32,
    limits: &Limits,
    placed: &Placed,
    uses: &[PhaseUse],
    fabric: &Fabric,
    errors: &mut Errors,
) {
    if uses.len() != package.phases.len() {
        errors.push(ValidationError::PhaseCount {
            steps: uses.len(),
            phases: package.phases.len(),
        });
        return;
    }
    let mut words = 0u64;
    for (index, (phase, u)) in package.phases.iter().zip(uses).enumerate() {
        if errors.full() {
            return;
        }
        let rows = &phase.rows;
        if rows.tile_count() != tiles {
            errors.push(ValidationError::RowTiles {
                phase: index,
                found: rows.tile_count(),
                tiles,
            });
            continue;
        }
        let info = &phase.info;
        if !u.in_repeat && !info.patches.is_empty() {
            errors.push(ValidationError::PatchesOutsideRepeat { phase: index });
        }
        for p in &info.patches {
            let row = (p.tile.as_u32() < tiles).then(|| rows.row(p.tile));
            if row.is_none_or(|r| p.index as usize >= r.len()) {
                errors.push(ValidationError::PatchOutside {
                    phase: index,
                    tile: p.tile,
                    index: p.index,
                    words: row.map_or(0, <[u32]>::len),
                });
            }
        }
        // Every copy counts at least a word, so that checking copies in
        // every iteration is bounded by the limit too.
        let copied = info
            .local
            .iter()
            .map(|c| u64::from(c.bytes).div_ceil(4).max(1))
            .fold(0u64, u64::saturating_add);
        // A patched phase is replayed once per iteration when validating.
        let replays = if info.patches.is_empty() {
            1
        } else {
            u64::from(u.iterations)
        };
        let sent = rows.replay_words();
        words = words
            .saturating_add(sent.saturating_mul(u.times.max(replays)))
            .saturating_add(copied.saturating_mul(u.times.max(u64::from(u.iterations))));
        if !errors.within("exchange words", words, limits.max_exchange_words) {
            return;
        }
        for i in 0..u.iterations {
            for c in info.local.iter().map(|c| c.in_iteration(i)) {
                for (what, address) in [("reads", c.source), ("writes", c.destination)] {
                    if !placed.holds(c.tile, address, u64::from(c.bytes)) {
                        errors.push(ValidationError::CopyOutside {
                            phase: index,
                            iteration: i,
                            tile: c.tile,
                            what,
                            address,
                            bytes: c.bytes,
                        });
                    }
                }
            }
            if errors.full() {
                return;
            }
        }
    }
    if !errors.is_empty() {
        return;
    }
    // Every (phase, iteration) replay, in order; they run in parallel and
    // the first failure in that order is reported.
    let jobs: Vec<(usize, u32)> = package
        .phases
        .iter()
        .zip(uses)
        .enumerate()
        .flat_map(|(index, (phase, u))| {
            let count = if phase.info.patches.is_empty() {
                1
            } else {
                u.iterations
            };
            (0..count).map(move |i| (index, i))
        })
        .collect();
    let failures: Vec<ValidationError> = jobs
        .par_iter()
        .filter_map(|&(index, iteration)| {
            let phase = &package.phases[index];
            let rows = phase.rows_at(iteration);
            let mut memory = DryMemory {
                placed,
                read: Cell::new(None),
                written: Cell::new(None),
            };
            replay(&rows, fabric, &mut memory)
                .err()
                .map(|source| ValidationError::Replay {
                    phase: index,
                    iteration,
                    source,
                })
        })
        .collect();
    for e in failures {
        errors.push(e);
    }
}

/// The last placed range a word was found in: `(tile, start, end)`.
type LastRange = Cell<Option<(TileId, u32, u32)>>;

/// Tile memory that holds no data: every word read or written must lie in
/// one placed range of its tile.
struct DryMemory<'a> {
    placed: &'a Placed,
    /// The range of the last word read, and of the last word written: a
    /// replay reads a run of consecutive words on one tile and writes them
    /// on another, so each usually holds the next word too.
    read: LastRange,
    written: LastRange,
}

impl DryMemory<'_> {
    fn check(&self, last: &LastRange, tile: TileId, byte_address: u32) -> Result<(), MemoryError> {
        let error = MemoryError { tile, byte_address };
        let end = byte_address.checked_add(4).ok_or(error)?;
        if let Some((t, start, stop)) = last.get()
            && t == tile
            && start <= byte_address
            && end <= stop
        {
            return Ok(());
        }
        let (start, stop) = self.placed.range_of_word(tile, byte_address).ok_or(error)?;
        last.set(Some((tile, start, stop)));
        Ok(())
    }

    /// [`DryMemory::check`] of `words` consecutive words: the range of the
    /// first usually holds them all; otherwise each word is checked, so the
    /// error names the first word outside every placed range.
    fn check_block(
        &self,
        last: &LastRange,
        tile: TileId,
        byte_address: u32,
        words: usize,
    ) -> Result<(), MemoryError> {
        if words == 0 {
            return Ok(());
        }
        self.check(last, tile, byte_address)?;
        let end = u32::try_from(words)
            .ok()
            .and_then(|w| w.checked_mul(4))
            .and_then(|bytes| byte_address.checked_add(bytes));
        if let (Some(end), Some((_, _, stop))) = (end, last.get())
            && end <= stop
        {
            return Ok(());
        }
        for k in 1..words {
            let at = u32::try_from(k)
                .ok()
                .and_then(|k| byte_address.checked_add(k.checked_mul(4)?))
                .ok_or(MemoryError { tile, byte_address })?;
            self.check(last, tile, at)?;
        }
        Ok(())
    }
}

impl ExchangeMemory for DryMemory<'_> {
    fn read_word(&self, tile: TileId, byte_address: u32) -> Result<u32, MemoryError> {
        self.check(&self.read, tile, byte_address).map(|()| 0)
    }

    fn write_word(
        &mut self,
        tile: TileId,
        byte_address: u32,
        _word: u32,
    ) -> Result<(), MemoryError> {
        self.check(&self.written, tile, byte_address)
    }

    /// Checks each copy's source and destination ranges, the first
    /// failing copy's error first.
    fn copy_blocks(&mut self, copies: &[BlockCopy]) -> Result<(), MemoryError> {
        for c in copies {
            let words = c.words as usize;
            self.check_block(&self.read, c.source, c.source_address, words)?;
            self.check_block(&self.written, c.dest, c.dest_address, words)?;
        }
        Ok(())
    }
}
