//! The AMP model follows the device description, and hand-made models
//! with values the arithmetic cannot use are rejected with a reason.

use ipu_kernels::{AmpModel, KernelError};
use ipu_target::{IPU21_TOML, Target};

#[test]
fn the_model_follows_the_description() {
    assert_eq!(AmpModel::default(), AmpModel::ipu21());
    let faster = IPU21_TOML.replace(
        "fp8_macs_per_instruction = 128",
        "fp8_macs_per_instruction = 256",
    );
    let target = Target::from_toml(&faster).expect("a valid description");
    let model = AmpModel::new(&target);
    assert_eq!(model.fp8_macs_per_instruction, 256);
    assert_eq!(
        model.f16_macs_per_instruction,
        AmpModel::ipu21().f16_macs_per_instruction
    );
    model.validate().expect("a valid model");
}

#[test]
fn public_throughput_figures() {
    let m = AmpModel::ipu21();
    assert_eq!(m.f16_macs_per_instruction, 64);
    assert_eq!(m.fp8_macs_per_instruction, 128);
    assert_eq!(m.worker_contexts, 6);
}

#[test]
fn a_zero_divisor_is_rejected() {
    let bad = AmpModel {
        interleaved_load_bytes: 0,
        ..AmpModel::ipu21()
    };
    match bad.validate() {
        Err(KernelError::Device { reason }) => assert!(reason.contains("interleaved_load_bytes")),
        other => panic!("expected a device error, got {other:?}"),
    }
}

#[test]
fn pass_figures_are_poplibs_estimates() {
    let m = AmpModel::ipu21();
    // lib/poplin/PerformanceEstimation.hpp, ConvPartial1x1Out (see
    // device/ipu21.toml for the sums).
    assert_eq!(
        (
            m.f16.call_cycles,
            m.f16.group_cycles,
            m.f16.pass_cycles,
            m.f16.stream_instructions,
            m.f16.partial_load_instructions
        ),
        (83, 33, 25, 18, 1)
    );
    assert_eq!(
        (
            m.fp8.call_cycles,
            m.fp8.group_cycles,
            m.fp8.pass_cycles,
            m.fp8.stream_instructions,
            m.fp8.partial_load_instructions
        ),
        (67, 69, 108, 32, 5)
    );
    assert_eq!(
        (m.f16_micro_inner, m.fp8_micro_inner, m.column_multiple),
        (16, 32, 16)
    );
}

#[test]
fn a_pass_that_is_not_whole_steps_is_rejected() {
    let bad = AmpModel {
        fp8_micro_inner: 12,
        ..AmpModel::ipu21()
    };
    match bad.validate() {
        Err(KernelError::Device { reason }) => assert!(reason.contains("fp8_micro_inner")),
        other => panic!("expected a device error, got {other:?}"),
    }
}
