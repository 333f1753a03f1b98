//! The FP8 codec over all 256 codes of each format, and F16 rounding.

use ipu_layout::numeric::{FP8_NAN, f16_bits, f16_value};
use ipu_layout::{Fp8Format, Precision};

#[test]
fn fp8_tables_round_trip_every_code() {
    for format in [Fp8Format::F143, Fp8Format::F152] {
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
