//! ipu-target's integration tests: the built-in description reads, writes
//! back to an equal target, and bad descriptions are refused with the key
//! at fault.

use ipu_layout::MemoryClass;
use ipu_target::{IPU21_TOML, Target, TargetError};

#[test]
fn the_built_in_description_is_the_c600() {
    let t = Target::ipu21();
    assert_eq!(t.name(), "ipu21");
    assert_eq!(t.tile_count(), 1472);
    assert_eq!(t.worker_contexts(), 6);
    let m = t.memory();
    // 624 KiB of SRAM, of which the loader fills all but the last 0x450.
    assert_eq!(m.sram_end - m.sram_start, 624 * 1024);
    assert_eq!(t.usable_bytes(), 624 * 1024 - 0x450);
    assert!(t.code_region().executable);
    assert_eq!(t.code_region().start, m.sram_start);
}

#[test]
fn a_target_written_as_toml_reads_back_equal() {
    let t = Target::ipu21();
    let again = Target::from_toml(&t.to_toml()).expect("the written text reads");
    assert_eq!(&again, t);
}

#[test]
fn the_workspace_device_file_is_the_built_in_one() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../device/ipu21.toml");
    let text = std::fs::read_to_string(path).expect("device/ipu21.toml exists");
    assert_eq!(text, IPU21_TOML);
}

/// The built-in text with `from` replaced by `to` (which must occur).
fn edited(from: &str, to: &str) -> String {
    assert!(IPU21_TOML.contains(from), "{from}");
    IPU21_TOML.replacen(from, to, 1)
}

fn key_of(e: &TargetError) -> &str {
    match e {
        TargetError::Invalid { key, .. } => key,
        other => panic!("not an invalid value: {other}"),
    }
}

#[test]
fn bad_values_name_their_key() {
    for (from, to, key) in [
        ("tile_count = 1472", "tile_count = 0", "tile_count"),
        (
            "worker_contexts = 6",
            "worker_contexts = 65",
            "worker_contexts",
        ),
        (
            "loader_limit = 0xe7bb0",
            "loader_limit = 0xf0000",
            "memory.loader_limit",
        ),
        ("partner_xor = 2", "partner_xor = 3", "exchange.partner_xor"),
        (
            "operand_alignment = 32",
            "operand_alignment = 24",
            "memory.operand_alignment",
        ),
        (
            "column_multiple = 16",
            "column_multiple = 0",
            "amp.column_multiple",
        ),
        (
            "vector_cycles_per_element = 0.25",
            "vector_cycles_per_element = -1.0",
            "timing.vector_cycles_per_element",
        ),
        (
            "datapath_bytes = 8 ",
            "datapath_bytes = 6 ",
            "vector.datapath_bytes",
        ),
        (
            "dot_macs_per_instruction = 4 ",
            "dot_macs_per_instruction = 0 ",
            "vector.dot_macs_per_instruction",
        ),
        (
            "start = 0x80000, end = 0xe8000, element_bytes",
            "start = 0x70000, end = 0xe8000, element_bytes",
            "memory.regions.region1",
        ),
        (
            "{ class = \"Ipu21Interleaved\", ranges = [[0x80000, 0xe8000]] }",
            "{ class = \"Ipu21Interleaved\", ranges = [[0xf0000, 0xf8000]] }",
            "memory.classes.Ipu21Interleaved",
        ),
        (
            "{ class = \"Ipu21Interleaved\", ranges = [[0x80000, 0xe8000]] }",
            "{ class = \"Ipu21Standard\", ranges = [[0x80000, 0xe8000]] }",
            "memory.classes",
        ),
    ] {
        let e = Target::from_toml(&edited(from, to)).expect_err(to);
        assert_eq!(key_of(&e), key, "{to}: {e}");
    }
}

#[test]
fn unknown_missing_and_mistyped_keys_are_format_errors() {
    for text in [
        edited("clock_hz", "clock_hertz"),
        edited("latency_cycles = 12", "latency_cycles = \"12\""),
        IPU21_TOML.replace("[timing]", "[timing_unused]"),
        IPU21_TOML.replace("[sync]", "[sync_unused]"),
        edited("sync_cycles = 100", "sync_cycles = -1"),
        "[[".to_owned(),
    ] {
        let e = Target::from_toml(&text).expect_err("refused");
        assert!(matches!(e, TargetError::Toml { .. }), "{e}");
    }
}

#[test]
fn a_missing_file_keeps_its_cause() {
    let e = Target::from_file(std::path::Path::new("/nonexistent/device.toml"))
        .expect_err("no such file");
    let TargetError::Read { source, .. } = &e else {
        panic!("{e}");
    };
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    assert!(std::error::Error::source(&e).is_some());
}

#[test]
fn every_class_has_ranges() {
    for class in MemoryClass::ALL {
        assert!(
            Target::ipu21()
                .memory()
                .classes
                .iter()
                .any(|c| c.class == class && !c.ranges.is_empty())
        );
    }
}
