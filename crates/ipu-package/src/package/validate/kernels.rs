//! Kernels: one compiled kernel per spec of the program, whose object
//! parses and holds, for each of its four entries (four distinct
//! symbols), a program that the
//! independent kernel checker (`ipu_kernels::check_program`) accepts for
//! the spec's shape, the entry's rows and mode. A program that passes
//! touches exactly its operands' spans and does exactly `rows × inner ×
//! columns` multiply-accumulates, so the GEMM calls can be checked from
//! the headers alone.

use ipu_kernels::{
    AmpModel, GemmShape, Mode, ProgramHeader, RowSize, Variant, check_program, programs_from_object,
};

use super::{Errors, ValidationError};
use crate::package::Package;
use crate::program::{GemmEntry, GemmKernel};

/// One entry's program, as the step checks need it.
#[derive(Clone, Copy, Debug)]
pub(super) struct EntryProgram {
    /// The program's header.
    pub header: ProgramHeader,
    /// The bytes of its code block in the code-size model, which a tile
    /// calling the entry holds in its support memory.
    pub code_bytes: u64,
}

/// Per kernel spec, each entry's program (indexed like
/// `PackageKernel::entries`), when it checked.
pub(super) type KernelPrograms = Vec<[Option<EntryProgram>; 4]>;

/// The rows and mode of entry `index` of `spec`.
fn entry(spec: &GemmKernel, index: usize) -> (u32, Mode) {
    let (size, mode) = GemmEntry::from_index(index).parts();
    let rows = match size {
        RowSize::Large => spec.rows_large,
        RowSize::Small => spec.rows_small,
    };
    (rows, mode)
}

/// Checks the kernels against the program's specs.
pub(super) fn check(package: &Package, errors: &mut Errors) -> KernelPrograms {
    let specs = package.program.kernels.values();
    let mut out: KernelPrograms = vec![[None; 4]; specs.len()];
    if specs.len() != package.kernels.len() {
        errors.push(ValidationError::KernelCount {
            specs: specs.len(),
            compiled: package.kernels.len(),
        });
        return out;
    }
    let model = AmpModel::new(&package.target);
    for ((spec, k), headers) in specs.iter().zip(&package.kernels).zip(&mut out) {
        if errors.full() {
            break;
        }
        let programs = match programs_from_object(&k.object) {
            Ok(p) => p,
            Err(source) => {
                errors.push(ValidationError::KernelObject {
                    kernel: k.name.clone(),
                    source,
                });
                continue;
            }
        };
        for (index, symbol) in k.entries.iter().enumerate() {
            if let Some(first) = k.entries[..index].iter().position(|s| s == symbol) {
                errors.push(ValidationError::KernelEntryRepeated {
                    kernel: k.name.clone(),
                    symbol: symbol.clone(),
                    first,
                    second: index,
                });
                continue;
            }
            let Some((_, program)) = programs.iter().find(|(name, _)| name == symbol) else {
                errors.push(ValidationError::KernelEntry {
                    kernel: k.name.clone(),
                    symbol: symbol.clone(),
                });
                continue;
            };
            let (rows, mode) = entry(spec, index);
            let h = &program.header;
            let shape = GemmShape {
                rows: spec.rows_large,
                inner: spec.inner,
                columns: spec.columns,
                left: spec.left,
                left_order: spec.left_order,
                right: spec.right,
                output: spec.output,
                output_order: h.output_order,
                right_class: spec.right_class,
            };
            let variant =
                match Variant::new(&shape, h.k, h.c, spec.rows_small, spec.rows_large, &model) {
                    Ok(v) => v,
                    Err(source) => {
                        errors.push(ValidationError::KernelVariant {
                            kernel: k.name.clone(),
                            symbol: symbol.clone(),
                            source,
                        });
                        continue;
                    }
                };
            match check_program(&variant, rows, mode, program) {
                Ok(()) => {
                    headers[index] = Some(EntryProgram {
                        header: *h,
                        code_bytes: program
                            .code_instructions(&model)
                            .saturating_mul(u64::from(model.instruction_bytes)),
                    })
                }
                Err(problems) => errors.push(ValidationError::KernelCheck {
                    kernel: k.name.clone(),
                    symbol: symbol.clone(),
                    problems,
                }),
            }
        }
    }
    out
}
