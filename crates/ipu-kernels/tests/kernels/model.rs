//! The device file's `[amp]` section and the built-in IPU21 model agree,
//! and bad device files are rejected with a reason.

use ipu_kernels::{AmpModel, KernelError};

const DEVICE: &str = include_str!("../../../../device/ipu21.toml");

#[test]
fn device_file_matches_builtin_model() {
    let model = AmpModel::from_device_toml(DEVICE).expect("device file parses");
    assert_eq!(model, AmpModel::ipu21());
    assert_eq!(AmpModel::default(), AmpModel::ipu21());
}

#[test]
fn public_throughput_figures() {
    let m = AmpModel::ipu21();
    assert_eq!(m.f16_macs_per_instruction, 64);
    assert_eq!(m.fp8_macs_per_instruction, 128);
    assert_eq!(m.worker_contexts, 6);
}

#[test]
fn zero_divisor_is_rejected() {
    let bad = DEVICE.replace("interleaved_load_bytes = 16", "interleaved_load_bytes = 0");
    assert_ne!(bad, DEVICE);
    match AmpModel::from_device_toml(&bad) {
        Err(KernelError::Device { reason }) => assert!(reason.contains("interleaved_load_bytes")),
        other => panic!("expected a device error, got {other:?}"),
    }
}

#[test]
fn missing_section_is_rejected() {
    let cut = DEVICE.split("[amp]").next().unwrap_or_default();
    assert!(matches!(
        AmpModel::from_device_toml(cut),
        Err(KernelError::Device { .. })
    ));
}
