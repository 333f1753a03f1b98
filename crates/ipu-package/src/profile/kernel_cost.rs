//! The cycles of a GEMM kernel call, and the check of the package's AMP
//! programs against them.
//!
//! GEMM calls are costed by `ipu_kernels::estimate_cycles` on the variant
//! described by the kernel's own metadata ([`KernelCosts`]), and
//! [`check_kernels`] holds every AMP program in the package's objects to the
//! same cost model: `ipu_kernels::program_cycles` of the program must equal
//! the closed form and the cycles recorded in `kernel.json`.

use ipu_kernels::{
    AmpModel, CycleEstimate, KernelMetadata, Variant, estimate_cycles, program_cycles,
    programs_from_object,
};
use serde::{Deserialize, Serialize};

use super::ProfileError;
use crate::package::{Package, PackageKernel};
use crate::program::{GemmEntry, KernelId, Program};

/// The variant a kernel of a package was compiled from: rebuilt from its
/// `kernel.json` with `model` (the AMP model of the package's target), and
/// required to have the key recorded there.
pub fn kernel_variant(kernel: &PackageKernel, model: &AmpModel) -> Result<Variant, ProfileError> {
    let meta: KernelMetadata =
        serde_json::from_str(&kernel.metadata).map_err(|source| ProfileError::KernelMetadata {
            kernel: kernel.name.clone(),
            source,
        })?;
    let variant = Variant::new(
        &meta.shape,
        meta.k,
        meta.c,
        meta.r_small,
        meta.r_large,
        model,
    )
    .map_err(|source| ProfileError::Variant {
        kernel: kernel.name.clone(),
        source,
    })?;
    if variant.key() != meta.variant_key {
        return Err(ProfileError::VariantKey {
            kernel: kernel.name.clone(),
        });
    }
    Ok(variant)
}

/// The cost of each entry of each GEMM kernel of a package, from the
/// kernel cost model on the variant its metadata describes.
#[derive(Clone, Debug)]
pub struct KernelCosts {
    /// Per kernel (in program order): the variant and its four entries'
    /// estimates, `[small initialise, small accumulate, large initialise,
    /// large accumulate]`.
    kernels: Vec<(Variant, [CycleEstimate; 4])>,
}

impl KernelCosts {
    /// The costs of `package`'s kernels: each kernel's variant is rebuilt
    /// from its `kernel.json` with the AMP model of the package's target,
    /// and must have the key recorded there.
    pub fn new(package: &Package) -> Result<KernelCosts, ProfileError> {
        let model = AmpModel::new(&package.target);
        let program: &Program = &package.program;
        if package.kernels.len() != program.kernels.len() {
            return Err(ProfileError::KernelCount {
                objects: package.kernels.len(),
                specs: program.kernels.len(),
            });
        }
        let mut kernels = Vec::with_capacity(package.kernels.len());
        for k in &package.kernels {
            let variant = kernel_variant(k, &model)?;
            let estimates = std::array::from_fn(|i| {
                let (size, mode) = GemmEntry::from_index(i).parts();
                estimate_cycles(&variant, variant.rows(size), mode)
            });
            kernels.push((variant, estimates));
        }
        Ok(KernelCosts { kernels })
    }

    /// The variant of `kernel`.
    pub fn variant(&self, kernel: KernelId) -> Option<&Variant> {
        self.kernels.get(kernel.as_u32() as usize).map(|(v, _)| v)
    }

    /// The estimate of one call of `kernel` through `entry` on `rows` rows.
    pub fn call(
        &self,
        kernel: KernelId,
        entry: GemmEntry,
        rows: u32,
    ) -> Result<CycleEstimate, ProfileError> {
        let (variant, estimates) =
            self.kernels
                .get(kernel.as_u32() as usize)
                .ok_or(ProfileError::MissingKernel {
                    kernel,
                    kernels: self.kernels.len(),
                })?;
        let (size, _) = entry.parts();
        let expected = variant.rows(size);
        if rows != expected {
            return Err(ProfileError::GemmRows {
                kernel,
                rows,
                expected,
            });
        }
        Ok(estimates[entry.index()])
    }

    /// Every kernel's variant and entry estimates, in program order.
    pub fn iter(&self) -> impl Iterator<Item = (&Variant, &[CycleEstimate; 4])> + '_ {
        self.kernels.iter().map(|(v, e)| (v, e))
    }
}

/// How the AMP programs of a package compare with the kernel cost model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCheck {
    /// Entry programs compared.
    pub entries: usize,
    /// Entries whose program cycles, closed-form estimate and recorded
    /// metadata cycles are all equal.
    pub agreeing: usize,
    /// Every disagreement: `(kernel, entry symbol, program cycles, closed
    /// form, metadata)`.
    pub disagreements: Vec<(String, String, u64, u64, u64)>,
}

/// Holds every AMP program in the package's kernel objects to the kernel
/// cost model: for each entry, the cycles counted from the program's ops
/// (`ipu_kernels::program_cycles`), the closed form
/// (`ipu_kernels::estimate_cycles`, which the profile uses) and the cycles
/// recorded in `kernel.json` must be equal.
pub fn check_kernels(package: &Package, costs: &KernelCosts) -> Result<KernelCheck, ProfileError> {
    let mut check = KernelCheck::default();
    for (k, (variant, estimates)) in package.kernels.iter().zip(&costs.kernels) {
        let meta: KernelMetadata =
            serde_json::from_str(&k.metadata).map_err(|source| ProfileError::KernelMetadata {
                kernel: k.name.clone(),
                source,
            })?;
        let programs =
            programs_from_object(&k.object).map_err(|source| ProfileError::KernelObject {
                kernel: k.name.clone(),
                source,
            })?;
        for (i, symbol) in k.entries.iter().enumerate() {
            let program = programs
                .iter()
                .find(|(s, _)| s == symbol)
                .map(|(_, p)| p)
                .ok_or_else(|| ProfileError::MissingEntry {
                    kernel: k.name.clone(),
                    symbol: symbol.clone(),
                })?;
            let counted = program_cycles(variant, program).cycles;
            let closed = estimates[i].cycles;
            let recorded = meta
                .entries
                .iter()
                .find(|e| &e.symbol == symbol)
                .map_or(u64::MAX, |e| e.cycles);
            check.entries += 1;
            if counted == closed && closed == recorded {
                check.agreeing += 1;
            } else {
                check.disagreements.push((
                    k.name.clone(),
                    symbol.clone(),
                    counted,
                    closed,
                    recorded,
                ));
            }
        }
    }
    Ok(check)
}
