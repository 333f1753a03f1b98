//! Lowering: a [`Graph`] becomes a [`Program`].
//!
//! Each operation is lowered in three parts: the operands it reads are
//! brought into the layouts its plan wants (an exchange step of
//! redistributions, preceded by clears of the padding a codelet reads: a
//! GEMM kernel's operands' inner-dimension padding, which meets the other
//! operand's data; padded rows and columns only make padded results,
//! which nothing reads),
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

use std::collections::{HashMap, HashSet};

mod attention;
mod clears;

pub use attention::{amp_attention_bytes, least_amp_attention_bytes};
mod elementwise;
mod fold;

pub use fold::gemm_problem;
mod gather;
mod gemm;
mod repeat;
mod resting;

use ipu_layout::{
    Axis, AxisTiling, ElementOrder, LayoutError, MemoryClass, Precision, SourceView, TensorTiling,
    TensorType, TileId,
};

use crate::graph::{Activation, Graph, Op, OpId, Repeat, SoftmaxPrecision, TensorId, TensorKind};
use crate::plan::{
    AmpAttention, AmpAttentionScorer, AttentionCycles, AttentionGrid, AttentionShape, CostModel,
    GemmChoice, GemmGrid, GemmLayouts, GemmProblem, amp_attention_layouts, amp_attention_supported,
    attention_grid, attention_layouts, block_head_width, blocks_exponent, choose_amp_attention,
    choose_gemm_plan, column_parts, column_tiling, element_layout, folds_residual, gemm_layouts,
    pass_rows, reduce_layout, replicated, row_layout, row_major, row_split, spread, sums_on_amp,
    vector_attention_cycles, vector_home,
};
use crate::program::{
    Buffer, BufferId, BufferRole, Codelet, ComputeStep, ExchangeStep, GemmEntry, GemmKernel,
    KernelId, Operand, Program, Redistribute, RepeatStep, Step, StepLabel, StepRole,
};

/// Which unit runs attention's two products.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AttentionUnit {
    /// The AMP where it can run the attention and its steps are estimated
    /// to be faster than the vector unit's; the vector unit otherwise.
    #[default]
    Auto,
    /// The vector unit (`Codelet::AttentionBlock`) always.
    Vector,
    /// The AMP wherever it can run the attention within the budget.
    Amp,
}

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
    /// Budgets below `transient_budget` for single operations (within a
    /// repeat, the operation of the body's first iteration): what a build
    /// lowers where placement failed, so that the rest of the plan keeps
    /// its cycles.
    pub op_budgets: std::collections::BTreeMap<OpId, u64>,
    /// Where attention's products run.
    pub attention: AttentionUnit,
}

impl LowerConfig {
    /// The transient budget of operation `op`, a GEMM.
    pub fn budget_for(&self, op: OpId) -> u64 {
        self.op_budgets
            .get(&op)
            .copied()
            .unwrap_or(self.transient_budget)
            .min(self.transient_budget)
    }

    /// A larger budget GEMM `op` may take where its plan there is at least
    /// [`STRETCH_GAIN_PERCENT`] % faster than within [`Self::budget_for`]:
    /// [`STRETCH_PERCENT`] % of the transient budget, none for an operation
    /// a replan gave a budget of its own. At SigLIP so400m's batch 2 no
    /// GEMM gains that much; at batch 4 the QKV and first MLP GEMMs
    /// otherwise split their rows 27 ways and run at 1.8 × their floor
    /// (docs/PROFILE.md, "A larger budget where it buys cycles").
    pub fn stretch_budget_for(&self, op: OpId) -> Option<u64> {
        if self.op_budgets.contains_key(&op) {
            return None;
        }
        Some(self.transient_budget.saturating_mul(STRETCH_PERCENT) / 100)
    }

    /// The transient budget of operation `op`, an attention: a quarter
    /// above `transient_budget`, because most of an attention's bytes on a
    /// tile are one step's scores and probabilities, dead at that step's
    /// end, where a GEMM's operands and partials stay live across its
    /// exchange, kernel and reduce steps.
    pub fn attention_budget_for(&self, op: OpId) -> u64 {
        let base = self
            .transient_budget
            .saturating_add(self.transient_budget / 4);
        self.op_budgets.get(&op).copied().unwrap_or(base).min(base)
    }
}

/// The stretched budget of a GEMM, in percent of the transient budget
/// ([`LowerConfig::stretch_budget_for`]).
pub const STRETCH_PERCENT: u64 = 140;

/// How much faster, in percent, a GEMM's plan in the stretched budget must
/// be to take it: enough that memory goes only where it buys cycles.
pub const STRETCH_GAIN_PERCENT: u64 = 5;

impl Default for LowerConfig {
    fn default() -> Self {
        Self {
            tiles: ipu_target::Target::ipu21().tile_count(),
            cost: CostModel::ipu21(),
            transient_budget: 160 * 1024,
            rotate: true,
            op_budgets: std::collections::BTreeMap::new(),
            attention: AttentionUnit::Auto,
        }
    }
}

/// Why a graph could not be lowered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
        late_clears: Vec::new(),
        filled_clears: Vec::new(),
        steps: Vec::new(),
        body_weights: None,
        body: None,
        resting: resting::RestingBytes::new(config.tiles),
        unread_clears: 0,
        read_axis: HashMap::new(),
        readers: readers(graph),
        folded: HashSet::new(),
        variants: HashMap::new(),
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
    l.close(&StepLabel {
        op: None,
        role: StepRole::Outputs,
        name: String::new(),
    });
    l.program.steps = std::mem::take(&mut l.steps);
    tracing::info!(
        removed = l.unread_clears,
        "eliminated unread padding clears"
    );
    let (tile, bytes) = l.resting.fullest();
    tracing::info!(tile, bytes, "weights at rest on the fullest tile");
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
    /// The axis along which a codelet reads the buffer's padding, which
    /// must then hold zeros where it meets data along the other axes.
    padding_read: Option<Axis>,
    tail_bytes: u32,
    alignment: u32,
}

impl Default for Attrs {
    fn default() -> Self {
        Self {
            padding_read: None,
            tail_bytes: 0,
            alignment: 8,
        }
    }
}

/// Whether a shard of `ty` has padding along `axis` (none without one).
fn padded_along(ty: &TensorType, axis: Option<Axis>) -> bool {
    let Some(axis) = axis else { return false };
    ty.shards().any(|s| {
        axis.resolve(s.axes.len())
            .ok()
            .and_then(|a| s.axes.get(a))
            .is_some_and(|x| x.width != x.len())
    })
}

/// GEMM operands: 32-byte alignment, and the left operand's over-read.
/// The kernel's products meet the other operand's data along the inner
/// dimension, the left operand's last axis and the weights' first.
fn gemm_left_attrs(ty: &TensorType) -> Attrs {
    let tail = if ty.precision() == Precision::F32 {
        32
    } else {
        16
    };
    Attrs {
        padding_read: Some(Axis::FromEnd(1)),
        tail_bytes: tail,
        alignment: 32,
    }
}

const GEMM_RIGHT: Attrs = Attrs {
    padding_read: Some(Axis::FromStart(0)),
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
    /// Clears that must run before the pending redistributions fill their
    /// buffers: each covers data as well as padding.
    clears: Vec<(TileId, Codelet)>,
    /// Clears of padding alone, of the pending redistributions' buffers:
    /// they may run before the fill or after it.
    late_clears: Vec<(TileId, Codelet)>,
    /// Clears of padding alone whose buffers have been filled: they run at
    /// the start of the next compute step on their tiles ([`Self::compute`]).
    filled_clears: Vec<(TileId, Codelet)>,
    steps: Vec<Step>,
    /// Weight buffers created while lowering a repeat body.
    body_weights: Option<Vec<(BufferId, TensorId)>>,
    /// The repeat whose body is being lowered.
    body: Option<&'a Repeat>,
    /// Bytes of weights at rest on each tile so far.
    resting: resting::RestingBytes,
    /// Padded shards of redistribution targets whose padding nothing reads,
    /// so that no clear was issued for them.
    unread_clears: u64,
    /// The axis along which the codelets of each buffer with read padding
    /// read it.
    read_axis: HashMap<BufferId, Axis>,
    /// Each tensor's first reader and how many times ops read it.
    readers: HashMap<TensorId, (OpId, u32)>,
    /// Ops an earlier op's steps already ran (`fold.rs`).
    folded: HashSet<OpId>,
    /// The AMP variant of each GEMM kernel costed so far (`clears.rs`).
    variants: HashMap<KernelId, Option<ipu_kernels::Variant>>,
}

/// Each tensor's first reading op and its number of reads (an op reading
/// it twice counts twice).
fn readers(graph: &Graph) -> HashMap<TensorId, (OpId, u32)> {
    let mut readers: HashMap<TensorId, (OpId, u32)> = HashMap::new();
    for (op, node) in graph.ops().iter() {
        for t in node.inputs() {
            readers
                .entry(t)
                .and_modify(|(_, n)| *n = n.saturating_add(1))
                .or_insert((op, 1));
        }
    }
    readers
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
        let padding_read = padded_along(&ty, attrs.padding_read);
        let b = self.program.buffers.push(Buffer {
            name,
            ty,
            role,
            padding_read,
            tail_bytes: attrs.tail_bytes,
            alignment: attrs.alignment,
        });
        if let (true, Some(axis)) = (padding_read, attrs.padding_read) {
            self.read_axis.insert(b, axis);
        }
        b
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
            if padded_along(&ty, attrs.padding_read) && !b.padding_read {
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
                let m = self.view_in_rows(source, b, inner, self.graph.producer(source))?;
                self.home.insert(source, Home::Buffer(m));
                Ok((m, view))
            }
            None => {
                let t = self.graph.tensor(tensor);
                if t.kind() == TensorKind::Weight {
                    // Vectors, and weights whose rows would all rest on one
                    // tile (a probe token), rest in blocks spread over the
                    // tiles from a tile of their own.
                    let (tokens, batch) = row_split(t.extents(), self.config.tiles);
                    let ty = if t.extents().len() <= 1 || tokens * batch == 1 {
                        vector_home(
                            t.extents(),
                            t.precision(),
                            self.config.tiles,
                            spread(tensor.as_u32()) as u32,
                        )
                    } else {
                        row_layout(t.extents(), t.precision(), self.config.tiles)
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

    /// `tensor`'s value, read from `source` through `view`, copied into a
    /// new buffer in its row layout, in an exchange step of its own
    /// labelled for `op`: the caller copies out of it next, and that copy
    /// may not share an exchange step with the one filling it, which would
    /// read it before it is written.
    fn view_in_rows(
        &mut self,
        tensor: TensorId,
        source: BufferId,
        view: SourceView,
        op: Option<OpId>,
    ) -> Result<BufferId, LowerError> {
        let t = self.graph.tensor(tensor);
        let ty = self.layout(
            format!("view {}", t.name()),
            row_layout(t.extents(), t.precision(), self.config.tiles),
        )?;
        let name = format!("{}@{}", t.name(), self.program.buffers.len());
        let m = self.copy_to_new(source, view, ty, name, Attrs::default());
        self.flush(&StepLabel {
            op,
            role: StepRole::View,
            name: t.name().to_owned(),
        });
        Ok(m)
    }

    /// The resident buffer of a weight, created in `ty` on first use.
    fn weight_home(&mut self, tensor: TensorId, ty: TensorType, attrs: Attrs) -> BufferId {
        if let Some(Home::Buffer(b)) = self.home.get(&tensor) {
            return *b;
        }
        let name = self.graph.tensor(tensor).name().to_owned();
        let copies = self.resting_copies(tensor);
        self.resting.add(&ty, copies);
        let b = self.new_buffer_with(
            name,
            ty,
            BufferRole::Weight,
            Attrs {
                padding_read: None,
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

    /// Emits the pending clears and redistributions, as the steps of the
    /// operation and role of `label`. Clears of padding alone wait for the
    /// next compute step, after the fill; those still waiting from an
    /// earlier fill (no compute step came between) run in this step's
    /// clear, before its own fill.
    fn flush(&mut self, label: &StepLabel) {
        let mut before = std::mem::take(&mut self.filled_clears);
        before.append(&mut self.clears);
        self.clear_step(label, before);
        if !self.copies.is_empty() {
            let copies = std::mem::take(&mut self.copies);
            self.steps.push(Step::Exchange(ExchangeStep {
                label: label.clone(),
                copies,
            }));
        }
        self.filled_clears = std::mem::take(&mut self.late_clears);
    }

    /// Appends a compute step. Each operation's calls are a step of their
    /// own, so that storage lifetimes end and begin between operations
    /// instead of overlapping across a whole run of compute. The clears of
    /// padding whose buffers the last exchange filled come first, so that
    /// they run before any call of the step reads that padding
    /// ([`Self::place_filled_clears`]).
    fn compute(&mut self, label: StepLabel, calls: Vec<(TileId, Codelet)>) {
        if calls.is_empty() {
            return;
        }
        let calls = self.place_filled_clears(&label, calls);
        self.steps.push(Step::Compute(ComputeStep { label, calls }));
    }

    fn lower_op(&mut self, op: OpId) -> Result<(), LowerError> {
        if self.folded.contains(&op) {
            return Ok(());
        }
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
            Op::Activation {
                function,
                input,
                output,
            } => self.lower_elementwise(op, input, output, Some(function)),
            Op::CastFp8 { input, output } => self.lower_elementwise(op, input, output, None),
            Op::Attention {
                q,
                k,
                v,
                softmax,
                output,
                ..
            } => self.lower_attention(op, q, k, v, softmax, output),
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
            Op::Gather {
                table,
                indices,
                output,
            } => self.lower_gather(op, table, indices, output),
        }
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
