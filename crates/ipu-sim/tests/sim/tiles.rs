//! The tile model end to end: small fixtures built into packages (placed,
//! scheduled, kernels compiled), written and read back, run on per-tile
//! SRAM images, and compared with the reference evaluation.

use ipu_package::build::{BuildConfig, build_package};
use ipu_package::graph::{parse_fixture, values};
use ipu_package::package::Package;
use ipu_sim::evaluate;
use ipu_sim::reference::compare::{Tolerance, compare};
use ipu_sim::tiles::run_package;

fn fixture(name: &str) -> String {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn small_packages_run_and_match_the_reference() {
    let cache = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    for name in ["micro-1l-h32.json", "tiny-2l-h64.json"] {
        let graph = parse_fixture(&fixture(name)).unwrap();
        let inputs = values::generate(&graph, 11);
        let reference = evaluate(&graph, &inputs).unwrap();
        for tiles in [16, 64] {
            let config = BuildConfig {
                tiles,
                kernel_cache: Some(cache.path().to_owned()),
                ..BuildConfig::default()
            };
            let built =
                build_package(&graph, &config).unwrap_or_else(|e| panic!("{name} on {tiles}: {e}"));
            let dir = out.path().join(format!("{name}-{tiles}"));
            built.write(&dir).unwrap();
            let package = Package::read(&dir).unwrap();
            let device = run_package(&package, &graph, &inputs)
                .unwrap_or_else(|e| panic!("{name} on {tiles}: {e}"));
            for output in graph.outputs() {
                let t = graph.tensor(output);
                let c = compare(
                    reference.get(output).unwrap(),
                    device.get(output).unwrap(),
                    Tolerance::graph(t.precision()),
                );
                eprintln!(
                    "{name} {tiles} tiles {}: max_abs {} rms {} pass {}",
                    t.name(),
                    c.max_abs,
                    c.rms_error,
                    c.pass
                );
                assert!(c.pass, "{name} on {tiles} tiles, {}: {c:?}", t.name());
            }
        }
    }
}
