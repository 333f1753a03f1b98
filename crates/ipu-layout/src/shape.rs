//! Tensor shapes of any rank.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::LayoutError;

/// The extents of a tensor's axes, outermost first. Rank 0 is a scalar.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TensorShape(SmallVec<[u64; 4]>);

impl TensorShape {
    /// A shape with these extents.
    pub fn new(extents: impl IntoIterator<Item = u64>) -> Self {
        Self(extents.into_iter().collect())
    }

    /// The extents, outermost first.
    pub fn extents(&self) -> &[u64] {
        &self.0
    }

    /// How many axes the shape has.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The number of elements, or an error if it does not fit in `u64`.
    pub fn element_count(&self) -> Result<u64, LayoutError> {
        self.0.iter().try_fold(1u64, |acc, &e| {
            acc.checked_mul(e).ok_or(LayoutError::Overflow {
                what: "element count",
            })
        })
    }
}

impl std::fmt::Debug for TensorShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorShape({:?})", self.0.as_slice())
    }
}

impl From<&[u64]> for TensorShape {
    fn from(extents: &[u64]) -> Self {
        Self::new(extents.iter().copied())
    }
}

impl<const N: usize> From<[u64; N]> for TensorShape {
    fn from(extents: [u64; N]) -> Self {
        Self::new(extents)
    }
}
