//! Attention on the AMP in the tile model: the transpose and softmax
//! codelets against their definitions, element by element; small packages
//! whose attention runs on the AMP, checked op by op against the
//! reference and end to end; and edited arguments of the new codelets
//! refused before they run.

use std::collections::HashMap;

use ipu_layout::{AmpOperand, ElementOrder, Precision, TileId};
use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::{Graph, parse_fixture, values};
use ipu_package::lower::{AttentionUnit, LowerConfig};
use ipu_package::package::Package;
use ipu_package::profile::{VectorModel, Work};
use ipu_package::program::{BufferId, Codelet, GemmEntry, KernelId, Operand, WalkEvent};
use ipu_sim::SimError;
use ipu_sim::codelets::{CodeletMemory, run_codelet_counted};
use ipu_sim::evaluate;
use ipu_sim::reference::compare::{Tolerance, compare};
use ipu_sim::tiles::{Limits, RunConfig, run_package_with};
use serde_json::Value;

use crate::fixture_text;

/// micro-1l-h32 with both attentions' softmax in F16, which the AMP
/// attention needs.
pub fn micro_f16_softmax() -> String {
    let mut fixture: Value =
        serde_json::from_str(&fixture_text("micro-1l-h32.json")).expect("json");
    for layer in fixture["layers"].as_array_mut().expect("layers") {
        for op in layer["ops"].as_array_mut().expect("ops") {
            if op["op"] == "attention" {
                op["softmax"] = Value::from("F16");
            }
        }
    }
    serde_json::to_string_pretty(&fixture).expect("text")
}

/// tiny-2l-h64 with 8 heads: a head dimension of 8 leaves the AMP
/// attention's values panels a padding column, so the values' product
/// sums the probabilities (`plan::sums_on_amp`).
pub fn tiny_head_dim_8() -> String {
    let mut fixture: Value = serde_json::from_str(&fixture_text("tiny-2l-h64.json")).expect("json");
    fixture["params"]["heads"] = Value::from(8);
    serde_json::to_string_pretty(&fixture).expect("text")
}

/// `text` with the values of every attention with an F16 softmax cast to
/// FP8 (F143, codes times 2^-4) and its softmax F16-FP8: the AMP's values'
/// product then multiplies FP8 probabilities by FP8 values.
pub fn fp8_values(text: &str) -> String {
    let mut fixture: Value = serde_json::from_str(text).expect("json");
    for layer in fixture["layers"].as_array_mut().expect("layers") {
        let mut ops = Vec::new();
        let mut tensors = Vec::new();
        for mut op in layer["ops"].as_array().expect("ops").clone() {
            if op["op"] == "attention" && op["softmax"] == "F16" {
                let v = op["inputs"][2].as_str().expect("values").to_owned();
                let v8 = format!("{v}.fp8");
                let mut tensor = layer["tensors"]
                    .as_array()
                    .expect("tensors")
                    .iter()
                    .find(|t| t["name"] == v.as_str())
                    .expect("the values' tensor")
                    .clone();
                tensor["name"] = Value::from(v8.as_str());
                tensor["precision"] = Value::from("F143");
                tensor["scale"] = Value::from(-4);
                tensors.push(tensor);
                ops.push(serde_json::json!({
                    "op": "cast_fp8", "inputs": [v], "output": v8
                }));
                op["inputs"][2] = Value::from(v8);
                op["softmax"] = Value::from("F16-FP8");
            }
            ops.push(op);
        }
        layer["ops"] = Value::from(ops);
        layer["tensors"]
            .as_array_mut()
            .expect("tensors")
            .extend(tensors);
    }
    serde_json::to_string_pretty(&fixture).expect("text")
}

/// Softmax calls of `package` (each repeat body once) that write FP8
/// probabilities.
pub fn fp8_softmaxes(package: &Package) -> usize {
    count_calls(package, |c| match c {
        Codelet::AttentionSoftmax { probs, .. } => package
            .program
            .buffers
            .get(probs.buffer)
            .is_some_and(|b| b.ty.precision().is_fp8()),
        _ => false,
    })
}

/// `graph` built on `tiles` tiles with attention on `unit`.
pub fn build(graph: &Graph, tiles: u32, unit: AttentionUnit) -> Package {
    let config = BuildConfig {
        tiles: Some(tiles),
        lower: LowerConfig {
            attention: unit,
            ..LowerConfig::default()
        },
        ..BuildConfig::default()
    };
    build_package(graph, &config, &Stages::in_memory())
        .unwrap_or_else(|e| panic!("{} on {tiles} tiles: {e}", graph.name()))
}

/// Calls in `package` (each repeat body once) that `pick` accepts.
pub fn count_calls(package: &Package, pick: impl Fn(&Codelet) -> bool) -> usize {
    package
        .program
        .walk()
        .map(|event| match event {
            WalkEvent::Compute(step, _) => step.calls.iter().filter(|(_, c)| pick(c)).count(),
            _ => 0,
        })
        .sum()
}

#[test]
fn amp_attention_packages_pass_the_per_op_check_and_match_the_reference() {
    for (name, text) in [
        ("tiny-2l-h64", fixture_text("tiny-2l-h64.json")),
        ("micro-1l-h32 (F16 softmax)", micro_f16_softmax()),
        ("tiny-2l-h64 with head dim 8", tiny_head_dim_8()),
        (
            "tiny-2l-h64 with FP8 values",
            fp8_values(&fixture_text("tiny-2l-h64.json")),
        ),
        (
            "tiny-2l-h64 with head dim 8 and FP8 values",
            fp8_values(&tiny_head_dim_8()),
        ),
    ] {
        let graph = parse_fixture(&text).expect("parses");
        let inputs = values::generate(&graph, 11);
        let reference = evaluate(&graph, &inputs).expect("evaluates");
        for tiles in [16, 64] {
            let what = format!("{name} on {tiles} tiles");
            let amp = build(&graph, tiles, AttentionUnit::Amp);
            let vector = build(&graph, tiles, AttentionUnit::Vector);
            for (codelet, pick) in [
                (
                    "panels",
                    &(|c: &Codelet| matches!(c, Codelet::Panels { .. }))
                        as &dyn Fn(&Codelet) -> bool,
                ),
                ("softmax", &|c: &Codelet| {
                    matches!(c, Codelet::AttentionSoftmax { .. })
                }),
                ("vector block", &|c: &Codelet| {
                    matches!(c, Codelet::AttentionBlock { .. })
                }),
            ] {
                let (in_amp, in_vector) = (count_calls(&amp, pick), count_calls(&vector, pick));
                if codelet == "vector block" {
                    assert!(
                        in_amp == 0 && in_vector > 0,
                        "{what}: {codelet} {in_amp} {in_vector}"
                    );
                } else {
                    assert!(
                        in_amp > 0 && in_vector == 0,
                        "{what}: {codelet} {in_amp} {in_vector}"
                    );
                }
            }
            // FP8 values: every softmax writes FP8 probabilities, and the
            // vector blocks round their exponentials to FP8.
            let softmaxes = count_calls(&amp, |c| matches!(c, Codelet::AttentionSoftmax { .. }));
            let fp8_blocks = count_calls(&vector, |c| {
                matches!(
                    c,
                    Codelet::AttentionBlock {
                        probs_fp8: true,
                        ..
                    }
                )
            });
            if name.contains("FP8") {
                assert_eq!(fp8_softmaxes(&amp), softmaxes, "{what}");
                assert!(fp8_blocks > 0, "{what}");
            } else {
                assert_eq!((fp8_softmaxes(&amp), fp8_blocks), (0, 0), "{what}");
            }
            // The per-op check (on by default) holds every op, attention
            // included, to the reference on the device's own inputs.
            let (out, stats) = run_package_with(&amp, &graph, &inputs, &RunConfig::default())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(stats.ops_checked > 0, "{what}");
            let (vector_out, _) = run_package_with(&vector, &graph, &inputs, &RunConfig::default())
                .unwrap_or_else(|e| panic!("{what}, vector: {e}"));
            for output in graph.outputs() {
                let t = graph.tensor(output);
                let c = compare(
                    reference.get(output).expect("reference"),
                    out.get(output).expect("device"),
                    Tolerance::graph(t.precision()),
                );
                let v = compare(
                    reference.get(output).expect("reference"),
                    vector_out.get(output).expect("device"),
                    Tolerance::graph(t.precision()),
                );
                eprintln!(
                    "{what} {}: AMP rms error {} max {}; vector rms error {} max {}",
                    t.name(),
                    c.rms_error,
                    c.max_abs,
                    v.rms_error,
                    v.max_abs
                );
                assert!(c.pass, "{what}, {}: {c:?}", t.name());
            }
        }
    }
}

/// micro-1l-h32 with an F16 softmax and 64 tokens: enough keys for the
/// AMP attention to split them into blocks.
fn micro_64_tokens() -> String {
    let mut fixture: Value = serde_json::from_str(&micro_f16_softmax()).expect("json");
    fixture["params"]["tokens"] = Value::from(64);
    serde_json::to_string_pretty(&fixture).expect("text")
}

/// The largest number of blocks an attention combine of `package` adds.
fn most_blocks_combined(package: &Package) -> u32 {
    package
        .program
        .walk()
        .flat_map(|event| match event {
            WalkEvent::Compute(step, _) => step
                .calls
                .iter()
                .filter_map(|(_, c)| match c {
                    Codelet::AttentionCombine { blocks, .. } => Some(*blocks),
                    _ => None,
                })
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        })
        .max()
        .unwrap_or(0)
}

/// `graph` built with its attention on the AMP on `tiles` tiles, within a
/// transient budget of `budget` bytes.
fn build_with_budget(graph: &Graph, tiles: u32, budget: u64) -> Package {
    let config = BuildConfig {
        tiles: Some(tiles),
        lower: LowerConfig {
            attention: AttentionUnit::Amp,
            transient_budget: budget,
            ..LowerConfig::default()
        },
        ..BuildConfig::default()
    };
    build_package(graph, &config, &Stages::in_memory()).expect("builds")
}

/// Key blocks combined: the blocks' F16 partial sums, their scaled
/// probabilities and the combine's strides in F16 elements hold to the
/// reference op by op, and the estimate is the tile model's count.
#[test]
fn amp_attention_with_split_keys_matches_the_reference_and_its_estimate() {
    let graph = parse_fixture(&micro_64_tokens()).expect("parses");
    let inputs = values::generate(&graph, 7);
    // A transient budget small enough that a tile cannot hold a pair's
    // 64 keys: the plan splits them.
    let package = [4096u64, 2048, 1024]
        .into_iter()
        .map(|budget| build_with_budget(&graph, 64, budget))
        .find(|p| most_blocks_combined(p) > 1)
        .expect("a budget that splits the keys");
    let blocks_f16 = package
        .program
        .buffers
        .iter()
        .any(|(_, b)| b.name.ends_with(".blocks") && b.ty.precision() == Precision::F16);
    assert!(blocks_f16, "the AMP attention's blocks are F16");
    assert_runs_like_the_reference(&package, &graph, &inputs, "split keys");
    crate::cycles::assert_estimate_is_the_count(&graph, &package, "split keys");
}

/// The most softmax calls one tile makes in one compute step: the passes
/// over its query rows.
fn most_passes(package: &Package) -> usize {
    package
        .program
        .walk()
        .map(|event| match event {
            WalkEvent::Compute(step, _) => {
                let mut per_tile: HashMap<TileId, usize> = HashMap::new();
                for (tile, c) in &step.calls {
                    if matches!(c, Codelet::AttentionSoftmax { .. }) {
                        *per_tile.entry(*tile).or_default() += 1;
                    }
                }
                per_tile.into_values().max().unwrap_or(0)
            }
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

/// Passes over the query rows, each pass's probabilities written over its
/// scores (one buffer serves both, and the next pass's scores overwrite
/// the probabilities the values' product has read): the tile model's
/// results hold to the reference op by op, and the estimate is its count.
#[test]
fn amp_attention_in_passes_writes_probabilities_over_scores_like_the_reference() {
    let graph = parse_fixture(&micro_64_tokens()).expect("parses");
    let inputs = values::generate(&graph, 11);
    let package = [8192u64, 6144, 4096, 3072, 2048, 1024]
        .into_iter()
        .map(|budget| build_with_budget(&graph, 16, budget))
        .find(|p| most_passes(p) > 1)
        .expect("a budget that takes the query rows in passes");
    let mut softmaxes = 0;
    for event in package.program.walk() {
        if let WalkEvent::Compute(step, _) = event {
            for (_, c) in &step.calls {
                if let Codelet::AttentionSoftmax { scores, probs, .. } = c {
                    assert_eq!(
                        scores.buffer, probs.buffer,
                        "F16 probabilities over the scores"
                    );
                    softmaxes += 1;
                }
            }
        }
    }
    assert!(softmaxes > 1);
    assert_runs_like_the_reference(&package, &graph, &inputs, "passes");
    crate::cycles::assert_estimate_is_the_count(&graph, &package, "passes");
}

/// Runs `package` on the tile model with the per-op check on `inputs`,
/// which checks at least one op, and holds every graph output to the
/// reference within the whole-graph tolerance.
pub(crate) fn assert_runs_like_the_reference(
    package: &Package,
    graph: &Graph,
    inputs: &values::ValueSet,
    what: &str,
) {
    let (out, stats) = run_package_with(package, graph, inputs, &RunConfig::default())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(stats.ops_checked > 0, "{what}");
    let reference = evaluate(graph, inputs).expect("evaluates");
    for output in graph.outputs() {
        let c = compare(
            reference.get(output).expect("reference"),
            out.get(output).expect("device"),
            Tolerance::graph(graph.tensor(output).precision()),
        );
        assert!(c.pass, "{what}: {c:?}");
    }
}

/// Tile memory of one tile for calling codelets directly: each buffer a
/// byte vector of one precision.
struct Memory {
    buffers: HashMap<BufferId, (Precision, Vec<u8>)>,
}

impl Memory {
    fn new(buffers: &[(u32, Precision, usize)]) -> Memory {
        Memory {
            buffers: buffers
                .iter()
                .map(|&(id, p, bytes)| (BufferId::from_u32(id), (p, vec![0xAB; bytes])))
                .collect(),
        }
    }

    fn set(&mut self, id: u32, values: &[f32]) {
        let (p, bytes) = self
            .buffers
            .get_mut(&BufferId::from_u32(id))
            .expect("buffer");
        let eb = p.element_bytes() as usize;
        for (v, out) in values.iter().zip(bytes.chunks_exact_mut(eb)) {
            p.encode_into(*v, out);
        }
    }

    fn get(&self, id: u32) -> Vec<f32> {
        let (p, bytes) = &self.buffers[&BufferId::from_u32(id)];
        bytes
            .chunks_exact(p.element_bytes() as usize)
            .map(|b| p.decode_from(b))
            .collect()
    }

    fn range(&self, tile: TileId, at: Operand, bytes: u64) -> Result<(usize, usize), SimError> {
        let (_, data) = &self.buffers[&at.buffer];
        let start = u64::from(at.offset);
        match start.checked_add(bytes) {
            Some(end) if end <= data.len() as u64 => Ok((start as usize, end as usize)),
            _ => Err(SimError::OutOfRange {
                tile,
                buffer: format!("{}", at.buffer),
                offset: start,
                bytes,
                limit: data.len() as u64,
            }),
        }
    }
}

impl CodeletMemory for Memory {
    fn precision(&self, _: TileId, buffer: BufferId) -> Result<Precision, SimError> {
        Ok(self.buffers[&buffer].0)
    }

    fn read(&self, tile: TileId, at: Operand, bytes: u64) -> Result<Vec<u8>, SimError> {
        let (s, e) = self.range(tile, at, bytes)?;
        Ok(self.buffers[&at.buffer].1[s..e].to_vec())
    }

    fn extent(&self, tile: TileId, at: Operand, bytes: u64) -> Result<(), SimError> {
        self.range(tile, at, bytes).map(|_| ())
    }

    fn write(&mut self, tile: TileId, at: Operand, data: &[u8]) -> Result<(), SimError> {
        let (s, e) = self.range(tile, at, data.len() as u64)?;
        self.buffers.get_mut(&at.buffer).expect("buffer").1[s..e].copy_from_slice(data);
        Ok(())
    }

    fn gemm(
        &mut self,
        _: TileId,
        kernel: KernelId,
        _: GemmEntry,
        _: u32,
        _: Operand,
        _: Operand,
        _: Operand,
    ) -> Result<(), SimError> {
        Err(SimError::UnknownKernel { kernel, kernels: 0 })
    }
}

fn operand(id: u32) -> Operand {
    Operand::from(BufferId::from_u32(id))
}

/// A value of every element, distinct and exact in F16.
fn value(i: usize) -> f32 {
    ((i * 37) % 211) as f32 / 16.0 - 6.0
}

/// FP8 values' panels: the codes copied to their panel positions (32
/// columns a panel), the column of ones, and the precisions the codelet
/// refuses: a conversion, an 8-bit transpose, and ones the output
/// precision cannot hold.
#[test]
fn fp8_panels_copy_codes_and_refuse_what_they_cannot_do() {
    let tile = TileId::from_u32(0);
    let model = VectorModel::new(&BuildConfig::default().target);
    let f8 = |scale| Precision::F8 {
        format: ipu_layout::Fp8Format::F143,
        scale,
    };
    let (rows, cols, stride, out_rows, out_cols) = (37u32, 21u32, 24u32, 64u32, 48u32);
    let input: Vec<f32> = (0..(rows * stride) as usize)
        .map(|i| f8(-4).quantize(value(i)))
        .collect();
    let panels = |transpose| Codelet::Panels {
        input: operand(0),
        output: operand(1),
        rows,
        cols,
        stride,
        out_rows,
        out_cols,
        transpose,
        ones: !transpose,
    };
    let out_len = (out_rows * out_cols) as usize;
    let mut m = Memory::new(&[(0, f8(-4), input.len()), (1, f8(-4), out_len)]);
    m.set(0, &input);
    let work = run_codelet_counted(&mut m, tile, &panels(false), Some(&model)).expect("runs");
    assert_eq!(
        work,
        Some(Work::Panels {
            out_rows: 64,
            out_cols: 48,
            transpose: false,
            fp8: true,
        })
    );
    let out = m.get(1);
    let order = ElementOrder::Amp(AmpOperand::Right);
    for i in 0..u64::from(out_rows) {
        for j in 0..u64::from(out_cols) {
            let at = order.byte_offset(f8(-4), &[out_rows.into(), out_cols.into()], &[i, j]);
            // Panels of 32 FP8 columns, the last one 16 wide.
            let (panel, width) = (j / 32, if j < 32 { 32 } else { 16 });
            assert_eq!(at, panel * 32 * u64::from(out_rows) + i * width + j % 32);
            let expected = match (i < u64::from(rows), j.cmp(&u64::from(cols))) {
                (true, std::cmp::Ordering::Less) => input[(i * u64::from(stride) + j) as usize],
                (true, std::cmp::Ordering::Equal) => 1.0,
                _ => 0.0,
            };
            assert_eq!(out[at as usize], expected, "({i}, {j})");
        }
    }
    // F16 in, FP8 out; FP8 transposed; ones where 1 saturates (F143's
    // largest code is 240, 1 at a scale of 2^-8 is 256).
    for (input_p, output_p, transpose, what) in [
        (Precision::F16, f8(-4), false, "not the input's"),
        (f8(-4), f8(-4), true, "transposed"),
        (f8(-8), f8(-8), false, "1 is not exact"),
    ] {
        let mut m = Memory::new(&[(0, input_p, input.len() * 2), (1, output_p, out_len * 2)]);
        let before = m.get(1);
        let e = run_codelet_counted(&mut m, tile, &panels(transpose), Some(&model))
            .expect_err("refused");
        assert!(e.to_string().contains(what), "{what}: {e}");
        assert_eq!(m.get(1), before, "{what}: nothing written");
    }
}

#[test]
fn panels_put_each_element_at_its_panel_position_and_zeros_the_rest() {
    let tile = TileId::from_u32(0);
    let model = VectorModel::new(&BuildConfig::default().target);
    // 37 rows of 21 columns, 24 apart: transposed into [32, 48] AMP panels
    // (keys), or as they are into [48, 32] (values), with or without a
    // column of ones after them.
    let (rows, cols, stride) = (37u32, 21u32, 24u32);
    let input: Vec<f32> = (0..(rows * stride) as usize).map(value).collect();
    for (transpose, out_rows, out_cols, ones) in [
        (true, 32u32, 48u32, false),
        (false, 48, 32, false),
        (false, 48, 32, true),
    ] {
        let out_bytes = (out_rows * out_cols * 2) as usize;
        let mut m = Memory::new(&[
            (0, Precision::F16, input.len() * 2),
            (1, Precision::F16, out_bytes),
        ]);
        m.set(0, &input);
        let panels = |out_cols| Codelet::Panels {
            input: operand(0),
            output: operand(1),
            rows,
            cols,
            stride,
            out_rows,
            out_cols,
            transpose,
            ones,
        };
        let work =
            run_codelet_counted(&mut m, tile, &panels(out_cols), Some(&model)).expect("runs");
        assert_eq!(
            work,
            Some(Work::Panels {
                out_rows: u64::from(out_rows),
                out_cols: u64::from(out_cols),
                transpose,
                fp8: false,
            })
        );
        let out = m.get(1);
        // Element (i, j) of the [out_rows, out_cols] result, in panels of
        // 16 columns: panel j / 16 holds every row's 16 columns of it.
        let order = ElementOrder::Amp(AmpOperand::Right);
        let mut seen = vec![false; out.len()];
        for i in 0..u64::from(out_rows) {
            for j in 0..u64::from(out_cols) {
                let at = (order.byte_offset(
                    Precision::F16,
                    &[out_rows.into(), out_cols.into()],
                    &[i, j],
                ) / 2) as usize;
                let panel = (j / 16) as usize;
                assert_eq!(
                    at,
                    panel * 16 * out_rows as usize + i as usize * 16 + (j % 16) as usize
                );
                let (r, c) = if transpose { (j, i) } else { (i, j) };
                let expected = if r < u64::from(rows) && c < u64::from(cols) {
                    input[r as usize * stride as usize + c as usize]
                } else if ones && r < u64::from(rows) && c == u64::from(cols) {
                    1.0
                } else {
                    0.0
                };
                assert_eq!(out[at], expected, "transpose {transpose}: ({i}, {j})");
                seen[at] = true;
            }
        }
        assert!(seen.iter().all(|&s| s), "every output element is written");
        // An output narrower than the data is refused, not truncated.
        let narrow = if transpose { rows - 1 } else { cols - 1 };
        assert!(matches!(
            run_codelet_counted(&mut m, tile, &panels(narrow), None),
            Err(SimError::Argument { .. })
        ));
        // So is a column of ones with no column left for it.
        if ones {
            assert!(matches!(
                run_codelet_counted(&mut m, tile, &panels(cols), None),
                Err(SimError::Argument { .. })
            ));
        }
    }
}

/// The softmax of one row as `Codelet::AttentionSoftmax` defines it,
/// written out again here: scaled (and rounded to F16 when asked), the
/// maximum, exponentials rounded to F16, their sum in order.
/// The softmax's probabilities scaled by `2^-exponent`, their maximum
/// and sum, as the codelet defines them.
fn softmax_by_definition(
    row: &[f32],
    scale: f32,
    f16: bool,
    exponent: i32,
) -> (Vec<f32>, f32, f32) {
    let round = |x: f32| {
        if f16 { Precision::F16.quantize(x) } else { x }
    };
    let s: Vec<f32> = row.iter().map(|&x| round(x * scale)).collect();
    let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let p: Vec<f32> = s
        .iter()
        .map(|&x| Precision::F16.quantize((x - m).exp() * 2f32.powi(-exponent)))
        .collect();
    let l = p.iter().fold(0.0f32, |acc, &x| acc + x);
    (p, m, l)
}

#[test]
fn the_softmax_is_its_definition_bit_for_bit_with_zeros_after_the_keys() {
    let tile = TileId::from_u32(0);
    let model = VectorModel::new(&BuildConfig::default().target);
    let (rows, columns, stride) = (5u32, 19u32, 32u32);
    // The last two: scores the queries scaled already (a scale of 1,
    // counted as the softmax without its multiply).
    for (scores_precision, f16, exponent, scale) in [
        (Precision::F32, true, 0, 1.0 / (72f32).sqrt()),
        (Precision::F32, false, 0, 1.0 / (72f32).sqrt()),
        (Precision::F16, true, 0, 1.0 / (72f32).sqrt()),
        (Precision::F32, true, 5, 1.0 / (72f32).sqrt()),
        (Precision::F32, true, 14, 1.0 / (72f32).sqrt()),
        (Precision::F16, true, 0, 1.0),
        (Precision::F16, true, 7, 1.0),
    ] {
        let scores: Vec<f32> = (0..(rows * stride) as usize)
            .map(|i| scores_precision.quantize(value(i) * 1.7))
            .collect();
        let n = (rows * stride) as usize;
        let mut m = Memory::new(&[
            (
                0,
                scores_precision,
                n * scores_precision.element_bytes() as usize,
            ),
            (1, Precision::F16, n * 2),
            (2, Precision::F32, rows as usize * 4),
            (3, Precision::F32, rows as usize * 4),
        ]);
        m.set(0, &scores);
        let codelet = Codelet::AttentionSoftmax {
            scores: operand(0),
            probs: operand(1),
            max: operand(2),
            sum: Some(operand(3)),
            rows,
            columns,
            stride,
            scale,
            softmax_f16: f16,
            exponent,
        };
        let work = run_codelet_counted(&mut m, tile, &codelet, Some(&model)).expect("runs");
        assert_eq!(
            work,
            Some(Work::AttentionSoftmax {
                rows: u64::from(rows),
                columns: u64::from(stride),
                keys: u64::from(columns),
                score_lanes: model.lanes(scores_precision),
                prob_lanes: model.lanes(Precision::F16),
                unscaled: scale == 1.0,
                sums_on_amp: false,
            })
        );
        let (probs, maxima, sums) = (m.get(1), m.get(2), m.get(3));
        for r in 0..rows as usize {
            let row = &scores[r * stride as usize..][..columns as usize];
            let (p, mx, l) = softmax_by_definition(row, scale, f16, exponent as i32);
            let got = &probs[r * stride as usize..][..stride as usize];
            assert_eq!(&got[..columns as usize], &p[..], "row {r}");
            assert!(
                got[columns as usize..].iter().all(|&x| x == 0.0),
                "row {r} padding"
            );
            assert_eq!(maxima[r].to_bits(), mx.to_bits(), "row {r} max");
            assert_eq!(sums[r].to_bits(), l.to_bits(), "row {r} sum");
            // The largest score's exponential is one, scaled exactly.
            assert!(got.contains(&2f32.powi(-(exponent as i32))));
        }
    }
    // Keys beyond the stride are refused.
    let mut m = Memory::new(&[
        (0, Precision::F32, 4096),
        (1, Precision::F16, 4096),
        (2, Precision::F32, 64),
        (3, Precision::F32, 64),
    ]);
    let wide = Codelet::AttentionSoftmax {
        scores: operand(0),
        probs: operand(1),
        max: operand(2),
        sum: Some(operand(3)),
        rows: 2,
        columns: 33,
        stride: 32,
        scale: 1.0,
        softmax_f16: true,
        exponent: 0,
    };
    assert!(matches!(
        run_codelet_counted(&mut m, tile, &wide, None),
        Err(SimError::Argument { .. })
    ));
    // So is a scale that would make every probability subnormal.
    let tiny = Codelet::AttentionSoftmax {
        scores: operand(0),
        probs: operand(1),
        max: operand(2),
        sum: Some(operand(3)),
        rows: 2,
        columns: 32,
        stride: 32,
        scale: 1.0,
        softmax_f16: true,
        exponent: 15,
    };
    assert!(matches!(
        run_codelet_counted(&mut m, tile, &tiny, None),
        Err(SimError::Argument { .. })
    ));
}

#[test]
fn huge_counts_of_the_new_codelets_are_refused_before_they_run() {
    let graph = parse_fixture(&micro_f16_softmax()).expect("parses");
    let package = build(&graph, 16, AttentionUnit::Amp);
    let inputs = values::generate(&graph, 3);
    let no_limits = Limits {
        max_tiles: u32::MAX,
        max_steps: u64::MAX,
        max_compute_elements: u64::MAX,
        max_exchange_words: u64::MAX,
    };
    type Edit = dyn Fn(&mut Codelet) -> bool;
    let edits: [(&str, &Edit); 3] = [
        ("panels", &|c| match c {
            Codelet::Panels {
                out_rows, out_cols, ..
            } => {
                *out_rows = u32::MAX;
                *out_cols = u32::MAX;
                true
            }
            _ => false,
        }),
        ("softmax rows", &|c| match c {
            Codelet::AttentionSoftmax { rows, stride, .. } => {
                *rows = u32::MAX;
                *stride = u32::MAX;
                true
            }
            _ => false,
        }),
        ("softmax stride", &|c| match c {
            Codelet::AttentionSoftmax { stride, .. } => {
                *stride = 0;
                true
            }
            _ => false,
        }),
    ];
    for (what, edit) in edits {
        for limits in [Limits::default(), no_limits] {
            let mut p = package.clone();
            let mut done = false;
            for step in &mut p.program.steps {
                if let ipu_package::program::Step::Compute(s) = step {
                    for (_, c) in &mut s.calls {
                        if !done {
                            done = edit(c);
                        }
                    }
                }
            }
            assert!(done, "{what}: a call to edit");
            let config = RunConfig {
                limits,
                ..RunConfig::default()
            };
            let e = run_package_with(&p, &graph, &inputs, &config).unwrap_err();
            assert!(
                matches!(
                    e,
                    SimError::WorkLimit { .. }
                        | SimError::OutOfRange { .. }
                        | SimError::Argument { .. }
                ),
                "{what}: {e}"
            );
        }
    }
}
