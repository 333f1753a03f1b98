//! Stores of partials kept as values until something needs their bytes.
//!
//! A worker stores its partials at the end of each pass and, in the next
//! pass over the same output block, loads them again. Partials are in the
//! output precision, so the load gives back exactly the values stored
//! (NaN as the precision's canonical NaN, which is what a store writes).
//! The machine therefore keeps a stored block as its values, checked
//! against the image when stored, and a load of the very same block
//! (same rows, columns and runs) takes them without encoding and decoding.
//!
//! The image still ends with every store written, in an order that gives
//! the same bytes: a pending block is written before any store that
//! overlaps it, before a load of any other block, when the run ends
//! (however it ends) and when too many are pending; pending blocks never
//! overlap each other, so the order among them does not matter. A store
//! of the same block as a pending one overwrites all of its bytes, so the
//! older values are dropped unwritten. Nothing else in a run reads or
//! writes the output (the operands may not overlap it).

use std::ops::Range;

use super::Machine;
use crate::error::{EmulateError, OpSite, Operand};
use crate::program::Run;

/// The most blocks kept pending; past it the oldest is written.
const LIMIT: usize = 64;

/// A stored block not yet written to the image.
pub(super) struct Pending {
    /// The store that made it, to write it with.
    site: OpSite,
    rows: u32,
    columns: u32,
    runs: Vec<Run>,
    /// The image ranges it writes, sorted by start.
    ranges: Vec<Range<usize>>,
    /// The first byte of `ranges` and one past the last.
    extent: Range<usize>,
    /// The partials, `rows × columns`, row major.
    values: Vec<f64>,
}

impl Pending {
    fn is_block(&self, rows: u32, columns: u32, runs: &[Run]) -> bool {
        self.rows == rows && self.columns == columns && self.runs == runs
    }

    /// Whether any byte of `self` is in `ranges` (sorted by start), which
    /// lie within `extent`.
    fn overlaps(&self, ranges: &[Range<usize>], extent: &Range<usize>) -> bool {
        // Blocks of other rows are apart as a whole: the common case.
        if self.extent.end <= extent.start || extent.end <= self.extent.start {
            return false;
        }
        let (mut a, mut b) = (self.ranges.iter().peekable(), ranges.iter().peekable());
        while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
            if x.start < y.end && y.start < x.end && !x.is_empty() && !y.is_empty() {
                return true;
            }
            if x.end <= y.end {
                a.next();
            } else {
                b.next();
            }
        }
        false
    }
}

impl Machine<'_> {
    /// A store of `values` (`rows × columns` partials) through `runs`:
    /// checked against the image now, written when needed.
    pub(super) fn store_partials(
        &mut self,
        site: OpSite,
        runs: &[Run],
        rows: u32,
        columns: u32,
        values: Vec<f64>,
    ) -> Result<(), EmulateError> {
        let output = self.header.output;
        Self::run_elements(site, runs, rows, columns, output.element_bytes())?;
        // Each run holds at least one of the `columns` elements, and the
        // partial state `rows × columns` passed the block-size check, so
        // this is at most the elements of an operand.
        let mut ranges = Vec::with_capacity(runs.len().saturating_mul(rows as usize));
        for r in runs {
            for i in 0..rows {
                match self.locate(site, Operand::Output, r, i) {
                    Ok(range) => ranges.push(range),
                    Err(_) => {
                        // The store writes its rows up to the bad one, after
                        // every earlier store, and fails there.
                        self.flush_all()?;
                        return self.scatter(site, runs, rows, columns, output, &values);
                    }
                }
            }
        }
        ranges.sort_unstable_by_key(|r| r.start);
        let extent = extent(&ranges);
        self.pending.retain(|p| !p.is_block(rows, columns, runs));
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].overlaps(&ranges, &extent) {
                let p = self.pending.remove(i);
                self.write_pending(p)?;
            } else {
                i += 1;
            }
        }
        if self.pending.len() >= LIMIT {
            let oldest = self.pending.remove(0);
            self.write_pending(oldest)?;
        }
        self.pending.push(Pending {
            site,
            rows,
            columns,
            runs: runs.to_vec(),
            ranges,
            extent,
            values,
        });
        Ok(())
    }

    /// The values a load of the block `rows × columns` through `runs`
    /// reads, when that block is pending.
    pub(super) fn pending_values(&self, rows: u32, columns: u32, runs: &[Run]) -> Option<Vec<f64>> {
        let p = self
            .pending
            .iter()
            .find(|p| p.is_block(rows, columns, runs))?;
        let mut values = p.values.clone();
        if values.iter().any(|v| v.is_nan()) {
            let nan = self.canonical_nan();
            for v in values.iter_mut().filter(|v| v.is_nan()) {
                *v = nan;
            }
        }
        Some(values)
    }

    /// Writes every pending block.
    pub(super) fn flush_all(&mut self) -> Result<(), EmulateError> {
        for p in std::mem::take(&mut self.pending) {
            self.write_pending(p)?;
        }
        Ok(())
    }

    fn write_pending(&mut self, p: Pending) -> Result<(), EmulateError> {
        let output = self.header.output;
        self.scatter(p.site, &p.runs, p.rows, p.columns, output, &p.values)
    }

    /// What a stored NaN partial reads back as: the canonical NaN encoded
    /// in the output precision, decoded.
    fn canonical_nan(&self) -> f64 {
        let output = self.header.output;
        let mut bytes = vec![0u8; output.element_bytes() as usize];
        output.codec().encode_slice(&[f32::NAN], &mut bytes);
        self.tables
            .output
            .decode(&bytes)
            .first()
            .copied()
            .unwrap_or(f64::NAN)
    }
}

/// The first byte of `ranges` and one past the last (empty for none).
fn extent(ranges: &[Range<usize>]) -> Range<usize> {
    let start = ranges.iter().map(|r| r.start).min().unwrap_or(0);
    let end = ranges.iter().map(|r| r.end).max().unwrap_or(0);
    start..end.max(start)
}
