//! The exact search's benchmark classes: their shapes and witnesses, and
//! bounded solves of the smallest instance of each class.

use ipu_alloc::generate::{
    CLASS_SIZES, exact_classes, exact_classes_with, ml_zero_slack, zero_slack_grid,
};
use ipu_alloc::{SolveConfig, SolveResult};

#[test]
fn every_class_has_its_sizes_and_a_capacity_at_or_above_its_bound() {
    let classes = exact_classes();
    assert!(classes.iter().any(|c| c.zero_slack) && classes.iter().any(|c| !c.zero_slack));
    for class in &classes {
        assert_eq!(class.instances.len(), CLASS_SIZES.len(), "{}", class.name);
        for (inst, &n) in class.instances.iter().zip(&CLASS_SIZES) {
            let buffers = inst.problem.buffers.len();
            // Near-zero-slack classes remove about a tenth of a larger cut.
            assert!(
                buffers * 10 >= n * 9 && buffers * 10 <= n * 11,
                "{} has {buffers}",
                inst.name
            );
            let bound = inst.problem.lower_bound();
            assert!(
                bound <= inst.capacity,
                "{}: bound {bound} above {}",
                inst.name,
                inst.capacity
            );
            if class.zero_slack {
                assert_eq!(bound, inst.capacity, "{}", inst.name);
            }
        }
    }
}

#[test]
fn seeded_classes_keep_the_first_draw_and_add_distinct_ones() {
    let one = exact_classes();
    let three = exact_classes_with(&CLASS_SIZES, 3);
    for (a, b) in one.iter().zip(&three) {
        assert_eq!(b.instances.len(), 3 * a.instances.len(), "{}", a.name);
        for (k, inst) in a.instances.iter().enumerate() {
            let first = &b.instances[3 * k];
            assert_eq!(first.name, inst.name);
            assert_eq!(first.problem.to_csv(None), inst.problem.to_csv(None));
            let others = &b.instances[3 * k + 1..3 * k + 3];
            assert_eq!(others[0].name, format!("{}-s2", inst.name));
            for other in others {
                assert_ne!(other.problem.to_csv(None), inst.problem.to_csv(None));
            }
        }
    }
}

#[test]
fn constructions_are_placements_at_the_capacity() {
    for seed in 0..3 {
        let (p, cut) = ml_zero_slack(seed, 300, 0);
        assert_eq!(p.lower_bound(), 1 << 20);
        p.check(1 << 20, &cut).unwrap();
        let (q, kept) = ml_zero_slack(seed, 300, 10);
        q.check(1 << 20, &kept).unwrap();
        assert!(q.buffers.len() < p.buffers.len());
        let (g, witness) = zero_slack_grid(seed, 200, 1 << 20, 1 << 20, 1);
        g.check(1 << 20, &witness).unwrap();
    }
}

#[test]
fn smallest_instances_solve_soundly_within_a_node_budget() {
    for class in exact_classes() {
        let inst = &class.instances[0];
        let out = inst.problem.solve(
            inst.capacity,
            &SolveConfig {
                max_nodes: 100_000,
                timeout: None,
                parallel_search: false,
                ..SolveConfig::default()
            },
        );
        if out.result == SolveResult::Fits {
            let offsets = out.offsets.as_ref().unwrap();
            inst.problem.check(inst.capacity, offsets).unwrap();
            assert!(
                out.lower_bound <= out.peak && out.peak <= inst.capacity,
                "{}",
                inst.name
            );
        }
        // A class built with a witness is never called infeasible.
        if !class.name.starts_with("interval") {
            assert_ne!(out.result, SolveResult::Infeasible, "{}", inst.name);
        }
    }
}

#[test]
fn a_name_means_one_instance_whatever_sizes_are_listed() {
    // Drawn alone, after another size or beside the default sizes, an
    // instance of a given name is the same instance.
    let alone = exact_classes_with(&[300], 2);
    let after = exact_classes_with(&[150, 250, 300], 2);
    let default = exact_classes_with(&CLASS_SIZES, 2);
    let odd_alone = exact_classes_with(&[250], 1);
    for ((a, b), c) in alone.iter().zip(&after).zip(&default) {
        for inst in &a.instances {
            for other in b.instances.iter().chain(&c.instances) {
                if other.name == inst.name {
                    assert_eq!(
                        other.problem.to_csv(None),
                        inst.problem.to_csv(None),
                        "{}",
                        inst.name
                    );
                }
            }
            assert!(
                b.instances.iter().any(|o| o.name == inst.name),
                "{}",
                inst.name
            );
        }
    }
    // A size outside the default list has its own draw, not the one of
    // the size at its position in that list.
    for (odd, c) in odd_alone.iter().zip(&default) {
        let first = &odd.instances[0];
        let n150 = &c.instances[0];
        assert_ne!(
            first.problem.to_csv(None),
            n150.problem.to_csv(None),
            "{}",
            first.name
        );
        let same = after
            .iter()
            .find(|k| k.name == odd.name)
            .and_then(|k| k.instances.iter().find(|o| o.name == first.name));
        assert_eq!(
            same.map(|o| o.problem.to_csv(None)),
            Some(first.problem.to_csv(None)),
            "{}",
            first.name
        );
    }
}
