//! AMP programs: the binary form round-trips and rejects damage, the
//! listing matches its golden file (rewrite with `IPU_BLESS=1`), and the
//! independent checker passes built programs and rejects known-bad ones.

use ipu_kernels::{
    AmpModel, AmpOp, AmpProgram, CheckError, GemmShape, KernelError, Mode, PROGRAM_FORMAT_VERSION,
    Variant, build_program, check_program,
};
use ipu_layout::{AmpOperand, ElementOrder, MemoryClass, Precision};
use proptest::prelude::*;

use crate::support::{seed_shape, seed_variants, shapes};

fn listing_variant() -> Variant {
    // Two column blocks (the second narrow), two inner blocks (the second
    // short), rows fewer than workers on the small entry.
    let shape = GemmShape {
        rows: 8,
        inner: 40,
        columns: 40,
        left: Precision::F16,
        right: Precision::F16,
        output: Precision::F16,
        left_order: ElementOrder::Amp(AmpOperand::Left),
        output_order: ElementOrder::Amp(AmpOperand::Output),
        right_class: MemoryClass::Ipu21Interleaved,
    };
    Variant::new(&shape, 32, 32, 3, 8, &AmpModel::ipu21()).expect("valid")
}

#[test]
fn listing_matches_golden() {
    let v = listing_variant();
    let mut text = String::new();
    for entry in v.entry_points() {
        let program = build_program(&v, entry.rows, entry.mode).expect("builds");
        text.push_str(&format!("== {}\n{program}", entry.symbol));
    }
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kernels/golden/listing.txt");
    if std::env::var_os("IPU_BLESS").is_some() {
        std::fs::write(&path, &text).expect("golden written");
    }
    let golden = std::fs::read_to_string(&path).expect("golden exists (run with IPU_BLESS=1)");
    for (i, (a, b)) in text.lines().zip(golden.lines()).enumerate() {
        assert_eq!(
            a,
            b,
            "listing line {} differs (rewrite with IPU_BLESS=1 if intended)",
            i + 1
        );
    }
    assert_eq!(text.lines().count(), golden.lines().count());
}

#[test]
fn seed_programs_pass_the_checker() {
    for v in seed_variants() {
        for entry in v.entry_points() {
            let program = build_program(&v, entry.rows, entry.mode).expect("builds");
            assert_eq!(program.workers.len(), 6);
            let checked = check_program(&v, entry.rows, entry.mode, &program);
            assert!(checked.is_ok(), "{}: {checked:?}", entry.symbol);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn binary_form_round_trips((shape, mode) in shapes(), ki in 0u32..4, ci in 0u32..4) {
        let micro = if shape.left.is_fp8() { 32 } else { 16 };
        let k = micro * (1 + ki % shape.inner.div_ceil(micro));
        let c = 16 * (1 + ci % shape.columns.div_ceil(16));
        let v = Variant::new(&shape, k, c, shape.rows, shape.rows, &AmpModel::ipu21()).expect("legal");
        let program = build_program(&v, shape.rows, mode).expect("builds");
        let bytes = program.to_bytes();
        prop_assert_eq!(AmpProgram::from_bytes(&bytes).expect("parses"), program);
        // Every strict prefix is rejected, never a panic.
        for cut in [0, 1, 9, 10, bytes.len() / 2, bytes.len() - 1] {
            prop_assert!(AmpProgram::from_bytes(&bytes[..cut]).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert!(AmpProgram::from_bytes(&longer).is_err());
    }

    /// Arbitrary bytes never panic the parser.
    #[test]
    fn parser_survives_garbage(mut bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = AmpProgram::from_bytes(&bytes);
        if bytes.len() >= 10 {
            bytes[..8].copy_from_slice(b"IPUAMP\0\0");
            bytes[8..10].copy_from_slice(&PROGRAM_FORMAT_VERSION.to_le_bytes());
            let _ = AmpProgram::from_bytes(&bytes);
        }
    }
}

#[test]
fn other_version_is_rejected() {
    let v = listing_variant();
    let mut bytes = build_program(&v, 8, Mode::Initialise)
        .expect("builds")
        .to_bytes();
    bytes[8] = 99;
    assert!(matches!(
        AmpProgram::from_bytes(&bytes),
        Err(KernelError::UnsupportedProgramVersion { found: 99, .. })
    ));
    bytes[0] = b'X';
    assert!(matches!(
        AmpProgram::from_bytes(&bytes),
        Err(KernelError::MalformedProgram { offset: 0, .. })
    ));
}

fn built(mode: Mode) -> (Variant, AmpProgram) {
    let v = Variant::new(&seed_shape(64, 48, 8), 32, 32, 8, 8, &AmpModel::ipu21()).expect("valid");
    let p = build_program(&v, 8, mode).expect("builds");
    (v, p)
}

fn errors(v: &Variant, mode: Mode, p: &AmpProgram) -> Vec<CheckError> {
    check_program(v, 8, mode, p).expect_err("the checker must reject this program")
}

#[test]
fn checker_rejects_a_dropped_store() {
    let (v, mut p) = built(Mode::Initialise);
    let last = p.workers[5].ops.len() - 1;
    p.workers[5].ops.remove(last);
    let e = errors(&v, Mode::Initialise, &p);
    assert!(
        e.iter().any(|e| matches!(e, CheckError::Uncovered { .. })),
        "{e:?}"
    );
    assert!(
        e.iter().any(|e| matches!(e, CheckError::Worker { .. })),
        "{e:?}"
    );
}

#[test]
fn checker_rejects_a_duplicated_worker() {
    let (v, mut p) = built(Mode::Initialise);
    let copy = p.workers[0].clone();
    p.workers.push(copy);
    let e = errors(&v, Mode::Initialise, &p);
    assert!(
        e.iter()
            .any(|e| matches!(e, CheckError::DoubleStore { .. })),
        "{e:?}"
    );
    assert!(
        e.iter().any(|e| matches!(e, CheckError::Worker { .. })),
        "{e:?}"
    );
}

#[test]
fn checker_rejects_a_skipped_inner_block() {
    let (v, mut p) = built(Mode::Initialise);
    // Ops: zero, (load, stream) x 2, store for each column block; drop the
    // first inner block of worker 0.
    p.workers[0].ops.drain(1..3);
    let e = errors(&v, Mode::Initialise, &p);
    assert!(
        e.iter()
            .any(|e| matches!(e, CheckError::Op { worker, op: 2, .. } if worker.as_u32() == 0)),
        "{e:?}"
    );
}

#[test]
fn checker_rejects_shifted_addresses() {
    let (v, mut p) = built(Mode::Initialise);
    if let AmpOp::StreamRows { runs, .. } = &mut p.workers[1].ops[2] {
        runs[0].offset += 1;
    }
    if let AmpOp::LoadCoefficients { runs, .. } = &mut p.workers[2].ops[1] {
        runs[0].offset += 32;
    }
    let e = errors(&v, Mode::Initialise, &p);
    let ops: Vec<(u32, usize)> = e
        .iter()
        .filter_map(|e| match e {
            CheckError::Op { worker, op, .. } => Some((worker.as_u32(), *op)),
            _ => None,
        })
        .collect();
    assert!(ops.contains(&(1, 2)), "{e:?}");
    // Moving the weights by one panel row still decodes as a block (inner
    // 1..33); the checker catches it where it is streamed.
    assert!(ops.iter().any(|&(w, _)| w == 2), "{e:?}");
}

#[test]
fn checker_rejects_mode_mismatch_and_header_damage() {
    let (v, p) = built(Mode::Initialise);
    let e = errors(&v, Mode::Accumulate, &p);
    assert!(
        e.iter()
            .any(|e| matches!(e, CheckError::Header { field: "mode", .. })),
        "{e:?}"
    );
    let (v, mut p) = built(Mode::Accumulate);
    p.header.mode = Mode::Initialise;
    let e = errors(&v, Mode::Initialise, &p);
    assert!(!e.is_empty());
    let (v, mut p) = built(Mode::Accumulate);
    // Zeroing instead of loading the partials loses the accumulation.
    p.workers[3].ops[0] = AmpOp::ZeroPartials {
        rows: 1,
        columns: 32,
    };
    let e = errors(&v, Mode::Accumulate, &p);
    assert!(
        e.iter().any(|e| matches!(e, CheckError::Op { op: 0, .. })),
        "{e:?}"
    );
}

/// An image holding a problem's operands for `program`, and their addresses.
fn image(p: &ipu_kernels::GemmProblem, program: &AmpProgram) -> (Vec<u8>, ipu_kernels::KernelArgs) {
    use ipu_kernels::{image_base, pack_matrix};
    let s = &p.shape;
    let [l, r, o] = program.header.operand_bytes();
    let right_at = (l + 32).div_ceil(32) * 32;
    let output_at = (right_at + r).div_ceil(32) * 32;
    let mut bytes = vec![0u8; (output_at + o) as usize];
    pack_matrix(
        &p.left,
        s.rows,
        s.inner,
        s.left,
        s.left_order,
        &mut bytes[..l as usize],
    )
    .expect("left");
    pack_matrix(
        &p.right,
        s.inner,
        s.columns,
        s.right,
        ElementOrder::Amp(AmpOperand::Right),
        &mut bytes[right_at as usize..output_at as usize],
    )
    .expect("right");
    pack_matrix(
        &p.initial,
        s.rows,
        s.columns,
        s.output,
        s.output_order,
        &mut bytes[output_at as usize..],
    )
    .expect("output");
    let args = ipu_kernels::KernelArgs {
        left: image_base(),
        right: image_base() + right_at as u32,
        output: image_base() + output_at as u32,
    };
    (bytes, args)
}

/// Applies one of a handful of damaging edits to a program.
fn mutate(program: &mut AmpProgram, pick: u64, value: u32) {
    match (pick >> 56) % 16 {
        0 => return program.header.rows = value,
        1 => return program.header.inner = value,
        2 => return program.header.columns = value,
        3 => return program.header.left_tail_bytes = value,
        4 => return program.header.alignment = value % 64,
        _ => {}
    }
    let workers = program.workers.len() as u64;
    if workers == 0 {
        return;
    }
    let w = &mut program.workers[(pick % workers) as usize];
    let ops = w.ops.len() as u64;
    if ops == 0 {
        return;
    }
    let i = ((pick >> 8) % ops) as usize;
    match (pick >> 16) % 6 {
        0 => {
            w.ops.remove(i);
        }
        1 => {
            let op = w.ops[i].clone();
            w.ops.insert(i, op);
        }
        2 => w.ops.swap(i, ((pick >> 24) % ops) as usize),
        3 => w.worker = ipu_kernels::WorkerId::from_u32(value % 8),
        _ => {
            let runs = match &mut w.ops[i] {
                AmpOp::LoadCoefficients { runs, .. }
                | AmpOp::LoadPartials { runs, .. }
                | AmpOp::StreamRows { runs, .. }
                | AmpOp::StorePartials { runs, .. } => runs,
                AmpOp::ZeroPartials { rows, .. } => {
                    *rows = value % 64;
                    return;
                }
            };
            if runs.is_empty() {
                return;
            }
            let j = ((pick >> 32) as usize) % runs.len();
            let field = match (pick >> 40) % 4 {
                0 => &mut runs[j].offset,
                1 => &mut runs[j].bytes,
                2 => &mut runs[j].stride,
                _ => &mut runs[j].count,
            };
            *field = match (pick >> 48) % 4 {
                0 => field.wrapping_add(1 + value % 64),
                1 => field.wrapping_sub(1 + value % 64),
                2 => value,
                _ => 0,
            };
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The checker is sound with respect to the emulator: a damaged program
    /// either fails the checker, or runs to exactly the original bytes; and
    /// neither the emulator nor the checker panics on it.
    #[test]
    fn checker_accepts_only_equivalent_programs(
        (shape, mode) in shapes(),
        seed in any::<u64>(),
        pick in any::<u64>(),
        value in any::<u32>(),
    ) {
        let p = crate::support::problem(shape, mode, seed);
        let v = Variant::new(&shape, if shape.left.is_fp8() { 32 } else { 16 }, 16, shape.rows, shape.rows, &AmpModel::ipu21()).expect("legal");
        let program = build_program(&v, shape.rows, mode).expect("builds");
        let (mut good, args) = image(&p, &program);
        ipu_kernels::emulate(&program, &mut good, ipu_kernels::image_base(), &args).expect("runs");
        let mut damaged = program.clone();
        mutate(&mut damaged, pick, value);
        let (mut bytes, _) = image(&p, &program);
        let ran = ipu_kernels::emulate(&damaged, &mut bytes, ipu_kernels::image_base(), &args);
        if check_program(&v, shape.rows, mode, &damaged).is_ok() {
            prop_assert!(ran.is_ok(), "checker accepted a program the emulator rejects: {:?}", ran);
            prop_assert!(bytes == good, "checker accepted a program with different results");
        }
    }
}
