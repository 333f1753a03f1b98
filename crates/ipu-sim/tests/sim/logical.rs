//! The logical model: lowered small fixtures, run on buffers, agree with
//! the reference evaluation of their graphs.

use ipu_package::graph::{parse_fixture, values};
use ipu_package::lower::{LowerConfig, lower};
use ipu_sim::evaluate;
use ipu_sim::logical::run_program;
use ipu_sim::reference::compare::{Tolerance, compare};

fn fixture(name: &str) -> String {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn lowered_small_fixtures_match_the_reference() {
    for name in ["micro-1l-h32.json", "tiny-2l-h64.json"] {
        let graph = parse_fixture(&fixture(name)).unwrap();
        let inputs = values::generate(&graph, 7);
        let reference = evaluate(&graph, &inputs).unwrap();
        for tiles in [16, 64] {
            let program = lower(
                &graph,
                &LowerConfig {
                    tiles,
                    ..LowerConfig::default()
                },
            )
            .unwrap();
            let device = run_program(&program, &graph, &inputs)
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
