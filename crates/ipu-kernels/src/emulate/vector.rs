//! Eight f64 lanes on the host's vector extensions, for the lane kernels
//! (`lanes.rs`, `half.rs`): one AVX-512 register, two AVX2 registers, or plain arrays
//! on the baseline instruction set. The crate is compiled for the
//! baseline, where the kernel's eight-wide arithmetic takes four times the
//! instructions it takes with AVX-512; [`dispatch`] picks the widest set
//! the host has when the kernel runs, through `pulp`'s safe interface.
//!
//! Every operation here is IEEE arithmetic on each lane, so all three
//! give the same bits, except [`Eight::mul_add`], which may round once or
//! twice: the kernel uses it only where the product is exact.

use super::rounding::F16_DROPPED_BITS;

/// Eight f64 lanes (`F`) and eight u64 lanes (`U`) of one instruction
/// set. Every method is always inlined, so that it takes the instruction
/// set of the function it is compiled into.
pub(super) trait Eight: Copy {
    type F: Copy;
    type U: Copy;

    fn load(self, values: &[f64; 8]) -> Self::F;
    fn store(self, values: Self::F) -> [f64; 8];
    fn splat(self, value: f64) -> Self::F;
    fn splat_u(self, value: u64) -> Self::U;
    /// `a × b + c`, rounded once or twice.
    fn mul_add(self, a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    fn add(self, a: Self::F, b: Self::F) -> Self::F;
    fn sub(self, a: Self::F, b: Self::F) -> Self::F;
    fn mul(self, a: Self::F, b: Self::F) -> Self::F;
    fn add_u(self, a: Self::U, b: Self::U) -> Self::U;
    fn sub_u(self, a: Self::U, b: Self::U) -> Self::U;
    fn and_u(self, a: Self::U, b: Self::U) -> Self::U;
    fn or_u(self, a: Self::U, b: Self::U) -> Self::U;
    /// The larger of each pair of lanes; neither may be NaN.
    fn max(self, a: Self::F, b: Self::F) -> Self::F;
    /// Each lane shifted right by [`F16_DROPPED_BITS`].
    fn shr_dropped(self, a: Self::U) -> Self::U;
    fn bits(self, a: Self::F) -> Self::U;
    fn with_bits(self, a: Self::U) -> Self::F;

    /// `round_f16_significand` on each lane: the significand rounded to
    /// F16's 11 bits, ties to even, on the bits.
    #[inline(always)]
    fn round_f16_significand(self, x: Self::F) -> Self::F {
        let bits = self.bits(x);
        let lsb = self.and_u(self.shr_dropped(bits), self.splat_u(1));
        let half = self.splat_u((1u64 << (F16_DROPPED_BITS - 1)) - 1);
        let keep = self.splat_u(!((1u64 << F16_DROPPED_BITS) - 1));
        self.with_bits(self.and_u(self.add_u(self.add_u(bits, half), lsb), keep))
    }

    /// `round_f16` on each lane of finite `x` below 65520 in magnitude:
    /// the nearest F16, ties to even, subnormals and signed zeros
    /// included.
    ///
    /// Adding `C = 1.5 · 2^(e+42)`, with `2^e ≤ |x| < 2^(e+1)` and `e`
    /// raised to F16's smallest normal exponent −14, puts `x + C` in
    /// `[2^(e+42), 2^(e+43))`, whose f64 spacing is `2^(e−10)`: F16's
    /// spacing at `x` (and `2^-24` below the normal range). So the one
    /// IEEE addition rounds `x` to F16, ties to even (`C` is an even
    /// multiple of the spacing), and subtracting `C` again is exact. `C`
    /// is built from `x`'s exponent bits; a result of zero takes `x`'s
    /// sign back, as rounding does.
    #[inline(always)]
    fn round_f16(self, x: Self::F) -> Self::F {
        const SIGN: u64 = 1 << 63;
        const EXPONENT: u64 = 0x7ff << 52;
        // 1.5 · 2^(−14 + 42): the constant for F16's subnormal range.
        const SUBNORMAL_C: f64 = 402_653_184.0;
        let bits = self.bits(x);
        let exponent = self.and_u(bits, self.splat_u(EXPONENT));
        let c = self.add_u(exponent, self.splat_u((42 << 52) | (1 << 51)));
        let c = self.max(self.with_bits(c), self.splat(SUBNORMAL_C));
        let rounded = self.sub(self.add(x, c), c);
        let sign = self.and_u(bits, self.splat_u(SIGN));
        self.with_bits(self.or_u(self.bits(rounded), sign))
    }
}

/// The baseline instruction set: arrays, lane by lane.
#[derive(Clone, Copy, Debug)]
pub(super) struct Portable;

impl Eight for Portable {
    type F = [f64; 8];
    type U = [u64; 8];

    #[inline(always)]
    fn load(self, values: &[f64; 8]) -> [f64; 8] {
        *values
    }
    #[inline(always)]
    fn store(self, values: [f64; 8]) -> [f64; 8] {
        values
    }
    #[inline(always)]
    fn splat(self, value: f64) -> [f64; 8] {
        [value; 8]
    }
    #[inline(always)]
    fn splat_u(self, value: u64) -> [u64; 8] {
        [value; 8]
    }
    #[inline(always)]
    fn mul_add(self, a: [f64; 8], b: [f64; 8], c: [f64; 8]) -> [f64; 8] {
        // Two roundings: a fused multiply-add is a library call here.
        std::array::from_fn(|l| a[l] * b[l] + c[l])
    }
    #[inline(always)]
    fn add(self, a: [f64; 8], b: [f64; 8]) -> [f64; 8] {
        std::array::from_fn(|l| a[l] + b[l])
    }
    #[inline(always)]
    fn sub(self, a: [f64; 8], b: [f64; 8]) -> [f64; 8] {
        std::array::from_fn(|l| a[l] - b[l])
    }
    #[inline(always)]
    fn mul(self, a: [f64; 8], b: [f64; 8]) -> [f64; 8] {
        std::array::from_fn(|l| a[l] * b[l])
    }
    #[inline(always)]
    fn add_u(self, a: [u64; 8], b: [u64; 8]) -> [u64; 8] {
        std::array::from_fn(|l| a[l].wrapping_add(b[l]))
    }
    #[inline(always)]
    fn sub_u(self, a: [u64; 8], b: [u64; 8]) -> [u64; 8] {
        std::array::from_fn(|l| a[l].wrapping_sub(b[l]))
    }
    #[inline(always)]
    fn or_u(self, a: [u64; 8], b: [u64; 8]) -> [u64; 8] {
        std::array::from_fn(|i| a[i] | b[i])
    }
    #[inline(always)]
    fn max(self, a: [f64; 8], b: [f64; 8]) -> [f64; 8] {
        std::array::from_fn(|i| a[i].max(b[i]))
    }
    #[inline(always)]
    fn and_u(self, a: [u64; 8], b: [u64; 8]) -> [u64; 8] {
        std::array::from_fn(|l| a[l] & b[l])
    }
    #[inline(always)]
    fn shr_dropped(self, a: [u64; 8]) -> [u64; 8] {
        a.map(|v| v >> F16_DROPPED_BITS)
    }
    #[inline(always)]
    fn bits(self, a: [f64; 8]) -> [u64; 8] {
        a.map(f64::to_bits)
    }
    #[inline(always)]
    fn with_bits(self, a: [u64; 8]) -> [f64; 8] {
        a.map(f64::from_bits)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use pulp::x86::{V3, V4};
    use pulp::{f64x4, f64x8, u64x4, u64x8};

    use super::{Eight, F16_DROPPED_BITS};

    /// AVX-512: one register.
    impl Eight for V4 {
        type F = f64x8;
        type U = u64x8;

        #[inline(always)]
        fn load(self, values: &[f64; 8]) -> f64x8 {
            pulp::cast(*values)
        }
        #[inline(always)]
        fn store(self, values: f64x8) -> [f64; 8] {
            pulp::cast(values)
        }
        #[inline(always)]
        fn splat(self, value: f64) -> f64x8 {
            self.splat_f64x8(value)
        }
        #[inline(always)]
        fn splat_u(self, value: u64) -> u64x8 {
            self.splat_u64x8(value)
        }
        #[inline(always)]
        fn mul_add(self, a: f64x8, b: f64x8, c: f64x8) -> f64x8 {
            self.mul_add_f64x8(a, b, c)
        }
        #[inline(always)]
        fn add(self, a: f64x8, b: f64x8) -> f64x8 {
            self.add_f64x8(a, b)
        }
        #[inline(always)]
        fn sub(self, a: f64x8, b: f64x8) -> f64x8 {
            self.sub_f64x8(a, b)
        }
        #[inline(always)]
        fn mul(self, a: f64x8, b: f64x8) -> f64x8 {
            self.mul_f64x8(a, b)
        }
        #[inline(always)]
        fn add_u(self, a: u64x8, b: u64x8) -> u64x8 {
            self.wrapping_add_u64x8(a, b)
        }
        #[inline(always)]
        fn sub_u(self, a: u64x8, b: u64x8) -> u64x8 {
            self.wrapping_sub_u64x8(a, b)
        }
        #[inline(always)]
        fn and_u(self, a: u64x8, b: u64x8) -> u64x8 {
            self.and_u64x8(a, b)
        }
        #[inline(always)]
        fn or_u(self, a: u64x8, b: u64x8) -> u64x8 {
            self.or_u64x8(a, b)
        }
        #[inline(always)]
        fn max(self, a: f64x8, b: f64x8) -> f64x8 {
            self.max_f64x8(a, b)
        }
        #[inline(always)]
        fn shr_dropped(self, a: u64x8) -> u64x8 {
            self.shr_const_u64x8::<F16_DROPPED_BITS>(a)
        }
        #[inline(always)]
        fn bits(self, a: f64x8) -> u64x8 {
            pulp::cast(a)
        }
        #[inline(always)]
        fn with_bits(self, a: u64x8) -> f64x8 {
            pulp::cast(a)
        }
    }

    /// AVX2 with FMA: two registers.
    impl Eight for V3 {
        type F = [f64x4; 2];
        type U = [u64x4; 2];

        #[inline(always)]
        fn load(self, values: &[f64; 8]) -> [f64x4; 2] {
            pulp::cast(*values)
        }
        #[inline(always)]
        fn store(self, values: [f64x4; 2]) -> [f64; 8] {
            pulp::cast(values)
        }
        #[inline(always)]
        fn splat(self, value: f64) -> [f64x4; 2] {
            [self.splat_f64x4(value); 2]
        }
        #[inline(always)]
        fn splat_u(self, value: u64) -> [u64x4; 2] {
            [self.splat_u64x4(value); 2]
        }
        #[inline(always)]
        fn mul_add(self, a: [f64x4; 2], b: [f64x4; 2], c: [f64x4; 2]) -> [f64x4; 2] {
            [0, 1].map(|h| self.mul_add_f64x4(a[h], b[h], c[h]))
        }
        #[inline(always)]
        fn add(self, a: [f64x4; 2], b: [f64x4; 2]) -> [f64x4; 2] {
            [0, 1].map(|h| self.add_f64x4(a[h], b[h]))
        }
        #[inline(always)]
        fn sub(self, a: [f64x4; 2], b: [f64x4; 2]) -> [f64x4; 2] {
            [0, 1].map(|h| self.sub_f64x4(a[h], b[h]))
        }
        #[inline(always)]
        fn mul(self, a: [f64x4; 2], b: [f64x4; 2]) -> [f64x4; 2] {
            [0, 1].map(|h| self.mul_f64x4(a[h], b[h]))
        }
        #[inline(always)]
        fn add_u(self, a: [u64x4; 2], b: [u64x4; 2]) -> [u64x4; 2] {
            [0, 1].map(|h| self.wrapping_add_u64x4(a[h], b[h]))
        }
        #[inline(always)]
        fn sub_u(self, a: [u64x4; 2], b: [u64x4; 2]) -> [u64x4; 2] {
            [0, 1].map(|h| self.wrapping_sub_u64x4(a[h], b[h]))
        }
        #[inline(always)]
        fn and_u(self, a: [u64x4; 2], b: [u64x4; 2]) -> [u64x4; 2] {
            [0, 1].map(|h| self.and_u64x4(a[h], b[h]))
        }
        #[inline(always)]
        fn or_u(self, a: [u64x4; 2], b: [u64x4; 2]) -> [u64x4; 2] {
            [0, 1].map(|h| self.or_u64x4(a[h], b[h]))
        }
        #[inline(always)]
        fn max(self, a: [f64x4; 2], b: [f64x4; 2]) -> [f64x4; 2] {
            [0, 1].map(|h| self.max_f64x4(a[h], b[h]))
        }
        #[inline(always)]
        fn shr_dropped(self, a: [u64x4; 2]) -> [u64x4; 2] {
            a.map(|v| self.shr_const_u64x4::<{ F16_DROPPED_BITS as i32 }>(v))
        }
        #[inline(always)]
        fn bits(self, a: [f64x4; 2]) -> [u64x4; 2] {
            pulp::cast(a)
        }
        #[inline(always)]
        fn with_bits(self, a: [u64x4; 2]) -> [f64x4; 2] {
            pulp::cast(a)
        }
    }
}

/// What [`dispatch`] runs: a computation generic over the lane set.
pub(super) trait WithEight {
    fn run<E: Eight>(self, lanes: E);
}

/// `job` on lane set `S`, inside the function `pulp` compiles with the
/// set's target features.
#[cfg(target_arch = "x86_64")]
struct On<J, S>(J, S);

#[cfg(target_arch = "x86_64")]
impl<J: WithEight, S: Eight> pulp::NullaryFnOnce for On<J, S> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        self.0.run(self.1);
    }
}

/// Runs `job` compiled for AVX-512 or AVX2 with FMA when the host has
/// them, else for the baseline.
#[cfg(target_arch = "x86_64")]
pub(super) fn dispatch<J: WithEight>(job: J) {
    if let Some(simd) = pulp::x86::V4::try_new() {
        simd.vectorize(On(job, simd));
    } else if let Some(simd) = pulp::x86::V3::try_new() {
        simd.vectorize(On(job, simd));
    } else {
        job.run(Portable);
    }
}

/// Runs `job` on every lane set the host has, the baseline first, so that
/// tests can hold each to the same results.
#[cfg(test)]
pub(super) fn on_every_lane_set<J: WithEight + Copy>(job: J) {
    job.run(Portable);
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(simd) = pulp::x86::V3::try_new() {
            simd.vectorize(On(job, simd));
        }
        if let Some(simd) = pulp::x86::V4::try_new() {
            simd.vectorize(On(job, simd));
        }
    }
}

/// Runs `job` for the baseline instruction set.
#[cfg(not(target_arch = "x86_64"))]
pub(super) fn dispatch<J: WithEight>(job: J) {
    job.run(Portable);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulate::rounding::round_f16_significand;

    /// Each lane set rounds as the scalar rounding does, carries into
    /// the exponent included.
    #[test]
    fn lane_sets_round_as_the_scalar_rounding() {
        struct Check(Vec<[f64; 8]>);
        impl WithEight for &Check {
            fn run<E: Eight>(self, lanes: E) {
                for x in &self.0 {
                    let got = lanes.store(lanes.round_f16_significand(lanes.load(x)));
                    let expected = x.map(round_f16_significand);
                    assert_eq!(got.map(f64::to_bits), expected.map(f64::to_bits), "{x:?}");
                }
            }
        }
        let mut rng = ipu_layout::rng::SplitMix64::new(0x9e37_79b9_7f4a_7c15);
        let mut values = Vec::new();
        for _ in 0..1000 {
            values.push(std::array::from_fn(|_| {
                let r = rng.next_u64();
                // Values near ties and near binade ends, both signs.
                let m = (r >> 11) as f64 / (1u64 << 53) as f64 * 2048.0;
                let v = (m.round() + [0.0, 0.5, 0.499_999, 0.500_001][(r & 3) as usize])
                    * 2f64.powi((r >> 2 & 15) as i32 - 20);
                if r >> 63 == 1 { -v } else { v }
            }));
        }
        values.push([2047.5, 2046.5, 1.0, 0.0, -2047.5, 65504.0, 4095.75, -0.0]);
        on_every_lane_set(&Check(values));
    }
}
