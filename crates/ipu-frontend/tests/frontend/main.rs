//! Integration tests of ipu-frontend: SigLIP checkpoint import (the
//! code-built graph against the fixtures, the name mapping element by
//! element, bad checkpoints), image preprocessing against Pillow and
//! transformers, the F32 graph against transformers' outputs, and
//! calibrated packages against transformers and the tile model, and the
//! packaging of a calibrated checkpoint with its F16 re-calibration.

mod calibrate;
mod checkpoint;
mod class_token;
mod clip_text;
mod dinov2;
mod images;
mod package;
mod text;
mod transformers;

use std::path::{Path, PathBuf};

/// The text of `fixtures/<name>` at the workspace root.
pub fn fixture_text(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Asserts that an error reads as one line naming every one of `needles`.
pub fn assert_one_line(e: &dyn std::fmt::Display, needles: &[&str]) {
    let text = e.to_string();
    assert!(!text.contains('\n'), "{text}");
    for n in needles {
        assert!(text.contains(n), "{text} lacks {n}");
    }
}

/// A copy of the checkpoint directory `source` in a temporary directory,
/// without the files `drop` names, its `config.json` value `edit`ed.
pub fn edited_config(
    source: &Path,
    edit: impl FnOnce(&mut serde_json::Value),
    drop: &[&str],
) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(source).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if drop.iter().any(|d| name == *d) {
            continue;
        }
        std::fs::copy(entry.path(), tmp.path().join(&name)).unwrap();
    }
    let path = tmp.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
    tmp
}

/// The cosine of two vectors, in f64.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let n = |v: &[f32]| v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

/// The F32 tensor `name` of a golden safetensors file's `bytes`.
pub fn golden_f32(bytes: &[u8], name: &str) -> Vec<f32> {
    let file = safetensors::SafeTensors::deserialize(bytes).unwrap();
    let view = file.tensor(name).unwrap();
    assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
    view.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
