//! `cargo xtask alloc`: the placement tools.
//!
//! `alloc FILE.csv --capacity BYTES [--timeout SECONDS] [--output FILE]`
//! solves one MiniMalloc-style CSV problem and prints one line,
//! `result=fits|infeasible|unknown peak=... capacity=... lower_bound=...
//! ratio=... buffers=... method=... nodes=... elapsed_ms=...`, where `peak`
//! is that of the best placement found when the tool stopped (also when it
//! exceeds the capacity) and `ratio` is peak / lower bound. Unless the
//! result is `fits` an `error:` line says why (the proof of infeasibility,
//! or what the search reached), and the exit status is 1; it is 0 for
//! `fits`. `--output` writes the best placement
//! as a CSV solution file.
//!
//! `alloc bench [--quick] [--timeout SECONDS] [--write DIR]` prints the
//! figures the allocator is judged by: per instance of the zero-slack and
//! near-zero-slack suites (solved, time, nodes and where the search's nodes
//! failed), per
//! ML-shaped trace (bound, achieved, ratio, time), and the time to place a
//! SigLIP-scale whole-chip problem. `--write DIR` also writes the suites'
//! instances as CSV files, so other solvers can run on them. Build with
//! `--release` for meaningful times; wall times on a shared machine
//! overstate the work, so CPU times are printed too.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use ipu_alloc::generate::{
    SuiteInstance, ml_trace_suite, near_zero_slack_suite, siglip_like, zero_slack_suite,
};
use ipu_alloc::{
    CsvProblem, PlaceConfig, SolveConfig, SolveMethod, SolveOutcome, SolveResult, place,
};

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask alloc",
    about = "Place a MiniMalloc-style CSV problem within a capacity"
)]
struct SolveArgs {
    /// The problem: rows `id,lower,upper,size[,alignment][,offset]`.
    file: PathBuf,
    /// Bytes available.
    #[arg(long)]
    capacity: u64,
    /// Seconds before the search stops and reports its best placement.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Write the best placement found as a CSV solution file.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask alloc bench",
    about = "Print the allocator's figures"
)]
struct BenchArgs {
    /// Fewer instances and a shorter limit (for CI).
    #[arg(long)]
    quick: bool,
    /// Seconds allowed per zero-slack instance.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Also write the suites' instances as CSV files into DIR.
    #[arg(long, value_name = "DIR")]
    write: Option<PathBuf>,
}

pub fn alloc(args: &[String]) -> Result<ExitCode, String> {
    if args.first().is_some_and(|a| a == "bench") {
        let args: BenchArgs = match crate::parse_args("alloc bench", &args[1..]) {
            Ok(a) => a,
            Err(code) => return Ok(code),
        };
        return bench(&args);
    }
    let args: SolveArgs = match crate::parse_args("alloc", args) {
        Ok(a) => a,
        Err(code) => return Ok(code),
    };
    let timeout = seconds(args.timeout)?;
    let file = args.file.display();
    let text =
        std::fs::read_to_string(&args.file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let started = Instant::now();
    let problem = CsvProblem::parse(&text).map_err(|e| format!("{file}: {e}"))?;
    let config = SolveConfig {
        max_nodes: u64::MAX,
        timeout: Some(timeout),
        ..SolveConfig::default()
    };
    let out = problem.solve(args.capacity, &config);
    let elapsed = started.elapsed();
    println!(
        "{} buffers={} nodes={} elapsed_ms={}",
        summary(&out, args.capacity),
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
        args.capacity,
        reason(&out, args.capacity, timeout)
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
        Some(SolveMethod::Exact) => "exact".to_owned(),
        Some(other) => format!("{other:?}"),
    }
}

/// Why a solve did not fit: the proof, or what the search reached.
fn reason(out: &SolveOutcome, capacity: u64, timeout: Duration) -> String {
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
            "no placement within the capacity found before the {:.1} s timeout ({} search nodes); {best}",
            timeout.as_secs_f64(),
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

fn bench(args: &BenchArgs) -> Result<ExitCode, String> {
    let timeout = seconds(if args.quick {
        args.timeout.min(2.0)
    } else {
        args.timeout
    })?;
    if let Some(dir) = &args.write {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        for inst in zero_slack_suite()
            .into_iter()
            .chain(near_zero_slack_suite())
            .chain(ml_trace_suite())
        {
            let path = dir.join(format!("{}.csv", inst.name));
            std::fs::write(&path, inst.problem.to_csv(None))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        println!("# wrote the suites to {}", dir.display());
    }
    let mut suite = zero_slack_suite();
    let mut near = near_zero_slack_suite();
    if args.quick {
        suite.truncate(4);
        near.truncate(2);
    }
    println!(
        "# zero-slack suite (1 MiB x 1 Mi-step rectangle, guillotine cuts; capacity = bound), {} s limit each, {} threads",
        timeout.as_secs_f64(),
        rayon::current_num_threads()
    );
    exact_suite("zero_slack", &suite, timeout)?;
    println!(
        "# near-zero-slack suite (the same cuts on the 1 KiB grid, one buffer in ten removed; capacity 1 MiB), {} s limit each",
        timeout.as_secs_f64()
    );
    exact_suite("near_zero_slack", &near, timeout)?;
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

/// Solves every instance at its capacity and prints a row each and a
/// total: solved, wall time, nodes, and where the search's nodes failed.
/// Solves every instance of `suite` and prints its figures; `Err` if a
/// placement the solver called fitting fails the independent check.
fn exact_suite(label: &str, suite: &[SuiteInstance], timeout: Duration) -> Result<(), String> {
    println!(
        "{:<14} {:>7} {:>10} {:>10} {:>11} {:>5} {:>6}  nodes failed by: valley release memo no-child dominance section",
        "instance", "buffers", "result", "wall_ms", "nodes", "runs", "depth"
    );
    let (mut solved, mut total, cpu) = (0, Duration::ZERO, cpu_time());
    for inst in suite {
        let config = SolveConfig {
            max_nodes: u64::MAX,
            timeout: Some(timeout),
            ..SolveConfig::default()
        };
        let t = Instant::now();
        let out = inst.problem.solve(inst.capacity, &config);
        let el = t.elapsed();
        total += el;
        if out.result == SolveResult::Fits {
            let offsets = out
                .offsets
                .as_ref()
                .ok_or_else(|| format!("{}: fits, but no placement was returned", inst.name))?;
            inst.problem
                .check(inst.capacity, offsets)
                .map_err(|e| format!("{}: the placement fails its check: {e:?}", inst.name))?;
            solved += 1;
        }
        let s = out.search;
        println!(
            "{:<14} {:>7} {:>10} {:>10.1} {:>11} {:>5} {:>6}  {} {} {} {} {} {}",
            inst.name,
            inst.problem.buffers.len(),
            out.result,
            ms(el),
            out.nodes,
            s.runs,
            s.max_depth,
            s.valley,
            s.release,
            s.memo,
            s.no_children,
            s.dominance,
            s.section
        );
    }
    println!(
        "{label} solved={solved}/{} total_wall_ms={:.1} cpu_ms={}",
        suite.len(),
        ms(total),
        cpu_ms_since(cpu)
    );
    Ok(())
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
