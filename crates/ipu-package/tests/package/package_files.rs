//! Package files on disk: what `Package::write` writes and what
//! `Package::read` accepts.
//!
//! A small package made by hand (two tiles, one phase, two kernels), which
//! validates, is enough: these tests are about the files, not the build. They hold that
//! the package does not depend on the build's timings or on where it is
//! written, that every file is checked against the manifest's size and
//! SHA-256 before anything is parsed (bytes all over every file are
//! flipped in turn), and that each refusal is a typed error naming the
//! file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ipu_exchange::EncodedRows;
use ipu_kernels::{GemmShape, HostToolchain, Mode, PlanConfig, RowSize, Toolchain, plan_variant};
use ipu_layout::{
    ElementOrder, Fp8Format, IdVec, Layout, MemoryClass, Precision, TensorFormat, TensorShape,
    TensorTiling, TensorType, TileId,
};
use ipu_package::LocalCopy;
use ipu_package::graph::Activation;
use ipu_package::package::{
    BufferAddresses, BuildSummary, FORMAT_VERSION, Manifest, Package, PackageIoError,
    PackageKernel, PackagePhase, PackagePlacement, PhaseInfo, RowPatch, TileSupport,
};
use ipu_package::program::{
    Buffer, BufferId, BufferRole, Codelet, ComputeStep, ExchangeStep, GemmKernel, Program,
    RepeatStep, Step, StepLabel, StepRole,
};
use sha2::{Digest, Sha256};

/// A directory under Cargo's temporary directory for the integration
/// tests, removed when dropped.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh directory named after `test`.
    pub fn new(test: &str) -> Scratch {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("package-files-{}-{test}", std::process::id()));
        // A previous run killed before its cleanup may have left it.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create the scratch directory");
        Scratch(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The fixture of [`sample`]: one input, its GELU as the output.
const SAMPLE_FIXTURE: &str = r#"{"schema_version": 1, "name": "sample", "layers": [{"name": "l",
  "tensors": [{"name": "x", "shape": [2, 4], "precision": "F16", "kind": "input"},
              {"name": "y", "shape": [2, 4], "precision": "F16", "kind": "output"}],
  "ops": [{"op": "gelu", "inputs": ["x"], "output": "y"}]}]}
"#;

/// A compiled kernel named `name` for the GEMM `spec`, as the build makes
/// it.
fn compiled(name: &str, spec: &GemmKernel) -> PackageKernel {
    let shape = GemmShape {
        rows: spec.rows_large,
        inner: spec.inner,
        columns: spec.columns,
        left: spec.left,
        left_order: spec.left_order,
        right: spec.right,
        output: spec.output,
        output_order: ElementOrder::RowMajor,
        right_class: spec.right_class,
    };
    let variant = plan_variant(
        &shape,
        spec.rows_small,
        spec.rows_large,
        &PlanConfig::default(),
    )
    .expect("a variant");
    let kernel = HostToolchain
        .compile(&variant, ipu_target::Target::ipu21())
        .expect("compiles");
    let mut entries: [String; 4] = Default::default();
    for e in variant.entry_points() {
        let index =
            usize::from(e.size == RowSize::Large) * 2 + usize::from(e.mode == Mode::Accumulate);
        entries[index] = e.symbol;
    }
    PackageKernel {
        name: name.to_owned(),
        entries,
        object: kernel.object,
        metadata: serde_json::to_string(&kernel.metadata).expect("metadata"),
    }
}

/// A package made by hand that validates: two tiles, an input and an
/// output buffer on tile 0, a GELU between them, a repeat of one exchange
/// step whose phase has a patch and an on-tile copy, two kernels, a
/// fixture and the build's timings.
pub fn sample() -> Package {
    let target = ipu_target::Target::ipu21().clone();
    let code = target.code_region().start;
    let f8 = Precision::F8 {
        format: Fp8Format::F143,
        scale: -7,
    };
    let spec = |rows: u32| GemmKernel {
        inner: 32,
        columns: 32,
        rows_small: rows,
        rows_large: rows,
        left: f8,
        left_order: ElementOrder::RowMajor,
        right: f8,
        output: Precision::F16,
        right_class: MemoryClass::Ipu21Interleaved,
    };
    let buffer = |name: &str, role: BufferRole| Buffer {
        name: name.to_owned(),
        ty: TensorType::new(
            TensorShape::new([2, 4]),
            TensorFormat {
                precision: Precision::F16,
                layout: Layout {
                    order: ElementOrder::RowMajor,
                    tiling: TensorTiling::new(1, 1, Vec::new()).expect("a tiling"),
                    memory_class: MemoryClass::Ipu21Standard,
                },
            },
        )
        .expect("a type"),
        role,
        padding_read: false,
        tail_bytes: 0,
        alignment: 8,
    };
    let (x, y) = (BufferId::from_u32(0), BufferId::from_u32(1));
    let mut program = Program::default();
    program.buffers.push(buffer("x", BufferRole::Input));
    program.buffers.push(buffer("y", BufferRole::Output));
    program.kernels.push(spec(1));
    program.kernels.push(spec(2));
    program.steps = vec![
        Step::Compute(ComputeStep {
            label: StepLabel {
                op: None,
                role: StepRole::Activation(Activation::GeluTanh),
                name: "y".into(),
            },
            calls: vec![(
                TileId::from_u32(0),
                Codelet::Activation {
                    input: x.into(),
                    output: y.into(),
                    elements: 8,
                    function: Activation::GeluTanh,
                },
            )],
        }),
        Step::Repeat(RepeatStep {
            name: "again".into(),
            count: 2,
            body: vec![Step::Exchange(ExchangeStep {
                label: StepLabel {
                    op: None,
                    role: StepRole::Activation(Activation::GeluTanh),
                    name: "x".into(),
                },
                copies: Vec::new(),
            })],
            iteration_buffers: Vec::new(),
        }),
    ];
    let delay = |cycles: u32| 0x40a0_0000 | (cycles - 1);
    Package {
        manifest: Manifest {
            format_version: FORMAT_VERSION,
            name: "sample".into(),
            target: "ipu21".into(),
            tile_count: 2,
            summary: BuildSummary {
                tile_count: 2,
                requests: 3,
                peak_bytes: 4096,
                kernels: 2,
                phase_ms: vec![("plan_package".into(), 17), ("schedule_exchange".into(), 4)],
                ..BuildSummary::default()
            },
            files: Vec::new(),
        },
        program,
        placement: PackagePlacement {
            addresses: BufferAddresses::from_lists(vec![vec![(0, 0x5_0000)], vec![(0, 0x5_0020)]]),
            support: vec![
                TileSupport {
                    start: code,
                    ..TileSupport::default()
                };
                2
            ],
        },
        target,
        phases: vec![PackagePhase {
            info: PhaseInfo {
                name: "exchange0".into(),
                local: vec![LocalCopy {
                    tile: TileId::from_u32(0),
                    source: 0x5_0000,
                    destination: 0x5_0020,
                    bytes: 16,
                    source_stride: 0,
                    destination_stride: 0,
                }],
                patches: vec![RowPatch {
                    tile: TileId::from_u32(0),
                    index: 1,
                    delta: 16,
                }],
                horizon: 40,
                endpoint_lower_bound: 30,
                stronger_lower_bound: 35,
            },
            rows: EncodedRows::from_tile_rows(vec![vec![delay(3), delay(5)], vec![delay(1)]]),
        }],
        kernels: vec![compiled("k0", &spec(1)), compiled("k1", &spec(2))],
        memory_profile: "{\"schema\":\"ipu-alloc/memory-profile/v1\",\"tiles\":[]}".into(),
        profile: None,
        fixture: Some(SAMPLE_FIXTURE.into()),
        weights: None,
        model: None,
    }
}

/// Every file under `dir` by its `/`-separated path, with its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).expect("read the directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).expect("under the root");
                let key = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                out.insert(key, std::fs::read(&path).expect("read the file"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The names directly inside `dir`, sorted.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read the directory")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        // The writers' lock file stays beside a package.
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    names.sort();
    names
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `text` without the whitespace outside its strings: the pretty manifest
/// as `serde_json::to_vec` would have written it.
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if !c.is_whitespace() {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

/// The manifest `text`, edited, with its own digest made right again: what
/// a deliberate edit (not damage) looks like, to reach the checks behind
/// the digest. The digest covers the compact `manifest` object.
fn resign(text: &str) -> String {
    let (head, key) = ("{\"manifest\":", ",\"manifest_sha256\":\"");
    let compact = compact(text);
    let end = compact.find(key).expect("a manifest digest");
    let old = &compact[end + key.len()..end + key.len() + 64];
    let manifest = &compact[head.len()..end];
    text.replace(old, &sha256_hex(manifest.as_bytes()))
}

fn manifest_text(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("manifest.json")).expect("read the manifest")
}

fn read_err(dir: &Path) -> PackageIoError {
    match Package::read(dir) {
        Ok(_) => panic!("{} was read", dir.display()),
        Err(e) => e,
    }
}

#[test]
fn a_package_reads_back_as_written_without_its_timings() {
    let scratch = Scratch::new("round-trip");
    let dir = scratch.path().join("pkg");
    let package = sample();
    package.write(&dir).expect("write");
    let back = Package::read(&dir).expect("read");

    assert_eq!(back.manifest.format_version, FORMAT_VERSION);
    assert_eq!(back.manifest.name, "sample");
    assert_eq!(back.manifest.tile_count, 2);
    assert_eq!(back.manifest.summary.peak_bytes, 4096);
    // The timings were in memory for the builder's report, not on disk.
    assert!(back.manifest.summary.phase_ms.is_empty());
    assert!(!manifest_text(&dir).contains("phase_ms"));
    assert_eq!(
        serde_json::to_string(&back.program).expect("serialise"),
        serde_json::to_string(&package.program).expect("serialise")
    );
    assert_eq!(back.target, package.target);
    assert_eq!(back.placement, package.placement);
    assert_eq!(back.phases, package.phases);
    assert_eq!(back.memory_profile, package.memory_profile);
    assert_eq!(back.fixture, package.fixture);
    for (a, b) in back.kernels.iter().zip(&package.kernels) {
        assert_eq!(
            (&a.name, &a.object, &a.metadata),
            (&b.name, &b.object, &b.metadata)
        );
    }

    // The manifest lists every other file with its size and SHA-256.
    let files = snapshot(&dir);
    let listed = Package::verify(&dir).expect("verify");
    let names: Vec<&str> = listed.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "target.toml",
            "program.json",
            "placement.json",
            "phases.json",
            "exchange.bin",
            "kernels.json",
            "memory-profile.json",
            "fixture.json",
            "kernels/k0.o",
            "kernels/k0.json",
            "kernels/k1.o",
            "kernels/k1.json",
        ]
    );
    assert_eq!(listed.len() + 1, files.len());
    for f in &listed {
        assert_eq!(f.bytes, files[&f.name].len() as u64, "{}", f.name);
        assert_eq!(f.sha256, sha256_hex(&files[&f.name]), "{}", f.name);
    }
    assert_eq!(back.manifest.files, listed);
}

#[test]
fn a_package_does_not_depend_on_its_timings_or_its_path() {
    let scratch = Scratch::new("deterministic");
    let first = scratch.path().join("first");
    let second = scratch.path().join("a/b/second");
    sample().write(&first).expect("write");
    let mut later = sample();
    later.manifest.summary.phase_ms = vec![("plan_package".into(), 99_999)];
    later.write(&second).expect("write");
    assert_eq!(snapshot(&first), snapshot(&second));
}

#[test]
fn every_flipped_byte_is_refused_naming_the_file() {
    let scratch = Scratch::new("flips");
    let dir = scratch.path().join("pkg");
    sample().write(&dir).expect("write");
    let files = snapshot(&dir);
    let mut missed = Vec::new();
    for (name, bytes) in &files {
        let path = dir.join(name);
        // Every byte of the small files; 256 spread over a larger one
        // (the first and the last among them), so that the test stays fast
        // with real kernel objects.
        let step = bytes.len().div_ceil(256).max(1);
        let positions = (0..bytes.len())
            .step_by(step)
            .chain(bytes.len().checked_sub(1));
        for at in positions {
            for bit in [0x01u8, 0x80] {
                let mut damaged = bytes.clone();
                damaged[at] ^= bit;
                std::fs::write(&path, &damaged).expect("damage the file");
                let named = match Package::read(&dir) {
                    Ok(_) => false,
                    // Any other file's damage keeps its size: its digest
                    // gives it away.
                    Err(PackageIoError::Digest { path, .. }) => path.ends_with(name),
                    // The manifest's damage may also break its syntax, its
                    // version or its fields before its digest is checked.
                    Err(e) => name == "manifest.json" && e.to_string().contains("manifest.json"),
                };
                if !named {
                    missed.push(format!("{name} byte {at} bit {bit:#x}"));
                }
            }
        }
        std::fs::write(&path, bytes).expect("restore the file");
    }
    assert!(
        missed.is_empty(),
        "flips not refused: {}",
        missed.join(", ")
    );
    Package::read(&dir).expect("the restored package reads");
}

#[test]
fn a_cut_or_grown_file_is_refused_with_both_sizes() {
    let scratch = Scratch::new("sizes");
    let dir = scratch.path().join("pkg");
    sample().write(&dir).expect("write");
    let object = dir.join("kernels/k1.o");
    let bytes = std::fs::read(&object).expect("read the object");
    let len = bytes.len() as u64;

    std::fs::write(&object, &bytes[..bytes.len() - 1]).expect("cut the object");
    match read_err(&dir) {
        PackageIoError::Size {
            path,
            expected,
            found,
        } => {
            assert_eq!(path, object);
            assert_eq!((expected, found), (len, len - 1));
        }
        e => panic!("not a size error: {e}"),
    }

    let mut grown = bytes.clone();
    grown.push(0);
    std::fs::write(&object, grown).expect("grow the object");
    let message = read_err(&dir).to_string();
    assert!(
        message.contains(&format!(
            "kernels/k1.o: {} bytes, the manifest records {len}",
            len + 1
        )),
        "{message}"
    );
}

#[test]
fn a_missing_file_is_refused_naming_it() {
    let scratch = Scratch::new("missing");
    let dir = scratch.path().join("pkg");
    sample().write(&dir).expect("write");
    std::fs::remove_file(dir.join("exchange.bin")).expect("remove the rows");
    match read_err(&dir) {
        PackageIoError::Io { path, source } => {
            assert_eq!(path, dir.join("exchange.bin"));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        e => panic!("not a missing file: {e}"),
    }
}

#[test]
fn a_file_the_manifest_does_not_list_is_refused() {
    let scratch = Scratch::new("unlisted");
    let dir = scratch.path().join("pkg");
    sample().write(&dir).expect("write");
    for extra in ["kernels/k2.o", "notes.txt", "more/k0.o"] {
        let path = dir.join(extra);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the parent");
        std::fs::write(&path, b"extra").expect("write the extra file");
        match read_err(&dir) {
            // A file in a directory the package does not have is named
            // by that directory.
            PackageIoError::Unlisted { path: named } => assert!(
                path.starts_with(&named),
                "{extra}: {} named",
                named.display()
            ),
            e => panic!("{extra}: not an unlisted file: {e}"),
        }
        std::fs::remove_file(&path).expect("remove the extra file");
        let _ = std::fs::remove_dir(dir.join("more"));
    }
    Package::read(&dir).expect("reads again without the extra files");
}

#[test]
fn another_format_version_is_refused_by_its_version() {
    let scratch = Scratch::new("version");
    let dir = scratch.path().join("pkg");
    sample().write(&dir).expect("write");
    let text = manifest_text(&dir);
    let current = format!("\"format_version\": {FORMAT_VERSION}");
    assert!(text.contains(&current), "{text}");
    for found in [1u64, u64::from(FORMAT_VERSION) + 1] {
        let edited = text.replace(&current, &format!("\"format_version\": {found}"));
        std::fs::write(dir.join("manifest.json"), edited).expect("write the manifest");
        match read_err(&dir) {
            PackageIoError::Version {
                path,
                found: f,
                supported,
            } => {
                assert_eq!(path, dir.join("manifest.json"));
                assert_eq!((f, supported), (found, FORMAT_VERSION));
            }
            e => panic!("not a version error: {e}"),
        }
    }
    // The message a user sees for a package of version 1 (whose files
    // were [name, size] pairs).
    std::fs::write(
        dir.join("manifest.json"),
        r#"{"format_version": 1, "name": "old", "files": [["program.json", 2]]}"#,
    )
    .expect("write the manifest");
    let message = read_err(&dir).to_string();
    assert!(
        message.contains(&format!(
            "manifest.json: format version 1, this reader supports {FORMAT_VERSION}"
        )),
        "{message}"
    );
    std::fs::write(dir.join("manifest.json"), r#"{"name": "x"}"#).expect("write");
    assert!(
        matches!(read_err(&dir), PackageIoError::Format { reason, .. } if reason == "no format_version")
    );
}

#[test]
fn a_manifest_cannot_name_files_outside_the_package() {
    // Even a manifest whose digest is right (edited on purpose) cannot make
    // the reader open a file outside the package directory.
    let scratch = Scratch::new("outside");
    let dir = scratch.path().join("pkg");
    sample().write(&dir).expect("write");
    std::fs::write(scratch.path().join("secret"), b"not part of it").expect("write");
    let text = manifest_text(&dir);
    for (from, to) in [
        ("\"name\": \"fixture.json\"", "\"name\": \"../secret\""),
        (
            "\"name\": \"fixture.json\"",
            "\"name\": \"kernels/../../secret\"",
        ),
        ("\"name\": \"fixture.json\"", "\"name\": \"/tmp/secret\""),
        ("\"name\": \"fixture.json\"", "\"name\": \"program.json\""),
        ("\"name\": \"fixture.json\"", "\"name\": \"manifest.json\""),
    ] {
        assert!(text.contains(from));
        std::fs::write(dir.join("manifest.json"), resign(&text.replace(from, to)))
            .expect("write the manifest");
        match read_err(&dir) {
            PackageIoError::Format { path, reason } => {
                assert_eq!(path, dir.join("manifest.json"), "{to}");
                assert!(reason.starts_with("file \""), "{to}: {reason}");
            }
            e => panic!("{to}: not a format error: {e}"),
        }
    }
    // The edit itself, re-signed, is what the reader checks first.
    std::fs::write(dir.join("manifest.json"), resign(&text)).expect("write the manifest");
    Package::read(&dir).expect("the re-signed original reads");
}

#[test]
fn a_kernel_the_manifest_does_not_list_is_refused() {
    // kernels.json names kernel k9 (edited on purpose, with the digests
    // made right): its object is not in the manifest.
    let scratch = Scratch::new("kernel-unlisted");
    let dir = scratch.path().join("pkg");
    sample().write(&dir).expect("write");
    let program = std::fs::read_to_string(dir.join("kernels.json")).expect("read the index");
    let edited = program.replacen("\"name\":\"k1\"", "\"name\":\"k9\"", 1);
    assert_ne!(program, edited);
    std::fs::write(dir.join("kernels.json"), &edited).expect("write the index");
    let text = manifest_text(&dir).replace(
        &sha256_hex(program.as_bytes()),
        &sha256_hex(edited.as_bytes()),
    );
    std::fs::write(dir.join("manifest.json"), resign(&text)).expect("write the manifest");
    match read_err(&dir) {
        PackageIoError::Unlisted { path } => assert_eq!(path, dir.join("kernels/k9.o")),
        e => panic!("not an unlisted kernel: {e}"),
    }
}

#[test]
fn a_file_that_is_not_json_is_refused_with_the_parsers_error() {
    let scratch = Scratch::new("not-json");
    let dir = scratch.path().join("pkg");
    sample().write(&dir).expect("write");
    // kernels.json edited on purpose (same size, digests made right) so
    // that only its JSON is wrong.
    let index = std::fs::read_to_string(dir.join("kernels.json")).expect("read the index");
    let edited = index.replacen("\"name\":\"k1\"", "\"name\"!\"k1\"", 1);
    assert_ne!(index, edited);
    std::fs::write(dir.join("kernels.json"), &edited).expect("write the index");
    let text = manifest_text(&dir).replace(
        &sha256_hex(index.as_bytes()),
        &sha256_hex(edited.as_bytes()),
    );
    std::fs::write(dir.join("manifest.json"), resign(&text)).expect("write the manifest");
    let e = read_err(&dir);
    match &e {
        PackageIoError::Json { path, source } => {
            assert_eq!(path, &dir.join("kernels.json"));
            assert!(source.is_syntax(), "{e}");
        }
        e => panic!("not a JSON error: {e}"),
    }
    let cause = std::error::Error::source(&e).expect("a cause");
    assert!(cause.is::<serde_json::Error>(), "{e}");
    // A cut manifest is refused the same way, naming the manifest.
    std::fs::write(dir.join("manifest.json"), &text[..text.len() / 2]).expect("write");
    match read_err(&dir) {
        PackageIoError::Json { path, source } => {
            assert_eq!(path, dir.join("manifest.json"));
            assert!(source.is_eof(), "{source}");
        }
        e => panic!("not a JSON error: {e}"),
    }
}

#[test]
fn a_kernel_name_that_is_not_a_file_name_is_refused() {
    let scratch = Scratch::new("kernel-names");
    for (name, reason) in [
        ("../evil", "separator"),
        ("a/b", "separator"),
        ("", "empty"),
        ("..", "not file names"),
        ("k0", "two kernels"),
    ] {
        let dir = scratch.path().join("pkg");
        let mut package = sample();
        package.kernels[1].name = name.to_owned();
        match package.write(&dir) {
            Err(PackageIoError::KernelName { name: n, reason: r }) => {
                assert_eq!(n, name);
                assert!(r.contains(reason), "{name:?}: {r}");
            }
            other => panic!("{name:?}: {other:?}"),
        }
        assert!(entries(scratch.path()).is_empty(), "{name:?}");
    }
}

#[test]
fn a_target_that_is_not_a_package_is_refused_and_kept() {
    let scratch = Scratch::new("not-a-package");
    let file = scratch.path().join("notes.txt");
    std::fs::write(&file, "keep me").expect("write the file");
    let sources = scratch.path().join("sources");
    std::fs::create_dir(&sources).expect("create the directory");
    std::fs::write(sources.join("lib.rs"), "// keep me").expect("write into it");
    let before = snapshot(scratch.path());
    let listing = entries(scratch.path());

    match sample().write(&file) {
        Err(PackageIoError::TargetNotADirectory { path }) => assert_eq!(path, file),
        other => panic!("{other:?}"),
    }
    match sample().write(&sources) {
        Err(e @ PackageIoError::TargetNotAPackage { .. }) => {
            assert!(e.to_string().contains("no manifest.json"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // A package inside a file cannot be made either; nothing is created.
    assert!(matches!(
        sample().write(&file.join("pkg")),
        Err(PackageIoError::Io { .. })
    ));
    assert_eq!(snapshot(scratch.path()), before);
    assert_eq!(entries(scratch.path()), listing);
}

#[test]
fn a_target_without_a_final_name_is_refused() {
    let scratch = Scratch::new("no-name");
    let inside = scratch.path().join("inside");
    std::fs::create_dir(&inside).expect("create the directory");
    for path in [
        inside.join(".."),
        PathBuf::from(""),
        PathBuf::from("."),
        PathBuf::from(".."),
        PathBuf::from("/"),
    ] {
        match sample().write(&path) {
            Err(PackageIoError::TargetHasNoName { path: p }) => assert_eq!(p, path),
            other => panic!("{path:?}: {other:?}"),
        }
    }
    assert_eq!(entries(scratch.path()), ["inside"]);
    assert!(entries(&inside).is_empty());
}

#[test]
fn an_empty_directory_or_an_earlier_package_is_replaced() {
    let scratch = Scratch::new("replace");
    let dir = scratch.path().join("pkg");
    std::fs::create_dir(&dir).expect("create the directory");
    sample()
        .write(&dir)
        .expect("write into the empty directory");
    assert_eq!(entries(scratch.path()), ["pkg"]);

    // An earlier package with a file the new one does not have: the new
    // package replaces it whole, and nothing is left beside it.
    let mut other = sample();
    other.fixture = None;
    other.kernels.truncate(1);
    other.program.kernels = IdVec::from_vec(other.program.kernels.values()[..1].to_vec());
    other.memory_profile = "{\"other\":true}".into();
    other.write(&dir).expect("write over the earlier package");
    let reference = scratch.path().join("reference");
    other.write(&reference).expect("write the reference");
    assert_eq!(snapshot(&dir), snapshot(&reference));
    assert_eq!(entries(scratch.path()), ["pkg", "reference"]);
    assert_eq!(Package::read(&dir).expect("read").fixture, None);

    // `pkg/.` is `pkg`.
    sample()
        .write(&dir.join("."))
        .expect("write through `pkg/.`");
    assert_eq!(entries(scratch.path()), ["pkg", "reference"]);
    assert!(Package::read(&dir).expect("read").fixture.is_some());
}

#[test]
fn a_refused_write_leaves_the_earlier_package_byte_identical() {
    let scratch = Scratch::new("refused");
    let dir = scratch.path().join("pkg");
    sample().write(&dir).expect("write the earlier package");
    let before = snapshot(&dir);
    let mut bad = sample();
    bad.memory_profile = "{\"different\":true}".into();
    bad.kernels[0].name = "../escape".into();
    assert!(matches!(
        bad.write(&dir),
        Err(PackageIoError::KernelName { .. })
    ));
    assert_eq!(snapshot(&dir), before);
    assert_eq!(entries(scratch.path()), ["pkg"]);
    Package::read(&dir).expect("the earlier package reads");
}

/// `program.json` spells the tanh GELU's codelet and step role as it did
/// before the other activations (so such packages read and write the
/// same bytes), and every function reads back as itself.
#[test]
fn activation_codelets_and_roles_keep_their_program_spelling() {
    let (x, y) = (BufferId::from_u32(0), BufferId::from_u32(1));
    let call = |function| Codelet::Activation {
        input: x.into(),
        output: y.into(),
        elements: 8,
        function,
    };
    let text = |c: &Codelet| serde_json::to_string(c).expect("serialises");
    assert_eq!(
        text(&call(Activation::GeluTanh)),
        r#"{"Gelu":{"input":{"buffer":0,"offset":0},"output":{"buffer":1,"offset":0},"elements":8}}"#
    );
    assert_eq!(
        text(&call(Activation::Tanh)),
        r#"{"Gelu":{"input":{"buffer":0,"offset":0},"output":{"buffer":1,"offset":0},"elements":8,"function":"Tanh"}}"#
    );
    let role = |r: StepRole| serde_json::to_string(&r).expect("serialises");
    assert_eq!(role(StepRole::Activation(Activation::GeluTanh)), "\"Gelu\"");
    assert_eq!(
        role(StepRole::Activation(Activation::GeluErf)),
        "\"GeluErf\""
    );
    assert_eq!(role(StepRole::Gemm), "\"Gemm\"");
    for function in Activation::ALL {
        let c: Codelet = serde_json::from_str(&text(&call(function))).expect("reads");
        assert_eq!(c, call(function));
        let r = StepRole::Activation(function);
        assert_eq!(
            serde_json::from_str::<StepRole>(&role(r)).expect("reads"),
            r
        );
        assert_eq!(r.name(), function.name());
    }
    for r in [StepRole::Gemm, StepRole::Convert, StepRole::View] {
        assert_eq!(
            serde_json::from_str::<StepRole>(&role(r)).expect("reads"),
            r
        );
    }
    // Unknown functions and roles are refused.
    let unknown = r#"{"Gelu":{"input":{"buffer":0,"offset":0},"output":{"buffer":1,"offset":0},"elements":8,"function":"Relu"}}"#;
    assert!(serde_json::from_str::<Codelet>(unknown).is_err());
    assert!(serde_json::from_str::<StepRole>("\"Relu\"").is_err());
}
