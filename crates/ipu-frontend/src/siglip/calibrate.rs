//! Choosing every FP8 scale of a SigLIP graph from data, and the F16
//! exceptions, with a record of each decision ([`PrecisionReport`]).
//!
//! ```text
//! template policy (which tensors are FP8: the fixture's layout)
//!   weights ──largest magnitude per role──► weight scales
//!   calibration images ──F32 graph, batch 1, every tensor kept──►
//!       largest magnitude of every FP8 cast's input per role ──► activation scales
//!   all-FP8 graph, and each F16 group alone ──outputs vs F32──► F16 groups kept
//!   that graph ──smallest per-input output cosine vs the fidelity target──►
//!       GEMM operands raised to F16 where it is missed (`fidelity`)
//!   final graph ──every tensor kept──► per-cast saturation and error, report
//! ```
//!
//! - **Weights**: a role's scale is the smallest power of two with which
//!   its largest magnitude fits the format (`max|w| ≤ 240·2^s` for F143),
//!   so no weight saturates. Encoder weights take one scale per role (every
//!   layer's op `j` must have the same precisions, as the layers are one
//!   repeat), chosen from the union of all layers' values.
//! - **Activations** (the FP8 casts before every GEMM): the calibration
//!   inputs run through the graph with every tensor in F32, and a cast
//!   role's scale is the smallest power of two with which
//!   [`ACTIVATION_HEADROOM`] times the largest magnitude its input reached
//!   (over every layer and input) fits. FP8 is a floating-point format, so
//!   the headroom costs no precision for normal values; it keeps inputs
//!   somewhat beyond the calibration set from saturating.
//! - **F16 groups**: GEMM biases, layer-norm gains and offsets, and
//!   weights added to activations (the position embedding) are candidates.
//!   With every candidate in FP8 and then with each group alone in F16,
//!   the graph runs on the calibration inputs and its outputs are compared
//!   with the F32 graph's. A group stays in F16 when it lowers the largest
//!   output relative RMS error by at least [`F16_MIN_GAIN`] (relative).
//!   Whether the memory allows it is the build's to say: these groups are
//!   vectors and one `[tokens, hidden]` table, a fraction of a percent of
//!   the weights, and a caller whose build does not fit calibrates again
//!   with [`F16Groups::Refused`], which records why (`build-package` does).
//! - **Fidelity target** ([`CalibrationOptions::min_cosine`], 0.995 by
//!   default): every output's cosine with the F32 graph's, per
//!   calibration input, must reach the target with headroom; where FP8
//!   does not, GEMM operands (weights, activation casts, the groups left
//!   in FP8) are raised to F16 by measurement (module `fidelity`).
//! - **Report**: the final graph runs on the calibration inputs once more;
//!   each cast's saturated fraction and error (`‖cast − input‖ / ‖input‖`)
//!   are measured there, and F16 activations are checked for overflow.
//!   A tensor saturating more than the threshold (default
//!   [`SATURATION_THRESHOLD`]) is listed by [`PrecisionReport::saturating`].
//!
//! Calibration runs at batch 1, one input at a time (images do not
//! interact), so memory stays that of one image's activations. Graphs are
//! evaluated by the reference evaluator (`ipu_sim::evaluate_with`, with
//! `Keep::All` where every tensor is measured).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ipu_layout::Precision;
use ipu_package::graph::{Graph, Op, SoftmaxPrecision, TensorId, TensorKind, ValueSet};
use ipu_sim::reference::Keep;
use ipu_sim::{ReferenceConfig, ReferenceError, evaluate_with};

mod fidelity;
mod groups;
mod measure;
mod records;

use groups::{Candidate, choose_f16_groups, f16_candidates};

pub use fidelity::{FIDELITY_HEADROOM, MIN_COSINE};

use measure::{OutputStats, Stats, finite, fp8_scale, quantised, relative};

use crate::error::{ImageError, ImportError};
use crate::imaging::synthetic_image;
use crate::siglip::graph::{BuildError, GraphOptions, build_graph};
use crate::siglip::policy::{PrecisionPolicy, role};
use crate::siglip::processor::patchify;
use crate::siglip::report::{CalibrationRecord, OutputRecord, PRECISION_FORMAT, PrecisionReport};
use crate::siglip::{Checkpoint, PATCHES};

/// The default fraction of saturated values above which a tensor is
/// reported: one value in a thousand.
pub const SATURATION_THRESHOLD: f64 = 1e-3;
/// Activation scales fit this many times the calibration maximum.
pub const ACTIVATION_HEADROOM: f64 = 2.0;
/// The least relative drop of the largest output error that keeps a group
/// in F16: 1 %.
pub const F16_MIN_GAIN: f64 = 0.01;

/// The images calibration runs on.
#[derive(Clone, Debug, PartialEq)]
pub enum CalibrationInputs {
    /// Image files, preprocessed as the checkpoint's processor says.
    Images(Vec<PathBuf>),
    /// This many built-in synthetic images ([`crate::imaging::synthetic`]).
    Synthetic(usize),
}

/// Options of [`calibrate`].
#[derive(Clone, Debug, PartialEq)]
pub struct CalibrationOptions {
    /// Which tensors are FP8 (and in which format), F16 or F32, and where
    /// the casts are: the layout of precisions whose scales are chosen,
    /// such as the default fixture's.
    pub template: PrecisionPolicy,
    /// The calibration images.
    pub inputs: CalibrationInputs,
    /// Saturated fraction above which a tensor is reported.
    pub saturation_threshold: f64,
    /// Whether GEMM biases, layer-norm parameters and position embeddings
    /// may stay in F16, and GEMM operands be raised to F16 for
    /// `min_cosine`.
    pub f16_groups: F16Groups,
    /// The fidelity target for the images a package runs on: every
    /// output's cosine with the F32 graph's at least this
    /// ([`MIN_COSINE`] by default). The calibration inputs must reach it
    /// with [`FIDELITY_HEADROOM`]; where FP8 does not, GEMM operands are
    /// raised to F16 (module `fidelity`). `None` for no target.
    pub min_cosine: Option<f64>,
}

/// Whether the F16 groups are considered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum F16Groups {
    /// Measured, and kept where they gain enough.
    Measure,
    /// Not considered, for the reason given (recorded in the report).
    Refused(String),
}

impl CalibrationOptions {
    /// The defaults around `template`: the synthetic images, the default
    /// threshold, F16 groups considered.
    pub fn new(template: PrecisionPolicy) -> Self {
        Self {
            template,
            inputs: CalibrationInputs::Synthetic(crate::imaging::SYNTHETIC_IMAGES),
            saturation_threshold: SATURATION_THRESHOLD,
            f16_groups: F16Groups::Measure,
            min_cosine: Some(MIN_COSINE),
        }
    }
}

/// Why calibration failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CalibrationError {
    /// No calibration input was given.
    #[error("calibration needs at least one image")]
    NoInputs,
    /// A calibration image could not be used.
    #[error("calibration image: {source}")]
    Image {
        /// Why.
        #[source]
        source: ImageError,
    },
    /// A graph could not be built with a candidate policy.
    #[error("cannot build the graph for calibration: {source}")]
    Build {
        /// Why.
        #[source]
        source: BuildError,
    },
    /// The weights do not fit a calibration graph.
    #[error("calibration: {source}")]
    Weights {
        /// Why.
        #[source]
        source: ImportError,
    },
    /// The reference evaluator failed.
    #[error("evaluating the {what} graph on calibration input `{input}` failed: {source}")]
    Evaluate {
        /// Which graph.
        what: &'static str,
        /// The input's label.
        input: String,
        /// The evaluator's error.
        #[source]
        source: ReferenceError,
    },
    /// A weight holds a NaN or an infinity, which no scale can represent.
    #[error("weight `{tensor}` holds a non-finite value; the checkpoint is damaged")]
    NonFinite {
        /// The weight.
        tensor: String,
    },
    /// The report's precision table does not read back: a bug here.
    #[error("bug in calibration: the precision table does not read back: {source}")]
    Report {
        /// Why.
        #[source]
        source: crate::siglip::report::ReportError,
    },
    /// The reference evaluator returned no values for a tensor
    /// calibration reads: a bug in the evaluator or here.
    #[error("bug in calibration: no values for `{tensor}` in the {what} graph")]
    Missing {
        /// The tensor.
        tensor: String,
        /// Which graph.
        what: &'static str,
    },
}

/// The result of [`calibrate`]: the precision of every tensor, and why.
#[derive(Clone, Debug)]
pub struct Calibration {
    policy: PrecisionPolicy,
    report: PrecisionReport,
}

impl Calibration {
    /// The calibration a precision report records (an earlier package's
    /// `model.json`), to build the same checkpoint again without
    /// calibrating: at another batch, or on other tiles.
    pub fn from_report(
        report: PrecisionReport,
    ) -> Result<Self, crate::siglip::report::ReportError> {
        let policy = report.policy()?;
        Ok(Self { policy, report })
    }

    /// The chosen precisions, for [`build_graph`].
    pub fn policy(&self) -> &PrecisionPolicy {
        &self.policy
    }

    /// Every decision with what was measured (the precision report).
    pub fn report(&self) -> &PrecisionReport {
        &self.report
    }
}

/// The tensor `id` is a view of, if a view op (slice, broadcast, reshape,
/// transpose: each keeps its input's precision) produces it.
fn view_source(graph: &Graph, id: TensorId) -> Option<TensorId> {
    graph.producer(id).and_then(|op| match graph.op(op) {
        Op::Slice { input, .. }
        | Op::Broadcast { input, .. }
        | Op::Reshape { input, .. }
        | Op::Transpose { input, .. } => Some(*input),
        _ => None,
    })
}

/// What calibration needs of a tower (the vision tower's [`Checkpoint`],
/// the text tower's [`TextCheckpoint`](crate::siglip::text::TextCheckpoint)):
/// its graph under a policy at batch 1, the weights of such a graph, and
/// the name of the graph's one input.
pub trait Calibrated {
    /// The tower's graph at batch 1 with `policy`'s precisions.
    fn calibration_graph(&self, policy: &PrecisionPolicy) -> Result<Graph, BuildError>;
    /// Every weight of `graph` (a graph of this tower), f32 as stored.
    fn weights_for(&self, graph: &Graph) -> Result<ValueSet, ImportError>;
    /// The graph's input that calibration inputs fill.
    fn input_name(&self) -> &'static str;
    /// Inputs of `graph` that follow from that input's `values` (CLIP's
    /// pooled rows from its token ids); none by default.
    fn derived_inputs(&self, _graph: &Graph, _values: &[f32]) -> Vec<(TensorId, Vec<f32>)> {
        Vec::new()
    }
}

impl Calibrated for Checkpoint {
    fn calibration_graph(&self, policy: &PrecisionPolicy) -> Result<Graph, BuildError> {
        build_graph(
            self.config(),
            &GraphOptions {
                name: "calibration".to_owned(),
                batch: 1,
                policy: policy.clone(),
            },
        )
    }

    fn weights_for(&self, graph: &Graph) -> Result<ValueSet, ImportError> {
        Checkpoint::weights_for(self, graph)
    }

    fn input_name(&self) -> &'static str {
        PATCHES
    }
}

/// One calibration input: its label and the graph input's values at
/// batch 1.
#[derive(Clone, Debug)]
pub struct Input {
    /// What it is called in the report.
    pub label: String,
    /// The values of the tower's input.
    pub values: Vec<f32>,
}

/// What the calibration graphs share: the tower and the inputs.
struct Runner<'a> {
    model: &'a dyn Calibrated,
    inputs: Vec<Input>,
    softmax: SoftmaxPrecision,
}

impl Runner<'_> {
    fn graph(&self, policy: &PrecisionPolicy) -> Result<Graph, CalibrationError> {
        self.model
            .calibration_graph(policy)
            .map_err(|source| CalibrationError::Build { source })
    }

    /// Evaluates `graph` on every input, handing each result (with the
    /// values supplied) to `visit`.
    fn run(
        &self,
        graph: &Graph,
        what: &'static str,
        keep_all: bool,
        mut visit: impl FnMut(usize, &ValueSet, &ValueSet) -> Result<(), CalibrationError>,
    ) -> Result<(), CalibrationError> {
        // One value set for every input: only `patches` changes, so the
        // weights (1.7 GB of f32 for so400m) are not copied per input.
        let mut values = self
            .model
            .weights_for(graph)
            .map_err(|source| CalibrationError::Weights { source })?;
        let input = self.model.input_name();
        let patches = graph
            .tensor_by_name(input)
            .ok_or(CalibrationError::Missing {
                tensor: input.to_owned(),
                what,
            })?;
        let config = ReferenceConfig {
            keep: if keep_all { Keep::All } else { Keep::Outputs },
            ..ReferenceConfig::default()
        };
        for (i, input) in self.inputs.iter().enumerate() {
            values.insert(patches, input.values.clone());
            for (tensor, derived) in self.model.derived_inputs(graph, &input.values) {
                values.insert(tensor, derived);
            }
            let out = evaluate_with(graph, &values, &config).map_err(|source| {
                CalibrationError::Evaluate {
                    what,
                    input: input.label.clone(),
                    source,
                }
            })?;
            visit(i, &values, &out)?;
        }
        Ok(())
    }

    /// The outputs of `policy`'s graph against the F32 outputs: per
    /// output name, the accumulated statistics.
    fn outputs_against(
        &self,
        policy: &PrecisionPolicy,
        what: &'static str,
        f32_outputs: &[BTreeMap<String, Vec<f32>>],
    ) -> Result<BTreeMap<String, OutputStats>, CalibrationError> {
        let graph = self.graph(policy)?;
        let mut stats: BTreeMap<String, OutputStats> = BTreeMap::new();
        self.run(&graph, what, false, |i, _, out| {
            for (name, reference) in &f32_outputs[i] {
                let ours = graph
                    .tensor_by_name(name)
                    .and_then(|id| out.get(id))
                    .ok_or_else(|| CalibrationError::Missing {
                        tensor: name.clone(),
                        what,
                    })?;
                stats.entry(name.clone()).or_default().add(reference, ours);
            }
            Ok(())
        })?;
        Ok(stats)
    }
}

/// The largest output relative RMS error.
fn worst(stats: &BTreeMap<String, OutputStats>) -> f64 {
    stats
        .values()
        .map(|s| relative(s.err2, s.ref2))
        .fold(0.0, f64::max)
}

/// The calibration inputs at batch 1.
fn inputs(
    checkpoint: &Checkpoint,
    inputs: &CalibrationInputs,
) -> Result<Vec<Input>, CalibrationError> {
    let side = checkpoint.config().image_size() as usize;
    let mut out = Vec::new();
    let mut add = |label: String, pixels: Vec<f32>| -> Result<(), CalibrationError> {
        let mut patches = Vec::new();
        patchify(checkpoint.config(), &pixels, &mut patches)
            .map_err(|source| CalibrationError::Image { source })?;
        out.push(Input {
            label,
            values: patches,
        });
        Ok(())
    };
    match inputs {
        CalibrationInputs::Images(paths) => {
            for path in paths {
                let pixels = checkpoint
                    .processor()
                    .pixel_values(path)
                    .map_err(|source| CalibrationError::Image { source })?;
                let label = path.file_name().map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().into(),
                );
                add(label, pixels)?;
            }
        }
        CalibrationInputs::Synthetic(count) => {
            for k in 0..*count {
                let label = format!("synthetic-{k}");
                let image = synthetic_image(k, side);
                let pixels = checkpoint
                    .processor()
                    .pixel_values_of(&image, Path::new(&label))
                    .map_err(|source| CalibrationError::Image { source })?;
                add(label, pixels)?;
            }
        }
    }
    if out.is_empty() {
        return Err(CalibrationError::NoInputs);
    }
    Ok(out)
}

/// Chooses every FP8 scale of the checkpoint's graph under
/// `options.template` from the weights and from calibration runs of the
/// reference evaluator, decides the F16 groups, and measures the result
/// (see the module header).
pub fn calibrate(
    checkpoint: &Checkpoint,
    options: &CalibrationOptions,
) -> Result<Calibration, CalibrationError> {
    calibrate_inputs(checkpoint, inputs(checkpoint, &options.inputs)?, options)
}

/// [`calibrate`] for any tower, on inputs already made (`options.inputs`
/// is not read).
pub fn calibrate_inputs(
    model: &dyn Calibrated,
    inputs: Vec<Input>,
    options: &CalibrationOptions,
) -> Result<Calibration, CalibrationError> {
    if inputs.is_empty() {
        return Err(CalibrationError::NoInputs);
    }
    let runner = Runner {
        model,
        inputs,
        softmax: options.template.softmax(),
    };
    let template = runner.graph(&options.template)?;
    let roles = Roles::of(&template);
    let weights = model
        .weights_for(&template)
        .map_err(|source| CalibrationError::Weights { source })?;
    let weight_stats = weight_scales(&template, &weights, &roles)?;
    let f32_run = run_f32(&runner, &roles)?;
    let (all_fp8, cast_precision) = all_fp8_policy(options, &roles, &weight_stats, &f32_run);
    let baseline = runner.outputs_against(&all_fp8, "all-FP8", &f32_run.outputs)?;
    let candidates = f16_candidates(&template, &roles, &weight_stats);
    let choice = choose_f16_groups(
        &runner,
        options,
        &candidates,
        &all_fp8,
        worst(&baseline),
        &f32_run.outputs,
    )?;
    let mut final_graph = runner.graph(&choice.policy)?;
    let (mut measured, mut output_stats) = measure_final(&runner, &final_graph, &f32_run.outputs)?;
    let (start_cosine, worst_input) = fidelity::smallest_cosine(&output_stats);
    let raised = fidelity::raise(
        &runner,
        &fidelity::Start {
            template: &template,
            roles: &roles,
            weight_stats: &weight_stats,
            kept: &choice.kept,
            groups: &candidates,
            policy: &choice.policy,
            cosine: start_cosine,
            worst_input,
        },
        options.min_cosine,
        &options.f16_groups,
        &f32_run.outputs,
    )?;
    let mut kept = choice.kept.clone();
    if raised.policy != choice.policy {
        final_graph = runner.graph(&raised.policy)?;
        (measured, output_stats) = measure_final(&runner, &final_graph, &f32_run.outputs)?;
        for r in &raised.weights {
            kept.insert(r.clone(), fidelity::GROUP);
        }
    }
    let tensors = records::tensor_records(&records::Measured {
        final_graph: &final_graph,
        template: &template,
        weights: &weights,
        roles: &roles,
        weight_stats: &weight_stats,
        kept: &kept,
        cast_precision: &cast_precision,
        cast_max: &f32_run.cast_max,
        measured: &measured,
    });
    let outputs = output_stats
        .iter()
        .map(|(name, s)| OutputRecord {
            output: name.clone(),
            relative_rms: relative(s.err2, s.ref2),
            cosine: s.cosine(),
            all_fp8_relative_rms: baseline.get(name).map_or(0.0, |b| relative(b.err2, b.ref2)),
            smallest_cosine: s.worst.map(|(c, _)| finite(c)),
        })
        .collect();
    let report = PrecisionReport {
        format: PRECISION_FORMAT.to_owned(),
        softmax: runner.softmax.name().to_owned(),
        calibration: CalibrationRecord {
            inputs: runner.inputs.iter().map(|i| i.label.clone()).collect(),
            saturation_threshold: options.saturation_threshold,
            activation_headroom: ACTIVATION_HEADROOM,
            f16_min_gain: F16_MIN_GAIN,
        },
        outputs,
        groups: choice.records,
        fidelity: Some(raised.record),
        tensors,
    };
    // The report is the policy's one source: rebuild the policy from it.
    let policy = report
        .policy()
        .map_err(|source| CalibrationError::Report { source })?;
    Ok(Calibration { policy, report })
}

/// The template's tensor roles in graph order with their member tensors,
/// and each FP8 cast role with the names of the tensors its casts read.
struct Roles {
    order: Vec<String>,
    members: BTreeMap<String, Vec<String>>,
    cast_inputs: BTreeMap<String, Vec<String>>,
}

impl Roles {
    fn of(template: &Graph) -> Self {
        let mut order: Vec<String> = Vec::new();
        let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for tensor in template.tensors().values() {
            let r = role(tensor.name());
            if !members.contains_key(&r) {
                order.push(r.clone());
            }
            members.entry(r).or_default().push(tensor.name().to_owned());
        }
        // Cast role → the names of the tensors its casts read.
        let mut cast_inputs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for op in template.ops().values() {
            if let Op::CastFp8 { input, output } = op {
                cast_inputs
                    .entry(role(template.tensor(*output).name()))
                    .or_default()
                    .push(template.tensor(*input).name().to_owned());
            }
        }

        Self {
            order,
            members,
            cast_inputs,
        }
    }
}

/// Per weight role: its precision with the scale chosen, and the
/// quantisation statistics of its members in that precision.
type WeightScales = BTreeMap<String, (Precision, Stats)>;

/// Weights: one scale per role from the union of its layers' values.
fn weight_scales(
    template: &Graph,
    weights: &ValueSet,
    roles: &Roles,
) -> Result<WeightScales, CalibrationError> {
    let mut weight_stats: BTreeMap<String, (Precision, Stats)> = BTreeMap::new();
    for id in template.weights() {
        let tensor = template.tensor(id);
        let values = weights.get(id).unwrap_or(&[]);
        if values.iter().any(|v| !v.is_finite()) {
            return Err(CalibrationError::NonFinite {
                tensor: tensor.name().to_owned(),
            });
        }
        let r = role(tensor.name());
        let max = values
            .iter()
            .fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
        let entry = weight_stats
            .entry(r)
            .or_insert((tensor.precision(), Stats::default()));
        entry.1.max_abs = entry.1.max_abs.max(max);
    }
    for (r, (precision, stats)) in &mut weight_stats {
        *precision = fp8_scale(*precision, stats.max_abs);
        let mut measured = Stats::default();
        for name in &roles.members[r] {
            let id = template.tensor_by_name(name);
            let values = id.and_then(|id| weights.get(id)).unwrap_or(&[]);
            measured.add(
                values,
                &quantised(*precision, values),
                precision.max_value(),
            );
        }
        *stats = measured;
    }

    Ok(weight_stats)
}

/// What the F32 graph computes on the calibration inputs: the largest
/// magnitude each cast role's input reaches, and every output, per input.
struct F32Run {
    cast_max: BTreeMap<String, f64>,
    outputs: Vec<BTreeMap<String, Vec<f32>>>,
}

/// Activations: the F32 graph on every input, every tensor kept.
fn run_f32(runner: &Runner<'_>, roles: &Roles) -> Result<F32Run, CalibrationError> {
    let f32_graph = runner.graph(&PrecisionPolicy::all_f32())?;
    let mut cast_max: BTreeMap<String, f64> = BTreeMap::new();
    let mut f32_outputs: Vec<BTreeMap<String, Vec<f32>>> = Vec::new();
    runner.run(&f32_graph, "F32", true, |_, supplied, out| {
        for (r, names) in &roles.cast_inputs {
            for name in names {
                let values = f32_graph
                    .tensor_by_name(name)
                    .and_then(|id| out.get(id).or_else(|| supplied.get(id)))
                    .ok_or_else(|| CalibrationError::Missing {
                        tensor: name.clone(),
                        what: "F32",
                    })?;
                let max = values
                    .iter()
                    .fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
                let e = cast_max.entry(r.clone()).or_insert(0.0);
                *e = e.max(max);
            }
        }
        let mut outputs = BTreeMap::new();
        for id in f32_graph.outputs() {
            let values = out.get(id).ok_or_else(|| CalibrationError::Missing {
                tensor: f32_graph.tensor(id).name().to_owned(),
                what: "F32",
            })?;
            outputs.insert(f32_graph.tensor(id).name().to_owned(), values.to_vec());
        }
        f32_outputs.push(outputs);
        Ok(())
    })?;

    Ok(F32Run {
        cast_max,
        outputs: f32_outputs,
    })
}

/// The all-FP8 policy: every chosen scale applied by role; and the
/// precision chosen for each cast role.
fn all_fp8_policy(
    options: &CalibrationOptions,
    roles: &Roles,
    weight_stats: &WeightScales,
    f32_run: &F32Run,
) -> (PrecisionPolicy, BTreeMap<String, Precision>) {
    let mut all_fp8 = options.template.clone();
    let mut cast_precision: BTreeMap<String, Precision> = BTreeMap::new();
    for (r, (precision, _)) in weight_stats {
        all_fp8 = all_fp8.with_precision(r.clone(), *precision);
    }
    for r in roles.cast_inputs.keys() {
        let template_precision = options
            .template
            .precision(&roles.members[r][0])
            .unwrap_or(Precision::F32);
        let precision = fp8_scale(
            template_precision,
            f32_run.cast_max.get(r).copied().unwrap_or(0.0) * ACTIVATION_HEADROOM,
        );
        cast_precision.insert(r.clone(), precision);
        all_fp8 = all_fp8.with_precision(r.clone(), precision);
    }
    (all_fp8, cast_precision)
}

/// Per role, the statistics of the casts and F16 tensors of the final
/// graph on the calibration inputs; per output, its error against the F32
/// graph's.
type FinalStats = (BTreeMap<String, Stats>, BTreeMap<String, OutputStats>);

/// The final graph: casts and F16 activations measured where they run.
fn measure_final(
    runner: &Runner<'_>,
    final_graph: &Graph,
    f32_outputs: &[BTreeMap<String, Vec<f32>>],
) -> Result<FinalStats, CalibrationError> {
    let mut measured: BTreeMap<String, Stats> = BTreeMap::new();
    let mut output_stats: BTreeMap<String, OutputStats> = BTreeMap::new();
    runner.run(final_graph, "final", true, |i, supplied, out| {
        let value = |id| out.get(id).or_else(|| supplied.get(id));
        for op in final_graph.ops().values() {
            if let Op::CastFp8 { input, output } = op {
                let (Some(x), Some(q)) = (value(*input), value(*output)) else {
                    continue;
                };
                let t = final_graph.tensor(*output);
                measured
                    .entry(role(t.name()))
                    .or_default()
                    .add(x, q, t.precision().max_value());
            }
        }
        // F16 activations, outputs and inputs: values beyond F16's range.
        for (id, t) in final_graph.tensors().iter() {
            let x = match t.kind() {
                TensorKind::Input => supplied.get(id),
                TensorKind::Weight => None,
                _ => out.get(id),
            };
            if t.precision() == Precision::F16
                && let Some(x) = x
            {
                measured
                    .entry(role(t.name()))
                    .or_default()
                    .add_overflow(x, Precision::F16.max_value());
            }
        }
        for (name, reference) in &f32_outputs[i] {
            if let Some(ours) = final_graph.tensor_by_name(name).and_then(|id| out.get(id)) {
                output_stats
                    .entry(name.clone())
                    .or_default()
                    .add(reference, ours);
            }
        }
        Ok(())
    })?;

    Ok((measured, output_stats))
}
