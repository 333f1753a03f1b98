//! A SigLIP text tower as a package carries it: the graph as
//! `fixture.json` and the model description `model.json` of family
//! [`TEXT_FAMILY`], whose front-end part is this module's:
//!
//! ```json
//! {"format": "ipu-frontend/siglip-text/v1",
//!  "config": {"model_type": "siglip_text_model", "vocab_size": 64, ...},
//!  "tokenizer": {... the tokenizer in tokenizer.json form ...},
//!  "tokenizer_settings": {"source": "spiece.model", "canonicalize": true,
//!                         "lower_case": true, "eos_id": 1, "pad_id": 1, "unk_id": 2},
//!  "logits": {"logit_scale": 2.3025851, "logit_bias": -0.5},
//!  "precision": {"format": "ipu-backend/precision/v1", ...}}
//! ```
//!
//! `tokenizer` and `tokenizer_settings` are absent (null) for a package
//! built with random weights from a directory without a tokenizer, which
//! then runs on token ids only; `logits` is null for a text-only
//! checkpoint, which gives embeddings but no zero-shot scores. Read back
//! ([`PackagedText::from_description`]), the description must build
//! exactly the package's graph.

use serde::{Deserialize, Serialize};

use ipu_package::graph::{Graph, ValueSet};
use ipu_package::package::{InputSource, ModelDescription, ModelInput};

use crate::error::ImageError;
use crate::siglip::config::ConfigError;
use crate::siglip::graph::{BuildError, GraphOptions};
use crate::siglip::policy::PrecisionPolicy;
use crate::siglip::report::{PrecisionReport, ReportError};
use crate::siglip::text::{
    INPUT_IDS, LogitParams, POOL_ROWS, TextCheckpoint, TextConfig, TextFamily, TextTokenizer,
    TokenizerSettings, Truncation, build_text_graph, ids_input,
};
use crate::siglip::{Calibration, first_difference};

/// The model family of a SigLIP text tower in `model.json`.
pub const TEXT_FAMILY: &str = "siglip-text";
/// The model family of a CLIP text tower in `model.json` (the same
/// front end: its config says which tower it is).
pub const CLIP_TEXT_FAMILY: &str = "clip-text";

/// The family name of a text tower with `config`.
fn family_of(config: &TextConfig) -> &'static str {
    match config.family() {
        TextFamily::Clip { .. } => CLIP_TEXT_FAMILY,
        _ => TEXT_FAMILY,
    }
}
/// The format tag of the front end's part of `model.json`.
pub const TEXT_FORMAT: &str = "ipu-frontend/siglip-text/v1";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Description {
    format: String,
    config: serde_json::Value,
    tokenizer: Option<serde_json::Value>,
    tokenizer_settings: Option<TokenizerSettings>,
    logits: Option<LogitParams>,
    precision: PrecisionReport,
}

/// Why a package's text model description cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TextPackagedError {
    /// The description is of another model family.
    #[error(
        "model.json describes a `{found}` model; this front end reads `{TEXT_FAMILY}` and `{CLIP_TEXT_FAMILY}`"
    )]
    Family {
        /// The family found.
        found: String,
    },
    /// The family named disagrees with the config the description holds.
    #[error("model.json names the family `{found}`, but its config is a `{config}` text tower")]
    FamilyConfig {
        /// The family named.
        found: String,
        /// The family the config is.
        config: &'static str,
    },
    /// The front end's part is not of the expected form.
    #[error("model.json `frontend` is not a SigLIP text model description: {source}")]
    Json {
        /// The parser's finding.
        #[source]
        source: serde_json::Error,
    },
    /// The front end's part is of another format.
    #[error("model.json `frontend` has format `{found}`, this reader reads `{TEXT_FORMAT}`")]
    Format {
        /// The format found.
        found: String,
    },
    /// The text config is not usable.
    #[error("model.json `frontend.config`: {source}")]
    Config {
        /// Why.
        #[source]
        source: ConfigError,
    },
    /// The recorded tokenizer cannot be rebuilt.
    #[error("model.json `frontend.tokenizer`: {source}")]
    Tokenizer {
        /// Why.
        #[source]
        source: tokenizers::Error,
    },
    /// The tokenizer could not be recorded.
    #[error("the tokenizer cannot be written to model.json: {source}")]
    WriteTokenizer {
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A tokenizer without its settings, or settings without a tokenizer.
    #[error(
        "model.json `frontend` has one of `tokenizer` and `tokenizer_settings` without the other"
    )]
    HalfTokenizer,
    /// The precision table is not usable.
    #[error("model.json `frontend.precision`: {source}")]
    Report {
        /// Why.
        #[source]
        source: ReportError,
    },
    /// The graph cannot be built from the description.
    #[error("model.json: the SigLIP text graph cannot be built from the description: {source}")]
    Build {
        /// Why.
        #[source]
        source: BuildError,
    },
    /// The package's graph has no token-id input.
    #[error("the package's graph has no `{INPUT_IDS}` input of shape [batch, positions]")]
    NoInputIds,
    /// The description's inputs are not the one the text tower has.
    #[error(
        "model.json's inputs must be `{INPUT_IDS}` from texts (and `{POOL_ROWS}` from texts for CLIP), the text tower's inputs"
    )]
    Inputs,
    /// The description builds another graph than the package holds.
    #[error(
        "model.json does not describe the package's graph: {what} differs from what its config and precisions build"
    )]
    Mismatch {
        /// What differs first.
        what: String,
    },
}

/// A SigLIP text tower as a package carries it (see the module header).
#[derive(Clone, Debug)]
pub struct PackagedText {
    name: String,
    batch: u64,
    config: TextConfig,
    tokenizer: Option<TextTokenizer>,
    logits: Option<LogitParams>,
    report: PrecisionReport,
    policy: PrecisionPolicy,
}

impl PackagedText {
    /// The text tower of `checkpoint` at `batch` with the calibrated
    /// precisions; `name` is the graph's name.
    pub fn new(
        checkpoint: &TextCheckpoint,
        name: &str,
        batch: u64,
        calibration: &Calibration,
    ) -> Self {
        Self {
            name: name.to_owned(),
            batch,
            config: checkpoint.config().clone(),
            tokenizer: checkpoint.tokenizer().cloned(),
            logits: checkpoint.logits(),
            report: calibration.report().clone(),
            policy: calibration.policy().clone(),
        }
    }

    /// The graph's inputs: the token ids, and for CLIP the pooled rows,
    /// both made from the texts.
    fn inputs(config: &TextConfig) -> Vec<ModelInput> {
        let mut inputs = vec![ModelInput {
            tensor: INPUT_IDS.to_owned(),
            from: InputSource::Texts,
        }];
        if let TextFamily::Clip { .. } = config.family() {
            inputs.push(ModelInput {
                tensor: POOL_ROWS.to_owned(),
                from: InputSource::Texts,
            });
        }
        inputs
    }

    /// Reads the description of a package whose graph is `graph` and
    /// checks that it builds exactly that graph.
    pub fn from_description(
        model: &ModelDescription,
        graph: &Graph,
    ) -> Result<Self, TextPackagedError> {
        if model.family != TEXT_FAMILY && model.family != CLIP_TEXT_FAMILY {
            return Err(TextPackagedError::Family {
                found: model.family.clone(),
            });
        }
        let file: Description = serde_json::from_value(model.frontend.clone())
            .map_err(|source| TextPackagedError::Json { source })?;
        if file.format != TEXT_FORMAT {
            return Err(TextPackagedError::Format { found: file.format });
        }
        let config = TextConfig::from_json(&file.config.to_string())
            .map_err(|source| TextPackagedError::Config { source })?;
        if model.family != family_of(&config) {
            return Err(TextPackagedError::FamilyConfig {
                found: model.family.clone(),
                config: family_of(&config),
            });
        }
        if model.inputs != Self::inputs(&config) {
            return Err(TextPackagedError::Inputs);
        }
        let tokenizer = match (&file.tokenizer, file.tokenizer_settings) {
            (Some(t), Some(s)) => Some(
                TextTokenizer::from_parts(t, s)
                    .map_err(|source| TextPackagedError::Tokenizer { source })?,
            ),
            (None, None) => None,
            _ => return Err(TextPackagedError::HalfTokenizer),
        };
        let policy = file
            .precision
            .policy()
            .map_err(|source| TextPackagedError::Report { source })?;
        let batch =
            crate::siglip::input_batch(graph, INPUT_IDS).ok_or(TextPackagedError::NoInputIds)?;
        let packaged = Self {
            name: graph.name().to_owned(),
            batch,
            config,
            tokenizer,
            logits: file.logits,
            report: file.precision,
            policy,
        };
        let built = packaged.graph()?;
        if let Some(what) = first_difference(&built, graph) {
            return Err(TextPackagedError::Mismatch { what });
        }
        Ok(packaged)
    }

    /// The package's `model.json`.
    pub fn description(&self) -> Result<ModelDescription, TextPackagedError> {
        let (tokenizer, tokenizer_settings) = match &self.tokenizer {
            Some(t) => (
                Some(
                    t.to_json()
                        .map_err(|source| TextPackagedError::WriteTokenizer { source })?,
                ),
                Some(t.settings().clone()),
            ),
            None => (None, None),
        };
        let file = Description {
            format: TEXT_FORMAT.to_owned(),
            config: self.config.to_json(),
            tokenizer,
            tokenizer_settings,
            logits: self.logits,
            precision: self.report.clone(),
        };
        Ok(ModelDescription::new(
            self.family(),
            Self::inputs(&self.config),
            serde_json::to_value(&file)
                .map_err(|source| TextPackagedError::WriteTokenizer { source })?,
        ))
    }

    /// The family `model.json` names: [`TEXT_FAMILY`] or
    /// [`CLIP_TEXT_FAMILY`], by the config.
    pub fn family(&self) -> &'static str {
        family_of(&self.config)
    }

    /// The graph the package was built from.
    pub fn graph(&self) -> Result<Graph, TextPackagedError> {
        build_text_graph(
            &self.config,
            &GraphOptions {
                name: self.name.clone(),
                batch: self.batch,
                policy: self.policy.clone(),
            },
        )
        .map_err(|source| TextPackagedError::Build { source })
    }

    /// The `input_ids` of `graph` for `texts`, one per batch row.
    pub fn text_values(
        &self,
        graph: &Graph,
        texts: &[String],
        truncation: Truncation,
    ) -> Result<ValueSet, ImageError> {
        let ids = graph
            .tensor_by_name(INPUT_IDS)
            .ok_or_else(|| ImageError::Internal {
                what: format!("graph `{}` has no `{INPUT_IDS}` input", graph.name()),
            })?;
        let tokenizer = self
            .tokenizer
            .as_ref()
            .ok_or_else(|| ImageError::Internal {
                what: "the package records no tokenizer (built with random weights from a \
                   directory without one); give --inputs FILE with input_ids"
                    .to_owned(),
            })?;
        ids_input(tokenizer, &self.config, graph, ids, texts, truncation)
    }

    /// The `input_ids` of `graph` for the built-in calibration prompts
    /// from `first` on (or stand-in ids without a tokenizer), for a run
    /// given no texts.
    pub fn synthetic_text_values(
        &self,
        graph: &Graph,
        first: usize,
    ) -> Result<ValueSet, ImageError> {
        let ids = graph
            .tensor_by_name(INPUT_IDS)
            .ok_or_else(|| ImageError::Internal {
                what: format!("graph `{}` has no `{INPUT_IDS}` input", graph.name()),
            })?;
        let prompts = super::CALIBRATION_PROMPTS;
        let texts: Vec<String> = (0..self.batch as usize)
            .map(|k| prompts[(first + k) % prompts.len()].to_owned())
            .collect();
        let length = self.config.positions() as usize;
        let mut values = Vec::new();
        match &self.tokenizer {
            Some(t) => {
                for row in t
                    .encode_lenient(&texts, length)
                    .map_err(|source| ImageError::Tokenize { source })?
                {
                    values.extend(row.into_iter().map(|i| i as f32));
                }
            }
            None => {
                for k in 0..texts.len() {
                    values.extend(super::synthetic_ids(first + k, length, self.config.vocab()));
                }
            }
        }
        let mut set = ValueSet::new();
        if let Some((rows, pooled)) = super::pool_rows_input(&self.config, graph, &values) {
            set.insert(rows, pooled);
        }
        set.insert(ids, values);
        Ok(set)
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Texts per run.
    pub fn batch(&self) -> u64 {
        self.batch
    }

    /// The text tower's shape.
    pub fn config(&self) -> &TextConfig {
        &self.config
    }

    /// `logit_scale` and `logit_bias` of the checkpoint, if it had them.
    pub fn logits(&self) -> Option<LogitParams> {
        self.logits
    }

    /// The precision decisions.
    pub fn report(&self) -> &PrecisionReport {
        &self.report
    }
}
