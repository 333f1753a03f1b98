//! `model.json`: the model a package was built from, when a model front
//! end (such as a checkpoint importer) built its graph.
//!
//! The package keeps the graph itself as `fixture.json`, so that it is
//! validated and run without the front end; `model.json` says which front
//! end made it and what a run needs to turn a user's data into the graph's
//! inputs:
//!
//! ```json
//! {"format": "ipu-package/model/v1",
//!  "family": "siglip-vision",
//!  "inputs": [{"tensor": "patches", "from": "images"}],
//!  "frontend": {"format": "ipu-frontend/siglip-vision/v1", ...}}
//! ```
//!
//! `family` names the front end's model family; `frontend` is the front
//! end's own description of the model (its config, preprocessing and
//! precision decisions), versioned by the front end and opaque to this
//! crate. Each of `inputs` names a graph input and where its values come
//! from: `images`, one image per row of the tensor's first axis,
//! preprocessed as the front end's description says, or `texts`, one text
//! per row, tokenized as it says. A package with a
//! model description carries the model's weights (`weights.safetensors`):
//! values are never generated for a model imported with weights of its
//! own.

use serde::{Deserialize, Serialize};

use crate::graph::{Graph, TensorKind};

/// The model description file.
pub const MODEL_FILE: &str = "model.json";
/// The format tag of `model.json` this crate writes and reads.
pub const MODEL_FORMAT: &str = "ipu-package/model/v1";

/// The whole of `model.json` (see the module header).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDescription {
    /// [`MODEL_FORMAT`].
    pub format: String,
    /// The front end's model family, such as `siglip-vision`.
    pub family: String,
    /// The graph inputs a run fills from a user's data.
    pub inputs: Vec<ModelInput>,
    /// The front end's own description, opaque here.
    pub frontend: serde_json::Value,
}

/// A graph input and where a run takes its values from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInput {
    /// The graph input's name.
    pub tensor: String,
    /// Where its values come from.
    pub from: InputSource,
}

/// The kind of user data a graph input is made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputSource {
    /// Image files, one per row of the tensor's first axis, preprocessed
    /// as the front end's description says.
    Images,
    /// Texts, one per row of the tensor's first axis, turned into token
    /// ids by the tokenizer the front end's description carries.
    Texts,
}

/// How `model.json` contradicts the package's graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The format tag is not this crate's.
    #[error("model.json has format `{found}`; this reader reads `{MODEL_FORMAT}`")]
    Format {
        /// The tag found.
        found: String,
    },
    /// The family is empty.
    #[error("model.json names no model family")]
    Family,
    /// An input names no graph input.
    #[error("model.json describes input `{tensor}`, which is not an input of the package's graph")]
    NotAnInput {
        /// The name.
        tensor: String,
    },
    /// An input is described twice.
    #[error("model.json describes input `{tensor}` twice")]
    Repeated {
        /// The name.
        tensor: String,
    },
    /// An input made from images has no axis to hold one image per row.
    #[error(
        "model.json makes `{tensor}` from images or texts, but it has no axes to hold one per row"
    )]
    Scalar {
        /// The name.
        tensor: String,
    },
}

impl ModelDescription {
    /// A description of the current format.
    pub fn new(
        family: impl Into<String>,
        inputs: Vec<ModelInput>,
        frontend: serde_json::Value,
    ) -> Self {
        Self {
            format: MODEL_FORMAT.to_owned(),
            family: family.into(),
            inputs,
            frontend,
        }
    }

    /// `model.json`'s text: pretty JSON, keys of the front end's
    /// description sorted, so the same description gives the same bytes.
    pub fn to_json(&self) -> String {
        // Plain fields and a JSON value: serialisation cannot fail.
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Parses `model.json`.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Checks the description against `graph`, the package's graph (see
    /// the module header).
    pub fn check(&self, graph: &Graph) -> Result<(), ModelError> {
        if self.format != MODEL_FORMAT {
            return Err(ModelError::Format {
                found: self.format.clone(),
            });
        }
        if self.family.is_empty() {
            return Err(ModelError::Family);
        }
        for (i, input) in self.inputs.iter().enumerate() {
            let tensor = input.tensor.clone();
            if self.inputs[..i].iter().any(|e| e.tensor == input.tensor) {
                return Err(ModelError::Repeated { tensor });
            }
            let Some(id) = graph
                .tensor_by_name(&input.tensor)
                .filter(|&id| graph.tensor(id).kind() == TensorKind::Input)
            else {
                return Err(ModelError::NotAnInput { tensor });
            };
            if matches!(input.from, InputSource::Images | InputSource::Texts)
                && graph.tensor(id).extents().is_empty()
            {
                return Err(ModelError::Scalar { tensor });
            }
        }
        Ok(())
    }
}
