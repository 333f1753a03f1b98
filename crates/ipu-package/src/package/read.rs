//! Reading a package: every file is checked against the manifest (size,
//! then SHA-256) before anything is parsed, and the directory may hold
//! nothing the manifest does not list. The manifest's size, the number
//! and sizes of the files, and the number and width of the program's
//! buffer types are checked against the [`Limits`] before they are read
//! or parsed, so that no file can make the reader allocate without bound;
//! then [`Package::validate_with`] checks the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

use super::error::io;
use super::manifest::{
    KERNELS, MANIFEST, PackageFile, entry_name_problem, parse_manifest, sha256_hex,
};
use super::rows::decode_rows;
use super::weights::WEIGHTS_FILE;
use super::{
    Limits, MODEL_FILE, Manifest, ModelDescription, Package, PackageIoError, PackageKernel,
    PackagePhase, PackagePlacement, PackageWeights, PhaseInfo, ValidationError,
};
use crate::program::Program;

/// What the reader looks at in `program.json` before parsing it: each
/// buffer's name and the tile count of its type, since parsing a type
/// resolves a table per tile.
#[derive(serde::Deserialize)]
struct ProgramScan {
    buffers: Vec<BufferScan>,
}

#[derive(serde::Deserialize)]
struct BufferScan {
    name: String,
    ty: TypeScan,
}

#[derive(serde::Deserialize)]
struct TypeScan {
    format: FormatScan,
}

#[derive(serde::Deserialize)]
struct FormatScan {
    layout: LayoutScan,
}

#[derive(serde::Deserialize)]
struct LayoutScan {
    tiling: TilingScan,
}

#[derive(serde::Deserialize)]
struct TilingScan {
    tile_count: u32,
}

/// Refuses a program whose buffer types would take more memory to parse
/// than the limits allow: more buffers than allowed, a type wider than the
/// package, or more tile shards together than allowed.
fn scan_program(bytes: &[u8], tiles: u32, limits: &Limits) -> Result<(), Vec<ValidationError>> {
    // A program that does not scan fails its full parse with a better
    // message.
    let Ok(scan) = serde_json::from_slice::<ProgramScan>(bytes) else {
        return Ok(());
    };
    let limit = |what, found: u64, limit: u64| vec![ValidationError::Limit { what, found, limit }];
    if scan.buffers.len() > limits.max_buffers {
        return Err(limit(
            "buffers",
            scan.buffers.len() as u64,
            limits.max_buffers as u64,
        ));
    }
    let mut total = 0u64;
    for b in &scan.buffers {
        let type_tiles = b.ty.format.layout.tiling.tile_count;
        if type_tiles > tiles {
            return Err(vec![ValidationError::BufferTiles {
                buffer: b.name.clone(),
                type_tiles,
                tiles,
            }]);
        }
        total = total.saturating_add(u64::from(type_tiles));
    }
    if total > limits.max_buffer_tiles {
        return Err(limit("buffer shards", total, limits.max_buffer_tiles));
    }
    Ok(())
}

/// Reads the file `entry` names under `dir` and checks its size, then its
/// digest, against the entry.
fn read_verified(dir: &Path, entry: &PackageFile) -> Result<Vec<u8>, PackageIoError> {
    let path = dir.join(&entry.name);
    let mut file = std::fs::File::open(&path).map_err(io(&path))?;
    let size = file.metadata().map_err(io(&path))?.len();
    // The size first: a cut or grown file is named as such, and a file far
    // larger than recorded is not read into memory.
    if size != entry.bytes {
        return Err(PackageIoError::Size {
            path,
            expected: entry.bytes,
            found: size,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // Never more than recorded, even if the file grows while it is read.
    file.by_ref()
        .take(entry.bytes)
        .read_to_end(&mut bytes)
        .map_err(io(&path))?;
    if bytes.len() as u64 != entry.bytes {
        return Err(PackageIoError::Size {
            path,
            expected: entry.bytes,
            found: bytes.len() as u64,
        });
    }
    let found = sha256_hex(&bytes);
    if found != entry.sha256 {
        return Err(PackageIoError::Digest {
            path,
            expected: entry.sha256.clone(),
            found,
        });
    }
    Ok(bytes)
}

/// Refuses a file in the package directory or in `kernels/` that the
/// manifest does not list: the manifest is the whole package, and a file
/// beside it (an object from another build, a fixture put there by hand)
/// would otherwise be taken for part of it or silently ignored.
fn check_unlisted(dir: &Path, listed: &BTreeSet<&str>) -> Result<(), PackageIoError> {
    let check = |sub: Option<&str>| -> Result<(), PackageIoError> {
        let at = sub.map_or_else(|| dir.to_owned(), |s| dir.join(s));
        let entries = match std::fs::read_dir(&at) {
            Ok(entries) => entries,
            // A package without kernels may have no kernels/ directory.
            Err(e) if sub.is_some() && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(PackageIoError::Io { path: at, source }),
        };
        for entry in entries {
            let entry = entry.map_err(io(&at))?;
            let path = entry.path();
            let Some(file) = entry.file_name().to_str().map(str::to_owned) else {
                return Err(PackageIoError::Unlisted { path });
            };
            let name = match sub {
                Some(s) => format!("{s}/{file}"),
                None => file,
            };
            let known = sub.is_none() && (name == MANIFEST || name == KERNELS);
            if !known && !listed.contains(name.as_str()) {
                return Err(PackageIoError::Unlisted { path });
            }
        }
        Ok(())
    };
    check(None)?;
    check(Some(KERNELS))
}

impl Package {
    /// Checks the package in `dir` without parsing its content: the
    /// manifest's version and digest, every listed file's size and SHA-256,
    /// and that the directory holds no file the manifest does not list.
    /// Returns the manifest's entries.
    pub fn verify(dir: &Path) -> Result<Vec<PackageFile>, PackageIoError> {
        let (manifest, _) = read_files(dir, &Limits::default())?;
        Ok(manifest.files)
    }

    /// Reads a package written by [`Package::write`]: every file is
    /// checked against the manifest ([`Package::verify`]), then parsed,
    /// then validated ([`Package::validate`]), within the default
    /// [`Limits`].
    pub fn read(dir: &Path) -> Result<Package, PackageIoError> {
        Package::read_with(dir, &Limits::default())
    }

    /// [`Package::read`] within `limits`.
    pub fn read_with(dir: &Path, limits: &Limits) -> Result<Package, PackageIoError> {
        let (manifest, content) = read_files(dir, limits)?;
        // Only verified content is parsed; a file the program needs but the
        // manifest does not list is as wrong as a damaged one.
        let file = |rel: &str| -> Result<&[u8], PackageIoError> {
            content
                .get(rel)
                .map(Vec::as_slice)
                .ok_or_else(|| PackageIoError::Unlisted {
                    path: dir.join(rel),
                })
        };
        let format = |rel: &str, reason: String| PackageIoError::Format {
            path: dir.join(rel),
            reason,
        };
        let text = |rel: &str| -> Result<String, PackageIoError> {
            String::from_utf8(file(rel)?.to_vec()).map_err(|source| PackageIoError::Utf8 {
                path: dir.join(rel),
                source,
            })
        };
        let unparsable = |rel: &str| {
            let path = dir.join(rel);
            move |source| PackageIoError::Json { path, source }
        };
        let json = |rel: &str| -> Result<&[u8], PackageIoError> { file(rel) };
        let target = ipu_target::Target::from_toml(&text("target.toml")?).map_err(|source| {
            PackageIoError::Target {
                path: dir.join("target.toml"),
                source,
            }
        })?;
        let invalid = |errors| PackageIoError::Invalid {
            path: dir.to_owned(),
            errors,
        };
        // The tile count bounds the types' tables; a manifest that names
        // more tiles than the target or the limits is refused here.
        let tiles = manifest.tile_count;
        if tiles > target.tile_count() || tiles > limits.max_tiles {
            return Err(invalid(vec![ValidationError::TileCount {
                tiles,
                target: target.name().to_owned(),
                available: target.tile_count().min(limits.max_tiles),
            }]));
        }
        scan_program(json("program.json")?, tiles, limits).map_err(invalid)?;
        let program: Program =
            serde_json::from_slice(json("program.json")?).map_err(unparsable("program.json"))?;
        let placement: PackagePlacement = serde_json::from_slice(json("placement.json")?)
            .map_err(unparsable("placement.json"))?;
        let infos: Vec<PhaseInfo> =
            serde_json::from_slice(json("phases.json")?).map_err(unparsable("phases.json"))?;
        let rows = decode_rows(file("exchange.bin")?).map_err(|source| PackageIoError::Rows {
            path: dir.join("exchange.bin"),
            source,
        })?;
        if rows.len() != infos.len() {
            return Err(format(
                "exchange.bin",
                format!("{} phases, phases.json has {}", rows.len(), infos.len()),
            ));
        }
        let phases = infos
            .into_iter()
            .zip(rows)
            .map(|(info, rows)| PackagePhase { info, rows })
            .collect();
        let mut kernels: Vec<PackageKernel> =
            serde_json::from_slice(json("kernels.json")?).map_err(unparsable("kernels.json"))?;
        for k in &mut kernels {
            if entry_name_problem(&format!("{KERNELS}/{}.o", k.name)).is_some() {
                return Err(format(
                    "kernels.json",
                    format!("kernel {:?} cannot name a file", k.name),
                ));
            }
            k.object = file(&format!("{KERNELS}/{}.o", k.name))?.to_vec();
            k.metadata = text(&format!("{KERNELS}/{}.json", k.name))?;
        }
        let memory_profile = text("memory-profile.json")?;
        let profile = if content.contains_key("profile.json") {
            let text = text("profile.json")?;
            Some(crate::profile::Profile::from_json(&text).map_err(|source| {
                PackageIoError::Profile {
                    path: dir.join("profile.json"),
                    source: Box::new(source),
                }
            })?)
        } else {
            None
        };
        let fixture = if content.contains_key("fixture.json") {
            Some(text("fixture.json")?)
        } else {
            None
        };
        let model = if content.contains_key(MODEL_FILE) {
            Some(ModelDescription::from_json(&text(MODEL_FILE)?).map_err(unparsable(MODEL_FILE))?)
        } else {
            None
        };
        let weights = if content.contains_key(WEIGHTS_FILE) {
            Some(
                PackageWeights::from_bytes(file(WEIGHTS_FILE)?.to_vec()).map_err(|source| {
                    PackageIoError::Weights {
                        path: dir.join(WEIGHTS_FILE),
                        source,
                    }
                })?,
            )
        } else {
            None
        };
        let package = Package {
            manifest,
            target,
            program,
            placement,
            phases,
            kernels,
            memory_profile,
            profile,
            fixture,
            weights,
            model,
        };
        let errors = package.validate_with(limits);
        if !errors.is_empty() {
            return Err(invalid(errors));
        }
        Ok(package)
    }
}

/// Reads at most `limit` bytes of the file at `path`.
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, PackageIoError> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    let size = file.metadata().map_err(io(path))?.len();
    if size > limit {
        return Err(PackageIoError::Limit {
            path: path.to_owned(),
            what: "bytes",
            found: size,
            limit,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // Never more than the limit, even if the file grows while it is read.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io(path))?;
    if bytes.len() as u64 > limit {
        return Err(PackageIoError::Limit {
            path: path.to_owned(),
            what: "bytes",
            found: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// Refuses a manifest listing more files, or larger ones, than the limits
/// allow, before any of them is read.
fn check_sizes(dir: &Path, manifest: &Manifest, limits: &Limits) -> Result<(), PackageIoError> {
    let path = dir.join(MANIFEST);
    if manifest.files.len() > limits.max_files {
        return Err(PackageIoError::Limit {
            path,
            what: "files",
            found: manifest.files.len() as u64,
            limit: limits.max_files as u64,
        });
    }
    let mut total = 0u64;
    for f in &manifest.files {
        if f.bytes > limits.max_file_bytes {
            return Err(PackageIoError::Limit {
                path: dir.join(&f.name),
                what: "bytes",
                found: f.bytes,
                limit: limits.max_file_bytes,
            });
        }
        total = total.saturating_add(f.bytes);
    }
    if total > limits.max_package_bytes {
        return Err(PackageIoError::Limit {
            path,
            what: "bytes in all files",
            found: total,
            limit: limits.max_package_bytes,
        });
    }
    Ok(())
}

/// The verified manifest and the content of every file it lists.
fn read_files(
    dir: &Path,
    limits: &Limits,
) -> Result<(Manifest, BTreeMap<String, Vec<u8>>), PackageIoError> {
    let path = dir.join(MANIFEST);
    let bytes = read_bounded(&path, limits.max_manifest_bytes)?;
    let manifest = parse_manifest(&path, &bytes)?;
    check_sizes(dir, &manifest, limits)?;
    let mut content = BTreeMap::new();
    for entry in &manifest.files {
        content.insert(entry.name.clone(), read_verified(dir, entry)?);
    }
    let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.name.as_str()).collect();
    check_unlisted(dir, &listed)?;
    Ok((manifest, content))
}
