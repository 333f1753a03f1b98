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
