//! The errors of checkpoint import ([`ImportError`]) and of turning images
//! into the graph's input ([`ImageError`]).

use std::path::PathBuf;

use safetensors::SafeTensorError;

use crate::processor::ProcessorError;
use crate::siglip::{BuildError, ConfigError};

/// Why a checkpoint directory could not be imported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// A file could not be read.
    #[error("cannot read `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file is malformed or of the wrong form.
    #[error("`{path}` is not valid JSON of the expected form: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's finding, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// `config.json` does not describe a usable SigLIP vision tower.
    #[error("`{path}`: {source}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: ConfigError,
    },
    /// `preprocessor_config.json` asks for preprocessing this importer
    /// does not do, or does not fit the model.
    #[error("`{path}`: {source}")]
    Processor {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: ProcessorError,
    },
    /// `--random-weights` on a configuration too large to draw weights for.
    #[error("`{dir}`: {source}")]
    RandomWeights {
        /// The checkpoint directory.
        dir: PathBuf,
        /// How many weights, against the limit.
        #[source]
        source: crate::siglip::TooManyWeights,
    },
    /// The directory has no weights.
    #[error(
        "`{dir}` holds neither model.safetensors nor model.safetensors.index.json; \
         point at a directory saved by transformers' save_pretrained"
    )]
    NoWeights {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// A weights file is not a valid safetensors file.
    #[error("`{path}` is not a valid safetensors file: {source}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// The format rule broken.
        #[source]
        source: SafeTensorError,
    },
    /// The shard index names a file outside the checkpoint directory.
    #[error("`{index}` names shard `{file}`, which is not a plain file name beside the index")]
    ShardName {
        /// The index file.
        index: PathBuf,
        /// The shard name as written.
        file: String,
    },
    /// The shard index puts a tensor in a shard that does not hold it.
    #[error("`{index}` puts tensor `{name}` in `{file}`, but that shard does not hold it")]
    IndexMismatch {
        /// The index file.
        index: PathBuf,
        /// The tensor.
        name: String,
        /// The shard the index names.
        file: String,
    },
    /// Two shards hold a tensor of the same name.
    #[error("tensor `{name}` is stored twice, in `{first}` and in `{second}`")]
    DuplicateTensor {
        /// The tensor.
        name: String,
        /// The first file.
        first: PathBuf,
        /// The second file.
        second: PathBuf,
    },
    /// A tensor the config needs is absent.
    #[error(
        "checkpoint tensor `{name}` is missing; the config needs it with shape {expected:?} \
         (it feeds graph weight `{weight}`)"
    )]
    MissingTensor {
        /// The transformers name.
        name: String,
        /// The shape the config implies.
        expected: Vec<u64>,
        /// The graph weight it feeds.
        weight: String,
    },
    /// A tensor has another shape than the config implies.
    #[error(
        "checkpoint tensor `{name}` in `{file}` has shape {found:?}, but the config needs \
         {expected:?} (it feeds graph weight `{weight}`); the checkpoint and config.json disagree"
    )]
    Shape {
        /// The transformers name.
        name: String,
        /// The stored shape.
        found: Vec<u64>,
        /// The shape the config implies.
        expected: Vec<u64>,
        /// The graph weight it feeds.
        weight: String,
        /// The file that holds it.
        file: PathBuf,
    },
    /// A stored tensor is not part of the tower the config describes
    /// (nor of the parts of the checkpoint the importer ignores).
    #[error(
        "checkpoint tensor `{name}` (shape {shape:?}, in `{file}`) is not part of the \
         {tower} tower config.json describes{}",
        if *head_disabled { " (config.json sets vision_use_head = false)" } else { "" }
    )]
    UnexpectedTensor {
        /// The stored name.
        name: String,
        /// Its shape.
        shape: Vec<u64>,
        /// The file that holds it.
        file: PathBuf,
        /// Whether it is a head tensor while the config has no head.
        head_disabled: bool,
        /// The tower imported (`SigLIP vision`, `SigLIP text`, `ViT`,
        /// `CLIP vision`).
        tower: &'static str,
    },
    /// A tensor is stored in a dtype the importer does not read.
    #[error("checkpoint tensor `{name}` is stored as {dtype}; only F32, F16 and BF16 are read")]
    Dtype {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: String,
    },
    /// The checkpoint's tokenizer cannot be used.
    #[error(transparent)]
    Tokenizer {
        /// Why.
        #[from]
        source: crate::siglip::text::TokenizerError,
    },
    /// The checkpoint's contrastive parameters cannot be read.
    #[error(
        "checkpoint tensor `{name}` is missing or not one number; a full SiglipModel stores \
         logit_scale and logit_bias as [1]"
    )]
    LogitParameter {
        /// The tensor.
        name: &'static str,
    },
    /// The graph could not be built for this config, batch and policy.
    #[error("cannot build the graph: {source}")]
    Build {
        /// Why.
        #[source]
        source: BuildError,
    },
    /// A bug in the importer: the mapping and the graph disagree.
    #[error("bug in the checkpoint importer: {what}")]
    Internal {
        /// What went wrong.
        what: String,
    },
}

/// Why images could not be turned into the graph's `patches` input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The package's model takes another kind of input.
    #[error("{given} were given, but this package's model takes {takes}")]
    Kind {
        /// What was given.
        given: &'static str,
        /// What the model takes.
        takes: &'static str,
    },
    /// The number of texts is not the graph's batch.
    #[error(
        "{found} texts were given but the graph's batch is {batch}; give one text per batch row \
         (build the package with --batch {found})"
    )]
    TextCount {
        /// The graph's batch.
        batch: u64,
        /// Texts given.
        found: usize,
    },
    /// A text cannot become token ids.
    #[error(transparent)]
    Tokenize {
        /// Why.
        #[from]
        source: crate::siglip::text::TokenizeError,
    },
    /// The number of images is not the graph's batch.
    #[error(
        "{found} images were given but the graph's batch is {batch}; give one image per batch row"
    )]
    Count {
        /// The graph's batch.
        batch: u64,
        /// Images given.
        found: usize,
    },
    /// The file could not be read.
    #[error("cannot read image `{path}`: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The file is not an image in a recognised format.
    #[error("`{path}` is not an image in a format this build reads (PNG or JPEG)")]
    NotAnImage {
        /// The file.
        path: PathBuf,
    },
    /// The file looks like an image but cannot be decoded.
    #[error("cannot decode image `{path}`: {source}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// The decoder's reason.
        #[source]
        source: image::ImageError,
    },
    /// Without a resize step the image must already have the model's size.
    #[error(
        "image `{path}` is {width}x{height} but the processor does not resize and the model \
         takes {expected}x{expected}"
    )]
    Size {
        /// The file.
        path: PathBuf,
        /// Its width.
        width: u32,
        /// Its height.
        height: u32,
        /// The model's image side.
        expected: u64,
    },
    /// A shortest-edge resize would make the image too long to hold.
    #[error(
        "image `{path}` is {width}x{height}; resized to the model's shortest edge its long side \
         would exceed {} pixels",
        crate::processor::MAX_RESIZED_SIDE
    )]
    Aspect {
        /// The file.
        path: PathBuf,
        /// Its width.
        width: u64,
        /// Its height.
        height: u64,
    },
    /// A bug: pixel values of the wrong length reached patch extraction.
    #[error("bug in image preprocessing: {what}")]
    Internal {
        /// What went wrong.
        what: String,
    },
}
