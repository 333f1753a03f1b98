//! The planner and cost model: seed variant names, the pass-shape rule,
//! the closed form against the program-derived estimate, lower bounds,
//! code bytes and typed errors.

use ipu_kernels::{
    AmpModel, GemmShape, KernelError, Mode, PlanConfig, RowSize, Variant, build_program,
    check_program, code_bytes, entry_code_instructions, estimate_cycles, plan_variant,
    program_cycles,
};
use ipu_layout::{AmpOperand, ElementOrder, MemoryClass, Precision};
use proptest::prelude::*;

use crate::support::{SEED_VARIANTS, seed_shape, seed_variants, shapes, variant};

#[test]
fn seed_variant_names() {
    let names: Vec<String> = seed_variants()
        .iter()
        .map(|v| v.name().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "gemm_f8_interleaved_k32_c16_r240_r244",
            "gemm_f8_interleaved_k32_c16_r144_r148",
            "gemm_f8_interleaved_k32_c16_r160_r164",
            "gemm_f8_interleaved_k32_c16_r160_r164",
            "gemm_f8_interleaved_k32_c16_r120_r124",
        ]
    );
}

#[test]
fn f16_standard_name_and_entry_symbols() {
    let shape = GemmShape {
        left: Precision::F16,
        right: Precision::F16,
        right_class: MemoryClass::Ipu21Standard,
        ..seed_shape(64, 48, 8)
    };
    let v = Variant::new(&shape, 16, 16, 6, 8, &AmpModel::ipu21()).expect("valid");
    assert_eq!(v.name(), "gemm_f16_k16_c16_r6_r8");
    let entries = v.entry_points();
    assert_eq!(entries.len(), 4);
    let tag = &v.key()[..8];
    let symbols: Vec<&str> = entries.iter().map(|e| e.symbol.as_str()).collect();
    assert_eq!(
        symbols,
        [
            format!("gemm_f16_k16_c16_r6_r8_{tag}_initialise_small"),
            format!("gemm_f16_k16_c16_r6_r8_{tag}_accumulate_small"),
            format!("gemm_f16_k16_c16_r6_r8_{tag}_initialise_large"),
            format!("gemm_f16_k16_c16_r6_r8_{tag}_accumulate_large"),
        ]
    );
    assert_eq!(entries[0].rows, 6);
    assert_eq!(entries[3].rows, 8);
    assert_eq!(v.rows(RowSize::Large), 8);
}

#[test]
fn planner_gives_the_pass_shape_variant() {
    // The coefficient registers hold one micro-inner × 16 tile, so every
    // shape has one variant per row pair: the planner's.
    for (seed, &(inner, columns, rs, rl)) in seed_variants().iter().zip(&SEED_VARIANTS) {
        let shape = seed_shape(inner, columns, rl);
        let v = plan_variant(&shape, rs, rl, &PlanConfig::default()).expect("plans");
        assert_eq!(&v, seed);
        assert_eq!((v.k(), v.c()), (32, 16));
        assert!(
            v.name().starts_with("gemm_") && v.key().len() == 64,
            "{v:?}"
        );
    }
    let f16 = GemmShape {
        left: Precision::F16,
        right: Precision::F16,
        ..seed_shape(64, 48, 8)
    };
    let v = plan_variant(&f16, 8, 8, &PlanConfig::default()).expect("plans");
    assert_eq!((v.k(), v.c()), (16, 16));
}

#[test]
fn invalid_blocks_and_shapes_are_typed_errors() {
    let model = AmpModel::ipu21();
    let shape = seed_shape(64, 48, 8);
    assert!(matches!(
        Variant::new(&shape, 64, 16, 8, 8, &model),
        Err(KernelError::InvalidBlock {
            what: "inner (k)",
            value: 64,
            expected: 32,
        })
    ));
    assert!(matches!(
        Variant::new(&shape, 32, 48, 8, 8, &model),
        Err(KernelError::InvalidBlock {
            what: "column (c)",
            value: 48,
            expected: 16,
        })
    ));
    assert!(matches!(
        Variant::new(&shape, 32, 16, 9, 8, &model),
        Err(KernelError::RowsOutOfOrder {
            rows_small: 9,
            rows_large: 8
        })
    ));
    assert!(matches!(
        plan_variant(
            &GemmShape { inner: 0, ..shape },
            1,
            1,
            &PlanConfig::default()
        ),
        Err(KernelError::ZeroDimension { what: "inner" })
    ));
    let fp8_out = GemmShape {
        output: shape.left,
        ..shape
    };
    let e = plan_variant(&fp8_out, 1, 1, &PlanConfig::default()).unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedPrecisions { .. }));
    assert!(e.to_string().contains("no AMP instruction"));
    let left_order = GemmShape {
        output_order: ElementOrder::Amp(AmpOperand::Left),
        ..shape
    };
    assert!(matches!(
        plan_variant(&left_order, 1, 1, &PlanConfig::default()),
        Err(KernelError::UnsupportedOutputOrder { .. })
    ));
    let tight = PlanConfig {
        max_code_bytes: 100,
        ..PlanConfig::default()
    };
    assert!(matches!(
        plan_variant(&shape, 1, 1, &tight),
        Err(KernelError::NoFeasibleBlock { .. })
    ));
    let v = Variant::new(&shape, 32, 16, 4, 8, &model).expect("valid");
    assert!(matches!(
        build_program(&v, 5, Mode::Initialise),
        Err(KernelError::RowsNotServed { rows: 5, .. })
    ));
}

#[test]
fn interleaved_weights_load_faster_than_standard() {
    let interleaved = seed_variants().remove(4);
    let standard_shape = GemmShape {
        right_class: MemoryClass::Ipu21Standard,
        ..*interleaved.shape()
    };
    let standard = variant(&standard_shape, 120, 124);
    let a = estimate_cycles(&interleaved, 124, Mode::Initialise).cycles;
    let b = estimate_cycles(&standard, 124, Mode::Initialise).cycles;
    assert!(a < b, "interleaved {a} vs standard {b}");
}

#[test]
fn seed_variant_estimates() {
    for v in seed_variants() {
        for rows in [v.r_small(), v.r_large()] {
            for mode in Mode::ALL {
                let e = estimate_cycles(&v, rows, mode);
                assert!(e.lower_bound_cycles() <= e.cycles);
                let u = e.utilisation();
                assert!(u > 0.5 && u <= 1.0, "{} rows {rows}: {u}", v.name());
                assert_eq!(e.active_workers, 6);
            }
        }
    }
}

/// Random variants: random shape, random row pair.
fn variants() -> impl Strategy<Value = (Variant, Mode)> {
    (shapes(), 0u32..20).prop_map(|((shape, mode), dr)| {
        let r_large = shape.rows;
        let r_small = r_large.saturating_sub(dr).max(1);
        (variant(&shape, r_small, r_large), mode)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The closed-form estimate equals the estimate derived from the built
    /// program's ops, is never below the AMP lower bound, and code bytes
    /// equal the programs' instruction counts.
    #[test]
    fn closed_form_matches_programs((v, mode) in variants()) {
        let mut code = 0u64;
        for entry in v.entry_points() {
            let program = build_program(&v, entry.rows, entry.mode).expect("builds");
            let closed = estimate_cycles(&v, entry.rows, entry.mode);
            let derived = program_cycles(&v, &program);
            prop_assert_eq!(closed, derived);
            prop_assert!(closed.lower_bound_cycles() <= closed.cycles);
            let instructions = program.code_instructions(v.model());
            prop_assert_eq!(instructions, entry_code_instructions(&v, entry.rows, entry.mode));
            code += instructions * 4;
        }
        prop_assert_eq!(u64::from(code_bytes(&v)), code);
        let rows = v.r_small();
        let program = build_program(&v, rows, mode).expect("builds");
        let checked = check_program(&v, rows, mode, &program);
        prop_assert!(checked.is_ok(), "{:?}", checked);
    }

    /// The planner returns the pass shape, within its code limit.
    #[test]
    fn planner_returns_the_pass_shape((shape, _) in shapes(), dr in 0u32..5) {
        let config = PlanConfig::default();
        let rows_small = shape.rows.saturating_sub(dr).max(1);
        let v = plan_variant(&shape, rows_small, shape.rows, &config).expect("plans");
        let micro = if shape.left.is_fp8() { 32 } else { 16 };
        prop_assert_eq!((v.k(), v.c()), (micro, 16));
        prop_assert!(code_bytes(&v) <= config.max_code_bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any dimensions, including ones too large for a tile, give a variant
    /// or a typed error, and estimates for any row count never panic.
    #[test]
    fn extreme_shapes_are_errors_not_panics(
        (shape, _) in shapes(),
        rows in prop_oneof![Just(0u32), 1u32..300, any::<u32>()],
        inner in prop_oneof![Just(0u32), 1u32..100, any::<u32>()],
        columns in prop_oneof![Just(0u32), 1u32..100, any::<u32>()],
        rows_small in any::<u32>(),
    ) {
        let shape = GemmShape { rows, inner, columns, ..shape };
        let config = PlanConfig::default();
        match plan_variant(&shape, rows_small.min(rows), rows, &config) {
            Ok(v) => {
                for mode in Mode::ALL {
                    let e = estimate_cycles(&v, rows_small, mode);
                    prop_assert!(e.lower_bound_cycles() <= e.cycles);
                }
                let _ = code_bytes(&v);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
