//! The check of a compiled kernel against the variant it is for, whoever
//! made it: a toolchain's output and a store's entry are both held to it
//! before anything uses them.
//!
//! What it checks, from the variant, the target, the key and the kernel
//! alone, collecting every error:
//!
//! 1. the metadata is this crate's format and describes exactly the
//!    variant: its key ([`cache_key`](crate::cache_key)), name, variant key,
//!    program format, target name, shape, AMP instruction, blocks, row
//!    counts and left read tail, and its entries are the variant's entry
//!    points in order (symbol, mode, size, rows) with the cost model's
//!    cycles and MACs (which the package's cycle estimate relies on);
//! 2. the object is the size and SHA-256 the metadata records;
//! 3. the object parses ([`programs_from_object`]) and holds exactly one
//!    program per entry symbol and no other;
//! 4. every entry's program passes the independent program checker
//!    ([`check_program`]) for the variant, the entry's rows and its mode.
//!
//! So another variant's kernel, a kernel for another key, an object
//! swapped under correct-looking metadata, or a wrong program is refused,
//! whatever digests were made to match.

use serde::Serialize;
use sha2::{Digest, Sha256};

use ipu_target::Target;

use crate::object::utilisation_ppm;
use crate::variant::hex;
use crate::{
    CheckError, CompiledKernel, KERNEL_METADATA_VERSION, KernelError, KernelKey, Variant,
    check_program, estimate_cycles, programs_from_object,
};

/// One thing wrong with a compiled kernel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelCheckError {
    /// A stored value does not decode into metadata and an object.
    #[error("the entry does not decode: {0}")]
    Undecodable(#[source] KernelError),
    /// A metadata field differs from what the variant, target or key
    /// imply.
    #[error("the metadata's {field} is {found}, expected {expected}")]
    Metadata {
        /// The field.
        field: &'static str,
        /// What the variant, target or key imply.
        expected: String,
        /// What the metadata says.
        found: String,
    },
    /// The metadata lists another number of entries than the variant has.
    #[error("the metadata lists {found} entries, the variant has {expected}")]
    EntryCount {
        /// The variant's entries.
        expected: usize,
        /// The metadata's entries.
        found: usize,
    },
    /// A field of one of the metadata's entries differs from the variant's
    /// entry point.
    #[error("the metadata's entry {index} has {field} {found}, expected {expected}")]
    Entry {
        /// The entry's index.
        index: usize,
        /// The field.
        field: &'static str,
        /// What the variant implies.
        expected: String,
        /// What the metadata says.
        found: String,
    },
    /// The object is not the size the metadata records.
    #[error("the object has {found} bytes, the metadata records {recorded}")]
    ObjectSize {
        /// Bytes recorded.
        recorded: u64,
        /// Bytes found.
        found: u64,
    },
    /// The object's SHA-256 is not the one the metadata records.
    #[error("the object's sha256 is {found}, the metadata records {recorded}")]
    ObjectDigest {
        /// The digest recorded.
        recorded: String,
        /// The object's digest.
        found: String,
    },
    /// The object does not parse.
    #[error("the object does not parse: {0}")]
    Object(#[source] KernelError),
    /// The object has no program for an entry.
    #[error("the object has no program for entry {symbol}")]
    MissingProgram {
        /// The entry symbol.
        symbol: String,
    },
    /// The object has a program that is no entry of the variant, or a
    /// second one for an entry.
    #[error("the object's program {symbol} is no entry of the variant or repeats one")]
    ExtraProgram {
        /// The program's symbol.
        symbol: String,
    },
    /// An entry's program fails the program checker.
    #[error(
        "the program of entry {symbol} fails the program checker with {} error(s); first: {}",
        errors.len(),
        errors.first().map(ToString::to_string).unwrap_or_default()
    )]
    Program {
        /// The entry symbol.
        symbol: String,
        /// Every error the program checker found.
        errors: Vec<CheckError>,
    },
}

/// Checks `kernel` as the kernel of `variant` for `target`, stored under
/// `key` (see the module header).
pub fn check_kernel(
    variant: &Variant,
    target: &Target,
    key: &KernelKey,
    kernel: &CompiledKernel,
) -> Result<(), Vec<KernelCheckError>> {
    let mut errors = Vec::new();
    check_metadata(variant, target, key, kernel, &mut errors);
    match programs_from_object(&kernel.object) {
        Err(e) => errors.push(KernelCheckError::Object(e)),
        Ok(programs) => {
            let entries = variant.entry_points();
            for (i, (symbol, _)) in programs.iter().enumerate() {
                let known = entries.iter().any(|e| &e.symbol == symbol);
                let repeated = programs[..i].iter().any(|(s, _)| s == symbol);
                if !known || repeated {
                    errors.push(KernelCheckError::ExtraProgram {
                        symbol: symbol.clone(),
                    });
                }
            }
            for e in &entries {
                match programs.iter().find(|(s, _)| *s == e.symbol) {
                    None => errors.push(KernelCheckError::MissingProgram {
                        symbol: e.symbol.clone(),
                    }),
                    Some((_, program)) => {
                        if let Err(found) = check_program(variant, e.rows, e.mode, program) {
                            errors.push(KernelCheckError::Program {
                                symbol: e.symbol.clone(),
                                errors: found,
                            });
                        }
                    }
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// A value as the metadata's JSON writes it, for error messages.
fn json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Rule 1 and 2 of the module header.
fn check_metadata(
    variant: &Variant,
    target: &Target,
    key: &KernelKey,
    kernel: &CompiledKernel,
    errors: &mut Vec<KernelCheckError>,
) {
    let m = &kernel.metadata;
    let mut field = |field: &'static str, expected: String, found: String| {
        if expected != found {
            errors.push(KernelCheckError::Metadata {
                field,
                expected,
                found,
            });
        }
    };
    let shape = variant.shape();
    field(
        "format_version",
        KERNEL_METADATA_VERSION.to_string(),
        m.format_version.to_string(),
    );
    field(
        "program_format_version",
        variant.program_format_version().to_string(),
        m.program_format_version.to_string(),
    );
    field("input_hash", key.to_string(), m.input_hash.clone());
    field("name", variant.name().to_owned(), m.name.clone());
    field(
        "variant_key",
        variant.key().to_owned(),
        m.variant_key.clone(),
    );
    field("target", target.name().to_owned(), m.target.clone());
    field("shape", json(shape), json(&m.shape));
    field(
        "instruction",
        variant.arithmetic().instruction().to_owned(),
        m.instruction.clone(),
    );
    field("k", variant.k().to_string(), m.k.to_string());
    field("c", variant.c().to_string(), m.c.to_string());
    field(
        "r_small",
        variant.r_small().to_string(),
        m.r_small.to_string(),
    );
    field(
        "r_large",
        variant.r_large().to_string(),
        m.r_large.to_string(),
    );
    field(
        "left_tail_bytes",
        variant.left_tail_bytes().to_string(),
        m.left_tail_bytes.to_string(),
    );
    let entries = variant.entry_points();
    if entries.len() != m.entries.len() {
        errors.push(KernelCheckError::EntryCount {
            expected: entries.len(),
            found: m.entries.len(),
        });
    }
    for (index, (e, found)) in entries.iter().zip(&m.entries).enumerate() {
        let estimate = estimate_cycles(variant, e.rows, e.mode);
        let mut field = |field: &'static str, expected: String, found: String| {
            if expected != found {
                errors.push(KernelCheckError::Entry {
                    index,
                    field,
                    expected,
                    found,
                });
            }
        };
        field("symbol", e.symbol.clone(), found.symbol.clone());
        field("mode", json(&e.mode), json(&found.mode));
        field("size", json(&e.size), json(&found.size));
        field("rows", e.rows.to_string(), found.rows.to_string());
        field(
            "cycles",
            estimate.cycles.to_string(),
            found.cycles.to_string(),
        );
        field("macs", estimate.macs.to_string(), found.macs.to_string());
        field(
            "utilisation_ppm",
            utilisation_ppm(&estimate).to_string(),
            found.utilisation_ppm.to_string(),
        );
    }
    let size = kernel.object.len() as u64;
    if size != m.object_bytes {
        errors.push(KernelCheckError::ObjectSize {
            recorded: m.object_bytes,
            found: size,
        });
    }
    let digest = hex(&Sha256::digest(&kernel.object));
    if digest != m.object_sha256 {
        errors.push(KernelCheckError::ObjectDigest {
            recorded: m.object_sha256.clone(),
            found: digest,
        });
    }
}
