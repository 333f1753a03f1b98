//! GEMMs run in inner windows (a budget no grid fits whole): each window's
//! kernels add into the partial sums the first one wrote. The tile model runs
//! such a package op by op against the reference, end to end, and counts
//! what the estimate charges.

use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::{parse_fixture, values};
use ipu_package::lower::LowerConfig;
use ipu_package::package::Package;
use ipu_package::program::Codelet;

use crate::amp::count_calls;
use crate::fixture_text;

/// GEMM calls that add into a result an earlier window wrote.
fn accumulating_calls(package: &Package) -> usize {
    count_calls(
        package,
        |c| matches!(c, Codelet::Gemm { entry, .. } if entry.accumulate),
    )
}

#[test]
fn gemms_in_inner_windows_match_the_reference_and_their_estimate() {
    let graph = parse_fixture(&fixture_text("tiny-2l-h64.json")).expect("parses");
    let inputs = values::generate(&graph, 11);
    let build = |budget: u64| {
        let config = BuildConfig {
            tiles: Some(16),
            lower: LowerConfig {
                transient_budget: budget,
                ..LowerConfig::default()
            },
            ..BuildConfig::default()
        };
        build_package(&graph, &config, &Stages::in_memory()).expect("builds")
    };
    // At the default budget no GEMM needs windows.
    assert_eq!(
        accumulating_calls(&build(LowerConfig::default().transient_budget)),
        0
    );
    let package = [2048u64, 1024, 512]
        .into_iter()
        .map(build)
        .find(|p| accumulating_calls(p) > 0)
        .expect("a budget below every whole grid runs some GEMM in windows");
    crate::amp::assert_runs_like_the_reference(&package, &graph, &inputs, "inner windows");
    crate::cycles::assert_estimate_is_the_count(&graph, &package, "inner windows");
}
