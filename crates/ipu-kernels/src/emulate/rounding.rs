//! The roundings of the emulator's arithmetic: to F16 and F32 partials,
//! ties to even or stochastic with a seeded generator, and the canonical
//! NaN partials are stored as. They are kept apart from the loops that use
//! them so that the plain reference emulator (tests only) shares exactly
//! these definitions.

use crate::WorkerId;

/// The f32 a partial is stored as: the partial itself (already a value of
/// the output precision), or the canonical quiet NaN, so that stored bytes
/// never depend on which NaN the host's arithmetic happened to propagate
/// (Rust leaves NaN sign and payload unspecified).
pub(super) fn stored(partial: f64) -> f32 {
    if partial.is_nan() {
        f32::NAN
    } else {
        partial as f32
    }
}

/// `x` rounded to the nearest F16, ties to even, overflowing to ±infinity.
///
/// This is the emulator's innermost operation, so it works on the f64 bits
/// directly. (It does not use `half::f16::from_f64`, which misrounds some
/// values whose deciding bits lie in the low word of the f64: it sends
/// 2^-25 (1 + 2^-52), just above the tie between 0 and 2^-24, to 0.)
pub fn round_f16(x: f64) -> f64 {
    /// The smallest normal F16, 2^-14.
    const MIN_NORMAL: f64 = 6.103_515_625e-5;
    /// Halfway between the largest F16 (65504) and 65536: ties go to the
    /// even 65536, which overflows.
    const OVERFLOW: f64 = 65520.0;
    let a = x.abs();
    if a.is_nan() {
        return x;
    }
    if a >= OVERFLOW {
        return f64::INFINITY.copysign(x);
    }
    if a < MIN_NORMAL {
        // Subnormal F16s are the multiples of 2^-24; scaling by a power of
        // two is exact.
        return (x * 16_777_216.0).round_ties_even() / 16_777_216.0;
    }
    round_f16_significand(x)
}

/// `x` with its significand rounded to F16's 11 bits, ties to even: the
/// nearest F16 of a finite `x` whose magnitude is below 65520 and which is
/// either a normal F16 magnitude or on the grid of multiples of 2^-24
/// (an F16 subnormal, whose low 42 bits are zero, stays as it is). A carry
/// correctly moves into the exponent.
#[inline(always)]
pub(super) fn round_f16_significand(x: f64) -> f64 {
    let bits = x.to_bits();
    let lsb = (bits >> F16_DROPPED_BITS) & 1;
    let half = (1u64 << (F16_DROPPED_BITS - 1)) - 1;
    let rounded = (bits + half + lsb) & !((1u64 << F16_DROPPED_BITS) - 1);
    f64::from_bits(rounded)
}

/// The low significand bits of an f64 that F16 does not keep (52 − 10).
pub(super) const F16_DROPPED_BITS: u32 = 42;

/// [`round_f16`] of an `x` that lies on the grid of multiples of 2^-24
/// (every exact sum of F16 values does): such an `x` below the smallest
/// normal F16 is already a subnormal F16, which the bit rounding leaves
/// unchanged (its low 42 mantissa bits are zero), so the subnormal branch
/// is not needed. The same result as [`round_f16`] on those values, with
/// one branch fewer in the emulator's innermost update.
pub(super) fn round_f16_on_grid(x: f64) -> f64 {
    const OVERFLOW: f64 = 65520.0;
    let a = x.abs();
    if a.is_nan() {
        return x;
    }
    if a >= OVERFLOW {
        return f64::INFINITY.copysign(x);
    }
    round_f16_significand(x)
}

/// `x` rounded to the nearest F32, ties to even.
pub fn round_f32(x: f64) -> f64 {
    f64::from(x as f32)
}

/// A uniform value in `[0, 1)` from the seed and the update's position
/// (splitmix64 over a mix of the inputs).
pub(super) fn unit_random(seed: u64, worker: WorkerId, row: u64, column: u64, step: u64) -> f64 {
    let mut z = seed
        ^ u64::from(worker.as_u32()).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ row.wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ column.wrapping_mul(0x94D0_49BB_1331_11EB)
        ^ step.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Rounds `x` to one of its two neighbouring F16 values, up with probability
/// equal to the distance from the lower one (in units of the gap).
pub(super) fn stochastic_f16(x: f64, u: f64) -> f64 {
    let n = round_f16(x);
    // `n` is an F16 value (or infinite), so this conversion is exact.
    let nearest = half::f16::from_f64(n);
    if n == x || !x.is_finite() || !n.is_finite() {
        return n;
    }
    let (lo, hi) = if n < x {
        (n, next_f16(nearest, true).to_f64())
    } else {
        (next_f16(nearest, false).to_f64(), n)
    };
    if !lo.is_finite() || !hi.is_finite() {
        return n;
    }
    let fraction = (x - lo) / (hi - lo);
    if u < fraction { hi } else { lo }
}

/// The F16 value next to `v` upwards or downwards.
fn next_f16(v: half::f16, up: bool) -> half::f16 {
    let bits = v.to_bits();
    let negative = bits & 0x8000 != 0;
    let magnitude = bits & 0x7fff;
    let next = if magnitude == 0 {
        if up { 0x0001 } else { 0x8001 }
    } else if up != negative {
        bits + 1
    } else {
        bits - 1
    };
    half::f16::from_bits(next)
}

/// Stochastic rounding to F32 (as [`stochastic_f16`]).
pub(super) fn stochastic_f32(x: f64, u: f64) -> f64 {
    let nearest = x as f32;
    let n = f64::from(nearest);
    if n == x || !x.is_finite() || !n.is_finite() {
        return n;
    }
    let (lo, hi) = if n < x {
        (n, f64::from(next_f32(nearest, true)))
    } else {
        (f64::from(next_f32(nearest, false)), n)
    };
    if !lo.is_finite() || !hi.is_finite() {
        return n;
    }
    if u < (x - lo) / (hi - lo) { hi } else { lo }
}

fn next_f32(v: f32, up: bool) -> f32 {
    let bits = v.to_bits();
    let negative = bits & 0x8000_0000 != 0;
    let magnitude = bits & 0x7fff_ffff;
    let next = if magnitude == 0 {
        if up { 1 } else { 0x8000_0001 }
    } else if up != negative {
        bits + 1
    } else {
        bits - 1
    };
    f32::from_bits(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the 2^-24 grid, the branch-saving rounding is `round_f16`.
    #[test]
    fn rounding_on_the_grid_is_round_f16() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut values = vec![
            0.0,
            -0.0,
            65504.0,
            65519.0,
            65520.0,
            -65520.0,
            f64::INFINITY,
        ];
        for m in -5000i64..5000 {
            values.push(m as f64 / 16_777_216.0);
        }
        for _ in 0..200_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Multiples of 2^-24 below 2^21 in magnitude, spread over
            // every binade.
            let m = (state >> 20) as i64 >> ((state >> 8) % 44);
            values.push(m as f64 / 16_777_216.0);
        }
        for x in values {
            assert_eq!(
                round_f16_on_grid(x).to_bits(),
                round_f16(x).to_bits(),
                "{x}"
            );
        }
        assert!(round_f16_on_grid(f64::NAN).is_nan());
    }
}
