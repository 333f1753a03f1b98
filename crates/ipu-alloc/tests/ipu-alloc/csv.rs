//! CSV import/export, the CSV checker, and the exact search on generated
//! zero-slack instances.

use ipu_alloc::generate::zero_slack;
use ipu_alloc::{CsvError, CsvProblem, Infeasibility, SolveConfig, SolveResult};

/// Node budgets only, one thread: the same answer every run.
fn deterministic() -> SolveConfig {
    SolveConfig {
        max_nodes: 2_000_000,
        timeout: None,
        parallel_search: false,
        ..SolveConfig::default()
    }
}

#[test]
fn csv_round_trips_with_and_without_header() {
    let text = "id,lower,upper,size,alignment,offset\na,0,4,100,1,\nb,2,6,50,8,\nc,5,7,10,1,200\n";
    let p = CsvProblem::parse(text).unwrap();
    assert_eq!(p.buffers.len(), 3);
    assert_eq!(p.buffers[1].alignment, 8);
    assert_eq!(p.buffers[2].offset, Some(200));
    assert_eq!(CsvProblem::parse(&p.to_csv(None)).unwrap(), p);
    let bare = CsvProblem::parse("0,0,4,100\n1,2,6,50\n").unwrap();
    assert_eq!(bare.buffers[1].size, 50);
    assert_eq!(bare.buffers[1].alignment, 1);
    // Columns in another order, selected by the header.
    let reordered = CsvProblem::parse("size,id,upper,lower\n7,x,9,3\n").unwrap();
    assert_eq!(reordered.buffers[0].lower, 3);
    assert_eq!(reordered.buffers[0].size, 7);
}

#[test]
fn bad_csv_is_rejected_with_the_line() {
    let e = CsvProblem::parse("id,lower,upper,size\na,0,x,5\n").unwrap_err();
    assert!(
        matches!(
            e,
            CsvError::Number {
                line: 2,
                column: "upper",
                ..
            }
        ),
        "{e}"
    );
    // The typed cause is kept.
    assert!(std::error::Error::source(&e).is_some());
    let e = CsvProblem::parse("a,5,1,5\n").unwrap_err();
    assert!(matches!(e, CsvError::Reversed { line: 1, .. }), "{e}");
    let e = CsvProblem::parse("a,0,1,5,3\n").unwrap_err();
    assert!(e.to_string().contains("power of two"), "{e}");
    let e = CsvProblem::parse("a,0,1\n").unwrap_err();
    assert!(
        matches!(e, CsvError::FieldCount { line: 1, fields: 3 }),
        "{e}"
    );
    let e = CsvProblem::parse("id,lower,size\na,0,1\n").unwrap_err();
    assert!(
        matches!(
            e,
            CsvError::Header {
                column: "upper",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn duplicated_ids_are_rejected_with_both_lines() {
    let e = CsvProblem::parse("a,0,4,1\nb,1,2,1\n\na,2,3,1\n").unwrap_err();
    assert!(
        matches!(&e, CsvError::DuplicateId { line: 4, first_line: 1, id } if id == "a"),
        "{e}"
    );
}

#[test]
fn minimalloc_headers_are_understood() {
    let p = CsvProblem::parse("buffer,start,end,size\nb1,0,3,4\nb2,3,9,4\n").unwrap();
    assert_eq!(p.buffers.len(), 2);
    assert_eq!((p.buffers[1].lower, p.buffers[1].upper), (3, 9));
}

#[test]
fn sixty_four_bit_sizes_are_accepted() {
    let big = 6u64 << 30;
    let p = CsvProblem::parse(&format!("a,0,2,{big}\nb,1,3,{big}\n")).unwrap();
    assert_eq!(p.lower_bound(), 2 * big);
    let out = p.solve(2 * big, &SolveConfig::default());
    assert_eq!(out.result, SolveResult::Fits);
    let out = p.solve(2 * big - 1, &SolveConfig::default());
    assert_eq!(out.result, SolveResult::Infeasible);
}

#[test]
fn the_csv_checker_rejects_known_bad_solutions() {
    let p = CsvProblem::parse("a,0,4,100\nb,2,6,50,8\nc,4,7,10,1,200\n").unwrap();
    assert!(p.check(300, &[0, 104, 200]).is_ok());
    // b overlaps a while both live.
    assert!(p.check(300, &[0, 96, 200]).is_err());
    // Misaligned b; c moved from its fixed offset (and now under b).
    let e = p.check(300, &[0, 101, 150]).unwrap_err();
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(p.check(120, &[0, 104, 200]).is_err());
    assert!(p.check(300, &[0, 104]).is_err());
    // a and c do not live together (half-open lifetimes): sharing is fine.
    let q = CsvProblem::parse("a,0,4,100\nc,4,7,10\n").unwrap();
    assert!(q.check(100, &[0, 0]).is_ok());
}

#[test]
fn zero_slack_instances_are_solved_exactly_at_the_bound() {
    for seed in 0..6 {
        let (p, cut) = zero_slack(seed, 150, 1 << 20, 1000);
        let lb = p.lower_bound();
        assert_eq!(lb, 1 << 20, "seed {seed}");
        // The cut itself is a placement at the bound.
        p.check(lb, &cut).unwrap();
        let out = p.solve(lb, &deterministic());
        assert_eq!(out.result, SolveResult::Fits, "seed {seed}");
        let offsets = out.offsets.unwrap();
        p.check(lb, &offsets).unwrap();
        assert!(lb <= out.peak && out.peak <= lb);
    }
}

#[test]
fn infeasibility_below_the_bound_and_by_fragmentation_is_proved() {
    let (p, _) = zero_slack(3, 60, 4096, 100);
    let out = p.solve(4095, &SolveConfig::default());
    assert_eq!(out.result, SolveResult::Infeasible);
    // The bound is reachable here: a and c take the bottom, b and d the top.
    let q = CsvProblem::parse("a,0,2,2\nb,1,3,1\nc,2,4,2\nd,1,3,1\n").unwrap();
    let out = q.solve(q.lower_bound(), &SolveConfig::default());
    assert_eq!(out.result, SolveResult::Fits);
    // A fixed buffer splits the space: 3 live bytes fit in total, but the
    // 2-byte buffer fits in no gap.
    let r = CsvProblem::parse("a,0,4,1,1,1\nb,0,4,2\n").unwrap();
    assert_eq!(r.lower_bound(), 3);
    let out = r.solve(3, &SolveConfig::default());
    assert_eq!(out.result, SolveResult::Infeasible, "{out:?}");
    assert!(
        matches!(out.infeasibility, Some(Infeasibility::Exhausted { .. })),
        "{out:?}"
    );
    assert_eq!(
        r.solve(4, &SolveConfig::default()).result,
        SolveResult::Fits
    );
}

#[test]
fn deep_searches_on_large_instances_do_not_overflow_the_stack() {
    // Thousands of buffers at zero slack: the search recursion is as deep
    // as the buffer count. It runs on its own deep stack, sequentially and
    // in parallel; whatever it concludes within a second must be sound.
    let (p, _) = zero_slack(11, 3000, 1 << 24, 20_000);
    let lb = p.lower_bound();
    for parallel_search in [false, true] {
        let config = SolveConfig {
            timeout: Some(std::time::Duration::from_secs(1)),
            parallel_search,
            ..SolveConfig::default()
        };
        let out = p.solve(lb, &config);
        assert_ne!(out.result, SolveResult::Infeasible);
        // The best placement found is reported whether it fits or not.
        let offsets = out.offsets.unwrap();
        p.check(out.peak.max(lb), &offsets).unwrap();
        assert!(lb <= out.peak);
    }
}
