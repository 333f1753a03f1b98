//! What every Hugging Face checkpoint directory has, whatever the model
//! family: its file names, reading its JSON files, its weights as a store
//! of safetensors tensors read on demand (`store.rs`), and the names its
//! configs give the graph's activation functions (`hidden_act`).

mod store;

use std::path::Path;

use ipu_package::graph::Activation;
use serde::de::DeserializeOwned;

pub(crate) use store::TensorStore;
pub use store::{INDEX_FILE, WEIGHTS_FILE};

use crate::error::ImportError;

/// The model description file of a checkpoint.
pub const CONFIG_FILE: &str = "config.json";
/// The image processor description file of a checkpoint.
pub const PROCESSOR_FILE: &str = "preprocessor_config.json";

/// The text of the file `name` of the checkpoint in `dir`, or `None` when
/// there is no such file.
pub fn read_optional(dir: &Path, name: &str) -> Result<Option<String>, ImportError> {
    let path = dir.join(name);
    if !path.is_file() {
        return Ok(None);
    }
    read_text(&path).map(Some)
}

/// The text of the checkpoint file at `path`.
pub fn read_text(path: &Path) -> Result<String, ImportError> {
    std::fs::read_to_string(path).map_err(|source| ImportError::Io {
        path: path.to_owned(),
        source,
    })
}

/// The JSON file at `path`, parsed into `T`.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, ImportError> {
    serde_json::from_str(&read_text(path)?).map_err(|source| ImportError::Json {
        path: path.to_owned(),
        source,
    })
}

/// The encoder activations transformers' configs name (`hidden_act`), with
/// the graph's function for each.
const ACTIVATIONS: [(&str, Activation); 4] = [
    ("gelu", Activation::GeluErf),
    ("gelu_pytorch_tanh", Activation::GeluTanh),
    ("gelu_new", Activation::GeluTanh),
    ("quick_gelu", Activation::QuickGelu),
];

/// Every `hidden_act` [`activation`] reads.
pub const ACTIVATION_NAMES: [&str; 4] = ["gelu", "gelu_pytorch_tanh", "gelu_new", "quick_gelu"];

/// The graph's function for transformers' `hidden_act` `name`, if it has
/// one.
pub fn activation(name: &str) -> Option<Activation> {
    ACTIVATIONS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, a)| *a)
}

/// The `hidden_act` transformers writes for `function` (the first of its
/// names), if it is an encoder activation.
pub fn activation_name(function: Activation) -> Option<&'static str> {
    ACTIVATIONS
        .iter()
        .find(|(_, a)| *a == function)
        .map(|(n, _)| *n)
}
