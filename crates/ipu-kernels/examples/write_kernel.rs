//! Fetches the seed's SigLIP variants through the kernel cache at
//! `$IPU_KERNEL_CACHE` (or the default root), compiling those it does not
//! hold, and writes each object to `DIR/<variant>.o` (default
//! `out/kernels`), so the objects can be inspected with `readelf -h`.

use ipu_kernels::siglip::seed_variants;
use ipu_kernels::{AmpModel, HostToolchain, KernelCache, fetch_kernel};
use ipu_target::Target;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args_os()
        .nth(1)
        .map_or_else(|| "out/kernels".into(), std::path::PathBuf::from);
    std::fs::create_dir_all(&out)?;
    let cache = KernelCache::from_env()?;
    for v in seed_variants(&AmpModel::ipu21())? {
        let k = fetch_kernel(&v, Target::ipu21(), &HostToolchain, &cache)?;
        let object = out.join(format!("{}.o", v.name()));
        std::fs::write(&object, &k.kernel.object)?;
        println!(
            "{} {}",
            cache.entry_path(&k.key).display(),
            object.display()
        );
    }
    Ok(())
}
