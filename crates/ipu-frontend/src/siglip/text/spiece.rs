//! The parts of a SentencePiece model file (`spiece.model`, the
//! `ModelProto` protocol buffer) that encoding needs: every piece with its
//! score and type, the trainer's model type, unknown id and byte
//! fallback, and the normaliser's precompiled character map and
//! whitespace flags.
//!
//! Protocol buffers are read field by field: a key varint (field number
//! · 8 + wire type), then a varint, a fixed 32- or 64-bit value, or a
//! length and that many bytes; fields this reader does not need are
//! skipped, and absent ones take the defaults `sentencepiece_model.proto`
//! gives. Every length is checked against the bytes left, so a damaged
//! file is an error, never a panic or a large allocation.

/// A piece's type (`SentencePiece.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PieceType {
    /// A normal piece (1, the default).
    Normal,
    /// The unknown piece (2).
    Unknown,
    /// A control symbol such as `</s>` (3).
    Control,
    /// A user-defined symbol (4).
    UserDefined,
    /// An unused piece (5).
    Unused,
    /// A byte piece `<0xAB>` (6).
    Byte,
}

/// One vocabulary entry.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Piece {
    pub piece: String,
    pub score: f32,
    pub kind: PieceType,
}

/// What encoding needs of a SentencePiece model.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SpModel {
    pub pieces: Vec<Piece>,
    /// `TrainerSpec.model_type`: 1 Unigram (the default), 2 BPE, 3 word,
    /// 4 char.
    pub model_type: u64,
    pub unk_id: u64,
    pub byte_fallback: bool,
    pub precompiled_charsmap: Vec<u8>,
    pub add_dummy_prefix: bool,
    pub remove_extra_whitespaces: bool,
    pub escape_whitespaces: bool,
}

/// Why the bytes are not a SentencePiece model.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpieceError {
    /// The bytes end inside a field.
    #[error(
        "it ends inside a field at byte {at}; the file is cut short or is not a SentencePiece model"
    )]
    Truncated {
        /// Where the field started.
        at: usize,
    },
    /// A field has a wire type protocol buffers do not have.
    #[error("byte {at} starts a field of wire type {wire}, which protocol buffers do not have")]
    WireType {
        /// Where.
        at: usize,
        /// The wire type.
        wire: u64,
    },
    /// A string field is not UTF-8.
    #[error("piece {index} is not UTF-8 text")]
    Utf8 {
        /// The piece's index.
        index: usize,
    },
    /// The model has no pieces.
    #[error("it has no pieces")]
    Empty,
}

/// A cursor over protocol-buffer bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// One field's value.
enum Value<'a> {
    Varint(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
    Other,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    fn varint(&mut self) -> Result<u64, SpieceError> {
        let start = self.at;
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .bytes
                .get(self.at)
                .ok_or(SpieceError::Truncated { at: start })?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(SpieceError::Truncated { at: start })
    }

    fn take(&mut self, n: u64, start: usize) -> Result<&'a [u8], SpieceError> {
        let n = usize::try_from(n).map_err(|_| SpieceError::Truncated { at: start })?;
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(SpieceError::Truncated { at: start })?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    /// The next field, or `None` at the end.
    fn field(&mut self) -> Result<Option<(u64, Value<'a>)>, SpieceError> {
        if self.at >= self.bytes.len() {
            return Ok(None);
        }
        let start = self.at;
        let key = self.varint()?;
        // A field cut short is reported where it starts.
        let cut = |_| SpieceError::Truncated { at: start };
        let value = match key & 7 {
            0 => Value::Varint(self.varint().map_err(cut)?),
            1 => {
                self.take(8, start)?;
                Value::Other
            }
            2 => {
                let len = self.varint().map_err(cut)?;
                Value::Bytes(self.take(len, start)?)
            }
            5 => {
                let b = self.take(4, start)?;
                Value::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            wire => return Err(SpieceError::WireType { at: start, wire }),
        };
        Ok(Some((key >> 3, value)))
    }
}

fn piece(bytes: &[u8], index: usize) -> Result<Piece, SpieceError> {
    let mut r = Reader::new(bytes);
    let mut out = Piece {
        piece: String::new(),
        score: 0.0,
        kind: PieceType::Normal,
    };
    while let Some((field, value)) = r.field()? {
        match (field, value) {
            (1, Value::Bytes(b)) => {
                out.piece = std::str::from_utf8(b)
                    .map_err(|_| SpieceError::Utf8 { index })?
                    .to_owned();
            }
            (2, Value::Fixed32(bits)) => out.score = f32::from_bits(bits),
            (3, Value::Varint(t)) => {
                out.kind = match t {
                    2 => PieceType::Unknown,
                    3 => PieceType::Control,
                    4 => PieceType::UserDefined,
                    5 => PieceType::Unused,
                    6 => PieceType::Byte,
                    _ => PieceType::Normal,
                };
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Reads a `spiece.model` file's bytes.
pub(crate) fn parse(bytes: &[u8]) -> Result<SpModel, SpieceError> {
    let mut model = SpModel {
        pieces: Vec::new(),
        model_type: 1,
        unk_id: 0,
        byte_fallback: false,
        precompiled_charsmap: Vec::new(),
        add_dummy_prefix: true,
        remove_extra_whitespaces: true,
        escape_whitespaces: true,
    };
    let mut r = Reader::new(bytes);
    while let Some((field, value)) = r.field()? {
        match (field, value) {
            (1, Value::Bytes(b)) => {
                let index = model.pieces.len();
                model.pieces.push(piece(b, index)?);
            }
            (2, Value::Bytes(b)) => {
                let mut t = Reader::new(b);
                while let Some((f, v)) = t.field()? {
                    match (f, v) {
                        (3, Value::Varint(x)) => model.model_type = x,
                        (35, Value::Varint(x)) => model.byte_fallback = x != 0,
                        (40, Value::Varint(x)) => model.unk_id = x,
                        _ => {}
                    }
                }
            }
            (3, Value::Bytes(b)) => {
                let mut n = Reader::new(b);
                while let Some((f, v)) = n.field()? {
                    match (f, v) {
                        (2, Value::Bytes(map)) => model.precompiled_charsmap = map.to_vec(),
                        (3, Value::Varint(x)) => model.add_dummy_prefix = x != 0,
                        (4, Value::Varint(x)) => model.remove_extra_whitespaces = x != 0,
                        (5, Value::Varint(x)) => model.escape_whitespaces = x != 0,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if model.pieces.is_empty() {
        return Err(SpieceError::Empty);
    }
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field key and a length-delimited value.
    fn bytes_field(field: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![field << 3 | 2, value.len() as u8];
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn reads_pieces_and_specs_and_refuses_cut_files() {
        let mut p = bytes_field(1, "▁a".as_bytes());
        p.push(2 << 3 | 5);
        p.extend_from_slice(&(-1.5f32).to_le_bytes());
        let mut unk = bytes_field(1, b"<unk>");
        unk.extend_from_slice(&[3 << 3, 2]);
        let mut file = bytes_field(1, &unk);
        file.extend(bytes_field(1, &p));
        // TrainerSpec: unk_id 0 (field 40, a two-byte key).
        file.extend(bytes_field(2, &[0xc0, 0x02, 0]));
        // NormalizerSpec: add_dummy_prefix false.
        file.extend(bytes_field(3, &[3 << 3, 0]));
        let m = parse(&file).unwrap();
        assert_eq!(m.pieces.len(), 2);
        assert_eq!(m.pieces[0].kind, PieceType::Unknown);
        assert_eq!(
            (m.pieces[1].piece.as_str(), m.pieces[1].score),
            ("▁a", -1.5)
        );
        assert_eq!((m.unk_id, m.model_type, m.add_dummy_prefix), (0, 1, false));
        // A cut inside a field is refused; a cut between fields reads the
        // fields before it; no cut panics.
        let boundaries = [unk.len() + 2, unk.len() + p.len() + 4];
        for cut in 1..file.len() {
            let read = parse(&file[..cut]);
            if cut < boundaries[0] {
                assert!(
                    matches!(read, Err(SpieceError::Truncated { at: 0 })),
                    "{cut}"
                );
            }
            if boundaries.contains(&cut) {
                assert!(read.is_ok(), "{cut}");
            }
        }
        assert_eq!(parse(&[]), Err(SpieceError::Empty));
        assert!(matches!(
            parse(&[0x0f]),
            Err(SpieceError::WireType { wire: 7, .. })
        ));
    }
}
