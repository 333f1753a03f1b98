//! Integration tests of ipu-package: the fixtures and their parameter
//! counts, fixture errors with JSON paths, graph validation, deterministic
//! values, the safetensors loader, layout planning, the package files on
//! disk and the cycle estimate. What runs on the tile model (hostile
//! packages that validated) is tested in ipu-sim, which depends on this
//! crate.

mod attention;
mod bad_fixtures;
mod choose;
mod fixtures;
mod graph;
mod lower;
mod package_files;
mod plan;
mod profile;
mod safetensors;
mod values;

use std::path::PathBuf;

/// The text of `fixtures/<name>` at the workspace root.
pub fn fixture_text(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}
