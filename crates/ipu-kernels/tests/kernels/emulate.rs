//! The emulator against the plain reference: random shapes and precisions,
//! the bits of one running partial whatever the passes, small shapes of
//! every precision, the seed variants, stochastic rounding, and the memory
//! errors the emulator must report.

use ipu_kernels::{
    AmpModel, EmulateError, EmulateOptions, GemmProblem, GemmShape, KernelArgs, Mode, Operand,
    PlanConfig, Rounding, Variant, build_program, emulate, round_f16, round_f32,
};
use ipu_layout::{AmpOperand, ElementOrder, Fp8Format, MemoryClass};
use proptest::prelude::*;

use crate::support::{
    SEED_VARIANTS, combination, problem, seed_shape, seed_variants, shapes, variant,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A planned variant's output is within the derived bound of the exact
    /// result for random shapes, precisions, orders and modes.
    #[test]
    fn planned_variants_match_reference((shape, mode) in shapes(), seed in any::<u64>()) {
        let p = problem(shape, mode, seed);
        let run = p.run(&PlanConfig::default()).expect("runs");
        let checked = p.check(&run.output, Rounding::NearestEven);
        prop_assert!(checked.is_ok(), "{}: {:?}", run.variant.name(), checked);
        let programs = ipu_kernels::check_program(&run.variant, shape.rows, mode, &run.program);
        prop_assert!(programs.is_ok(), "{:?}", programs);
        let estimate = ipu_kernels::estimate_cycles(&run.variant, shape.rows, mode);
        prop_assert!(estimate.lower_bound_cycles() <= estimate.cycles);
        prop_assert_eq!(run.stats.macs, u64::from(shape.rows) * u64::from(shape.inner) * u64::from(shape.columns));
    }

    /// Passes store the partials to the output and load them back; in the
    /// output precision that changes no bit, so the result is exactly that
    /// of one running partial over the whole inner dimension.
    #[test]
    fn passes_give_the_bits_of_one_running_partial(
        (shape, mode) in shapes(),
        seed in any::<u64>(),
    ) {
        let p = problem(shape, mode, seed);
        let run = p.run(&PlanConfig::default()).expect("runs");
        let serial = one_running_partial(&p);
        prop_assert_eq!(run.output.len(), serial.len());
        for (i, (a, b)) in run.output.iter().zip(&serial).enumerate() {
            prop_assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "element {}: {} vs {}", i, a, b);
        }
    }

    /// Stochastic rounding stays within its (doubled) bound and is
    /// reproducible for a seed.
    #[test]
    fn stochastic_rounding((shape, mode) in shapes(), seed in any::<u64>(), rounding_seed in any::<u64>()) {
        let p = problem(shape, mode, seed);
        let v = ipu_kernels::plan_variant(&shape, shape.rows, shape.rows, &PlanConfig::default()).expect("plans");
        let options = EmulateOptions { rounding: Rounding::Stochastic { seed: rounding_seed } };
        let a = p.run_variant(&v, &options).expect("runs");
        let b = p.run_variant(&v, &options).expect("runs");
        prop_assert_eq!(&a.output, &b.output);
        let checked = p.check(&a.output, options.rounding);
        prop_assert!(checked.is_ok(), "{:?}", checked);
    }
}

/// The arithmetic of `emulate.rs`, stated serially: per output element
/// one partial, from the initial value (accumulate) or zero, to which each
/// AMP step of `group` inner elements adds its products (each rounded to
/// the partial precision, weights widened to F16 first where the
/// arithmetic does) and is rounded once, to nearest even.
fn one_running_partial(p: &GemmProblem) -> Vec<f64> {
    let s = &p.shape;
    let single = matches!(s.output, ipu_layout::Precision::F32);
    let widen = s.right.is_fp8() && !s.left.is_fp8();
    let group = if s.left.is_fp8() { 8 } else { 4 };
    let round = |x: f64| if single { round_f32(x) } else { round_f16(x) };
    let (m, k, n) = (s.rows as usize, s.inner as usize, s.columns as usize);
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut partial = match p.mode {
                Mode::Accumulate => f64::from(p.initial[i * n + j]),
                Mode::Initialise => 0.0,
            };
            for step in (0..k).step_by(group) {
                let mut sum = partial;
                for kk in step..(step + group).min(k) {
                    let mut w = f64::from(p.right[kk * n + j]);
                    if widen {
                        w = round_f16(w);
                    }
                    sum += round(f64::from(p.left[i * k + kk]) * w);
                }
                partial = round(sum);
            }
            out[i * n + j] = partial;
        }
    }
    out
}

/// Small shapes of every precision combination, with row counts below, at
/// and above the worker count: within the bound, and the bits of one
/// running partial.
#[test]
fn small_shapes_match_reference() {
    for combo in 0..5 {
        let (left, right, output) = combination(combo, 1, -1, Fp8Format::F143);
        for &rows in &[1u32, 5, 6, 13] {
            for (o, order) in [
                ElementOrder::RowMajor,
                ElementOrder::Amp(AmpOperand::Output),
            ]
            .into_iter()
            .enumerate()
            {
                let shape = GemmShape {
                    rows,
                    inner: 96,
                    columns: 70,
                    left,
                    right,
                    output,
                    left_order: ElementOrder::Amp(AmpOperand::Left),
                    output_order: order,
                    right_class: MemoryClass::Ipu21Interleaved,
                };
                let mode = if o == 0 {
                    Mode::Initialise
                } else {
                    Mode::Accumulate
                };
                let p = problem(shape, mode, u64::from(rows) * 31 + combo as u64);
                let v = variant(&shape, rows, rows);
                let run = p.run_variant(&v, &EmulateOptions::default()).expect("runs");
                let checked = p.check(&run.output, Rounding::NearestEven);
                assert!(checked.is_ok(), "{} {combo}: {checked:?}", v.name());
                assert_eq!(run.output, one_running_partial(&p), "{}", v.name());
            }
        }
    }
}

/// The seed's five variants, small and large rows, both modes.
#[test]
fn seed_variants_match_reference() {
    for (v, &(inner, columns, _, _)) in seed_variants().iter().zip(&SEED_VARIANTS) {
        for rows in [v.r_small(), v.r_large()] {
            for mode in Mode::ALL {
                let p = problem(
                    seed_shape(inner, columns, rows),
                    mode,
                    u64::from(inner + columns + rows),
                );
                let run = p.run_variant(v, &EmulateOptions::default()).expect("runs");
                let checked = p.check(&run.output, Rounding::NearestEven);
                assert!(
                    checked.is_ok(),
                    "{}: {:?}",
                    v.name(),
                    checked.err().map(|m| m.len())
                );
            }
        }
    }
}

/// F16 partials lose what F32 partials keep: adding many small products to
/// a large partial. This pins the partial precision of each arithmetic.
#[test]
fn half_partials_round_every_step() {
    let base = GemmShape {
        rows: 1,
        inner: 64,
        columns: 16,
        left: ipu_layout::Precision::F16,
        right: ipu_layout::Precision::F16,
        output: ipu_layout::Precision::F16,
        left_order: ElementOrder::Amp(AmpOperand::Left),
        output_order: ElementOrder::RowMajor,
        right_class: MemoryClass::Ipu21Standard,
    };
    // initial 2048 (F16 spacing 2 there), then 64 products of 0.25: with F16
    // partials each 4-product step adds 1.0, which rounds away at 2048
    // (ties to even), so the sum stays 2048; with F32 partials it is 2064.
    let run = |output| {
        let shape = GemmShape { output, ..base };
        let p = ipu_kernels::GemmProblem::new(
            shape,
            Mode::Accumulate,
            vec![0.5; 64],
            vec![0.5; 64 * 16],
            vec![2048.0; 16],
        )
        .expect("sizes");
        p.run(&PlanConfig::default()).expect("runs").output
    };
    assert!(run(ipu_layout::Precision::F16).iter().all(|&x| x == 2048.0));
    assert!(run(ipu_layout::Precision::F32).iter().all(|&x| x == 2064.0));
}

fn small_program() -> (ipu_kernels::AmpProgram, [u64; 3]) {
    let v = Variant::new(&seed_shape(64, 48, 8), 32, 16, 8, 8, &AmpModel::ipu21()).expect("valid");
    let program = build_program(&v, 8, Mode::Initialise).expect("builds");
    let sizes = program.header.operand_bytes();
    (program, sizes)
}

/// `x` rounded up to the operand alignment.
fn al(x: u64) -> u32 {
    (x.div_ceil(32) * 32) as u32
}

/// A compact image for [`small_program`]: left (with its tail), right,
/// output, each aligned.
fn small_layout([l, r, o]: [u64; 3]) -> (Vec<u8>, KernelArgs) {
    let base = 0x4c000u32;
    let right = al(l + 16);
    let output = al(u64::from(right) + r);
    let memory = vec![0u8; (u64::from(output) + o) as usize];
    let args = KernelArgs {
        left: base,
        right: base + right,
        output: base + output,
    };
    (memory, args)
}

#[test]
fn operand_outside_memory_is_reported() {
    let (program, sizes) = small_program();
    let (mut memory, args) = small_layout(sizes);
    let base = 0x4c000u32;
    let shifted = KernelArgs {
        output: args.output + 32,
        ..args
    };
    let e = emulate(&program, &mut memory, base, &shifted).unwrap_err();
    assert!(
        matches!(
            e,
            EmulateError::OperandOutOfBounds {
                operand: Operand::Output,
                ..
            }
        ),
        "{e}"
    );
    let below = KernelArgs {
        left: base - 32,
        ..args
    };
    assert!(emulate(&program, &mut memory, base, &below).is_err());
    assert!(emulate(&program, &mut memory, base, &args).is_ok());
}

#[test]
fn misaligned_operand_is_reported() {
    let (program, sizes) = small_program();
    let (mut memory, args) = small_layout(sizes);
    let moved = KernelArgs {
        right: args.right + 8,
        ..args
    };
    let e = emulate(&program, &mut memory, 0x4c000, &moved).unwrap_err();
    assert!(
        matches!(
            e,
            EmulateError::Misaligned {
                operand: Operand::Right,
                alignment: 32,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn left_tail_outside_memory_is_reported() {
    let (program, [l, r, o]) = small_program();
    let base = 0x4c000u32;
    // Right and output first, the left operand flush with the image end.
    let output = al(r);
    let left = al(u64::from(output) + o);
    let mut memory = vec![0u8; (u64::from(left) + l) as usize];
    let args = KernelArgs {
        right: base,
        output: base + output,
        left: base + left,
    };
    let e = emulate(&program, &mut memory, base, &args).unwrap_err();
    assert!(
        matches!(e, EmulateError::LeftTailOutOfBounds { tail: 16, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("read tail"));
    memory.extend_from_slice(&[0; 16]);
    assert!(emulate(&program, &mut memory, base, &args).is_ok());
}

#[test]
fn overlapping_output_is_reported() {
    let (program, sizes) = small_program();
    let (mut memory, args) = small_layout(sizes);
    let overlapping = KernelArgs {
        output: args.right,
        ..args
    };
    let e = emulate(&program, &mut memory, 0x4c000, &overlapping).unwrap_err();
    assert!(
        matches!(
            e,
            EmulateError::OperandsOverlap {
                operand: Operand::Right,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn malformed_ops_are_reported_not_panicking() {
    let (mut program, sizes) = small_program();
    let (mut memory, args) = small_layout(sizes);
    let base = 0x4c000u32;
    // A run whose stride walks off the operand.
    if let ipu_kernels::AmpOp::StreamRows { runs, .. } =
        &mut program.groups[0].passes[0].workers[0].ops[1]
    {
        runs[0].stride = 1 << 20;
    }
    let e = emulate(&program, &mut memory, base, &args).unwrap_err();
    assert!(
        matches!(
            e,
            EmulateError::OperandOverrun {
                operand: Operand::Left,
                ..
            }
        ),
        "{e}"
    );
    // Ops in the wrong order.
    let (mut program, _) = small_program();
    program.groups[0].passes[0].workers[0].ops.swap(0, 2);
    let e = emulate(&program, &mut memory, base, &args).unwrap_err();
    assert!(
        matches!(e, EmulateError::Malformed { site, .. } if site.op == 0 && site.pass == 0),
        "{e}"
    );
    // A huge partial block is refused before anything is allocated.
    let (mut program, _) = small_program();
    program.groups[0].passes[0].workers[0].ops[0] = ipu_kernels::AmpOp::ZeroPartials {
        rows: u32::MAX,
        columns: u32::MAX,
    };
    let e = emulate(&program, &mut memory, base, &args).unwrap_err();
    assert!(matches!(e, EmulateError::Malformed { .. }), "{e}");
}

/// Round to nearest F16, ties to even, by comparing exact distances to the
/// candidates around `half`'s conversion (which misrounds some values just
/// above a tie, such as 2^-25 (1 + 2^-52), to zero; the emulator does not
/// use it).
fn nearest_f16(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a >= 65520.0 {
        return f64::INFINITY.copysign(x);
    }
    let guess = half::f16::from_f64(a).to_bits().min(0x7bff);
    let mut best = (f64::INFINITY, 0u16);
    for bits in guess.saturating_sub(1)..=(guess + 1).min(0x7bff) {
        let v = half::f16::from_bits(bits).to_f64();
        let d = (a - v).abs();
        if d < best.0 || (d == best.0 && bits % 2 == 0) {
            best = (d, bits);
        }
    }
    half::f16::from_bits(best.1).to_f64().copysign(x)
}

/// The emulator's bit-level F16 rounding is round to nearest even on every
/// F16 value, every midpoint between neighbours (ties), points just either
/// side of them, the overflow boundary and exact products of F16 values.
#[test]
fn round_f16_is_nearest_even() {
    let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
    let check = |y: f64| {
        let (ours, exact) = (ipu_kernels::round_f16(y), nearest_f16(y));
        assert!(same(ours, exact), "{y:e}: {ours:e} vs {exact:e}");
    };
    for bits in 0u16..=0x7bff {
        let v = half::f16::from_bits(bits).to_f64();
        let next = half::f16::from_bits(bits + 1).to_f64();
        let mid = (v + next) / 2.0;
        for x in [
            v,
            mid,
            mid.next_up(),
            mid.next_down(),
            v.next_up(),
            next.next_down(),
        ] {
            check(x);
            check(-x);
        }
    }
    for y in [
        65504.0,
        65519.99,
        65520.0,
        1e6,
        f64::INFINITY,
        1e-30,
        0.0,
        f64::NAN,
    ] {
        check(y);
        check(-y);
    }
    // Exact products of F16 values, what the emulator rounds most.
    let mut state = 0x1234_5678_9abc_def0u64;
    for _ in 0..200_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let a = half::f16::from_bits((state & 0x7bff) as u16).to_f64();
        let b = half::f16::from_bits(((state >> 16) & 0xfbff) as u16).to_f64();
        check(a * b);
    }
}

/// The case the emulator's own rounding exists for: just above the tie
/// between 0 and the smallest subnormal.
#[test]
fn round_f16_keeps_low_sticky_bits() {
    let x = 2f64.powi(-25) * (1.0 + f64::EPSILON);
    assert_eq!(ipu_kernels::round_f16(x), 2f64.powi(-24));
    assert_eq!(ipu_kernels::round_f16(2f64.powi(-25)), 0.0);
}
