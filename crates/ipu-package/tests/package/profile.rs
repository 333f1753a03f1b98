//! The cycle estimate: it adds up, it is never below the roofline, the AMP
//! programs agree with the kernel cost model, the vector model gives the
//! figures worked out by hand, `profile.json` reads back equal, and a
//! damaged package gets a typed error naming what is wrong.

use ipu_layout::{Precision, TileId};
use ipu_package::build::{BuildConfig, Stages, build_package};
use ipu_package::graph::{Activation, parse_fixture};
use ipu_package::package::Package;
use ipu_package::profile::{
    CODELET_KINDS, ModelWork, Profile, ProfileConfig, ProfileError, StepKind, VectorModel, Work,
    estimate, work_floor,
};
use ipu_package::program::{Codelet, Step};
use ipu_target::Target;
use proptest::prelude::*;

use crate::fixture_text;

fn build(name: &str, tiles: u32) -> (ipu_package::graph::Graph, Package) {
    let graph = parse_fixture(&fixture_text(name)).expect("fixture parses");
    let config = BuildConfig {
        tiles: Some(tiles),
        ..BuildConfig::default()
    };
    let package = build_package(&graph, &config, &Stages::in_memory())
        .unwrap_or_else(|e| panic!("{name} on {tiles} tiles: {e}"));
    (graph, package)
}

fn profile(p: &Package) -> &Profile {
    p.profile.as_ref().expect("the build estimates its package")
}

#[test]
fn the_estimate_adds_up_and_is_never_below_the_roofline() {
    for (name, tiles) in [
        ("micro-1l-h32.json", 16),
        ("tiny-2l-h64.json", 16),
        ("tiny-2l-h64.json", 64),
    ] {
        let (_, package) = build(name, tiles);
        let p = profile(&package);
        let t = &p.totals;
        let what = format!("{name} on {tiles} tiles");
        let sum: u64 = p.steps.iter().map(|s| s.cycles * s.runs).sum();
        assert_eq!(sum, t.cycles, "{what}: steps add up to the total");
        assert_eq!(
            t.compute_cycles + t.exchange_cycles + t.sync_cycles,
            t.cycles,
            "{what}: compute, exchange and sync add up"
        );
        assert!(p.roofline_cycles > 0, "{what}: the model has MACs");
        assert!(
            p.fp8_roofline_cycles <= p.roofline_cycles && p.roofline_cycles <= t.cycles,
            "{what}: FP8 roofline {} <= roofline {} <= estimate {}",
            p.fp8_roofline_cycles,
            p.roofline_cycles,
            t.cycles
        );
        assert!(
            t.amp_ideal_tile_cycles <= t.cycles * u64::from(p.tile_count),
            "{what}: the AMP is never more than fully used"
        );
        assert_eq!(
            p.kernel_check.entries,
            4 * package.kernels.len(),
            "{what}: every entry program is checked"
        );
        assert_eq!(
            p.kernel_check.agreeing, p.kernel_check.entries,
            "{what}: {:?}",
            p.kernel_check.disagreements
        );
        // Every step: a compute step is at least its busiest tile's GEMMs
        // at the AMP's peak, an exchange step at least its horizon, and
        // every step pays its sync.
        let mut phases = 0;
        for s in &p.steps {
            assert_eq!(
                s.cycles,
                s.work_cycles + p.sync_cycles_per_step,
                "{}",
                s.name
            );
            // The floor is a lower bound of the step as planned, and
            // every step does some work.
            assert!(
                0 < s.floor_cycles && s.floor_cycles <= s.work_cycles,
                "{what} {}: floor {} estimate {}",
                s.name,
                s.floor_cycles,
                s.work_cycles
            );
            match s.kind {
                StepKind::Compute => {
                    let kinds: u64 = s.busiest_kinds.iter().map(|k| k.cycles).sum();
                    assert_eq!(kinds, s.work_cycles, "{what} {}: kinds add up", s.name);
                    assert!(s.mean_tile_cycles <= s.work_cycles, "{}", s.name);
                }
                StepKind::Exchange => {
                    let x = s.exchange.as_ref().expect("an exchange step has its phase");
                    assert_eq!(x.phase as usize, phases, "phases in program order");
                    assert!(x.endpoint_lower_bound <= x.horizon, "{}", s.name);
                    assert!(x.endpoint_lower_bound <= s.floor_cycles, "{}", s.name);
                    assert_eq!(s.work_cycles, x.horizon + x.copy_cycles, "{}", s.name);
                    phases += 1;
                }
            }
        }
        assert_eq!(
            phases,
            package.phases.len(),
            "{what}: every phase is a step"
        );
        // Repeat iterations times their count, plus the steps outside.
        let mut covered = 0u64;
        for r in &p.repeats {
            let body = &p.steps[r.first_step as usize..(r.first_step + r.steps) as usize];
            let one: u64 = body.iter().map(|s| s.cycles).sum();
            assert_eq!(one, r.cycles, "{what}: {} iteration", r.name);
            assert_eq!(
                r.compute_cycles + r.exchange_cycles + r.sync_cycles,
                r.cycles
            );
            assert!(r.roofline_cycles <= r.cycles, "{what}: {}", r.name);
            let floors: u64 = body.iter().map(|s| s.floor_cycles + s.sync_cycles).sum();
            assert_eq!(floors, r.floor_cycles, "{what}: {} floors", r.name);
            assert!(r.floor_cycles <= r.cycles, "{what}: {}", r.name);
            covered += r.cycles * u64::from(r.count);
        }
        let outside: u64 = p
            .steps
            .iter()
            .filter(|s| s.repeat.is_none())
            .map(|s| s.cycles)
            .sum();
        assert_eq!(covered + outside, t.cycles, "{what}");
        let op_total: u64 = p
            .op_kinds
            .iter()
            .map(|k| k.compute_cycles + k.exchange_cycles + k.sync_cycles)
            .sum();
        assert_eq!(op_total, t.cycles, "{what}: op kinds add up");
        let floors: u64 = p
            .steps
            .iter()
            .map(|s| (s.floor_cycles + s.sync_cycles) * s.runs)
            .sum();
        assert_eq!(floors, t.floor_cycles, "{what}: floors add up");
        assert!(t.floor_cycles <= t.cycles, "{what}");
    }
}

#[test]
fn the_roofline_of_siglip_b2_is_the_arithmetic_of_its_layers() {
    // One encoder layer at batch 2: 1458 tokens through 1152x3456,
    // 1152x1152, 1152x4304 and 4304x1152 FP8 GEMMs, and attention over 729
    // tokens in 16 heads of 72.
    let graph = parse_fixture(&fixture_text("siglip-so400m-b2.json")).expect("parses");
    let work = ModelWork::of_graph(&graph);
    assert_eq!(work.items, 2);
    let layer = work
        .repeats
        .iter()
        .find(|r| r.name == "encoder")
        .expect("the encoder repeats");
    assert_eq!(layer.count, 27);
    assert_eq!(
        layer.macs.fp8,
        1458 * (1152 * 3456 + 1152 * 1152 + 2 * 1152 * 4304)
    );
    assert_eq!(layer.macs.attention, 2 * 2 * 16 * 729 * 729 * 72);
    let model = ipu_kernels::AmpModel::ipu21();
    // 117,813.4 cycles of GEMMs at 128 MACs and 25,994.6 of attention at
    // 64 MACs per tile cycle on 1472 tiles.
    assert_eq!(layer.macs.roofline_cycles(&model, 1472), 143_808);
    assert!(work.macs.total() > 27 * layer.macs.total());
}

#[test]
fn the_vector_model_gives_the_figures_worked_out_by_hand() {
    let t = Target::ipu21();
    let v = VectorModel::new(t);
    assert_eq!(v.lanes(Precision::F16), 4);
    assert_eq!(v.lanes(Precision::F32), 2);
    // 1000 F16 additions: 250 vectors, 42 for the busiest of six workers,
    // after a prologue of 15: 60 + 6 x (15 + 42).
    let add = Work::Add {
        elements: 1000,
        lanes: 4,
    };
    assert_eq!(v.cycles(&add), 60 + 6 * (15 + 42));
    // An attention block of 81 queries against 146 keys of 72 columns with
    // an F16 softmax: per query row 30 + 146 x 18 dot + 37 x 4 exp + 146 x
    // 36 axpy = 8062 instructions; 14 rows for the busiest worker.
    let block = Work::AttentionBlock {
        q_rows: 81,
        kv_rows: 146,
        head_dim: 72,
        score_lanes: 4,
        diagonal: None,
        probs_fp8: false,
    };
    assert_eq!(v.cycles(&block), 60 + 6 * (15 + 14 * 8062));
    // With FP8 probabilities each of the 37 vectors of exponentials is
    // also converted, one instruction each.
    let block_fp8 = Work::AttentionBlock {
        q_rows: 81,
        kv_rows: 146,
        head_dim: 72,
        score_lanes: 4,
        diagonal: None,
        probs_fp8: true,
    };
    assert_eq!(v.cycles(&block_fp8), 60 + 6 * (15 + 14 * (8062 + 37)));
    // A layer norm of 8 rows of 1152 F16: per row 40 + 288 x 4; two rows
    // for the busiest worker.
    let ln = Work::LayerNorm {
        rows: 8,
        columns: 1152,
        lanes: 4,
    };
    assert_eq!(v.cycles(&ln), 60 + 6 * (15 + 2 * (40 + 288 * 4)));
    // Of 3 rows, each is split over two workers: 144 vectors x 4 + 40 for
    // the row + 2 x 2 to combine two parts, and a second worker start
    // (60 / 6 + 15) between the passes.
    let ln = Work::LayerNorm {
        rows: 3,
        columns: 1152,
        lanes: 4,
    };
    assert_eq!(
        v.cycles(&ln),
        60 + 6 * (15 + 144 * 4 + 40 + 2 * 2 + 60 / 6 + 15)
    );
    // A call costs at least its overhead.
    assert_eq!(v.cycles(&Work::Zero { bytes: 0, runs: 1 }), 60 + 6 * 15);
    // A strided clear of 183 rows' last 16 bytes: whole runs to each
    // worker (31 for the busiest), 2 stores and the step of 2 each.
    assert_eq!(
        v.cycles(&Work::Zero {
            bytes: 16,
            runs: 183
        }),
        60 + 6 * (15 + 31 * (2 + 2))
    );
    // The AMP attention's softmax over 27 query rows of 160 F32 scores:
    // per row 30 + 80 score vectors x 2 + 40 F16 vectors x (4 exp + 2);
    // 5 rows for the busiest worker.
    let softmax = |unscaled, sums_on_amp| Work::AttentionSoftmax {
        rows: 27,
        columns: 160,
        keys: 160,
        score_lanes: 2,
        prob_lanes: 4,
        unscaled,
        sums_on_amp,
    };
    assert_eq!(
        v.cycles(&softmax(false, false)),
        60 + 6 * (15 + 5 * (30 + 80 * 2 + 40 * 6))
    );
    // The same scores unscaled (the queries carry 1/√d): each score
    // vector only joins the row maximum, one instruction.
    assert_eq!(
        v.cycles(&softmax(true, false)),
        60 + 6 * (15 + 5 * (30 + 80 + 40 * 6))
    );
    // And with the row sums left to the values' product: each vector of
    // exponentials is lowered by the maximum and stored, one instruction.
    assert_eq!(
        v.cycles(&softmax(true, true)),
        60 + 6 * (15 + 5 * (30 + 80 + 40 * 5))
    );
    // With 146 keys in the 160 columns, only the keys' scores and
    // exponentials are taken: 73 score vectors and 37 F16 vectors, the
    // last of them filled in part, then 40 - 36 vectors of the row are
    // written as zeros or masked (one instruction each).
    let padded = Work::AttentionSoftmax {
        rows: 27,
        columns: 160,
        keys: 146,
        score_lanes: 2,
        prob_lanes: 4,
        unscaled: true,
        sums_on_amp: true,
    };
    assert_eq!(
        v.cycles(&padded),
        60 + 6 * (15 + 5 * (30 + 73 + 37 * 5 + 4))
    );
    // F16 scores (four a vector): the last score vector is filled in part
    // too, and its lanes past the keys are cleared before the maximum.
    let f16_scores = Work::AttentionSoftmax {
        rows: 27,
        columns: 160,
        keys: 146,
        score_lanes: 4,
        prob_lanes: 4,
        unscaled: true,
        sums_on_amp: true,
    };
    assert_eq!(
        v.cycles(&f16_scores),
        60 + 6 * (15 + 5 * (30 + (37 + 1) + 37 * 5 + 4))
    );
    // FP8 probabilities (eight a vector): the exponentials are still 37
    // F16 vectors, each also converted (one instruction); past the keys,
    // 20 - 18 vectors of eight are written as zeros or masked.
    let fp8_probs = Work::AttentionSoftmax {
        rows: 27,
        columns: 160,
        keys: 146,
        score_lanes: 4,
        prob_lanes: 8,
        unscaled: true,
        sums_on_amp: true,
    };
    assert_eq!(
        v.cycles(&fp8_probs),
        60 + 6 * (15 + 5 * (30 + (37 + 1) + 37 * 6 + 2))
    );
    // Its keys' transpose, 160 key rows of 72 (padded to 80) columns: 40
    // groups of 4 rows, 7 for the busiest worker, each 4 + 20 blocks x 4.
    let transpose = Work::Panels {
        out_rows: 80,
        out_cols: 160,
        transpose: true,
        fp8: false,
    };
    assert_eq!(v.cycles(&transpose), 60 + 6 * (15 + 7 * (4 + 20 * 4)));
    // Its values' panels, 160 rows of 80 columns: 40 groups of 4 rows, 7
    // for the busiest worker, each 4 + 4 rows x 160 bytes / 8.
    let values = Work::Panels {
        out_rows: 160,
        out_cols: 80,
        transpose: false,
        fp8: false,
    };
    assert_eq!(v.cycles(&values), 60 + 6 * (15 + 7 * (4 + 4 * 20)));
    // The same in FP8: 80 bytes a row, 10 copies.
    let values_fp8 = Work::Panels {
        out_rows: 160,
        out_cols: 80,
        transpose: false,
        fp8: true,
    };
    assert_eq!(v.cycles(&values_fp8), 60 + 6 * (15 + 7 * (4 + 4 * 10)));
    // Their floors: every element read and written at one vector a cycle.
    assert_eq!(work_floor(&softmax(false, false), 8, 64), 27 * (80 + 40));
    assert_eq!(work_floor(&transpose, 8, 64), 160 * 80 / 4);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// More work never takes fewer cycles.
    #[test]
    fn more_work_never_takes_fewer_cycles(
        a in 0u64..1_000_000,
        b in 0u64..1_000_000,
        rows in 0u64..500,
        lanes in 1u32..9,
    ) {
        let (lo, hi) = (a.min(b), a.max(b));
        let v = VectorModel::new(Target::ipu21());
        let pairs = [
            (
                Work::Activation { function: Activation::GeluTanh, elements: lo, lanes },
                Work::Activation { function: Activation::GeluTanh, elements: hi, lanes },
            ),
            (
                Work::Activation { function: Activation::GeluErf, elements: lo, lanes },
                Work::Activation { function: Activation::GeluErf, elements: hi, lanes },
            ),
            (
                Work::Reduce { partials: 3, elements: lo, lanes },
                Work::Reduce { partials: 3, elements: hi, lanes },
            ),
            (
                Work::LayerNorm { rows, columns: lo % 5000, lanes },
                Work::LayerNorm { rows: rows + 1, columns: hi % 5000 + lo % 5000, lanes },
            ),
            (Work::Copy { bytes: lo }, Work::Copy { bytes: hi }),
            (
                Work::AttentionSoftmax { rows, columns: lo % 5000, keys: lo % 5000, score_lanes: lanes, prob_lanes: 4 << (lo % 2), unscaled: lo % 2 == 0, sums_on_amp: lo % 3 == 0 },
                Work::AttentionSoftmax {
                    rows: rows + 1,
                    columns: hi % 5000 + lo % 5000,
                    keys: hi % 5000 + lo % 5000,
                    score_lanes: lanes,
                    prob_lanes: 4 << (lo % 2),
                    unscaled: lo % 2 == 0,
                    sums_on_amp: lo % 3 == 0,
                },
            ),
            (
                Work::Panels { out_rows: rows, out_cols: lo % 5000, transpose: lanes % 2 == 0, fp8: hi % 2 == 0 },
                Work::Panels {
                    out_rows: rows + 1,
                    out_cols: hi % 5000 + lo % 5000,
                    transpose: lanes % 2 == 0,
                    fp8: hi % 2 == 0,
                },
            ),
        ];
        for (small, large) in pairs {
            prop_assert!(v.cycles(&small) <= v.cycles(&large), "{small:?} {large:?}");
        }
    }
}

#[test]
fn profile_json_reads_back_equal_and_does_not_depend_on_the_build() {
    let (_, a) = build("micro-1l-h32.json", 16);
    let (_, b) = build("micro-1l-h32.json", 16);
    assert_eq!(a.profile, b.profile, "two builds estimate alike");
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("pkg");
    a.write(&path).expect("written");
    let text = std::fs::read_to_string(path.join("profile.json")).expect("profile.json exists");
    assert!(text.contains("\"schema\": \"ipu-package/profile/v1\""));
    let back = Package::read(&path).expect("read back");
    assert_eq!(back.profile, a.profile);
    let again = estimate(
        &back,
        &ProfileConfig {
            work: profile(&back).work.clone(),
        },
    )
    .expect("a package read back estimates");
    assert_eq!(Some(&again), a.profile.as_ref());
    // Another schema is refused by name.
    let other = text.replace("ipu-package/profile/v1", "ipu-package/profile/v0");
    let e = Profile::from_json(&other).expect_err("another schema");
    assert!(e.to_string().contains("v0"), "{e}");
}

/// The first GEMM call of the program, to damage.
fn first_gemm(steps: &mut [Step]) -> Option<&mut Codelet> {
    for s in steps {
        match s {
            Step::Compute(step) => {
                if let Some((_, c)) = step
                    .calls
                    .iter_mut()
                    .find(|(_, c)| matches!(c, Codelet::Gemm { .. }))
                {
                    return Some(c);
                }
            }
            Step::Repeat(r) => {
                if let Some(c) = first_gemm(&mut r.body) {
                    return Some(c);
                }
            }
            Step::Exchange(_) => {}
        }
    }
    None
}

#[test]
fn damaged_packages_get_typed_errors() {
    let (graph, good) = build("micro-1l-h32.json", 16);
    let config = ProfileConfig::for_graph(&graph);
    estimate(&good, &config).expect("the built package estimates");

    let mut bad = good.clone();
    if let Some(Codelet::Gemm { rows, .. }) = first_gemm(&mut bad.program.steps) {
        *rows += 1;
    }
    let e = estimate(&bad, &config).expect_err("wrong rows");
    assert!(matches!(e, ProfileError::GemmRows { .. }), "{e}");

    let mut bad = good.clone();
    if let Some(Step::Compute(step)) = bad
        .program
        .steps
        .iter_mut()
        .find(|s| matches!(s, Step::Compute(_)))
        && let Some(call) = step.calls.first_mut()
    {
        call.0 = TileId::from_u32(10_000);
    }
    let e = estimate(&bad, &config).expect_err("a tile out of range");
    assert!(matches!(e, ProfileError::Tile { tile: 10_000, .. }), "{e}");

    let mut bad = good.clone();
    bad.phases.pop();
    let e = estimate(&bad, &config).expect_err("a phase missing");
    assert!(matches!(e, ProfileError::PhaseCount { .. }), "{e}");

    let mut bad = good.clone();
    bad.kernels[0].metadata =
        bad.kernels[0]
            .metadata
            .replacen("\"r_large\": ", "\"r_large\": 1", 1);
    let e = estimate(&bad, &config).expect_err("metadata of another variant");
    assert!(
        matches!(
            e,
            ProfileError::VariantKey { .. } | ProfileError::Variant { .. }
        ),
        "{e}"
    );

    let mut bad = good.clone();
    bad.kernels.pop();
    let e = estimate(&bad, &config).expect_err("a kernel missing");
    assert!(matches!(e, ProfileError::KernelCount { .. }), "{e}");
}

#[test]
fn each_activation_is_costed_by_its_own_figure_and_kind() {
    let t = Target::ipu21();
    let v = VectorModel::new(t);
    let s = t.vector();
    for (function, figure) in [
        (Activation::GeluTanh, s.gelu_instructions_per_vector),
        (Activation::GeluErf, s.gelu_erf_instructions_per_vector),
        (Activation::QuickGelu, s.quick_gelu_instructions_per_vector),
        (Activation::Tanh, s.tanh_instructions_per_vector),
    ] {
        // 1000 F16 elements: 250 vectors, 42 for the busiest of six
        // workers, each `figure` instructions, after a prologue of 15.
        let work = Work::Activation {
            function,
            elements: 1000,
            lanes: 4,
        };
        assert_eq!(v.cycles(&work), 60 + 6 * (15 + 42 * u64::from(figure)));
        assert_eq!(work.kind(), function.name());
        assert!(CODELET_KINDS.contains(&function.name()), "{function}");
    }
}

/// A call's entry names the object's entry at its index: the order of
/// `Variant::entry_points` (short rows then long, each initialise then
/// accumulate), which the profile, the validator and the support's code
/// count all read through `GemmEntry`.
#[test]
fn gemm_entries_index_an_objects_entries_in_their_order() {
    use ipu_kernels::{Mode, RowSize};
    use ipu_package::program::GemmEntry;
    let order = [RowSize::Small, RowSize::Large]
        .into_iter()
        .flat_map(|size| Mode::ALL.into_iter().map(move |mode| (size, mode)));
    for (index, parts) in order.enumerate() {
        let entry = GemmEntry::from_index(index);
        assert_eq!(entry.index(), index);
        assert_eq!(entry.parts(), parts, "entry {index}");
    }
}
