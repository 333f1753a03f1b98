//! Payloads grouped by a small integer (a tile, a node) with a stable
//! counting sort: linear in the items, where a comparison sort of the
//! same keys is not.

/// Payloads grouped by tile: `order[offsets[t]..offsets[t + 1]]` are tile
/// `t`'s, in the order they were given. A tile is any group number below
/// the count given to [`Grouped::new`].
pub(crate) struct Grouped<T> {
    /// Where each tile's payloads start in `order` (`tiles + 1` entries:
    /// the last is the number of payloads).
    pub offsets: Vec<usize>,
    /// Every payload, tile by tile.
    pub order: Vec<T>,
}

impl<T: Copy + Default> Grouped<T> {
    /// Groups the (tile, payload) items of `lists` by tile with a counting
    /// sort, keeping their order (list by list) within a tile.
    pub fn new<I>(tiles: usize, lists: impl Iterator<Item = I> + Clone) -> Grouped<T>
    where
        I: Iterator<Item = (u32, T)>,
    {
        let mut offsets = vec![0usize; tiles + 1];
        for list in lists.clone() {
            for (tile, _) in list {
                offsets[tile as usize + 1] += 1;
            }
        }
        for t in 0..tiles {
            offsets[t + 1] += offsets[t];
        }
        let mut next = offsets.clone();
        let mut order = vec![T::default(); offsets[tiles]];
        for list in lists {
            for (tile, payload) in list {
                let at = &mut next[tile as usize];
                order[*at] = payload;
                *at += 1;
            }
        }
        Grouped { offsets, order }
    }

    /// Tile `tile`'s payloads, in the order they were given.
    pub fn of(&self, tile: usize) -> &[T] {
        &self.order[self.offsets[tile]..self.offsets[tile + 1]]
    }
}
