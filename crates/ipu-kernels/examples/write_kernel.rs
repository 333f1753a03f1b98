//! Compiles the seed's first SigLIP variant through the kernel cache at
//! `$IPU_KERNEL_CACHE` (or the default root) and prints the object and
//! metadata paths, so the object can be inspected with `readelf -h`.

use ipu_kernels::siglip::seed_variants;
use ipu_kernels::{AmpModel, HostToolchain, KernelCache};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cache = KernelCache::from_env()?;
    for v in seed_variants(&AmpModel::ipu21())? {
        let k = cache.get_or_compile(&v, &HostToolchain)?;
        println!("{} {}", k.object_path.display(), k.metadata_path.display());
    }
    Ok(())
}
