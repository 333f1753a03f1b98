//! Buffers and their placement: types no wider than the package, unique
//! names, every non-empty shard placed exactly once inside tile memory,
//! aligned and clear of support memory, and support memory inside the
//! code region.

use std::collections::HashSet;

use ipu_layout::{EntityId, TileId};

use super::{Errors, ValidationError};
use crate::package::{Limits, Package};
use crate::program::BufferId;

/// Placed memory per tile, as a run sees it: the union of every placed
/// shard with its access tail, sorted by address.
pub(super) struct Placed {
    ranges: Vec<Vec<(u32, u32)>>,
}

impl Placed {
    /// Whether `bytes` bytes at `address` on `tile` lie inside one placed
    /// range.
    pub(super) fn holds(&self, tile: TileId, address: u32, bytes: u64) -> bool {
        let Some(list) = self.ranges.get(tile.index()) else {
            return false;
        };
        let end = u64::from(address).saturating_add(bytes);
        let i = list.partition_point(|r| r.0 <= address);
        i > 0 && list.get(i - 1).is_some_and(|r| u64::from(r.1) >= end)
    }

    /// The placed range holding the word at `address` on `tile`.
    pub(super) fn range_of_word(&self, tile: TileId, address: u32) -> Option<(u32, u32)> {
        let list = self.ranges.get(tile.index())?;
        let end = address.checked_add(4)?;
        let i = list.partition_point(|r| r.0 <= address);
        let r = *list.get(i.checked_sub(1)?)?;
        (end <= r.1).then_some(r)
    }
}

/// `(address, shard bytes with the access tail)` of `buffer`'s shard on
/// `tile`, if it is placed there.
pub(super) fn shard_range(package: &Package, buffer: BufferId, tile: TileId) -> Option<(u32, u64)> {
    let b = package.program.buffers.get(buffer)?;
    let address = package.placement.addresses.get(buffer, tile)?;
    let bytes = b.ty.shard_bytes(tile).ok()?;
    Some((address, bytes.saturating_add(u64::from(b.tail_bytes))))
}

/// Checks buffers and placement; returns the placed memory when every
/// later check may rely on them.
pub(super) fn check(
    package: &Package,
    tiles: u32,
    limits: &Limits,
    errors: &mut Errors,
) -> Option<Placed> {
    let buffers = &package.program.buffers;
    if !errors.within("buffers", buffers.len() as u64, limits.max_buffers as u64) {
        return None;
    }
    let type_tiles = buffers
        .values()
        .iter()
        .map(|b| u64::from(b.ty.tiling().tile_count()))
        .fold(0u64, u64::saturating_add);
    if !errors.within("buffer shards", type_tiles, limits.max_buffer_tiles) {
        return None;
    }
    let mut names = HashSet::with_capacity(buffers.len());
    for b in buffers.values() {
        if !names.insert(b.name.as_str()) {
            errors.push(ValidationError::DuplicateBuffer {
                buffer: b.name.clone(),
            });
        }
        if b.ty.tiling().tile_count() > tiles {
            errors.push(ValidationError::BufferTiles {
                buffer: b.name.clone(),
                type_tiles: b.ty.tiling().tile_count(),
                tiles,
            });
        }
        if !b.alignment.is_power_of_two() {
            errors.push(ValidationError::Alignment {
                buffer: b.name.clone(),
                alignment: b.alignment,
            });
        }
    }
    let support = &package.placement.support;
    if support.len() != tiles as usize {
        errors.push(ValidationError::Support {
            found: support.len(),
            tiles,
        });
    }
    let addresses = &package.placement.addresses;
    if addresses.len() != buffers.len() {
        errors.push(ValidationError::AddressLists {
            found: addresses.len(),
            buffers: buffers.len(),
        });
    }
    if !errors.is_empty() {
        return None;
    }
    let region = package.target.code_region();
    for (t, s) in support.iter().enumerate() {
        let end = u64::from(s.start) + u64::from(s.reserved);
        let used = u64::from(s.runtime_bytes)
            + u64::from(s.kernel_code_bytes)
            + u64::from(s.control_bytes)
            + u64::from(s.exchange_bytes)
            + u64::from(s.patch_bytes);
        if s.start < region.start || end > u64::from(region.end) || used > u64::from(s.reserved) {
            errors.push(ValidationError::SupportOutside {
                tile: TileId::from_u32(t as u32),
                start: s.start,
                reserved: s.reserved,
                used,
                region_start: region.start,
                region_end: region.end,
            });
        }
    }
    let memory = package.target.memory();
    let mut ranges: Vec<Vec<(u32, u32)>> = vec![Vec::new(); tiles as usize];
    for (id, b) in buffers.iter() {
        if errors.full() {
            return None;
        }
        let list = addresses.of(id);
        if list.windows(2).any(|w| w[0].0 >= w[1].0) {
            errors.push(ValidationError::AddressOrder {
                buffer: b.name.clone(),
            });
            continue;
        }
        for &(tile, address) in list {
            let tile = TileId::from_u32(tile);
            let shard = if tile.as_u32() < b.ty.tiling().tile_count() {
                b.ty.shard_bytes(tile).ok()
            } else {
                None
            };
            let bytes = shard
                .unwrap_or(u64::MAX)
                .saturating_add(u64::from(b.tail_bytes));
            let end = u64::from(address).saturating_add(bytes);
            let Some(s) = support.get(tile.index()) else {
                errors.push(ValidationError::ShardOutside {
                    buffer: b.name.clone(),
                    tile,
                    address,
                    bytes,
                });
                continue;
            };
            if address < memory.sram_start || end > u64::from(memory.loader_limit) {
                errors.push(ValidationError::ShardOutside {
                    buffer: b.name.clone(),
                    tile,
                    address,
                    bytes,
                });
                continue;
            }
            if shard == Some(0) {
                errors.push(ValidationError::Placement {
                    buffer: b.name.clone(),
                    tile,
                    bytes: 0,
                    placed: true,
                });
            }
            let support_end = u64::from(s.start) + u64::from(s.reserved);
            if u64::from(address) < support_end && end > u64::from(s.start) {
                errors.push(ValidationError::ShardInSupport {
                    buffer: b.name.clone(),
                    tile,
                    address,
                    bytes,
                });
            }
            if b.alignment != 0 && address % b.alignment != 0 {
                errors.push(ValidationError::Misaligned {
                    buffer: b.name.clone(),
                    tile,
                    address,
                    alignment: b.alignment,
                });
            }
            // Inside the loader limit, so the end fits in 32 bits.
            if let Some(r) = ranges.get_mut(tile.index()) {
                r.push((address, u32::try_from(end).unwrap_or(u32::MAX)));
            }
        }
        for shard in b.ty.shards() {
            if shard.bytes > 0 && addresses.get(id, shard.tile).is_none() {
                errors.push(ValidationError::Placement {
                    buffer: b.name.clone(),
                    tile: shard.tile,
                    bytes: shard.bytes,
                    placed: false,
                });
            }
        }
    }
    if !errors.is_empty() {
        return None;
    }
    // Buffers with disjoint lifetimes share addresses: keep the union.
    for list in &mut ranges {
        list.sort_unstable();
        let mut union: Vec<(u32, u32)> = Vec::with_capacity(list.len());
        for &(start, end) in list.iter() {
            match union.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => union.push((start, end)),
            }
        }
        *list = union;
    }
    Some(Placed { ranges })
}
