//! The per-op check: every op's device result against the reference
//! evaluated on the device's own inputs to that op.
//!
//! The end-to-end comparison must be loose (an FP8 cast turns a one-ulp
//! difference into a whole step, and steps spread), so it lets through a
//! wrong op whose error stays small, such as a GEMM adding a bias that is
//! off by 0.02. This check has no such excuse: an op fed the device's own
//! inputs must reproduce the reference within the tight per-op tolerance
//! ([`Tolerance::op`], and [`Tolerance::gemm_f16_partials`] for GEMMs,
//! whose device sums run in F16 partials), so any per-op error larger than
//! the arithmetic's own noise fails, naming the op, its tensor and the
//! worst element. A long GEMM's F16 partials make its element-wise bound
//! wide, so GEMM outputs also get a column test (`column_bias`): rounding
//! errors average out over a column's rows, an error shared by the column
//! (a wrong bias) does not.
//!
//! What it reads: after every step, each buffer the step wrote that holds
//! a graph tensor — a tensor's home (an activation or output buffer named
//! after it; inside a repeat, the body buffer stands for the iteration's
//! tensor) or the buffer carrying a value between iterations — is read
//! back from the tile images and becomes that tensor's device value (the
//! first time only). The op producing it is then evaluated with
//! [`evaluate_op`] on the device values of its inputs (supplied values for
//! inputs and weights; tensors the device never materialises, such as
//! slices read through, are derived from their own inputs by the
//! reference, which is exact for data movement) and compared. A device
//! value is dropped once every op reading it has been checked, so memory
//! stays near the live set of the graph. Padding clears are not results
//! and are ignored.

use std::collections::HashMap;

use ipu_layout::{EntityId, Precision};
use ipu_package::graph::{Graph, Op, OpId, Repeat, SoftmaxPrecision, TensorId, ValueSet};
use ipu_package::program::{Buffer, BufferRole};

use crate::SimError;
use crate::reference::{Comparison, ReferenceConfig, Tolerance, compare, evaluate_op};

/// An op whose device result is out of tolerance.
#[derive(Clone, Debug, PartialEq)]
pub struct OpMismatch {
    /// The op.
    pub op: OpId,
    /// Its kind, as the fixture spells it.
    pub kind: &'static str,
    /// Its output tensor's name.
    pub tensor: String,
    /// The step after which the output was read.
    pub step: String,
    /// The worst element's row-major index.
    pub element: usize,
    /// The worst element's coordinates.
    pub coordinates: Vec<u64>,
    /// Its device value.
    pub device: f32,
    /// Its reference value.
    pub reference: f32,
    /// The whole comparison.
    pub comparison: Comparison,
    /// The tolerance applied.
    pub tolerance: Tolerance,
    /// The reference tensor's RMS.
    pub rms: f32,
    /// When the elements pass but a GEMM output column is off on average
    /// (a systematic error such as a wrong bias): `(column, mean error,
    /// allowed mean error)`.
    pub column: Option<(u64, f32, f32)>,
}

impl std::fmt::Display for OpMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.comparison;
        write!(
            f,
            "per-op check failed: {} ({}) writing `{}` (read after step `{}`) disagrees with the \
             reference evaluated on the device's own inputs: element {:?} is {} on the device \
             but {} in the reference; {} of {} elements are out of tolerance, max abs error {}, \
             normalised RMS error {}; the op's lowering, kernel or operand exchange is wrong",
            self.op,
            self.kind,
            self.tensor,
            self.step,
            self.coordinates,
            self.device,
            self.reference,
            c.violations,
            c.elements,
            c.max_abs,
            c.rms_error
        )?;
        if let Some((r, d)) = c.length_mismatch {
            write!(f, " (lengths {r} and {d} differ)")?;
        }
        if let Some((column, mean, allowed)) = self.column {
            write!(
                f,
                "; column {column} is off by {mean} on average over its rows, more than the \
                 {allowed} its rounding noise allows (the tensor's reference RMS is {})",
                self.rms
            )?;
        }
        Ok(())
    }
}

/// The tolerance the per-op check applies to `op`: [`Tolerance::op`] of
/// the output precision, or for a GEMM [`Tolerance::gemm_f16_partials`]
/// over its inner extent in steps of the AMP group (8 products for FP8
/// rows, 4 for F16). An attention with F16 keys gets the same over its
/// keys, in steps of 4: on the AMP its second product keeps F16 partial
/// sums of the (scaled) probabilities times the values, which on the
/// whole SigLIP b2 put 16 of 1.68 M elements a few F16 steps from the
/// reference (7.3e-4 at most, normalised RMS error 7.0e-4). An attention
/// that rounds its exponentials to FP8 gets
/// [`Tolerance::attention_fp8_probabilities`].
pub fn op_tolerance(graph: &Graph, op: &Op) -> Tolerance {
    let precision = graph.tensor(op.output()).precision();
    match op {
        Op::Gemm { left, right, .. } => {
            let k = graph.tensor(*right).extents().first().copied().unwrap_or(0);
            let group = if graph.tensor(*left).precision().is_fp8() {
                8
            } else {
                4
            };
            Tolerance::gemm_f16_partials(precision, k, group)
        }
        Op::Attention {
            k,
            softmax: SoftmaxPrecision::F16Fp8,
            ..
        } => {
            let keys = graph.tensor(*k).extents().get(1).copied().unwrap_or(0);
            Tolerance::attention_fp8_probabilities(precision, keys)
        }
        // A causal row sums fewer keys than `tokens_kv`: the bound over
        // all of them holds for it too.
        Op::Attention { k, .. } if graph.tensor(*k).precision() == Precision::F16 => {
            let keys = graph.tensor(*k).extents().get(1).copied().unwrap_or(0);
            Tolerance::gemm_f16_partials(precision, keys, 4)
        }
        _ => Tolerance::op(precision),
    }
}

/// The per-op check's state during a run.
pub(crate) struct Oracle<'g> {
    graph: &'g Graph,
    supplied: &'g ValueSet,
    /// Device (or derived) values held until every reader is checked.
    values: HashMap<TensorId, Vec<f32>>,
    /// Per tensor: ops reading it that are not yet checked or derived.
    readers_left: Vec<u32>,
    /// Per tensor: its value was held and dropped (later copies are not
    /// results).
    retired: Vec<bool>,
    /// Per op: checked or derived.
    done: Vec<bool>,
    /// Ops checked against the reference.
    pub(crate) checked: u64,
}

impl<'g> Oracle<'g> {
    pub(crate) fn new(graph: &'g Graph, supplied: &'g ValueSet) -> Self {
        let tensors = graph.tensors().len();
        let mut readers_left = vec![0u32; tensors];
        for (_, op) in graph.ops().iter() {
            for t in op.inputs() {
                if let Some(n) = readers_left.get_mut(t.index()) {
                    *n = n.saturating_add(1);
                }
            }
        }
        Self {
            graph,
            supplied,
            values: HashMap::new(),
            readers_left,
            retired: vec![false; tensors],
            done: vec![false; graph.ops().len()],
            checked: 0,
        }
    }

    /// The graph tensor `buffer` holds after a step that wrote it, in the
    /// iteration `context` of a repeat (if any): its home tensor, or the
    /// value carried between iterations. `by_compute` says whether a
    /// compute step wrote it (the carried buffer may be a temporary copy).
    pub(crate) fn holder(
        &self,
        buffer: &Buffer,
        context: Option<(&Repeat, u32)>,
        by_compute: bool,
    ) -> Option<TensorId> {
        let temporary = buffer.role == BufferRole::Temporary;
        let name = match buffer.role {
            BufferRole::Activation | BufferRole::Output => buffer.name.as_str(),
            // A temporary copy of a tensor is named `tensor@id`; only the
            // carried value's copy is written by a compute step.
            BufferRole::Temporary if by_compute => buffer
                .name
                .rsplit_once('@')
                .filter(|(_, id)| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
                .map(|(t, _)| t)?,
            _ => return None,
        };
        let t = self.graph.tensor_by_name(name)?;
        match context {
            Some((r, k)) => {
                if let Some(c) = r.carries().iter().find(|c| c.initial == t) {
                    return r.body_tensor(k, c.body_tensor);
                }
                if temporary {
                    return None;
                }
                match r.locate_tensor(t) {
                    Some((0, position)) => r.body_tensor(k, position),
                    _ => Some(t),
                }
            }
            None if temporary => None,
            None => Some(t),
        }
    }

    /// Where `tensor`'s producing op comes in the graph's (topological)
    /// order; tensors no op produces come first.
    pub(crate) fn producer_position(&self, tensor: TensorId) -> Option<u32> {
        self.graph.producer(tensor).map(|op| op.as_u32())
    }

    /// Whether `tensor` still wants a device value.
    pub(crate) fn wants(&self, tensor: TensorId) -> bool {
        !self.values.contains_key(&tensor)
            && !self.retired.get(tensor.index()).copied().unwrap_or(true)
            && self.graph.tensor(tensor).kind().is_computed()
    }

    /// Takes `device` as `tensor`'s device value (read after `step`) and
    /// checks the op producing it.
    pub(crate) fn capture(
        &mut self,
        tensor: TensorId,
        device: Vec<f32>,
        step: &str,
    ) -> Result<(), SimError> {
        if !self.wants(tensor) {
            return Ok(());
        }
        let expected = self.graph.tensor(tensor).element_count();
        if device.len() as u64 != expected {
            // Not this tensor's value after all (a buffer of another shape
            // that shares the name); nothing to check.
            return Ok(());
        }
        self.values.insert(tensor, device);
        let Some(op) = self.graph.producer(tensor) else {
            return Ok(());
        };
        if self.done.get(op.index()).copied().unwrap_or(true) {
            return Ok(());
        }
        let reference = self.evaluate(op)?;
        let node = self.graph.op(op);
        let tolerance = op_tolerance(self.graph, node);
        let device = self.values.get(&tensor).map(Vec::as_slice).unwrap_or(&[]);
        let comparison = compare(&reference, device, tolerance);
        self.checked += 1;
        let columns = self
            .graph
            .tensor(tensor)
            .extents()
            .last()
            .copied()
            .unwrap_or(1);
        let column = match node {
            Op::Gemm { .. } if comparison.pass => column_bias(&reference, device, columns),
            _ => None,
        };
        if !comparison.pass || column.is_some() {
            let element = match column {
                Some((j, _, _)) => worst_in_column(&reference, device, columns, j),
                None => comparison.worst.unwrap_or(0),
            };
            let t = self.graph.tensor(tensor);
            return Err(SimError::OpMismatch(Box::new(OpMismatch {
                op,
                kind: node.kind_name(),
                tensor: t.name().to_owned(),
                step: step.to_owned(),
                element,
                coordinates: coordinates(t.extents(), element as u64),
                device: device.get(element).copied().unwrap_or(f32::NAN),
                reference: reference.get(element).copied().unwrap_or(f32::NAN),
                comparison,
                tolerance,
                column,
                rms: rms(&reference),
            })));
        }
        self.finish(op);
        Ok(())
    }

    /// Evaluates `op` on the values of its inputs (deriving those the
    /// device never materialised).
    fn evaluate(&mut self, op: OpId) -> Result<Vec<f32>, SimError> {
        let node = self.graph.op(op);
        let mut inputs = ValueSet::new();
        for t in node.inputs() {
            self.ensure(t, 0)?;
            let v = match self.values.get(&t) {
                Some(v) => v.clone(),
                None => self
                    .supplied
                    .get(t)
                    .map(<[f32]>::to_vec)
                    .unwrap_or_default(),
            };
            inputs.insert(t, v);
        }
        evaluate_op(self.graph, op, &inputs, &ReferenceConfig::default())
            .map_err(|source| SimError::Reference { op, source })
    }

    /// Makes `tensor`'s value available: supplied, held, or derived from
    /// its producer's inputs.
    fn ensure(&mut self, tensor: TensorId, depth: usize) -> Result<(), SimError> {
        if !self.graph.tensor(tensor).kind().is_computed() || self.values.contains_key(&tensor) {
            return Ok(());
        }
        let Some(op) = self.graph.producer(tensor) else {
            return Ok(());
        };
        // A graph is acyclic, so the chain of producers ends; the depth
        // bound only guards the stack against a malformed graph.
        if depth > self.graph.ops().len() {
            return Ok(());
        }
        for t in self.graph.op(op).inputs() {
            self.ensure(t, depth + 1)?;
        }
        let value = self.evaluate(op)?;
        self.values.insert(tensor, value);
        self.finish(op);
        Ok(())
    }

    /// Marks `op` done and drops inputs nobody else reads, and its output
    /// if nobody reads it.
    fn finish(&mut self, op: OpId) {
        if let Some(d) = self.done.get_mut(op.index()) {
            *d = true;
        }
        let node = self.graph.op(op);
        for t in node.inputs() {
            if let Some(n) = self.readers_left.get_mut(t.index()) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.release(t);
                }
            }
        }
        let out = node.output();
        if self.readers_left.get(out.index()).copied() == Some(0) {
            self.release(out);
        }
    }

    fn release(&mut self, t: TensorId) {
        if self.values.remove(&t).is_some()
            && let Some(r) = self.retired.get_mut(t.index())
        {
            *r = true;
        }
    }
}

/// The column test's floor, relative to the tensor's RMS (see
/// `column_bias`).
const COLUMN_FLOOR: f64 = 1.0 / 256.0;

/// Rows a GEMM output needs before its column means are tested: with fewer,
/// the rounding noise of a mean is too large to tell from a bias.
const MIN_ROWS_FOR_COLUMN_TEST: u64 = 32;

/// The first GEMM output column whose mean error over the rows exceeds
/// what rounding noise allows: `(column, mean error, allowed)`.
///
/// F16 partial sums and the final rounding are unbiased (round to nearest,
/// ties to even), so an output column's errors mostly average out over its
/// rows: for independent rows their mean has a standard error of
/// `s / √rows`, with `s` the spread of the errors around their column
/// means. A wrong bias (or any error shared by a column) moves the mean by
/// its own size whatever the spread, which lets this test catch errors far
/// below the element-wise tolerance of a long GEMM. Rows are not quite
/// independent (deep in a transformer the tokens share components, so
/// their partial sums round alike), so besides eight standard errors it
/// allows 2^-8 of the tensor's RMS. With a floor of 2^-11 of the RMS a
/// 27-layer SigLIP so400m run failed at its third layer's attention output
/// projection (a column off by 3.8e-4 on average against 3.6e-4 allowed);
/// with 2^-8 the same run passes every checked op, and a bias off by 0.02
/// stays caught while the tensor's RMS is below 5.
fn column_bias(reference: &[f32], device: &[f32], columns: u64) -> Option<(u64, f32, f32)> {
    let n = usize::try_from(columns).ok().filter(|&n| n > 0)?;
    if reference.len() != device.len() || reference.len() % n != 0 {
        return None;
    }
    let rows = reference.len() / n;
    if (rows as u64) < MIN_ROWS_FOR_COLUMN_TEST {
        return None;
    }
    let mut sum = vec![0.0f64; n];
    let mut count = vec![0u64; n];
    let mut norm = 0.0f64;
    for (i, (&r, &d)) in reference.iter().zip(device).enumerate() {
        let e = f64::from(d) - f64::from(r);
        if e.is_finite() && r.is_finite() {
            sum[i % n] += e;
            count[i % n] += 1;
            norm += f64::from(r) * f64::from(r);
        }
    }
    let mean: Vec<f64> = sum
        .iter()
        .zip(&count)
        .map(|(&s, &c)| if c > 0 { s / c as f64 } else { 0.0 })
        .collect();
    let mut spread = 0.0f64;
    let mut terms = 0u64;
    for (i, (&r, &d)) in reference.iter().zip(device).enumerate() {
        let e = f64::from(d) - f64::from(r);
        if e.is_finite() && r.is_finite() {
            spread += (e - mean[i % n]).powi(2);
            terms += 1;
        }
    }
    let dof = terms.saturating_sub(n as u64).max(1);
    let s = (spread / dof as f64).sqrt();
    let rms = (norm / terms.max(1) as f64).sqrt();
    let allowed = 8.0 * s / (rows as f64).sqrt() + rms * COLUMN_FLOOR;
    mean.iter()
        .enumerate()
        .find(|(_, m)| m.abs() > allowed)
        .map(|(j, &m)| (j as u64, m as f32, allowed as f32))
}

/// The RMS of the finite values of `x`.
fn rms(x: &[f32]) -> f32 {
    let (sum, n) = x
        .iter()
        .filter(|v| v.is_finite())
        .fold((0.0f64, 0u64), |(s, n), &v| {
            (s + f64::from(v).powi(2), n + 1)
        });
    (sum / n.max(1) as f64).sqrt() as f32
}

/// The element of `column` with the largest error.
fn worst_in_column(reference: &[f32], device: &[f32], columns: u64, column: u64) -> usize {
    let n = columns.max(1) as usize;
    let mut worst = (0usize, -1.0f64);
    for (i, (&r, &d)) in reference.iter().zip(device).enumerate() {
        if (i % n) as u64 == column {
            let e = (f64::from(d) - f64::from(r)).abs();
            if e > worst.1 {
                worst = (i, e);
            }
        }
    }
    worst.0
}

/// The row-major coordinates of element `index` of a tensor of `extents`.
fn coordinates(extents: &[u64], mut index: u64) -> Vec<u64> {
    let mut out = vec![0u64; extents.len()];
    for (c, &e) in out.iter_mut().zip(extents).rev() {
        if e > 0 {
            *c = index % e;
            index /= e;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipu_layout::Precision;

    /// A SigLIP-sized GEMM output (1458 rows × 64 columns of RMS 1) with
    /// rounding-sized noise: the element-wise bound of a 4304-deep GEMM
    /// lets a 0.02 bias error on one column through, the column test does
    /// not, and it stays quiet on noise alone.
    #[test]
    fn the_column_test_catches_a_bias_the_element_bound_misses() {
        let (rows, columns) = (1458usize, 64usize);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut uniform = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        let reference: Vec<f32> = (0..rows * columns)
            .map(|_| (uniform() * 1.7) as f32)
            .collect();
        let noisy: Vec<f32> = reference
            .iter()
            .map(|&r| r + (uniform() * 0.01) as f32)
            .collect();
        let mut biased = noisy.clone();
        for v in biased.iter_mut().skip(17).step_by(columns) {
            *v += 0.02;
        }
        let tolerance = Tolerance::gemm_f16_partials(Precision::F16, 4304, 8);
        assert!(compare(&reference, &noisy, tolerance).pass);
        assert!(compare(&reference, &biased, tolerance).pass);
        assert_eq!(column_bias(&reference, &noisy, columns as u64), None);
        let (column, mean, allowed) =
            column_bias(&reference, &biased, columns as u64).expect("the biased column fails");
        assert_eq!(column, 17);
        assert!(
            mean > allowed && (mean - 0.02).abs() < 0.002,
            "{mean} {allowed}"
        );
    }
}
