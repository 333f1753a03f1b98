//! The kernel cache: miss then hit, keys that change with every input,
//! corrupt, truncated and misplaced entries rebuilt (files of the wrong
//! kind, another entry's files, digests made to match), concurrent
//! builders, the root chosen from the environment, and the seed's log
//! lines.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ipu_kernels::{
    CacheOutcome, CachedKernel, CompiledKernel, HostToolchain, KernelCache, KernelError,
    KernelMetadata, Toolchain, Variant, cache_key,
};

use crate::support::seed_variants;

#[test]
fn miss_then_hit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = KernelCache::open(dir.path()).expect("opens");
    let v = seed_variants().remove(0);
    let first = cache.get_or_compile(&v, &HostToolchain).expect("compiles");
    assert_eq!(first.outcome, CacheOutcome::Miss);
    let key = cache_key(&v, &HostToolchain);
    assert_eq!(first.object_path, dir.path().join(&key).join("kernel.o"));
    assert_eq!(
        first.metadata_path,
        dir.path().join(&key).join("kernel.json")
    );
    assert_eq!(first.metadata.input_hash, key);
    assert_eq!(first.metadata.name, v.name());
    let second = cache.get_or_compile(&v, &HostToolchain).expect("hits");
    assert_eq!(second.outcome, CacheOutcome::Hit);
    assert_eq!(second.object, first.object);
    assert_eq!(second.metadata, first.metadata);
    assert_eq!(
        std::fs::read(&first.object_path).expect("object"),
        first.object
    );
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join(&key))
        .expect("entry dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

/// A toolchain that counts compiles and can claim another identity.
struct Counting {
    identity: String,
    compiles: Mutex<u32>,
}

impl Toolchain for Counting {
    fn identity(&self) -> String {
        self.identity.clone()
    }
    fn compile(&self, variant: &Variant) -> Result<CompiledKernel, KernelError> {
        *self.compiles.lock().expect("lock") += 1;
        HostToolchain.compile(variant)
    }
}

#[test]
fn keys_change_with_every_input() {
    let variants = seed_variants();
    let a = Counting {
        identity: "a".into(),
        compiles: Mutex::new(0),
    };
    let b = Counting {
        identity: "b".into(),
        compiles: Mutex::new(0),
    };
    let keys: Vec<String> = variants
        .iter()
        .flat_map(|v| {
            [
                cache_key(v, &a),
                cache_key(v, &b),
                cache_key(v, &HostToolchain),
            ]
        })
        .collect();
    let mut unique = keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), keys.len());
    assert!(keys.iter().all(|k| k.len() == 64));
    assert_eq!(cache_key(&variants[0], &a), cache_key(&variants[0], &a));
}

fn corrupt_and_rebuild(damage: impl Fn(&PathBuf, &PathBuf)) {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = KernelCache::open(dir.path()).expect("opens");
    let v = seed_variants().remove(3);
    let good = cache.get_or_compile(&v, &HostToolchain).expect("compiles");
    damage(&good.object_path, &good.metadata_path);
    let again = cache.get_or_compile(&v, &HostToolchain).expect("rebuilds");
    assert_ne!(again.outcome, CacheOutcome::Hit);
    assert_eq!(again.object, good.object);
    assert_eq!(again.metadata, good.metadata);
    let third = cache.get_or_compile(&v, &HostToolchain).expect("hits");
    assert_eq!(third.outcome, CacheOutcome::Hit);
}

#[test]
fn truncated_object_is_rebuilt() {
    corrupt_and_rebuild(|object, _| {
        let bytes = std::fs::read(object).expect("read");
        std::fs::write(object, &bytes[..bytes.len() / 3]).expect("truncate");
    });
}

#[test]
fn flipped_object_byte_is_rebuilt() {
    corrupt_and_rebuild(|object, _| {
        let mut bytes = std::fs::read(object).expect("read");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        std::fs::write(object, &bytes).expect("write");
    });
}

#[test]
fn garbage_metadata_is_rebuilt() {
    corrupt_and_rebuild(|_, metadata| {
        std::fs::write(metadata, b"{ not json").expect("write");
    });
}

#[test]
fn truncated_metadata_is_rebuilt() {
    corrupt_and_rebuild(|_, metadata| {
        let bytes = std::fs::read(metadata).expect("read");
        std::fs::write(metadata, &bytes[..bytes.len() - 5]).expect("truncate");
    });
}

#[test]
fn missing_object_or_metadata_is_rebuilt() {
    corrupt_and_rebuild(|object, _| std::fs::remove_file(object).expect("remove"));
    corrupt_and_rebuild(|_, metadata| std::fs::remove_file(metadata).expect("remove"));
}

#[test]
fn an_entry_directory_replaced_by_a_file_is_rebuilt() {
    // Once failed every later build with "File exists (os error 17)".
    corrupt_and_rebuild(|object, _| {
        let entry = object.parent().expect("the entry directory");
        std::fs::remove_dir_all(entry).expect("remove the entry");
        std::fs::write(entry, b"not a directory").expect("a file in its place");
    });
}

#[test]
fn a_directory_where_a_file_belongs_is_rebuilt() {
    corrupt_and_rebuild(|object, _| {
        std::fs::remove_file(object).expect("remove");
        std::fs::create_dir_all(object.join("inside")).expect("a directory in its place");
    });
    corrupt_and_rebuild(|_, metadata| {
        std::fs::remove_file(metadata).expect("remove");
        std::fs::create_dir(metadata).expect("a directory in its place");
    });
}

/// Damages the entry of variant 3 with what `copy` does given the files of
/// variant 0's entry, and checks the entry is rebuilt, never a hit.
fn another_entry_is_rebuilt(copy: impl Fn(&CachedKernel, &PathBuf, &PathBuf)) {
    corrupt_and_rebuild(|object, metadata| {
        let root = object
            .parent()
            .and_then(|p| p.parent())
            .expect("the cache root");
        let cache = KernelCache::open(root).expect("opens");
        let other = seed_variants().remove(0);
        let other = cache
            .get_or_compile(&other, &HostToolchain)
            .expect("compiles");
        copy(&other, object, metadata);
    });
}

#[test]
fn another_entrys_files_copied_in_are_rebuilt() {
    another_entry_is_rebuilt(|other, object, metadata| {
        std::fs::copy(&other.object_path, object).expect("copy the object");
        std::fs::copy(&other.metadata_path, metadata).expect("copy the metadata");
    });
}

#[test]
fn another_entrys_object_with_matching_digests_is_rebuilt() {
    // Once a hit, so that the package failed at run time with "no program
    // for the entry": the metadata is this entry's, with the object's size
    // and SHA-256 made to match the copied object.
    another_entry_is_rebuilt(|other, object, metadata| {
        std::fs::copy(&other.object_path, object).expect("copy the object");
        let mut m: KernelMetadata =
            serde_json::from_slice(&std::fs::read(metadata).expect("read")).expect("parses");
        m.object_bytes = other.metadata.object_bytes;
        m.object_sha256 = other.metadata.object_sha256.clone();
        std::fs::write(metadata, serde_json::to_vec(&m).expect("serialise")).expect("write");
    });
}

#[test]
fn metadata_claiming_a_huge_object_is_rebuilt() {
    corrupt_and_rebuild(|_, metadata| {
        let mut m: KernelMetadata =
            serde_json::from_slice(&std::fs::read(metadata).expect("read")).expect("parses");
        m.object_bytes = u64::MAX;
        std::fs::write(metadata, serde_json::to_vec(&m).expect("serialise")).expect("write");
    });
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
                        let k = cache
                            .get_or_compile(v, &HostToolchain)
                            .expect("no torn entries");
                        objects.push((v.name().to_owned(), k.object));
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
                v.name().to_owned(),
                HostToolchain.compile(v).expect("compiles").object,
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
            cache
                .get_or_compile(v, &HostToolchain)
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
    let v = Variant::new(&shape, 64, 48, 7, 9, &ipu_kernels::AmpModel::ipu21()).expect("valid");
    let k = cache.get_or_compile(&v, &HostToolchain).expect("compiles");
    std::fs::write(&k.object_path, b"junk").expect("damage");
    cache.get_or_compile(&v, &HostToolchain).expect("rebuilds");
    cache.get_or_compile(&v, &HostToolchain).expect("hits");
    let text = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf8");
    let key = cache_key(&v, &HostToolchain);
    let entry = dir.path().join(&key);
    let compiling = "compiling kernel source=builtin:amp-program \
                     name=\"gemm_f8_interleaved_k64_c48_r7_r9\" target=ipu21";
    assert_eq!(text.matches(compiling).count(), 2, "{text}");
    let created = format!(
        "kernel artifact created object={} metadata={}",
        entry.join("kernel.o").display(),
        entry.join("kernel.json").display()
    );
    assert_eq!(text.matches(&created).count(), 2, "{text}");
    let entry = entry.display().to_string();
    assert!(
        text.lines()
            .any(|l| l.contains("corrupt kernel cache entry, rebuilding") && l.contains(&entry)),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("kernel cache hit") && l.contains(&key)),
        "{text}"
    );
}
