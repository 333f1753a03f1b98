//! Integration tests of ipu-package: the fixtures and their parameter
//! counts, fixture errors with JSON paths, graph validation, deterministic
//! values, the safetensors loader, SigLIP checkpoint import and image
//! preprocessing, layout planning, the package files on disk, the cycle
//! estimate, and hostile packages and fixtures.

mod bad_fixtures;
mod calibrate;
mod checkpoint;
mod checkpoint_images;
mod choose;
mod fixtures;
mod graph;
mod hostile;
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
