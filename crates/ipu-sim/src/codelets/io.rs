//! Codelet operands in tile memory: checked argument arithmetic, and
//! values and strided rows read and written through [`CodeletMemory`] in
//! the buffers' precisions, every extent checked before anything is
//! allocated for it.

use ipu_layout::TileId;
use ipu_package::program::Operand;

use super::CodeletMemory;
use crate::SimError;

/// Checked arithmetic on codelet arguments, failing with the codelet and
/// the argument named.
pub(super) struct Args {
    pub(super) tile: TileId,
    pub(super) codelet: &'static str,
}

impl Args {
    pub(super) fn fail(&self, what: &'static str) -> SimError {
        SimError::Argument {
            tile: self.tile,
            codelet: self.codelet,
            what,
        }
    }

    pub(super) fn mul(&self, what: &'static str, a: u64, b: u64) -> Result<u64, SimError> {
        a.checked_mul(b).ok_or_else(|| self.fail(what))
    }

    pub(super) fn add(&self, what: &'static str, a: u64, b: u64) -> Result<u64, SimError> {
        a.checked_add(b).ok_or_else(|| self.fail(what))
    }

    pub(super) fn usize(&self, what: &'static str, a: u64) -> Result<usize, SimError> {
        usize::try_from(a).map_err(|_| self.fail(what))
    }

    /// The operand `elements` elements of 4 bytes further on.
    /// `at` moved on by `elements` elements of `element_bytes` each.
    pub(super) fn shift(
        &self,
        at: Operand,
        elements: u64,
        element_bytes: u64,
    ) -> Result<Operand, SimError> {
        let offset = self.add(
            "block offset",
            u64::from(at.offset),
            self.mul("block offset", elements, element_bytes)?,
        )?;
        let offset = u32::try_from(offset).map_err(|_| self.fail("block offset"))?;
        Ok(Operand {
            buffer: at.buffer,
            offset,
        })
    }

    /// Elements spanned by `rows` rows of `cols` elements, `stride` apart,
    /// which must not overlap.
    pub(super) fn span(&self, rows: u64, cols: u64, stride: u64) -> Result<u64, SimError> {
        if rows > 1 && stride < cols {
            return Err(self.fail("row stride (rows overlap)"));
        }
        if rows == 0 {
            return Ok(0);
        }
        self.add("row span", self.mul("row span", rows - 1, stride)?, cols)
    }
}

pub(super) fn read_values(
    m: &impl CodeletMemory,
    args: &Args,
    at: Operand,
    count: u64,
) -> Result<Vec<f32>, SimError> {
    let p = m.precision(args.tile, at.buffer)?;
    let eb = p.element_bytes();
    let bytes = m.read(args.tile, at, args.mul("element count", count, eb)?)?;
    // The slice codec decodes as `decode_from` does, a vector at a time.
    let mut values = vec![0f32; bytes.len() / (eb as usize).max(1)];
    p.codec()
        .decode_slice(&bytes[..values.len() * eb as usize], &mut values);
    Ok(values)
}

/// Checks that `count` elements fit at the operand before anything is
/// allocated for them.
pub(super) fn check_values(
    m: &impl CodeletMemory,
    args: &Args,
    at: Operand,
    count: u64,
) -> Result<(), SimError> {
    let eb = m.precision(args.tile, at.buffer)?.element_bytes();
    m.extent(args.tile, at, args.mul("element count", count, eb)?)
}

pub(super) fn write_values(
    m: &mut impl CodeletMemory,
    args: &Args,
    at: Operand,
    values: &[f32],
) -> Result<(), SimError> {
    let p = m.precision(args.tile, at.buffer)?;
    let eb = p.element_bytes() as usize;
    let mut bytes = vec![0u8; values.len() * eb];
    // The slice codec encodes as `encode_into` does, a vector at a time.
    p.codec().encode_slice(values, &mut bytes);
    m.write(args.tile, at, &bytes)
}

/// Reads `rows` rows of `cols` elements, rows `stride` elements apart.
pub(super) fn read_rows(
    m: &impl CodeletMemory,
    args: &Args,
    at: Operand,
    rows: u64,
    cols: u64,
    stride: u64,
) -> Result<Vec<f32>, SimError> {
    let span = args.span(rows, cols, stride)?;
    if rows == 0 {
        return Ok(Vec::new());
    }
    let all = read_values(m, args, at, span)?;
    // Rows do not overlap, so `rows × cols ≤ span` elements were read.
    let (cols, stride) = (
        args.usize("columns", cols)?,
        args.usize("row stride", stride)?,
    );
    let mut out = Vec::with_capacity(all.len());
    for r in 0..args.usize("rows", rows)? {
        let start = r * stride;
        out.extend_from_slice(all.get(start..start + cols).unwrap_or(&[]));
    }
    Ok(out)
}

/// Checks the extent of `rows` strided rows before they are computed.
pub(super) fn check_rows(
    m: &impl CodeletMemory,
    args: &Args,
    at: Operand,
    rows: u64,
    cols: u64,
    stride: u64,
) -> Result<(), SimError> {
    let span = args.span(rows, cols, stride)?;
    check_values(m, args, at, span)
}

/// Writes rows into a strided destination, leaving the gaps as they are.
pub(super) fn write_rows(
    m: &mut impl CodeletMemory,
    args: &Args,
    at: Operand,
    values: &[f32],
    cols: u64,
    stride: u64,
) -> Result<(), SimError> {
    let eb = m.precision(args.tile, at.buffer)?.element_bytes();
    let row_bytes = args.mul("row offset", stride, eb)?;
    for (r, row) in values
        .chunks(args.usize("columns", cols.max(1))?)
        .enumerate()
    {
        let offset = args.add(
            "row offset",
            u64::from(at.offset),
            args.mul("row offset", r as u64, row_bytes)?,
        )?;
        let offset = u32::try_from(offset).map_err(|_| args.fail("row offset"))?;
        write_values(
            m,
            args,
            Operand {
                buffer: at.buffer,
                offset,
            },
            row,
        )?;
    }
    Ok(())
}
