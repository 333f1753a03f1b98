//! `cargo xtask alloc`: the placement tools.
//!
//! `alloc FILE.csv --capacity BYTES [--timeout SECONDS]` solves one
//! MiniMalloc-style CSV problem and prints exactly one line,
//! `result=fits|infeasible|unknown peak=... capacity=... lower_bound=...
//! buffers=... elapsed_ms=...`; the exit status is 0 only for `fits`.
//!
//! `alloc bench [--quick]` prints the figures the allocator is judged by:
//! success rate and times on generated zero-slack instances, the gap to the
//! bound on large trace-like instances, and the time to place a SigLIP-scale
//! whole-chip problem. Build with `--release` for meaningful times.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ipu_alloc::generate::{siglip_like, trace_like, zero_slack};
use ipu_alloc::{CsvProblem, PlaceConfig, SolveConfig, SolveResult, place};

pub fn alloc(args: &[String]) -> Result<ExitCode, String> {
    if args.first().is_some_and(|a| a == "bench") {
        return alloc_bench(&args[1..]);
    }
    let mut file = None;
    let mut capacity: Option<u64> = None;
    let mut timeout = 10.0f64;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--capacity" => {
                let v = it.next().ok_or("--capacity needs a value in bytes")?;
                capacity = Some(v.parse().map_err(|_| format!("bad --capacity `{v}`"))?);
            }
            "--timeout" => {
                let v = it.next().ok_or("--timeout needs a value in seconds")?;
                timeout = v.parse().map_err(|_| format!("bad --timeout `{v}`"))?;
            }
            other if file.is_none() && !other.starts_with("--") => file = Some(other.to_owned()),
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    let usage = "usage: cargo xtask alloc FILE.csv --capacity BYTES [--timeout SECONDS]";
    let file = file.ok_or(usage)?;
    let capacity = capacity.ok_or(usage)?;
    if !(timeout.is_finite() && timeout >= 0.0) {
        return Err(format!("bad --timeout `{timeout}`"));
    }
    let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let started = Instant::now();
    let problem = CsvProblem::parse(&text).map_err(|e| format!("{file}: {e}"))?;
    let config = SolveConfig {
        max_nodes: u64::MAX,
        timeout: Some(Duration::from_secs_f64(timeout)),
        ..SolveConfig::default()
    };
    let out = problem.solve(capacity, &config);
    let elapsed = started.elapsed().as_millis();
    println!(
        "result={} peak={} capacity={} lower_bound={} buffers={} elapsed_ms={}",
        out.result,
        out.peak,
        capacity,
        out.lower_bound,
        problem.buffers.len(),
        elapsed
    );
    if out.result == SolveResult::Fits {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(format!(
            "the problem was not placed within capacity {capacity}: result={}",
            out.result
        ))
    }
}

fn alloc_bench(args: &[String]) -> Result<ExitCode, String> {
    let quick = args.iter().any(|a| a == "--quick");
    let seeds: u64 = if quick { 3 } else { 20 };
    println!(
        "# zero-slack instances (capacity 1 MiB x 1000 steps, guillotine cuts), 10 s limit each"
    );
    for n in [150usize, 300, 450] {
        let mut solved = 0;
        let mut times = Vec::new();
        let mut greedy_gap = 0.0f64;
        let mut worst = Duration::ZERO;
        let cpu = cpu_time();
        for seed in 0..seeds {
            let (p, _) = zero_slack(seed, n, 1 << 20, 1000);
            let lb = p.lower_bound();
            // The greedy passes alone (unbounded capacity): how far they miss.
            let greedy_only = SolveConfig {
                max_nodes: 0,
                timeout: None,
                ..SolveConfig::default()
            };
            let g = p.solve(u64::MAX >> 1, &greedy_only);
            greedy_gap += g.peak as f64 / lb as f64 - 1.0;
            let t = Instant::now();
            let out = p.solve(lb, &SolveConfig::default());
            let el = t.elapsed();
            worst = worst.max(el);
            if out.result == SolveResult::Fits {
                solved += 1;
                times.push(el);
            }
        }
        times.sort();
        let median = times.get(times.len() / 2).copied().unwrap_or_default();
        let max = times.last().copied().unwrap_or_default();
        let mean = if times.is_empty() {
            Duration::ZERO
        } else {
            times.iter().sum::<Duration>() / times.len() as u32
        };
        println!(
            "zero_slack n={n} solved={solved}/{seeds} median_ms={:.1} mean_ms={:.1} max_solved_ms={:.1} max_any_ms={:.1} cpu_ms_total={} greedy_gap_mean={:.1}%",
            ms(median),
            ms(mean),
            ms(max),
            ms(worst),
            cpu_ms_since(cpu),
            100.0 * greedy_gap / seeds as f64
        );
    }
    println!("# trace-like instances: greedy passes only, peak / lower bound");
    for n in [10_000usize, 100_000] {
        let p = trace_like(1, n);
        let lb = p.lower_bound();
        let cpu = cpu_time();
        let t = Instant::now();
        let out = p.solve(
            u64::MAX >> 1,
            &SolveConfig {
                max_nodes: 0,
                timeout: None,
                ..SolveConfig::default()
            },
        );
        let el = t.elapsed();
        println!(
            "trace n={n} peak={} lower_bound={} ratio={:.4} elapsed_ms={:.1} cpu_ms={}",
            out.peak,
            lb,
            out.peak as f64 / lb as f64,
            ms(el),
            cpu_ms_since(cpu)
        );
    }
    println!("# SigLIP-scale whole chip: 1472 tiles x 340 requests, 250 steps");
    let problem = siglip_like(1, 1472, 340, 250);
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
