//! Row-major left operands: for one set of logical matrices, the program
//! for a row-major left and the program for an `Amp(Left)` left give
//! bit-identical outputs within the reference bound and cost the same; the
//! checker accepts both and rejects a row-major program that claims the AMP
//! order; the binary form records the order; names, keys and the serde
//! default keep `Amp(Left)` shapes as they were; misaligned row-major rows
//! are typed errors.

use ipu_kernels::{
    AmpModel, AmpOp, AmpProgram, CheckError, DEFAULT_LEFT_ORDER, EmulateError, EmulationStats,
    GemmProblem, GemmShape, HostToolchain, KernelArgs, KernelError, Mode, PROGRAM_FORMAT_VERSION,
    PlanConfig, Rounding, Toolchain, Variant, build_program, cache_key, check_program, code_bytes,
    emulate, estimate_cycles, image_base, pack_matrix, plan_variant, program_cycles,
    programs_from_object,
};
use ipu_layout::{AmpOperand, ElementOrder, Fp8Format, MemoryClass, Precision};

use crate::support::{combination, problem, seed_shape, seed_variants, variant};

const AMP_LEFT: ElementOrder = ElementOrder::Amp(AmpOperand::Left);

/// `shape` with its left operand in `order`.
fn with_left(shape: GemmShape, order: ElementOrder) -> GemmShape {
    GemmShape {
        left_order: order,
        ..shape
    }
}

/// Runs `program` of `variant` on a fresh image holding `p`'s operands, the
/// left one laid out in the variant's left order, and returns the output's
/// bytes and the emulation statistics.
fn run_bytes(
    p: &GemmProblem,
    variant: &Variant,
    program: &AmpProgram,
) -> (Vec<u8>, EmulationStats) {
    let s = &p.shape;
    let [l, r, o] = program.header.operand_bytes();
    let align = |x: u64| x.div_ceil(32) * 32;
    let right_at = align(l + u64::from(program.header.left_tail_bytes));
    let output_at = align(right_at + r);
    let mut image = vec![0u8; (output_at + o) as usize];
    pack_matrix(
        &p.left,
        s.rows,
        s.inner,
        s.left,
        variant.shape().left_order,
        &mut image[..l as usize],
    )
    .expect("left packs");
    pack_matrix(
        &p.right,
        s.inner,
        s.columns,
        s.right,
        ElementOrder::Amp(AmpOperand::Right),
        &mut image[right_at as usize..output_at as usize],
    )
    .expect("right packs");
    pack_matrix(
        &p.initial,
        s.rows,
        s.columns,
        s.output,
        s.output_order,
        &mut image[output_at as usize..],
    )
    .expect("output packs");
    let args = KernelArgs {
        left: image_base(),
        right: image_base() + right_at as u32,
        output: image_base() + output_at as u32,
    };
    let stats = emulate(program, &mut image, image_base(), &args).expect("emulates");
    (image.split_off(output_at as usize), stats)
}

/// The shapes of the comparison: F16 and FP8 (both formats) left rows, F16
/// and F32 outputs, ragged row counts (below, at and above the six workers,
/// and not a multiple of them), inner sizes of one and several panels,
/// narrow and ragged columns, both output orders and both modes.
fn comparison_shapes() -> Vec<(GemmShape, Mode)> {
    let mut shapes = Vec::new();
    for combo in 0..5 {
        for (f, format) in [Fp8Format::F143, Fp8Format::F152].into_iter().enumerate() {
            // The two FP8 formats only differ for FP8 rows.
            if f == 1 && combo != 2 {
                continue;
            }
            let (left, right, output) = combination(combo, -1, 1, format);
            let panel = left.amp_panel_columns() as u32;
            for (i, panels) in [1u32, 3, 5].into_iter().enumerate() {
                for (j, &rows) in [1u32, 7, 13, 29].iter().enumerate() {
                    let index = combo + f + i + j;
                    let shape = GemmShape {
                        rows,
                        inner: panels * panel,
                        columns: if j % 2 == 0 { 24 } else { 70 },
                        left,
                        right,
                        output,
                        left_order: AMP_LEFT,
                        output_order: if index % 2 == 0 {
                            ElementOrder::RowMajor
                        } else {
                            ElementOrder::Amp(AmpOperand::Output)
                        },
                        right_class: if index % 3 == 0 {
                            MemoryClass::Ipu21Standard
                        } else {
                            MemoryClass::Ipu21Interleaved
                        },
                    };
                    let mode = Mode::ALL[(index / 2) % 2];
                    shapes.push((shape, mode));
                }
            }
        }
    }
    shapes
}

/// The core property: for each shape both left orders give the same output
/// bytes, the same emulation statistics, a result within the reference
/// bound and programs the checker accepts; the row-major program streams
/// one left run per pass.
#[test]
fn row_major_left_matches_amp_left_bit_for_bit() {
    let model = AmpModel::ipu21();
    let shapes = comparison_shapes();
    assert!(shapes.len() >= 60, "{} shapes", shapes.len());
    for (n, (shape, mode)) in shapes.into_iter().enumerate() {
        let p = problem(shape, mode, 0x5eed + n as u64);
        let planned =
            plan_variant(&shape, shape.rows, shape.rows, &PlanConfig::default()).expect("plans");
        let mut outputs: Vec<Vec<u8>> = Vec::new();
        {
            let (k, c) = (planned.k(), planned.c());
            let mut stats = Vec::new();
            for order in [AMP_LEFT, ElementOrder::RowMajor] {
                let ordered = with_left(shape, order);
                let v = Variant::new(&ordered, k, c, shape.rows, shape.rows, &model)
                    .expect("legal blocks");
                let program = build_program(&v, shape.rows, mode).expect("builds");
                let checked = check_program(&v, shape.rows, mode, &program);
                assert!(checked.is_ok(), "{} {order:?}: {checked:?}", v.name());
                assert_eq!(program.header.left_order, order);
                if order == ElementOrder::RowMajor {
                    let eb = shape.left.element_bytes() as u32;
                    for w in program.passes().flat_map(|p| &p.workers) {
                        for op in &w.ops {
                            if let AmpOp::StreamRows { runs, inner, .. } = op {
                                assert_eq!(runs.len(), 1, "{}", v.name());
                                assert_eq!(runs[0].bytes, inner * eb);
                                assert_eq!(runs[0].stride, shape.inner * eb);
                            }
                        }
                    }
                }
                let (bytes, stat) = run_bytes(&p, &v, &program);
                let values = ipu_kernels::unpack_matrix(
                    &bytes,
                    shape.rows,
                    shape.columns,
                    shape.output,
                    shape.output_order,
                )
                .expect("unpacks");
                let within = p.check(&values, Rounding::NearestEven);
                assert!(
                    within.is_ok(),
                    "{} {order:?}: {:?}",
                    v.name(),
                    within.err().map(|m| m.len())
                );
                stats.push(stat);
                outputs.push(bytes);
            }
            assert_eq!(stats[0], stats[1], "{shape:?} k{k} c{c}");
        }
        for other in &outputs[1..] {
            assert!(other == &outputs[0], "{shape:?} {mode:?}: outputs differ");
        }
    }
}

/// `GemmProblem` lays the left operand out in the shape's left order, so
/// the same logical problem runs bit-identically in both orders through its
/// own plan, build and emulate path.
#[test]
fn problems_run_in_either_left_order() {
    for (shape, mode) in comparison_shapes().into_iter().step_by(7) {
        let a = problem(shape, mode, 99);
        let b = problem(with_left(shape, ElementOrder::RowMajor), mode, 99);
        assert_eq!(a.left, b.left);
        let ra = a.run(&PlanConfig::default()).expect("runs");
        let rb = b.run(&PlanConfig::default()).expect("runs");
        assert_eq!(rb.variant.shape().left_order, ElementOrder::RowMajor);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&ra.output), bits(&rb.output), "{shape:?}");
        assert!(b.check(&rb.output, Rounding::NearestEven).is_ok());
    }
}

/// A row-major shape of several panels and its programs, for the teeth
/// tests (with one panel the two orders are the same bytes).
fn row_major_pair(mode: Mode) -> (Variant, Variant, AmpProgram, AmpProgram) {
    let model = AmpModel::ipu21();
    let shape = GemmShape {
        rows: 13,
        inner: 96,
        columns: 40,
        left: Precision::F16,
        right: Precision::F16,
        output: Precision::F16,
        left_order: ElementOrder::RowMajor,
        output_order: ElementOrder::RowMajor,
        right_class: MemoryClass::Ipu21Interleaved,
    };
    let row = Variant::new(&shape, 16, 16, 13, 13, &model).expect("valid");
    let amp = Variant::new(&with_left(shape, AMP_LEFT), 16, 16, 13, 13, &model).expect("valid");
    let row_program = build_program(&row, 13, mode).expect("builds");
    let amp_program = build_program(&amp, 13, mode).expect("builds");
    (row, amp, row_program, amp_program)
}

#[test]
fn checker_rejects_a_row_major_program_claiming_amp_left() {
    for mode in Mode::ALL {
        let (row, amp, row_program, amp_program) = row_major_pair(mode);
        assert!(check_program(&row, 13, mode, &row_program).is_ok());
        assert!(check_program(&amp, 13, mode, &amp_program).is_ok());

        // The header lies about the order: the row-major variant sees it.
        let mut relabelled = row_program.clone();
        relabelled.header.left_order = AMP_LEFT;
        let e = check_program(&row, 13, mode, &relabelled).expect_err("must reject");
        assert!(
            e.iter().any(|e| matches!(
                e,
                CheckError::Header {
                    field: "left_order",
                    ..
                }
            )),
            "{e:?}"
        );
        // Against the Amp(Left) variant the header agrees, so only decoding
        // the row-major runs through the panel-major map can reject it.
        let e = check_program(&amp, 13, mode, &relabelled).expect_err("must reject");
        assert!(
            e.iter().any(
                |e| matches!(e, CheckError::Op { reason, .. } if reason.contains("left runs"))
            ),
            "{e:?}"
        );
        assert!(e.iter().all(|e| !matches!(e, CheckError::Header { .. })));

        // And the other way round: panel runs under a row-major header.
        let mut relabelled = amp_program.clone();
        relabelled.header.left_order = ElementOrder::RowMajor;
        let e = check_program(&row, 13, mode, &relabelled).expect_err("must reject");
        assert!(
            e.iter().any(
                |e| matches!(e, CheckError::Op { reason, .. } if reason.contains("left runs"))
            ),
            "{e:?}"
        );
    }
}

#[test]
fn binary_form_records_the_left_order() {
    let (_, _, row_program, amp_program) = row_major_pair(Mode::Accumulate);
    let amp_bytes = amp_program.to_bytes();
    let row_bytes = row_program.to_bytes();
    for bytes in [&amp_bytes, &row_bytes] {
        assert_eq!(bytes[8..10], PROGRAM_FORMAT_VERSION.to_le_bytes());
    }
    assert_eq!(PROGRAM_FORMAT_VERSION, 3);
    assert_eq!(
        AmpProgram::from_bytes(&amp_bytes).expect("parses"),
        amp_program
    );
    assert_eq!(
        AmpProgram::from_bytes(&row_bytes).expect("parses"),
        row_program
    );
    // Magic 8, version 2, three precisions of 2 bytes, the output order:
    // the left order is byte 17.
    const LEFT_ORDER_AT: usize = 17;
    assert_eq!(row_bytes[LEFT_ORDER_AT], 0);
    assert_eq!(amp_bytes[LEFT_ORDER_AT], 1);
    for tag in [2u8, 7, 0xff] {
        let mut damaged = row_bytes.clone();
        damaged[LEFT_ORDER_AT] = tag;
        match AmpProgram::from_bytes(&damaged) {
            Err(KernelError::MalformedProgram { offset, reason }) => {
                assert_eq!(offset, LEFT_ORDER_AT);
                assert!(reason.contains("left order"), "{reason}");
            }
            other => panic!("tag {tag}: {other:?}"),
        }
    }
    // Versions 1 and 2 (private weight blocks per worker) and newer ones
    // are refused by version, naming the one this build reads.
    for version in [1u16, 2, 4] {
        let mut other = row_bytes.clone();
        other[8..10].copy_from_slice(&version.to_le_bytes());
        assert!(matches!(
            AmpProgram::from_bytes(&other),
            Err(KernelError::UnsupportedProgramVersion { found, supported: 3 }) if found == version
        ));
    }
    // The listing names the version and a row-major left order.
    let listing = row_program.to_string();
    assert!(listing.starts_with("amp program v3:"), "{listing}");
    assert!(listing.contains("left F16 (RowMajor) right"), "{listing}");
    let listing = amp_program.to_string();
    assert!(!listing.contains("RowMajor) right"), "{listing}");
}

#[test]
fn serde_default_keeps_amp_left_shapes_as_they_were() {
    let shape = seed_shape(64, 48, 244);
    assert_eq!(shape.left_order, DEFAULT_LEFT_ORDER);
    assert_eq!(DEFAULT_LEFT_ORDER, AMP_LEFT);
    let json = serde_json::to_string(&shape).expect("serialises");
    assert!(!json.contains("left_order"), "{json}");
    // JSON written before the field existed reads back as Amp(Left).
    let back: GemmShape = serde_json::from_str(&json).expect("parses");
    assert_eq!(back, shape);
    let row = with_left(shape, ElementOrder::RowMajor);
    let json = serde_json::to_string(&row).expect("serialises");
    assert!(json.contains(r#""left_order":"RowMajor""#), "{json}");
    assert_eq!(
        serde_json::from_str::<GemmShape>(&json).expect("parses"),
        row
    );
    // An explicit Amp(Left) reads back as the default.
    let explicit_amp = json.replace(
        r#""RowMajor","output_order""#,
        r#"{"Amp":"Left"},"output_order""#,
    );
    assert_eq!(
        serde_json::from_str::<GemmShape>(&explicit_amp).expect("parses"),
        shape
    );
}

#[test]
fn row_major_variants_have_their_own_names_keys_and_objects() {
    let model = AmpModel::ipu21();
    let seed = seed_variants().remove(0);
    // The golden key of the first seed variant (tests/kernels/golden).
    let golden: serde_json::Value = serde_json::from_str(include_str!("golden/seed_kernel.json"))
        .expect("the golden metadata parses");
    assert_eq!(Some(seed.key()), golden["variant_key"].as_str());
    assert_eq!(seed.program_format_version(), 3);
    let shape = with_left(*seed.shape(), ElementOrder::RowMajor);
    let row = Variant::new(
        &shape,
        seed.k(),
        seed.c(),
        seed.r_small(),
        seed.r_large(),
        &model,
    )
    .expect("valid");
    assert_eq!(
        row.name(),
        "gemm_f8_interleaved_left_rowmajor_k32_c16_r240_r244"
    );
    assert_ne!(row.key(), seed.key());
    assert_eq!(row.program_format_version(), 3);
    assert_ne!(
        cache_key(&row, ipu_target::Target::ipu21(), &HostToolchain),
        cache_key(&seed, ipu_target::Target::ipu21(), &HostToolchain)
    );
    for (a, b) in row.entry_points().iter().zip(seed.entry_points()) {
        assert_ne!(a.symbol, b.symbol);
    }
    let compiled = HostToolchain
        .compile(&row, ipu_target::Target::ipu21())
        .expect("compiles");
    assert_eq!(compiled.metadata.program_format_version, 3);
    assert_eq!(compiled.metadata.shape.left_order, ElementOrder::RowMajor);
    let programs = programs_from_object(&compiled.object).expect("reads back");
    for ((symbol, program), entry) in programs.iter().zip(row.entry_points()) {
        assert_eq!(symbol, &entry.symbol);
        assert_eq!(
            program,
            &build_program(&row, entry.rows, entry.mode).expect("builds")
        );
    }
    let seed_compiled = HostToolchain
        .compile(&seed, ipu_target::Target::ipu21())
        .expect("compiles");
    assert_eq!(seed_compiled.metadata.program_format_version, 3);
}

#[test]
fn unsupported_and_misaligned_left_orders_are_typed_errors() {
    let model = AmpModel::ipu21();
    let config = PlanConfig::default();
    let base = GemmShape {
        left: Precision::F16,
        right: Precision::F16,
        ..seed_shape(64, 48, 8)
    };
    for order in [
        ElementOrder::Amp(AmpOperand::Right),
        ElementOrder::Amp(AmpOperand::Output),
    ] {
        let shape = with_left(base, order);
        assert!(matches!(
            plan_variant(&shape, 8, 8, &config),
            Err(KernelError::UnsupportedLeftOrder { order: o }) if o == order
        ));
        assert!(matches!(
            Variant::new(&shape, 16, 16, 8, 8, &model),
            Err(KernelError::UnsupportedLeftOrder { .. })
        ));
    }
    // F16 rows of 40 elements are 80 bytes apart: not 32-byte aligned.
    let ragged = GemmShape {
        inner: 40,
        ..with_left(base, ElementOrder::RowMajor)
    };
    let e = plan_variant(&ragged, 8, 8, &config).unwrap_err();
    assert!(
        matches!(
            e,
            KernelError::MisalignedLeftRows {
                bytes: 80,
                alignment: 32,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("pad the inner dimension"), "{e}");
    assert!(matches!(
        Variant::new(&ragged, 16, 16, 8, 8, &model),
        Err(KernelError::MisalignedLeftRows { bytes: 80, .. })
    ));
    // The same shape in Amp(Left) order is fine, as it always was.
    assert!(plan_variant(&with_left(ragged, AMP_LEFT), 8, 8, &config).is_ok());
    // FP8 rows of 48 elements are 48 bytes: misaligned; of 64, aligned.
    let fp8 = with_left(seed_shape(48, 48, 8), ElementOrder::RowMajor);
    assert!(matches!(
        plan_variant(&fp8, 8, 8, &config),
        Err(KernelError::MisalignedLeftRows { bytes: 48, .. })
    ));
    assert!(plan_variant(&GemmShape { inner: 64, ..fp8 }, 8, 8, &config).is_ok());
    // A model whose pass is half a panel would put inner slices at 16-byte
    // offsets: Variant::new and the planner refuse it.
    let half = AmpModel {
        f16_micro_inner: 8,
        ..AmpModel::ipu21()
    };
    let aligned = with_left(base, ElementOrder::RowMajor);
    assert!(matches!(
        Variant::new(&aligned, 8, 16, 8, 8, &half),
        Err(KernelError::MisalignedLeftRows { bytes: 16, .. })
    ));
    assert!(matches!(
        plan_variant(
            &aligned,
            8,
            8,
            &PlanConfig {
                model: half,
                ..config
            },
        ),
        Err(KernelError::MisalignedLeftRows { bytes: 16, .. })
    ));
}

#[test]
fn emulator_rejects_misaligned_row_major_runs_and_bad_left_orders() {
    let (row, _, program, _) = row_major_pair(Mode::Initialise);
    let p = problem(*row.shape(), Mode::Initialise, 5);
    // The built program runs.
    let _ = run_bytes(&p, &row, &program);
    let [l, r, o] = program.header.operand_bytes();
    let right_at = (l + 32).div_ceil(32) * 32;
    let output_at = (right_at + r).div_ceil(32) * 32;
    let mut image = vec![0u8; (output_at + o) as usize];
    let args = KernelArgs {
        left: image_base(),
        right: image_base() + right_at as u32,
        output: image_base() + output_at as u32,
    };
    // A stream of several rows, so that its stride matters: worker 0 of
    // the first pass (13 rows over six workers, the first has three).
    let i = program.groups[0].passes[0].workers[0]
        .ops
        .iter()
        .position(|op| matches!(op, AmpOp::StreamRows { rows, .. } if *rows > 1))
        .expect("a stream of several rows");
    fn stream(p: &mut AmpProgram, i: usize) -> &mut Vec<ipu_kernels::Run> {
        match &mut p.groups[0].passes[0].workers[0].ops[i] {
            AmpOp::StreamRows { runs, .. } => runs,
            _ => unreachable!("op {i} streams rows"),
        }
    }
    // Shift it by two elements: element aligned, not row aligned.
    let mut shifted = program.clone();
    stream(&mut shifted, i)[0].offset += 4;
    let e = emulate(&shifted, &mut image, image_base(), &args).unwrap_err();
    assert!(
        matches!(e, EmulateError::MisalignedLeftRun { site, run: 0, alignment: 32, .. } if site.op == i),
        "{e}"
    );
    // A misaligned row stride is refused too.
    let mut strided = program.clone();
    stream(&mut strided, i)[0].stride -= 16;
    let e = emulate(&strided, &mut image, image_base(), &args).unwrap_err();
    assert!(matches!(e, EmulateError::MisalignedLeftRun { .. }), "{e}");
    // A header left order that is not a left order.
    let mut bad = program.clone();
    bad.header.left_order = ElementOrder::Amp(AmpOperand::Right);
    let e = emulate(&bad, &mut image, image_base(), &args).unwrap_err();
    assert!(matches!(e, EmulateError::MalformedHeader { .. }), "{e}");
}

/// The two left orders feed the AMP the same rows through the same
/// strided loads, so they cost the same; the closed form still equals the
/// estimate derived from the program.
#[test]
fn row_major_left_costs_the_same() {
    for (shape, mode) in comparison_shapes().into_iter().step_by(3) {
        let amp = variant(&shape, shape.rows, shape.rows);
        let row = variant(
            &with_left(shape, ElementOrder::RowMajor),
            shape.rows,
            shape.rows,
        );
        let ea = estimate_cycles(&amp, shape.rows, mode);
        let er = estimate_cycles(&row, shape.rows, mode);
        for (v, e) in [(&amp, ea), (&row, er)] {
            let program = build_program(v, shape.rows, mode).expect("builds");
            assert_eq!(program_cycles(v, &program), e, "{}", v.name());
        }
        assert_eq!(er, ea, "{shape:?}");
        assert_eq!(code_bytes(&row), code_bytes(&amp));
    }
}
