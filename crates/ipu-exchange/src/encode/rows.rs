//! The rows of a phase: one row of instruction words per tile, identical
//! rows stored once and shared between clones.

use std::collections::HashMap;

use ipu_layout::TileId;
use ipu_layout::hash::FoldBuildHasher;
use rayon::prelude::*;
use smallvec::SmallVec;

use crate::isa::Instr;

/// A hash of a row's words: two words at a time folded by a multiply and
/// a rotation, seeded with the length. Equal rows hash equal; rows that
/// differ are told apart by comparing them.
fn row_hash(row: &[u32]) -> u64 {
    let mut h = (row.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut pairs = row.chunks_exact(2);
    for p in &mut pairs {
        let x = u64::from(p[0]) | (u64::from(p[1]) << 32);
        h = (h.rotate_left(26) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    if let [last] = pairs.remainder() {
        h = (h.rotate_left(26) ^ u64::from(*last)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h ^ (h >> 29)
}

/// Per-tile exchange rows, with identical rows stored once.
///
/// Clones share the rows: a build keeps a phase's rows both in its package
/// and with its schedule (for a later round), tens of megabytes on SigLIP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncodedRows {
    rows: std::sync::Arc<Vec<Vec<u32>>>,
    tile_row: Vec<u32>,
}

impl EncodedRows {
    /// Rows from one instruction-word vector per tile (tile `i` gets
    /// `rows[i]`); identical rows are shared.
    pub fn from_tile_rows(rows: Vec<Vec<u32>>) -> EncodedRows {
        // Rows are found again by a hash of their words, computed for all
        // rows in parallel, and compared word for word only when hashes
        // meet: a phase's rows are megabytes, which the default SipHash of
        // a `Vec` key (and a copy of every distinct row as that key) made
        // a visible part of scheduling. Ids are handed out in tile order,
        // as before.
        let hashes: Vec<u64> = rows.par_iter().map(|row| row_hash(row)).collect();
        let mut unique: Vec<Vec<u32>> = Vec::new();
        let mut index: HashMap<u64, SmallVec<[u32; 1]>, FoldBuildHasher> = HashMap::default();
        let mut tile_row = Vec::with_capacity(rows.len());
        for (row, hash) in rows.into_iter().zip(hashes) {
            let ids = index.entry(hash).or_default();
            let id = match ids.iter().find(|&&id| unique[id as usize] == row) {
                Some(&id) => id,
                None => {
                    let id = unique.len() as u32;
                    ids.push(id);
                    unique.push(row);
                    id
                }
            };
            tile_row.push(id);
        }
        EncodedRows {
            rows: std::sync::Arc::new(unique),
            tile_row,
        }
    }

    /// Rows already shared: `tile_row[t]` is the index in `rows` of tile
    /// `t`'s row. `None` when an index is out of range. Rows are not
    /// compared, so two equal entries of `rows` stay two.
    pub fn from_shared(rows: Vec<Vec<u32>>, tile_row: Vec<u32>) -> Option<EncodedRows> {
        let count = rows.len();
        tile_row
            .iter()
            .all(|&r| (r as usize) < count)
            .then_some(EncodedRows {
                rows: std::sync::Arc::new(rows),
                tile_row,
            })
    }

    /// Number of tiles.
    pub fn tile_count(&self) -> u32 {
        self.tile_row.len() as u32
    }

    /// Tile `tile`'s row (empty for an inactive tile or a tile out of range).
    pub fn row(&self, tile: TileId) -> &[u32] {
        self.tile_row
            .get(tile.as_u32() as usize)
            .and_then(|&r| self.rows.get(r as usize))
            .map_or(&[], Vec::as_slice)
    }

    /// Which shared row tile `tile` uses.
    pub fn row_id(&self, tile: TileId) -> Option<u32> {
        self.tile_row.get(tile.as_u32() as usize).copied()
    }

    /// The distinct rows.
    pub fn unique_rows(&self) -> &[Vec<u32>] {
        &self.rows
    }

    /// Bytes of tile `tile`'s row (4 per instruction word, not counting the
    /// final return the caller appends).
    pub fn row_bytes(&self, tile: TileId) -> u64 {
        self.row(tile).len() as u64 * 4
    }

    /// Bytes of all distinct rows (each shared row counted once).
    pub fn total_bytes(&self) -> u64 {
        self.rows.iter().map(|r| r.len() as u64 * 4).sum()
    }

    /// A bound on the work a replay of these rows does, in words: every
    /// instruction word of every tile's row, plus two per item of every
    /// send (32-bit items move one). Decoding a row stops at its first word
    /// that does not decode (a replay reports that row). Used to refuse, before
    /// running it, exchange work beyond a limit.
    pub fn replay_words(&self) -> u64 {
        let per_row: Vec<u64> = self
            .rows
            .iter()
            .map(|row| {
                let mut total = row.len() as u64;
                let mut i = 0;
                while i < row.len() {
                    let Ok((instr, next)) = Instr::decode_at(row, i) else {
                        break;
                    };
                    if matches!(
                        instr,
                        Instr::Send { .. }
                            | Instr::SendOff { .. }
                            | Instr::SendPic { .. }
                            | Instr::SendPicP { .. }
                    ) {
                        total = total.saturating_add(2 * u64::from(instr.cycles()));
                    }
                    i += next.max(1);
                }
                total
            })
            .collect();
        self.tile_row
            .iter()
            .filter_map(|&r| per_row.get(r as usize))
            .fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// The cycle after the last window of the row that ends last (0 when
    /// every row is empty), the phase's horizon as the rows alone
    /// determine it; or the lowest tile whose row does not decode. Each
    /// distinct row is decoded once, in parallel.
    pub fn end(&self) -> Result<u64, (TileId, crate::isa::DecodeError)> {
        let ends: Vec<Result<u64, crate::isa::DecodeError>> = self
            .rows
            .par_iter()
            .map(|row| crate::timeline::row_end(row))
            .collect();
        let mut end = 0;
        for (t, &r) in self.tile_row.iter().enumerate() {
            match ends.get(r as usize) {
                Some(Ok(e)) => end = end.max(*e),
                Some(Err(error)) => return Err((TileId::from_u32(t as u32), *error)),
                None => {}
            }
        }
        Ok(end)
    }

    /// The tile with the longest row and its length in bytes (lowest tile
    /// id on ties).
    pub fn largest_row(&self) -> Option<(TileId, u64)> {
        (0..self.tile_count())
            .map(|t| (TileId::from_u32(t), self.row_bytes(TileId::from_u32(t))))
            .max_by_key(|&(t, b)| (b, std::cmp::Reverse(t)))
    }
}
