//! Element encodings: the IPU21 FP8 codec and F16 conversions.
//!
//! Every crate that turns numbers into tile bytes (kernels, the package's
//! weight images, the simulator, the reference evaluator) needs the same
//! encodings, so they live beside [`Precision`].
//!
//! FP8 (Noune et al. 2022; LLVM `Float8E4M3FNUZ` / `Float8E5M2FNUZ`): no
//! infinities, a single NaN `0x80`, unsigned zero `0x00`. Encoding rounds to
//! nearest, ties to even, saturates at the largest finite value, sends NaN to
//! `0x80`, and encodes negative values that round to zero as `0x00`.

use crate::{Fp8Format, Precision};

/// The only FP8 NaN code.
pub const FP8_NAN: u8 = 0x80;

impl Fp8Format {
    /// Exponent bias and mantissa bits.
    const fn params(self) -> (i32, u32) {
        match self {
            Fp8Format::F143 => (8, 3),
            Fp8Format::F152 => (16, 2),
        }
    }

    /// The largest finite value: 240 for F143, 57344 for F152.
    pub fn max_value(self) -> f32 {
        self.decode(0x7f)
    }

    /// The value of `code` (before the tensor's scale).
    pub fn decode(self, code: u8) -> f32 {
        if code == FP8_NAN {
            return f32::NAN;
        }
        let (bias, mantissa_bits) = self.params();
        let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
        let magnitude = code & 0x7f;
        let exponent = i32::from(magnitude >> mantissa_bits);
        let mantissa = f32::from(magnitude & ((1 << mantissa_bits) - 1));
        let unit = (1u32 << mantissa_bits) as f32;
        let value = if exponent == 0 {
            // Subnormal: m · 2^(1 - bias - mantissa_bits).
            mantissa / unit * 2f32.powi(1 - bias)
        } else {
            (1.0 + mantissa / unit) * 2f32.powi(exponent - bias)
        };
        sign * value
    }

    /// The code nearest to `value` (ties to even, saturating).
    pub fn encode(self, value: f32) -> u8 {
        if value.is_nan() {
            return FP8_NAN;
        }
        let magnitude = value.abs();
        // Positive codes 0x00..=0x7f decode to increasing values, so the
        // nearest is found by bisection over them.
        let (mut lo, mut hi) = (0u8, 0x7fu8);
        if magnitude >= self.decode(hi) {
            lo = hi;
        } else {
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if self.decode(mid) <= magnitude {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let below = magnitude - self.decode(lo);
            let above = self.decode(hi) - magnitude;
            if above < below || (above == below && hi & 1 == 0) {
                lo = hi;
            }
        }
        if lo == 0 || value.is_sign_positive() {
            lo
        } else {
            lo | 0x80
        }
    }
}

/// Encodes `value` as IEEE binary16 bits, rounding to nearest even.
pub fn f16_bits(value: f32) -> u16 {
    half::f16::from_f32(value).to_bits()
}

/// Decodes IEEE binary16 bits.
pub fn f16_value(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

impl Precision {
    /// Writes `value` in this precision into `out` (little endian), which
    /// must be [`Precision::element_bytes`] long.
    pub fn encode_into(self, value: f32, out: &mut [u8]) {
        match self {
            Precision::F32 => out.copy_from_slice(&value.to_le_bytes()),
            Precision::F16 => out.copy_from_slice(&f16_bits(value).to_le_bytes()),
            Precision::F8 { format, scale } => {
                out[0] = format.encode(value * 2f32.powi(-i32::from(scale)));
            }
        }
    }

    /// Reads a value in this precision from `bytes` (little endian), which
    /// must be [`Precision::element_bytes`] long.
    pub fn decode_from(self, bytes: &[u8]) -> f32 {
        match self {
            Precision::F32 => f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            Precision::F16 => f16_value(u16::from_le_bytes([bytes[0], bytes[1]])),
            Precision::F8 { format, scale } => {
                format.decode(bytes[0]) * 2f32.powi(i32::from(scale))
            }
        }
    }

    /// `value` rounded to this precision.
    pub fn quantize(self, value: f32) -> f32 {
        let mut buffer = [0u8; 4];
        let bytes = &mut buffer[..self.element_bytes() as usize];
        self.encode_into(value, bytes);
        self.decode_from(bytes)
    }
}
