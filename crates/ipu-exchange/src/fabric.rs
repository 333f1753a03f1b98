//! The exchange fabric's timing model, taken from the device description.
//!
//! Timing is data so that another target is another description, not a
//! code change: [`Fabric::new`] reads the `exchange` section of an
//! `ipu_target::Target` (and its memory regions, for element hazards) and
//! refuses values the scheduler does not model.

use ipu_layout::TileId;
use ipu_target::Target;

/// Timing and structure of the exchange fabric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fabric {
    tile_count: u32,
    latency_cycles: u32,
    source_switch_cycles: u32,
    pointer_switch_cycles: u32,
    partner_xor: u32,
    memory_element_hazards: bool,
    /// `(start, end, element_bytes)` per memory region, for hazards.
    elements: Vec<(u32, u32, u32)>,
}

/// Why a device description cannot be turned into a [`Fabric`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// A value is outside what the model supports.
    #[error(
        "the device description sets `{key}` = {value}, which the exchange model does not support: {why}"
    )]
    Unsupported {
        /// The dotted key.
        key: &'static str,
        /// The value found.
        value: i64,
        /// What the model needs.
        why: &'static str,
    },
}

impl Fabric {
    /// The fabric of `target`.
    pub fn new(target: &Target) -> Result<Fabric, FabricError> {
        let x = target.exchange();
        let check = |value: u32, key: &'static str, max: u32, why: &'static str| {
            if value <= max {
                Ok(value)
            } else {
                Err(FabricError::Unsupported {
                    key,
                    value: i64::from(value),
                    why,
                })
            }
        };
        let tile_count = check(
            target.tile_count(),
            "tile_count",
            crate::model::MAX_TILES,
            "XPIC values name at most 8192 tiles",
        )?;
        let latency_cycles = check(
            x.latency_cycles,
            "exchange.latency_cycles",
            1 << 16,
            "latency must be between 0 and 65536 cycles",
        )?;
        let source_switch_cycles = check(
            x.source_switch_cycles,
            "exchange.source_switch_cycles",
            0,
            "the scheduler models switches that take effect at their issue cycle (0)",
        )?;
        let pointer_switch_cycles = check(
            x.pointer_switch_cycles,
            "exchange.pointer_switch_cycles",
            0,
            "the scheduler models switches that take effect at their issue cycle (0)",
        )?;
        let elements = target
            .memory()
            .regions
            .iter()
            .map(|r| (r.start, r.end, r.element_bytes))
            .collect();
        Ok(Fabric {
            tile_count,
            latency_cycles,
            source_switch_cycles,
            pointer_switch_cycles,
            partner_xor: x.partner_xor,
            memory_element_hazards: x.memory_element_hazards,
            elements,
        })
    }

    /// The fabric of the built-in IPU21 target ([`Target::ipu21`]).
    pub fn ipu21() -> Result<Fabric, FabricError> {
        Fabric::new(Target::ipu21())
    }

    /// A copy with a different fabric latency (for experiments and tests).
    pub fn with_latency(mut self, latency_cycles: u32) -> Fabric {
        self.latency_cycles = latency_cycles;
        self
    }

    /// A copy with memory-element hazard checking switched on or off.
    pub fn with_memory_element_hazards(mut self, on: bool) -> Fabric {
        self.memory_element_hazards = on;
        self
    }

    /// Tiles on the device.
    pub fn tile_count(&self) -> u32 {
        self.tile_count
    }

    /// Cycles from a send by `source` to the write at `destination`. The
    /// model is a constant; the signature allows a distance-based model.
    pub fn latency(&self, _source: TileId, _destination: TileId) -> u32 {
        self.latency_cycles
    }

    /// The constant fabric latency.
    pub fn latency_cycles(&self) -> u32 {
        self.latency_cycles
    }

    /// Cycles a receiver loses when it switches source (0 on IPU21).
    pub fn source_switch_cycles(&self) -> u32 {
        self.source_switch_cycles
    }

    /// Cycles a receiver loses when its write pointer is set (0 on IPU21).
    pub fn pointer_switch_cycles(&self) -> u32 {
        self.pointer_switch_cycles
    }

    /// The partner whose lane a Paired64 send borrows.
    pub fn partner(&self, tile: TileId) -> TileId {
        TileId::from_u32(tile.as_u32() ^ self.partner_xor)
    }

    /// Whether send reads and incoming writes must avoid sharing a memory
    /// element in one cycle.
    pub fn memory_element_hazards(&self) -> bool {
        self.memory_element_hazards
    }

    /// The memory element holding `byte_address`, as `(region index,
    /// element index)`, if the address lies in a described region.
    pub fn memory_element(&self, byte_address: u32) -> Option<(usize, u32)> {
        self.elements
            .iter()
            .enumerate()
            .find(|(_, (start, end, _))| (*start..*end).contains(&byte_address))
            .map(|(i, (start, _, element))| (i, (byte_address - start) / element))
    }
}
