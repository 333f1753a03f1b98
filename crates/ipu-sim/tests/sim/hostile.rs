//! Hostile inputs: packages whose files were edited and re-signed (sizes
//! and SHA-256 digests recomputed, as anyone can), and edited fixtures.
//!
//! The property: reading, validating, building and running either
//! succeed or refuse with a typed error; nothing panics, and a package
//! that validates is never refused by the tile model for its structure
//! (so `inspect-package` never calls valid what `run-package` refuses as
//! malformed). An edit may still turn the program into another
//! well-formed program that computes something else (a copy's stride, a
//! patch removed): the unkeyed digests cannot tell, and the tile model's
//! per-op check stops such a run with `SimError::OpMismatch`, which is
//! the one refusal allowed after validation.
//! Time is bounded by construction: validation refuses, before anything
//! runs, work above [`limits`], which are a few times the base package's
//! own, so each case runs in at most that much time. Memory is bounded the
//! same way (tiles, buffer tables, file sizes, repeat counts and the stored
//! fixture all have limits); `cargo xtask hostile` runs larger campaigns in
//! child processes under a memory limit.
//!
//! The named tests below keep the reproducing input of every bug the
//! hardening issue listed.

use std::path::Path;
use std::sync::OnceLock;

use ipu_kernels::MemoryStore;
use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::{ParseOptions, parse_fixture, parse_fixture_for_build, values};
use ipu_package::hostile::{
    PackageAttack, PackageFiles, attack_json, attack_package, read_package_files, resign,
    write_package_files,
};
use ipu_package::lower::{AttentionUnit, LowerConfig};
use ipu_package::package::{FixtureMismatch, Limits, Package, PackageIoError, ValidationError};
use ipu_package::program::Step;
use proptest::prelude::*;
use serde_json::Value;

use crate::fixture_text;

/// micro-1l-h32 with two layers: a repeat with per-iteration weights,
/// patched rows and strided copies.
fn micro_two_layers() -> String {
    let mut fixture: Value =
        serde_json::from_str(&fixture_text("micro-1l-h32.json")).expect("json");
    fixture["params"]["layers"] = Value::from(2);
    serde_json::to_string_pretty(&fixture).expect("text")
}

/// Builds `fixture` on `tiles` tiles with a kernel store in memory.
fn build(fixture: &str, tiles: u32) -> Result<Package, String> {
    let graph =
        parse_fixture_for_build(fixture, &ParseOptions::default()).map_err(|e| e.to_string())?;
    let config = BuildConfig {
        tiles: Some(tiles),
        ..BuildConfig::default()
    };
    let stages = Stages::builtin(Box::new(MemoryStore::new()));
    let mut package = build_package(&graph, &config, &stages).map_err(|e| e.to_string())?;
    package.fixture = Some(fixture.to_owned());
    Ok(package)
}

/// The files of the base package: micro-1l-h32 with two layers on 8 tiles.
fn base() -> &'static PackageFiles {
    static BASE: OnceLock<PackageFiles> = OnceLock::new();
    BASE.get_or_init(|| {
        let package = build(&micro_two_layers(), 8).expect("the base package builds");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("base");
        package.write(&path).expect("written");
        read_package_files(&path).expect("read back")
    })
}

/// micro-1l-h32 with two layers and an F16 softmax, attention on the AMP
/// (transposes, softmaxes and attention GEMM kernels) on 8 tiles.
fn amp_base() -> &'static PackageFiles {
    static BASE: OnceLock<PackageFiles> = OnceLock::new();
    BASE.get_or_init(|| {
        let mut fixture: Value = serde_json::from_str(&micro_two_layers()).expect("json");
        for layer in fixture["layers"].as_array_mut().expect("layers") {
            for op in layer["ops"].as_array_mut().expect("ops") {
                if op["op"] == "attention" {
                    op["softmax"] = Value::from("F16");
                }
            }
        }
        let text = serde_json::to_string_pretty(&fixture).expect("text");
        let graph = parse_fixture_for_build(&text, &ParseOptions::default()).expect("parses");
        let config = BuildConfig {
            tiles: Some(8),
            lower: LowerConfig {
                attention: AttentionUnit::Amp,
                ..LowerConfig::default()
            },
            ..BuildConfig::default()
        };
        let stages = Stages::builtin(Box::new(MemoryStore::new()));
        let mut package = build_package(&graph, &config, &stages).expect("the AMP base builds");
        package.fixture = Some(text);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("amp-base");
        package.write(&path).expect("written");
        read_package_files(&path).expect("read back")
    })
}

/// The limits the cases are read with: a few times the base package's
/// work, so that a case that validates runs in at most a few times the
/// base's time.
fn limits() -> Limits {
    Limits {
        max_repeat_count: 64,
        max_step_executions: 1 << 12,
        max_codelet_calls: 1 << 14,
        max_compute_elements: 1 << 22,
        max_exchange_words: 1 << 20,
        max_fixture_items: 1 << 12,
        max_fixture_elements: 1 << 20,
        ..Limits::default()
    }
}

/// What reading a case came to.
#[derive(Debug)]
enum Outcome {
    /// Refused with this error.
    Refused(PackageIoError),
    /// Validated and ran on the tile model.
    Ran,
}

/// Writes `files` to a fresh directory, reads it back within `limits` and,
/// if it validates, runs it on the tile model: `Err` when the tile model
/// refuses a package that validated.
fn outcome_with(files: &PackageFiles, limits: &Limits) -> Result<Outcome, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("pkg");
    write_package_files(&path, files).map_err(|e| e.to_string())?;
    let package = match Package::read_with(&path, limits) {
        Ok(p) => p,
        Err(e) => {
            // Every refusal is a sentence.
            assert!(!e.to_string().is_empty());
            return Ok(Outcome::Refused(e));
        }
    };
    run(&package)?;
    Ok(Outcome::Ran)
}

/// Runs a package that validated on the tile model, with values for its
/// stored fixture: `Err` if the tile model refuses it.
fn run(package: &Package) -> Result<(), String> {
    let text = package.fixture.as_deref().ok_or("no fixture")?;
    let graph = parse_fixture(text).map_err(|e| format!("the validated fixture: {e}"))?;
    let values = values::generate(&graph, 7);
    match ipu_sim::tiles::run_package(package, &graph, &values) {
        // Refusals of the values, not of the package: validation checks
        // that every word an exchange moves stays inside placed memory,
        // not which buffer it lands in, so an edited address can leave a
        // buffer holding another's words (seed 16333546451535688022 of
        // `edited_numbers_of_a_text_package_are_refused_or_run` moves the
        // input ids' copy on tile 0: the gather then reads a NaN index).
        // The per-op check and the gather's own index check stop the run.
        Ok(_)
        | Err(ipu_sim::SimError::OpMismatch(_))
        | Err(ipu_sim::SimError::GatherIndex { .. }) => Ok(()),
        Err(e) => Err(format!("validated, then refused by the tile model: {e}")),
    }
}

fn outcome(files: &PackageFiles) -> Result<Outcome, String> {
    outcome_with(files, &limits())
}

/// The base package's files edited by `edit` and re-signed.
fn edited(edit: impl FnOnce(&mut PackageFiles)) -> PackageFiles {
    edited_from(base(), edit)
}

/// `files` edited by `edit` and re-signed.
fn edited_from(files: &PackageFiles, edit: impl FnOnce(&mut PackageFiles)) -> PackageFiles {
    let mut files = files.clone();
    edit(&mut files);
    resign(&mut files);
    files
}

/// Edits the JSON file `name` of `files` with `edit`.
fn json(files: &mut PackageFiles, name: &str, edit: impl FnOnce(&mut Value)) {
    let mut value: Value = serde_json::from_slice(&files[name]).expect("json");
    edit(&mut value);
    files.insert(name.to_owned(), serde_json::to_vec(&value).expect("text"));
}

/// The validation problems `files` is refused with.
fn problems(files: &PackageFiles) -> Vec<ValidationError> {
    match outcome(files) {
        Ok(Outcome::Refused(PackageIoError::Invalid { errors, .. })) => errors,
        other => panic!("not refused by validation: {other:?}"),
    }
}

/// The first codelet call of the program, as JSON.
fn first_call(program: &mut Value) -> &mut Value {
    let steps = program["steps"].as_array_mut().expect("steps");
    let compute = steps
        .iter_mut()
        .find_map(|s| s.get_mut("Compute"))
        .expect("a compute step");
    &mut compute["calls"][0]
}

/// The JSON pointer of the first call of `kind` in `steps` (at `at`),
/// repeat bodies included.
fn call_pointer(steps: &Value, kind: &str, at: &str) -> Option<String> {
    for (i, s) in steps.as_array()?.iter().enumerate() {
        if let Some(calls) = s.pointer("/Compute/calls").and_then(Value::as_array)
            && let Some(j) = calls.iter().position(|c| c[1].get(kind).is_some())
        {
            return Some(format!("{at}/{i}/Compute/calls/{j}"));
        }
        if let Some(body) = s.pointer("/Repeat/body")
            && let Some(found) = call_pointer(body, kind, &format!("{at}/{i}/Repeat/body"))
        {
            return Some(found);
        }
    }
    None
}

/// The first call of `kind` in any compute step of `program`.
fn find_call<'a>(program: &'a mut Value, kind: &str) -> Option<&'a mut Value> {
    let at = call_pointer(&program["steps"], kind, "/steps")?;
    program.pointer_mut(&at)
}

#[test]
fn the_base_package_validates_and_runs() {
    assert!(matches!(outcome(base()), Ok(Outcome::Ran)));
    let package = build(&micro_two_layers(), 8).expect("builds");
    assert!(
        package
            .program
            .steps
            .iter()
            .any(|s| matches!(s, Step::Repeat { .. })),
        "the base has a repeat"
    );
    assert!(
        package.phases.iter().any(|p| !p.info.patches.is_empty()),
        "and patched rows"
    );
}

#[test]
fn a_buffer_id_out_of_range_in_a_codelet_is_refused() {
    // Once indexed the buffer list in the tile model before any check.
    let files = edited(|f| {
        json(f, "program.json", |p| {
            let call = first_call(p);
            let codelet = call[1].as_object_mut().expect("a codelet");
            let (_, args) = codelet.iter_mut().next().expect("one kind");
            let slot = args
                .as_object_mut()
                .expect("fields")
                .values_mut()
                .find(|v| v.get("buffer").is_some())
                .expect("an operand");
            slot["buffer"] = Value::from(100_000);
        });
    });
    assert!(
        problems(&files)
            .iter()
            .any(|e| matches!(e, ValidationError::UnknownBuffer { .. }))
    );
}

#[test]
fn huge_element_counts_are_refused() {
    // rows × cols once overflowed in the tile model (Add, ReduceSum,
    // AttentionBlock with huge counts).
    for (kind, fields) in [
        ("Add", &["rows", "cols"][..]),
        ("Gelu", &["elements"][..]),
        ("ReduceSum", &["count", "elements"][..]),
        ("AttentionBlock", &["q_rows", "kv_rows", "head_dim"][..]),
    ] {
        let files = edited(|f| {
            json(f, "program.json", |p| {
                let call = find_call(p, kind).expect("a call of the kind");
                for field in fields {
                    call[1][kind][*field] = Value::from(u32::MAX);
                }
            });
        });
        let found = problems(&files);
        assert!(
            found.iter().any(|e| matches!(
                e,
                ValidationError::OperandOutside { .. } | ValidationError::OperandSpan { .. }
            )),
            "{kind}: {found:?}"
        );
    }
}

/// The base package with the first activation call's `function` set to
/// `function` (the base's are all the tanh GELU, written without one).
fn with_activation(function: Value) -> PackageFiles {
    edited(|f| {
        json(f, "program.json", |p| {
            let call = find_call(p, "Gelu").expect("an activation call");
            assert!(call[1]["Gelu"].get("function").is_none(), "the tanh GELU");
            call[1]["Gelu"]["function"] = function;
        });
    })
}

#[test]
fn an_activation_of_another_function_is_caught_and_an_unknown_one_refused() {
    // Another function is a well-formed program computing something else:
    // it validates, and the per-op check stops the run.
    let files = with_activation(Value::from("Tanh"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("pkg");
    write_package_files(&path, &files).expect("written");
    let package = Package::read_with(&path, &limits()).expect("validates");
    let text = package.fixture.as_deref().expect("a stored fixture");
    let graph = parse_fixture(text).expect("parses");
    let values = values::generate(&graph, 7);
    let run = ipu_sim::tiles::run_package(&package, &graph, &values);
    assert!(
        matches!(run, Err(ipu_sim::SimError::OpMismatch(_))),
        "{:?}",
        run.err()
    );
    // A function that does not exist, or is not a name, is refused when
    // the program is read.
    for function in [Value::from("Relu"), Value::from(3), Value::Null] {
        let files = with_activation(function.clone());
        assert!(
            matches!(outcome(&files), Ok(Outcome::Refused(_))),
            "{function}"
        );
    }
}

#[test]
fn the_amp_attention_codelets_validate_and_refuse_huge_or_narrow_extents() {
    let base = amp_base();
    assert!(matches!(outcome(base), Ok(Outcome::Ran)));
    for (kind, fields, value) in [
        ("Panels", &["out_rows", "out_cols"][..], u32::MAX),
        ("AttentionSoftmax", &["rows", "stride"][..], u32::MAX),
        // Narrower than the data they hold.
        ("Panels", &["out_cols"][..], 1),
        ("AttentionSoftmax", &["stride"][..], 1),
        // A probability scale below F16's normal numbers.
        ("AttentionSoftmax", &["exponent"][..], 15),
        ("AttentionSoftmax", &["exponent"][..], u32::MAX),
    ] {
        let files = edited_from(base, |f| {
            json(f, "program.json", |p| {
                let call = find_call(p, kind).expect("a call of the kind");
                for field in fields {
                    call[1][kind][*field] = Value::from(value);
                }
            });
        });
        let found = problems(&files);
        assert!(
            found.iter().any(|e| matches!(
                e,
                ValidationError::OperandOutside { .. } | ValidationError::OperandSpan { .. }
            )),
            "{kind} {fields:?} = {value}: {found:?}"
        );
    }
    // A column of ones asked of the keys' transposed panels, which have
    // no column for it; and sums read with the blocks' strides from the
    // statistics buffer, which holds one value a row.
    for (kind, field, value) in [
        ("Panels", "ones", Value::from(true)),
        ("AttentionCombine", "sums_in_blocks", Value::from(true)),
    ] {
        let files = edited_from(base, |f| {
            json(f, "program.json", |p| {
                let call = find_call(p, kind).expect("a call of the kind");
                call[1][kind][field] = value.clone();
            });
        });
        let found = problems(&files);
        assert!(
            found.iter().any(|e| matches!(
                e,
                ValidationError::OperandOutside { .. } | ValidationError::OperandSpan { .. }
            )),
            "{kind} {field} = {value}: {found:?}"
        );
    }
}

#[test]
fn a_tile_id_of_100000_is_refused() {
    // Once made inspect-package panic.
    let files = edited(|f| {
        json(f, "program.json", |p| {
            first_call(p)[0] = Value::from(100_000)
        })
    });
    assert!(
        problems(&files)
            .iter()
            .any(|e| matches!(e, ValidationError::CodeletTile { .. }))
    );
    let files = edited(|f| {
        json(f, "placement.json", |p| {
            p["addresses"][0][0][0] = Value::from(100_000)
        });
    });
    assert!(!problems(&files).is_empty());
}

#[test]
fn a_manifest_of_two_million_tiles_is_refused() {
    // Once exhausted memory: a tile image each.
    for (file, field) in [
        ("manifest.json", "tile_count"),
        ("target.toml", "tile_count"),
    ] {
        let files = edited(|f| {
            if file == "manifest.json" {
                json(f, file, |m| m["manifest"][field] = Value::from(2_000_000));
            } else {
                let text = String::from_utf8(f[file].clone()).expect("text");
                let text = text
                    .lines()
                    .map(|l| {
                        if l.starts_with("tile_count") {
                            "tile_count = 2000000".to_owned()
                        } else {
                            l.to_owned()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                f.insert(file.to_owned(), text.into_bytes());
                json(f, "manifest.json", |m| {
                    m["manifest"]["tile_count"] = Value::from(2_000_000);
                });
            }
        });
        assert!(
            matches!(
                outcome_with(&files, &Limits::default()),
                Ok(Outcome::Refused(_))
            ),
            "{file}"
        );
    }
}

/// The body of the first repeat of the program.
fn first_repeat(program: &mut Value) -> &mut Value {
    program["steps"]
        .as_array_mut()
        .expect("steps")
        .iter_mut()
        .find_map(|s| s.get_mut("Repeat"))
        .expect("a repeat")
}

#[test]
fn a_repeat_of_u32_max_iterations_is_refused() {
    // Once exhausted memory, and would have run for ages.
    let files = edited(|f| {
        json(f, "program.json", |p| {
            first_repeat(p)["count"] = Value::from(u32::MAX)
        });
    });
    let found = match outcome_with(&files, &Limits::default()) {
        Ok(Outcome::Refused(PackageIoError::Invalid { errors, .. })) => errors,
        other => panic!("{other:?}"),
    };
    assert!(
        found
            .iter()
            .any(|e| matches!(e, ValidationError::RepeatCount { .. })),
        "{found:?}"
    );
}

#[test]
fn forty_nested_repeats_of_two_are_refused() {
    // Once hung: 2^40 iterations of the body.
    let files = edited(|f| {
        json(f, "program.json", |p| {
            let mut steps = p["steps"].take();
            for level in 0..40 {
                steps = serde_json::json!([{ "Repeat": {
                    "name": format!("nest{level}"), "count": 2, "body": steps,
                    "iteration_buffers": [] } }]);
            }
            p["steps"] = steps;
        });
    });
    match outcome_with(&files, &Limits::default()) {
        Ok(Outcome::Refused(e)) => {
            let text = e.to_string();
            assert!(
                text.contains("nested")
                    || text.contains("recursion")
                    || text.contains("step executions"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// The stored fixture with `params.NAME` set to `value`.
fn fixture_param(name: &str, value: u64) -> PackageFiles {
    edited(|f| {
        json(f, "fixture.json", |x| {
            x["params"][name] = Value::from(value)
        })
    })
}

#[test]
fn a_stored_fixture_of_2_pow_24_tokens_is_refused_before_any_value() {
    // Weights were once generated for it before the fixture was checked
    // against the package, exhausting memory. Now reading refuses it, and
    // a run generates values only for packages that read.
    let files = fixture_param("tokens", 1 << 24);
    let found = match outcome_with(&files, &Limits::default()) {
        Ok(Outcome::Refused(PackageIoError::Invalid { errors, .. })) => errors,
        other => panic!("{other:?}"),
    };
    assert!(
        found.iter().any(|e| matches!(
            e,
            ValidationError::FixtureMismatch(
                FixtureMismatch::Shape { .. } | FixtureMismatch::TooLarge { .. }
            )
        )),
        "{found:?}"
    );
}

#[test]
fn a_stored_fixture_of_65536_layers_is_refused() {
    // Once hung: a graph of three million items to parse and evaluate.
    let files = fixture_param("layers", 65_536);
    let found = match outcome_with(&files, &Limits::default()) {
        Ok(Outcome::Refused(PackageIoError::Invalid { errors, .. })) => errors,
        other => panic!("{other:?}"),
    };
    assert!(
        found
            .iter()
            .any(|e| matches!(e, ValidationError::Fixture(_))),
        "{found:?}"
    );
}

#[test]
fn a_row_index_out_of_range_in_exchange_bin_is_refused() {
    // Once read as "no row". The last word of the file is the last tile's
    // row index of the last phase.
    let files = edited(|f| {
        let rows = f.get_mut("exchange.bin").expect("rows");
        let end = rows.len();
        rows[end - 4..].copy_from_slice(&7_000u32.to_le_bytes());
    });
    match outcome(&files) {
        Ok(Outcome::Refused(PackageIoError::Rows { source, .. })) => {
            assert!(source.to_string().contains("names no row"), "{source}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_copied_object_of_another_kernel_is_refused() {
    // The package twin of the kernel cache's "another entry's object":
    // the run once failed with "no program for the entry".
    let files = edited(|f| {
        let objects: Vec<String> = f.keys().filter(|n| n.ends_with(".o")).cloned().collect();
        assert!(objects.len() >= 2, "{objects:?}");
        let other = f[&objects[1]].clone();
        f.insert(objects[0].clone(), other);
    });
    assert!(
        problems(&files)
            .iter()
            .any(|e| matches!(e, ValidationError::KernelEntry { .. }))
    );
}

#[test]
fn a_tile_whose_support_counts_too_little_kernel_code_is_refused() {
    // A tile holds the code of the kernel entries it calls; a support
    // record that counts less than that would let data overlap the code.
    let files = edited(|f| {
        json(f, "placement.json", |p| {
            let support = p["support"].as_array_mut().expect("support");
            let tile = support
                .iter_mut()
                .find(|s| s["kernel_code_bytes"].as_u64().is_some_and(|b| b > 0))
                .expect("a tile calling a kernel");
            let bytes = tile["kernel_code_bytes"].as_u64().expect("bytes");
            tile["kernel_code_bytes"] = Value::from(bytes - 4);
        });
    });
    assert!(
        problems(&files)
            .iter()
            .any(|e| matches!(e, ValidationError::KernelCode { .. })),
        "{:?}",
        problems(&files)
    );
}

#[test]
fn a_package_without_its_limits_reads_with_the_defaults() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("pkg");
    write_package_files(&path, base()).expect("written");
    Package::read(&path).expect("the base package reads");
    assert!(Package::read_with(Path::new(&path), &limits()).is_ok());
}

/// Runs one attack of `family` with `seed` and checks the property.
fn attack(family: PackageAttack, seed: u64) -> Result<(), TestCaseError> {
    attack_on(base(), family, seed)
}

/// [`attack`] on `base`.
fn attack_on(base: &PackageFiles, family: PackageAttack, seed: u64) -> Result<(), TestCaseError> {
    let mut files = base.clone();
    let Some(what) = attack_package(&mut files, family, seed) else {
        return Ok(());
    };
    match outcome(&files) {
        Ok(_) => Ok(()),
        Err(e) => Err(TestCaseError::fail(format!(
            "{} seed {seed} ({what}): {e}",
            family.name()
        ))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn edited_numbers_are_refused_or_run(seed in any::<u64>()) {
        attack(PackageAttack::Number, seed)?;
    }

    #[test]
    fn edited_arrays_are_refused_or_run(seed in any::<u64>()) {
        attack(PackageAttack::Array, seed)?;
    }

    #[test]
    fn swapped_strings_are_refused_or_run(seed in any::<u64>()) {
        attack(PackageAttack::Text, seed)?;
    }

    #[test]
    fn nested_repeats_are_refused_or_run(seed in any::<u64>()) {
        attack(PackageAttack::Nest, seed)?;
    }

    #[test]
    fn flipped_rows_and_objects_are_refused_or_run(seed in any::<u64>()) {
        attack(PackageAttack::Bytes, seed)?;
    }

    #[test]
    fn edited_targets_are_refused_or_run(seed in any::<u64>()) {
        attack(PackageAttack::Target, seed)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn edited_numbers_of_an_amp_attention_package_are_refused_or_run(seed in any::<u64>()) {
        attack_on(amp_base(), PackageAttack::Number, seed)?;
    }

    #[test]
    fn flipped_rows_and_objects_of_an_amp_attention_package_are_refused_or_run(
        seed in any::<u64>(),
    ) {
        attack_on(amp_base(), PackageAttack::Bytes, seed)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// An edited fixture is refused, or fails to build with an error, or
    /// builds into a package that validates and runs.
    #[test]
    fn edited_fixtures_are_refused_or_build_and_run(seed in any::<u64>()) {
        let Some((text, what)) = attack_json(&fixture_text("micro-1l-h32.json"), seed) else {
            return Ok(());
        };
        let Ok(package) = build(&text, 8) else {
            return Ok(());
        };
        let problems = package.validate();
        prop_assert!(problems.is_empty(), "{what}: the build's package does not validate: {problems:?}");
        // Runs only within the cases' work bound (a fixture edited larger
        // builds a larger package).
        if package.validate_with(&limits()).is_empty() {
            run(&package).map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
        }
    }
}

#[test]
fn a_kernel_entry_naming_another_entrys_symbol_is_refused() {
    // Found by `swapped_strings_are_refused_or_run`: a large initialise
    // entry renamed to the small one's symbol validated (the small
    // program checks for the large rows where the two row counts are
    // equal), then the tile model found no program for the large entry.
    let files = edited(|f| {
        json(f, "kernels.json", |kernels| {
            let entries = kernels[0]["entries"]
                .as_array_mut()
                .expect("the first kernel's entries");
            entries[2] = entries[0].clone();
        });
    });
    assert!(
        problems(&files).iter().any(|e| matches!(
            e,
            ValidationError::KernelEntryRepeated {
                first: 0,
                second: 2,
                ..
            }
        )),
        "{:?}",
        problems(&files)
    );
}

#[test]
fn a_model_description_is_checked_against_the_stored_graph() {
    use ipu_package::package::{
        InputSource, ModelDescription, ModelError, ModelInput, PackageWeights,
    };

    let fixture = micro_two_layers();
    let graph = parse_fixture(&fixture).expect("parses");
    let weights = PackageWeights::encode(&graph, &values::generate_weights(&graph, 1)).unwrap();
    let input = |tensor: &str| ModelInput {
        tensor: tensor.to_owned(),
        from: InputSource::Images,
    };
    let described = |inputs: Vec<ModelInput>| {
        ModelDescription::new("test-family", inputs, serde_json::json!({"any": ["thing"]}))
    };
    // Written and read back: the description is opaque past its inputs.
    let read = |edit: &dyn Fn(&mut Package)| {
        let mut package = build(&fixture, 8).expect("builds");
        package.weights = Some(weights.clone());
        package.model = Some(described(vec![input("patches")]));
        edit(&mut package);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pkg");
        package.write(&path).unwrap();
        Package::read(&path)
    };
    let good = read(&|_| {}).expect("a described package reads");
    assert_eq!(good.model, Some(described(vec![input("patches")])));

    let problems = |edit: &dyn Fn(&mut Package)| match read(edit) {
        Err(PackageIoError::Invalid { errors, .. }) => errors,
        other => panic!("{other:?}"),
    };
    let found = problems(&|p| p.weights = None);
    assert!(
        matches!(found[..], [ValidationError::ModelWithoutWeights]),
        "{found:?}"
    );
    let found = problems(&|p| p.fixture = None);
    assert!(
        matches!(
            found[..],
            [
                ValidationError::WeightsWithoutGraph,
                ValidationError::ModelWithoutGraph
            ]
        ),
        "{found:?}"
    );
    for (inputs, expected) in [
        (
            vec![input("pixels")],
            ModelError::NotAnInput {
                tensor: "pixels".to_owned(),
            },
        ),
        // A weight is not an input a user supplies.
        (
            vec![input("embed.w")],
            ModelError::NotAnInput {
                tensor: "embed.w".to_owned(),
            },
        ),
        (
            vec![input("patches"), input("patches")],
            ModelError::Repeated {
                tensor: "patches".to_owned(),
            },
        ),
    ] {
        let found = problems(&|p| p.model = Some(described(inputs.clone())));
        assert!(
            matches!(&found[..], [ValidationError::Model(e)] if *e == expected),
            "{found:?}"
        );
    }
    let found = problems(&|p| {
        let mut model = described(vec![input("patches")]);
        model.format = "ipu-package/model/v0".to_owned();
        p.model = Some(model);
    });
    assert!(
        matches!(
            found[..],
            [ValidationError::Model(ModelError::Format { .. })]
        ),
        "{found:?}"
    );
}

/// The files of micro-text-1l-h32 (a token gather) on 8 tiles.
fn text_base() -> &'static PackageFiles {
    static BASE: OnceLock<PackageFiles> = OnceLock::new();
    BASE.get_or_init(|| {
        let package =
            build(&fixture_text("micro-text-1l-h32.json"), 8).expect("the text package builds");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("text");
        package.write(&path).expect("written");
        read_package_files(&path).expect("read back")
    })
}

#[test]
fn a_gather_past_its_table_or_over_unwritable_spans_is_refused() {
    assert!(matches!(outcome(text_base()), Ok(Outcome::Ran)));
    let gather_edit = |field: &'static str, value: Value| {
        let mut files = text_base().clone();
        json(&mut files, "program.json", |p| {
            let call = find_call(p, "Gather").expect("a gather call");
            call[1]["Gather"][field] = value;
        });
        resign(&mut files);
        files
    };
    // Rows past the table's end: the tile model would fault.
    let e = problems(&gather_edit("first_row", Value::from(39)));
    assert!(
        e.iter()
            .any(|e| matches!(e, ValidationError::GatherArguments { .. })),
        "{e:?}"
    );
    // Indices or rows beyond the shards.
    for (field, value) in [("rows", u64::from(u32::MAX)), ("cols", 1 << 20)] {
        let e = problems(&gather_edit(field, Value::from(value)));
        assert!(
            e.iter().any(|e| matches!(
                e,
                ValidationError::OperandOutside { .. } | ValidationError::OperandSpan { .. }
            ) || e.to_string().contains("work")),
            "{field}: {e:?}"
        );
    }
    // Another part of the table, in range: well formed, and the per-op
    // check stops the run (`run` allows exactly that refusal).
    assert!(outcome(&gather_edit("first_row", Value::from(0))).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn edited_numbers_of_a_text_package_are_refused_or_run(seed in any::<u64>()) {
        let mut files = text_base().clone();
        if let Some(what) = attack_package(&mut files, PackageAttack::Number, seed) {
            if let Err(e) = outcome(&files) {
                return Err(TestCaseError::fail(format!("seed {seed} ({what}): {e}")));
            }
        }
    }
}

/// micro-1l-h32 with two layers and causal self-attention on 8 tiles:
/// the encoder's attention blocks carry their rows (`causal`).
fn causal_base() -> &'static PackageFiles {
    static BASE: OnceLock<PackageFiles> = OnceLock::new();
    BASE.get_or_init(|| {
        let mut fixture: Value = serde_json::from_str(&micro_two_layers()).expect("json");
        // The encoder's self-attention; the pooling head's one query row
        // attends every token.
        for layer in fixture["layers"].as_array_mut().expect("layers") {
            if layer.get("repeat").is_none() {
                continue;
            }
            for op in layer["ops"].as_array_mut().expect("ops") {
                if op["op"] == "attention" {
                    op["mask"] = Value::from("causal");
                }
            }
        }
        let text = serde_json::to_string_pretty(&fixture).expect("text");
        let package = build(&text, 8).expect("the causal base builds");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("causal-base");
        package.write(&path).expect("written");
        read_package_files(&path).expect("read back")
    })
}

#[test]
fn edited_causal_rows_are_refused_or_run() {
    assert!(matches!(outcome(causal_base()), Ok(Outcome::Ran)));
    let edits: [(&str, Value); 5] = [
        ("q_first", Value::from(u32::MAX)),
        ("kv_first", Value::from(u32::MAX)),
        ("q_first", Value::from(-1)),
        ("kv_first", Value::from(1u64 << 40)),
        ("q_first", Value::from("0")),
    ];
    for (field, value) in edits {
        let files = edited_from(causal_base(), |f| {
            json(f, "program.json", |p| {
                let call = find_call(p, "AttentionBlock").expect("an attention block");
                let causal = &mut call[1]["AttentionBlock"]["causal"];
                assert!(causal.is_object(), "the first block is causal: {causal}");
                causal[field] = value.clone();
            });
        });
        let result = outcome(&files);
        assert!(result.is_ok(), "{field} = {value}: {result:?}");
    }
    // Without `causal` (a package from before masks) the blocks are
    // unmasked: the package reads and runs, and the per-op check finds
    // the unmasked result.
    let files = edited_from(causal_base(), |f| {
        json(f, "program.json", |p| {
            let call = find_call(p, "AttentionBlock").expect("an attention block");
            call[1]["AttentionBlock"]
                .as_object_mut()
                .expect("object")
                .remove("causal");
        });
    });
    assert!(outcome(&files).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn edited_numbers_of_a_causal_package_are_refused_or_run(seed in any::<u64>()) {
        attack_on(causal_base(), PackageAttack::Number, seed)?;
    }
}
