//! Typed `u32` ids and dense maps indexed by them.
//!
//! Every crate of the workspace names tiles, requests, transfers and
//! operations by small integers. Wrapping each kind in its own newtype keeps a
//! tile number from being passed where a request id is expected, and the
//! `Display` form (`tile7`, `req12`) is what error messages and logs print.

use std::marker::PhantomData;

/// A dense index type: a `u32` newtype made by [`define_id!`](crate::define_id).
pub trait EntityId: Copy + Eq + Ord + std::hash::Hash + std::fmt::Debug {
    /// The id for a position in a dense map.
    fn new(index: usize) -> Self;
    /// The position of this id in a dense map.
    fn index(self) -> usize;
}

/// Defines a `u32` newtype id with a `Display` like `tile7`.
///
/// ```
/// ipu_layout::define_id!(
///     /// A widget.
///     pub struct WidgetId, "widget"
/// );
/// assert_eq!(WidgetId::from_u32(3).to_string(), "widget3");
/// ```
#[macro_export]
macro_rules! define_id {
    ($(#[$attr:meta])* $vis:vis struct $name:ident, $prefix:literal) => {
        $(#[$attr])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[derive(serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        $vis struct $name(u32);

        impl $name {
            /// The id with this raw number.
            // Asked for: the dev profile builds incrementally, where rustc
            // does not inline across crates on its own, and ids are made
            // in the hot loops of every crate.
            #[inline]
            pub const fn from_u32(raw: u32) -> Self {
                Self(raw)
            }
            /// The raw number of this id.
            #[inline]
            pub const fn as_u32(self) -> u32 {
                self.0
            }
        }

        impl $crate::entity::EntityId for $name {
            #[inline]
            fn new(index: usize) -> Self {
                // Dense maps are never larger than u32::MAX entries: ids are
                // created from positions in maps that were built from u32 ids.
                debug_assert!(index <= u32::MAX as usize);
                Self(index as u32)
            }
            #[inline]
            fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(self, f)
            }
        }
    };
}

/// A dense map from ids `0..len` to values: a `Vec` that only takes its own
/// id type as an index.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdVec<K, V> {
    values: Vec<V>,
    key: PhantomData<fn(K) -> K>,
}

impl<K: EntityId, V> IdVec<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self {
            values: Vec::new(),
            key: PhantomData,
        }
    }

    /// A map holding `values`, the first under id 0.
    pub fn from_vec(values: Vec<V>) -> Self {
        Self {
            values,
            key: PhantomData,
        }
    }

    /// Appends a value and returns its id.
    pub fn push(&mut self, value: V) -> K {
        let id = K::new(self.values.len());
        self.values.push(value);
        id
    }

    /// The value under `id`, if the map is that long.
    pub fn get(&self, id: K) -> Option<&V> {
        self.values.get(id.index())
    }

    /// The value under `id`, mutably, if the map is that long.
    pub fn get_mut(&mut self, id: K) -> Option<&mut V> {
        self.values.get_mut(id.index())
    }

    /// How many ids the map holds.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Ids and values in id order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (K, &V)> + '_ {
        self.values.iter().enumerate().map(|(i, v)| (K::new(i), v))
    }

    /// Ids in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = K> + use<K, V> {
        (0..self.values.len()).map(K::new)
    }

    /// Values in id order.
    pub fn values(&self) -> &[V] {
        &self.values
    }

    /// The underlying values.
    pub fn into_vec(self) -> Vec<V> {
        self.values
    }
}

impl<K: EntityId, V> Default for IdVec<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: EntityId, V> std::ops::Index<K> for IdVec<K, V> {
    type Output = V;
    fn index(&self, id: K) -> &V {
        &self.values[id.index()]
    }
}

impl<K: EntityId, V> std::ops::IndexMut<K> for IdVec<K, V> {
    fn index_mut(&mut self, id: K) -> &mut V {
        &mut self.values[id.index()]
    }
}

impl<K: EntityId, V: std::fmt::Debug> std::fmt::Debug for IdVec<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: EntityId, V> FromIterator<V> for IdVec<K, V> {
    fn from_iter<I: IntoIterator<Item = V>>(iter: I) -> Self {
        Self::from_vec(iter.into_iter().collect())
    }
}

/// Serialised as the sequence of values in id order.
impl<K, V: serde::Serialize> serde::Serialize for IdVec<K, V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.values.serialize(serializer)
    }
}

/// Read from the sequence of values in id order.
impl<'de, K, V: serde::Deserialize<'de>> serde::Deserialize<'de> for IdVec<K, V> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self {
            values: Vec::deserialize(deserializer)?,
            key: PhantomData,
        })
    }
}
