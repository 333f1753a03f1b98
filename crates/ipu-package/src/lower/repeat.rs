//! Lowering of a repeated layer: its body once, with one buffer per
//! iteration for its weights and one carried buffer for the value each
//! iteration hands to the next.

use super::*;

impl<'a> Lowerer<'a> {
    pub(super) fn lower_repeat(&mut self, r: &'a Repeat) -> Result<(), LowerError> {
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
        self.close(&StepLabel {
            op: None,
            role: StepRole::EnterRepeat,
            name: r.name().to_owned(),
        });

        let outer = std::mem::take(&mut self.steps);
        self.body_weights = Some(Vec::new());
        self.body = Some(r);
        for op in first {
            self.lower_op(OpId::from_u32(op as u32))?;
        }
        self.body = None;
        self.close(&StepLabel {
            op: None,
            role: StepRole::EndOfRepeat,
            name: r.name().to_owned(),
        });
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
                    padding_read: None,
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
        self.steps.push(Step::Repeat(RepeatStep {
            name: r.name().to_owned(),
            count: r.count(),
            body,
            iteration_buffers,
        }));
        // Iteration 0's copies are body temporaries: later readers outside
        // the body must not reuse them.
        self.cache
            .retain(|(t, _), _| !inside.contains(&(t.as_u32() as usize)));
        Ok(())
    }
}
