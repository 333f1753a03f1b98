//! `cargo xtask throughput`: images (items) per second by batch.
//!
//! Builds the fixture (default: the embedded SigLIP so400m) at each batch
//! asked for, estimates each package as `profile` does (the estimate the
//! tile model's count is held to), and prints per batch the cycles of a
//! run, items per second, the FP8 roofline ratio and the build time. Then
//! it looks for the largest batch that fits: from the largest listed batch
//! that fits, one batch more at a time until a build fails or `--up-to` is
//! reached, and says why the first batch that does not fit failed (proved
//! impossible, with the step and bytes, or left undecided by the placer's
//! search). With `--transient-budgets KIB,...` each batch is built under
//! each budget and the fastest that fits is reported, with its budget: the
//! plans and replans a budget leads to differ, and near the memory's edge
//! the fastest is not always the default's. Nothing is written; the
//! figures depend only on the build, not on the machine.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::build_package::{
    Attention, BuildFailure, FixtureBuild, build_unwritten, transient_budget_kib,
};

/// Options of `throughput`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The fixture (default: the embedded SigLIP so400m).
    #[arg(long)]
    fixture: Option<PathBuf>,
    /// The batches to build and estimate, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = [1u64, 2, 4],
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    batches: Vec<u64>,
    /// The largest batch tried when looking for the largest that fits
    /// (no search when it is not above every listed batch).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u64).range(1..))]
    up_to: u64,
    /// Override another fixture parameter, e.g. `--param layers=1`
    /// (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = crate::params::parse_param)]
    params: Vec<(String, u64)>,
    /// The device description (default: the built-in IPU21 of the C600).
    #[arg(long, value_name = "FILE")]
    device: Option<PathBuf>,
    /// Tiles to use (default: every tile of the device).
    #[arg(long)]
    tiles: Option<u32>,
    /// The kernel cache root (default: $IPU_KERNEL_CACHE, then the XDG cache).
    #[arg(long)]
    kernel_cache: Option<PathBuf>,
    /// Exact-search nodes per tile that no greedy pass places (as
    /// `build-package --alloc-effort`).
    #[arg(long, value_name = "NODES")]
    alloc_effort: Option<u64>,
    /// Replans after a failed placement (as `build-package
    /// --max-replans`).
    #[arg(long, value_name = "N")]
    max_replans: Option<u32>,
    /// Where attention's products run (as `build-package --attention`).
    #[arg(long, value_enum, default_value_t = Attention::Auto)]
    attention: Attention,
    /// Transient budgets in KiB (as `build-package --transient-budget`),
    /// comma-separated: each batch is built under each, and the fastest
    /// that fits is reported (default: the build's own budget).
    #[arg(long, value_name = "KIB,...", value_delimiter = ',', value_parser = transient_budget_kib())]
    transient_budgets: Vec<u64>,
}

/// One batch's outcome.
enum Outcome {
    /// Built: the figures of its estimate.
    Fits {
        cycles: u64,
        items_per_second: f64,
        fp8_roofline: f64,
        build_ms: u128,
        /// The transient budget it was built with, in KiB.
        budget_kib: u64,
    },
    /// Not built: why, in one line.
    Fails(String),
}

pub fn run(args: &Args) -> Result<ExitCode, String> {
    let mut batches = args.batches.clone();
    batches.sort_unstable();
    batches.dedup();
    println!(
        "{:>5}  {:>13}  {:>9}  {:>12}  {:>9}  {:>10}",
        "batch", "cycles", "items/s", "FP8 roofline", "build ms", "budget KiB"
    );
    let mut largest_fit = None;
    for &batch in &batches {
        let outcome = build(args, batch)?;
        print_row(batch, &outcome);
        if matches!(outcome, Outcome::Fits { .. }) {
            largest_fit = Some(batch);
        }
    }
    let Some(mut fit) = largest_fit else {
        println!("no listed batch fits");
        return Ok(ExitCode::FAILURE);
    };
    // Only search upward from a fitting batch above which nothing listed
    // failed: a listed larger batch that failed already bounds the search.
    let listed_max = batches.last().copied().unwrap_or(fit);
    if fit == listed_max && args.up_to > listed_max {
        let mut failure = None;
        for batch in listed_max + 1..=args.up_to {
            let outcome = build(args, batch)?;
            print_row(batch, &outcome);
            match outcome {
                Outcome::Fits { .. } => fit = batch,
                Outcome::Fails(why) => {
                    failure = Some((batch, why));
                    break;
                }
            }
        }
        match failure {
            Some((batch, why)) => {
                println!("largest batch that fits: {fit} (batch {batch}: {why})")
            }
            None => println!(
                "largest batch that fits: at least {fit} (every batch up to --up-to {} fits)",
                args.up_to
            ),
        }
    } else {
        println!(
            "largest listed batch that fits: {fit} (no search above: a larger listed batch fails or --up-to is not above {listed_max})"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Builds and estimates one batch under each transient budget asked for
/// (or the build's own), keeping the fewest cycles among those that fit
/// (the first listed on a tie); where none fits, the first budget's
/// failure. A request the build cannot take is the task's error.
fn build(args: &Args, batch: u64) -> Result<Outcome, String> {
    let budgets: Vec<Option<u64>> = if args.transient_budgets.is_empty() {
        vec![None]
    } else {
        args.transient_budgets.iter().copied().map(Some).collect()
    };
    let mut best: Option<Outcome> = None;
    for budget in budgets {
        let outcome = build_with(args, batch, budget)?;
        let better = match (&best, &outcome) {
            (None, _) => true,
            (Some(Outcome::Fails(_)), Outcome::Fits { .. }) => true,
            (Some(Outcome::Fits { cycles: old, .. }), Outcome::Fits { cycles, .. }) => cycles < old,
            _ => false,
        };
        if better {
            best = Some(outcome);
        }
    }
    best.ok_or_else(|| format!("batch {batch}: no budget to build with"))
}

/// Builds and estimates one batch under transient budget `budget` (KiB;
/// `None`: the build's own). A build that does not fit is an outcome.
fn build_with(args: &Args, batch: u64, budget: Option<u64>) -> Result<Outcome, String> {
    let mut overrides = vec![("batch".to_owned(), batch)];
    overrides.extend(args.params.iter().cloned());
    let request = FixtureBuild {
        fixture: args.fixture.clone(),
        overrides,
        device: args.device.clone(),
        tiles: args.tiles,
        kernel_cache: args.kernel_cache.clone(),
        out: PathBuf::new(),
        write_phases: None,
        alloc_effort: args.alloc_effort,
        max_replans: args.max_replans,
        transient_budget: budget,
        attention: args.attention.unit(),
    };
    let budget_kib =
        crate::build_package::lower_config(request.attention, budget).transient_budget / 1024;
    match build_unwritten(&request) {
        Ok((built, _, _)) => {
            let build_ms = built.started.elapsed().as_millis();
            let profile = crate::profile::fresh_profile(&built.package)?;
            Ok(Outcome::Fits {
                cycles: profile.totals.cycles,
                items_per_second: profile.items_per_second(),
                fp8_roofline: profile.fp8_roofline_ratio(),
                build_ms,
                budget_kib,
            })
        }
        Err(BuildFailure::Build { error, .. }) => {
            // The cause up to its first detail: what failed and where.
            let text = error.to_string();
            let first = text.lines().next().unwrap_or_default();
            Ok(Outcome::Fails(
                first.split("; ").next().unwrap_or(first).to_owned(),
            ))
        }
        Err(other) => Err(format!("batch {batch}: {other}")),
    }
}

fn print_row(batch: u64, outcome: &Outcome) {
    match outcome {
        Outcome::Fits {
            cycles,
            items_per_second,
            fp8_roofline,
            build_ms,
            budget_kib,
        } => println!(
            "{batch:>5}  {cycles:>13}  {items_per_second:>9.1}  {:>11.1}%  {build_ms:>9}  {budget_kib:>10}",
            100.0 * fp8_roofline
        ),
        Outcome::Fails(why) => println!("{batch:>5}  does not fit: {why}"),
    }
}
