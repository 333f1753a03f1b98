//! The tile memory map as data: regions, memory elements, the loader limit
//! and the address ranges each memory class may use.
//!
//! The seed system kept a merged free list that ignored region boundaries and
//! so saw holes that did not exist. Here every class range is split at region
//! boundaries and cut at the loader limit once, when the map is built, so no
//! later stage can produce an allocation that straddles a boundary.

use ipu_layout::MemoryClass;
use ipu_target::Target;

/// One region of tile memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// The region's name in the device file (`region0`).
    pub name: String,
    /// First address of the region.
    pub start: u32,
    /// One past the last address of the region.
    pub end: u32,
    /// The size of one memory element: the unit of access contention
    /// (16 KiB in region 0, a 32 KiB pair in interleaved region 1).
    pub element_bytes: u32,
    /// Whether instructions may be fetched from this region.
    pub executable: bool,
}

/// A memory element: the unit that separated requests must not share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemoryElement {
    /// The index of the region holding the element.
    pub region: u32,
    /// First address of the element.
    pub start: u32,
    /// One past the last address of the element.
    pub end: u32,
}

/// The memory map of one tile.
///
/// Invariant: `class_ranges[c]` is sorted, disjoint, each range lies inside
/// one region and below the loader limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryMap {
    sram_start: u32,
    sram_end: u32,
    loader_limit: u32,
    regions: Vec<Region>,
    class_ranges: [Vec<(u32, u32)>; 2],
    executable: Vec<(u32, u32)>,
}

impl MemoryMap {
    /// The tile memory map of `target`: its regions, and per memory class
    /// the ranges it may use, split at region boundaries and cut at the
    /// loader limit. The target was validated when it was made, so this
    /// cannot fail.
    pub fn new(target: &Target) -> MemoryMap {
        let m = target.memory();
        let regions: Vec<Region> = m
            .regions
            .iter()
            .map(|r| Region {
                name: r.name.clone(),
                start: r.start,
                end: r.end,
                element_bytes: r.element_bytes,
                executable: r.executable,
            })
            .collect();
        let limit = m.loader_limit.min(m.sram_end);
        let mut cut: [Vec<(u32, u32)>; 2] = [Vec::new(), Vec::new()];
        for entry in &m.classes {
            let mut pieces = Vec::new();
            for &(start, end) in &entry.ranges {
                for r in &regions {
                    let a = start.max(r.start);
                    let b = end.min(r.end).min(limit);
                    if a < b {
                        pieces.push((a, b));
                    }
                }
            }
            pieces.sort_unstable();
            // Overlapping ranges given for one class are merged, but never
            // across a region boundary: the pieces were cut per region.
            let mut merged: Vec<(u32, u32)> = Vec::new();
            for (a, b) in pieces {
                match merged.last_mut() {
                    Some(last) if a <= last.1 && same_region(&regions, last.0, a) => {
                        last.1 = last.1.max(b)
                    }
                    _ => merged.push((a, b)),
                }
            }
            cut[entry.class.index()] = merged;
        }
        let executable = regions
            .iter()
            .filter(|r| r.executable)
            .filter_map(|r| {
                let b = r.end.min(limit);
                (r.start < b).then_some((r.start, b))
            })
            .collect();
        MemoryMap {
            sram_start: m.sram_start,
            sram_end: m.sram_end,
            loader_limit: limit,
            regions,
            class_ranges: cut,
            executable,
        }
    }

    /// The memory map of the built-in IPU21 target ([`Target::ipu21`]).
    pub fn ipu21() -> MemoryMap {
        MemoryMap::new(Target::ipu21())
    }

    /// First SRAM address.
    pub fn sram_start(&self) -> u32 {
        self.sram_start
    }

    /// One past the last SRAM address.
    pub fn sram_end(&self) -> u32 {
        self.sram_end
    }

    /// Nothing may be placed at or above this address (the loader fills only
    /// below it).
    pub fn loader_limit(&self) -> u32 {
        self.loader_limit
    }

    /// The regions in address order.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// The ranges a class may use: sorted, disjoint, each inside one region
    /// and below the loader limit.
    pub fn class_ranges(&self, class: MemoryClass) -> &[(u32, u32)] {
        &self.class_ranges[class.index()]
    }

    /// The ranges instructions may be fetched from (code, runtime and
    /// exchange tables must live here), below the loader limit.
    pub fn executable_ranges(&self) -> &[(u32, u32)] {
        &self.executable
    }

    /// The index of the region holding `addr`, if any.
    pub fn region_of(&self, addr: u32) -> Option<usize> {
        self.regions
            .iter()
            .position(|r| r.start <= addr && addr < r.end)
    }

    /// The memory element holding `addr`, if `addr` is inside a region.
    pub fn element_of(&self, addr: u32) -> Option<MemoryElement> {
        let index = self.region_of(addr)?;
        let r = &self.regions[index];
        let k = (addr - r.start) / r.element_bytes;
        let start = r.start + k * r.element_bytes;
        let end = start.saturating_add(r.element_bytes).min(r.end);
        Some(MemoryElement {
            region: index as u32,
            start,
            end,
        })
    }
}

fn same_region(regions: &[Region], a: u32, b: u32) -> bool {
    let find = |x: u32| regions.iter().position(|r| r.start <= x && x < r.end);
    find(a) == find(b)
}
