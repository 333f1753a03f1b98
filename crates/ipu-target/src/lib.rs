//! The device description: every fact about an IPU target that a crate of
//! this workspace uses, as one value read from a TOML file.
//!
//! A [`Target`] is chosen once and threaded through: the placer takes its
//! memory map from it (`ipu_alloc::MemoryMap::new`), the exchange scheduler
//! its fabric (`ipu_exchange::Fabric::new`), the kernel planner its AMP
//! model (`ipu_kernels::AmpModel::new`), the package builder its tile count,
//! support-memory figures and cost model, and the tile model its SRAM. No
//! other file of the workspace writes a device fact.
//!
//! The built-in IPU21 description (`devices/ipu21.toml`, the C600 card) is
//! embedded in this crate, so every crate that needs it can be packaged on
//! its own; [`Target::from_toml`] reads any other. The file format is the
//! serde form of [`TargetSpec`]: unknown keys are refused, so that a
//! misspelt fact is an error rather than a silent default. [`Target::new`]
//! validates a spec once; every `Target` value is valid.

#![forbid(unsafe_code)]

mod spec;
mod validate;

use std::sync::OnceLock;

pub use spec::{
    AmpSpec, ClassSpec, ExchangeSpec, MemorySpec, RegionSpec, RuntimeSpec, TargetSpec, TimingSpec,
};
pub use validate::TargetError;

/// The text of the built-in IPU21 description.
pub const IPU21_TOML: &str = include_str!("../devices/ipu21.toml");

/// A validated device description.
///
/// Invariant: the spec passed validation (`validate.rs`): SRAM, regions and
/// class ranges are ordered and inside one another, every memory class has
/// ranges, there is an executable region, and every rate and size a crate
/// divides by or aligns to is positive (alignments are powers of two).
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    spec: TargetSpec,
}

impl Target {
    /// Validates `spec` and makes it a target.
    pub fn new(spec: TargetSpec) -> Result<Target, TargetError> {
        validate::validate(&spec)?;
        Ok(Target { spec })
    }

    /// Reads a description in the format of `devices/ipu21.toml`.
    pub fn from_toml(text: &str) -> Result<Target, TargetError> {
        let spec: TargetSpec = toml::from_str(text).map_err(|e| TargetError::Toml {
            message: e.message().to_owned(),
            span: e.span(),
        })?;
        Target::new(spec)
    }

    /// Reads a description from a file.
    pub fn from_file(path: &std::path::Path) -> Result<Target, TargetError> {
        let text = std::fs::read_to_string(path).map_err(|source| TargetError::Read {
            path: path.to_owned(),
            source,
        })?;
        Target::from_toml(&text)
    }

    /// The built-in IPU21 description (C600: 1472 tiles, 624 KiB each).
    ///
    /// # Panics
    ///
    /// Never: the description is embedded at build time and a test reads
    /// it, so a failure here is a build defect, reported as such.
    pub fn ipu21() -> &'static Target {
        static IPU21: OnceLock<Target> = OnceLock::new();
        IPU21.get_or_init(|| match Target::from_toml(IPU21_TOML) {
            Ok(target) => target,
            Err(e) => panic!("bug: the embedded devices/ipu21.toml is invalid: {e}"),
        })
    }

    /// The whole description.
    pub fn spec(&self) -> &TargetSpec {
        &self.spec
    }

    /// The target's name (`ipu21`).
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Tiles on the device.
    pub fn tile_count(&self) -> u32 {
        self.spec.tile_count
    }

    /// Worker contexts per tile.
    pub fn worker_contexts(&self) -> u32 {
        self.spec.worker_contexts
    }

    /// Tile clock in Hz.
    pub fn clock_hz(&self) -> u64 {
        self.spec.clock_hz
    }

    /// Tile memory.
    pub fn memory(&self) -> &MemorySpec {
        &self.spec.memory
    }

    /// The exchange fabric.
    pub fn exchange(&self) -> &ExchangeSpec {
        &self.spec.exchange
    }

    /// The AMP unit and the GEMM kernels' cost figures.
    pub fn amp(&self) -> &AmpSpec {
        &self.spec.amp
    }

    /// Support memory of the runtime.
    pub fn runtime(&self) -> &RuntimeSpec {
        &self.spec.runtime
    }

    /// Cycle figures for steps and vector work.
    pub fn timing(&self) -> &TimingSpec {
        &self.spec.timing
    }

    /// Usable bytes of one tile: SRAM below the loader limit.
    pub fn usable_bytes(&self) -> u32 {
        // Validated: sram_start < loader_limit.
        self.spec.memory.loader_limit - self.spec.memory.sram_start
    }

    /// The first executable region: where support memory (runtime, code,
    /// exchange rows) is reserved.
    pub fn code_region(&self) -> &RegionSpec {
        // Validated: at least one region is executable.
        self.spec
            .memory
            .regions
            .iter()
            .find(|r| r.executable)
            .unwrap_or(&self.spec.memory.regions[0])
    }

    /// The description as TOML text (the serde form of [`TargetSpec`]),
    /// which [`Target::from_toml`] reads back to an equal target.
    pub fn to_toml(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        toml::to_string(&self.spec).unwrap_or_default()
    }
}
