//! The element-wise activation functions of [`Op::Activation`]: the one
//! list of them, with the name each goes by in fixtures, op kinds, step
//! roles, codelet kinds and profiles.
//!
//! What each function computes, and in which precision, is stated here
//! once; the reference evaluator and the tile model's codelets implement
//! it separately (so that one checks the other), and the device
//! description gives each its cost per vector.
//!
//! [`Op::Activation`]: crate::graph::Op::Activation

use serde::{Deserialize, Serialize};

/// An element-wise activation function. Like every op's, its f32 result
/// is then rounded to the output tensor's precision.
///
/// Serialised (in `program.json`'s step roles and codelets) by its variant
/// name, except [`Activation::GeluTanh`], which keeps the name `Gelu` it
/// had when it was the only activation, so that packages of graphs using
/// only it read and write as before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Activation {
    /// GELU with the tanh approximation,
    /// `0.5·x·(1 + tanh(0.7978846·(x + 0.044715·x³)))`, computed in f32
    /// (transformers' `gelu_pytorch_tanh` and `gelu_new`).
    #[serde(rename = "Gelu")]
    GeluTanh,
    /// GELU in its exact form, `0.5·x·(1 + erf(x/√2))`, computed in f64
    /// and rounded to f32 (transformers' `gelu`).
    GeluErf,
    /// The sigmoid approximation of GELU, `x·sigmoid(1.702·x)`, computed in
    /// f64 and rounded to f32 (transformers' `quick_gelu`).
    QuickGelu,
    /// The hyperbolic tangent, computed in f64 and rounded to f32.
    Tanh,
}

impl Activation {
    /// Every function, in the order profiles list their codelets.
    pub const ALL: [Activation; 4] = [
        Activation::GeluTanh,
        Activation::GeluErf,
        Activation::QuickGelu,
        Activation::Tanh,
    ];

    /// The function's name: its fixture op spelling, op kind, step role and
    /// codelet kind.
    pub const fn name(self) -> &'static str {
        match self {
            Activation::GeluTanh => "gelu",
            Activation::GeluErf => "gelu_erf",
            Activation::QuickGelu => "quick_gelu",
            Activation::Tanh => "tanh",
        }
    }

    /// The function named `name` ([`Activation::name`]), if any.
    pub fn from_name(name: &str) -> Option<Activation> {
        Activation::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Whether this is the tanh GELU (the serialised codelet's default
    /// function).
    pub fn is_gelu_tanh(&self) -> bool {
        *self == Activation::GeluTanh
    }
}

impl std::fmt::Display for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_read_back() {
        for a in Activation::ALL {
            assert_eq!(Activation::from_name(a.name()), Some(a));
        }
        assert_eq!(Activation::from_name("relu"), None);
        assert_eq!(Activation::from_name("Gelu"), None);
    }

    #[test]
    fn the_tanh_gelu_keeps_its_serialised_name() {
        let json = |a: Activation| serde_json::to_string(&a).unwrap();
        assert_eq!(json(Activation::GeluTanh), "\"Gelu\"");
        assert_eq!(json(Activation::GeluErf), "\"GeluErf\"");
        assert_eq!(json(Activation::QuickGelu), "\"QuickGelu\"");
        assert_eq!(json(Activation::Tanh), "\"Tanh\"");
        for a in Activation::ALL {
            assert_eq!(serde_json::from_str::<Activation>(&json(a)).unwrap(), a);
        }
    }
}
