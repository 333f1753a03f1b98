//! Lowering of row-wise ops: element-wise ops (casts, activations), adds
//! with numpy broadcasting, and layer norm with its replicated parameters.

use super::*;

impl Lowerer<'_> {
    /// An activation (`Some` function) or a precision conversion, in the
    /// input's row-major layout.
    pub(super) fn lower_elementwise(
        &mut self,
        op: OpId,
        input: TensorId,
        output: TensorId,
        activation: Option<Activation>,
    ) -> Result<(), LowerError> {
        let g = self.graph;
        let (tin, tout) = (g.tensor(input), g.tensor(output));
        let tiling = match self.home.get(&input) {
            Some(Home::Buffer(b))
                if self.program.buffers[*b].ty.order() == ElementOrder::RowMajor =>
            {
                self.program.buffers[*b].ty.tiling().clone()
            }
            _ => {
                let ty = self.layout(
                    format!("input of {op}"),
                    row_layout(tin.extents(), tin.precision(), self.config.tiles),
                )?;
                ty.tiling().clone()
            }
        };
        let in_ty = self.layout(
            format!("input of {op}"),
            row_major(tin.extents(), tin.precision(), tiling.clone()),
        )?;
        let out_ty = self.layout(
            format!("output of {op}"),
            row_major(tout.extents(), tout.precision(), tiling),
        )?;
        let x = self.ensure(input, in_ty.clone(), Attrs::default())?;
        let y = self.output(op, output, out_ty)?;
        let role = activation.map_or(StepRole::Convert, StepRole::Activation);
        let label = StepLabel::of(op, role, tout.name());
        self.flush(&label);
        let mut calls = Vec::new();
        for s in in_ty.shards() {
            let elements: u64 = s.axes.iter().map(|a| a.width).product();
            if elements == 0 {
                continue;
            }
            let elements = u32_arg("shard elements", elements)?;
            let (input, output) = (Operand::from(x), Operand::from(y));
            let call = match activation {
                Some(function) => Codelet::Activation {
                    input,
                    output,
                    elements,
                    function,
                },
                None => Codelet::Convert {
                    input,
                    output,
                    elements,
                },
            };
            calls.push((s.tile, call));
        }
        self.compute(label, calls);
        Ok(())
    }

    pub(super) fn lower_add(
        &mut self,
        op: OpId,
        left: TensorId,
        right: TensorId,
        output: TensorId,
    ) -> Result<(), LowerError> {
        let g = self.graph;
        let tout = g.tensor(output);
        let (a, b) = if g.tensor(left).extents() == tout.extents() {
            (left, right)
        } else {
            (right, left)
        };
        if g.tensor(a).extents() != tout.extents() {
            return Err(self.unsupported(op, "one addend must have the result's shape".into()));
        }
        let out_ty = self.add_layout(op, output)?;
        let like = |l: &Self, t: TensorId| {
            l.layout(
                format!("operand of {op}"),
                row_major(
                    tout.extents(),
                    g.tensor(t).precision(),
                    out_ty.tiling().clone(),
                ),
            )
        };
        let a_ty = like(self, a)?;
        let xa = self.ensure(a, a_ty, Attrs::default())?;
        let xb = if g.tensor(b).extents() == tout.extents() {
            let b_ty = like(self, b)?;
            self.ensure(b, b_ty, Attrs::default())?
        } else {
            // Materialise the broadcast operand in the result's layout.
            let (source, view) = self.materialised(b)?;
            let view = match view {
                SourceView::Whole => SourceView::Window(vec![0; g.tensor(b).extents().len()]),
                other => {
                    let t = g.tensor(b);
                    let ty = self.layout(
                        format!("operand of {op}"),
                        row_layout(t.extents(), t.precision(), self.config.tiles),
                    )?;
                    let name = format!("{}@{}", t.name(), self.program.buffers.len());
                    let m = self.copy_to_new(source, other, ty, name, Attrs::default());
                    return self.finish_add(op, xa, m, out_ty, output, true);
                }
            };
            let ty = like(self, b)?;
            let name = format!("{}@{}", g.tensor(b).name(), self.program.buffers.len());
            self.copy_to_new(source, view, ty, name, Attrs::default())
        };
        self.finish_add(op, xa, xb, out_ty, output, false)
    }

    /// The layout of add `op`'s result `output`: the buffer carrying it
    /// between iterations, or its row layout.
    pub(super) fn add_layout(&self, op: OpId, output: TensorId) -> Result<TensorType, LowerError> {
        let t = self.graph.tensor(output);
        match self.forced.get(&output) {
            Some(&f) => Ok(self.program.buffers[f].ty.clone()),
            None => self.layout(
                format!("output of {op}"),
                row_layout(t.extents(), t.precision(), self.config.tiles),
            ),
        }
    }

    pub(super) fn finish_add(
        &mut self,
        op: OpId,
        xa: BufferId,
        xb: BufferId,
        out_ty: TensorType,
        output: TensorId,
        retry: bool,
    ) -> Result<(), LowerError> {
        if retry {
            // The broadcast operand was first materialised in its own row
            // layout; broadcast from there now.
            let g = self.graph;
            let tout = g.tensor(output);
            let bty = &self.program.buffers[xb].ty;
            let view = SourceView::Window(vec![0; bty.shape().rank()]);
            let ty = self.layout(
                format!("operand of {op}"),
                row_major(tout.extents(), bty.precision(), out_ty.tiling().clone()),
            )?;
            let name = format!(
                "{}@{}",
                self.program.buffers[xb].name,
                self.program.buffers.len()
            );
            let full = self.copy_to_new(xb, view, ty, name, Attrs::default());
            return self.finish_add(op, xa, full, out_ty, output, false);
        }
        let y = self.output(op, output, out_ty.clone())?;
        let label = StepLabel::of(op, StepRole::Add, self.graph.tensor(output).name());
        self.flush(&label);
        let mut calls = Vec::new();
        for (tile, rows, cols) in shard_rows(&out_ty)? {
            calls.push((
                tile,
                Codelet::Add {
                    a: xa.into(),
                    b: xb.into(),
                    out: y.into(),
                    rows,
                    cols,
                    broadcast_rows: false,
                },
            ));
        }
        self.compute(label, calls);
        Ok(())
    }

    pub(super) fn lower_layer_norm(
        &mut self,
        op: OpId,
        input: TensorId,
        scale: TensorId,
        bias: TensorId,
        eps: f32,
        output: TensorId,
    ) -> Result<(), LowerError> {
        let g = self.graph;
        let (tin, tout) = (g.tensor(input), g.tensor(output));
        let in_ty = self.layout(
            format!("input of {op}"),
            row_layout(tin.extents(), tin.precision(), self.config.tiles),
        )?;
        let tiling = in_ty.tiling().clone();
        let out_ty = match self.forced.get(&output) {
            Some(&f) => self.program.buffers[f].ty.clone(),
            None => self.layout(
                format!("output of {op}"),
                row_major(tout.extents(), tout.precision(), tiling.clone()),
            )?,
        };
        let x = self.ensure(input, in_ty.clone(), Attrs::default())?;
        let params = self.replicated_params(op, &[scale, bias], tiling.tile_count())?;
        let y = self.output(op, output, out_ty)?;
        let label = StepLabel::of(op, StepRole::LayerNorm, tout.name());
        self.flush(&label);
        let mut calls = Vec::new();
        for (tile, rows, cols) in shard_rows(&in_ty)? {
            calls.push((
                tile,
                Codelet::LayerNorm {
                    input: x.into(),
                    scale: params[0].into(),
                    bias: params[1].into(),
                    output: y.into(),
                    rows,
                    cols,
                    eps,
                },
            ));
        }
        self.compute(label, calls);
        Ok(())
    }

    /// Vectors (weights) brought whole onto each of the first `tiles` tiles.
    pub(super) fn replicated_params(
        &mut self,
        op: OpId,
        tensors: &[TensorId],
        tiles: u32,
    ) -> Result<Vec<BufferId>, LowerError> {
        let mut out = Vec::new();
        for &t in tensors {
            let tensor = self.graph.tensor(t);
            let ty = self.layout(
                format!("operand of {op}"),
                replicated(tensor.extents(), tensor.precision(), tiles),
            )?;
            out.push(self.ensure(t, ty, Attrs::default())?);
        }
        Ok(out)
    }
}
