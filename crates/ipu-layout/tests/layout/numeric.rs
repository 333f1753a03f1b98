//! The FP8 codec over all 256 codes of each format, and F16 rounding.
//!
//! The encoder computes codes from f32 bits; `nearest_code` below is the
//! definition it must equal (the code whose value is nearest, ties to the
//! even code, saturating), written as a plain search over the 128 positive
//! codes. Both are monotone step functions of the magnitude, so agreeing at
//! every code value, every midpoint between neighbouring codes and the f32
//! neighbours of both pins every step; every F16 value and a large random
//! sample of f32 (every exponent, subnormals, infinities and NaN payloads
//! included) are compared as well.

use ipu_layout::numeric::{Codec, FP8_NAN, f16_bits, f16_value, pow2};
use ipu_layout::{Fp8Format, Precision};

const FORMATS: [Fp8Format; 2] = [Fp8Format::F143, Fp8Format::F152];

/// The definition of FP8 encoding: the nearest positive code by value
/// (ties to the even code, `0x7f` from the largest value up), with the sign
/// bit for negative values that do not round to zero, and `0x80` for NaN.
fn nearest_code(format: Fp8Format, value: f32) -> u8 {
    if value.is_nan() {
        return FP8_NAN;
    }
    let magnitude = f64::from(value.abs());
    let mut best = 0u8;
    if magnitude >= f64::from(format.decode(0x7f)) {
        best = 0x7f;
    } else {
        for code in 1..=0x7fu8 {
            let d = (f64::from(format.decode(code)) - magnitude).abs();
            let b = (f64::from(format.decode(best)) - magnitude).abs();
            if d < b || (d == b && code & 1 == 0) {
                best = code;
            }
        }
    }
    if best == 0 || value.is_sign_positive() {
        best
    } else {
        best | 0x80
    }
}

/// The f32 neighbours of `x` (itself, one ulp below and above).
fn around(x: f32) -> [f32; 3] {
    let b = x.to_bits();
    [
        x,
        f32::from_bits(b.wrapping_sub(1)),
        f32::from_bits(b.wrapping_add(1)),
    ]
}

fn check(format: Fp8Format, x: f32) {
    assert_eq!(
        format.encode(x),
        nearest_code(format, x),
        "{format:?} encode({x:e}) [bits {:#010x}]",
        x.to_bits()
    );
}

#[test]
fn fp8_tables_round_trip_every_code() {
    for format in FORMATS {
        for code in 0..=255u8 {
            let value = format.decode(code);
            if code == FP8_NAN {
                assert!(value.is_nan());
                assert_eq!(format.encode(value), FP8_NAN);
                continue;
            }
            assert!(value.is_finite(), "{format:?} {code:#04x}");
            // 0x00 is the only zero: 0x80 is NaN, so -0 encodes to 0x00.
            let expected = if value == 0.0 { 0x00 } else { code };
            assert_eq!(
                format.encode(value),
                expected,
                "{format:?} {code:#04x} = {value}"
            );
        }
        // Positive codes increase strictly.
        for code in 0..0x7fu8 {
            assert!(format.decode(code) < format.decode(code + 1));
        }
    }
}

#[test]
fn encoding_equals_the_nearest_code_at_every_step() {
    for format in FORMATS {
        for code in 0..0x7fu8 {
            let lo = format.decode(code);
            let hi = format.decode(code + 1);
            // The midpoint is exact in f32: both values have few bits.
            let mid = (lo + hi) / 2.0;
            for x in around(lo).into_iter().chain(around(mid)).chain(around(hi)) {
                check(format, x);
                check(format, -x);
            }
        }
        let max = format.max_value();
        for x in [max * 1.03, max * 2.0, f32::MAX, f32::INFINITY] {
            check(format, x);
            check(format, -x);
        }
        for x in [0.0, f32::from_bits(1), f32::MIN_POSITIVE, 1e-30] {
            check(format, x);
            check(format, -x);
        }
        for nan in [f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001)] {
            assert_eq!(format.encode(nan), FP8_NAN);
        }
    }
}

#[test]
fn encoding_equals_the_nearest_code_on_every_f16() {
    for format in FORMATS {
        for bits in 0..=u16::MAX {
            check(format, f16_value(bits));
        }
    }
}

#[test]
fn encoding_equals_the_nearest_code_on_random_f32() {
    // SplitMix64: any well-mixed stream will do. Half the samples are raw
    // bit patterns (every exponent, subnormals, infinities, NaN payloads),
    // half lie within a few binades of the FP8 range.
    let mut state = 0x5eed_u64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for i in 0..200_000 {
        let r = next();
        let x = if i % 2 == 0 {
            f32::from_bits(r as u32)
        } else {
            let exponent = ((r >> 32) % 46) as i32 - 27;
            let fraction = (r as u32 & 0x7f_ffff) as f32 / 8_388_608.0;
            let sign = if r >> 63 == 1 { -1.0 } else { 1.0 };
            sign * pow2(exponent) * (1.0 + fraction)
        };
        for format in FORMATS {
            check(format, x);
        }
    }
}

#[test]
fn pow2_is_exact_where_powi_is() {
    for e in -127..=128 {
        assert_eq!(pow2(e).to_bits(), 2f32.powi(e).to_bits(), "2^{e}");
    }
    assert_eq!(pow2(-149), f32::from_bits(1));
    assert_eq!(pow2(-150), 0.0);
}

#[test]
fn fp8_special_values() {
    let f143 = Fp8Format::F143;
    let f152 = Fp8Format::F152;
    assert_eq!(f143.max_value(), 240.0);
    assert_eq!(f152.max_value(), 57344.0);
    // Saturation instead of infinity.
    assert_eq!(f143.encode(1e9), 0x7f);
    assert_eq!(f143.encode(f32::INFINITY), 0x7f);
    assert_eq!(f143.encode(-1e9), 0xff);
    // Subnormals: m · 2^-10 (F143), m · 2^-17 (F152).
    assert_eq!(f143.decode(0x01), 2f32.powi(-10));
    assert_eq!(f143.decode(0x07), 7.0 * 2f32.powi(-10));
    assert_eq!(f152.decode(0x01), 2f32.powi(-17));
    // Negative values that round to zero are 0x00, never 0x80.
    assert_eq!(f143.encode(-1e-9), 0x00);
    assert_eq!(f143.encode(-0.0), 0x00);
    // Ties go to the even code: halfway between 1.0 (0x40) and 1.125 (0x41).
    assert_eq!(f143.decode(0x40), 1.0);
    assert_eq!(f143.encode(1.0625), 0x40);
    // ...and between 1.125 (0x41) and 1.25 (0x42) up to the even 0x42.
    assert_eq!(f143.encode(1.1875), 0x42);
    // The largest subnormal and the smallest normal tie to the normal.
    assert_eq!(f143.encode(7.5 * 2f32.powi(-10)), 0x08);
}

#[test]
fn scaled_fp8_and_f16_quantize() {
    let p = Precision::F8 {
        format: Fp8Format::F143,
        scale: -4,
    };
    assert_eq!(p.quantize(1.0 / 16.0), 1.0 / 16.0);
    assert_eq!(p.quantize(15.0), 15.0);
    assert_eq!(p.quantize(100.0), 15.0); // 240 · 2^-4
    assert_eq!(f16_value(f16_bits(1.0 + 1.0 / 4096.0)), 1.0);
    assert_eq!(Precision::F16.quantize(65504.0), 65504.0);
    let mut bytes = [0u8; 2];
    Precision::F16.encode_into(-2.5, &mut bytes);
    assert_eq!(Precision::F16.decode_from(&bytes), -2.5);
}

/// Scaled precisions are the format's codec on `value · 2^-scale`, element
/// by element and slice by slice.
#[test]
fn scaled_codecs_encode_the_scaled_value() {
    let mut state = 7u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    for format in FORMATS {
        for scale in [-30i8, -12, -4, 0, 5, 20, 127, -127] {
            let p = Precision::F8 { format, scale };
            let codec = Codec::new(p);
            let values: Vec<f32> = (0..2000)
                .map(|i| match i % 4 {
                    0 => f32::from_bits(next()),
                    _ => (next() as i32) as f32 * pow2(i32::from(scale) - 28),
                })
                .collect();
            let mut bytes = vec![0u8; values.len()];
            codec.encode_slice(&values, &mut bytes);
            let mut decoded = vec![0f32; values.len()];
            codec.decode_slice(&bytes, &mut decoded);
            for ((&v, &b), &d) in values.iter().zip(&bytes).zip(&decoded) {
                let scaled = v * 2f32.powi(-i32::from(scale));
                assert_eq!(b, nearest_code(format, scaled), "{p:?} {v:e}");
                let mut one = [0u8];
                p.encode_into(v, &mut one);
                assert_eq!(one[0], b);
                let value = format.decode(b) * 2f32.powi(i32::from(scale));
                assert_eq!(d.to_bits(), value.to_bits(), "{p:?} {v:e}");
                assert_eq!(p.decode_from(&[b]).to_bits(), value.to_bits());
                assert_eq!(codec.quantize(v).to_bits(), value.to_bits());
            }
        }
    }
    for p in [Precision::F32, Precision::F16] {
        let codec = p.codec();
        let values = [1.0f32, -2.5, 1e-7, 70000.0, f32::NAN];
        let width = p.element_bytes() as usize;
        let mut bytes = vec![0u8; values.len() * width];
        codec.encode_slice(&values, &mut bytes);
        for (&v, chunk) in values.iter().zip(bytes.chunks_exact(width)) {
            let mut one = vec![0u8; width];
            p.encode_into(v, &mut one);
            assert_eq!(chunk, &one[..]);
        }
    }
}

/// Every scale an `i8` holds, the extremes included: encoding is the code
/// of the exact product `v · 2^-scale` rounded once to f32 (at scale −128
/// the factor `2^128` is no f32, so zero must stay zero and small values
/// must not saturate), and decoding is exact.
#[test]
fn every_scale_encodes_the_exactly_scaled_value() {
    let mut state = 0x0dd_u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 32) as u32
    };
    for format in FORMATS {
        for scale in i8::MIN..=i8::MAX {
            let p = Precision::F8 { format, scale };
            let up = 2f64.powi(-i32::from(scale));
            let down = 2f64.powi(i32::from(scale));
            let codes = (0..=255u8).map(|c| f64::from(format.decode(c)) * down);
            let samples = (0..64)
                .map(|_| f32::from_bits(next()))
                .chain(codes.map(|v| v as f32))
                .chain([0.0, -0.0, f32::MAX, f32::INFINITY, f32::from_bits(1)]);
            for x in samples {
                let mut byte = [0u8];
                p.encode_into(x, &mut byte);
                let expected = nearest_code(format, (f64::from(x) * up) as f32);
                assert_eq!(byte[0], expected, "{p:?} encode {x:e}");
                let value = (f64::from(format.decode(byte[0])) * down) as f32;
                let decoded = p.decode_from(&byte);
                assert!(
                    decoded.to_bits() == value.to_bits() || (decoded.is_nan() && value.is_nan()),
                    "{p:?} decode {:#04x}: {decoded:e}, expected {value:e}",
                    byte[0]
                );
            }
            let mut zero = [0xffu8];
            p.encode_into(0.0, &mut zero);
            assert_eq!(zero[0], 0, "{p:?} zero");
        }
    }
}

/// The F16 slice codecs (a vector at a time) give the element codecs'
/// bytes and values: every code decodes alike, and random f32 bit patterns
/// (NaNs, infinities, subnormals, ties) and every F16 midpoint encode alike.
#[test]
fn f16_slice_codecs_are_the_element_codecs() {
    let codec = Precision::F16.codec();
    let codes: Vec<u8> = (0..=u16::MAX).flat_map(|c| c.to_le_bytes()).collect();
    let mut decoded = vec![0f32; 1 << 16];
    codec.decode_slice(&codes, &mut decoded);
    for (c, d) in codes.chunks_exact(2).zip(&decoded) {
        assert_eq!(
            d.to_bits(),
            Precision::F16.decode_from(c).to_bits(),
            "{c:?}"
        );
    }
    let mut state = 0x9e37_79b9u32;
    let mut values: Vec<f32> = (0..100_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            f32::from_bits(state)
        })
        .collect();
    // Midpoints between neighbouring F16 values: the ties.
    values.extend(decoded.windows(2).map(|w| (w[0] + w[1]) / 2.0));
    let mut bytes = vec![0u8; 2 * values.len()];
    codec.encode_slice(&values, &mut bytes);
    for (&v, chunk) in values.iter().zip(bytes.chunks_exact(2)) {
        let mut one = [0u8; 2];
        Precision::F16.encode_into(v, &mut one);
        assert_eq!(chunk, &one[..], "{v:e}");
    }
}
