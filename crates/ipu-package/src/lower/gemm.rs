//! Lowering of GEMMs: the plan's grid and layouts, the bias in the
//! output's column blocks, the per-tile kernel calls and the reduction of
//! split-K partial sums.

use super::*;

impl Lowerer<'_> {
    pub(super) fn lower_gemm(
        &mut self,
        op: OpId,
        left: TensorId,
        right: TensorId,
        bias: Option<TensorId>,
        output: TensorId,
    ) -> Result<(), LowerError> {
        let g = self.graph;
        let (tl, tr, tout) = (g.tensor(left), g.tensor(right), g.tensor(output));
        let problem = GemmProblem::of(tl, tr, tout, &self.config.cost);
        let budget = self.config.budget_for(op);
        let choose = |budget| {
            choose_gemm_grid(
                &problem,
                self.config.tiles,
                budget,
                bias.is_some(),
                &self.config.cost,
            )
        };
        let (mut chosen, mut steps) = choose(budget);
        if let Some(stretch) = self.config.stretch_budget_for(op) {
            let (grid, costs) = choose(stretch);
            let gain = steps.total().saturating_sub(costs.total());
            if gain.saturating_mul(100) >= steps.total().saturating_mul(STRETCH_GAIN_PERCENT) {
                tracing::debug!(op = %op, output = tout.name(), budget = stretch, ?grid, "a GEMM takes the stretched budget");
                (chosen, steps) = (grid, costs);
            }
        }
        tracing::debug!(op = %op, output = tout.name(), grid = ?chosen, estimated_cycles = steps.total(), "planned GEMM grid");
        let mut layouts = self.layout(format!("GEMM {op}"), gemm_layouts(&problem, chosen))?;
        if self.config.rotate {
            layouts = self.layout(format!("GEMM {op}"), layouts.rotated(spread(op.as_u32())))?;
        }
        let x = self.ensure(left, layouts.left.clone(), gemm_left_attrs(&layouts.left))?;
        let resting = self.balanced_resting(right, &problem, chosen, &layouts.right_resident)?;
        let resident = self.weight_home(right, resting, GEMM_RIGHT);
        let w = if self.program.buffers[resident].ty == layouts.right {
            resident
        } else {
            self.ensure(right, layouts.right.clone(), GEMM_RIGHT)?
        };
        let label = StepLabel::of(op, StepRole::Gemm, tout.name());
        let kernels = self.gemm_calls(&layouts.left, &layouts.output, &problem, x, w)?;

        if chosen.pk == 1 {
            let y = self.output(op, output, layouts.output.clone())?;
            // The AMP kernel writes its output at 32-byte aligned addresses.
            let buffer = &mut self.program.buffers[y];
            buffer.alignment = buffer.alignment.max(32);
            let bias_buffer = match bias {
                Some(b) => Some(self.gemm_bias(op, b, &layouts.output, chosen)?),
                None => None,
            };
            self.flush(&label);
            let mut calls = kernels(y);
            if let Some(bb) = bias_buffer {
                for (tile, rows, cols) in shard_rows(&layouts.output)? {
                    calls.push((
                        tile,
                        Codelet::Add {
                            a: y.into(),
                            b: bb.into(),
                            out: y.into(),
                            rows,
                            cols,
                            broadcast_rows: true,
                        },
                    ));
                }
            }
            self.compute(label, calls);
            return Ok(());
        }

        // Partial sums, reduced where each tile holds whole rows.
        let partial = self.new_buffer_with(
            format!("{}.partial", tout.name()),
            layouts.output.clone(),
            BufferRole::Temporary,
            Attrs {
                padding_read: None,
                tail_bytes: 0,
                alignment: 32,
            },
        );
        self.flush(&label);
        let calls = kernels(partial);
        self.compute(label, calls);
        // Reduce in the grid's own blocks where the rows allow it (few,
        // large fragments), else on an element layout. The reduction is
        // rotated like the GEMM so that it lands on the partials' tiles.
        let in_grid = self.layout(
            format!("output of {op}"),
            reduce_layout(&problem, chosen, tout.precision()),
        )?;
        let out_ty = match in_grid {
            Some(ty) if self.config.rotate => self.layout(
                format!("output of {op}"),
                crate::plan::rotated(&ty, spread(op.as_u32())),
            )?,
            Some(ty) => ty,
            None => self.layout(
                format!("output of {op}"),
                element_layout(tout.extents(), tout.precision(), self.config.tiles),
            )?,
        };
        let mut pr_shape = vec![u64::from(chosen.pk)];
        pr_shape.extend_from_slice(tout.extents());
        let pr_ty = self.layout(
            format!("partials of {op}"),
            tensor_type(
                &pr_shape,
                problem.output,
                ElementOrder::RowMajor,
                MemoryClass::Ipu21Standard,
                out_ty.tiling().clone(),
            ),
        )?;
        let gathered = self.copy_to_new(
            partial,
            SourceView::Whole,
            pr_ty,
            format!("{}.gathered", tout.name()),
            Attrs::default(),
        );
        let bias_buffer = match bias {
            Some(b) => Some(self.column_bias(op, b, &out_ty)?),
            None => None,
        };
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
                    count: chosen.pk,
                    elements: u32_arg("elements", u64::from(rows) * u64::from(cols))?,
                },
            ));
            if let Some(bb) = bias_buffer {
                calls.push((
                    tile,
                    Codelet::Add {
                        a: y.into(),
                        b: bb.into(),
                        out: y.into(),
                        rows,
                        cols,
                        broadcast_rows: true,
                    },
                ));
            }
        }
        self.compute(reduce, calls);
        Ok(())
    }

    /// The GEMM bias `[N]` on the output's tiles: column block `t % pn`.
    pub(super) fn gemm_bias(
        &mut self,
        op: OpId,
        bias: TensorId,
        output: &TensorType,
        grid: GemmGrid,
    ) -> Result<BufferId, LowerError> {
        // An untiled last axis is not padded, and neither is its bias.
        let block = column_tiling(output).map_or(1, |a| a.block_size);
        self.bias_in_blocks(op, bias, output, grid.pn, block)
    }

    /// A bias `[N]` for an element layout: column block `t % parts`.
    pub(super) fn column_bias(
        &mut self,
        op: OpId,
        bias: TensorId,
        output: &TensorType,
    ) -> Result<BufferId, LowerError> {
        let block = column_tiling(output).map_or(1, |a| a.block_size);
        self.bias_in_blocks(op, bias, output, column_parts(output), block)
    }

    /// `bias` split like the last axis of `output` (`parts` blocks of
    /// `block` columns, tile `t` holding block `t % parts` before the
    /// output's rotation, which it shares), so that each tile holds the bias
    /// of its output columns. Checked shard by shard: a mismatch would add
    /// the wrong bias silently.
    pub(super) fn bias_in_blocks(
        &mut self,
        op: OpId,
        bias: TensorId,
        output: &TensorType,
        parts: u32,
        block: u32,
    ) -> Result<BufferId, LowerError> {
        let t = self.graph.tensor(bias);
        let tiles = output.tiling().tile_count();
        let axes = vec![
            AxisTiling::new(Axis::FromStart(0), parts)
                .with_block(block)
                .with_stride(1),
        ];
        let ty = self.layout(
            format!("bias of {op}"),
            TensorTiling::new(tiles, tiles / parts, axes)
                .and_then(|tiling| tiling.with_rotation(output.tiling().rotation()))
                .and_then(|tiling| {
                    tensor_type(
                        t.extents(),
                        t.precision(),
                        ElementOrder::RowMajor,
                        MemoryClass::Ipu21Standard,
                        tiling,
                    )
                }),
        )?;
        for (o, b) in output.shards().zip(ty.shards()) {
            let (Some(oc), Some(bc)) = (o.axes.last(), b.axes.last()) else {
                continue;
            };
            if o.tile != b.tile
                || (o.data_elements() > 0
                    && (oc.start, oc.end, oc.width) != (bc.start, bc.end, bc.width))
            {
                return Err(self.unsupported(
                    op,
                    format!(
                        "bug in the lowering: the bias shard on {} holds columns {}..{} but the output's are {}..{}",
                        b.tile, bc.start, bc.end, oc.start, oc.end
                    ),
                ));
            }
        }
        self.ensure(bias, ty, Attrs::default())
    }

    /// Registers the GEMM kernels of every tile's shard and returns a
    /// function making the calls for an output buffer.
    pub(super) fn gemm_calls(
        &mut self,
        left: &TensorType,
        output: &TensorType,
        problem: &GemmProblem,
        x: BufferId,
        w: BufferId,
    ) -> Result<impl FnOnce(BufferId) -> Vec<(TileId, Codelet)> + use<>, LowerError> {
        // Per tile: rows, inner and columns of its shards.
        let mut shards = Vec::new();
        for (ls, os) in left.shards().zip(output.shards()) {
            let lw: Vec<u64> = ls.axes.iter().map(|a| a.width).collect();
            let (rows, inner) = rows_cols(&lw);
            let columns = os.axes.last().map(|a| a.width).unwrap_or(1);
            shards.push((ls.tile, rows, inner, columns, os.bytes));
        }
        let mut groups: HashMap<(u64, u64), (u64, u64)> = HashMap::new();
        for &(_, rows, inner, columns, _) in &shards {
            if rows * inner * columns == 0 {
                continue;
            }
            let e = groups.entry((inner, columns)).or_insert((rows, rows));
            e.0 = e.0.min(rows);
            e.1 = e.1.max(rows);
        }
        let mut kernel_of: HashMap<(u64, u64), (KernelId, u64)> = HashMap::new();
        let mut keys: Vec<_> = groups.into_iter().collect();
        keys.sort();
        for ((inner, columns), (small, large)) in keys {
            let spec = GemmKernel {
                inner: u32_arg("GEMM inner block", inner)?,
                columns: u32_arg("GEMM column block", columns)?,
                rows_small: u32_arg("GEMM rows", small)?,
                rows_large: u32_arg("GEMM rows", large)?,
                left: problem.left,
                left_order: left.order(),
                right: problem.right,
                output: problem.output,
                right_class: MemoryClass::Ipu21Interleaved,
            };
            let found = self
                .program
                .kernels
                .iter()
                .find(|(_, k)| **k == spec)
                .map(|(id, _)| id);
            let id = match found {
                Some(id) => id,
                None => self.program.kernels.push(spec),
            };
            kernel_of.insert((inner, columns), (id, large));
        }
        Ok(move |y: BufferId| {
            let mut calls = Vec::new();
            for (tile, rows, inner, columns, bytes) in shards {
                if rows * inner * columns == 0 {
                    if bytes > 0 {
                        // An empty inner block contributes zeros.
                        calls.push((
                            tile,
                            Codelet::Zero {
                                target: y.into(),
                                bytes: bytes as u32,
                                runs: 1,
                                stride: 0,
                            },
                        ));
                    }
                    continue;
                }
                let (kernel, large) = kernel_of[&(inner, columns)];
                calls.push((
                    tile,
                    Codelet::Gemm {
                        kernel,
                        entry: GemmEntry {
                            large: rows == large,
                            accumulate: false,
                        },
                        rows: rows as u32,
                        left: x.into(),
                        right: w.into(),
                        output: y.into(),
                    },
                ));
            }
            calls
        })
    }
}
