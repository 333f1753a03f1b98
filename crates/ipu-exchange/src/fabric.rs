//! The exchange fabric's timing model, read from the device description.
//!
//! Timing is data so that another target is a new TOML file, not a code
//! change: [`Fabric::ipu21`] parses the `[exchange]` and `[memory]` sections
//! of `device/ipu21.toml`, which is embedded at build time.

use ipu_layout::TileId;

/// The device description this crate models by default.
const IPU21_TOML: &str = include_str!("../../../device/ipu21.toml");

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

/// Why a device description could not be turned into a [`Fabric`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// The text is not valid TOML.
    #[error("the device description is not valid TOML: {message}")]
    Toml {
        /// The parser's message.
        message: String,
    },
    /// A key is missing or has the wrong type.
    #[error("the device description lacks `{key}` (or it has the wrong type); add it")]
    Missing {
        /// The dotted key.
        key: &'static str,
    },
    /// A value is outside what the model supports.
    #[error(
        "the device description sets `{key}` = {value}, which the model does not support: {why}"
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
    /// The IPU21 fabric (C600: 1472 tiles), from the embedded
    /// `device/ipu21.toml`.
    pub fn ipu21() -> Result<Fabric, FabricError> {
        Fabric::from_toml(IPU21_TOML)
    }

    /// A fabric from a device description in the format of
    /// `device/ipu21.toml` (top-level `tile_count`, `[exchange]` and
    /// `[memory]` sections).
    pub fn from_toml(text: &str) -> Result<Fabric, FabricError> {
        let value: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| FabricError::Toml {
                message: e.to_string(),
            })?;
        let int =
            |table: &toml::Table, name: &str, key: &'static str| -> Result<i64, FabricError> {
                table
                    .get(name)
                    .and_then(toml::Value::as_integer)
                    .ok_or(FabricError::Missing { key })
            };
        let small = |v: i64, key: &'static str, max: i64, why: &'static str| {
            if (0..=max).contains(&v) {
                Ok(v as u32)
            } else {
                Err(FabricError::Unsupported { key, value: v, why })
            }
        };
        let tile_count = small(
            int(&value, "tile_count", "tile_count")?,
            "tile_count",
            i64::from(crate::model::MAX_TILES),
            "XPIC values name at most 8192 tiles",
        )?;
        let exchange = value
            .get("exchange")
            .and_then(toml::Value::as_table)
            .ok_or(FabricError::Missing { key: "exchange" })?;
        let latency_cycles = small(
            int(exchange, "latency_cycles", "exchange.latency_cycles")?,
            "exchange.latency_cycles",
            1 << 16,
            "latency must be between 0 and 65536 cycles",
        )?;
        let source_switch_cycles = small(
            int(
                exchange,
                "source_switch_cycles",
                "exchange.source_switch_cycles",
            )?,
            "exchange.source_switch_cycles",
            0,
            "the scheduler models switches that take effect at their issue cycle (0)",
        )?;
        let pointer_switch_cycles = small(
            int(
                exchange,
                "pointer_switch_cycles",
                "exchange.pointer_switch_cycles",
            )?,
            "exchange.pointer_switch_cycles",
            0,
            "the scheduler models switches that take effect at their issue cycle (0)",
        )?;
        let partner_xor = int(exchange, "partner_xor", "exchange.partner_xor")?;
        if partner_xor != 2 {
            return Err(FabricError::Unsupported {
                key: "exchange.partner_xor",
                value: partner_xor,
                why: "the pairing model is tile ^ 2",
            });
        }
        let memory_element_hazards = exchange
            .get("memory_element_hazards")
            .and_then(toml::Value::as_bool)
            .ok_or(FabricError::Missing {
                key: "exchange.memory_element_hazards",
            })?;
        let regions = value
            .get("memory")
            .and_then(|m| m.get("regions"))
            .and_then(toml::Value::as_array)
            .ok_or(FabricError::Missing {
                key: "memory.regions",
            })?;
        let mut elements = Vec::new();
        for region in regions {
            let table = region.as_table().ok_or(FabricError::Missing {
                key: "memory.regions",
            })?;
            let get = |name: &str, key: &'static str| {
                let v = int(table, name, key)?;
                u32::try_from(v).map_err(|_| FabricError::Unsupported {
                    key,
                    value: v,
                    why: "must fit 32 bits",
                })
            };
            let start = get("start", "memory.regions.start")?;
            let end = get("end", "memory.regions.end")?;
            let element = get("element_bytes", "memory.regions.element_bytes")?;
            if element == 0 || end < start {
                return Err(FabricError::Unsupported {
                    key: "memory.regions.element_bytes",
                    value: i64::from(element),
                    why: "elements must be non-empty and regions ordered",
                });
            }
            elements.push((start, end, element));
        }
        Ok(Fabric {
            tile_count,
            latency_cycles,
            source_switch_cycles,
            pointer_switch_cycles,
            partner_xor: 2,
            memory_element_hazards,
            elements,
        })
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
