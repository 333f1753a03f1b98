//! `cargo xtask profile PKG`: the cycle estimate of a package, as a person
//! reads it — the whole model and each repeat (layer) in cycles and µs at
//! the device clock, items (images) per second, the share of compute,
//! exchange and sync, the AMP utilisation, the roofline ratio, and where
//! the time goes per op kind, per op of a layer and per kind of tile work.
//!
//! The estimate is computed afresh from the package
//! (`ipu_package::profile::estimate`) with the model's arithmetic from the
//! package's `profile.json` (or its fixture when the package has none), and
//! must equal the `profile.json` the build wrote: a difference means the
//! package was built by other code than the one reading it, and is an
//! error, not a silent choice of one of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ipu_package::graph::parse_fixture;
use ipu_package::package::Package;
use ipu_package::profile::{
    Profile, ProfileConfig, RepeatProfile, StepKind, StepProfile, estimate,
};

/// Options of `profile`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The package directory.
    package: PathBuf,
    /// Also list every step of one run of the first repeat's body.
    #[arg(long)]
    steps: bool,
}

pub fn run(args: &Args) -> Result<ExitCode, String> {
    let profile = load(&args.package)?;
    print!("{}", render(&profile, args.steps));
    Ok(ExitCode::SUCCESS)
}

/// The package's profile, estimated afresh and checked against the one it
/// carries.
pub(crate) fn load(dir: &Path) -> Result<Profile, String> {
    let package =
        Package::read(dir).map_err(|e| format!("reading the package {}: {e}", dir.display()))?;
    fresh_profile(&package)
}

/// [`load`] for a package already read.
pub(crate) fn fresh_profile(package: &Package) -> Result<Profile, String> {
    let config = match (&package.profile, &package.fixture) {
        (Some(p), _) => ProfileConfig {
            work: p.work.clone(),
        },
        (None, Some(fixture)) => {
            let graph =
                parse_fixture(fixture).map_err(|e| format!("the package's fixture: {e}"))?;
            ProfileConfig::for_graph(&graph)
        }
        (None, None) => {
            return Err(
                "the package has neither profile.json nor its fixture; rebuild it with build-package"
                    .to_owned(),
            );
        }
    };
    let fresh = estimate(package, &config).map_err(|e| format!("estimating the package: {e}"))?;
    if let Some(stored) = &package.profile
        && *stored != fresh
    {
        return Err(format!(
            "the package's profile.json ({} cycles) differs from this build's estimate ({} cycles); rebuild the package with this build",
            stored.totals.cycles, fresh.totals.cycles
        ));
    }
    Ok(fresh)
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

/// The report printed by `cargo xtask profile`.
pub(crate) fn render(p: &Profile, list_steps: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let t = &p.totals;
    let us = |c: u64| p.micros(c);
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "profile: {} tiles of {} at {:.2} GHz, {} items per run, sync {} cycles per step",
        p.tile_count,
        p.target,
        p.clock_hz as f64 / 1e9,
        p.work.items,
        p.sync_cycles_per_step
    );
    let _ = writeln!(
        out,
        "whole model: {} cycles = {:.1} us, {:.1} items/s",
        t.cycles,
        us(t.cycles),
        p.items_per_second()
    );
    let _ = writeln!(
        out,
        "  compute {} ({:.1}%)  exchange {} ({:.1}%)  sync {} ({:.1}%)",
        t.compute_cycles,
        pct(t.compute_cycles, t.cycles),
        t.exchange_cycles,
        pct(t.exchange_cycles, t.cycles),
        t.sync_cycles,
        pct(t.sync_cycles, t.cycles)
    );
    let _ = writeln!(
        out,
        "  model MACs {} (attention {}); AMP MACs done {} (padded shards)",
        p.work.macs.total(),
        p.work.macs.attention,
        t.amp_macs
    );
    let _ = writeln!(
        out,
        "  AMP utilisation over the run {:.1}%; roofline {} cycles ({:.1} us) -> ratio {:.1}%; FP8 roofline {} cycles -> ratio {:.1}%",
        100.0 * p.amp_utilisation(),
        p.roofline_cycles,
        us(p.roofline_cycles),
        100.0 * p.roofline_ratio(),
        p.fp8_roofline_cycles,
        100.0 * p.fp8_roofline_ratio()
    );
    let _ = writeln!(
        out,
        "  every step at its floor {} cycles ({:.1} us) -> estimate / floor {:.2}",
        t.floor_cycles,
        us(t.floor_cycles),
        ratio(t.cycles, t.floor_cycles)
    );
    let check = &p.kernel_check;
    let _ = writeln!(
        out,
        "  AMP programs vs kernel cost model: {} of {} entries agree",
        check.agreeing, check.entries
    );
    for d in &check.disagreements {
        let _ = writeln!(
            out,
            "    DISAGREES {} {}: program {} closed form {} metadata {}",
            d.0, d.1, d.2, d.3, d.4
        );
    }
    let mut in_repeats = 0u64;
    for r in &p.repeats {
        let runs = p
            .steps
            .get(r.first_step as usize)
            .map_or(u64::from(r.count), |s| s.runs);
        in_repeats = in_repeats.saturating_add(r.cycles.saturating_mul(runs));
        let _ = writeln!(
            out,
            "repeat {} x{}: {} cycles = {:.1} us per iteration; compute {} ({:.1}%) exchange {} ({:.1}%) sync {} ({:.1}%); roofline {} -> ratio {:.1}%; at the floors {} -> estimate / floor {:.2}",
            r.name,
            r.count,
            r.cycles,
            us(r.cycles),
            r.compute_cycles,
            pct(r.compute_cycles, r.cycles),
            r.exchange_cycles,
            pct(r.exchange_cycles, r.cycles),
            r.sync_cycles,
            pct(r.sync_cycles, r.cycles),
            r.roofline_cycles,
            pct(r.roofline_cycles, r.cycles),
            r.floor_cycles,
            ratio(r.cycles, r.floor_cycles)
        );
    }
    if !p.repeats.is_empty() {
        let rest = t.cycles.saturating_sub(in_repeats);
        let _ = writeln!(
            out,
            "outside repeats: {} cycles = {:.1} us ({:.1}% of the run)",
            rest,
            us(rest),
            pct(rest, t.cycles)
        );
    }
    let _ = writeln!(
        out,
        "\nper op kind, whole run (cycles; % of the run):\n  {:<20} {:>6} {:>12} {:>12} {:>10} {:>12} {:>6}",
        "op kind", "steps", "compute", "exchange", "sync", "total", "%"
    );
    for k in &p.op_kinds {
        let total = k.compute_cycles + k.exchange_cycles + k.sync_cycles;
        let _ = writeln!(
            out,
            "  {:<20} {:>6} {:>12} {:>12} {:>10} {:>12} {:>5.1}%",
            k.op_kind,
            k.step_runs,
            k.compute_cycles,
            k.exchange_cycles,
            k.sync_cycles,
            total,
            pct(total, t.cycles)
        );
    }
    if let Some(r) = p.repeats.first() {
        let body = &p.steps[r.first_step as usize..(r.first_step + r.steps) as usize];
        render_ops(&mut out, r, body);
        if list_steps {
            render_steps(&mut out, r, body);
        }
    }
    let _ = writeln!(
        out,
        "\nper kind of tile work (on each step's busiest tile, whole run):\n  {:<18} {:>10} {:>12} {:>8}",
        "kind", "calls", "cycles", "% work"
    );
    for c in &p.codelets {
        if c.calls == 0 {
            continue;
        }
        let _ = writeln!(
            out,
            "  {:<18} {:>10} {:>12} {:>7.1}%",
            c.kind,
            c.calls,
            c.busiest_cycles,
            pct(c.busiest_cycles, t.compute_cycles + t.exchange_cycles)
        );
    }
    out
}

/// The per-op table of one iteration of repeat `r` (its steps `body`):
/// compute and exchange against their floors.
fn render_ops(out: &mut String, r: &RepeatProfile, body: &[StepProfile]) {
    use std::fmt::Write as _;
    let mut ops: BTreeMap<&str, OpRow> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for s in body {
        let key = s.op.as_str();
        let e = ops.entry(key).or_insert_with(|| {
            order.push(key);
            OpRow::default()
        });
        e.steps += 1;
        match s.kind {
            StepKind::Compute => {
                e.compute += s.work_cycles;
                e.compute_floor += s.floor_cycles;
            }
            StepKind::Exchange => {
                e.exchange += s.work_cycles;
                e.exchange_floor += s.floor_cycles;
            }
        }
        e.sync += s.sync_cycles;
    }
    let _ = writeln!(
        out,
        "\nper op of one {} iteration (cycles; % of the iteration; each part against its floor):\n  {:<16} {:>5} {:>10} {:>10} {:>6} {:>10} {:>10} {:>6} {:>8} {:>10} {:>6}",
        r.name,
        "op",
        "steps",
        "compute",
        "floor",
        "ratio",
        "exchange",
        "floor",
        "ratio",
        "sync",
        "total",
        "%"
    );
    for key in order {
        let o = &ops[key];
        let total = o.compute + o.exchange + o.sync;
        let _ = writeln!(
            out,
            "  {:<16} {:>5} {:>10} {:>10} {:>6.2} {:>10} {:>10} {:>6.2} {:>8} {:>10} {:>5.1}%",
            key,
            o.steps,
            o.compute,
            o.compute_floor,
            ratio(o.compute, o.compute_floor),
            o.exchange,
            o.exchange_floor,
            ratio(o.exchange, o.exchange_floor),
            o.sync,
            total,
            pct(total, r.cycles)
        );
    }
}

/// Every step of one iteration of repeat `r` (its steps `body`), with its
/// floor.
fn render_steps(out: &mut String, r: &RepeatProfile, body: &[StepProfile]) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "\nsteps of one {} iteration:", r.name);
    for s in body {
        let phase = s.exchange.as_ref().map_or(String::new(), |x| {
            format!(
                " horizon {} bound {} copies {}",
                x.horizon, x.endpoint_lower_bound, x.copy_cycles
            )
        });
        let _ = writeln!(
            out,
            "  {:>4} {:<8} {:<32} {:>9} floor {:>9} ({:>5.2}) busiest {:<6} active {:>5} mean {:>9}{}",
            s.index,
            match s.kind {
                StepKind::Compute => "compute",
                StepKind::Exchange => "exchange",
            },
            s.name,
            s.cycles,
            s.floor_cycles,
            ratio(s.work_cycles, s.floor_cycles),
            s.busiest_tile.map_or("-".to_owned(), |t| t.to_string()),
            s.active_tiles,
            s.mean_tile_cycles,
            phase
        );
    }
}

/// One op's steps in one iteration, and their floors.
#[derive(Default)]
struct OpRow {
    steps: usize,
    compute: u64,
    compute_floor: u64,
    exchange: u64,
    exchange_floor: u64,
    sync: u64,
}

/// `a / b`, 0 when `b` is 0.
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}
