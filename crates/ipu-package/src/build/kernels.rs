//! Kernel planning and compilation: one AMP variant per GEMM kernel spec
//! of the program, taken from the build's kernel store or compiled through
//! its toolchain, and checked whichever stage it came from.

use ipu_kernels::{AmpModel, Mode, RowSize, Variant, fetch_kernel};
use ipu_target::Target;
use rayon::prelude::*;

use super::{BuildError, Stages};
use crate::package::PackageKernel;
use crate::program::Program;

/// One AMP variant per kernel spec of the program, for the target's AMP.
pub(super) fn plan_kernels(program: &Program, target: &Target) -> Result<Vec<Variant>, BuildError> {
    let config = crate::plan::kernel_plan_config(AmpModel::new(target));
    program
        .kernels
        .values()
        .iter()
        .map(|k| {
            k.plan(&config).map_err(|source| BuildError::Kernel {
                name: format!("{k:?}"),
                source,
            })
        })
        .collect()
}

/// Every variant's object and metadata, from the kernel store or
/// compiled by the toolchain (and then stored); checked either way
/// (`ipu_kernels::check_kernel`: the metadata describes the variant and
/// the object, and every entry's program passes `check_program`), so a
/// wrong kernel from either stage is refused with its own error.
pub(super) fn compile_kernels(
    variants: &[Variant],
    target: &Target,
    stages: &Stages,
) -> Result<Vec<PackageKernel>, BuildError> {
    let toolchain = stages.toolchain.as_ref();
    let store = stages.kernel_store.as_ref();
    let results: Vec<Result<PackageKernel, BuildError>> = variants
        .par_iter()
        .map(|v| {
            let kernel_error = |source| BuildError::Kernel {
                name: v.name().to_owned(),
                source,
            };
            let fetched = fetch_kernel(v, target, toolchain, store).map_err(kernel_error)?;
            let mut entries: [String; 4] = Default::default();
            for e in v.entry_points() {
                let index = usize::from(e.size == RowSize::Large) * 2
                    + usize::from(e.mode == Mode::Accumulate);
                entries[index] = e.symbol;
            }
            let k = fetched.kernel;
            // `kernel.json` as the disk cache once wrote it.
            let metadata = serde_json::to_string_pretty(&k.metadata)
                .map_err(|source| kernel_error(ipu_kernels::KernelError::Metadata { source }))?;
            Ok(PackageKernel {
                name: format!("{}_{}", v.name(), &fetched.key.as_str()[..8]),
                entries,
                object: k.object,
                metadata,
            })
        })
        .collect();
    results.into_iter().collect()
}
