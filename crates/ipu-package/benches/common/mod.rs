//! What the ipu-package benchmarks share: the SigLIP so400m b2 fixture.

/// The SigLIP so400m b2 graph, parsed from `fixtures/`.
pub fn siglip() -> ipu_package::Graph {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/siglip-so400m-b2.json");
    let text = std::fs::read_to_string(path).expect("fixture is readable");
    ipu_package::graph::parse_fixture(&text).expect("fixture parses")
}
