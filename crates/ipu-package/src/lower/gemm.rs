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
        let tout = g.tensor(output);
        let problem =
            super::fold::problem_of(g, &self.readers, op, [left, right, output], self.config);
        let budget = self.config.budget_for(op);
        let choose = |budget| {
            choose_gemm_plan(
                &problem,
                self.config.tiles,
                budget,
                bias.is_some(),
                &self.config.cost,
            )
        };
        let mut plan = choose(budget);
        if let Some(stretch) = self.config.stretch_budget_for(op) {
            let wide = choose(stretch);
            let (narrow_total, wide_total) = (plan.cycles.total(), wide.cycles.total());
            let gain = narrow_total.saturating_sub(wide_total);
            if gain.saturating_mul(100) >= narrow_total.saturating_mul(STRETCH_GAIN_PERCENT) {
                tracing::debug!(op = %op, output = tout.name(), budget = stretch, grid = ?wide.grid, "a GEMM takes the stretched budget");
                plan = wide;
            }
        }
        let chosen = plan.grid;
        tracing::debug!(op = %op, output = tout.name(), grid = ?chosen, windows = plan.windows.len(), estimated_cycles = plan.cycles.total(), "planned GEMM grid");
        if plan.windows.len() > 1 {
            return self.lower_gemm_windows(op, left, right, bias, output, &problem, &plan);
        }
        let layouts = self.gemm_layouts_of(op, &problem, chosen)?;
        let x = self.ensure(left, layouts.left.clone(), gemm_left_attrs(&layouts.left))?;
        let resting = self.balanced_resting(right, &problem, chosen, &layouts.right_resident)?;
        let resident = self.weight_home(right, resting, GEMM_RIGHT);
        let w = if self.program.buffers[resident].ty == layouts.right {
            resident
        } else {
            self.ensure(right, layouts.right.clone(), GEMM_RIGHT)?
        };
        let label = StepLabel::of(op, StepRole::Gemm, tout.name());
        let kernels = self.gemm_calls(&layouts.left, &layouts.output, &problem, x, w, false)?;

        if chosen.pk == 1 {
            let y = self.gemm_result(op, output, &layouts.output)?;
            let bias_buffer = match bias {
                Some(b) => Some(self.gemm_bias(op, b, &layouts.output, chosen)?),
                None => None,
            };
            self.flush(&label);
            let mut calls = kernels(y);
            if let Some(bb) = bias_buffer {
                calls.extend(bias_calls(y, bb, &layouts.output)?);
            }
            self.compute(label, calls);
            return Ok(());
        }

        let partial = self.gemm_partials(tout.name(), &layouts.output);
        self.flush(&label);
        let calls = kernels(partial);
        self.compute(label, calls);
        self.reduce_partials(op, &problem, chosen, partial, bias, output)
    }

    /// A split-K GEMM run in windows of its inner dimension
    /// ([`crate::plan::choose_gemm_plan`]): the weights rest whole; each
    /// window copies its columns of the left operand and its rows of the
    /// weights into the grid's layout and runs its kernels, the first
    /// writing the partial sums, the others adding to them; the reduction
    /// then sums them as for a GEMM run whole.
    /// A window's operands are live only for its exchange and kernel
    /// steps, so a tile holds one window's operands at a time.
    #[allow(clippy::too_many_arguments)]
    fn lower_gemm_windows(
        &mut self,
        op: OpId,
        left: TensorId,
        right: TensorId,
        bias: Option<TensorId>,
        output: TensorId,
        problem: &GemmProblem,
        plan: &GemmChoice,
    ) -> Result<(), LowerError> {
        let g = self.graph;
        let tout = g.tensor(output);
        let grid = plan.grid;
        if grid.pk == 1 {
            return Err(self.unsupported(
                op,
                "bug in the lowering: only split-K grids run in inner windows".into(),
            ));
        }
        let whole = self.gemm_layouts_of(op, problem, grid)?;
        let resting = self.balanced_resting(right, problem, grid, &whole.right_resident)?;
        let resident = self.weight_home(right, resting, GEMM_RIGHT);
        let (mut source, mut view) = self.materialised(left)?;
        let left_rank = g.tensor(left).extents().len();
        if window_view(&view, left_rank, 0).is_none() {
            // A view windows cannot compose with: materialise it first.
            source = self.view_in_rows(left, source, view, Some(op))?;
            view = SourceView::Whole;
        }
        let partial = self.gemm_partials(tout.name(), &whole.output);
        let label = StepLabel::of(op, StepRole::Gemm, tout.name());
        for (i, &(start, length)) in plan.windows.iter().enumerate() {
            let part = GemmProblem {
                inner: length,
                ..problem.clone()
            };
            let layouts = self.gemm_layouts_of(op, &part, grid)?;
            if layouts.output != whole.output {
                return Err(self.unsupported(
                    op,
                    "bug in the lowering: an inner window's result is laid out unlike the whole GEMM's".into(),
                ));
            }
            let Some(columns) = window_view(&view, left_rank, start) else {
                return Err(self.unsupported(
                    op,
                    "bug in the lowering: a materialised left operand has no inner window".into(),
                ));
            };
            let x = self.copy_to_new(
                source,
                columns,
                layouts.left.clone(),
                format!("{}@{}", g.tensor(left).name(), self.program.buffers.len()),
                gemm_left_attrs(&layouts.left),
            );
            let w = self.copy_to_new(
                resident,
                SourceView::Window(vec![start, 0]),
                layouts.right.clone(),
                format!("{}@{}", g.tensor(right).name(), self.program.buffers.len()),
                GEMM_RIGHT,
            );
            let kernels = self.gemm_calls(&layouts.left, &layouts.output, &part, x, w, i > 0)?;
            self.flush(&label);
            let calls = kernels(partial);
            self.compute(label.clone(), calls);
        }
        self.reduce_partials(op, problem, grid, partial, bias, output)
    }

    /// The grid's layouts of `problem`, rotated like every GEMM's.
    fn gemm_layouts_of(
        &self,
        op: OpId,
        problem: &GemmProblem,
        grid: GemmGrid,
    ) -> Result<GemmLayouts, LowerError> {
        let layouts = self.layout(format!("GEMM {op}"), gemm_layouts(problem, grid))?;
        if self.config.rotate {
            return self.layout(format!("GEMM {op}"), layouts.rotated(spread(op.as_u32())));
        }
        Ok(layouts)
    }

    /// The buffer a GEMM with `pk == 1` writes its result into.
    fn gemm_result(
        &mut self,
        op: OpId,
        output: TensorId,
        ty: &TensorType,
    ) -> Result<BufferId, LowerError> {
        let y = self.output(op, output, ty.clone())?;
        // The AMP kernel writes its output at 32-byte aligned addresses.
        let buffer = &mut self.program.buffers[y];
        buffer.alignment = buffer.alignment.max(32);
        Ok(y)
    }

    /// The buffer a split-K GEMM writes its partial sums into.
    fn gemm_partials(&mut self, name: &str, ty: &TensorType) -> BufferId {
        self.new_buffer_with(
            format!("{name}.partial"),
            ty.clone(),
            BufferRole::Temporary,
            Attrs {
                padding_read: None,
                tail_bytes: 0,
                alignment: 32,
            },
        )
    }

    /// Sums the `pk` partial sums of a split-K GEMM where each tile holds
    /// whole rows, adding the bias there.
    fn reduce_partials(
        &mut self,
        op: OpId,
        problem: &GemmProblem,
        chosen: GemmGrid,
        partial: BufferId,
        bias: Option<TensorId>,
        output: TensorId,
    ) -> Result<(), LowerError> {
        let tout = self.graph.tensor(output);
        // Reduce in the grid's own blocks where the rows allow it (few,
        // large fragments), else on an element layout. The reduction is
        // rotated like the GEMM so that it lands on the partials' tiles.
        let in_grid = self.layout(
            format!("output of {op}"),
            reduce_layout(problem, chosen, tout.precision()),
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
        // Sum where a residual add reads the result, when that pays.
        let fold = self
            .residual_fold(op, output)?
            .filter(|_| folds_residual(problem, chosen, self.config.tiles));
        let out_ty = match &fold {
            Some(f) => self.layout(
                format!("output of {op}"),
                row_major(tout.extents(), tout.precision(), f.layout.tiling().clone()),
            )?,
            None => out_ty,
        };
        let mut pr_shape = vec![u64::from(chosen.pk)];
        pr_shape.extend_from_slice(tout.extents());
        let pr_ty = self.layout(
            format!("partials of {op}"),
            row_major(&pr_shape, problem.output, out_ty.tiling().clone()),
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
        // The residual's copy, if it needs one, joins the partials'.
        let mut folded = Vec::new();
        if let Some(f) = &fold {
            self.fold_calls(f, y, &mut folded)?;
        }
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
        calls.append(&mut folded);
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
                .and_then(|tiling| row_major(t.extents(), t.precision(), tiling)),
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
    /// function making the calls for an output buffer, which they
    /// initialise or, with `accumulate`, add to.
    pub(super) fn gemm_calls(
        &mut self,
        left: &TensorType,
        output: &TensorType,
        problem: &GemmProblem,
        x: BufferId,
        w: BufferId,
        accumulate: bool,
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
                    // An empty inner block contributes zeros: they are
                    // written where the kernel would have initialised the
                    // result, and nothing where it would have added to it.
                    if bytes > 0 && !accumulate {
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
                            accumulate,
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

/// The bias row added to every row of a `pk == 1` GEMM's result `y`.
fn bias_calls(
    y: BufferId,
    bias: BufferId,
    output: &TensorType,
) -> Result<Vec<(TileId, Codelet)>, LowerError> {
    Ok(shard_rows(output)?
        .into_iter()
        .map(|(tile, rows, cols)| {
            (
                tile,
                Codelet::Add {
                    a: y.into(),
                    b: bias.into(),
                    out: y.into(),
                    rows,
                    cols,
                    broadcast_rows: true,
                },
            )
        })
        .collect())
}

/// `view` of a rank-`rank` left operand moved `start` elements along its
/// last (inner) axis: the view an inner window reads. `None` for a view
/// that is not a window (a squeeze).
fn window_view(view: &SourceView, rank: usize, start: u64) -> Option<SourceView> {
    match view {
        SourceView::Whole => {
            let mut origin = vec![0; rank];
            *origin.last_mut()? += start;
            Some(SourceView::Window(origin))
        }
        SourceView::Window(origin) => {
            let mut origin = origin.clone();
            let last = origin.last_mut()?;
            *last = last.checked_add(start)?;
            Some(SourceView::Window(origin))
        }
        SourceView::Squeeze => None,
    }
}
