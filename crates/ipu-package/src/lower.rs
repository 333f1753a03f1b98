//! Lowering: a [`Graph`] becomes a [`Program`].
//!
//! Each operation is lowered in three parts: the operands it reads are
//! brought into the layouts its plan wants (an exchange step of
//! redistributions, preceded by clears of padding that a codelet reads),
//! then a compute step runs its codelets on every tile, writing the result
//! in the layout the plan chose, which becomes the tensor's home. Slices,
//! broadcasts and squeezes move no data: they become views that the next
//! redistribution reads through.
//!
//! A repeated layer is lowered once, from its first iteration. Its weights
//! get one buffer per iteration with the same type, named in the repeat's
//! substitution table; the tensor carried from one iteration to the next
//! (for SigLIP, the residual stream) lives in one buffer that each
//! iteration reads at its start and overwrites at its end.

use std::collections::HashMap;

use ipu_layout::{
    Axis, AxisTiling, ElementOrder, LayoutError, MemoryClass, Precision, SourceView, TensorTiling,
    TensorType, TileId,
};

use crate::graph::{Graph, Op, OpId, Repeat, SoftmaxPrecision, TensorId, TensorKind};
use crate::plan::{
    AttentionShape, CostModel, GemmGrid, GemmProblem, attention_grid, attention_layouts,
    column_parts, column_tiling, element_layout, gemm_candidates, gemm_layouts, replicated,
    row_layout, spread, tensor_type, vector_home,
};
use crate::program::{
    Buffer, BufferId, BufferRole, Codelet, GemmEntry, GemmKernel, KernelId, Operand, Program,
    Redistribute, Step,
};

/// What lowering may choose.
#[derive(Clone, Debug)]
pub struct LowerConfig {
    /// Tiles of the target.
    pub tiles: u32,
    /// The cost model that ranks plans.
    pub cost: CostModel,
    /// Bytes an operation's operands and results may take on one tile while
    /// it runs; plans above it are chosen only when none fits.
    pub transient_budget: u64,
    /// Rotate each GEMM's tiles by an amount of its own, so that the
    /// longest shards of ragged splits (partition 0's) spread over the tiles
    /// instead of all landing on tile 0.
    pub rotate: bool,
    /// Merge consecutive compute steps into one (fewer syncs, coarser
    /// lifetimes).
    pub merge_compute: bool,
}

impl Default for LowerConfig {
    fn default() -> Self {
        Self {
            tiles: ipu_target::Target::ipu21().tile_count(),
            cost: CostModel::ipu21(),
            transient_budget: 160 * 1024,
            rotate: true,
            merge_compute: false,
        }
    }
}

/// Why a graph could not be lowered.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// The target has no tiles.
    #[error("the target has no tiles; give at least one")]
    NoTiles,
    /// An operation has a form the lowering does not implement.
    #[error("operation {op} ({kind}) cannot be lowered: {reason}")]
    Unsupported {
        /// The operation.
        op: OpId,
        /// Its kind.
        kind: &'static str,
        /// What about it is not supported.
        reason: String,
    },
    /// A layout the plan asked for is invalid; a bug in the planner.
    #[error("bug in the planner: the layout of {what} is invalid: {source}")]
    Layout {
        /// Which buffer or operand.
        what: String,
        /// The layout error.
        source: LayoutError,
    },
    /// A value exceeds what a codelet argument can hold.
    #[error("{what} is {value}, more than a codelet argument holds; use more tiles")]
    TooLarge {
        /// What.
        what: String,
        /// The value.
        value: u64,
    },
}

/// Lowers `graph` for `config.tiles` tiles.
pub fn lower(graph: &Graph, config: &LowerConfig) -> Result<Program, LowerError> {
    if config.tiles == 0 {
        return Err(LowerError::NoTiles);
    }
    let mut l = Lowerer {
        graph,
        config,
        program: Program::default(),
        home: HashMap::new(),
        cache: HashMap::new(),
        forced: HashMap::new(),
        copies: Vec::new(),
        clears: Vec::new(),
        steps: Vec::new(),
        body_weights: None,
        unread_clears: 0,
    };
    for input in graph.inputs() {
        let t = graph.tensor(input);
        let ty = l.layout(
            format!("input {}", t.name()),
            row_layout(t.extents(), t.precision(), config.tiles),
        )?;
        let b = l.new_buffer(t.name().to_owned(), ty, BufferRole::Input);
        l.home.insert(input, Home::Buffer(b));
    }
    let mut repeats: Vec<&Repeat> = graph.repeats().iter().collect();
    repeats.sort_by_key(|r| r.ops().start);
    let mut next = 0usize;
    let ops = graph.ops().len();
    while next < ops {
        if let Some(r) = repeats
            .iter()
            .find(|r| r.ops().start == next && r.count() > 1)
        {
            l.lower_repeat(r)?;
            next = r.ops().end;
        } else {
            l.lower_op(OpId::from_u32(next as u32))?;
            next += 1;
        }
    }
    for output in graph.outputs() {
        let t = graph.tensor(output);
        let b = match l.home.get(&output).cloned() {
            Some(Home::Buffer(b)) => b,
            _ => {
                let ty = l.layout(
                    format!("output {}", t.name()),
                    row_layout(t.extents(), t.precision(), config.tiles),
                )?;
                l.ensure(output, ty, Attrs::default())?
            }
        };
        l.program.buffers[b].role = BufferRole::Output;
        l.program.buffers[b].name = t.name().to_owned();
    }
    l.flush("outputs");
    l.program.steps = std::mem::take(&mut l.steps);
    tracing::info!(
        removed = l.unread_clears,
        "eliminated unread padding clears"
    );
    Ok(l.program)
}

/// Where a tensor's value is.
#[derive(Clone, Debug)]
enum Home {
    /// In a buffer of the tensor's shape.
    Buffer(BufferId),
    /// A view of another tensor, not materialised.
    View { source: TensorId, view: SourceView },
}

/// Buffer attributes a consumer asks for.
#[derive(Clone, Copy, Debug)]
struct Attrs {
    padding_read: bool,
    tail_bytes: u32,
    alignment: u32,
}

impl Default for Attrs {
    fn default() -> Self {
        Self {
            padding_read: false,
            tail_bytes: 0,
            alignment: 8,
        }
    }
}

/// GEMM operands: 32-byte alignment, and the left operand's over-read.
fn gemm_left_attrs(ty: &TensorType) -> Attrs {
    let tail = if ty.precision() == Precision::F32 {
        32
    } else {
        16
    };
    Attrs {
        padding_read: true,
        tail_bytes: tail,
        alignment: 32,
    }
}

const GEMM_RIGHT: Attrs = Attrs {
    padding_read: true,
    tail_bytes: 0,
    alignment: 32,
};

struct Lowerer<'a> {
    graph: &'a Graph,
    config: &'a LowerConfig,
    program: Program,
    home: HashMap<TensorId, Home>,
    /// Copies of tensors already made in a layout, reused by later readers.
    cache: HashMap<(TensorId, TensorType), BufferId>,
    /// Buffers that must hold a tensor (the carried value of a repeat).
    forced: HashMap<TensorId, BufferId>,
    copies: Vec<Redistribute>,
    clears: Vec<(TileId, Codelet)>,
    steps: Vec<Step>,
    /// Weight buffers created while lowering a repeat body.
    body_weights: Option<Vec<(BufferId, TensorId)>>,
    /// Padded shards of redistribution targets whose padding nothing reads,
    /// so that no clear was issued for them.
    unread_clears: u64,
}

fn u32_arg(what: &str, value: u64) -> Result<u32, LowerError> {
    u32::try_from(value).map_err(|_| LowerError::TooLarge {
        what: what.to_owned(),
        value,
    })
}

impl Lowerer<'_> {
    fn layout<T>(&self, what: String, r: Result<T, LayoutError>) -> Result<T, LowerError> {
        r.map_err(|source| LowerError::Layout { what, source })
    }

    fn new_buffer(&mut self, name: String, ty: TensorType, role: BufferRole) -> BufferId {
        self.new_buffer_with(name, ty, role, Attrs::default())
    }

    fn new_buffer_with(
        &mut self,
        name: String,
        ty: TensorType,
        role: BufferRole,
        attrs: Attrs,
    ) -> BufferId {
        let padding_read = attrs.padding_read && ty.shards().any(|s| s.has_padding());
        self.program.buffers.push(Buffer {
            name,
            ty,
            role,
            padding_read,
            tail_bytes: attrs.tail_bytes,
            alignment: attrs.alignment,
        })
    }

    /// A new temporary holding `source` (read through `view`) in `ty`.
    fn copy_to_new(
        &mut self,
        source: BufferId,
        view: SourceView,
        ty: TensorType,
        name: String,
        attrs: Attrs,
    ) -> BufferId {
        let b = self.new_buffer_with(name, ty, BufferRole::Temporary, attrs);
        if self.program.buffers[b].padding_read {
            self.clear_padding(b);
        } else {
            // Zero padding is written only where a codelet reads it.
            let padded = self.program.buffers[b]
                .ty
                .shards()
                .filter(|s| s.has_padding() && s.bytes > 0)
                .count();
            self.unread_clears += padded as u64;
        }
        self.copies.push(Redistribute {
            source,
            destination: b,
            view,
        });
        b
    }

    /// Zeroes the whole of `b` on every tile before it is filled (only its
    /// padding must be zero; the data is written over it).
    fn clear_padding(&mut self, b: BufferId) {
        let shards: Vec<_> = self.program.buffers[b]
            .ty
            .shards()
            .filter(|s| s.has_padding() && s.bytes > 0)
            .collect();
        for s in shards {
            let bytes = u32::try_from(s.bytes).unwrap_or(u32::MAX);
            self.clears.push((
                s.tile,
                Codelet::Zero {
                    target: Operand::from(b),
                    bytes,
                },
            ));
        }
    }

    /// The buffer holding `tensor` in `ty`, adding a redistribution if its
    /// home is elsewhere.
    fn ensure(
        &mut self,
        tensor: TensorId,
        ty: TensorType,
        attrs: Attrs,
    ) -> Result<BufferId, LowerError> {
        let (source, view) = self.materialised(tensor)?;
        let source_ty = &self.program.buffers[source].ty;
        if view == SourceView::Whole && *source_ty == ty {
            let b = &mut self.program.buffers[source];
            b.alignment = b.alignment.max(attrs.alignment);
            b.tail_bytes = b.tail_bytes.max(attrs.tail_bytes);
            if attrs.padding_read && ty.shards().any(|s| s.has_padding()) && !b.padding_read {
                // The home was filled without clearing its padding; copy it
                // into a cleared buffer instead of reading stale padding.
                let name = format!(
                    "{}@{}",
                    self.graph.tensor(tensor).name(),
                    self.program.buffers.len()
                );
                return Ok(self.copy_to_new(source, view, ty, name, attrs));
            }
            return Ok(source);
        }
        if let Some(&b) = self.cache.get(&(tensor, ty.clone())) {
            return Ok(b);
        }
        let name = format!(
            "{}@{}",
            self.graph.tensor(tensor).name(),
            self.program.buffers.len()
        );
        let b = self.copy_to_new(source, view, ty.clone(), name, attrs);
        self.cache.insert((tensor, ty), b);
        Ok(b)
    }

    /// The buffer and view `tensor` is read through, materialising a view
    /// of a view into a row layout first.
    fn materialised(&mut self, tensor: TensorId) -> Result<(BufferId, SourceView), LowerError> {
        match self.home.get(&tensor).cloned() {
            Some(Home::Buffer(b)) => Ok((b, SourceView::Whole)),
            Some(Home::View { source, view }) => {
                let (b, inner) = self.materialised(source)?;
                if inner == SourceView::Whole {
                    return Ok((b, view));
                }
                let t = self.graph.tensor(source);
                let ty = self.layout(
                    format!("view {}", t.name()),
                    row_layout(t.extents(), t.precision(), self.config.tiles),
                )?;
                let name = format!("{}@{}", t.name(), self.program.buffers.len());
                let m = self.copy_to_new(b, inner, ty, name, Attrs::default());
                self.home.insert(source, Home::Buffer(m));
                Ok((m, view))
            }
            None => {
                let t = self.graph.tensor(tensor);
                if t.kind() == TensorKind::Weight {
                    let ty = match t.extents() {
                        // Vectors' first blocks spread over the tiles.
                        &[extent] => vector_home(
                            extent,
                            t.precision(),
                            self.config.tiles,
                            spread(tensor.as_u32()) as u32,
                        ),
                        extents => row_layout(extents, t.precision(), self.config.tiles),
                    };
                    let ty = self.layout(format!("weight {}", t.name()), ty)?;
                    Ok((
                        self.weight_home(tensor, ty, Attrs::default()),
                        SourceView::Whole,
                    ))
                } else {
                    // Validation guarantees every tensor read is produced
                    // earlier or supplied; reaching here is a lowering bug.
                    Err(LowerError::Unsupported {
                        op: OpId::from_u32(0),
                        kind: "read",
                        reason: format!(
                            "bug in the lowering: tensor {} has no value yet",
                            t.name()
                        ),
                    })
                }
            }
        }
    }

    /// The resident buffer of a weight, created in `ty` on first use.
    fn weight_home(&mut self, tensor: TensorId, ty: TensorType, attrs: Attrs) -> BufferId {
        if let Some(Home::Buffer(b)) = self.home.get(&tensor) {
            return *b;
        }
        let name = self.graph.tensor(tensor).name().to_owned();
        let b = self.new_buffer_with(
            name,
            ty,
            BufferRole::Weight,
            Attrs {
                padding_read: false,
                ..attrs
            },
        );
        self.home.insert(tensor, Home::Buffer(b));
        if let Some(list) = &mut self.body_weights {
            list.push((b, tensor));
        }
        b
    }

    /// The buffer an operation writes `tensor` into, in `ty`.
    fn output(
        &mut self,
        op: OpId,
        tensor: TensorId,
        ty: TensorType,
    ) -> Result<BufferId, LowerError> {
        if let Some(&b) = self.forced.get(&tensor) {
            if self.program.buffers[b].ty != ty {
                return Err(self.unsupported(op, "the value carried between iterations is produced in another layout than it is read".into()));
            }
            self.home.insert(tensor, Home::Buffer(b));
            return Ok(b);
        }
        let name = self.graph.tensor(tensor).name().to_owned();
        let b = self.new_buffer(name, ty, BufferRole::Activation);
        self.home.insert(tensor, Home::Buffer(b));
        Ok(b)
    }

    fn unsupported(&self, op: OpId, reason: String) -> LowerError {
        LowerError::Unsupported {
            op,
            kind: self.graph.op(op).kind_name(),
            reason,
        }
    }

    /// Emits the pending clears and redistributions.
    fn flush(&mut self, name: &str) {
        if !self.clears.is_empty() {
            let calls = std::mem::take(&mut self.clears);
            self.compute(format!("clear {name}"), calls);
        }
        if !self.copies.is_empty() {
            let copies = std::mem::take(&mut self.copies);
            self.steps.push(Step::Exchange {
                name: name.to_owned(),
                copies,
            });
        }
    }

    /// Appends a compute step. With `merge_compute`, it joins the previous
    /// one when that is a compute step too (each tile's calls keep their
    /// order); otherwise each op's calls are a step of their own, so that
    /// storage lifetimes end and begin between ops instead of overlapping
    /// across a whole run of compute.
    fn compute(&mut self, name: String, calls: Vec<(TileId, Codelet)>) {
        if calls.is_empty() {
            return;
        }
        if self.config.merge_compute
            && let Some(Step::Compute {
                name: last,
                calls: list,
            }) = self.steps.last_mut()
        {
            last.push_str(" + ");
            last.push_str(&name);
            list.extend(calls);
            return;
        }
        self.steps.push(Step::Compute { name, calls });
    }

    fn lower_repeat(&mut self, r: &Repeat) -> Result<(), LowerError> {
        let g = self.graph;
        let first = r.iteration_ops(0);
        let second = r.iteration_ops(1);
        let inside = r.tensors();
        // Pair the tensors iteration 0 reads from before the repeat with the
        // ones iteration 1 reads in their place: those are carried.
        let mut carried: Vec<(TensorId, usize)> = Vec::new();
        for (a, b) in first.clone().zip(second) {
            let (a_op, b_op) = (
                g.op(OpId::from_u32(a as u32)),
                g.op(OpId::from_u32(b as u32)),
            );
            for (x, y) in a_op.inputs().iter().zip(b_op.inputs().iter()) {
                let produced_before = !inside.contains(&(x.as_u32() as usize))
                    && g.tensor(*x).kind() != TensorKind::Weight;
                if produced_before && r.iteration_tensors(0).contains(&(y.as_u32() as usize)) {
                    let index = y.as_u32() as usize - r.iteration_tensors(0).start;
                    if !carried.iter().any(|c| c.0 == *x) {
                        carried.push((*x, index));
                    }
                }
            }
        }
        // Each carried value lives in one row-layout buffer for the whole loop.
        let mut carried_buffers = Vec::new();
        for &(x, index) in &carried {
            let t = g.tensor(x);
            let ty = self.layout(
                format!("carried {}", t.name()),
                row_layout(t.extents(), t.precision(), self.config.tiles),
            )?;
            let b = self.ensure(x, ty, Attrs::default())?;
            for k in 0..r.count() {
                let y = TensorId::from_u32((r.iteration_tensors(k).start + index) as u32);
                self.forced.insert(y, b);
            }
            carried_buffers.push(b);
        }
        self.flush(&format!("enter {}", r.name()));

        let outer = std::mem::take(&mut self.steps);
        self.body_weights = Some(Vec::new());
        for op in first {
            self.lower_op(OpId::from_u32(op as u32))?;
        }
        self.flush(&format!("end of {}", r.name()));
        let body = std::mem::replace(&mut self.steps, outer);
        let weights = self.body_weights.take().unwrap_or_default();

        let mut iteration_buffers = Vec::new();
        for (b, w) in weights {
            let Some((0, index)) = r.locate_tensor(w) else {
                // A weight declared outside the repeat is shared by every
                // iteration: nothing to substitute.
                continue;
            };
            let mut list = vec![b];
            for k in 1..r.count() {
                let wk = TensorId::from_u32((r.iteration_tensors(k).start + index as usize) as u32);
                let ty = self.program.buffers[b].ty.clone();
                let attrs = Attrs {
                    padding_read: false,
                    tail_bytes: 0,
                    alignment: self.program.buffers[b].alignment,
                };
                let name = g.tensor(wk).name().to_owned();
                let bk = self.new_buffer_with(name, ty, BufferRole::Weight, attrs);
                self.home.insert(wk, Home::Buffer(bk));
                list.push(bk);
            }
            iteration_buffers.push((b, list));
        }
        // Tensors of later iterations are only ever read as the carried
        // values, which live in their buffers.
        for (&y, &b) in &self.forced {
            if inside.contains(&(y.as_u32() as usize)) {
                self.home.insert(y, Home::Buffer(b));
            }
        }
        self.steps.push(Step::Repeat {
            name: r.name().to_owned(),
            count: r.count(),
            body,
            iteration_buffers,
        });
        // Iteration 0's copies are body temporaries: later readers outside
        // the body must not reuse them.
        self.cache
            .retain(|(t, _), _| !inside.contains(&(t.as_u32() as usize)));
        Ok(())
    }

    fn lower_op(&mut self, op: OpId) -> Result<(), LowerError> {
        let g = self.graph;
        match g.op(op).clone() {
            Op::Gemm {
                left,
                right,
                bias,
                output,
            } => self.lower_gemm(op, left, right, bias, output),
            Op::Add {
                left,
                right,
                output,
            } => self.lower_add(op, left, right, output),
            Op::LayerNorm {
                input,
                scale,
                bias,
                eps,
                output,
            } => self.lower_layer_norm(op, input, scale, bias, eps, output),
            Op::Gelu { input, output } => self.lower_elementwise(op, input, output, true),
            Op::CastFp8 { input, output } => self.lower_elementwise(op, input, output, false),
            Op::Attention {
                q,
                k,
                v,
                heads,
                softmax,
                output,
            } => self.lower_attention(op, q, k, v, heads, softmax, output),
            Op::Slice {
                input,
                axis,
                start,
                output,
            } => {
                let rank = g.tensor(input).extents().len();
                let mut origin = vec![0; rank];
                origin[axis as usize] = start;
                self.home.insert(
                    output,
                    Home::View {
                        source: input,
                        view: SourceView::Window(origin),
                    },
                );
                Ok(())
            }
            Op::Broadcast { input, output } => {
                let rank = g.tensor(input).extents().len();
                self.home.insert(
                    output,
                    Home::View {
                        source: input,
                        view: SourceView::Window(vec![0; rank]),
                    },
                );
                Ok(())
            }
            Op::Reshape { input, output } => {
                let big = |t: TensorId| {
                    g.tensor(t)
                        .extents()
                        .iter()
                        .copied()
                        .filter(|&e| e != 1)
                        .collect::<Vec<_>>()
                };
                if big(input) != big(output) {
                    return Err(self.unsupported(
                        op,
                        "only reshapes that add or remove axes of extent 1 are supported".into(),
                    ));
                }
                self.home.insert(
                    output,
                    Home::View {
                        source: input,
                        view: SourceView::Squeeze,
                    },
                );
                Ok(())
            }
            Op::Transpose { .. } => {
                Err(self.unsupported(op, "transposes are not supported yet".into()))
            }
        }
    }

    /// GELU or a precision conversion, in the input's row-major layout.
    fn lower_elementwise(
        &mut self,
        op: OpId,
        input: TensorId,
        output: TensorId,
        gelu: bool,
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
            tensor_type(
                tin.extents(),
                tin.precision(),
                ElementOrder::RowMajor,
                MemoryClass::Ipu21Standard,
                tiling.clone(),
            ),
        )?;
        let out_ty = self.layout(
            format!("output of {op}"),
            tensor_type(
                tout.extents(),
                tout.precision(),
                ElementOrder::RowMajor,
                MemoryClass::Ipu21Standard,
                tiling,
            ),
        )?;
        let x = self.ensure(input, in_ty.clone(), Attrs::default())?;
        let y = self.output(op, output, out_ty)?;
        self.flush(&format!("{} {}", g.op(op).kind_name(), tout.name()));
        let mut calls = Vec::new();
        for s in in_ty.shards() {
            let elements: u64 = s.axes.iter().map(|a| a.width).product();
            if elements == 0 {
                continue;
            }
            let elements = u32_arg("shard elements", elements)?;
            let (input, output) = (Operand::from(x), Operand::from(y));
            let call = if gelu {
                Codelet::Gelu {
                    input,
                    output,
                    elements,
                }
            } else {
                Codelet::Convert {
                    input,
                    output,
                    elements,
                }
            };
            calls.push((s.tile, call));
        }
        self.compute(format!("{} {}", g.op(op).kind_name(), tout.name()), calls);
        Ok(())
    }

    fn lower_add(
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
        let out_ty = match self.forced.get(&output) {
            Some(&f) => self.program.buffers[f].ty.clone(),
            None => self.layout(
                format!("output of {op}"),
                row_layout(tout.extents(), tout.precision(), self.config.tiles),
            )?,
        };
        let like = |l: &Self, t: TensorId| {
            l.layout(
                format!("operand of {op}"),
                tensor_type(
                    tout.extents(),
                    g.tensor(t).precision(),
                    ElementOrder::RowMajor,
                    MemoryClass::Ipu21Standard,
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

    fn finish_add(
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
                tensor_type(
                    tout.extents(),
                    bty.precision(),
                    ElementOrder::RowMajor,
                    MemoryClass::Ipu21Standard,
                    out_ty.tiling().clone(),
                ),
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
        let name = format!("add {}", self.graph.tensor(output).name());
        self.flush(&name);
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
        self.compute(name, calls);
        Ok(())
    }

    fn lower_layer_norm(
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
                tensor_type(
                    tout.extents(),
                    tout.precision(),
                    ElementOrder::RowMajor,
                    MemoryClass::Ipu21Standard,
                    tiling.clone(),
                ),
            )?,
        };
        let x = self.ensure(input, in_ty.clone(), Attrs::default())?;
        let params = self.replicated_params(op, &[scale, bias], tiling.tile_count())?;
        let y = self.output(op, output, out_ty)?;
        let name = format!("layer_norm {}", tout.name());
        self.flush(&name);
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
        self.compute(name, calls);
        Ok(())
    }

    /// Vectors (weights) brought whole onto each of the first `tiles` tiles.
    fn replicated_params(
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

    fn lower_gemm(
        &mut self,
        op: OpId,
        left: TensorId,
        right: TensorId,
        bias: Option<TensorId>,
        output: TensorId,
    ) -> Result<(), LowerError> {
        let g = self.graph;
        let (tl, tr, tout) = (g.tensor(left), g.tensor(right), g.tensor(output));
        let le = tl.extents();
        let problem = GemmProblem {
            outer: le[..le.len() - 1].to_vec(),
            inner: le[le.len() - 1],
            columns: tr.extents()[1],
            left: tl.precision(),
            right: tr.precision(),
            output: if tout.precision() == Precision::F32 {
                Precision::F32
            } else {
                Precision::F16
            },
        };
        let candidates = gemm_candidates(&problem, self.config.tiles, &self.config.cost);
        let chosen = candidates
            .iter()
            .find(|(_, e)| e.transient_bytes <= self.config.transient_budget)
            .or_else(|| candidates.iter().min_by_key(|(_, e)| e.transient_bytes))
            .map(|(grid, _)| *grid)
            .unwrap_or(GemmGrid {
                pm: 1,
                pn: 1,
                pk: 1,
            });
        tracing::debug!(op = %op, output = tout.name(), grid = ?chosen, candidates = candidates.len(), "planned GEMM grid");
        let mut layouts = self.layout(format!("GEMM {op}"), gemm_layouts(&problem, chosen))?;
        if self.config.rotate {
            layouts = self.layout(format!("GEMM {op}"), layouts.rotated(spread(op.as_u32())))?;
        }
        let x = self.ensure(left, layouts.left.clone(), gemm_left_attrs(&layouts.left))?;
        let resident = self.weight_home(right, layouts.right_resident.clone(), GEMM_RIGHT);
        let w = if self.program.buffers[resident].ty == layouts.right {
            resident
        } else {
            self.ensure(right, layouts.right.clone(), GEMM_RIGHT)?
        };
        let name = format!("gemm {}", tout.name());
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
            self.flush(&name);
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
            self.compute(name, calls);
            return Ok(());
        }

        // Partial sums, reduced where each tile holds whole rows.
        let partial = self.new_buffer_with(
            format!("{}.partial", tout.name()),
            layouts.output.clone(),
            BufferRole::Temporary,
            Attrs {
                padding_read: false,
                tail_bytes: 0,
                alignment: 32,
            },
        );
        self.flush(&name);
        let calls = kernels(partial);
        self.compute(name.clone(), calls);
        let out_ty = self.layout(
            format!("output of {op}"),
            element_layout(tout.extents(), tout.precision(), self.config.tiles),
        )?;
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
        let reduce = format!("reduce {}", tout.name());
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
    fn gemm_bias(
        &mut self,
        op: OpId,
        bias: TensorId,
        output: &TensorType,
        grid: GemmGrid,
    ) -> Result<BufferId, LowerError> {
        let block = column_tiling(output).map_or(16, |a| a.block_size);
        self.bias_in_blocks(op, bias, output, grid.pn, block)
    }

    /// A bias `[N]` for an element layout: column block `t % parts`.
    fn column_bias(
        &mut self,
        op: OpId,
        bias: TensorId,
        output: &TensorType,
    ) -> Result<BufferId, LowerError> {
        let block = column_tiling(output).map_or(16, |a| a.block_size);
        self.bias_in_blocks(op, bias, output, column_parts(output), block)
    }

    /// `bias` split like the last axis of `output` (`parts` blocks of
    /// `block` columns, tile `t` holding block `t % parts` before the
    /// output's rotation, which it shares), so that each tile holds the bias
    /// of its output columns. Checked shard by shard: a mismatch would add
    /// the wrong bias silently.
    fn bias_in_blocks(
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
    fn gemm_calls(
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

    #[allow(clippy::too_many_arguments)]
    fn lower_attention(
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
            self.config.transient_budget,
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
        let name = format!("attention {base}");
        self.flush(&name);
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
        self.compute(name.clone(), calls);

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
        let combine = format!("attention combine {base}");
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

/// Rows (the product of every padded width but the last) and columns of a shard.
fn rows_cols(widths: &[u64]) -> (u64, u64) {
    match widths.split_last() {
        Some((&cols, outer)) => (outer.iter().product(), cols),
        None => (1, 1),
    }
}

/// Every non-empty shard of `ty` as `(tile, rows, columns)`: the shape a
/// row-wise codelet sees.
fn shard_rows(ty: &TensorType) -> Result<Vec<(TileId, u32, u32)>, LowerError> {
    let mut out = Vec::new();
    for s in ty.shards() {
        let widths: Vec<u64> = s.axes.iter().map(|a| a.width).collect();
        let (rows, cols) = rows_cols(&widths);
        if rows * cols != 0 {
            out.push((s.tile, u32_arg("rows", rows)?, u32_arg("columns", cols)?));
        }
    }
    Ok(out)
}
