//! Lowering of attention: blockwise per (batch, head) pair on the plan's
//! attention grid, combined flash-style when key rows are split.

use super::*;

impl Lowerer<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn lower_attention(
        &mut self,
        op: OpId,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        heads: u32,
        softmax: SoftmaxPrecision,
        output: TensorId,
    ) -> Result<(), LowerError> {
        let g = self.graph;
        let (tq, tk, tout) = (g.tensor(q), g.tensor(k), g.tensor(output));
        let shape = AttentionShape {
            batch: tq.extents()[0],
            tq: tq.extents()[1],
            tk: tk.extents()[1],
            hidden: tq.extents()[2],
            heads: u64::from(heads),
        };
        let eb = tq.precision().element_bytes();
        let grid = attention_grid(
            &shape,
            eb,
            self.config.tiles,
            self.config.budget_for(op),
            &self.config.cost,
        );
        tracing::debug!(op = %op, output = tout.name(), grid = ?grid, "planned attention grid");
        let lay = self.layout(
            format!("attention {op}"),
            attention_layouts(&shape, grid, tq.precision(), tout.precision()),
        )?;
        let kv_ty = |l: &Self, t: TensorId| {
            let tensor = g.tensor(t);
            l.layout(
                format!("operand of {op}"),
                tensor_type(
                    tensor.extents(),
                    tensor.precision(),
                    ElementOrder::RowMajor,
                    MemoryClass::Ipu21Standard,
                    lay.kv.tiling().clone(),
                ),
            )
        };
        let bq = self.ensure(q, lay.q.clone(), Attrs::default())?;
        let k_ty = kv_ty(self, k)?;
        let bk = self.ensure(k, k_ty, Attrs::default())?;
        let v_ty = kv_ty(self, v)?;
        let bv = self.ensure(v, v_ty, Attrs::default())?;
        let base = tout.name().to_owned();
        let out_part = self.new_buffer(
            format!("{base}.blocks"),
            lay.out_part.clone(),
            BufferRole::Temporary,
        );
        let max_part = self.new_buffer(
            format!("{base}.max"),
            lay.stat_part.clone(),
            BufferRole::Temporary,
        );
        let sum_part = self.new_buffer(
            format!("{base}.sum"),
            lay.stat_part.clone(),
            BufferRole::Temporary,
        );
        let workspace = self.new_buffer(
            format!("{base}.scratch"),
            lay.workspace.clone(),
            BufferRole::Temporary,
        );
        let label = StepLabel::of(op, StepRole::Attention, base.as_str());
        self.flush(&label);
        let d = shape.head_dim();
        let scale = 1.0 / (d as f32).sqrt();
        let mut calls = Vec::new();
        let out_eb = 4u64;
        for ((sq, sk), so) in lay
            .q
            .shards()
            .zip(lay.kv.shards())
            .zip(lay.out_part.shards())
        {
            let (bw, rq, hw) = (sq.axes[0].width, sq.axes[1].width, sq.axes[2].width);
            let rk = sk.axes[1].width;
            let hl = hw / d;
            let ow = so.axes[3].width;
            if bw * rq * rk * hw == 0 {
                continue;
            }
            for b in 0..bw {
                for h in 0..hl {
                    let qo = ((b * rq) * hw + h * d) * eb;
                    let ko = ((b * rk) * hw + h * d) * eb;
                    let oo = ((b * rq) * ow + h * d) * out_eb;
                    let so_ = ((b * hl + h) * rq) * 4;
                    calls.push((
                        sq.tile,
                        Codelet::AttentionBlock {
                            q: Operand {
                                buffer: bq,
                                offset: u32_arg("offset", qo)?,
                            },
                            k: Operand {
                                buffer: bk,
                                offset: u32_arg("offset", ko)?,
                            },
                            v: Operand {
                                buffer: bv,
                                offset: u32_arg("offset", ko)?,
                            },
                            out: Operand {
                                buffer: out_part,
                                offset: u32_arg("offset", oo)?,
                            },
                            max: Operand {
                                buffer: max_part,
                                offset: u32_arg("offset", so_)?,
                            },
                            sum: Operand {
                                buffer: sum_part,
                                offset: u32_arg("offset", so_)?,
                            },
                            workspace: workspace.into(),
                            q_rows: u32_arg("rows", rq)?,
                            kv_rows: u32_arg("rows", rk)?,
                            head_dim: u32_arg("head dim", d)?,
                            q_stride: u32_arg("stride", hw)?,
                            kv_stride: u32_arg("stride", hw)?,
                            out_stride: u32_arg("stride", ow)?,
                            scale,
                            softmax_f16: softmax == SoftmaxPrecision::F16,
                        },
                    ));
                }
            }
        }
        self.compute(label, calls);

        let (oc, mc, sc) = if grid.s == 1 {
            (out_part, max_part, sum_part)
        } else {
            let oc = self.copy_to_new(
                out_part,
                SourceView::Whole,
                lay.out_combine.clone(),
                format!("{base}.blocks.gathered"),
                Attrs::default(),
            );
            let mc = self.copy_to_new(
                max_part,
                SourceView::Whole,
                lay.stat_combine.clone(),
                format!("{base}.max.gathered"),
                Attrs::default(),
            );
            let sc = self.copy_to_new(
                sum_part,
                SourceView::Whole,
                lay.stat_combine.clone(),
                format!("{base}.sum.gathered"),
                Attrs::default(),
            );
            (oc, mc, sc)
        };
        let y = self.output(op, output, lay.output.clone())?;
        let combine = StepLabel::of(op, StepRole::Combine, base.as_str());
        self.flush(&combine);
        let oeb = tout.precision().element_bytes();
        let mut calls = Vec::new();
        for (so, sc_) in lay.out_combine.shards().zip(lay.stat_combine.shards()) {
            let blocks = so.axes[0].width;
            let (bw, rw, hw) = (so.axes[1].width, so.axes[2].width, so.axes[3].width);
            let hl = sc_.axes[2].width;
            if bw * rw * hw == 0 {
                continue;
            }
            for b in 0..bw {
                for h in 0..hl {
                    calls.push((
                        so.tile,
                        Codelet::AttentionCombine {
                            out: Operand {
                                buffer: oc,
                                offset: u32_arg("offset", ((b * rw) * hw + h * d) * 4)?,
                            },
                            max: Operand {
                                buffer: mc,
                                offset: u32_arg("offset", ((b * hl + h) * rw) * 4)?,
                            },
                            sum: Operand {
                                buffer: sc,
                                offset: u32_arg("offset", ((b * hl + h) * rw) * 4)?,
                            },
                            output: Operand {
                                buffer: y,
                                offset: u32_arg("offset", ((b * rw) * hw + h * d) * oeb)?,
                            },
                            blocks: u32_arg("blocks", blocks)?,
                            q_rows: u32_arg("rows", rw)?,
                            head_dim: u32_arg("head dim", d)?,
                            out_block_stride: u32_arg("stride", bw * rw * hw)?,
                            out_row_stride: u32_arg("stride", hw)?,
                            stat_block_stride: u32_arg("stride", bw * hl * rw)?,
                            output_row_stride: u32_arg("stride", hw)?,
                        },
                    ));
                }
            }
        }
        self.compute(combine, calls);
        Ok(())
    }
}
