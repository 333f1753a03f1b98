//! The `exchange.bin` codec: every phase's exchange rows in one file.
//!
//! Little-endian `u32` words after the magic `IPUROWS1`: the phase count;
//! then per phase the tile count, the distinct-row count, each distinct row
//! as a length and its instruction words, and per tile the index of its row.
//! Decoding reads only what the file holds: every count is paid for by the
//! bytes that follow it, so a damaged file cannot make the reader allocate
//! more than the file's size, and a row index out of range is an error,
//! never "no row".

use ipu_exchange::EncodedRows;
use ipu_layout::TileId;

const MAGIC: &[u8; 8] = b"IPUROWS1";

/// The longest row a package may hold, in words.
pub const MAX_ROW_WORDS: u32 = 1 << 26;

/// Why `exchange.bin` could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RowsError {
    /// The file does not start with the magic.
    #[error("not an exchange row file (no IPUROWS1 magic)")]
    Magic,
    /// The file ends inside a field.
    #[error("truncated at byte {at}: {what} is cut off")]
    Truncated {
        /// Byte offset of the field.
        at: usize,
        /// Which field.
        what: &'static str,
    },
    /// A row is longer than any row a package holds.
    #[error(
        "phase {phase}: row {row} has {words} words, more than the {MAX_ROW_WORDS} a row may hold"
    )]
    RowTooLong {
        /// The phase.
        phase: usize,
        /// The distinct row.
        row: u32,
        /// Its length in words.
        words: u32,
    },
    /// A tile's row index names no row of its phase.
    #[error("phase {phase}: {tile}'s row index {index} names no row (the phase has {rows})")]
    RowIndex {
        /// The phase.
        phase: usize,
        /// The tile.
        tile: TileId,
        /// The index found.
        index: u32,
        /// Distinct rows of the phase.
        rows: u32,
    },
    /// Bytes follow the last phase.
    #[error("{extra} bytes follow the last phase")]
    Trailing {
        /// The extra bytes.
        extra: usize,
    },
}

/// Encodes every phase's rows.
pub fn encode_rows<'a>(rows: impl ExactSizeIterator<Item = &'a EncodedRows> + Clone) -> Vec<u8> {
    // The file's size, known up front: a build's rows are tens of
    // megabytes, and growing the buffer by doubling copies and faults in
    // twice that.
    let words: usize = rows
        .clone()
        .map(|r| {
            let unique: usize = r.unique_rows().iter().map(|row| 1 + row.len()).sum();
            2 + unique + r.tile_count() as usize
        })
        .sum();
    let mut out = Vec::with_capacity(MAGIC.len() + 4 * (1 + words));
    out.extend_from_slice(MAGIC);
    let put = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_le_bytes());
    put(&mut out, rows.len() as u32);
    for r in rows {
        put(&mut out, r.tile_count());
        put(&mut out, r.unique_rows().len() as u32);
        for row in r.unique_rows() {
            put(&mut out, row.len() as u32);
            for &w in row {
                put(&mut out, w);
            }
        }
        for t in 0..r.tile_count() {
            // Every tile in range has a row.
            put(&mut out, r.row_id(TileId::from_u32(t)).unwrap_or(u32::MAX));
        }
    }
    out
}

/// A cursor over the file's words.
struct Words<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Words<'_> {
    fn next(&mut self, what: &'static str) -> Result<u32, RowsError> {
        let b = self
            .bytes
            .get(self.at..self.at + 4)
            .ok_or(RowsError::Truncated { at: self.at, what })?;
        self.at += 4;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Words left in the file.
    fn left(&self) -> usize {
        (self.bytes.len() - self.at.min(self.bytes.len())) / 4
    }
}

/// Decodes [`encode_rows`].
pub fn decode_rows(bytes: &[u8]) -> Result<Vec<EncodedRows>, RowsError> {
    if bytes.get(..8) != Some(MAGIC.as_slice()) {
        return Err(RowsError::Magic);
    }
    let mut w = Words { bytes, at: 8 };
    let phases = w.next("the phase count")?;
    // Each phase takes at least two words: a count larger than the file
    // allows is truncation, found before anything is reserved.
    let mut out = Vec::with_capacity((phases as usize).min(w.left() / 2));
    for phase in 0..phases as usize {
        let tiles = w.next("a tile count")?;
        let unique = w.next("a row count")?;
        let mut rows = Vec::with_capacity((unique as usize).min(w.left()));
        for row in 0..unique {
            let len = w.next("a row length")?;
            if len > MAX_ROW_WORDS {
                return Err(RowsError::RowTooLong {
                    phase,
                    row,
                    words: len,
                });
            }
            let mut words = Vec::with_capacity((len as usize).min(w.left()));
            for _ in 0..len {
                words.push(w.next("a row word")?);
            }
            rows.push(words);
        }
        let mut tile_row = Vec::with_capacity((tiles as usize).min(w.left()));
        for t in 0..tiles {
            let index = w.next("a tile's row index")?;
            if index >= unique {
                return Err(RowsError::RowIndex {
                    phase,
                    tile: TileId::from_u32(t),
                    index,
                    rows: unique,
                });
            }
            tile_row.push(index);
        }
        // Every index was checked against the row count.
        let decoded = EncodedRows::from_shared(rows, tile_row).ok_or(RowsError::RowIndex {
            phase,
            tile: TileId::from_u32(0),
            index: u32::MAX,
            rows: unique,
        })?;
        out.push(decoded);
    }
    if w.at != bytes.len() {
        return Err(RowsError::Trailing {
            extra: bytes.len() - w.at,
        });
    }
    Ok(out)
}
