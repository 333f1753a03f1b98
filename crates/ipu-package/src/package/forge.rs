//! Re-signing a package: making its manifest's sizes and digests match
//! files that were edited.
//!
//! The digests are not keyed, so anyone can do this; it is what turns
//! damage (which the digests catch) into a deliberate edit (which only
//! [`Package::validate`](super::Package::validate) can catch). The test
//! suite and `cargo xtask hostile` use it to reach the checks behind the
//! digests.

use std::collections::BTreeMap;

use super::Manifest;
use super::manifest::{MANIFEST, manifest_text, sha256_hex};

/// Rewrites `files["manifest.json"]` so that every file it lists has the
/// size and SHA-256 of its content in `files` (entries of files not in
/// `files` are left), and its own digest is right. A manifest that no
/// longer parses as a manifest (an edit made it so) keeps its text with
/// only the file entries updated: a reader refuses it for its fields
/// before its digest matters. Returns `false` when there is no manifest
/// to rewrite.
pub fn resign(files: &mut BTreeMap<String, Vec<u8>>) -> bool {
    let Some(text) = files.get(MANIFEST) else {
        return false;
    };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(text) else {
        return false;
    };
    if let Some(entries) = value
        .pointer_mut("/manifest/files")
        .and_then(serde_json::Value::as_array_mut)
    {
        for entry in entries {
            let Some(name) = entry
                .get("name")
                .and_then(|n| n.as_str())
                .map(str::to_owned)
            else {
                continue;
            };
            let Some(bytes) = files.get(&name) else {
                continue;
            };
            if let Some(e) = entry.as_object_mut() {
                e.insert("bytes".into(), (bytes.len() as u64).into());
                e.insert("sha256".into(), sha256_hex(bytes).into());
            }
        }
    }
    let typed = value
        .get("manifest")
        .cloned()
        .and_then(|m| serde_json::from_value::<Manifest>(m).ok());
    let rewritten = match typed.map(|m| manifest_text(&m)) {
        Some(Ok(text)) => text,
        _ => serde_json::to_vec_pretty(&value).unwrap_or_default(),
    };
    files.insert(MANIFEST.to_owned(), rewritten);
    true
}
