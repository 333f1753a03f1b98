//! The fast emulator (with and without the product table) against the
//! plain one in `reference.rs`: random programs, memory contents and
//! damaged programs, compared byte for byte.

use ipu_layout::{AmpOperand, ElementOrder, Fp8Format, MemoryClass, Precision};
use proptest::prelude::*;

use super::emulate_reference;
use crate::emulate::{
    EmulateOptions, KernelArgs, PreparedProgram, Rounding, emulate_prepared, emulate_with,
};
use crate::program::{AmpOp, AmpProgram, CoefficientLoad, Pass, PassGroup, Run};
use crate::{AmpModel, GemmShape, Mode, Variant, build_program};

/// Where the test operands start: the built-in target's SRAM base.
fn base() -> u32 {
    crate::image_base()
}

fn precisions(combo: usize, format: Fp8Format, ls: i8, rs: i8) -> [Precision; 3] {
    let f8 = |scale| Precision::F8 { format, scale };
    match combo % 5 {
        0 => [Precision::F16, Precision::F16, Precision::F16],
        1 => [Precision::F16, Precision::F16, Precision::F32],
        2 => [f8(ls), f8(rs), Precision::F16],
        3 => [Precision::F16, f8(rs), Precision::F16],
        _ => [Precision::F16, f8(rs), Precision::F32],
    }
}

/// A splitmix64 stream for memory contents.
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Random bytes for `bytes` bytes of `precision` elements; with
/// `finite`, NaN and infinity codes are replaced by finite ones.
fn fill(out: &mut [u8], precision: Precision, finite: bool, rng: &mut Bytes) {
    for b in out.iter_mut() {
        *b = rng.next() as u8;
    }
    if !finite {
        return;
    }
    match precision {
        Precision::F8 { .. } => out.iter_mut().filter(|b| **b == 0x80).for_each(|b| *b = 0),
        Precision::F16 => {
            for e in out.chunks_exact_mut(2) {
                if e[1] & 0x7c == 0x7c {
                    e[1] &= !0x40;
                }
            }
        }
        Precision::F32 => {
            for e in out.chunks_exact_mut(4) {
                if e[3] & 0x7f == 0x7f && e[2] & 0x80 != 0 {
                    e[3] &= !0x40;
                }
            }
        }
    }
}

/// A program of one pass whose one worker streams a `7`-deep tile, so that
/// the last AMP step of every row is shorter than the group.
fn ragged(program: &AmpProgram) -> AmpProgram {
    let h = program.header;
    let (el, er, eo) = (
        h.left.element_bytes() as u32,
        h.right.element_bytes() as u32,
        h.output.element_bytes() as u32,
    );
    let rows = h.rows.min(2);
    let row_stride = h.inner * el;
    let coefficients = CoefficientLoad {
        inner: 7,
        columns: 3,
        runs: vec![Run {
            offset: 0,
            bytes: 3 * er,
            stride: 16 * er,
            count: 7,
        }],
    };
    let mut ops = vec![AmpOp::ZeroPartials { rows, columns: 3 }];
    let out_runs = vec![Run {
        offset: 0,
        bytes: 3 * eo,
        stride: h.columns * eo,
        count: rows,
    }];
    if h.mode == Mode::Accumulate {
        ops[0] = AmpOp::LoadPartials {
            rows,
            columns: 3,
            runs: out_runs.clone(),
        };
    }
    ops.push(AmpOp::StreamRows {
        rows,
        inner: 7,
        runs: vec![Run {
            offset: 0,
            bytes: 7 * el,
            stride: row_stride,
            count: rows,
        }],
    });
    ops.push(AmpOp::StorePartials {
        rows,
        columns: 3,
        runs: out_runs,
    });
    let worker = program
        .passes()
        .next()
        .and_then(|p| p.workers.first())
        .map(|w| crate::WorkerProgram {
            worker: w.worker,
            ops,
        });
    AmpProgram {
        header: h,
        groups: vec![PassGroup {
            passes: vec![Pass {
                coefficients,
                workers: worker.into_iter().collect(),
            }],
        }],
    }
}

/// Moves one run of one op (or of a coefficient load) by `delta` bytes
/// (or changes its count), which the emulators must treat alike: the same
/// error, or the same bytes.
fn damage(program: &mut AmpProgram, which: usize, delta: u32, count: bool) {
    let passes: Vec<&mut Pass> = program
        .groups
        .iter_mut()
        .flat_map(|g| &mut g.passes)
        .collect();
    let ops: usize = passes
        .iter()
        .map(|p| 1 + p.workers.iter().map(|w| w.ops.len()).sum::<usize>())
        .sum();
    if ops == 0 {
        return;
    }
    let mut n = which % ops;
    for pass in passes {
        let runs = if n == 0 {
            &mut pass.coefficients.runs
        } else {
            n -= 1;
            let Some(w) = pass.workers.iter_mut().find(|w| {
                let found = n < w.ops.len();
                if !found {
                    n -= w.ops.len();
                }
                found
            }) else {
                continue;
            };
            match &mut w.ops[n] {
                AmpOp::LoadPartials { runs, .. }
                | AmpOp::StreamRows { runs, .. }
                | AmpOp::StorePartials { runs, .. } => runs,
                AmpOp::ZeroPartials { rows, .. } => {
                    *rows = rows.wrapping_add(1);
                    return;
                }
            }
        };
        if let Some(r) = runs.first_mut() {
            if count {
                r.count = r.count.wrapping_add(1);
            } else {
                r.offset = r.offset.wrapping_add(delta);
            }
        }
        return;
    }
}

#[derive(Debug, Clone)]
struct Case {
    combo: usize,
    format: Fp8Format,
    scales: (i8, i8),
    rows: u32,
    inner_blocks: u32,
    columns: u32,
    row_major_left: bool,
    amp_output: bool,
    accumulate: bool,
    stochastic: Option<u64>,
    finite: bool,
    memory_seed: u64,
    /// 0: as built; 1: the ragged program; 2..: a damaged program.
    shape_of_program: u8,
    damage: (usize, u32),
}

fn cases() -> impl Strategy<Value = Case> {
    (
        (
            0usize..5,
            prop_oneof![Just(Fp8Format::F143), Just(Fp8Format::F152)],
            (-14i8..6, -14i8..6),
            1u32..14,
            1u32..4,
            1u32..70,
        ),
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            prop::option::of(any::<u64>()),
            any::<bool>(),
            any::<u64>(),
            0u8..5,
            (any::<usize>(), 1u32..80),
        ),
    )
        .prop_map(
            |(
                (combo, format, scales, rows, inner_blocks, columns),
                (
                    row_major_left,
                    amp_output,
                    accumulate,
                    stochastic,
                    finite,
                    memory_seed,
                    shape_of_program,
                    damage,
                ),
            )| Case {
                combo,
                format,
                scales,
                rows,
                inner_blocks,
                columns,
                row_major_left,
                amp_output,
                accumulate,
                stochastic,
                finite,
                memory_seed,
                shape_of_program,
                damage,
            },
        )
}

fn check_case(case: &Case) -> Result<(), TestCaseError> {
    let [left, right, output] = precisions(case.combo, case.format, case.scales.0, case.scales.1);
    let micro = if left.element_bytes() == 1 { 32 } else { 16 };
    let shape = GemmShape {
        rows: case.rows,
        inner: micro * case.inner_blocks,
        columns: case.columns,
        left,
        right,
        output,
        left_order: if case.row_major_left {
            ElementOrder::RowMajor
        } else {
            ElementOrder::Amp(AmpOperand::Left)
        },
        output_order: if case.amp_output {
            ElementOrder::Amp(AmpOperand::Output)
        } else {
            ElementOrder::RowMajor
        },
        right_class: MemoryClass::Ipu21Interleaved,
    };
    let model = AmpModel::ipu21();
    let variant = Variant::new(&shape, micro, 16, shape.rows, shape.rows, &model)
        .map_err(|e| TestCaseError::fail(format!("variant: {e}")))?;
    let mode = if case.accumulate {
        Mode::Accumulate
    } else {
        Mode::Initialise
    };
    let mut program = build_program(&variant, shape.rows, mode)
        .map_err(|e| TestCaseError::fail(format!("program: {e}")))?;
    match case.shape_of_program {
        0 => {}
        1 => program = ragged(&program),
        n => damage(&mut program, case.damage.0, case.damage.1, n == 4),
    }
    let [lb, rb, ob] = program.header.operand_bytes();
    let align = |x: u64| x.div_ceil(32) * 32;
    let right_at = align(lb + u64::from(program.header.left_tail_bytes));
    let output_at = align(right_at + rb);
    let size = align(output_at + ob) as usize;
    let mut image = vec![0u8; size];
    let mut rng = Bytes(case.memory_seed);
    fill(&mut image[..right_at as usize], left, case.finite, &mut rng);
    fill(
        &mut image[right_at as usize..output_at as usize],
        right,
        case.finite,
        &mut rng,
    );
    fill(
        &mut image[output_at as usize..],
        output,
        case.finite,
        &mut rng,
    );
    let args = KernelArgs {
        left: base(),
        right: base() + right_at as u32,
        output: base() + output_at as u32,
    };
    let options = EmulateOptions {
        rounding: case
            .stochastic
            .map_or(Rounding::NearestEven, |seed| Rounding::Stochastic { seed }),
    };
    let mut plain = image.clone();
    let expected = emulate_reference(&program, &mut plain, base(), &args, &options);
    let mut fast = image.clone();
    let got = emulate_with(&program, &mut fast, base(), &args, &options);
    prop_assert_eq!(&got, &expected);
    prop_assert!(fast == plain, "the fast emulator wrote other bytes");
    let prepared = PreparedProgram::new(program.clone());
    match prepared {
        Ok(prepared) => {
            let mut tabled = image.clone();
            let got = emulate_prepared(&prepared, &mut tabled, base(), &args, &options);
            prop_assert_eq!(&got, &expected);
            prop_assert!(tabled == plain, "the prepared program wrote other bytes");
        }
        Err(e) => prop_assert_eq!(Err(e), expected.map(|_| ())),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fast_emulator_matches_the_plain_one(case in cases()) {
        check_case(&case)?;
    }
}

/// Finite inputs leave no NaN to excuse: the bytes are identical.
#[test]
fn finite_inputs_give_identical_bytes() {
    for combo in 0..5 {
        let case = Case {
            combo,
            format: Fp8Format::F143,
            scales: (-4, -11),
            rows: 13,
            inner_blocks: 3,
            columns: 50,
            row_major_left: combo == 2,
            amp_output: false,
            accumulate: true,
            stochastic: None,
            finite: true,
            memory_seed: combo as u64,
            shape_of_program: 0,
            damage: (0, 0),
        };
        check_case(&case).unwrap();
    }
}

/// Programs of the same precisions share one product table, and no
/// more than the limit are built; programs past it still run, with the
/// same bytes.
#[test]
fn product_tables_are_shared_and_bounded() {
    use crate::emulate::ProductTables;
    let model = AmpModel::ipu21();
    let mut tables = ProductTables::new();
    let mut last = None;
    for scale in -40i8..40 {
        let f8 = |s| Precision::F8 {
            format: Fp8Format::F143,
            scale: s,
        };
        let shape = GemmShape {
            rows: 2,
            inner: 32,
            columns: 16,
            left: f8(scale),
            right: f8(-3),
            output: Precision::F16,
            left_order: ElementOrder::Amp(AmpOperand::Left),
            output_order: ElementOrder::RowMajor,
            right_class: MemoryClass::Ipu21Interleaved,
        };
        let v = Variant::new(&shape, 32, 16, 2, 2, &model).unwrap();
        let program = build_program(&v, 2, Mode::Initialise).unwrap();
        PreparedProgram::with_tables(program.clone(), &mut tables).unwrap();
        PreparedProgram::with_tables(program.clone(), &mut tables).unwrap();
        last = Some(program);
    }
    assert_eq!(tables.len(), ProductTables::LIMIT);
    let program = last.unwrap();
    let past = PreparedProgram::with_tables(program.clone(), &mut tables).unwrap();
    let [lb, rb, ob] = program.header.operand_bytes();
    let size = (lb + u64::from(program.header.left_tail_bytes)).div_ceil(32) * 32 + 64 + rb + ob;
    let mut rng = Bytes(7);
    let mut image = vec![0u8; size as usize + 64];
    fill(&mut image, program.header.left, true, &mut rng);
    let right_at = (lb + u64::from(program.header.left_tail_bytes)).div_ceil(32) * 32;
    let output_at = (right_at + rb).div_ceil(32) * 32;
    let args = KernelArgs {
        left: base(),
        right: base() + right_at as u32,
        output: base() + output_at as u32,
    };
    let options = EmulateOptions::default();
    let mut a = image.clone();
    let mut b = image;
    emulate_prepared(&past, &mut a, base(), &args, &options).unwrap();
    emulate_reference(&program, &mut b, base(), &args, &options).unwrap();
    assert!(a == b);
}
