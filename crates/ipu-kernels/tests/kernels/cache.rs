//! Kernel stores and fetching through them: miss then hit, keys that change
//! with every input, damaged files of the disk cache rebuilt (truncated,
//! altered, another key's, files of the wrong kind), wrong values a store
//! returns and wrong kernels a toolchain compiles refused with their own
//! errors, a foreign toolchain's error kept, concurrent builders, the root
//! chosen from the environment, and the seed's log lines.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ipu_kernels::{
    AmpOp, CacheOutcome, CompiledKernel, HostToolchain, KernelCache, KernelCheckError, KernelError,
    KernelKey, KernelStore, MemoryStore, Toolchain, Variant, assemble_kernel, build_program,
    cache_key, fetch_kernel,
};
use ipu_target::Target;

use crate::support::seed_variants;

fn target() -> &'static Target {
    Target::ipu21()
}

#[test]
fn miss_then_hit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = KernelCache::open(dir.path()).expect("opens");
    let v = seed_variants().remove(0);
    let first = fetch_kernel(&v, target(), &HostToolchain, &cache).expect("compiles");
    assert_eq!(first.outcome, CacheOutcome::Miss);
    let key = cache_key(&v, target(), &HostToolchain);
    assert_eq!(first.key, key);
    assert!(cache.entry_path(&key).is_file());
    assert_eq!(
        cache.entry_path(&key),
        dir.path().join(format!("{key}.kernel"))
    );
    assert_eq!(first.kernel.metadata.input_hash, key.as_str());
    assert_eq!(first.kernel.metadata.name, v.name());
    let second = fetch_kernel(&v, target(), &HostToolchain, &cache).expect("hits");
    assert_eq!(second.outcome, CacheOutcome::Hit);
    assert_eq!(second.kernel, first.kernel);
    // The store holds exactly the kernel's value.
    assert_eq!(
        cache.get(&key).expect("reads"),
        Some(first.kernel.to_bytes().expect("encodes"))
    );
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("the root")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

/// A toolchain that compiles as the host one, under another identity.
struct Renamed(&'static str);

impl Toolchain for Renamed {
    fn identity(&self) -> String {
        self.0.to_owned()
    }
    fn compile(&self, variant: &Variant, target: &Target) -> Result<CompiledKernel, KernelError> {
        let programs = variant
            .entry_points()
            .iter()
            .map(|e| build_program(variant, e.rows, e.mode))
            .collect::<Result<Vec<_>, _>>()?;
        assemble_kernel(variant, target, self, &programs)
    }
}

#[test]
fn keys_change_with_every_input() {
    let variants = seed_variants();
    let m64 = Target::from_file(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../device/ipu21-m64.toml"),
    )
    .expect("the 64-tile device reads");
    let keys: Vec<KernelKey> = variants
        .iter()
        .flat_map(|v| {
            [
                cache_key(v, target(), &Renamed("a")),
                cache_key(v, target(), &Renamed("b")),
                cache_key(v, target(), &HostToolchain),
                cache_key(v, &m64, &HostToolchain),
            ]
        })
        .collect();
    let mut unique = keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), keys.len());
    assert!(
        keys.iter()
            .all(|k| k.as_str().len() == 64 && k.as_str().bytes().all(|b| b.is_ascii_hexdigit()))
    );
    assert_eq!(
        cache_key(&variants[0], target(), &Renamed("a")),
        cache_key(&variants[0], target(), &Renamed("a"))
    );
}

/// Fetches a variant into a fresh disk cache, applies `damage` to its file
/// (given the cache), and checks that the next fetch compiles the same
/// kernel again and the one after hits.
fn corrupt_and_rebuild(damage: impl Fn(&KernelCache, &Path)) {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = KernelCache::open(dir.path()).expect("opens");
    let v = seed_variants().remove(3);
    let good = fetch_kernel(&v, target(), &HostToolchain, &cache).expect("compiles");
    damage(&cache, &cache.entry_path(&good.key));
    let again = fetch_kernel(&v, target(), &HostToolchain, &cache).expect("rebuilds");
    assert_eq!(again.outcome, CacheOutcome::Miss);
    assert_eq!(again.kernel, good.kernel);
    let third = fetch_kernel(&v, target(), &HostToolchain, &cache).expect("hits");
    assert_eq!(third.outcome, CacheOutcome::Hit);
}

#[test]
fn a_truncated_file_is_rebuilt() {
    corrupt_and_rebuild(|_, file| {
        let bytes = std::fs::read(file).expect("read");
        std::fs::write(file, &bytes[..bytes.len() / 3]).expect("truncate");
    });
    corrupt_and_rebuild(|_, file| std::fs::write(file, b"").expect("empty"));
}

#[test]
fn an_altered_byte_is_rebuilt() {
    for at in [0, 9, 75, 100, 2000] {
        corrupt_and_rebuild(|_, file| {
            let mut bytes = std::fs::read(file).expect("read");
            let at = at.min(bytes.len() - 1);
            bytes[at] ^= 1;
            std::fs::write(file, &bytes).expect("write");
        });
    }
}

#[test]
fn a_missing_file_is_rebuilt() {
    corrupt_and_rebuild(|_, file| std::fs::remove_file(file).expect("remove"));
}

#[test]
fn a_directory_or_link_where_the_file_belongs_is_rebuilt() {
    corrupt_and_rebuild(|_, file| {
        std::fs::remove_file(file).expect("remove");
        std::fs::create_dir_all(file.join("inside")).expect("a directory in its place");
    });
    corrupt_and_rebuild(|_, file| {
        std::fs::remove_file(file).expect("remove");
        std::os::unix::fs::symlink("/dev/null", file).expect("a link in its place");
    });
}

#[test]
fn another_keys_file_copied_in_is_rebuilt() {
    corrupt_and_rebuild(|cache, file| {
        let other = seed_variants().remove(0);
        let other = fetch_kernel(&other, target(), &HostToolchain, cache).expect("compiles");
        std::fs::copy(cache.entry_path(&other.key), file).expect("copy");
    });
}

/// The key and value of variant `index` compiled by the host toolchain.
fn entry(index: usize) -> (Variant, KernelKey, CompiledKernel) {
    let v = seed_variants().remove(index);
    let store = MemoryStore::new();
    let fetched = fetch_kernel(&v, target(), &HostToolchain, &store).expect("compiles");
    (v, fetched.key, fetched.kernel)
}

/// What a fetch of `variant` makes of `value` held under its key.
fn fetch_stored(variant: &Variant, key: &KernelKey, value: &[u8]) -> Vec<KernelCheckError> {
    let store = MemoryStore::new();
    store.put(key, value).expect("stores");
    match fetch_kernel(variant, target(), &HostToolchain, &store) {
        Err(KernelError::StoredRejected {
            store,
            key: rejected,
            errors,
            ..
        }) => {
            assert_eq!(store, "memory");
            assert_eq!(&rejected, key);
            assert!(!errors.is_empty());
            errors
        }
        other => panic!("a wrong stored value was not refused: {other:?}"),
    }
}

#[test]
fn a_wrong_value_from_a_store_is_refused() {
    let (v, key, good) = entry(3);
    // Bytes that are no entry at all.
    let errors = fetch_stored(&v, &key, b"not a kernel");
    assert!(matches!(errors[..], [KernelCheckError::Undecodable(_)]));
    // A sound frame around metadata that is not JSON: the JSON reader's
    // error is kept as the cause.
    let mut framed = b"IPUKERN\0".to_vec();
    framed.extend_from_slice(&1u16.to_le_bytes());
    framed.extend_from_slice(&4u32.to_le_bytes());
    framed.extend_from_slice(b"{,}]");
    let errors = fetch_stored(&v, &key, &framed);
    match &errors[..] {
        [KernelCheckError::Undecodable(e @ KernelError::EntryMetadata { .. })] => {
            let cause = std::error::Error::source(e).expect("a cause");
            assert!(cause.is::<serde_json::Error>(), "{e}");
            assert!(e.to_string().contains("its metadata does not parse"), "{e}");
        }
        other => panic!("not an entry metadata error: {other:?}"),
    }
    // One byte of the object altered, the metadata left.
    let mut altered = good.clone();
    let middle = altered.object.len() / 2;
    altered.object[middle] ^= 1;
    let errors = fetch_stored(&v, &key, &altered.to_bytes().expect("encodes"));
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, KernelCheckError::ObjectDigest { .. })),
        "{errors:?}"
    );
    // Another variant's whole entry under this key.
    let (_, _, other) = entry(0);
    let errors = fetch_stored(&v, &key, &other.to_bytes().expect("encodes"));
    assert!(
        errors.iter().any(|e| matches!(
            e,
            KernelCheckError::Metadata {
                field: "variant_key",
                ..
            }
        )),
        "{errors:?}"
    );
    // Another variant's object under this entry's metadata, with the
    // object's size and digest made to match: its programs are not the
    // variant's entries.
    let mut swapped = good.clone();
    swapped.object = other.object.clone();
    swapped.metadata.object_bytes = other.metadata.object_bytes;
    swapped.metadata.object_sha256 = other.metadata.object_sha256.clone();
    let errors = fetch_stored(&v, &key, &swapped.to_bytes().expect("encodes"));
    assert!(
        errors.iter().all(|e| matches!(
            e,
            KernelCheckError::ExtraProgram { .. } | KernelCheckError::MissingProgram { .. }
        )),
        "{errors:?}"
    );
    // Metadata whose cycles are not the cost model's.
    let mut cycles = good.clone();
    cycles.metadata.entries[1].cycles += 1;
    let errors = fetch_stored(&v, &key, &cycles.to_bytes().expect("encodes"));
    assert!(
        matches!(
            errors[..],
            [KernelCheckError::Entry {
                index: 1,
                field: "cycles",
                ..
            }]
        ),
        "{errors:?}"
    );
    // The good value is a hit.
    let store = MemoryStore::new();
    store
        .put(&key, &good.to_bytes().expect("encodes"))
        .expect("stores");
    let hit = fetch_kernel(&v, target(), &HostToolchain, &store).expect("hits");
    assert_eq!(hit.outcome, CacheOutcome::Hit);
    assert_eq!(hit.kernel, good);
}

/// A toolchain whose initialise programs store no partials on their last
/// worker: objects that parse, with metadata that describes them, and
/// programs that leave outputs unwritten.
struct DropsAStore;

impl Toolchain for DropsAStore {
    fn identity(&self) -> String {
        "drops-a-store".to_owned()
    }
    fn compile(&self, variant: &Variant, target: &Target) -> Result<CompiledKernel, KernelError> {
        let mut programs = variant
            .entry_points()
            .iter()
            .map(|e| build_program(variant, e.rows, e.mode))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(worker) = programs[0]
            .groups
            .last_mut()
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

#[test]
fn a_wrong_kernel_from_a_toolchain_is_refused_and_not_stored() {
    let v = seed_variants().remove(1);
    let store = MemoryStore::new();
    match fetch_kernel(&v, target(), &DropsAStore, &store) {
        Err(KernelError::CompiledRejected {
            toolchain, errors, ..
        }) => {
            assert_eq!(toolchain, "drops-a-store");
            assert!(
                matches!(&errors[..], [KernelCheckError::Program { symbol, .. }] if *symbol == v.entry_points()[0].symbol),
                "{errors:?}"
            );
        }
        other => panic!("a wrong kernel was not refused: {other:?}"),
    }
    assert!(store.is_empty());
}

/// A toolchain that fails with an error of its own.
struct Fails;

#[derive(Debug, thiserror::Error)]
#[error("the assembler is not installed")]
struct NoAssembler;

impl Toolchain for Fails {
    fn identity(&self) -> String {
        "fails".to_owned()
    }
    fn compile(&self, _: &Variant, _: &Target) -> Result<CompiledKernel, KernelError> {
        Err(KernelError::Toolchain {
            toolchain: self.identity(),
            source: Box::new(NoAssembler),
        })
    }
}

#[test]
fn a_foreign_toolchains_error_keeps_its_source() {
    let v = seed_variants().remove(1);
    let e = fetch_kernel(&v, target(), &Fails, &MemoryStore::new()).unwrap_err();
    let source = std::error::Error::source(&e).expect("a source");
    assert!(source.downcast_ref::<NoAssembler>().is_some(), "{e}");
    assert_eq!(
        e.to_string(),
        "toolchain fails failed: the assembler is not installed"
    );
}

#[test]
fn concurrent_builders_share_one_entry() {
    let dir = tempfile::tempdir().expect("temp dir");
    let variants = Arc::new(seed_variants());
    let root = dir.path().to_path_buf();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let variants = Arc::clone(&variants);
            let root = root.clone();
            std::thread::spawn(move || {
                // Each thread opens its own cache handle, as separate
                // processes would.
                let cache = KernelCache::open(&root).expect("opens");
                let mut objects = Vec::new();
                for round in 0..3 {
                    for i in 0..variants.len() {
                        let v = &variants[(i + t + round) % variants.len()];
                        let k = fetch_kernel(v, target(), &HostToolchain, &cache)
                            .expect("no torn entries");
                        // Two seed shards share a name; the key is unique.
                        objects.push((v.key().to_owned(), k.kernel.object));
                    }
                }
                objects
            })
        })
        .collect();
    let reference: Vec<(String, Vec<u8>)> = variants
        .iter()
        .map(|v| {
            (
                v.key().to_owned(),
                HostToolchain.compile(v, target()).expect("compiles").object,
            )
        })
        .collect();
    for h in handles {
        for (name, object) in h.join().expect("thread") {
            let expected = &reference.iter().find(|(n, _)| *n == name).expect("known").1;
            assert_eq!(&object, expected);
        }
    }
    let cache = KernelCache::open(&root).expect("opens");
    for v in variants.iter() {
        assert_eq!(
            fetch_kernel(v, target(), &HostToolchain, &cache)
                .expect("hits")
                .outcome,
            CacheOutcome::Hit
        );
    }
}

#[test]
fn root_from_environment() {
    let s = |v: &str| Some(OsString::from(v));
    assert_eq!(
        KernelCache::root_from_vars(s("/x/cache"), s("/xdg"), s("/home/u")),
        Some(PathBuf::from("/x/cache"))
    );
    assert_eq!(
        KernelCache::root_from_vars(None, s("/xdg"), s("/home/u")),
        Some(PathBuf::from("/xdg/ipu-backend/kernels"))
    );
    assert_eq!(
        KernelCache::root_from_vars(s(""), s(""), s("/home/u")),
        Some(PathBuf::from("/home/u/.cache/ipu-backend/kernels"))
    );
    assert_eq!(KernelCache::root_from_vars(None, None, None), None);
}

/// A writer the fmt subscriber logs into.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn logs_the_seed_lines() {
    // A global subscriber (only this test installs one) sees every event of
    // the binary; the variant below is used by no other test, so its lines
    // are this test's. A scoped subscriber would race with the interest
    // other threads cache for the same callsites.
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("only this test sets one");
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = KernelCache::open(dir.path()).expect("opens");
    let shape = crate::support::seed_shape(64, 48, 9);
    let v = Variant::new(&shape, 32, 16, 7, 9, &ipu_kernels::AmpModel::ipu21()).expect("valid");
    let k = fetch_kernel(&v, target(), &HostToolchain, &cache).expect("compiles");
    let file = cache.entry_path(&k.key);
    std::fs::write(&file, b"junk").expect("damage");
    fetch_kernel(&v, target(), &HostToolchain, &cache).expect("rebuilds");
    fetch_kernel(&v, target(), &HostToolchain, &cache).expect("hits");
    let text = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf8");
    let compiling = "compiling kernel source=builtin:amp-program \
                     name=\"gemm_f8_interleaved_k32_c16_r7_r9\" target=ipu21";
    assert_eq!(text.matches(compiling).count(), 2, "{text}");
    let created = format!("kernel artifact created entry={}", file.display());
    assert_eq!(text.matches(&created).count(), 2, "{text}");
    let entry = file.display().to_string();
    assert!(
        text.lines()
            .any(|l| l.contains("corrupt kernel cache entry, rebuilding") && l.contains(&entry)),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("kernel cache hit") && l.contains(k.key.as_str())),
        "{text}"
    );
}
