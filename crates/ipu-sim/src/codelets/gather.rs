//! The gather codelet: table rows picked by F32 row numbers, each shard
//! of the table serving the rows it holds.

use ipu_layout::Precision;
use ipu_package::program::Operand;

use super::CodeletMemory;
use super::io::{Args, check_values, read_values, write_values};
use crate::SimError;

/// The arguments of [`Codelet::Gather`].
pub(super) struct GatherArgs {
    pub(super) table: Operand,
    pub(super) indices: Operand,
    pub(super) output: Operand,
    pub(super) rows: u32,
    pub(super) table_rows: u32,
    pub(super) first_row: u32,
    pub(super) total_rows: u32,
    pub(super) cols: u32,
}

/// Runs a gather (see [`Codelet::Gather`]): every index must be a whole
/// number below `total_rows` (else [`SimError::GatherIndex`]); returns the
/// output rows written.
pub(super) fn gather(
    m: &mut impl CodeletMemory,
    args: &Args,
    g: GatherArgs,
) -> Result<u64, SimError> {
    let (rows, cols) = (u64::from(g.rows), u64::from(g.cols));
    if m.precision(args.tile, g.indices.buffer)? != Precision::F32 {
        return Err(args.fail("indices precision (F32 row numbers)"));
    }
    let shard_end = u64::from(g.first_row) + u64::from(g.table_rows);
    if shard_end > u64::from(g.total_rows) {
        return Err(args.fail("table rows (past the table's end)"));
    }
    let n = args.mul("element count", rows, cols)?;
    check_values(m, args, g.output, n)?;
    check_values(
        m,
        args,
        g.table,
        args.mul("table elements", u64::from(g.table_rows), cols)?,
    )?;
    let index = read_values(m, args, g.indices, rows)?;
    let table = read_values(
        m,
        args,
        g.table,
        args.mul("table elements", u64::from(g.table_rows), cols)?,
    )?;
    let c = args.usize("columns", cols)?;
    let mut out = vec![0.0f32; args.usize("element count", n)?];
    for (r, &x) in index.iter().enumerate() {
        // A row number is a whole number in range; anything else (a
        // fraction, a negative, NaN, a row past the table) faults.
        let whole = x >= 0.0 && x.fract() == 0.0 && f64::from(x) < f64::from(g.total_rows);
        if !whole {
            return Err(SimError::GatherIndex {
                tile: args.tile,
                position: r as u64,
                value: x,
                rows: g.total_rows,
            });
        }
        let row = x as u64;
        if (u64::from(g.first_row)..shard_end).contains(&row) {
            let local = (row - u64::from(g.first_row)) as usize;
            let source = table.get(local * c..(local + 1) * c).unwrap_or(&[]);
            if let Some(dest) = out.get_mut(r * c..(r + 1) * c) {
                dest.copy_from_slice(source);
            }
        }
    }
    write_values(m, args, g.output, &out)?;
    Ok(index.len() as u64)
}
