//! Integration tests of ipu-frontend: SigLIP checkpoint import (the
//! code-built graph against the fixtures, the name mapping element by
//! element, bad checkpoints), image preprocessing against Pillow and
//! transformers, the F32 graph against transformers' outputs, and
//! calibrated packages against transformers and the tile model, and the
//! packaging of a calibrated checkpoint with its F16 re-calibration.

mod calibrate;
mod checkpoint;
mod class_token;
mod dinov2;
mod images;
mod package;
mod text;
mod transformers;

use std::path::PathBuf;

/// The text of `fixtures/<name>` at the workspace root.
pub fn fixture_text(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}
