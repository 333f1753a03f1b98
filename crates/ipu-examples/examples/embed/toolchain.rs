//! The example's kernel toolchain: each entry's AMP program built with
//! `build_program` and packed with `assemble_kernel` under an identity of
//! its own (so its kernels are keyed apart from the host toolchain's), and
//! a copy with a bug (one program stores no partials on its last worker).

use ipu_kernels::{
    AmpOp, CompiledKernel, KernelError, Toolchain, Variant, assemble_kernel, build_program,
};
use ipu_target::Target;

/// Builds every entry's program and packs them into an object.
#[derive(Default)]
pub struct ProgramToolchain {
    /// Whether the first entry's program forgets to store its last
    /// worker's partials: a toolchain with a bug, for the kernel check to
    /// catch.
    pub forget_a_store: bool,
}

impl Toolchain for ProgramToolchain {
    fn identity(&self) -> String {
        let bug = if self.forget_a_store {
            " forgets-a-store"
        } else {
            ""
        };
        format!("embed-example-programs 1{bug}")
    }

    fn compile(&self, variant: &Variant, target: &Target) -> Result<CompiledKernel, KernelError> {
        let mut programs = variant
            .entry_points()
            .iter()
            .map(|entry| build_program(variant, entry.rows, entry.mode))
            .collect::<Result<Vec<_>, _>>()?;
        if self.forget_a_store
            && let Some(worker) = programs
                .first_mut()
                .and_then(|p| p.groups.last_mut())
                .and_then(|g| g.passes.last_mut())
                .and_then(|p| p.workers.last_mut())
        {
            worker
                .ops
                .retain(|op| !matches!(op, AmpOp::StorePartials { .. }));
        }
        assemble_kernel(variant, target, self, &programs)
    }
}
