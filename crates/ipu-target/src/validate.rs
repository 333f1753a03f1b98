//! Validation of a description, once, when a [`crate::Target`] is made:
//! every later user of a target relies on what is checked here instead of
//! checking again.

use std::ops::Range;
use std::path::PathBuf;

use ipu_layout::MemoryClass;

use crate::spec::TargetSpec;

/// Why a device description was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// The file could not be read.
    #[error("cannot read the device description {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid TOML, or a key is missing, unknown or of the
    /// wrong type.
    #[error("the device description is not in the target format: {message}{}", span_text(.span))]
    Toml {
        /// The parser's message.
        message: String,
        /// Byte range of the offending text, when known.
        span: Option<Range<usize>>,
    },
    /// A value is outside what a device can be.
    #[error("device description: `{key}` {why}")]
    Invalid {
        /// The dotted key.
        key: String,
        /// What is wrong and what is needed.
        why: String,
    },
}

fn span_text(span: &Option<Range<usize>>) -> String {
    span.as_ref()
        .map(|s| format!(" (at bytes {}..{})", s.start, s.end))
        .unwrap_or_default()
}

fn invalid(key: impl Into<String>, why: impl Into<String>) -> TargetError {
    TargetError::Invalid {
        key: key.into(),
        why: why.into(),
    }
}

fn positive(value: u64, key: &str) -> Result<(), TargetError> {
    if value == 0 {
        Err(invalid(key, "is 0; it must be at least 1"))
    } else {
        Ok(())
    }
}

/// Checks everything a crate relies on.
pub(crate) fn validate(spec: &TargetSpec) -> Result<(), TargetError> {
    if spec.name.is_empty() || spec.name.len() > 64 {
        return Err(invalid("name", "must be 1 to 64 characters"));
    }
    positive(spec.tile_count.into(), "tile_count")?;
    positive(spec.clock_hz, "clock_hz")?;
    if !(1..=64).contains(&spec.worker_contexts) {
        return Err(invalid(
            "worker_contexts",
            format!("is {}; give 1 to 64", spec.worker_contexts),
        ));
    }
    memory(spec)?;
    let x = &spec.exchange;
    if !x.partner_xor.is_power_of_two() {
        return Err(invalid(
            "exchange.partner_xor",
            format!(
                "is {}; the partner rule t ^ partner_xor needs a power of two",
                x.partner_xor
            ),
        ));
    }
    let a = &spec.amp;
    for (value, key) in [
        (a.f16_macs_per_instruction, "amp.f16_macs_per_instruction"),
        (a.fp8_macs_per_instruction, "amp.fp8_macs_per_instruction"),
        (a.f32_partials_rate_divisor, "amp.f32_partials_rate_divisor"),
        (a.f16_micro_inner, "amp.f16_micro_inner"),
        (a.fp8_micro_inner, "amp.fp8_micro_inner"),
        (a.column_multiple, "amp.column_multiple"),
        (a.interleaved_load_bytes, "amp.interleaved_load_bytes"),
        (a.standard_load_bytes, "amp.standard_load_bytes"),
        (a.instruction_bytes, "amp.instruction_bytes"),
    ] {
        positive(value.into(), key)?;
    }
    let vector = &spec.vector;
    for (value, key) in [
        (vector.datapath_bytes, "vector.datapath_bytes"),
        (
            vector.dot_macs_per_instruction,
            "vector.dot_macs_per_instruction",
        ),
        (
            vector.axpy_macs_per_instruction,
            "vector.axpy_macs_per_instruction",
        ),
        (
            vector.copy_bytes_per_instruction,
            "vector.copy_bytes_per_instruction",
        ),
    ] {
        positive(value.into(), key)?;
    }
    if vector.datapath_bytes % 4 != 0 {
        return Err(invalid(
            "vector.datapath_bytes",
            format!(
                "is {}; give a multiple of 4 so that a vector holds whole F32 elements",
                vector.datapath_bytes
            ),
        ));
    }
    let v = spec.timing.vector_cycles_per_element;
    if !(v.is_finite() && v >= 0.0) {
        return Err(invalid(
            "timing.vector_cycles_per_element",
            format!("is {v}; give a finite value of at least 0"),
        ));
    }
    Ok(())
}

fn memory(spec: &TargetSpec) -> Result<(), TargetError> {
    let m = &spec.memory;
    if m.sram_start >= m.sram_end {
        return Err(invalid(
            "memory.sram_end",
            format!(
                "{:#x} is not above sram_start {:#x}",
                m.sram_end, m.sram_start
            ),
        ));
    }
    if m.loader_limit <= m.sram_start || m.loader_limit > m.sram_end {
        return Err(invalid(
            "memory.loader_limit",
            format!(
                "{:#x} is not inside SRAM ({:#x}, {:#x}]",
                m.loader_limit, m.sram_start, m.sram_end
            ),
        ));
    }
    if m.regions.is_empty() {
        return Err(invalid("memory.regions", "is empty; list at least one"));
    }
    let mut previous_end = m.sram_start;
    for r in &m.regions {
        let key = format!("memory.regions.{}", r.name);
        if r.start >= r.end || r.start < previous_end || r.end > m.sram_end {
            return Err(invalid(
                key,
                format!(
                    "[{:#x}, {:#x}) is empty, out of address order, overlaps the previous region or leaves SRAM",
                    r.start, r.end
                ),
            ));
        }
        positive(r.element_bytes.into(), &format!("{key}.element_bytes"))?;
        previous_end = r.end;
    }
    if !m.regions.iter().any(|r| r.executable) {
        return Err(invalid(
            "memory.regions",
            "has no executable region; code and exchange rows need one",
        ));
    }
    for class in MemoryClass::ALL {
        let entries: Vec<_> = m.classes.iter().filter(|c| c.class == class).collect();
        let [entry] = entries.as_slice() else {
            return Err(invalid(
                "memory.classes",
                format!(
                    "lists {class} {} times; list every class once",
                    entries.len()
                ),
            ));
        };
        if entry.ranges.is_empty() {
            return Err(invalid(
                format!("memory.classes.{class}"),
                "has no ranges; give at least one",
            ));
        }
        for &(start, end) in &entry.ranges {
            let inside = m.regions.iter().any(|r| start < r.end && r.start < end);
            if start >= end || !inside {
                return Err(invalid(
                    format!("memory.classes.{class}"),
                    format!("range [{start:#x}, {end:#x}) is empty or outside every region"),
                ));
            }
        }
    }
    if !m.operand_alignment.is_power_of_two() {
        return Err(invalid(
            "memory.operand_alignment",
            format!("is {}; give a power of two", m.operand_alignment),
        ));
    }
    Ok(())
}
