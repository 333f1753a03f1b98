//! AMP programs: the binary form round-trips and rejects damage, the
//! listing matches its golden file (rewrite with `IPU_BLESS=1`), and the
//! independent checker passes built programs and rejects known-bad ones.

use ipu_kernels::{
    AmpModel, AmpOp, AmpProgram, CheckError, GemmShape, KernelError, Mode, OpSite,
    PROGRAM_FORMAT_VERSION, Variant, WorkerId, build_program, check_program,
};
use ipu_layout::{AmpOperand, ElementOrder, MemoryClass, Precision};
use proptest::prelude::*;

use crate::support::{seed_shape, seed_variants, shapes, variant};

fn listing_variant() -> Variant {
    // Three column slices (the last narrow), three inner slices (the last
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
    Variant::new(&shape, 16, 16, 3, 8, &AmpModel::ipu21()).expect("valid")
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
        let s = v.shape();
        for entry in v.entry_points() {
            let program = build_program(&v, entry.rows, entry.mode).expect("builds");
            // One pass per weight tile, the FP8 path's groups over the
            // column slices; every pass starts all six workers, which split
            // the rows between them.
            assert_eq!(program.groups.len() as u32, s.columns.div_ceil(16));
            assert_eq!(
                program.passes().count() as u32,
                s.columns.div_ceil(16) * s.inner.div_ceil(32)
            );
            for pass in program.passes() {
                assert_eq!(pass.workers.len(), 6);
                let rows: u32 = pass
                    .workers
                    .iter()
                    .map(|w| match w.ops[1] {
                        AmpOp::StreamRows { rows, .. } => rows,
                        _ => panic!("the second op streams rows"),
                    })
                    .sum();
                assert_eq!(rows, entry.rows);
            }
            let checked = check_program(&v, entry.rows, entry.mode, &program);
            assert!(checked.is_ok(), "{}: {checked:?}", entry.symbol);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn binary_form_round_trips((shape, mode) in shapes()) {
        let v = variant(&shape, shape.rows, shape.rows);
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
    // FP8: groups over the three column slices, two inner passes each;
    // eight rows over six workers (2, 2, 1, 1, 1, 1).
    let v = Variant::new(&seed_shape(64, 48, 8), 32, 16, 8, 8, &AmpModel::ipu21()).expect("valid");
    let p = build_program(&v, 8, mode).expect("builds");
    (v, p)
}

fn errors(v: &Variant, mode: Mode, p: &AmpProgram) -> Vec<CheckError> {
    check_program(v, 8, mode, p).expect_err("the checker must reject this program")
}

/// The sites of every op error.
fn op_sites(e: &[CheckError]) -> Vec<OpSite> {
    e.iter()
        .filter_map(|e| match e {
            CheckError::Op { site, .. } => Some(*site),
            _ => None,
        })
        .collect()
}

fn worker(pass: usize, w: u32, op: usize) -> OpSite {
    OpSite::worker(pass, WorkerId::from_u32(w), op)
}

#[test]
fn checker_rejects_a_dropped_store() {
    let (v, mut p) = built(Mode::Initialise);
    let last = &mut p.groups[2].passes[1].workers[5].ops;
    last.pop();
    let e = errors(&v, Mode::Initialise, &p);
    assert!(
        e.iter().any(|e| matches!(e, CheckError::Uncovered { .. })),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| matches!(e, CheckError::Worker { pass: 5, .. })),
        "{e:?}"
    );
}

#[test]
fn checker_rejects_a_duplicated_worker() {
    let (v, mut p) = built(Mode::Initialise);
    let pass = &mut p.groups[0].passes[0];
    let copy = pass.workers[0].clone();
    pass.workers.push(copy);
    let e = errors(&v, Mode::Initialise, &p);
    assert!(
        e.iter()
            .any(|e| matches!(e, CheckError::Overlap { site, .. } if site.pass == 0)),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| matches!(e, CheckError::Worker { pass: 0, .. })),
        "{e:?}"
    );
}

#[test]
fn checker_rejects_a_skipped_inner_slice() {
    let (v, mut p) = built(Mode::Initialise);
    // Worker 0 skips the first inner slice of the first column slice: the
    // second pass then adds inner 32..64 to partials that hold nothing.
    p.groups[0].passes[0].workers.remove(0);
    let e = errors(&v, Mode::Initialise, &p);
    assert!(op_sites(&e).contains(&worker(1, 0, 2)), "{e:?}");
}

#[test]
fn checker_rejects_passes_outside_their_group() {
    let (v, mut p) = built(Mode::Initialise);
    // A pass of column slice 1 moved into the group of column slice 0.
    let moved = p.groups[1].passes.remove(0);
    p.groups[0].passes.push(moved);
    let e = errors(&v, Mode::Initialise, &p);
    assert!(
        e.iter()
            .any(|e| matches!(e, CheckError::Group { group: 0, .. })),
        "{e:?}"
    );
}

#[test]
fn checker_rejects_shifted_addresses() {
    let (v, mut p) = built(Mode::Initialise);
    if let AmpOp::StreamRows { runs, .. } = &mut p.groups[0].passes[0].workers[1].ops[1] {
        runs[0].offset += 1;
    }
    p.groups[1].passes[0].coefficients.runs[0].offset += 32;
    let e = errors(&v, Mode::Initialise, &p);
    let sites = op_sites(&e);
    assert!(sites.contains(&worker(0, 1, 1)), "{e:?}");
    // Moving the weights by one panel row still decodes as a tile (inner
    // 1..33); the checker catches it where the workers stream against it.
    assert!(
        sites.iter().any(|s| s.pass == 2 && s.worker.is_some()),
        "{e:?}"
    );
}

#[test]
fn checker_rejects_an_oversized_tile() {
    let shape = GemmShape {
        left: Precision::F16,
        right: Precision::F16,
        ..seed_shape(64, 48, 8)
    };
    let v = variant(&shape, 8, 8);
    let mut p = build_program(&v, 8, Mode::Initialise).expect("builds");
    // The F16 weights' panels are 16 columns wide: a load of two panels'
    // columns is a 16 x 32 tile, more than the registers hold.
    let extra = p.groups[0].passes[1].coefficients.runs[0];
    let load = &mut p.groups[0].passes[0].coefficients;
    load.runs.push(extra);
    load.columns = 32;
    let e = errors(&v, Mode::Initialise, &p);
    assert!(op_sites(&e).contains(&OpSite::load(0)), "{e:?}");
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
    p.groups[0].passes[0].workers[3].ops[0] = AmpOp::ZeroPartials {
        rows: 1,
        columns: 16,
    };
    let e = errors(&v, Mode::Accumulate, &p);
    assert!(op_sites(&e).contains(&worker(0, 3, 0)), "{e:?}");
    let (v, mut p) = built(Mode::Initialise);
    // Zeroing the second inner slice's partials loses the first.
    p.groups[0].passes[1].workers[2].ops[0] = AmpOp::ZeroPartials {
        rows: 1,
        columns: 16,
    };
    let e = errors(&v, Mode::Initialise, &p);
    assert!(op_sites(&e).contains(&worker(1, 2, 2)), "{e:?}");
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
    match (pick >> 56) % 20 {
        0 => return program.header.rows = value,
        1 => return program.header.inner = value,
        2 => return program.header.columns = value,
        3 => return program.header.left_tail_bytes = value,
        4 => return program.header.alignment = value % 64,
        _ => {}
    }
    let groups = program.groups.len() as u64;
    if groups == 0 {
        return;
    }
    let g = (pick % groups) as usize;
    let passes = program.groups[g].passes.len() as u64;
    if passes == 0 {
        return;
    }
    let pi = ((pick >> 4) % passes) as usize;
    match (pick >> 56) % 20 {
        5 => {
            // Move the pass to another group.
            let pass = program.groups[g].passes.remove(pi);
            let to = (value as usize) % program.groups.len();
            program.groups[to].passes.push(pass);
            return;
        }
        6 => {
            let other = ((pick >> 24) % passes) as usize;
            return program.groups[g].passes.swap(pi, other);
        }
        7 => {
            let pass = program.groups[g].passes[pi].clone();
            return program.groups[g].passes.insert(pi, pass);
        }
        8 => {
            let load = &mut program.groups[g].passes[pi].coefficients;
            match value % 3 {
                0 => load.inner = load.inner.wrapping_add(1),
                1 => load.columns = load.columns.wrapping_sub(1),
                _ => {
                    if let Some(run) = load.runs.first_mut() {
                        run.offset = run.offset.wrapping_add(1 + value % 64);
                    }
                }
            }
            return;
        }
        _ => {}
    }
    let pass = &mut program.groups[g].passes[pi];
    let workers = pass.workers.len() as u64;
    if workers == 0 {
        return;
    }
    let wi = ((pick >> 8) % workers) as usize;
    if (pick >> 12) % 8 == 0 {
        pass.workers.remove(wi);
        return;
    }
    let w = &mut pass.workers[wi];
    let ops = w.ops.len() as u64;
    if ops == 0 {
        return;
    }
    let i = ((pick >> 20) % ops) as usize;
    match (pick >> 16) % 6 {
        0 => {
            w.ops.remove(i);
        }
        1 => {
            let op = w.ops[i].clone();
            w.ops.insert(i, op);
        }
        2 => w.ops.swap(i, ((pick >> 24) % ops) as usize),
        3 => w.worker = WorkerId::from_u32(value % 8),
        _ => {
            let runs = match &mut w.ops[i] {
                AmpOp::LoadPartials { runs, .. }
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
        let v = variant(&shape, shape.rows, shape.rows);
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
