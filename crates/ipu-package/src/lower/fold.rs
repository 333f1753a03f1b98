//! A residual add folded into the split-K reduce of the GEMM it adds to.
//!
//! A split-K GEMM's partial sums meet where they are summed, in the grid's
//! own blocks; an add of the sum to a residual (`x + W·h`, the transformer
//! layer's two adds) then copied the sum into its own row layout in an
//! exchange step and added in a compute step of its own. When the add is
//! the sum's only reader, the partials are summed in the add's layout
//! instead and the add runs in the reduce's compute step: the copy, one
//! exchange step and one compute step go, and the partials' exchange moves
//! the same bytes to other tiles.
//!
//! The fold is taken where it moves no more bytes to the busiest tile
//! (`plan::folds_residual`, which the grid's choice also costs): the add
//! layout's largest shard receives `pk` partials of itself, against `pk`
//! partials of the grid's largest shard and then the copy of the sum.

use super::*;

/// An add reading a GEMM's result: `sum = result + residual`.
#[derive(Clone, Copy)]
pub(super) struct ResidualAdd {
    /// The add.
    pub add: OpId,
    /// Its other addend, with the GEMM result's extents.
    pub residual: TensorId,
    /// Its result.
    pub sum: TensorId,
}

/// The add reading `gemm_output` (of GEMM `gemm`) that the GEMM's reduce
/// may run: the result's only reader, reading it once, is an add of two
/// operands of its shape in the same iteration of the same repeat (a
/// repeat's body is lowered from its first iteration, whose steps must
/// hold only its own ops), whose other addend is an input or computed
/// before the GEMM, and the result is no graph output.
pub(super) fn residual_add(
    graph: &Graph,
    readers: &HashMap<TensorId, (OpId, u32)>,
    gemm: OpId,
    gemm_output: TensorId,
) -> Option<ResidualAdd> {
    if graph.tensor(gemm_output).kind() == TensorKind::Output {
        return None;
    }
    let &(add, reads) = readers.get(&gemm_output)?;
    if reads != 1 {
        return None;
    }
    let Op::Add {
        left,
        right,
        output,
    } = *graph.op(add)
    else {
        return None;
    };
    let iteration = |op: OpId| graph.repeat_of_op(op).map(|(r, k, _)| (r.ops().start, k));
    if iteration(gemm) != iteration(add) {
        return None;
    }
    let residual = if left == gemm_output { right } else { left };
    let extents = graph.tensor(gemm_output).extents();
    let earlier = match graph.producer(residual) {
        Some(p) => p.as_u32() < gemm.as_u32(),
        None => graph.tensor(residual).kind() == TensorKind::Input,
    };
    (residual != gemm_output
        && earlier
        && graph.tensor(residual).extents() == extents
        && graph.tensor(output).extents() == extents)
        .then_some(ResidualAdd {
            add,
            residual,
            sum: output,
        })
}

/// The planner's view of GEMM `op` of `graph` as the lowering plans it for
/// `config`, with the largest shard of a residual add it may run; `None`
/// when `op` is no GEMM.
pub fn gemm_problem(graph: &Graph, op: OpId, config: &LowerConfig) -> Option<GemmProblem> {
    let Op::Gemm {
        left,
        right,
        output,
        ..
    } = *graph.op(op)
    else {
        return None;
    };
    Some(problem_of(
        graph,
        &readers(graph),
        op,
        [left, right, output],
        config,
    ))
}

/// The planner's view of GEMM `op` (`left × right → output`), with the
/// largest shard of a residual add its reduce may run: the one problem the
/// lowering plans and [`gemm_problem`] gives.
pub(super) fn problem_of(
    graph: &Graph,
    readers: &HashMap<TensorId, (OpId, u32)>,
    op: OpId,
    [left, right, output]: [TensorId; 3],
    config: &LowerConfig,
) -> GemmProblem {
    GemmProblem {
        residual: residual_shard(graph, readers, op, output, config.tiles),
        ..GemmProblem::of(
            graph.tensor(left),
            graph.tensor(right),
            graph.tensor(output),
            &config.cost,
        )
    }
}

/// The elements of the largest shard of the residual add GEMM `op` may run
/// ([`residual_add`]), in the add's row layout on `tiles` tiles (the
/// layout a repeat carries a value in, too).
fn residual_shard(
    graph: &Graph,
    readers: &HashMap<TensorId, (OpId, u32)>,
    op: OpId,
    output: TensorId,
    tiles: u32,
) -> Option<u64> {
    let r = residual_add(graph, readers, op, output)?;
    let t = graph.tensor(r.sum);
    let ty = row_layout(t.extents(), t.precision(), tiles).ok()?;
    Some(ty.max_shard_bytes() / t.precision().element_bytes().max(1))
}

/// An add that a GEMM's reduce step runs.
pub(super) struct ResidualFold {
    /// The add and its operands.
    pub of: ResidualAdd,
    /// The add's layout (of its result's precision): where the partials
    /// are summed.
    pub layout: TensorType,
}

impl Lowerer<'_> {
    /// The add reading `gemm_output` of GEMM `gemm` that its reduce may
    /// run ([`residual_add`]), with the add's layout.
    pub(super) fn residual_fold(
        &self,
        gemm: OpId,
        gemm_output: TensorId,
    ) -> Result<Option<ResidualFold>, LowerError> {
        let Some(of) = residual_add(self.graph, &self.readers, gemm, gemm_output) else {
            return Ok(None);
        };
        let layout = self.add_layout(of.add, of.sum)?;
        Ok(Some(ResidualFold { of, layout }))
    }

    /// Runs `fold`'s add on every shard of `y` (the GEMM's sum, in the
    /// add's tiling) after the reduce's calls, writing the add's result.
    pub(super) fn fold_calls(
        &mut self,
        fold: &ResidualFold,
        y: BufferId,
        calls: &mut Vec<(TileId, Codelet)>,
    ) -> Result<(), LowerError> {
        let ResidualAdd { add, residual, sum } = fold.of;
        let out_ty = fold.layout.clone();
        let residual_ty = self.layout(
            format!("operand of {add}"),
            row_major(
                out_ty.shape().extents(),
                self.graph.tensor(residual).precision(),
                out_ty.tiling().clone(),
            ),
        )?;
        let r = self.ensure(residual, residual_ty, Attrs::default())?;
        let z = self.output(add, sum, out_ty.clone())?;
        for (tile, rows, cols) in shard_rows(&out_ty)? {
            calls.push((
                tile,
                Codelet::Add {
                    a: y.into(),
                    b: r.into(),
                    out: z.into(),
                    rows,
                    cols,
                    broadcast_rows: false,
                },
            ));
        }
        self.folded.insert(add);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::parse_fixture;

    /// In the tiny fixture, the adds after the out projection and fc2 of
    /// every layer, and the head's, are residual adds of their GEMMs; no
    /// other GEMM has one (qkv and fc1 feed attention and GELU).
    #[test]
    fn residual_adds_are_found_for_the_gemms_an_add_alone_reads() {
        let text = include_str!("../../../../fixtures/tiny-2l-h64.json");
        let graph = parse_fixture(text).expect("the fixture parses");
        let readers = readers(&graph);
        let mut found = Vec::new();
        for (op, node) in graph.ops().iter() {
            let Op::Gemm { output, .. } = *node else {
                continue;
            };
            if let Some(r) = residual_add(&graph, &readers, op, output) {
                let (gemm, sum) = (graph.tensor(output).name(), graph.tensor(r.sum).name());
                assert!(r.residual != output);
                found.push(format!("{gemm}+{sum}"));
            }
        }
        assert_eq!(
            found,
            [
                "enc0.out+enc0.res",
                "enc0.fc2+x1",
                "enc1.out+enc1.res",
                "enc1.fc2+x2",
                "head.fc2+head.sum",
            ]
        );
    }
}
