//! Lowering of attention: per (batch, head) pair on a grid of query and
//! key blocks, either on the vector unit (one codelet per block) or on the
//! AMP (the two products as GEMM kernel calls with the softmax between
//! them, `crate::plan::attention_amp`), whichever the plan's step costs
//! say is faster; combined flash-style when key rows are split. A causal
//! attention stays on the vector unit, whose blocks skip their masked
//! keys: the AMP plan's score and probability panels have no mask (its
//! softmax codelet would need the rows' positions and its GEMMs would
//! still multiply the masked half), so it declines them.

use super::*;
use crate::graph::AttentionMask;
use crate::program::CausalRows;

/// Query rows below which [`AttentionUnit::Auto`] keeps an attention on
/// the vector unit whatever the step model says: the AMP streams whole
/// rows against each coefficient load, so a GEMM of a few rows spends its
/// call on loads and setup and saves few cycles, while its kernels' code
/// and its operands' exchange code take support memory on every tile it
/// runs on, for the whole program (SigLIP's pooling head, one query row:
/// about 6,700 cycles a run on the AMP, and support that crosses a 16 KiB
/// memory element at batch 4, which then does not fit).
const MIN_AMP_QUERY_ROWS: u64 = 16;

/// The kernel of each GEMM call shape `(inner, columns, rows)` of an AMP
/// attention, and whether the call takes its large entry.
type AttentionKernels = HashMap<(u64, u64, u64), (KernelId, bool)>;

/// Where an attention's blocks left their results, and where they are
/// combined.
struct Blocks {
    /// Unnormalised outputs, F32.
    out: BufferId,
    /// Row maxima, F32.
    max: BufferId,
    /// Row sums, F32; none where they are column `head_dim` of each
    /// head's block rows (the AMP's, `plan::sums_on_amp`).
    sum: Option<BufferId>,
    /// Columns a head takes in `out`.
    head_width: u64,
    /// Key blocks.
    s: u32,
    /// The layouts the blocks are combined in (the blocks' own when
    /// `s == 1`).
    out_combine: TensorType,
    stat_combine: TensorType,
    /// The result's layout.
    output: TensorType,
}

/// What lowering needs to know of an attention op: its shape (with the
/// values' and probabilities' precisions), its queries' and keys' common
/// precision (F32 where they differ), whether its softmax is F16 and
/// whether it is causal.
struct AttentionOp {
    shape: AttentionShape,
    operands: Precision,
    softmax_f16: bool,
    causal: bool,
}

/// The unit and plan lowering chooses for an attention.
enum AttentionChoice {
    /// Both products on the AMP.
    Amp(AmpAttention, AttentionCycles),
    /// Blocks on the vector unit.
    Vector(AttentionGrid, AttentionCycles),
}

/// The plan of attention `a` under `config`'s unit, tiles, cost model
/// and `budget`: the AMP where it is supported (never for a causal one),
/// fits and is estimated faster (or where the configuration asks for it),
/// else the vector unit.
fn choose_attention(a: &AttentionOp, config: &LowerConfig, budget: u64) -> AttentionChoice {
    let AttentionOp {
        ref shape,
        operands,
        softmax_f16,
        ..
    } = *a;
    let (tiles, cost) = (config.tiles, &config.cost);
    let eb = operands.element_bytes();
    let grid = attention_grid(shape, eb, tiles, budget, cost);
    let vector = vector_attention_cycles(shape, grid, eb, softmax_f16, cost);
    let amp = if amp_allowed(a, config) {
        choose_amp_attention(shape, tiles, budget, cost).filter(|(_, amp, fits)| {
            config.attention == AttentionUnit::Amp || (*fits && amp.total() < vector.total())
        })
    } else {
        None
    };
    match amp {
        Some((plan, cycles, _)) => AttentionChoice::Amp(plan, cycles),
        None => AttentionChoice::Vector(grid, vector),
    }
}

/// Whether lowering may put attention `a` on the AMP under `config`: not
/// where the vector unit is forced, nor for a causal mask, operands or a
/// softmax the AMP attention does not take, nor (unless forced) for fewer
/// query rows than [`MIN_AMP_QUERY_ROWS`].
fn amp_allowed(a: &AttentionOp, config: &LowerConfig) -> bool {
    match config.attention {
        AttentionUnit::Vector => false,
        _ if a.causal => false,
        _ if !amp_attention_supported(&a.shape, a.operands, a.softmax_f16, config.tiles) => false,
        AttentionUnit::Auto => a.shape.tq >= MIN_AMP_QUERY_ROWS,
        AttentionUnit::Amp => true,
    }
}

/// The bytes a tile needs for AMP `plan` of attention `a`.
fn amp_plan_bytes(a: &AttentionOp, plan: &AmpAttention, cost: &CostModel) -> u64 {
    AmpAttentionScorer::new(a.shape, plan.scores, plan.blocks, cost)
        .bytes_per_tile(plan.grid, plan.passes)
}

/// What lowering needs of attention `op` of `graph`; `None` when `op` is
/// not an attention.
fn attention_shape(graph: &Graph, op: OpId) -> Option<AttentionOp> {
    let Op::Attention {
        q,
        k,
        v,
        heads,
        softmax,
        mask,
        queries_scaled,
        ..
    } = graph.ops().get(op)?
    else {
        return None;
    };
    let (tq, tk) = (graph.tensor(*q), graph.tensor(*k));
    let shape = AttentionShape {
        batch: tq.extents()[0],
        tq: tq.extents()[1],
        tk: tk.extents()[1],
        hidden: tq.extents()[2],
        heads: u64::from(*heads),
        queries_scaled: *queries_scaled,
        values: graph.tensor(*v).precision(),
        probs: softmax.probabilities(),
    };
    let operands = [q, k]
        .iter()
        .map(|&&t| graph.tensor(t).precision())
        .reduce(|a, b| if a == b { a } else { Precision::F32 })
        .unwrap_or(Precision::F32);
    Some(AttentionOp {
        shape,
        operands,
        softmax_f16: softmax.is_f16(),
        causal: *mask == AttentionMask::Causal,
    })
}

/// The bytes a tile needs for attention `op`'s AMP plan under `config`,
/// as its plan estimates them, or `None` when lowering would not put the
/// attention on the AMP: what a replan must go below to change the plan.
pub fn amp_attention_bytes(graph: &Graph, op: OpId, config: &LowerConfig) -> Option<u64> {
    let a = attention_shape(graph, op)?;
    let budget = config.attention_budget_for(op);
    match choose_attention(&a, config, budget) {
        AttentionChoice::Amp(plan, _) => Some(amp_plan_bytes(&a, &plan, &config.cost)),
        AttentionChoice::Vector(..) => None,
    }
}

/// The fewest bytes a tile needs for any AMP plan of attention `op` under
/// `config` (its grid and passes chosen for bytes, not cycles), or `None`
/// when lowering cannot put it on the AMP: below it, a budget leaves the
/// attention only the vector unit.
pub fn least_amp_attention_bytes(graph: &Graph, op: OpId, config: &LowerConfig) -> Option<u64> {
    let a = attention_shape(graph, op)?;
    if !amp_allowed(&a, config) {
        return None;
    }
    // Within no budget, the plan needing the fewest bytes.
    let (plan, _, _) = choose_amp_attention(&a.shape, config.tiles, 0, &config.cost)?;
    Some(amp_plan_bytes(&a, &plan, &config.cost))
}

impl Lowerer<'_> {
    pub(super) fn lower_attention(
        &mut self,
        op: OpId,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        softmax: SoftmaxPrecision,
        output: TensorId,
    ) -> Result<(), LowerError> {
        let tout = self.graph.tensor(output);
        let Some(a) = attention_shape(self.graph, op) else {
            return Err(self.unsupported(op, "bug in the lowering: not an attention".into()));
        };
        let budget = self.config.attention_budget_for(op);
        let choice = choose_attention(&a, self.config, budget);
        let (shape, softmax_f16) = (a.shape, a.softmax_f16);
        let blocks = match choice {
            AttentionChoice::Amp(plan, cycles) => {
                tracing::debug!(op = %op, output = tout.name(), grid = ?plan.grid, passes = plan.passes, steps = ?cycles, estimated_cycles = cycles.total(), "planned attention on the AMP");
                self.amp_attention_blocks(op, [q, k, v], &shape, plan, softmax_f16, output)?
            }
            AttentionChoice::Vector(grid, vector) => {
                tracing::debug!(op = %op, output = tout.name(), grid = ?grid, estimated_cycles = vector.total(), "planned attention on the vector unit");
                self.vector_attention_blocks(
                    op,
                    [q, k, v],
                    &shape,
                    grid,
                    (softmax, a.causal),
                    output,
                )?
            }
        };
        self.attention_combine(op, output, shape.head_dim(), blocks)
    }

    /// The vector unit's blocks: one [`Codelet::AttentionBlock`] per pair
    /// and block.
    fn vector_attention_blocks(
        &mut self,
        op: OpId,
        [q, k, v]: [TensorId; 3],
        shape: &AttentionShape,
        grid: AttentionGrid,
        (softmax, causal): (SoftmaxPrecision, bool),
        output: TensorId,
    ) -> Result<Blocks, LowerError> {
        let g = self.graph;
        let (tq, tout) = (g.tensor(q), g.tensor(output));
        let eb = tq.precision().element_bytes();
        let veb = g.tensor(v).precision().element_bytes();
        let lay = self.layout(
            format!("attention {op}"),
            attention_layouts(shape, grid, tq.precision(), tout.precision()),
        )?;
        let kv_ty = |l: &Self, t: TensorId| {
            let tensor = g.tensor(t);
            l.layout(
                format!("operand of {op}"),
                row_major(
                    tensor.extents(),
                    tensor.precision(),
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
        let scale = shape.score_scale();
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
            // Where the block's rows sit: what its mask is relative to.
            let rows = if causal {
                Some(CausalRows {
                    q_first: u32_arg("row", sq.axes[1].start)?,
                    kv_first: u32_arg("row", sk.axes[1].start)?,
                })
            } else {
                None
            };
            for b in 0..bw {
                for h in 0..hl {
                    let qo = ((b * rq) * hw + h * d) * eb;
                    let ko = ((b * rk) * hw + h * d) * eb;
                    let vo = ((b * rk) * hw + h * d) * veb;
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
                                offset: u32_arg("offset", vo)?,
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
                            softmax_f16: softmax.is_f16(),
                            causal: rows,
                            probs_fp8: softmax.probabilities().is_fp8(),
                        },
                    ));
                }
            }
        }
        self.compute(label, calls);
        Ok(Blocks {
            out: out_part,
            max: max_part,
            sum: Some(sum_part),
            head_width: shape.head_dim(),
            s: grid.s,
            out_combine: lay.out_combine,
            stat_combine: lay.stat_combine,
            output: lay.output,
        })
    }

    /// The AMP's blocks: per tile (one pair, one query block, one key
    /// block) the keys' and values' panels in one compute step, then in the
    /// next, per pass over the query rows, the scores' GEMM, the softmax
    /// and the blocks' GEMM.
    fn amp_attention_blocks(
        &mut self,
        op: OpId,
        [q, k, v]: [TensorId; 3],
        shape: &AttentionShape,
        plan: AmpAttention,
        softmax_f16: bool,
        output: TensorId,
    ) -> Result<Blocks, LowerError> {
        let tout = self.graph.tensor(output);
        let lay = self.layout(
            format!("attention {op}"),
            amp_attention_layouts(shape, plan, tout.precision()),
        )?;
        let bq = self.ensure(q, lay.q.clone(), gemm_left_attrs(&lay.q))?;
        let bk = self.ensure(k, lay.k.clone(), Attrs::default())?;
        let bv = self.ensure(v, lay.v.clone(), Attrs::default())?;
        let base = tout.name().to_owned();
        // Every GEMM operand and output starts 32-byte aligned.
        let aligned = Attrs {
            padding_read: None,
            tail_bytes: 0,
            alignment: 32,
        };
        let temporary = |l: &mut Self, name: &str, ty: &TensorType, attrs: Attrs| {
            l.new_buffer_with(
                format!("{base}.{name}"),
                ty.clone(),
                BufferRole::Temporary,
                attrs,
            )
        };
        let keys_t = temporary(self, "keys_t", &lay.keys_t, aligned);
        let values = temporary(self, "values", &lay.values, aligned);
        // The probabilities are a left operand (the AMP reads past their
        // end) whose padding the softmax writes itself.
        let probs_attrs = Attrs {
            padding_read: None,
            ..gemm_left_attrs(&lay.probs)
        };
        let (scores, probs) = if crate::plan::probs_over_scores(shape, plan.scores) {
            let both = temporary(self, "scores", &lay.scores, probs_attrs);
            (both, both)
        } else {
            (
                temporary(self, "scores", &lay.scores, aligned),
                temporary(self, "probs", &lay.probs, probs_attrs),
            )
        };
        let out = temporary(self, "blocks", &lay.out_part, aligned);
        let max = temporary(self, "max", &lay.stat_part, Attrs::default());
        // Where the values' panels have a padding column, it holds ones
        // and the values' product writes the row sums there.
        let amp_sums = sums_on_amp(shape);
        let sum = if amp_sums {
            None
        } else {
            Some(temporary(self, "sum", &lay.stat_part, Attrs::default()))
        };

        // Per tile: query rows, key rows (data and padded), head columns
        // (data and padded).
        let mut shards = Vec::new();
        for (sq, sk) in lay.q.shards().zip(lay.k.shards()) {
            let rq = sq.axes[1].len();
            let (rk, rk_w) = (sk.axes[1].len(), sk.axes[1].width);
            let (d, dp) = (sk.axes[2].width, sq.axes[2].width);
            if rq == 0 || rk == 0 || sq.axes[0].len() != 1 || sq.axes[2].len() != d {
                return Err(self.unsupported(
                    op,
                    format!(
                        "bug in the lowering: the AMP attention's tile {} holds {rq} query rows, {rk} keys and {} pairs",
                        sq.tile,
                        sq.axes[0].len()
                    ),
                ));
            }
            shards.push((sq.tile, rq, rk, rk_w, d, dp));
        }
        // Each tile's query rows in passes; the calls of every pass.
        let passes: Vec<Vec<u64>> = shards
            .iter()
            .map(|s| pass_rows(s.1, plan.passes).collect())
            .collect();
        let score_kernels = self.attention_kernels(
            shards
                .iter()
                .zip(&passes)
                .flat_map(|(s, p)| p.iter().map(|&r| (r, s.5, s.3))),
            [Precision::F16, Precision::F16, plan.scores],
        )?;
        let value_kernels = self.attention_kernels(
            shards
                .iter()
                .zip(&passes)
                .flat_map(|(s, p)| p.iter().map(|&r| (r, s.3, s.5))),
            [plan.probs_buffer(shape), shape.values, plan.blocks],
        )?;

        // The panels are a step of their own, so that the row-major keys
        // and values are dead before the scores are held.
        let panels = StepLabel::of(op, StepRole::Panels, base.as_str());
        self.flush(&panels);
        let mut calls = Vec::new();
        for &(tile, _, rk, rk_w, d, dp) in &shards {
            let (rows, cols, stride) = (
                u32_arg("rows", rk)?,
                u32_arg("columns", d)?,
                u32_arg("stride", d)?,
            );
            let (dp, rk_w) = (u32_arg("rows", dp)?, u32_arg("columns", rk_w)?);
            calls.push((
                tile,
                Codelet::Panels {
                    input: bk.into(),
                    output: keys_t.into(),
                    rows,
                    cols,
                    stride,
                    out_rows: dp,
                    out_cols: rk_w,
                    transpose: true,
                    ones: false,
                },
            ));
            calls.push((
                tile,
                Codelet::Panels {
                    input: bv.into(),
                    output: values.into(),
                    rows,
                    cols,
                    stride,
                    out_rows: rk_w,
                    out_cols: dp,
                    transpose: false,
                    ones: amp_sums,
                },
            ));
        }
        self.compute(panels, calls);

        let label = StepLabel::of(op, StepRole::Attention, base.as_str());
        self.flush(&label);
        let scale = shape.score_scale();
        let (qeb, f32b) = (Precision::F16.element_bytes(), 4u64);
        let beb = plan.blocks.element_bytes();
        // One scale for every block of a row, so that it cancels in the
        // combine: that of the longest key block, which the probabilities'
        // precision was chosen for.
        let longest = shards.iter().map(|s| s.3).max().unwrap_or(0);
        if longest != plan.key_rows(shape) {
            return Err(self.unsupported(
                op,
                format!(
                    "bug in the lowering: the AMP attention's longest key block has {longest} rows, its plan {}",
                    plan.key_rows(shape)
                ),
            ));
        }
        let exponent = blocks_exponent(longest, plan.blocks);
        let mut calls = Vec::new();
        for ((tile, _, rk, rk_w, _, dp), rows) in shards.into_iter().zip(passes) {
            let mut first = 0u64;
            for r in rows {
                let at = |buffer: BufferId, bytes: u64| -> Result<Operand, LowerError> {
                    Ok(Operand {
                        buffer,
                        offset: u32_arg("offset", bytes)?,
                    })
                };
                let gemm = |kernels: &AttentionKernels,
                            inner: u64,
                            columns: u64,
                            left: Operand,
                            right: BufferId,
                            output: Operand| {
                    let (kernel, large) = kernels[&(inner, columns, r)];
                    Codelet::Gemm {
                        kernel,
                        entry: GemmEntry {
                            large,
                            accumulate: false,
                        },
                        rows: r as u32,
                        left,
                        right: right.into(),
                        output,
                    }
                };
                let (q_at, out_at) = (at(bq, first * dp * qeb)?, at(out, first * dp * beb)?);
                calls.push((
                    tile,
                    gemm(&score_kernels, dp, rk_w, q_at, keys_t, scores.into()),
                ));
                calls.push((
                    tile,
                    Codelet::AttentionSoftmax {
                        scores: scores.into(),
                        probs: probs.into(),
                        max: at(max, first * f32b)?,
                        sum: sum.map(|sum| at(sum, first * f32b)).transpose()?,
                        rows: u32_arg("rows", r)?,
                        columns: u32_arg("columns", rk)?,
                        stride: u32_arg("stride", rk_w)?,
                        scale,
                        softmax_f16,
                        exponent,
                    },
                ));
                calls.push((
                    tile,
                    gemm(&value_kernels, rk_w, dp, probs.into(), values, out_at),
                ));
                first += r;
            }
        }
        self.compute(label, calls);
        Ok(Blocks {
            out,
            max,
            sum,
            head_width: block_head_width(shape),
            s: plan.grid.s,
            out_combine: lay.out_combine,
            stat_combine: lay.stat_combine,
            output: lay.output,
        })
    }

    /// Registers the GEMM kernels with a row-major left operand serving
    /// calls of `(rows, inner, columns)` reading `left` and `right` into
    /// `output`: per `(inner, columns)`, one kernel for each two of its
    /// row counts (ascending). Returns each call shape's kernel and
    /// whether it takes the kernel's large entry.
    fn attention_kernels(
        &mut self,
        calls: impl Iterator<Item = (u64, u64, u64)>,
        [left, right, output]: [Precision; 3],
    ) -> Result<AttentionKernels, LowerError> {
        let mut groups: std::collections::BTreeMap<(u64, u64), Vec<u64>> = Default::default();
        for (rows, inner, columns) in calls {
            groups.entry((inner, columns)).or_default().push(rows);
        }
        let mut out = HashMap::new();
        for ((inner, columns), mut rows) in groups {
            rows.sort_unstable();
            rows.dedup();
            for pair in rows.chunks(2) {
                let (small, large) = (pair[0], pair[pair.len() - 1]);
                let spec = GemmKernel {
                    inner: u32_arg("GEMM inner block", inner)?,
                    columns: u32_arg("GEMM column block", columns)?,
                    rows_small: u32_arg("GEMM rows", small)?,
                    rows_large: u32_arg("GEMM rows", large)?,
                    left,
                    left_order: ElementOrder::RowMajor,
                    right,
                    output,
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
                out.insert((inner, columns, small), (id, small == large));
                out.insert((inner, columns, large), (id, true));
            }
        }
        Ok(out)
    }

    /// Gathers the blocks where they are combined (when keys were split)
    /// and combines them into `output`.
    fn attention_combine(
        &mut self,
        op: OpId,
        output: TensorId,
        d: u64,
        blocks: Blocks,
    ) -> Result<(), LowerError> {
        let tout = self.graph.tensor(output);
        let base = tout.name().to_owned();
        let (oc, mc, sc) = if blocks.s == 1 {
            (blocks.out, blocks.max, blocks.sum)
        } else {
            let gather = |l: &mut Self, from: BufferId, ty: &TensorType, name: &str| {
                l.copy_to_new(
                    from,
                    SourceView::Whole,
                    ty.clone(),
                    format!("{base}.{name}.gathered"),
                    Attrs::default(),
                )
            };
            let sum = blocks
                .sum
                .map(|sum| gather(self, sum, &blocks.stat_combine, "sum"));
            (
                gather(self, blocks.out, &blocks.out_combine, "blocks"),
                gather(self, blocks.max, &blocks.stat_combine, "max"),
                sum,
            )
        };
        let y = self.output(op, output, blocks.output.clone())?;
        let combine = StepLabel::of(op, StepRole::Combine, base.as_str());
        self.flush(&combine);
        let oeb = tout.precision().element_bytes();
        let beb = blocks.out_combine.precision().element_bytes();
        let width = blocks.head_width;
        let mut calls = Vec::new();
        for ((so, sc_), sy) in blocks
            .out_combine
            .shards()
            .zip(blocks.stat_combine.shards())
            .zip(blocks.output.shards())
        {
            let nb = so.axes[0].width;
            let (bw, rw, hw) = (so.axes[1].width, so.axes[2].width, so.axes[3].width);
            let hl = sc_.axes[2].width;
            // The result's rows may be narrower than the blocks' (whose
            // head columns the AMP pads).
            let yw = sy.axes[2].width;
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
                                offset: u32_arg("offset", (b * rw * hw + h * width) * beb)?,
                            },
                            max: Operand {
                                buffer: mc,
                                offset: u32_arg("offset", ((b * hl + h) * rw) * 4)?,
                            },
                            // The sums: statistics of their own, or the
                            // column after the head's in its block rows.
                            sum: match sc {
                                Some(sc) => Operand {
                                    buffer: sc,
                                    offset: u32_arg("offset", ((b * hl + h) * rw) * 4)?,
                                },
                                None => Operand {
                                    buffer: oc,
                                    offset: u32_arg("offset", (b * rw * hw + h * width + d) * beb)?,
                                },
                            },
                            sums_in_blocks: sc.is_none(),
                            output: Operand {
                                buffer: y,
                                offset: u32_arg("offset", ((b * rw) * yw + h * d) * oeb)?,
                            },
                            blocks: u32_arg("blocks", nb)?,
                            q_rows: u32_arg("rows", rw)?,
                            head_dim: u32_arg("head dim", d)?,
                            out_block_stride: u32_arg("stride", bw * rw * hw)?,
                            out_row_stride: u32_arg("stride", hw)?,
                            stat_block_stride: u32_arg("stride", bw * hl * rw)?,
                            output_row_stride: u32_arg("stride", yw)?,
                        },
                    ));
                }
            }
        }
        self.compute(combine, calls);
        Ok(())
    }
}
