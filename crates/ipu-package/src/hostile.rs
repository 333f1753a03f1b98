//! Hostile inputs: packages, fixtures and exchange snapshots edited as a
//! user who means harm would edit them, for the test suite's property
//! tests and `cargo xtask hostile`.
//!
//! Every edit is a deterministic function of a seed ([`Rng`]), so a case
//! is reproduced from its seed and family alone. Package edits are made
//! to the files' bytes and then re-signed ([`resign`]): sizes and SHA-256
//! digests are recomputed, as anyone can, so that what is tested is the
//! reader's validation, not its digests. The families:
//!
//! - [`PackageAttack::Number`]: numbers anywhere in the JSON files (ids,
//!   tiles, counts, offsets, addresses, strides, shapes, the stored
//!   fixture's parameters) replaced by extreme values: 0, powers of two
//!   around 2^16, 2^24, 2^31, 2^32, 2^53 and 2^64, −1, and the original
//!   nudged, doubled or multiplied;
//! - [`PackageAttack::Array`]: an element of a JSON array removed,
//!   duplicated or swapped with its neighbour (shifting every id after
//!   it);
//! - [`PackageAttack::Text`]: a string replaced by another string of the
//!   same file (names, entry symbols, precisions, roles);
//! - [`PackageAttack::Nest`]: the program's steps wrapped in nested
//!   repeats (up to 64 deep, counts up to 2^32 − 1);
//! - [`PackageAttack::Bytes`]: bits flipped and words overwritten in
//!   `exchange.bin` and the kernel objects;
//! - [`PackageAttack::Target`]: numbers in `target.toml` replaced.
//!
//! Fixture and snapshot edits replace numbers, remove or duplicate array
//! elements and swap strings in their JSON the same way.

use std::collections::BTreeMap;

use ipu_layout::rng::SplitMix64;
use serde_json::Value;

pub use crate::package::resign;

/// A package's files by relative path (`manifest.json`, `kernels/NAME.o`,
/// ...).
pub type PackageFiles = BTreeMap<String, Vec<u8>>;

/// The workspace's generator ([`SplitMix64`]) with the picks the edits
/// use: a case is a function of its seed.
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    /// The generator of `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        // `usize` is at most 64 bits wide, so both conversions are exact.
        self.0.below(n as u64) as usize
    }

    /// One of `items`, if there is any.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        let i = self.below(items.len());
        items.get(i)
    }
}

/// An extreme replacement for the number `original`.
pub fn extreme_number(rng: &mut Rng, original: &serde_json::Number) -> Value {
    let o = original
        .as_i64()
        .map(i128::from)
        .or_else(|| original.as_u64().map(i128::from));
    let fixed: [i128; 24] = [
        0,
        1,
        2,
        3,
        4,
        7,
        8,
        31,
        32,
        255,
        256,
        65_535,
        65_536,
        1 << 20,
        1 << 24,
        (1 << 31) - 1,
        1 << 31,
        (1 << 32) - 1,
        1 << 32,
        1 << 40,
        1 << 53,
        i64::MAX as i128,
        u64::MAX as i128,
        -1,
    ];
    let v = match (rng.below(3), o) {
        (0, Some(o)) => {
            let nudged: [i128; 6] = [o + 1, o - 1, o * 2, o * 1000, o / 2, o + 4096];
            nudged[rng.below(nudged.len())]
        }
        _ => fixed[rng.below(fixed.len())],
    };
    if let Ok(u) = u64::try_from(v) {
        Value::from(u)
    } else if let Ok(i) = i64::try_from(v) {
        Value::from(i)
    } else {
        Value::from(u64::MAX)
    }
}

/// JSON pointers to every number, string and array in `value`.
fn leaves(value: &Value) -> (Vec<String>, Vec<String>, Vec<String>) {
    fn walk(v: &Value, at: String, out: &mut (Vec<String>, Vec<String>, Vec<String>)) {
        match v {
            Value::Number(_) => out.0.push(at),
            Value::String(_) => out.1.push(at),
            Value::Array(items) => {
                if !items.is_empty() {
                    out.2.push(at.clone());
                }
                for (i, item) in items.iter().enumerate() {
                    walk(item, format!("{at}/{i}"), out);
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    let key = k.replace('~', "~0").replace('/', "~1");
                    walk(item, format!("{at}/{key}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = (Vec::new(), Vec::new(), Vec::new());
    walk(value, String::new(), &mut out);
    out
}

/// How a JSON document is edited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonEdit {
    /// 1 to 3 numbers replaced by extreme values.
    Number,
    /// An array element removed, duplicated or swapped with the next.
    Array,
    /// A string replaced by another string of the document.
    Text,
}

/// Applies `edit` to `value`; returns what was done, or `None` when the
/// document has nothing to edit that way.
pub fn edit_json(value: &mut Value, edit: JsonEdit, rng: &mut Rng) -> Option<String> {
    let (numbers, strings, arrays) = leaves(value);
    match edit {
        JsonEdit::Number => {
            let mut done = Vec::new();
            for _ in 0..=rng.below(3) {
                let at = rng.pick(&numbers)?.clone();
                let slot = value.pointer_mut(&at)?;
                let Value::Number(n) = slot else {
                    continue;
                };
                let new = extreme_number(rng, n);
                done.push(format!("{at}: {n} -> {new}"));
                *slot = new;
            }
            Some(done.join("; "))
        }
        JsonEdit::Array => {
            let at = rng.pick(&arrays)?.clone();
            let Value::Array(items) = value.pointer_mut(&at)? else {
                return None;
            };
            let i = rng.below(items.len());
            let what = match rng.below(3) {
                0 => {
                    items.remove(i);
                    "removed"
                }
                1 => {
                    let copy = items[i].clone();
                    items.insert(i, copy);
                    "duplicated"
                }
                _ => {
                    if i + 1 < items.len() {
                        items.swap(i, i + 1);
                    }
                    "swapped with the next"
                }
            };
            Some(format!("{at}/{i}: {what}"))
        }
        JsonEdit::Text => {
            let at = rng.pick(&strings)?.clone();
            let from = rng.pick(&strings)?.clone();
            let new = value.pointer(&from)?.clone();
            let slot = value.pointer_mut(&at)?;
            let old = std::mem::replace(slot, new.clone());
            Some(format!("{at}: {old} -> {new}"))
        }
    }
}

/// Edits JSON text; `None` when it does not parse or has nothing to edit.
pub fn edit_json_text(text: &[u8], edit: JsonEdit, rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    let mut value: Value = serde_json::from_slice(text).ok()?;
    let what = edit_json(&mut value, edit, rng)?;
    Some((serde_json::to_vec(&value).ok()?, what))
}

/// How a package is edited (see the module header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackageAttack {
    /// Numbers in a JSON file replaced by extreme values.
    Number,
    /// An element of a JSON array removed, duplicated or swapped.
    Array,
    /// A string of a JSON file replaced by another of the same file.
    Text,
    /// The program's steps wrapped in nested repeats.
    Nest,
    /// Bits flipped and words overwritten in `exchange.bin` or an object.
    Bytes,
    /// A number in `target.toml` replaced.
    Target,
}

impl PackageAttack {
    /// Every family, in a fixed order.
    pub const ALL: [PackageAttack; 6] = [
        PackageAttack::Number,
        PackageAttack::Array,
        PackageAttack::Text,
        PackageAttack::Nest,
        PackageAttack::Bytes,
        PackageAttack::Target,
    ];

    /// The family's name.
    pub fn name(self) -> &'static str {
        match self {
            PackageAttack::Number => "number",
            PackageAttack::Array => "array",
            PackageAttack::Text => "text",
            PackageAttack::Nest => "nest",
            PackageAttack::Bytes => "bytes",
            PackageAttack::Target => "target",
        }
    }
}

/// The JSON files of a package an attack may edit (the manifest's own
/// fields too: its file entries are recomputed by [`resign`] anyway).
const JSON_FILES: [&str; 6] = [
    "program.json",
    "placement.json",
    "phases.json",
    "kernels.json",
    "fixture.json",
    "manifest.json",
];

/// Edits `files` with `attack` and re-signs them; returns what was done,
/// or `None` when the package has nothing to edit that way.
pub fn attack_package(
    files: &mut PackageFiles,
    attack: PackageAttack,
    seed: u64,
) -> Option<String> {
    let mut rng = Rng::new(seed);
    let what = match attack {
        PackageAttack::Number | PackageAttack::Array | PackageAttack::Text => {
            let edit = match attack {
                PackageAttack::Number => JsonEdit::Number,
                PackageAttack::Array => JsonEdit::Array,
                _ => JsonEdit::Text,
            };
            let name = *rng.pick(&JSON_FILES)?;
            let (bytes, what) = edit_json_text(files.get(name)?, edit, &mut rng)?;
            files.insert(name.to_owned(), bytes);
            format!("{name} {what}")
        }
        PackageAttack::Nest => {
            let mut program: Value = serde_json::from_slice(files.get("program.json")?).ok()?;
            let depth = 1 + rng.below(64);
            let counts: [u64; 6] = [1, 2, 3, 65_535, 1 << 20, u64::from(u32::MAX)];
            let count = counts[rng.below(counts.len())];
            let mut steps = program.get("steps")?.clone();
            for level in 0..depth {
                steps = serde_json::json!([{ "Repeat": {
                    "name": format!("nest{level}"),
                    "count": count,
                    "body": steps,
                    "iteration_buffers": [],
                }}]);
            }
            *program.get_mut("steps")? = steps;
            files.insert(
                "program.json".to_owned(),
                serde_json::to_vec(&program).ok()?,
            );
            format!("program.json steps in {depth} nested repeats of {count}")
        }
        PackageAttack::Bytes => {
            let names: Vec<String> = files
                .keys()
                .filter(|n| *n == "exchange.bin" || n.ends_with(".o"))
                .cloned()
                .collect();
            let name = rng.pick(&names)?.clone();
            let bytes = files.get_mut(&name)?;
            if bytes.is_empty() {
                return None;
            }
            let mut done = Vec::new();
            for _ in 0..=rng.below(8) {
                let at = rng.below(bytes.len());
                if rng.below(2) == 0 {
                    let bit = 1u8 << rng.below(8);
                    bytes[at] ^= bit;
                    done.push(format!("byte {at} ^= {bit:#x}"));
                } else {
                    let at = at - at % 4;
                    let words: [u32; 5] = [0, 1, 0xffff_ffff, 0x7fff_ffff, rng.next_u64() as u32];
                    let w = words[rng.below(words.len())];
                    if let Some(slot) = bytes.get_mut(at..at + 4) {
                        slot.copy_from_slice(&w.to_le_bytes());
                        done.push(format!("word at {at} = {w:#x}"));
                    }
                }
            }
            format!("{name} {}", done.join(", "))
        }
        PackageAttack::Target => {
            let text = String::from_utf8(files.get("target.toml")?.clone()).ok()?;
            let lines: Vec<&str> = text.lines().collect();
            let numeric: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| {
                    l.split_once('=')
                        .is_some_and(|(_, v)| v.trim().parse::<i64>().is_ok())
                })
                .map(|(i, _)| i)
                .collect();
            let &i = rng.pick(&numeric)?;
            let (key, old) = lines[i].split_once('=')?;
            let old: i64 = old.trim().parse().ok()?;
            let new = extreme_number(&mut rng, &serde_json::Number::from(old));
            let mut edited: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
            edited[i] = format!("{key}= {new}");
            let mut out = edited.join("\n");
            out.push('\n');
            files.insert("target.toml".to_owned(), out.into_bytes());
            format!("target.toml {}: {old} -> {new}", key.trim())
        }
    };
    resign(files);
    Some(what)
}

/// How a fixture or snapshot is edited.
pub const JSON_EDITS: [JsonEdit; 3] = [JsonEdit::Number, JsonEdit::Array, JsonEdit::Text];

/// Edits fixture (or snapshot) text with the family `seed` picks, biased
/// towards the fixture's parameters, the numbers users change; returns the
/// new text and what was done.
pub fn attack_json(text: &str, seed: u64) -> Option<(String, String)> {
    let mut rng = Rng::new(seed);
    let mut value: Value = serde_json::from_str(text).ok()?;
    let what = if rng.below(3) == 0
        && let Some(Value::Object(params)) = value.get_mut("params")
        && !params.is_empty()
    {
        let keys: Vec<String> = params.keys().cloned().collect();
        let key = rng.pick(&keys)?.clone();
        let slot = params.get_mut(&key)?;
        let Value::Number(n) = slot else {
            return None;
        };
        let new = extreme_number(&mut rng, n);
        let what = format!("params.{key}: {n} -> {new}");
        *slot = new;
        what
    } else {
        let edit = *rng.pick(&JSON_EDITS)?;
        edit_json(&mut value, edit, &mut rng)?
    };
    Some((serde_json::to_string_pretty(&value).ok()?, what))
}

/// Reads every file of the package directory `dir`.
pub fn read_package_files(dir: &std::path::Path) -> std::io::Result<PackageFiles> {
    let mut out = PackageFiles::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            for inner in std::fs::read_dir(entry.path())? {
                let inner = inner?;
                let file = inner.file_name().to_string_lossy().into_owned();
                out.insert(format!("{name}/{file}"), std::fs::read(inner.path())?);
            }
        } else {
            out.insert(name, std::fs::read(entry.path())?);
        }
    }
    Ok(out)
}

/// Writes `files` as the package directory `dir` (which must not exist).
pub fn write_package_files(dir: &std::path::Path, files: &PackageFiles) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("kernels"))?;
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(())
}
