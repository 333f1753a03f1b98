//! `cargo xtask hostile [--packages N] [--fixtures N] [--snapshots N]
//! [--seed S] [--timeout SECONDS] [--memory-mb MB] [--keep DIR]`: a
//! hostile-input campaign through the functions the tasks call, each case
//! in a child process under a time and memory limit. The child runs the
//! hidden task `hostile-case` ([`Case`]), which does what one task does
//! with its input, through the same function.
//!
//! - Packages: the micro fixture with two layers on 8 tiles and the tiny
//!   fixture on 16 are built (in this process, as `build-package` builds);
//!   each case edits one of them with a family of `ipu_package::hostile`
//!   (numbers, arrays, strings, nested repeats, flipped bytes, the
//!   target), re-signs it (sizes and SHA-256 digests recomputed), inspects
//!   it as `inspect-package` does (`hostile-case inspect DIR`), and runs
//!   `hostile-case package DIR`, which recovers and reads it exactly as
//!   `run-package` does and, when it reads, runs it on the tile model
//!   (with its per-op check against the reference) as `run-package` does.
//!   To keep each case short, a package whose work is more than
//!   [`work_limits`] allow (a few hundred times the base's) is not run; it
//!   is counted as "over the campaign bound", apart from the clean errors.
//! - Fixtures: the micro, micro-patchify and tiny fixtures edited (their
//!   parameters most often) and built as `build-package` builds
//!   (`hostile-case fixture FILE ...`), then, if built, run.
//! - Snapshots: `fixtures/exchange/*.json` edited and scheduled and
//!   checked as `exchange FILE --check` does (`hostile-case snapshot
//!   FILE`).
//!
//! Outcomes: `ok` (success), `op-mismatch` (the package read and ran, and
//! the tile model's per-op check stopped it: for an edited package, an
//! edit that made a well-formed program compute something else; for a
//! package built from an edited fixture, a value the build got wrong —
//! counted apart so that it is seen), `clean` (refused with an `error:` line and a non-zero status),
//! `over-bound`, `inconsistent` (`inspect-package` called a package valid
//! that the run path refused, or the reverse), `panic`, `timeout` (killed
//! at the time limit) and `abort` (a signal: memory exhausted under the
//! limit, a stack overflow). The counts are printed per family; the exit
//! status is 1 if any case panicked, timed out, aborted or was
//! inconsistent, and the inputs of those cases are kept under `--keep`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use ipu_package::hostile::{
    PackageAttack, PackageFiles, attack_json, attack_package, read_package_files,
    write_package_files,
};
use ipu_package::package::{Limits, Package};

use crate::build_package::{FixtureBuild, build_fixture};
use crate::run_package::{Inputs, prepare};

/// The outcome of one case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Ok,
    Mismatch,
    Clean,
    OverBound,
    Inconsistent,
    Panic,
    Timeout,
    Abort,
}

impl Outcome {
    const ALL: [Outcome; 8] = [
        Outcome::Ok,
        Outcome::Mismatch,
        Outcome::Clean,
        Outcome::OverBound,
        Outcome::Inconsistent,
        Outcome::Panic,
        Outcome::Timeout,
        Outcome::Abort,
    ];

    fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Mismatch => "op-mismatch",
            Outcome::Clean => "clean",
            Outcome::OverBound => "over-bound",
            Outcome::Inconsistent => "inconsistent",
            Outcome::Panic => "panic",
            Outcome::Timeout => "timeout",
            Outcome::Abort => "abort",
        }
    }

    fn is_failure(self) -> bool {
        matches!(
            self,
            Outcome::Inconsistent | Outcome::Panic | Outcome::Timeout | Outcome::Abort
        )
    }
}

/// Exit statuses of `hostile-case`.
const CASE_REFUSED: u8 = 3;
const CASE_INCONSISTENT: u8 = 4;
const CASE_OVER_BOUND: u8 = 5;
const CASE_OP_MISMATCH: u8 = 6;

/// The work a package case may ask for to be run: far above the base
/// packages' own (micro with two layers does about 2^21 compute elements
/// and 2^15 exchange words), far below what would make a case long.
pub fn work_limits() -> Limits {
    Limits {
        max_repeat_count: 256,
        max_step_executions: 1 << 14,
        max_codelet_calls: 1 << 18,
        max_compute_elements: 1 << 28,
        max_exchange_words: 1 << 24,
        max_fixture_elements: 1 << 24,
        ..Limits::default()
    }
}

/// What a child process came to.
struct Ran {
    code: Option<i32>,
    timed_out: bool,
    stdout: String,
    stderr: String,
}

impl Ran {
    /// The outcome of a command-line task: success, a clean refusal, or a
    /// crash.
    fn outcome(&self) -> Outcome {
        if self.timed_out {
            Outcome::Timeout
        } else if self.stderr.contains("panicked") {
            Outcome::Panic
        } else {
            match self.code {
                Some(0) => Outcome::Ok,
                Some(101) => Outcome::Panic,
                Some(c) if c == i32::from(CASE_OVER_BOUND) => Outcome::OverBound,
                Some(c) if c == i32::from(CASE_OP_MISMATCH) => Outcome::Mismatch,
                Some(c) if c == i32::from(CASE_INCONSISTENT) => Outcome::Inconsistent,
                Some(_) if self.stderr.contains("error") => Outcome::Clean,
                Some(_) => Outcome::Inconsistent,
                None => Outcome::Abort,
            }
        }
    }
}

struct Campaign {
    exe: PathBuf,
    work: PathBuf,
    cache: PathBuf,
    timeout: Duration,
    memory_kb: u64,
    keep: Option<PathBuf>,
    counts: BTreeMap<(&'static str, Outcome), u64>,
    failures: Vec<String>,
}

impl Campaign {
    /// Runs `xtask hostile-case args...` in a child under the memory
    /// limit, killing it at the time limit. Output goes to files, so a child that writes a
    /// lot never blocks on a full pipe.
    fn case(&self, args: &[&str]) -> Result<Ran, String> {
        let out = self.work.join("stdout");
        let err = self.work.join("stderr");
        let file = |p: &Path| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -v {} && exec \"$0\" \"$@\"",
                self.memory_kb
            ))
            .arg(&self.exe)
            .arg("hostile-case")
            .args(args)
            .env("RUST_LOG", "warn")
            .env("RUST_BACKTRACE", "0")
            // Fewer malloc arenas, so that the address-space limit is
            // spent on data rather than reservations.
            .env("MALLOC_ARENA_MAX", "2")
            .stdin(Stdio::null())
            .stdout(file(&out)?)
            .stderr(file(&err)?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        let start = Instant::now();
        let (status, timed_out) = loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                break (status, false);
            }
            if start.elapsed() > self.timeout {
                // Best effort: the child may have ended just now.
                let _ = child.kill();
                break (child.wait().map_err(|e| e.to_string())?, true);
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let read = |p: &Path| {
            std::fs::read(p)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default()
        };
        Ok(Ran {
            code: status.code(),
            timed_out,
            stdout: read(&out),
            stderr: read(&err),
        })
    }

    fn record(&mut self, family: &'static str, outcome: Outcome, what: &str, input: &Path) {
        *self.counts.entry((family, outcome)).or_insert(0) += 1;
        if outcome.is_failure() {
            self.failures
                .push(format!("{family} {}: {what}", outcome.name()));
            if let Some(keep) = &self.keep {
                let to = keep.join(format!("{family}-{}", self.failures.len()));
                // Best effort: keeping inputs is a convenience.
                let _ = copy_tree(input, &to);
                let _ = std::fs::write(to.join("WHAT"), what);
            }
        }
    }

    fn package_case(
        &mut self,
        base: &PackageFiles,
        family: PackageAttack,
        seed: u64,
    ) -> Result<bool, String> {
        let mut files = base.clone();
        let Some(what) = attack_package(&mut files, family, seed) else {
            return Ok(false);
        };
        let dir = self.work.join("case");
        let _ = std::fs::remove_dir_all(&dir);
        write_package_files(&dir, &files).map_err(|e| e.to_string())?;
        let dir_text = dir.to_string_lossy().into_owned();
        let inspect = self.case(&["inspect", &dir_text])?;
        let case = self.case(&["package", &dir_text])?;
        let mut outcome = case.outcome();
        let inspect_outcome = inspect.outcome();
        let valid = inspect.stdout.contains("valid=true");
        // inspect-package and the run path read the same way: they must
        // agree on whether the package is valid.
        let read = !matches!(case.code, Some(c) if c == i32::from(CASE_REFUSED));
        if inspect_outcome.is_failure() {
            outcome = outcome.max(inspect_outcome);
        } else if !outcome.is_failure() && valid != read {
            outcome = Outcome::Inconsistent;
        }
        let what = format!(
            "seed {seed}: {what}; inspect: {} | case: {}",
            last_line(&inspect.stderr),
            last_line(&case.stderr)
        );
        self.record(family.name(), outcome, &what, &dir);
        Ok(true)
    }

    fn fixture_case(
        &mut self,
        name: &str,
        text: &str,
        tiles: u32,
        seed: u64,
    ) -> Result<bool, String> {
        let Some((edited, what)) = attack_json(text, seed) else {
            return Ok(false);
        };
        let dir = self.work.join("fixture-case");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let fixture = dir.join("fixture.json");
        std::fs::write(&fixture, &edited).map_err(|e| e.to_string())?;
        let out = dir.join("pkg").to_string_lossy().into_owned();
        let tiles = tiles.to_string();
        let cache = self.cache.to_string_lossy().into_owned();
        let built = self.case(&[
            "fixture",
            &fixture.to_string_lossy(),
            "--tiles",
            &tiles,
            "--out",
            &out,
            "--kernel-cache",
            &cache,
        ])?;
        let mut outcome = built.outcome();
        let mut detail = last_line(&built.stderr).to_owned();
        if outcome == Outcome::Ok {
            let ran = self.case(&["package", &out])?;
            outcome = ran.outcome();
            // A package the build wrote must read back.
            if ran.code == Some(i32::from(CASE_REFUSED)) {
                outcome = Outcome::Inconsistent;
            }
            detail = last_line(&ran.stderr).to_owned();
        }
        let what = format!("{name} seed {seed}: {what}; {detail}");
        self.record("fixture", outcome, &what, &dir);
        Ok(true)
    }

    fn snapshot_case(&mut self, path: &Path, seed: u64) -> Result<bool, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let Some((edited, what)) = attack_json(&text, seed) else {
            return Ok(false);
        };
        let dir = self.work.join("snapshot-case");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let file = dir.join("snapshot.json");
        std::fs::write(&file, edited).map_err(|e| e.to_string())?;
        let ran = self.case(&["snapshot", &file.to_string_lossy()])?;
        let what = format!(
            "{} seed {seed}: {what}; {}",
            path.display(),
            last_line(&ran.stderr)
        );
        self.record("snapshot", ran.outcome(), &what, &dir);
        Ok(true)
    }
}

fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// The fixture `fixtures/<name>` at the workspace root.
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(name)
}

/// Options of `hostile`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Edited packages to run
    #[arg(long, value_name = "N", default_value_t = 500)]
    packages: u64,
    /// Edited fixtures to build (and run, when they build)
    #[arg(long, value_name = "N", default_value_t = 500)]
    fixtures: u64,
    /// Edited exchange snapshots to schedule and check
    #[arg(long, value_name = "N", default_value_t = 100)]
    snapshots: u64,
    /// Seed of the edits
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Seconds a case may run before it is killed
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout: u64,
    /// Address space a case may use, in MiB
    #[arg(long, value_name = "MB", default_value_t = 4096)]
    memory_mb: u64,
    /// Keep the inputs of failing cases under DIR
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
}

pub fn run(args: &Args) -> Result<ExitCode, String> {
    let Args {
        packages,
        fixtures,
        snapshots,
        seed,
        timeout,
        memory_mb,
        ..
    } = *args;
    let keep = args.keep.clone();
    let exe = std::env::current_exe().map_err(|e| format!("the xtask binary: {e}"))?;
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut c = Campaign {
        exe,
        work: work.path().to_owned(),
        cache: work.path().join("cache"),
        timeout: Duration::from_secs(timeout),
        memory_kb: memory_mb.saturating_mul(1024),
        keep,
        counts: BTreeMap::new(),
        failures: Vec::new(),
    };
    let started = Instant::now();

    // The base packages, built by the real command.
    let mut micro: serde_json::Value =
        serde_json::from_str(&read(&fixture("micro-1l-h32.json"))?).map_err(|e| e.to_string())?;
    micro["params"]["layers"] = serde_json::Value::from(2);
    let micro_two = work.path().join("micro-2l.json");
    std::fs::write(&micro_two, micro.to_string()).map_err(|e| e.to_string())?;
    let mut bases = Vec::new();
    for (fixture, tiles, name) in [
        (micro_two.clone(), 8, "micro-2l"),
        (fixture("tiny-2l-h64.json"), 16, "tiny"),
    ] {
        let out = work.path().join(name);
        build_fixture(&fixture_build(fixture, tiles, out.clone(), c.cache.clone()))
            .map_err(|e| format!("the base package {name} did not build: {e}"))?;
        bases.push(read_package_files(&out).map_err(|e| e.to_string())?);
    }
    // A seed whose edit does not apply to the file it drew is not a case;
    // seeds are drawn until the asked number of cases ran (at most four
    // times as many seeds).
    let attempts = |n: u64| 0..n.saturating_mul(4);
    let mut done = 0;
    for i in attempts(packages) {
        if done == packages {
            break;
        }
        let case_seed = seed.wrapping_mul(1_000_003).wrapping_add(i);
        let family = PackageAttack::ALL[(i % PackageAttack::ALL.len() as u64) as usize];
        // One case in four on the larger base.
        let base = &bases[usize::from(i % 4 == 3)];
        done += u64::from(c.package_case(base, family, case_seed)?);
    }
    let sources = [
        ("micro-1l-h32.json", 8),
        ("micro-patchify.json", 8),
        ("tiny-2l-h64.json", 16),
    ];
    let texts: Vec<(&str, String, u32)> = sources
        .iter()
        .map(|&(n, t)| read(&fixture(n)).map(|text| (n, text, t)))
        .collect::<Result<_, _>>()?;
    let mut done = 0;
    for i in attempts(fixtures) {
        if done == fixtures {
            break;
        }
        let (name, text, tiles) = &texts[(i % texts.len() as u64) as usize];
        done += u64::from(c.fixture_case(
            name,
            text,
            *tiles,
            seed.wrapping_mul(7_000_003).wrapping_add(i),
        )?);
    }
    let mut snapshot_files: Vec<PathBuf> = std::fs::read_dir(fixture("exchange"))
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    snapshot_files.sort();
    let mut done = 0;
    for i in attempts(snapshots) {
        if done == snapshots {
            break;
        }
        if let Some(path) = snapshot_files.get((i % snapshot_files.len().max(1) as u64) as usize) {
            let path = path.clone();
            done +=
                u64::from(c.snapshot_case(&path, seed.wrapping_mul(9_000_011).wrapping_add(i))?);
        }
    }

    let families: Vec<&'static str> = PackageAttack::ALL
        .iter()
        .map(|f| f.name())
        .chain(["fixture", "snapshot"])
        .collect();
    print!("{:<10} {:>6}", "family", "cases");
    for o in Outcome::ALL {
        print!(" {:>12}", o.name());
    }
    println!();
    let mut totals = [0u64; Outcome::ALL.len()];
    for f in &families {
        let counts: Vec<u64> = Outcome::ALL
            .iter()
            .map(|o| c.counts.get(&(*f, *o)).copied().unwrap_or(0))
            .collect();
        print!("{f:<10} {:>6}", counts.iter().sum::<u64>());
        for (t, n) in totals.iter_mut().zip(&counts) {
            *t += n;
            print!(" {n:>12}");
        }
        println!();
    }
    print!("{:<10} {:>6}", "total", totals.iter().sum::<u64>());
    for n in totals {
        print!(" {n:>12}");
    }
    println!();
    let l = work_limits();
    println!(
        "limits: {} s and {} MiB per process; packages run when within {} step executions, {} compute elements, {} exchange words; elapsed {} s",
        timeout,
        memory_mb,
        l.max_step_executions,
        l.max_compute_elements,
        l.max_exchange_words,
        started.elapsed().as_secs()
    );
    for f in &c.failures {
        println!("failure: {f}");
    }
    if c.failures.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(format!(
            "{} case(s) panicked, timed out, aborted or were inconsistent",
            c.failures.len()
        ))
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// One case of the campaign, run in a child process: each is what a task
/// does with its input, through the same functions.
#[derive(clap::Subcommand, Debug)]
pub enum Case {
    /// Recover, read and run a package as run-package does, seeded
    Package {
        /// The package directory
        dir: PathBuf,
    },
    /// Recover, read and validate a package as inspect-package does
    Inspect {
        /// The package directory
        dir: PathBuf,
    },
    /// Build a fixture as build-package does
    Fixture {
        /// The fixture
        fixture: PathBuf,
        /// Tiles to use
        #[arg(long)]
        tiles: u32,
        /// Where to write the package
        #[arg(long)]
        out: PathBuf,
        /// The kernel cache root
        #[arg(long)]
        kernel_cache: PathBuf,
    },
    /// Schedule and check a snapshot's phases as `exchange FILE --check`
    /// does
    Snapshot {
        /// The snapshot
        file: PathBuf,
    },
}

/// A fixture build of the campaign: `fixture` on `tiles` tiles into `out`
/// with the campaign's kernel cache.
fn fixture_build(fixture: PathBuf, tiles: u32, out: PathBuf, cache: PathBuf) -> FixtureBuild {
    FixtureBuild {
        fixture: Some(fixture),
        overrides: Vec::new(),
        device: None,
        tiles: Some(tiles),
        kernel_cache: Some(cache),
        out,
        write_phases: None,
        alloc_effort: None,
        max_replans: None,
        transient_budget: None,
        attention: ipu_package::lower::AttentionUnit::Auto,
    }
}

/// The hidden task `hostile-case`: one case (see [`Case`]).
pub fn case(case: &Case) -> Result<ExitCode, String> {
    match case {
        Case::Package { dir } => package_case(dir),
        Case::Inspect { dir } => crate::run_package::inspect(dir),
        Case::Fixture {
            fixture,
            tiles,
            out,
            kernel_cache,
        } => match build_fixture(&fixture_build(
            fixture.clone(),
            *tiles,
            out.clone(),
            kernel_cache.clone(),
        )) {
            Ok(_) => Ok(ExitCode::SUCCESS),
            Err(failure) => failure.report(),
        },
        Case::Snapshot { file } => {
            let config = crate::exchange::Settings::default().config();
            crate::exchange::snapshot(file, &config, true)
        }
    }
}

/// `hostile-case package DIR`: the run path of `run-package` on one case.
/// Exit status 0 when the package read and ran, [`CASE_OP_MISMATCH`] when
/// it ran until the per-op check stopped it, [`CASE_REFUSED`] when it was
/// refused with a clean error, [`CASE_OVER_BOUND`] when it read but asks
/// for more work than [`work_limits`], and [`CASE_INCONSISTENT`] when it
/// read but the run refused it.
fn package_case(dir: &Path) -> Result<ExitCode, String> {
    let refused = |e: &dyn std::fmt::Display| {
        eprintln!("error: {e}");
        Ok(ExitCode::from(CASE_REFUSED))
    };
    if let Err(e) = Package::recover(dir) {
        return refused(&e);
    }
    let package = match Package::read(dir) {
        Ok(p) => p,
        Err(e) => return refused(&e),
    };
    if package.fixture.is_none() {
        return refused(&"the package carries no fixture");
    }
    let over = package.validate_with(&work_limits());
    if let Some(first) = over.first() {
        eprintln!("over the campaign's bound: {first}");
        return Ok(ExitCode::from(CASE_OVER_BOUND));
    }
    // The run path of run-package: the graph checked against the package,
    // values, then the tile model with its per-op check.
    let (graph, values) = match prepare(&package, 7, &Inputs::Seed) {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("error: read and validated, then the run refused it: {e}");
            return Ok(ExitCode::from(CASE_INCONSISTENT));
        }
    };
    match ipu_sim::tiles::run_package(&package, &graph, &values) {
        Ok(_) => {
            eprintln!("ran");
            Ok(ExitCode::SUCCESS)
        }
        // A well-formed program that computes something else: the per-op
        // check's verdict on the result, as run-package reports it.
        Err(ipu_sim::SimError::OpMismatch(m)) => {
            eprintln!("ran: the per-op check stopped it: {m}");
            Ok(ExitCode::from(CASE_OP_MISMATCH))
        }
        Err(e) => {
            eprintln!("error: read and validated, then the tile model refused it: {e}");
            Ok(ExitCode::from(CASE_INCONSISTENT))
        }
    }
}
