//! `cargo xtask alloc`: the placement tools.
//!
//! `alloc FILE.csv --capacity BYTES [--timeout SECONDS | --nodes N] [--output FILE]`
//! solves one MiniMalloc-style CSV problem and prints one line,
//! `result=fits|infeasible|unknown peak=... capacity=... lower_bound=...
//! ratio=... buffers=... method=... nodes=... elapsed_ms=...`, where `peak`
//! is that of the best placement found when the tool stopped (also when it
//! exceeds the capacity) and `ratio` is peak / lower bound. Unless the
//! result is `fits` an `error:` line says why (the proof of infeasibility,
//! or what the search reached), and the exit status is 1; it is 0 for
//! `fits`. `--output` writes the best placement
//! as a CSV solution file. `--nodes N` stops the exact search after N
//! nodes instead of at a time limit: the verdict and placement are then
//! the same on every run, machine and thread count, where a time limit
//! makes verdicts near it vary from run to run.
//!
//! `alloc tile FILE.json [--nodes N] [--device FILE]` places one tile's
//! problem as the build's placer does (`alloc_tile`).
//!
//! `alloc bench [--quick] [--timeout SECONDS | --nodes N] [--class NAME]
//! [--sizes N,...] [--seeds N] [--write DIR]`
//! prints the figures the allocator is judged by: a table per class of the
//! exact search's zero-slack and near-zero-slack instances (`generate::
//! exact_classes`: verdict, wall and CPU time, nodes and where the search's
//! nodes failed, the valley search's own nodes, of which eight count as
//! one in the nodes column, and the buffers of the largest part it
//! searched on its own where it split the problem in time, `-` where it
//! did not) and a summary of fits / proved impossible / unknown per
//! class, then per ML-shaped trace (bound, achieved, ratio, time), and
//! the time to place a SigLIP-scale whole-chip problem. `--write DIR`
//! also writes the suites' instances as CSV files, so other solvers can
//! run on them. Build with
//! `--release` for meaningful times; wall times on a shared machine
//! overstate the work, so CPU times are printed too.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ipu_alloc::generate::{
    CLASS_SIZES, SuiteClass, exact_classes_with, ml_trace_suite, siglip_like,
};
use ipu_alloc::{
    CsvProblem, PlaceConfig, SolveConfig, SolveMethod, SolveOutcome, SolveResult, place,
};

/// Options of `alloc`: a problem to solve, or the `bench` subcommand.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<AllocCommand>,
    #[command(flatten)]
    solve: SolveArgs,
}

/// The subcommands of `alloc`.
#[derive(clap::Subcommand, Debug)]
enum AllocCommand {
    /// Print the allocator's figures: the zero-slack and near-zero-slack
    /// suites, ML-shaped traces and a SigLIP-scale whole chip (build with
    /// --release)
    Bench(BenchArgs),
    /// Place one tile's problem as the build's placer does (a file that
    /// `build-package --write-failed-tile` wrote), with as many
    /// exact-search nodes as asked
    Tile(crate::alloc_tile::TileArgs),
}

#[derive(clap::Args, Debug)]
struct SolveArgs {
    /// The problem: rows `id,lower,upper,size[,alignment][,offset]`.
    #[arg(value_name = "FILE.csv", required = true)]
    file: Option<PathBuf>,
    /// Bytes available.
    #[arg(long, required = true)]
    capacity: Option<u64>,
    /// Seconds before the search stops and reports its best placement.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Exact-search nodes before the search stops, instead of the time
    /// limit: the same verdict on every run and machine.
    #[arg(long, value_name = "N", conflicts_with = "timeout")]
    nodes: Option<u64>,
    /// Write the best placement found as a CSV solution file.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct BenchArgs {
    /// Fewer instances and a shorter limit (for CI).
    #[arg(long)]
    quick: bool,
    /// Seconds allowed per zero-slack instance.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Exact-search nodes allowed per zero-slack instance, instead of the
    /// time limit: the same verdicts on every run and machine.
    #[arg(long, value_name = "N", conflicts_with = "timeout")]
    nodes: Option<u64>,
    /// Also write the suites' instances as CSV files into DIR.
    #[arg(long, value_name = "DIR")]
    write: Option<PathBuf>,
    /// Run only the exact-search class of this name, or if none has it,
    /// the classes whose name contains it.
    #[arg(long, value_name = "NAME")]
    class: Option<String>,
    /// Buffer counts of the exact-search instances (default: 150, 300,
    /// 600 and 1000).
    #[arg(long, value_delimiter = ',', value_name = "N,...",
          value_parser = clap::value_parser!(u16).range(2..=20000))]
    sizes: Vec<u16>,
    /// Instances per exact-search class and size, from as many seeds (the
    /// first is the one the tables quote).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    seeds: u16,
}

pub fn alloc(args: &Args) -> Result<ExitCode, String> {
    let args = match &args.command {
        Some(AllocCommand::Bench(bench_args)) => return bench(bench_args),
        Some(AllocCommand::Tile(tile_args)) => return crate::alloc_tile::alloc_tile(tile_args),
        None => &args.solve,
    };
    // clap requires both without a subcommand.
    let (Some(path), Some(capacity)) = (&args.file, args.capacity) else {
        return Err("give FILE.csv and --capacity BYTES, or `bench`".to_owned());
    };
    let limit = Limit::of(args.timeout, args.nodes)?;
    let file = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {file}: {e}"))?;
    let started = Instant::now();
    let problem = CsvProblem::parse(&text).map_err(|e| format!("{file}: {e}"))?;
    let out = problem.solve(capacity, &limit.config());
    let elapsed = started.elapsed();
    println!(
        "{} buffers={} nodes={} elapsed_ms={}",
        summary(&out, capacity),
        problem.buffers.len(),
        out.nodes,
        elapsed.as_millis()
    );
    if let (Some(path), Some(offsets)) = (&args.output, &out.offsets) {
        std::fs::write(path, problem.to_csv(Some(offsets)))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if out.result == SolveResult::Fits {
        return Ok(ExitCode::SUCCESS);
    }
    // The reason goes out as the task's `error:` line.
    Err(format!(
        "result={} within capacity {}: {}",
        out.result,
        capacity,
        reason(&out, capacity, limit)
    ))
}

/// `result=... peak=... capacity=... lower_bound=... ratio=... method=...`.
fn summary(out: &SolveOutcome, capacity: u64) -> String {
    let peak = if out.offsets.is_some() {
        out.peak.to_string()
    } else {
        "none".to_owned()
    };
    format!(
        "result={} peak={peak} capacity={capacity} lower_bound={} ratio={} method={}",
        out.result,
        out.lower_bound,
        ratio(out),
        method(out.method)
    )
}

fn ratio(out: &SolveOutcome) -> String {
    match (&out.offsets, out.lower_bound) {
        (Some(_), 0) => "1.0000".to_owned(),
        (Some(_), lb) => format!("{:.4}", out.peak as f64 / lb as f64),
        (None, _) => "none".to_owned(),
    }
}

fn method(m: Option<SolveMethod>) -> String {
    match m {
        None => "none".to_owned(),
        Some(SolveMethod::Trivial) => "trivial".to_owned(),
        Some(SolveMethod::Skyline) => "skyline".to_owned(),
        Some(SolveMethod::Greedy(g)) => format!("greedy-{:?}-{:?}", g.order, g.fit),
        Some(SolveMethod::Squeaky) => "squeaky".to_owned(),
        Some(SolveMethod::Exact) => "exact".to_owned(),
        Some(other) => format!("{other:?}"),
    }
}

/// What stops the exact search: a wall-clock limit, or a node budget,
/// under which the verdict does not depend on the machine or on timing.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Limit {
    Time(Duration),
    Nodes(u64),
}

impl Limit {
    /// The limit of `--timeout SECONDS` and `--nodes N` (which wins).
    fn of(timeout: f64, nodes: Option<u64>) -> Result<Limit, String> {
        match nodes {
            Some(n) => Ok(Limit::Nodes(n)),
            None => seconds(timeout).map(Limit::Time),
        }
    }

    /// The solver's configuration under this limit.
    fn config(self) -> SolveConfig {
        let (max_nodes, timeout) = match self {
            Limit::Time(t) => (u64::MAX, Some(t)),
            Limit::Nodes(n) => (n, None),
        };
        SolveConfig {
            max_nodes,
            timeout,
            ..SolveConfig::default()
        }
    }

    /// How much the limit allows: "10.0 s", "1000000 nodes".
    fn amount(self) -> String {
        match self {
            Limit::Time(t) => format!("{:.1} s", t.as_secs_f64()),
            Limit::Nodes(n) => format!("{n} nodes"),
        }
    }

    /// The limit as a reason says it: "the 10.0 s timeout", "its budget
    /// of 1000000 nodes".
    fn said(self) -> String {
        match self {
            Limit::Time(_) => format!("the {} timeout", self.amount()),
            Limit::Nodes(_) => format!("its budget of {}", self.amount()),
        }
    }
}

/// Why a solve did not fit: the proof, or what the search reached.
fn reason(out: &SolveOutcome, capacity: u64, limit: Limit) -> String {
    if let Some(proof) = &out.infeasibility {
        return format!("proved infeasible: {proof}");
    }
    let best = match &out.offsets {
        Some(_) => format!(
            "the best placement found peaks at {} bytes, {} bytes above the capacity and {} x the lower bound {}",
            out.peak,
            out.peak.saturating_sub(capacity),
            ratio(out),
            out.lower_bound
        ),
        None => "no placement was made".to_owned(),
    };
    if out.used_exact {
        format!(
            "no placement within the capacity found within {} ({} search nodes); {best}",
            limit.said(),
            out.nodes
        )
    } else {
        format!("no placement within the capacity found and no search was run; {best}")
    }
}

fn seconds(s: f64) -> Result<Duration, String> {
    if s.is_finite() && s >= 0.0 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(format!("bad timeout `{s}`: give a number of seconds"))
    }
}

/// Keeps the class named `name`, or if there is none, the classes whose
/// name contains it.
fn select_classes(classes: &mut Vec<SuiteClass>, name: &str) {
    if classes.iter().any(|c| c.name == name) {
        classes.retain(|c| c.name == name);
    } else {
        classes.retain(|c| c.name.contains(name));
    }
}

fn bench(args: &BenchArgs) -> Result<ExitCode, String> {
    let limit = Limit::of(
        if args.quick {
            args.timeout.min(2.0)
        } else {
            args.timeout
        },
        args.nodes,
    )?;
    let sizes: Vec<usize> = if args.sizes.is_empty() {
        CLASS_SIZES.to_vec()
    } else {
        args.sizes.iter().map(|&n| usize::from(n)).collect()
    };
    let mut classes = exact_classes_with(&sizes, usize::from(args.seeds));
    if let Some(name) = &args.class {
        select_classes(&mut classes, name);
    }
    if args.quick {
        for c in &mut classes {
            c.instances.truncate(2);
        }
    }
    if let Some(dir) = &args.write {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let instances = classes.iter().flat_map(|c| c.instances.iter());
        for inst in instances.chain(ml_trace_suite().iter()) {
            let path = dir.join(format!("{}.{}.csv", inst.name, inst.capacity));
            std::fs::write(&path, inst.problem.to_csv(None))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        println!(
            "# wrote the instances to {} (NAME.CAPACITY.csv)",
            dir.display()
        );
    }
    println!(
        "# exact search: zero-slack and near-zero-slack classes, {} limit each, {} threads",
        limit.amount(),
        rayon::current_num_threads()
    );
    let mut verdicts = Vec::new();
    for class in &classes {
        verdicts.push(exact_class(class, limit)?);
    }
    println!(
        "{:<16} {:>6} {:>6} {:>8} {:>8} {:>11} {:>11}",
        "class", "fits", "proved", "unknown", "of", "max_wall_ms", "total_ms"
    );
    for (class, v) in classes.iter().zip(&verdicts) {
        println!(
            "{:<16} {:>6} {:>6} {:>8} {:>8} {:>11.1} {:>11.1}",
            class.name,
            v.fits,
            v.proved,
            v.unknown,
            class.instances.len(),
            ms(v.max_wall),
            ms(v.total)
        );
    }
    println!("# ML-shaped traces: best heuristic placement vs the peak-live lower bound");
    println!(
        "{:<10} {:>7} {:>16} {:>16} {:>8} {:>9} {:>7}  method",
        "instance", "buffers", "bound", "achieved", "ratio", "wall_ms", "cpu_ms"
    );
    let mut traces = ml_trace_suite();
    if args.quick {
        traces.truncate(2);
    }
    for inst in &traces {
        let config = SolveConfig {
            max_nodes: 0,
            timeout: None,
            ..SolveConfig::default()
        };
        let cpu = cpu_time();
        let t = Instant::now();
        let out = inst.problem.solve(u64::MAX, &config);
        let el = t.elapsed();
        if let Some(offsets) = &out.offsets {
            inst.problem
                .check(out.peak, offsets)
                .map_err(|e| format!("{}: the placement fails its check: {e:?}", inst.name))?;
        }
        println!(
            "{:<10} {:>7} {:>16} {:>16} {:>8} {:>9.1} {:>7}  {}",
            inst.name,
            inst.problem.buffers.len(),
            out.lower_bound,
            out.peak,
            ratio(&out),
            ms(el),
            cpu_ms_since(cpu),
            method(out.method)
        );
    }
    let tiles = ipu_target::Target::ipu21().tile_count();
    println!("# SigLIP-scale whole chip: {tiles} tiles x 340 requests, 250 steps");
    let problem = siglip_like(1, tiles, 340, 250);
    let requests: usize = problem.tiles.iter().map(|t| t.requests.len()).sum();
    for verify in [false, true] {
        let config = PlaceConfig {
            verify,
            ..PlaceConfig::default()
        };
        let cpu = cpu_time();
        let t = Instant::now();
        let placed = place(&problem, &config).map_err(|e| e.to_string())?;
        let el = t.elapsed();
        let s = placed.summary();
        println!(
            "siglip tiles={} requests={requests} verify={verify} elapsed_ms={:.1} cpu_ms={} threads={} exact_tiles={} achieved/bound={:.4} worst_ratio={:.4} min_headroom_bytes={}",
            s.tiles,
            ms(el),
            cpu_ms_since(cpu),
            rayon::current_num_threads(),
            s.exact_tiles,
            s.achieved_bytes as f64 / s.bound_bytes.max(1) as f64,
            s.worst_ratio,
            s.min_headroom_bytes
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How the instances of one class ended.
#[derive(Default)]
struct ClassVerdicts {
    fits: usize,
    proved: usize,
    unknown: usize,
    max_wall: Duration,
    total: Duration,
}

/// Solves every instance of `class` at its capacity and prints a row each
/// (verdict, wall and CPU time, nodes, where the search's nodes failed)
/// and the class's totals. `Err` if a placement the solver called fitting
/// fails the independent check or lies below the lower bound.
fn exact_class(class: &SuiteClass, limit: Limit) -> Result<ClassVerdicts, String> {
    println!("## {}: {}", class.name, class.about);
    println!(
        "{:<12} {:>7} {:>9} {:>9} {:>10} {:>9} {:>7} {:>11} {:>5}  failed by: valley release memo no-child dominance section cut; closed; valley-search nodes; largest part",
        "instance", "buffers", "capacity", "bound", "result", "wall_ms", "cpu_ms", "nodes", "runs"
    );
    let mut v = ClassVerdicts::default();
    for inst in &class.instances {
        let cpu = cpu_time();
        let t = Instant::now();
        let out = inst.problem.solve(inst.capacity, &limit.config());
        let el = t.elapsed();
        v.total += el;
        v.max_wall = v.max_wall.max(el);
        match out.result {
            SolveResult::Fits => {
                let offsets = out
                    .offsets
                    .as_ref()
                    .ok_or_else(|| format!("{}: fits, but no placement was returned", inst.name))?;
                inst.problem
                    .check(inst.capacity, offsets)
                    .map_err(|e| format!("{}: the placement fails its check: {e:?}", inst.name))?;
                if out.peak < out.lower_bound {
                    return Err(format!(
                        "{}: peak {} below the bound {}",
                        inst.name, out.peak, out.lower_bound
                    ));
                }
                v.fits += 1;
            }
            SolveResult::Infeasible => v.proved += 1,
            SolveResult::Unknown => v.unknown += 1,
        }
        let s = out.search;
        println!(
            "{:<12} {:>7} {:>9} {:>9} {:>10} {:>9.1} {:>7} {:>11} {:>5}  {} {} {} {} {} {} {}; {}; {}; {}",
            inst.name,
            inst.problem.buffers.len(),
            inst.capacity,
            out.lower_bound,
            out.result,
            ms(el),
            cpu_ms_since(cpu),
            out.nodes,
            s.runs,
            s.valley,
            s.release,
            s.memo,
            s.no_children,
            s.dominance,
            s.section,
            s.cut,
            s.closed,
            s.local,
            if s.largest_part == 0 {
                "-".to_owned()
            } else {
                s.largest_part.to_string()
            }
        );
    }
    println!(
        "{} fits={} proved={} unknown={} of {} max_wall_ms={:.1} total_wall_ms={:.1}",
        class.name,
        v.fits,
        v.proved,
        v.unknown,
        class.instances.len(),
        ms(v.max_wall),
        ms(v.total)
    );
    Ok(v)
}

/// CPU time (user + system) of this process so far, from
/// `/proc/self/stat`; `None` where that file does not exist. Wall times on a
/// shared machine overstate the work, so figures print both.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 12th and 13th of those, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

fn cpu_ms_since(start: Option<Duration>) -> String {
    match (start, cpu_time()) {
        (Some(a), Some(b)) => format!("{:.0}", ms(b.saturating_sub(a))),
        _ => "n/a".to_owned(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::{Limit, select_classes};
    use ipu_alloc::SolveResult;
    use ipu_alloc::generate::exact_classes_with;
    use std::time::Duration;

    fn selected(name: &str) -> Vec<&'static str> {
        let mut classes = exact_classes_with(&[20], 1);
        select_classes(&mut classes, name);
        classes.iter().map(|c| c.name).collect()
    }

    #[test]
    fn a_class_name_selects_that_class_and_a_fragment_every_match() {
        assert_eq!(selected("guillotine"), ["guillotine"]);
        assert_eq!(
            selected("guill"),
            ["guillotine", "guillotine-byte", "guillotine-near"]
        );
        assert_eq!(
            selected("near"),
            ["guillotine-near", "interval-near", "ml-near"]
        );
        assert!(selected("nothing").is_empty());
    }

    #[test]
    fn a_node_budget_replaces_the_time_limit_and_gives_one_verdict() {
        assert_eq!(
            Limit::of(2.5, None),
            Ok(Limit::Time(Duration::from_secs_f64(2.5)))
        );
        assert_eq!(Limit::of(2.5, Some(900)), Ok(Limit::Nodes(900)));
        assert!(Limit::of(-1.0, None).is_err());
        let config = Limit::Nodes(900).config();
        assert_eq!((config.max_nodes, config.timeout), (900, None));
        assert_eq!(Limit::Nodes(900).said(), "its budget of 900 nodes");
        // A near-zero-slack cut the search does not finish within the
        // budget, solved twice: the same verdict, nodes and placement.
        let classes = exact_classes_with(&[300], 1);
        let class = classes
            .iter()
            .find(|c| c.name == "guillotine-near")
            .unwrap();
        let inst = &class.instances[0];
        let runs: Vec<_> = (0..2)
            .map(|_| inst.problem.solve(inst.capacity, &config))
            .collect();
        assert_eq!(runs[0].result, runs[1].result);
        assert_eq!(runs[0].nodes, runs[1].nodes);
        assert_eq!(runs[0].offsets, runs[1].offsets);
        assert!(runs[0].used_exact);
        assert!(runs[0].nodes <= 900 + 1, "{} nodes", runs[0].nodes);
        // The budget, not the instance, ended the search.
        assert_eq!(runs[0].result, SolveResult::Unknown);
    }
}
