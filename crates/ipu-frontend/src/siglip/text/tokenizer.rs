//! Token ids from text, as the checkpoint's tokenizer makes them:
//! [`TextTokenizer`].
//!
//! A SigLIP checkpoint ships the SentencePiece model `spiece.model` and a
//! `tokenizer_config.json` naming `SiglipTokenizer`. transformers'
//! `SiglipTokenizer` first canonicalises the text (lower case when
//! `do_lower_case`, the default; ASCII punctuation removed; runs of
//! whitespace made one space; the ends stripped), then encodes it with
//! the SentencePiece model and appends `</s>`. Here the SentencePiece
//! model becomes a `tokenizers` Unigram model behind the normalisers
//! SentencePiece applies (its precompiled character map, extra spaces
//! removed, spaces escaped to `▁`, the dummy prefix), as transformers'
//! `SpmConverter` builds them; the golden test holds the ids to
//! `SiglipTokenizer`'s. A checkpoint with a `tokenizer.json` instead is
//! read by the `tokenizers` crate as it stands (its own post-processor
//! adds the special tokens), canonicalised only when its
//! `tokenizer_config.json` names `SiglipTokenizer`.
//!
//! Every text becomes exactly the sequence length (the config's
//! `max_position_embeddings`): shorter texts are padded with the padding
//! token (`pad_token` of `tokenizer_config.json`, `</s>` for SigLIP), as
//! `padding="max_length"` does; SigLIP's text tower reads no attention
//! mask, so padding is part of the input. A longer text is refused
//! ([`TokenizeError::TooLong`]) unless [`Truncation::Truncate`] is asked
//! for, which keeps the first `length − 1` tokens and the end token, as
//! transformers' `truncation=True` does. A piece the vocabulary does not
//! have (the unknown token) is refused ([`TokenizeError::Unknown`]): the
//! model would see `<unk>` where the user wrote something else.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;
use tokenizers::models::unigram::Unigram;
use tokenizers::normalizers::{NormalizerWrapper, Precompiled, Replace, Sequence};
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};

use super::spiece::{self, PieceType, SpieceError};

/// The tokenizer file of `tokenizers`.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The SentencePiece model of a SigLIP checkpoint.
pub const SPIECE_FILE: &str = "spiece.model";
/// transformers' tokenizer settings.
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";

/// Whether a text longer than the sequence is refused or cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Truncation {
    /// A longer text is an error.
    #[default]
    Refuse,
    /// The first `length − 1` tokens and the end token are kept.
    Truncate,
}

/// Why a tokenizer could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// The checkpoint has no tokenizer.
    #[error(
        "`{dir}` holds neither {SPIECE_FILE} nor {TOKENIZER_FILE}; the text tower needs the \
         checkpoint's tokenizer"
    )]
    Missing {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// A file could not be read.
    #[error("cannot read `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `tokenizer_config.json` is not JSON of the expected form.
    #[error("`{path}` is not valid JSON of the expected form: {source}")]
    Config {
        /// The file.
        path: PathBuf,
        /// The parser's finding.
        #[source]
        source: serde_json::Error,
    },
    /// `spiece.model` is not a SentencePiece model.
    #[error("`{path}` is not a SentencePiece model: {source}")]
    Spiece {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: SpieceError,
    },
    /// The SentencePiece model is not a Unigram model.
    #[error(
        "`{path}` is a SentencePiece model of type {model_type} (trainer_spec.model_type); \
         only Unigram models (type 1, SigLIP's) are read"
    )]
    ModelType {
        /// The file.
        path: PathBuf,
        /// The type found.
        model_type: u64,
    },
    /// The `tokenizers` crate refused the tokenizer.
    #[error("`{path}`: the tokenizer cannot be built: {source}")]
    Build {
        /// The file.
        path: PathBuf,
        /// The crate's error.
        #[source]
        source: tokenizers::Error,
    },
    /// A special token the tokenizer needs is not in its vocabulary.
    #[error("`{path}`: `{field}` is `{token}`, which the vocabulary does not have")]
    Special {
        /// The file naming the token.
        path: PathBuf,
        /// The field.
        field: &'static str,
        /// The token.
        token: String,
    },
    /// The tokenizer's vocabulary does not fit the model's token table.
    #[error(
        "`{tokenizer}` has {tokens} tokens but `{config}` gives text_config.vocab_size \
         {vocab_size}; the tokenizer and the model disagree"
    )]
    Vocabulary {
        /// The tokenizer file.
        tokenizer: PathBuf,
        /// Its token count (ids 0 to tokens − 1).
        tokens: u64,
        /// The model config.
        config: PathBuf,
        /// The token table's rows.
        vocab_size: u64,
    },
    /// The tokenizer's length does not match the model's positions.
    #[error(
        "`{path}` gives model_max_length {found} but `{config}` gives \
         text_config.max_position_embeddings {positions}; the tokenizer and the model disagree"
    )]
    Length {
        /// The tokenizer settings.
        path: PathBuf,
        /// The length found.
        found: u64,
        /// The model config.
        config: PathBuf,
        /// The model's positions.
        positions: u64,
    },
}

/// Why a text could not become token ids.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizeError {
    /// The text is longer than the sequence.
    #[error(
        "text {index} ({text:?}) is {tokens} tokens with its end token, longer than the \
         model's sequence of {length} (text_config.max_position_embeddings); shorten it, or \
         let it be cut (--truncate)"
    )]
    TooLong {
        /// The text's position in the list.
        index: usize,
        /// The text.
        text: String,
        /// Its tokens.
        tokens: usize,
        /// The sequence length.
        length: usize,
    },
    /// The text has a piece the vocabulary lacks.
    #[error(
        "text {index} ({text:?}) has {piece:?}, which the tokenizer's vocabulary ({source_file}) \
         does not have (it would be the unknown token, id {unk_id})"
    )]
    Unknown {
        /// The text's position in the list.
        index: usize,
        /// The text.
        text: String,
        /// The part of the text that became the unknown token.
        piece: String,
        /// The tokenizer's file.
        source_file: String,
        /// The unknown token's id.
        unk_id: u32,
    },
    /// The `tokenizers` crate failed on the text.
    #[error("text {index} ({text:?}) cannot be tokenized: {source}")]
    Encode {
        /// The text's position in the list.
        index: usize,
        /// The text.
        text: String,
        /// The crate's error.
        #[source]
        source: tokenizers::Error,
    },
    /// A token id is not a row of the token table: the tokenizer and the
    /// model disagree.
    #[error(
        "text {index} ({text:?}) gives token id {id}, but the token table has {rows} rows; the \
         tokenizer and the model disagree"
    )]
    OutOfTable {
        /// The text's position in the list.
        index: usize,
        /// The text.
        text: String,
        /// The id.
        id: u32,
        /// Rows of the token table.
        rows: u64,
    },
}

/// How text becomes token ids, as the package records it: the
/// `tokenizers` tokenizer (in `tokenizer.json` form) and SigLIP's own
/// steps around it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerSettings {
    /// The file the tokenizer came from (`spiece.model` or
    /// `tokenizer.json`), for messages.
    pub source: String,
    /// Whether `SiglipTokenizer`'s canonicalisation runs first.
    pub canonicalize: bool,
    /// Whether it lower-cases (its `do_lower_case`).
    pub lower_case: bool,
    /// The end token appended after encoding (`None`: the tokenizer's own
    /// post-processor adds its special tokens).
    pub eos_id: Option<u32>,
    /// The padding token.
    pub pad_id: u32,
    /// The unknown token, whose appearance is an error.
    pub unk_id: Option<u32>,
}

/// The checkpoint's tokenizer (module header).
#[derive(Clone, Debug)]
pub struct TextTokenizer {
    tokenizer: Tokenizer,
    settings: TokenizerSettings,
}

/// The fields of `tokenizer_config.json` read here.
#[derive(Debug, Default, Deserialize)]
struct TokenizerConfig {
    tokenizer_class: Option<String>,
    #[serde(default)]
    do_lower_case: Option<bool>,
    model_max_length: Option<f64>,
    pad_token: Option<TokenSpec>,
    eos_token: Option<TokenSpec>,
    unk_token: Option<TokenSpec>,
}

/// A special token: its text, or transformers' `AddedToken` object.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum TokenSpec {
    Text(String),
    Added { content: String },
}

impl TokenSpec {
    fn text(&self) -> &str {
        match self {
            TokenSpec::Text(t) | TokenSpec::Added { content: t } => t,
        }
    }
}

/// ASCII punctuation, Python's `string.punctuation`, which
/// `SiglipTokenizer` removes.
const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// `SiglipTokenizer.canonicalize_text`: lower case (when asked),
/// punctuation removed, whitespace runs made one space, ends stripped.
pub fn canonicalize(text: &str, lower_case: bool) -> String {
    let text = if lower_case {
        text.to_lowercase()
    } else {
        text.to_owned()
    };
    let kept: String = text.chars().filter(|c| !PUNCTUATION.contains(*c)).collect();
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl TextTokenizer {
    /// Reads the tokenizer of the checkpoint in `dir` (`spiece.model`
    /// first, else `tokenizer.json`, with `tokenizer_config.json`) and
    /// checks it against the text tower's token table (`vocab_size` rows)
    /// and sequence (`positions`); `config` names the model config in
    /// messages.
    pub fn read(
        dir: &Path,
        vocab_size: u64,
        positions: u64,
        config: &Path,
    ) -> Result<Self, TokenizerError> {
        let settings_path = dir.join(TOKENIZER_CONFIG_FILE);
        let tc: TokenizerConfig = if settings_path.is_file() {
            let text =
                std::fs::read_to_string(&settings_path).map_err(|source| TokenizerError::Io {
                    path: settings_path.clone(),
                    source,
                })?;
            serde_json::from_str(&text).map_err(|source| TokenizerError::Config {
                path: settings_path.clone(),
                source,
            })?
        } else {
            TokenizerConfig::default()
        };
        let siglip = tc.tokenizer_class.as_deref() == Some("SiglipTokenizer");
        let spiece_path = dir.join(SPIECE_FILE);
        let json_path = dir.join(TOKENIZER_FILE);
        let (tokenizer, source, eos_default, unk_default) = if spiece_path.is_file()
            && (siglip || !json_path.is_file())
        {
            let (t, unk) = from_spiece(&spiece_path)?;
            (t, spiece_path, Some("</s>"), Some(unk))
        } else if json_path.is_file() {
            let t = Tokenizer::from_file(&json_path).map_err(|source| TokenizerError::Build {
                path: json_path.clone(),
                source,
            })?;
            (t, json_path, None, None)
        } else {
            return Err(TokenizerError::Missing {
                dir: dir.to_owned(),
            });
        };
        let id_of = |field: &'static str, token: &str, path: &Path| {
            tokenizer
                .token_to_id(token)
                .ok_or_else(|| TokenizerError::Special {
                    path: path.to_owned(),
                    field,
                    token: token.to_owned(),
                })
        };
        let from_spiece = eos_default.is_some();
        // SigLIP's tokenizer appends `</s>`; a tokenizer.json's own
        // post-processor adds what it adds.
        let eos_id = if from_spiece {
            let eos = tc.eos_token.as_ref().map_or("</s>", TokenSpec::text);
            Some(id_of("eos_token", eos, &settings_path)?)
        } else {
            None
        };
        let pad = tc.pad_token.as_ref().map_or("</s>", TokenSpec::text);
        let pad_id = id_of("pad_token", pad, &settings_path)?;
        let unk_id = match (&tc.unk_token, unk_default) {
            (Some(u), _) => Some(id_of("unk_token", u.text(), &settings_path)?),
            (None, Some(u)) => Some(u),
            (None, None) => None,
        };
        let tokens = tokenizer.get_vocab_size(true) as u64;
        if tokens > vocab_size {
            return Err(TokenizerError::Vocabulary {
                tokenizer: source,
                tokens,
                config: config.to_owned(),
                vocab_size,
            });
        }
        // transformers writes a huge number for "no limit".
        if let Some(found) = tc.model_max_length.filter(|&l| l < 1e15)
            && found as u64 != positions
        {
            return Err(TokenizerError::Length {
                path: settings_path,
                found: found as u64,
                config: config.to_owned(),
                positions,
            });
        }
        let source_name = source.file_name().map_or_else(
            || source.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        Ok(Self {
            tokenizer,
            settings: TokenizerSettings {
                source: source_name,
                canonicalize: from_spiece || siglip,
                lower_case: tc.do_lower_case.unwrap_or(true),
                eos_id,
                pad_id,
                unk_id,
            },
        })
    }

    /// The tokenizer a package recorded ([`TextTokenizer::to_json`]).
    pub fn from_parts(
        tokenizer: &serde_json::Value,
        settings: TokenizerSettings,
    ) -> Result<Self, tokenizers::Error> {
        let tokenizer: Tokenizer = serde_json::from_value(tokenizer.clone())?;
        Ok(Self {
            tokenizer,
            settings,
        })
    }

    /// The tokenizer in `tokenizer.json` form, for the package.
    pub fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(&self.tokenizer)
    }

    /// SigLIP's steps around the tokenizer.
    pub fn settings(&self) -> &TokenizerSettings {
        &self.settings
    }

    /// Token ids of each text, `length` each (module header), in order.
    pub fn encode(
        &self,
        texts: &[String],
        length: usize,
        truncation: Truncation,
    ) -> Result<Vec<Vec<u32>>, TokenizeError> {
        texts
            .iter()
            .enumerate()
            .map(|(index, text)| self.encode_one(index, text, length, truncation, true))
            .collect()
    }

    /// Token ids of each text without the unknown-token check (for
    /// calibration prompts, which may use words a small vocabulary lacks).
    pub fn encode_lenient(
        &self,
        texts: &[String],
        length: usize,
    ) -> Result<Vec<Vec<u32>>, TokenizeError> {
        texts
            .iter()
            .enumerate()
            .map(|(index, text)| self.encode_one(index, text, length, Truncation::Truncate, false))
            .collect()
    }

    fn encode_one(
        &self,
        index: usize,
        text: &str,
        length: usize,
        truncation: Truncation,
        strict: bool,
    ) -> Result<Vec<u32>, TokenizeError> {
        let s = &self.settings;
        let input = if s.canonicalize {
            canonicalize(text, s.lower_case)
        } else {
            text.to_owned()
        };
        let encoding = self
            .tokenizer
            .encode(input.as_str(), s.eos_id.is_none())
            .map_err(|source| TokenizeError::Encode {
                index,
                text: text.to_owned(),
                source,
            })?;
        if strict && let Some(unk) = s.unk_id {
            // Special tokens the post-processor adds are no text's pieces
            // (CLIP's unknown token is its end token).
            let special = encoding.get_special_tokens_mask();
            let unknown = encoding
                .get_ids()
                .iter()
                .enumerate()
                .position(|(i, &id)| id == unk && special.get(i) != Some(&1));
            if let Some(at) = unknown {
                let piece = encoding
                    .get_offsets()
                    .get(at)
                    .and_then(|&(a, b)| input.get(a..b))
                    .unwrap_or("")
                    .to_owned();
                return Err(TokenizeError::Unknown {
                    index,
                    text: text.to_owned(),
                    piece,
                    source_file: s.source.clone(),
                    unk_id: unk,
                });
            }
        }
        let mut ids = encoding.get_ids().to_vec();
        ids.extend(s.eos_id);
        if ids.len() > length {
            match truncation {
                Truncation::Refuse => {
                    return Err(TokenizeError::TooLong {
                        index,
                        text: text.to_owned(),
                        tokens: ids.len(),
                        length,
                    });
                }
                Truncation::Truncate => {
                    let last = ids.last().copied();
                    // The post-processor's own end token (CLIP's), or
                    // the one appended here (SigLIP's).
                    let ends_special =
                        s.eos_id.is_some() || encoding.get_special_tokens_mask().last() == Some(&1);
                    ids.truncate(length);
                    // The end token stays, as transformers' truncation
                    // keeps the special tokens.
                    if let (true, Some(eos), Some(slot)) = (ends_special, last, ids.last_mut()) {
                        *slot = eos;
                    }
                }
            }
        }
        ids.resize(length, s.pad_id);
        Ok(ids)
    }
}

/// A `tokenizers` tokenizer from a SentencePiece Unigram model (module
/// header), and its unknown token's id.
fn from_spiece(path: &Path) -> Result<(Tokenizer, u32), TokenizerError> {
    let bytes = std::fs::read(path).map_err(|source| TokenizerError::Io {
        path: path.to_owned(),
        source,
    })?;
    let model = spiece::parse(&bytes).map_err(|source| TokenizerError::Spiece {
        path: path.to_owned(),
        source,
    })?;
    if model.model_type != 1 {
        return Err(TokenizerError::ModelType {
            path: path.to_owned(),
            model_type: model.model_type,
        });
    }
    let build = |source| TokenizerError::Build {
        path: path.to_owned(),
        source,
    };
    let unk = model
        .pieces
        .iter()
        .position(|p| p.kind == PieceType::Unknown)
        .unwrap_or(model.unk_id as usize);
    let vocab = model
        .pieces
        .iter()
        .map(|p| (p.piece.clone(), f64::from(p.score)))
        .collect();
    let unigram = Unigram::from(vocab, Some(unk), model.byte_fallback).map_err(build)?;
    let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
    if !model.precompiled_charsmap.is_empty() {
        let map = Precompiled::from(&model.precompiled_charsmap)
            .map_err(|e| build(Box::new(e) as tokenizers::Error))?;
        normalizers.push(map.into());
    }
    let replace = |pattern: tokenizers::normalizers::replace::ReplacePattern, with: &str| {
        Replace::new(pattern, with).map(NormalizerWrapper::from)
    };
    use tokenizers::normalizers::replace::ReplacePattern::{Regex, String as Plain};
    if model.remove_extra_whitespaces {
        normalizers.push(replace(Regex(r"\A +| +\z".into()), "").map_err(build)?);
        normalizers.push(replace(Regex(" {2,}".into()), " ").map_err(build)?);
    }
    if model.escape_whitespaces {
        normalizers.push(replace(Plain(" ".into()), "▁").map_err(build)?);
    }
    if model.add_dummy_prefix {
        // The pre-tokenizer skips its prefix where the text already
        // starts with `▁`; SentencePiece does not.
        normalizers.push(replace(Regex("\\A▁".into()), "▁▁").map_err(build)?);
    }
    let mut tokenizer = Tokenizer::new(unigram);
    tokenizer.with_normalizer(Some(Sequence::new(normalizers)));
    if model.add_dummy_prefix {
        tokenizer.with_pre_tokenizer(Some(Metaspace::new('▁', PrependScheme::Always, false)));
    }
    Ok((tokenizer, unk as u32))
}

#[cfg(test)]
mod tests {
    use super::canonicalize;

    #[test]
    fn canonicalize_is_siglips() {
        assert_eq!(
            canonicalize("  A Photo of a DOG! ", true),
            "a photo of a dog"
        );
        assert_eq!(canonicalize("it's\ta\n\ndog's", true), "its a dogs");
        assert_eq!(canonicalize("Keep Case.", false), "Keep Case");
        assert_eq!(canonicalize("", true), "");
    }
}
