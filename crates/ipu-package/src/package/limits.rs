//! The most work and memory a package read from disk may ask for.
//!
//! A package's digests are not keyed, so anyone can edit one and recompute
//! them; what the files say is then only as good as [`Package::validate`]
//! makes it. Besides contradictions, validation refuses packages that ask
//! for more than these limits, before anything is allocated for them or
//! run: a manifest naming millions of tiles, a repeat of 2^32 − 1
//! iterations or forty nested repeats would otherwise exhaust memory or
//! run for days. The defaults admit SigLIP so400m at batch 3 on a whole
//! C600 with room to spare; `docs/FORMAT.md` lists them.
//!
//! [`Package::validate`]: super::Package::validate

/// Bounds on what a package may ask for. [`Limits::default`] is what
/// [`Package::read`](super::Package::read) applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest `manifest.json`, in bytes.
    pub max_manifest_bytes: u64,
    /// The largest file the manifest may list, in bytes.
    pub max_file_bytes: u64,
    /// The most bytes all listed files may hold together.
    pub max_package_bytes: u64,
    /// The most files the manifest may list.
    pub max_files: usize,
    /// The most tiles (a package never has more than its target, which is
    /// itself read from the package).
    pub max_tiles: u32,
    /// The most bytes of tile memory a run holds: tiles × the target's
    /// SRAM bytes.
    pub max_image_bytes: u64,
    /// The most buffers the program may have.
    pub max_buffers: usize,
    /// The most tile shards all buffer types may describe together (each
    /// type resolves a table per tile when it is read).
    pub max_buffer_tiles: u64,
    /// The deepest nesting of repeats.
    pub max_repeat_depth: usize,
    /// The most iterations of one repeat.
    pub max_repeat_count: u32,
    /// The most step executions of a run: every compute and exchange step
    /// and every repeat iteration, counted once per time it runs.
    pub max_step_executions: u64,
    /// The most codelet calls of a run, each counted once per time it
    /// runs (validation checks each call once per buffer it may read).
    pub max_codelet_calls: u64,
    /// The most compute elements of a run: multiply-accumulates of GEMMs,
    /// elements of the element-wise codelets, scores × head columns of
    /// attention, bytes zeroed, each counted once per time it runs.
    pub max_compute_elements: u64,
    /// The most words a run's exchanges and on-tile copies move, counted
    /// once per time they run.
    pub max_exchange_words: u64,
    /// The most tensors plus ops the stored fixture may expand to.
    pub max_fixture_items: u64,
    /// The most elements the stored fixture's inputs, weights and outputs
    /// may hold together (a run generates, holds and compares them).
    pub max_fixture_elements: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_manifest_bytes: 16 << 20,
            max_file_bytes: 1 << 30,
            max_package_bytes: 2 << 30,
            max_files: 1 << 16,
            max_tiles: 1 << 14,
            max_image_bytes: 2 << 30,
            max_buffers: 1 << 20,
            max_buffer_tiles: 1 << 26,
            max_repeat_depth: 8,
            max_repeat_count: 1 << 16,
            max_step_executions: 1 << 24,
            max_codelet_calls: 1 << 26,
            max_compute_elements: 1 << 44,
            max_exchange_words: 1 << 38,
            max_fixture_items: 1 << 20,
            max_fixture_elements: 1 << 32,
        }
    }
}
