//! SigLIP's text tower (`SiglipTextModel`, or the text half of a
//! `SiglipModel`): the graph, its weights and its input from a Hugging
//! Face checkpoint directory and texts, its FP8 calibration, and the
//! model as a package describes it.
//!
//! ```text
//! checkpoint dir ── config.json ──TextConfig::from_json──► TextConfig     (config.rs)
//!    │                          │ + batch + PrecisionPolicy
//!    │                          ▼
//!    │                      build_text_graph ──► Graph                    (graph.rs)
//!    ├── model.safetensors (+ shards): text_model.* ──► ValueSet         (names.rs, weights.rs)
//!    │   logit_scale, logit_bias ──► LogitParams (a full SiglipModel)
//!    └── spiece.model | tokenizer.json + tokenizer_config.json ──► TextTokenizer
//! texts ──TextTokenizer::encode (canonicalise, encode, pad)──► input_ids  (tokenizer.rs)
//! Checkpoint + calibration prompts ──calibrate_inputs──► Calibration
//!        ──package_text (build, F16 groups dropped if it does not fit)──► Package
//! Package's fixture.json + model.json ──PackagedText──► texts → input_ids  (packaged.rs)
//! ```
//!
//! The token embedding is a gather of table rows by token id
//! ([`ipu_package::graph::Op::Gather`]); ids are F32 whole numbers, and
//! the tokenizer is checked against the table's rows when it is read.
//!
//! CLIP's text tower (`CLIPTextModel`, `CLIPTextModelWithProjection`, the
//! text half of `CLIPModel`) is the same pipeline with the
//! [`TextFamily::Clip`] config (`clip.rs`): its tokenizer is its
//! `tokenizer.json` (whose post-processor adds `<|startoftext|>` and
//! `<|endoftext|>`), and the host adds the pooled rows
//! ([`POOL_ROWS`]) to every input it makes from token ids
//! (`pool_rows_input`).

mod clip;
mod config;
mod graph;
pub mod names;
mod package;
mod packaged;
mod spiece;
mod tokenizer;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use clip::pool_position;
pub use config::{MAX_POSITIONS, TextConfig, TextFamily, TextParams};
pub use graph::{INPUT_IDS, POOL_ROWS, TEXT_EMBEDS, build_text_graph};
pub use package::package_text;
pub use packaged::{CLIP_TEXT_FAMILY, PackagedText, TEXT_FAMILY, TextPackagedError};
pub use spiece::SpieceError;
pub use tokenizer::{
    SPIECE_FILE, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE, TextTokenizer, TokenizeError,
    TokenizerError, TokenizerSettings, Truncation, canonicalize,
};

use ipu_package::graph::{Graph, TensorId, ValueSet};

use crate::error::ImportError;
use crate::hf::{CONFIG_FILE, TensorStore};
use crate::siglip::calibrate::{Calibrated, Input};
use crate::siglip::graph::{BuildError, GraphOptions};
use crate::siglip::policy::PrecisionPolicy;
use crate::siglip::weights::{Mapping, read_mapped};
use crate::siglip::{ImportConfig, random_weights};

/// The prompts text calibration runs on when none are given: short
/// captions of the kind zero-shot labels are.
pub const CALIBRATION_PROMPTS: [&str; 8] = [
    "a photo of a cat",
    "a photo of a dog",
    "a photo of a red car on a city street",
    "a painting of a mountain and a river",
    "a close-up photo of a small bird",
    "two people walking on a beach at sunset",
    "a drawing of a house with trees",
    "an image of a green field in the morning",
];

/// SigLIP's contrastive parameters: `logits = exp(logit_scale) · cos +
/// logit_bias` for an (image, text) pair.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogitParams {
    /// The log of the cosine's scale.
    pub logit_scale: f32,
    /// The bias.
    pub logit_bias: f32,
}

/// An imported text tower: config, graph, weights, tokenizer, and the
/// contrastive parameters of a full checkpoint.
#[derive(Clone, Debug)]
pub struct TextCheckpoint {
    config: TextConfig,
    graph: Graph,
    weights: ValueSet,
    tokenizer: Option<TextTokenizer>,
    logits: Option<LogitParams>,
    input_ids: TensorId,
}

/// The [`POOL_ROWS`] input of `graph` (a CLIP text graph of `config`) for
/// the token ids `ids` of its batch (`[batch, positions]`, F32): per
/// text `b`, the row `b · positions + p` with `p` from [`pool_position`].
/// `None` for a graph without that input (SigLIP's).
pub(crate) fn pool_rows_input(
    config: &TextConfig,
    graph: &Graph,
    ids: &[f32],
) -> Option<(TensorId, Vec<f32>)> {
    let tensor = graph.tensor_by_name(POOL_ROWS)?;
    let eos = config.eos_token_id()?;
    let length = usize::try_from(config.positions()).ok()?.max(1);
    let rows = ids
        .chunks(length)
        .enumerate()
        .map(|(b, row)| {
            // Token ids are whole numbers below 2^24, exact in F32.
            let row: Vec<u32> = row.iter().map(|&x| x as u32).collect();
            (b * length + pool_position(&row, eos)) as f32
        })
        .collect();
    Some((tensor, rows))
}

impl TextCheckpoint {
    /// The text tower's shape.
    pub fn config(&self) -> &TextConfig {
        &self.config
    }

    /// The text graph for the config, batch and policy.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Every graph weight, f32 as stored, by graph tensor id.
    pub fn weights(&self) -> &ValueSet {
        &self.weights
    }

    /// The checkpoint's tokenizer (none for random weights without one).
    pub fn tokenizer(&self) -> Option<&TextTokenizer> {
        self.tokenizer.as_ref()
    }

    /// `logit_scale` and `logit_bias`, when the checkpoint is a full
    /// `SiglipModel`.
    pub fn logits(&self) -> Option<LogitParams> {
        self.logits
    }

    /// The weights for `graph`, another text graph of the same config,
    /// matched by tensor name.
    pub fn weights_for(&self, graph: &Graph) -> Result<ValueSet, ImportError> {
        crate::siglip::weights_by_name(&self.graph, &self.weights, graph)
    }

    /// The `input_ids` of the checkpoint's graph for `texts`, one per
    /// batch row.
    pub fn input_values(
        &self,
        texts: &[String],
        truncation: Truncation,
    ) -> Result<ValueSet, crate::ImageError> {
        let tokenizer = self.tokenizer.as_ref().ok_or(crate::ImageError::Internal {
            what: "the checkpoint has no tokenizer".to_owned(),
        })?;
        ids_input(
            tokenizer,
            &self.config,
            &self.graph,
            self.input_ids,
            texts,
            truncation,
        )
    }

    /// The calibration inputs: `prompts` (default [`CALIBRATION_PROMPTS`])
    /// through the tokenizer, cut to the sequence; without a tokenizer,
    /// token ids drawn from the vocabulary and ended with padding.
    pub fn calibration_inputs(&self, prompts: &[String]) -> Result<Vec<Input>, TokenizeError> {
        let length = self.config.positions() as usize;
        let defaults: Vec<String>;
        let prompts = if prompts.is_empty() {
            defaults = CALIBRATION_PROMPTS
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            &defaults
        } else {
            prompts
        };
        match &self.tokenizer {
            Some(t) => {
                let ids = t.encode_lenient(prompts, length)?;
                Ok(prompts
                    .iter()
                    .zip(ids)
                    .map(|(p, ids)| Input {
                        label: p.clone(),
                        values: ids.into_iter().map(|i| i as f32).collect(),
                    })
                    .collect())
            }
            None => Ok((0..prompts.len())
                .map(|k| Input {
                    label: format!("synthetic-ids-{k}"),
                    values: synthetic_ids(k, length, self.config.vocab()),
                })
                .collect()),
        }
    }
}

/// Token ids of a stand-in text: a few words' worth of ids from a fixed
/// sequence, then the last id repeated as padding.
fn synthetic_ids(k: usize, length: usize, vocab: u64) -> Vec<f32> {
    let words = (length / 2).max(1);
    (0..length)
        .map(|i| {
            let i = i.min(words) as u64;
            let x = crate::imaging::synthetic::mix((k as u64) << 32 | i);
            (x % vocab.max(1)) as f32
        })
        .collect()
}

/// The `input_ids` input (`ids`, of `graph`, a text graph of `config`)
/// for `texts`, with CLIP's pooled rows.
pub(crate) fn ids_input(
    tokenizer: &TextTokenizer,
    config: &TextConfig,
    graph: &Graph,
    ids: TensorId,
    texts: &[String],
    truncation: Truncation,
) -> Result<ValueSet, crate::ImageError> {
    let extents = graph.tensor(ids).extents();
    let (batch, length) = (extents[0], extents[1]);
    if texts.len() as u64 != batch {
        return Err(crate::ImageError::TextCount {
            batch,
            found: texts.len(),
        });
    }
    let encoded = tokenizer
        .encode(texts, length as usize, truncation)
        .map_err(|source| crate::ImageError::Tokenize { source })?;
    let mut values = Vec::with_capacity(texts.len() * length as usize);
    for row in encoded {
        values.extend(row.into_iter().map(|i| i as f32));
    }
    let mut set = ValueSet::new();
    if let Some((rows, pooled)) = pool_rows_input(config, graph, &values) {
        set.insert(rows, pooled);
    }
    set.insert(ids, values);
    Ok(set)
}

impl Calibrated for TextCheckpoint {
    fn calibration_graph(&self, policy: &PrecisionPolicy) -> Result<Graph, BuildError> {
        build_text_graph(
            &self.config,
            &GraphOptions {
                name: "calibration".to_owned(),
                batch: 1,
                policy: policy.clone(),
            },
        )
    }

    fn weights_for(&self, graph: &Graph) -> Result<ValueSet, ImportError> {
        TextCheckpoint::weights_for(self, graph)
    }

    fn input_name(&self) -> &'static str {
        INPUT_IDS
    }

    fn derived_inputs(&self, graph: &Graph, values: &[f32]) -> Vec<(TensorId, Vec<f32>)> {
        pool_rows_input(&self.config, graph, values)
            .into_iter()
            .collect()
    }
}

/// Reads `config.json` of the checkpoint in `dir` for its text tower.
pub fn read_text_config(dir: &Path) -> Result<TextConfig, ImportError> {
    let path = dir.join(CONFIG_FILE);
    let text = crate::hf::read_text(&path)?;
    TextConfig::from_json(&text).map_err(|source| ImportError::Config { path, source })
}

/// Reads the config, weights, tokenizer and contrastive parameters of
/// the checkpoint in `dir` and builds its text graph.
pub fn import_text_checkpoint(
    dir: &Path,
    options: &ImportConfig,
) -> Result<TextCheckpoint, ImportError> {
    let store = TensorStore::open(dir)?;
    let config = read_text_config(dir)?;
    if let TextFamily::Clip { .. } = config.family() {
        return import_clip_text(dir, options, config, &store);
    }
    let mut checkpoint = without_weights(dir, options, config, true)?;
    let prefix = text_prefix(&store);
    let mapping = Mapping {
        prefix,
        expected: names::expected_text_tensors(&checkpoint.config),
        sources: names::text_weight_sources(&checkpoint.config),
        ignored: names::is_ignored_by_text,
        head_disabled: false,
        tower: "SigLIP text",
    };
    checkpoint.weights = read_mapped(&store, &mapping, &checkpoint.graph)?;
    checkpoint.logits = logit_params(&store)?;
    tracing::info!(
        dir = %dir.display(),
        layers = checkpoint.config.layers(),
        hidden = checkpoint.config.hidden(),
        positions = checkpoint.config.positions(),
        batch = options.batch,
        "imported SigLIP text tower"
    );
    Ok(checkpoint)
}

/// The prefix of the text tower's tensor names in `store`: a full
/// checkpoint's `text_model.`, or none in a text-only one.
fn text_prefix(store: &TensorStore) -> &'static str {
    if store
        .tensors()
        .keys()
        .any(|n| n.starts_with(names::TEXT_PREFIX))
    {
        names::TEXT_PREFIX
    } else {
        ""
    }
}

/// CLIP's text tower of the checkpoint in `dir` (`config` read from it):
/// projected when the store holds `text_projection.weight`, whose rows
/// give the projection's width.
fn import_clip_text(
    dir: &Path,
    options: &ImportConfig,
    config: TextConfig,
    store: &TensorStore,
) -> Result<TextCheckpoint, ImportError> {
    let projection = store
        .tensors()
        .get(names::TEXT_PROJECTION)
        .and_then(|t| t.shape().first().copied());
    let config = config.with_clip_projection(projection);
    let mut checkpoint = without_weights(dir, options, config, true)?;
    let prefix = text_prefix(store);
    let (expected, sources) = names::clip_names(&checkpoint.config, prefix);
    let mapping = Mapping {
        prefix: "",
        expected,
        sources,
        ignored: names::is_ignored_by_clip_text,
        head_disabled: false,
        tower: "CLIP text",
    };
    checkpoint.weights = read_mapped(store, &mapping, &checkpoint.graph)?;
    checkpoint.logits = clip_logit_scale(store)?;
    tracing::info!(
        dir = %dir.display(),
        layers = checkpoint.config.layers(),
        hidden = checkpoint.config.hidden(),
        positions = checkpoint.config.positions(),
        projected = projection.is_some(),
        batch = options.batch,
        "imported CLIP text tower"
    );
    Ok(checkpoint)
}

/// A full `CLIPModel`'s `logit_scale` (bias 0: CLIP has none, and its
/// probabilities are `zero_shot::clip_scores`' softmax), else none.
fn clip_logit_scale(store: &TensorStore) -> Result<Option<LogitParams>, ImportError> {
    let name = "logit_scale";
    if !store.tensors().contains_key(name) {
        return Ok(None);
    }
    match store.read(name)?.as_slice() {
        [v] if v.is_finite() => Ok(Some(LogitParams {
            logit_scale: *v,
            logit_bias: 0.0,
        })),
        _ => Err(ImportError::LogitParameter { name }),
    }
}

/// A text checkpoint of the config in `dir` with weights of realistic
/// spread drawn from `seed`; the tokenizer is read when the directory has
/// one.
pub fn random_text_checkpoint(
    dir: &Path,
    options: &ImportConfig,
    seed: u64,
) -> Result<TextCheckpoint, ImportError> {
    let config = read_text_config(dir)?;
    let mut checkpoint = without_weights(dir, options, config, false)?;
    checkpoint.weights = random_weights(checkpoint.config.hidden(), &checkpoint.graph, seed)
        .map_err(|source| ImportError::RandomWeights {
            dir: dir.to_path_buf(),
            source,
        })?;
    Ok(checkpoint)
}

/// `logit_scale` and `logit_bias` when the store holds both (a full
/// `SiglipModel`), else none.
fn logit_params(store: &TensorStore) -> Result<Option<LogitParams>, ImportError> {
    let one = |name: &'static str| -> Result<Option<f32>, ImportError> {
        if !store.tensors().contains_key(name) {
            return Ok(None);
        }
        match store.read(name)?.as_slice() {
            [v] if v.is_finite() => Ok(Some(*v)),
            _ => Err(ImportError::LogitParameter { name }),
        }
    };
    match (one("logit_scale")?, one("logit_bias")?) {
        (Some(logit_scale), Some(logit_bias)) => Ok(Some(LogitParams {
            logit_scale,
            logit_bias,
        })),
        (None, None) => Ok(None),
        (None, Some(_)) => Err(ImportError::LogitParameter {
            name: "logit_scale",
        }),
        (Some(_), None) => Err(ImportError::LogitParameter { name: "logit_bias" }),
    }
}

fn without_weights(
    dir: &Path,
    options: &ImportConfig,
    config: TextConfig,
    tokenizer_required: bool,
) -> Result<TextCheckpoint, ImportError> {
    let config_path = dir.join(CONFIG_FILE);
    let tokenizer = match TextTokenizer::read(dir, config.vocab(), config.positions(), &config_path)
    {
        Ok(t) => Some(t),
        Err(TokenizerError::Missing { .. }) if !tokenizer_required => None,
        Err(e) => return Err(e.into()),
    };
    let name = options.graph_name(dir, "-text");
    let graph = build_text_graph(
        &config,
        &GraphOptions {
            name,
            batch: options.batch,
            policy: options.policy.clone(),
        },
    )
    .map_err(|source| ImportError::Build { source })?;
    let input_ids = graph
        .tensor_by_name(INPUT_IDS)
        .ok_or_else(|| ImportError::Internal {
            what: "the text graph has no `input_ids` input".to_owned(),
        })?;
    Ok(TextCheckpoint {
        config,
        graph,
        weights: ValueSet::new(),
        tokenizer,
        logits: None,
        input_ids,
    })
}

/// The precisions of the text graph's own tensors, added to a vision
/// template (the default fixture's): the token table FP8 like every
/// weight (its scale is calibrated), its rows F16 like every activation,
/// the head's weight and bias FP8 and its result F16 (CLIP's projection
/// result `text_embeds` too).
pub fn text_template(vision: PrecisionPolicy) -> PrecisionPolicy {
    use ipu_layout::{Fp8Format, Precision};
    let fp8 = Precision::F8 {
        format: Fp8Format::F143,
        scale: 0,
    };
    let like = |name: &str, fallback: Precision| vision.precision(name).unwrap_or(fallback);
    let cast = like("enc{i}.ln1.y8", fp8);
    let activation = like("x0", Precision::F16);
    vision
        .clone()
        .with_precision("tok", fp8)
        .with_precision("tok.y", activation)
        .with_precision("head.x8", cast)
        .with_precision("head.w", fp8)
        .with_precision("head.b", fp8)
        .with_precision("head.y", activation)
        .with_precision(TEXT_EMBEDS, activation)
}
