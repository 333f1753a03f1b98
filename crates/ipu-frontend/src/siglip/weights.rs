//! Graph weights from checkpoint tensors: the checks (missing, mis-shaped,
//! unexpected, unreadable dtype) and the assembly the name mapping
//! describes.
//!
//! Checks come first and in a fixed order, so the error reported does not
//! depend on file or hash order: every expected tensor in the mapping's
//! order (missing, then shape, then dtype), then every other stored tensor
//! in name order (unexpected unless ignored). Only then are values read.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::ImportError;
use crate::hf::TensorStore;
use crate::siglip::config::VisionConfig;
use crate::siglip::names::{
    Layout, Resample, VISION_PREFIX, WeightSource, expected_tensors, is_ignored, weight_sources,
};
use ipu_package::graph::safetensors::StoredType;
use ipu_package::graph::{Graph, ValueSet};

/// Which stored tensors make a tower's graph weights.
pub(crate) struct Mapping {
    /// The prefix of the tower's stored names in this checkpoint.
    pub prefix: &'static str,
    /// Every tensor of the tower the checkpoint must hold (names without
    /// the prefix), with its shape.
    pub expected: Vec<(String, Vec<u64>)>,
    /// How every graph weight is assembled.
    pub sources: Vec<WeightSource>,
    /// Stored tensors of other parts of the checkpoint, not read.
    pub ignored: fn(&str) -> bool,
    /// Whether the config turned off a head whose tensors the checkpoint
    /// holds (then named in the error for such a tensor).
    pub head_disabled: bool,
    /// The tower, for messages.
    pub tower: &'static str,
}

/// Checks the store against the config and reads every graph weight as
/// f32 (unrounded: the graph's precisions are for a later step to apply).
pub(crate) fn read_weights(
    store: &TensorStore,
    config: &VisionConfig,
    graph: &Graph,
) -> Result<ValueSet, ImportError> {
    let mapping = Mapping {
        prefix: vision_prefix(store),
        expected: expected_tensors(config),
        sources: weight_sources(config),
        ignored: is_ignored,
        head_disabled: !config.use_head(),
        tower: "SigLIP vision",
    };
    read_mapped(store, &mapping, graph)
}

/// Checks the store against `mapping` and reads every graph weight it
/// describes (module header).
pub(crate) fn read_mapped(
    store: &TensorStore,
    mapping: &Mapping,
    graph: &Graph,
) -> Result<ValueSet, ImportError> {
    let prefix = mapping.prefix;
    let expected = &mapping.expected;
    let sources = &mapping.sources;
    // The graph weight each expected tensor feeds, for error messages.
    let mut feeds: BTreeMap<&str, &str> = BTreeMap::new();
    for source in sources {
        for piece in &source.pieces {
            feeds.entry(piece.name.as_str()).or_insert(&source.weight);
        }
    }
    let stored = store.tensors();
    for (name, shape) in expected {
        let full = format!("{prefix}{name}");
        let weight = feeds.get(name.as_str()).copied().unwrap_or("").to_owned();
        let Some(tensor) = stored.get(&full) else {
            return Err(ImportError::MissingTensor {
                name: full,
                expected: shape.clone(),
                weight,
            });
        };
        if tensor.shape() != shape.as_slice() {
            return Err(ImportError::Shape {
                name: full,
                found: tensor.shape().to_vec(),
                expected: shape.clone(),
                weight,
                file: store.file_of(tensor).to_owned(),
            });
        }
        if StoredType::from_dtype(tensor.dtype(), None).is_none() {
            return Err(ImportError::Dtype {
                name: full,
                dtype: tensor.dtype().to_string(),
            });
        }
    }
    let expected_names: BTreeSet<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    for (name, tensor) in stored {
        let known = name
            .strip_prefix(prefix)
            .is_some_and(|short| expected_names.contains(short));
        if !known && !(mapping.ignored)(name) {
            let short = name.strip_prefix(prefix).unwrap_or(name);
            return Err(ImportError::UnexpectedTensor {
                name: name.clone(),
                shape: tensor.shape().to_vec(),
                file: store.file_of(tensor).to_owned(),
                head_disabled: mapping.head_disabled && short.starts_with("head."),
                tower: mapping.tower,
            });
        }
    }

    // Reads each stored tensor once, dropping it after its last use (the
    // head's fused in-projection feeds two graph weights).
    let mut uses: BTreeMap<&str, usize> = BTreeMap::new();
    for source in sources {
        for piece in &source.pieces {
            *uses.entry(piece.name.as_str()).or_default() += 1;
        }
    }
    let shapes: BTreeMap<&str, &[u64]> = expected
        .iter()
        .map(|(n, s)| (n.as_str(), s.as_slice()))
        .collect();
    let mut cache: BTreeMap<&str, Vec<f32>> = BTreeMap::new();
    let mut set = ValueSet::new();
    for source in sources {
        let Some(id) = graph.tensor_by_name(&source.weight) else {
            return Err(ImportError::Internal {
                what: format!(
                    "the mapping names graph weight `{}`, which the graph lacks",
                    source.weight
                ),
            });
        };
        let mut rows = 0u64;
        let mut row_len = None;
        let mut data = Vec::new();
        for piece in &source.pieces {
            let shape = shapes.get(piece.name.as_str()).copied().unwrap_or(&[]);
            let len: u64 = shape.iter().skip(1).product();
            // Only a transposition needs every piece's rows alike.
            let transposes = matches!(
                source.layout,
                Layout::Transposed | Layout::TransposedPadded { .. }
            );
            if transposes && row_len.is_some_and(|l| l != len) {
                return Err(ImportError::Internal {
                    what: format!("the pieces of `{}` differ in row length", source.weight),
                });
            }
            row_len = Some(len);
            if !cache.contains_key(piece.name.as_str()) {
                let values = store.read(&format!("{prefix}{}", piece.name))?;
                cache.insert(piece.name.as_str(), values);
            }
            let values = &cache[piece.name.as_str()];
            // The stored shape matched the expected one, so these products
            // are within the stored tensor's element count.
            let range = piece
                .rows
                .start
                .checked_mul(len)
                .zip(piece.rows.end.checked_mul(len))
                .and_then(|(s, e)| Some(usize::try_from(s).ok()?..usize::try_from(e).ok()?));
            let Some(slice) = range.and_then(|r| values.get(r)) else {
                return Err(ImportError::Internal {
                    what: format!("rows {:?} of `{}` are out of range", piece.rows, piece.name),
                });
            };
            match piece.divide_by_sqrt {
                None => data.extend_from_slice(slice),
                Some(n) => {
                    // The correctly rounded quotient of each value.
                    let root = (n as f64).sqrt();
                    data.extend(slice.iter().map(|&v| (f64::from(v) / root) as f32));
                }
            }
            rows += piece.rows.end - piece.rows.start;
            let left = uses.get_mut(piece.name.as_str());
            if let Some(left) = left {
                *left -= 1;
                if *left == 0 {
                    cache.remove(piece.name.as_str());
                }
            }
        }
        let row_len = row_len.unwrap_or(0);
        let values = match source.layout {
            Layout::AsIs => data,
            Layout::Transposed => transpose(&data, rows as usize, row_len as usize),
            Layout::TransposedPadded { rows: padded } => {
                let mut t = transpose(&data, rows as usize, row_len as usize);
                // The graph's element count is checked below, so a padded
                // size that disagrees with it is an error, not a huge
                // allocation: resize only when it is the expected size.
                let want = padded
                    .checked_mul(rows)
                    .and_then(|n| usize::try_from(n).ok());
                if let Some(n) = want.filter(|&n| n as u64 == graph.tensor(id).element_count()) {
                    t.resize(n, 0.0);
                }
                t
            }
            Layout::ClassFold {
                bias,
                resample,
                registers,
            } => class_fold(
                data,
                graph.tensor(id).extents(),
                Fold {
                    bias,
                    resample,
                    registers,
                },
            )
            .ok_or_else(|| ImportError::Internal {
                what: format!("the pieces of `{}` do not make its table", source.weight),
            })?,
            Layout::RowScaled { transposed } => {
                row_scaled(data, graph.tensor(id).extents(), transposed).ok_or_else(|| {
                    ImportError::Internal {
                        what: format!("the pieces of `{}` do not scale its rows", source.weight),
                    }
                })?
            }
        };
        if values.len() as u64 != graph.tensor(id).element_count() {
            return Err(ImportError::Internal {
                what: format!(
                    "`{}` assembled {} values for a tensor of {}",
                    source.weight,
                    values.len(),
                    graph.tensor(id).element_count()
                ),
            });
        }
        set.insert(id, values);
    }
    if let Some(missing) = graph.weights().into_iter().find(|&w| !set.contains(w)) {
        return Err(ImportError::Internal {
            what: format!(
                "graph weight `{}` has no source in the mapping",
                graph.tensor(missing).name()
            ),
        });
    }
    Ok(set)
}

/// `vision_model.` when the checkpoint names its vision tensors with it
/// (a full `SiglipModel`, or transformers 4's `SiglipVisionModel`), else
/// nothing (transformers 5's `SiglipVisionModel`).
fn vision_prefix(store: &TensorStore) -> &'static str {
    if store.tensors().keys().any(|n| n.starts_with(VISION_PREFIX)) {
        VISION_PREFIX
    } else {
        ""
    }
}

/// `[rows, cols]` row-major to `[cols, rows]` row-major.
fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; data.len()];
    for (r, row) in data.chunks_exact(cols.max(1)).enumerate().take(rows) {
        for (c, &v) in row.iter().enumerate() {
            out[c * rows + r] = v;
        }
    }
    out
}

/// What [`class_fold`] does besides adding the class token.
struct Fold {
    bias: bool,
    resample: Option<Resample>,
    registers: u64,
}

/// The position table of a class-token model from its pieces, concatenated
/// in `data` (position embeddings `[stored tokens, width]`, class token
/// `[width]`, the convolution bias `[width]` when `fold.bias`, then
/// `fold.registers` register tokens `[registers, width]`): the patch rows
/// resampled to the graph's grid when `fold.resample` says so, row 0 gains
/// the class token and every patch row the bias, and the register tokens
/// go between row 0 and the patches (`Layout::ClassFold`). `None` when the
/// lengths do not agree with `extents` (`[tokens, width]`).
fn class_fold(mut data: Vec<f32>, extents: &[u64], fold: Fold) -> Option<Vec<f32>> {
    let [tokens, width] = *extents else {
        return None;
    };
    let (tokens, width) = (usize::try_from(tokens).ok()?, usize::try_from(width).ok()?);
    let registers = usize::try_from(fold.registers).ok()?;
    let positions = tokens.checked_sub(registers)?;
    let stored_tokens = match fold.resample {
        None => positions,
        Some(r) => usize::try_from(r.from)
            .ok()?
            .checked_pow(2)?
            .checked_add(1)?,
    };
    let table = stored_tokens.checked_mul(width)?;
    let extra = (usize::from(fold.bias) + 1 + registers).checked_mul(width)?;
    if data.len() != table.checked_add(extra)? || width == 0 {
        return None;
    }
    let mut tail = data.split_off(table);
    let register_rows = tail.split_off((1 + usize::from(fold.bias)) * width);
    if let Some(r) = fold.resample {
        let (from, to) = (usize::try_from(r.from).ok()?, usize::try_from(r.to).ok()?);
        if to.checked_pow(2)?.checked_add(1)? != positions {
            return None;
        }
        let patches = data.split_off(width);
        let resampled = if r.antialias {
            crate::class_token::interpolate::bicubic_grid_antialiased(&patches, from, to, width)
        } else {
            crate::class_token::interpolate::bicubic_grid(&patches, from, to, width)
        };
        data.extend(resampled?);
    }
    let (class, conv_bias) = tail.split_at(width);
    for (p, c) in data[..width].iter_mut().zip(class) {
        *p += c;
    }
    if fold.bias {
        for row in data[width..].chunks_exact_mut(width) {
            for (p, b) in row.iter_mut().zip(conv_bias) {
                *p += b;
            }
        }
    }
    let patches = data.split_off(width);
    data.extend(register_rows);
    data.extend(patches);
    Some(data)
}

/// A linear layer's weight or bias with each output row scaled
/// (`Layout::RowScaled`): `data` holds the stored `[out, k]` values (`k`
/// is `in` for a weight, 1 for a bias) and then the `out` scales, and
/// `extents` are the graph tensor's (`[in, out]` or `[out]`). Each value
/// is multiplied by its row's scale once, in f32, so a scaled weight is
/// the correctly rounded product (`docs/MODELS.md`, layer scale). `None`
/// when the lengths do not agree.
fn row_scaled(mut data: Vec<f32>, extents: &[u64], transposed: bool) -> Option<Vec<f32>> {
    let out = usize::try_from(*extents.last()?).ok()?;
    let values = data.len().checked_sub(out)?;
    if out == 0 || values % out != 0 {
        return None;
    }
    let scales = data.split_off(values);
    let k = values / out;
    for (row, &scale) in data.chunks_exact_mut(k.max(1)).zip(&scales) {
        for v in row {
            *v *= scale;
        }
    }
    Some(if transposed {
        transpose(&data, out, k)
    } else {
        data
    })
}
