//! The tile memory map as data: regions, memory elements, the loader limit
//! and the address ranges each memory class may use.
//!
//! The seed system kept a merged free list that ignored region boundaries and
//! so saw holes that did not exist. Here every class range is split at region
//! boundaries and cut at the loader limit once, when the map is built, so no
//! later stage can produce an allocation that straddles a boundary.

use ipu_layout::MemoryClass;
use serde::Deserialize;

/// The IPU21 description the crate reads its memory map from.
const IPU21_TOML: &str = include_str!("../../../device/ipu21.toml");

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

/// Why a memory map description was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// The device file is not valid TOML or lacks a field.
    #[error("the device description cannot be read: {0}; fix the [memory] section")]
    Parse(String),
    /// A region is empty, has a zero element size, or overlaps the previous one.
    #[error(
        "region `{name}` [{start:#x}, {end:#x}) with elements of {element_bytes} bytes is empty, \
         unordered or overlaps the previous region; list regions in address order without overlap"
    )]
    BadRegion {
        /// The region's name.
        name: String,
        /// First address.
        start: u64,
        /// One past the last address.
        end: u64,
        /// Element size.
        element_bytes: u64,
    },
    /// A class range is empty or lies outside every region.
    #[error(
        "class {class} range [{start:#x}, {end:#x}) is empty or not inside the regions; \
         give ranges inside SRAM"
    )]
    BadRange {
        /// The class.
        class: MemoryClass,
        /// First address.
        start: u64,
        /// One past the last address.
        end: u64,
    },
    /// A memory class has no entry in the description.
    #[error(
        "memory class {0} has no address ranges in the device description; add it to `classes`"
    )]
    MissingClass(MemoryClass),
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

#[derive(Deserialize)]
struct DeviceFile {
    memory: MemorySection,
}

#[derive(Deserialize)]
struct MemorySection {
    sram_start: u32,
    sram_end: u32,
    loader_limit: u32,
    regions: Vec<RegionEntry>,
    classes: Vec<ClassEntry>,
}

#[derive(Deserialize)]
struct RegionEntry {
    name: String,
    start: u32,
    end: u32,
    element_bytes: u32,
    executable: bool,
}

#[derive(Deserialize)]
struct ClassEntry {
    class: MemoryClass,
    ranges: Vec<(u32, u32)>,
}

impl MemoryMap {
    /// The IPU21 tile memory map, read from `device/ipu21.toml`.
    ///
    /// # Panics
    ///
    /// Never for any input: the description is embedded at build time and a
    /// test parses it, so a failure here is a build defect.
    pub fn ipu21() -> MemoryMap {
        match Self::from_device_toml(IPU21_TOML) {
            Ok(map) => map,
            Err(e) => panic!("bug: the embedded device/ipu21.toml is invalid: {e}"),
        }
    }

    /// Reads the `[memory]` section of a device description.
    pub fn from_device_toml(text: &str) -> Result<MemoryMap, MapError> {
        let file: DeviceFile = toml::from_str(text).map_err(|e| MapError::Parse(e.to_string()))?;
        let m = file.memory;
        let regions = m
            .regions
            .into_iter()
            .map(|r| Region {
                name: r.name,
                start: r.start,
                end: r.end,
                element_bytes: r.element_bytes,
                executable: r.executable,
            })
            .collect();
        let mut classes: [Option<Vec<(u32, u32)>>; 2] = [None, None];
        for entry in m.classes {
            classes[entry.class.index()] = Some(entry.ranges);
        }
        let [standard, interleaved] = classes;
        let standard = standard.ok_or(MapError::MissingClass(MemoryClass::Ipu21Standard))?;
        let interleaved =
            interleaved.ok_or(MapError::MissingClass(MemoryClass::Ipu21Interleaved))?;
        Self::new(
            m.sram_start,
            m.sram_end,
            m.loader_limit,
            regions,
            [standard, interleaved],
        )
    }

    /// Builds a map from its parts, splitting class ranges at region
    /// boundaries and cutting them at the loader limit.
    pub fn new(
        sram_start: u32,
        sram_end: u32,
        loader_limit: u32,
        regions: Vec<Region>,
        class_ranges: [Vec<(u32, u32)>; 2],
    ) -> Result<MemoryMap, MapError> {
        let mut previous_end = sram_start;
        for r in &regions {
            if r.start >= r.end
                || r.element_bytes == 0
                || r.start < previous_end
                || r.end > sram_end
            {
                return Err(MapError::BadRegion {
                    name: r.name.clone(),
                    start: r.start.into(),
                    end: r.end.into(),
                    element_bytes: r.element_bytes.into(),
                });
            }
            previous_end = r.end;
        }
        let limit = loader_limit.min(sram_end);
        let mut cut: [Vec<(u32, u32)>; 2] = [Vec::new(), Vec::new()];
        for class in MemoryClass::ALL {
            let mut pieces = Vec::new();
            for &(start, end) in &class_ranges[class.index()] {
                let inside = regions.iter().any(|r| start < r.end && r.start < end);
                if start >= end || !inside {
                    return Err(MapError::BadRange {
                        class,
                        start: start.into(),
                        end: end.into(),
                    });
                }
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
            cut[class.index()] = merged;
        }
        let executable = regions
            .iter()
            .filter(|r| r.executable)
            .filter_map(|r| {
                let b = r.end.min(limit);
                (r.start < b).then_some((r.start, b))
            })
            .collect();
        Ok(MemoryMap {
            sram_start,
            sram_end,
            loader_limit: limit,
            regions,
            class_ranges: cut,
            executable,
        })
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
