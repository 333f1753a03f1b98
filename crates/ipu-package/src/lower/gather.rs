//! Lowering of gathers (token embeddings): the table rests cut into row
//! parts × column blocks, every tile picks the rows of its part for every
//! index, and the row parts' results are summed.
//!
//! The indices are known only when the program runs, so no exchange can
//! fetch the rows they name: exchanges are scheduled when the package is
//! built. Instead every tile of the table holds every index (a few bytes
//! each) and writes, for each, its part's row or zeros; exactly one row
//! part holds a given row, so the sum of the parts' results is the row,
//! exactly (a sum with zeros rounds nothing). The sum is a split-K reduce
//! like a GEMM's: the parts' results are exchanged into the output's
//! layout and added there.
//!
//! ```text
//! table [V, d]: tile (i, j) holds rows part i × columns block j
//! indices [..]: whole on every table tile
//! Gather:  partial [pv, .., d]  (tile (i, j): part i's rows or zeros, block j)
//! exchange: gathered [pv, .., d] in the output's layout (every part of a block)
//! Reduce:  output [.., d] = Σ_i gathered[i]
//! ```
//!
//! The column block is the narrowest whole number of words of both the
//! table and the output precision (4 FP8, 2 F16 or 1 F32 elements), so that
//! as many row parts as possible share the table's rows: the table's bytes
//! per tile are `V·d / tiles` whatever the split, while the picking work
//! and the reduce of every tile grow with the block. With one row part
//! (more blocks than tiles), the picked rows are the output and no reduce
//! is needed.
//!
//! A table of higher rank (`[batch, tokens, d]`, CLIP's pooled row) is
//! split on its first axis only: each part holds whole `[tokens, d]`
//! blocks, which row-major are `tokens` consecutive rows, so the codelet
//! sees rows as for a `[rows, d]` table.

use super::*;

/// Rows parts and columns of a gather's table split: `(row parts, column
/// blocks, elements per block)`; `fp8_reader` when an FP8 cast reads the
/// output in its layout, whose blocks must then be whole words of FP8 too.
fn gather_grid(
    rows: u64,
    columns: u64,
    (table, output): (Precision, Precision),
    fp8_reader: bool,
    tiles: u32,
) -> (u64, u64, u64) {
    let tiles = u64::from(tiles.max(1));
    // Elements that make whole 32-bit words in every precision involved.
    let narrowest = if fp8_reader {
        1
    } else {
        table.element_bytes().min(output.element_bytes()).max(1)
    };
    let word = (4 / narrowest).max(1);
    let mut block = word;
    if columns.div_ceil(block) > tiles {
        block = columns.div_ceil(tiles).next_multiple_of(word);
    }
    let blocks = columns.div_ceil(block).max(1);
    let parts = (tiles / blocks).clamp(1, rows.max(1));
    (parts, blocks, block)
}

impl Lowerer<'_> {
    pub(super) fn lower_gather(
        &mut self,
        op: OpId,
        table: TensorId,
        indices: TensorId,
        output: TensorId,
    ) -> Result<(), LowerError> {
        let g = self.graph;
        let (tt, ti, tout) = (g.tensor(table), g.tensor(indices), g.tensor(output));
        // Rows per index of the first axis (1 for a `[rows, d]` table):
        // the split is on the first axis only.
        let Some((rows, columns)) = crate::graph::gather_table_rows(tt.extents()) else {
            return Err(
                self.unsupported(op, "bug in the lowering: a gather table of rank < 2".into())
            );
        };
        let first_axis = tt.extents()[0];
        let per_first = rows / first_axis.max(1);
        // CLIP's pooled row is cast to FP8 where the gather left it.
        let fp8_reader = g
            .ops()
            .values()
            .iter()
            .any(|o| matches!(o, Op::CastFp8 { input, .. } if *input == output));
        let (pv, ph, block) = gather_grid(
            first_axis,
            columns,
            (tt.precision(), tout.precision()),
            fp8_reader,
            self.config.tiles,
        );
        tracing::debug!(op = %op, output = tout.name(), row_parts = pv, column_blocks = ph, block, "planned gather");
        let tiles = u32_arg("gather tiles", pv * ph)?;
        let rotation = if self.config.rotate {
            (spread(op.as_u32()) % u64::from(tiles)) as u32
        } else {
            0
        };
        let rank = tout.extents().len();
        let columns_axis = |partitions: u64| {
            AxisTiling::new(Axis::FromEnd(1), partitions as u32)
                .with_block(block as u32)
                .with_stride(1)
        };
        let tiling = |count: u64, axes: Vec<AxisTiling>| {
            TensorTiling::new(count as u32, 1, axes)
                .and_then(|t| t.with_rotation(rotation % count as u32))
        };
        let row_major = |extents: &[u64], p: Precision, t: TensorTiling| row_major(extents, p, t);

        // The table in row parts × column blocks: tile `t` holds block
        // `t % ph` of row part `t / ph`.
        let table_tiling = self.layout(
            format!("table of {op}"),
            tiling(
                pv * ph,
                vec![
                    columns_axis(ph),
                    AxisTiling::new(Axis::FromStart(0), pv as u32).with_stride(ph as u32),
                ],
            ),
        )?;
        let table_ty = self.layout(
            format!("table of {op}"),
            row_major(tt.extents(), tt.precision(), table_tiling.clone()),
        )?;
        let w = if tt.kind() == TensorKind::Weight {
            let resident = self.weight_home(table, table_ty.clone(), Attrs::default());
            if self.program.buffers[resident].ty == table_ty {
                resident
            } else {
                self.ensure(table, table_ty.clone(), Attrs::default())?
            }
        } else {
            self.ensure(table, table_ty.clone(), Attrs::default())?
        };
        let index_ty = self.layout(
            format!("indices of {op}"),
            replicated(ti.extents(), ti.precision(), tiles),
        )?;
        let x = self.ensure(indices, index_ty, Attrs::default())?;

        // Where the picked rows go: the output itself with one row part,
        // else one partial result per row part.
        let mut picked_shape = Vec::with_capacity(rank + 1);
        if pv > 1 {
            picked_shape.push(pv);
        }
        picked_shape.extend_from_slice(tout.extents());
        let picked_tiling = if pv > 1 {
            Ok(table_tiling.clone())
        } else {
            tiling(ph, vec![columns_axis(ph)])
        };
        let picked_ty = self.layout(
            format!("picked rows of {op}"),
            picked_tiling.and_then(|t| row_major(&picked_shape, tout.precision(), t)),
        )?;
        let picked = if pv > 1 {
            self.new_buffer_with(
                format!("{}.partial", tout.name()),
                picked_ty.clone(),
                BufferRole::Temporary,
                Attrs::default(),
            )
        } else {
            self.output(op, output, picked_ty.clone())?
        };
        let label = StepLabel::of(op, StepRole::Gather, tout.name());
        self.flush(&label);
        let mut calls = Vec::new();
        for s in table_ty.shards() {
            let (Some(r), Some(c)) = (s.axes.first(), s.axes.last()) else {
                continue;
            };
            let out = self.layout(format!("picked rows of {op}"), picked_ty.shard(s.tile))?;
            let out_cols = out.axes.last().map_or(0, |a| a.width);
            if out_cols != c.width {
                return Err(self.unsupported(
                    op,
                    format!(
                        "bug in the lowering: on {} the table's rows are {} wide but the picked rows {}",
                        s.tile, c.width, out_cols
                    ),
                ));
            }
            if c.is_empty() {
                continue;
            }
            calls.push((
                s.tile,
                Codelet::Gather {
                    table: w.into(),
                    indices: x.into(),
                    output: picked.into(),
                    rows: u32_arg("gather indices", ti.element_count())?,
                    table_rows: u32_arg("gather table rows", r.len().saturating_mul(per_first))?,
                    first_row: u32_arg("gather first row", r.start.saturating_mul(per_first))?,
                    total_rows: u32_arg("gather table rows", rows)?,
                    cols: u32_arg("gather columns", c.width)?,
                },
            ));
        }
        self.compute(label, calls);
        if pv == 1 {
            return Ok(());
        }

        // Sum the row parts' results where the output rests: its token
        // rows split over up to `pv` tiles per column block.
        let token_axis = if rank >= 2 {
            tout.extents()[rank - 2]
        } else {
            1
        };
        let row_parts = pv.min(token_axis).max(1);
        let mut axes = vec![columns_axis(ph)];
        if row_parts > 1 {
            axes.push(AxisTiling::new(Axis::FromEnd(2), row_parts as u32).with_stride(ph as u32));
        }
        let out_tiling = self.layout(format!("output of {op}"), tiling(row_parts * ph, axes))?;
        let out_ty = self.layout(
            format!("output of {op}"),
            row_major(tout.extents(), tout.precision(), out_tiling.clone()),
        )?;
        let gathered_ty = self.layout(
            format!("gathered rows of {op}"),
            row_major(&picked_shape, tout.precision(), out_tiling),
        )?;
        let gathered = self.copy_to_new(
            picked,
            SourceView::Whole,
            gathered_ty,
            format!("{}.gathered", tout.name()),
            Attrs::default(),
        );
        let y = self.output(op, output, out_ty.clone())?;
        let reduce = StepLabel::of(op, StepRole::Reduce, tout.name());
        self.flush(&reduce);
        let mut calls = Vec::new();
        for (tile, rows, cols) in shard_rows(&out_ty)? {
            calls.push((
                tile,
                Codelet::ReduceSum {
                    input: gathered.into(),
                    output: y.into(),
                    count: u32_arg("gather row parts", pv)?,
                    elements: u32_arg("elements", u64::from(rows) * u64::from(cols))?,
                },
            ));
        }
        self.compute(reduce, calls);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::gather_grid;
    use ipu_layout::{Fp8Format, Precision};

    const FP8: Precision = Precision::F8 {
        format: Fp8Format::F143,
        scale: 0,
    };

    #[test]
    fn grid_uses_word_blocks_and_spreads_rows() {
        // so400m's token table on a C600: 288 blocks of 4 columns, 5 row parts.
        let f32 = (Precision::F32, Precision::F32);
        assert_eq!(
            gather_grid(32000, 1152, (FP8, Precision::F16), false, 1472),
            (5, 288, 4)
        );
        // F32 output and table: one-column blocks; four when an FP8 cast
        // reads the output.
        assert_eq!(gather_grid(64, 16, f32, false, 16), (1, 16, 1));
        assert_eq!(gather_grid(64, 16, f32, true, 16), (4, 4, 4));
        // More blocks than tiles: wider blocks and one row part.
        assert_eq!(
            gather_grid(100, 64, (FP8, Precision::F16), false, 8),
            (1, 8, 8)
        );
        // Never more row parts than rows.
        assert_eq!(
            gather_grid(2, 4, (FP8, Precision::F16), false, 64),
            (2, 1, 4)
        );
    }
}
