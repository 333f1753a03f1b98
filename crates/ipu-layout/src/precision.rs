//! Element precisions and memory classes.
//!
//! A precision fixes how many bytes an element takes and, for FP8, which of
//! the two IPU21 formats it uses and the tensor's power-of-two scale
//! (value = q · 2^scale). A memory class says which SRAM ranges a shard may
//! live in; the ranges themselves belong to the memory map in `ipu-alloc`.

use serde::{Deserialize, Serialize};

/// The two FP8 formats of IPU21 (Noune et al. 2022).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Fp8Format {
    /// 1 sign, 4 exponent, 3 mantissa bits, bias 8, largest value 240.
    F143,
    /// 1 sign, 5 exponent, 2 mantissa bits, bias 16, largest value 57344.
    F152,
}

/// The precision of a tensor's elements.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Precision {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// FP8 with a per-tensor power-of-two scale: value = q · 2^scale.
    F8 {
        /// Which FP8 encoding the bytes use.
        format: Fp8Format,
        /// The power of two every decoded value is multiplied by.
        scale: i8,
    },
}

impl Precision {
    /// Bytes one element occupies.
    pub const fn element_bytes(self) -> u64 {
        match self {
            Precision::F32 => 4,
            Precision::F16 => 2,
            Precision::F8 { .. } => 1,
        }
    }

    /// Columns in one AMP panel: the AMP unit consumes 64 bytes of a row at a
    /// time as 16 F16, 32 FP8 or 8 F32 values.
    pub const fn amp_panel_columns(self) -> u64 {
        match self {
            Precision::F32 => 8,
            Precision::F16 => 16,
            Precision::F8 { .. } => 32,
        }
    }

    /// The largest finite value: F32's, 65504 for F16, and for FP8 its
    /// format's largest code times the scale (what a cast saturates at).
    pub fn max_value(self) -> f64 {
        match self {
            Precision::F32 => f64::from(f32::MAX),
            Precision::F16 => 65504.0,
            Precision::F8 { format, scale } => {
                f64::from(format.max_value()) * 2f64.powi(i32::from(scale))
            }
        }
    }

    /// Whether this is one of the FP8 precisions.
    pub const fn is_fp8(self) -> bool {
        matches!(self, Precision::F8 { .. })
    }
}

impl std::fmt::Debug for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Precision::F32 => f.write_str("F32"),
            Precision::F16 => f.write_str("F16"),
            Precision::F8 { format, scale } => write!(f, "F8({format:?}, scale={scale})"),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// Where in tile SRAM a shard may live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MemoryClass {
    /// Ordinary data: either region of tile memory.
    Ipu21Standard,
    /// Operands streamed by 128-bit loads (AMP weights): region 1 only,
    /// where memory is interleaved with factor 2.
    Ipu21Interleaved,
}

impl MemoryClass {
    /// Every class, in a fixed order (for per-class tables).
    pub const ALL: [MemoryClass; 2] = [MemoryClass::Ipu21Standard, MemoryClass::Ipu21Interleaved];

    /// The position of this class in [`MemoryClass::ALL`].
    pub const fn index(self) -> usize {
        match self {
            MemoryClass::Ipu21Standard => 0,
            MemoryClass::Ipu21Interleaved => 1,
        }
    }
}

impl std::fmt::Display for MemoryClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}
