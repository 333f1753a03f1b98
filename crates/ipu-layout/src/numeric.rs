//! Element encodings: the IPU21 FP8 codec and F16 conversions.
//!
//! Every crate that turns numbers into tile bytes (kernels, the package's
//! weight images and generated values, the simulator, the reference
//! evaluator) needs the same encodings, so they live beside [`Precision`],
//! and there is no other implementation of them in the workspace.
//!
//! FP8 (Noune et al. 2022; LLVM `Float8E4M3FNUZ` / `Float8E5M2FNUZ`): no
//! infinities, a single NaN `0x80`, unsigned zero `0x00`. Encoding rounds to
//! nearest, ties to even, saturates at the largest finite value, sends NaN to
//! `0x80`, and encodes negative values that round to zero as `0x00`.
//!
//! The definition of encoding is the nearest code by value: among the
//! positive codes (which decode to increasing values) the one closest to the
//! magnitude, the even code on a tie, `0x7f` from the largest value up. The
//! encoder computes that code from the f32 bits instead of searching for it:
//! normal FP8 values are the f32 significand rounded to the FP8 mantissa
//! width (a carry correctly moves into the exponent, and FP8's exponent field
//! is the f32 exponent rebiased), subnormal ones a multiple of the smallest
//! step rounded by the FPU's own ties-to-even addition. The layout crate's
//! tests hold it to the search over every F16 value, every code, every
//! midpoint and its neighbours, and a large random sample of f32.
//!
//! [`Codec`] is a precision with its scale resolved once, for encoding and
//! decoding whole slices; [`Precision::encode_into`], `decode_from` and
//! `quantize` are the same functions one element at a time.

use crate::{Fp8Format, Precision};
use half::slice::HalfFloatSliceExt;

/// The only FP8 NaN code.
pub const FP8_NAN: u8 = 0x80;

/// `2^e` as an f32, exact wherever it is representable (down to the
/// smallest subnormal, `2^-149`), `0` below that and infinity above
/// `2^127`.
pub const fn pow2(e: i32) -> f32 {
    if e > 127 {
        f32::INFINITY
    } else if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else if e >= -149 {
        f32::from_bits(1u32 << (e + 149))
    } else {
        0.0
    }
}

/// `2^e` as an f64 for the exponents an FP8 scale can give (exact from
/// `2^-1022` to `2^1023`).
const fn pow2_f64(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// The value of every code of a format (before the tensor's scale).
const fn decode_table(bias: i32, mantissa_bits: u32) -> [f32; 256] {
    let mut table = [0.0f32; 256];
    let mut code = 0usize;
    while code < 256 {
        let magnitude = (code & 0x7f) as u32;
        let exponent = (magnitude >> mantissa_bits) as i32;
        let mantissa = magnitude & ((1 << mantissa_bits) - 1);
        // Both forms are exact: a small integer times a power of two.
        let value = if exponent == 0 {
            mantissa as f32 * pow2(1 - bias - mantissa_bits as i32)
        } else {
            ((1 << mantissa_bits) + mantissa) as f32 * pow2(exponent - bias - mantissa_bits as i32)
        };
        table[code] = if code == FP8_NAN as usize {
            f32::NAN
        } else if code & 0x80 != 0 {
            -value
        } else {
            value
        };
        code += 1;
    }
    table
}

const F143_VALUES: [f32; 256] = decode_table(8, 3);
const F152_VALUES: [f32; 256] = decode_table(16, 2);

/// 2^23: adding and subtracting it rounds a smaller non-negative f32 to an
/// integer, ties to even (IEEE default rounding, which Rust guarantees).
const ROUND_TO_INTEGER: f32 = 8_388_608.0;

impl Fp8Format {
    /// Exponent bias and mantissa bits.
    const fn params(self) -> (i32, u32) {
        match self {
            Fp8Format::F143 => (8, 3),
            Fp8Format::F152 => (16, 2),
        }
    }

    /// The values of all 256 codes.
    const fn values(self) -> &'static [f32; 256] {
        match self {
            Fp8Format::F143 => &F143_VALUES,
            Fp8Format::F152 => &F152_VALUES,
        }
    }

    /// The largest finite value: 240 for F143, 57344 for F152.
    pub fn max_value(self) -> f32 {
        self.decode(0x7f)
    }

    /// The value of `code` (before the tensor's scale).
    pub fn decode(self, code: u8) -> f32 {
        self.values()[usize::from(code)]
    }

    /// The code nearest to `value` (ties to even, saturating).
    #[inline]
    pub fn encode(self, value: f32) -> u8 {
        let (bias, mantissa_bits) = self.params();
        let bits = value.to_bits();
        let magnitude = bits & 0x7fff_ffff;
        if magnitude > 0x7f80_0000 {
            return FP8_NAN;
        }
        let sign = ((bits >> 24) & 0x80) as u8;
        if magnitude >= self.max_value().to_bits() {
            return 0x7f | sign;
        }
        // The smallest normal FP8 value, 2^(1 - bias), as f32 bits.
        let min_normal = ((128 - bias) as u32) << 23;
        let code = if magnitude >= min_normal {
            // Round the f32 significand to `mantissa_bits`, ties to even;
            // the f32 exponent field minus (127 - bias) is FP8's. Below the
            // largest value the result stays at most 0x7f.
            let shift = 23 - mantissa_bits;
            let lsb = (magnitude >> shift) & 1;
            let rounded = magnitude + (1 << (shift - 1)) - 1 + lsb;
            (rounded >> shift) - (((127 - bias) as u32) << mantissa_bits)
        } else {
            // Subnormal: a multiple of 2^(1 - bias - mantissa_bits). The
            // scaling is exact (a power of two, upwards), the step count is
            // below 2^mantissa_bits + 1, and rounding up to it yields the
            // smallest normal code, as it should.
            let steps = f32::from_bits(magnitude) * pow2(bias - 1 + mantissa_bits as i32);
            ((steps + ROUND_TO_INTEGER) - ROUND_TO_INTEGER) as u32
        };
        let code = code as u8;
        // Negative values that round to zero are 0x00: 0x80 is NaN.
        if code == 0 { 0 } else { code | sign }
    }
}

/// Encodes `value` as IEEE binary16 bits, rounding to nearest even.
pub fn f16_bits(value: f32) -> u16 {
    half::f16::from_f32(value).to_bits()
}

/// Elements the slice codecs convert at a time through a stack buffer.
const SLICE_CHUNK: usize = 64;

/// Decodes IEEE binary16 bits.
pub fn f16_value(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// A precision's element codec with its scale resolved: what
/// [`Precision::encode_into`], [`Precision::decode_from`] and
/// [`Precision::quantize`] do, also for whole slices. An FP8 value `v` is
/// stored as the code of `v · 2^-scale` (the exact product rounded once to
/// f32) and read back as the code's value times `2^scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Codec {
    precision: Precision,
    /// FP8: `2^-scale`, applied before encoding. It is an f64 because
    /// `2^128` (scale −128) is no f32; an f32 times a power of two is exact
    /// in f64, so the one rounding to f32 gives the f32 product wherever
    /// the factor is an f32.
    to_code: f64,
    /// FP8: `2^scale`, applied after decoding.
    from_code: f32,
}

impl Codec {
    /// The codec of `precision`.
    pub const fn new(precision: Precision) -> Self {
        let (to_code, from_code) = match precision {
            Precision::F8 { scale, .. } => (pow2_f64(-(scale as i32)), pow2(scale as i32)),
            _ => (1.0, 1.0),
        };
        Codec {
            precision,
            to_code,
            from_code,
        }
    }

    /// The precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// `value · 2^-scale`, rounded once to f32.
    #[inline]
    fn scaled(&self, value: f32) -> f32 {
        (f64::from(value) * self.to_code) as f32
    }

    /// The FP8 code of `value`; `0` for F32 and F16, which have no code.
    #[inline]
    pub fn fp8_code(&self, value: f32) -> u8 {
        match self.precision {
            Precision::F8 { format, .. } => format.encode(self.scaled(value)),
            _ => 0,
        }
    }

    /// Writes `value` into `out` (little endian), which must be
    /// [`Precision::element_bytes`] long.
    #[inline]
    pub fn encode_into(&self, value: f32, out: &mut [u8]) {
        match self.precision {
            Precision::F32 => out.copy_from_slice(&value.to_le_bytes()),
            Precision::F16 => out.copy_from_slice(&f16_bits(value).to_le_bytes()),
            Precision::F8 { format, .. } => out[0] = format.encode(self.scaled(value)),
        }
    }

    /// Reads a value from `bytes` (little endian), which must be
    /// [`Precision::element_bytes`] long.
    #[inline]
    pub fn decode_from(&self, bytes: &[u8]) -> f32 {
        match self.precision {
            Precision::F32 => f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            Precision::F16 => f16_value(u16::from_le_bytes([bytes[0], bytes[1]])),
            Precision::F8 { format, .. } => format.decode(bytes[0]) * self.from_code,
        }
    }

    /// `value` rounded to the precision.
    #[inline]
    pub fn quantize(&self, value: f32) -> f32 {
        match self.precision {
            Precision::F32 => value,
            Precision::F16 => f16_value(f16_bits(value)),
            Precision::F8 { format, .. } => {
                format.decode(format.encode(self.scaled(value))) * self.from_code
            }
        }
    }

    /// Encodes `values` into `out`, element by element as
    /// [`Codec::encode_into`]; `out` must hold exactly
    /// `values.len() × element bytes`.
    pub fn encode_slice(&self, values: &[f32], out: &mut [u8]) {
        debug_assert_eq!(
            out.len() as u64,
            values.len() as u64 * self.precision.element_bytes()
        );
        match self.precision {
            Precision::F32 => {
                for (o, v) in out.chunks_exact_mut(4).zip(values) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            Precision::F16 => {
                // The slice conversion rounds as `f16_bits` does, a vector
                // at a time where the host has F16C.
                let mut halves = [half::f16::ZERO; SLICE_CHUNK];
                for (values, out) in values
                    .chunks(SLICE_CHUNK)
                    .zip(out.chunks_mut(2 * SLICE_CHUNK))
                {
                    let halves = &mut halves[..values.len()];
                    halves.convert_from_f32_slice(values);
                    for (o, h) in out.chunks_exact_mut(2).zip(halves.iter()) {
                        o.copy_from_slice(&h.to_bits().to_le_bytes());
                    }
                }
            }
            Precision::F8 { format, .. } => {
                for (o, &v) in out.iter_mut().zip(values) {
                    *o = format.encode(self.scaled(v));
                }
            }
        }
    }

    /// Decodes `bytes` into `out`, element by element as
    /// [`Codec::decode_from`]; `bytes` must hold exactly
    /// `out.len() × element bytes`.
    pub fn decode_slice(&self, bytes: &[u8], out: &mut [f32]) {
        debug_assert_eq!(
            bytes.len() as u64,
            out.len() as u64 * self.precision.element_bytes()
        );
        match self.precision {
            Precision::F32 => {
                for (v, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            Precision::F16 => {
                let mut halves = [half::f16::ZERO; SLICE_CHUNK];
                for (out, bytes) in out
                    .chunks_mut(SLICE_CHUNK)
                    .zip(bytes.chunks(2 * SLICE_CHUNK))
                {
                    let halves = &mut halves[..out.len()];
                    for (h, b) in halves.iter_mut().zip(bytes.chunks_exact(2)) {
                        *h = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
                    }
                    halves.convert_to_f32_slice(out);
                }
            }
            Precision::F8 { format, .. } => {
                let table = format.values();
                for (v, &b) in out.iter_mut().zip(bytes) {
                    *v = table[usize::from(b)] * self.from_code;
                }
            }
        }
    }
}

impl Precision {
    /// This precision's [`Codec`].
    pub const fn codec(self) -> Codec {
        Codec::new(self)
    }

    /// Writes `value` in this precision into `out` (little endian), which
    /// must be [`Precision::element_bytes`] long.
    pub fn encode_into(self, value: f32, out: &mut [u8]) {
        self.codec().encode_into(value, out);
    }

    /// Reads a value in this precision from `bytes` (little endian), which
    /// must be [`Precision::element_bytes`] long.
    pub fn decode_from(self, bytes: &[u8]) -> f32 {
        self.codec().decode_from(bytes)
    }

    /// `value` rounded to this precision.
    pub fn quantize(self, value: f32) -> f32 {
        self.codec().quantize(value)
    }
}
