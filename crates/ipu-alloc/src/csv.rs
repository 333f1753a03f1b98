//! MiniMalloc-style CSV problems: import, export, solve and check.
//!
//! A row is `id,lower,upper,size[,alignment][,offset]`: a buffer live over
//! the half-open interval `[lower, upper)` of `size` bytes, optionally with an
//! alignment and a fixed `offset`. A header row naming the columns is
//! optional; with a header the columns may come in any order. Sizes and
//! capacities are 64-bit because research traces exceed 4 GiB.
//!
//! This single-arena form is the standard research benchmark for the
//! problem; [`CsvProblem::solve`] runs the same greedy passes and exact
//! search as tile placement, and [`CsvProblem::check`] is an independent
//! checker of a solution.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::arena::{Arena, Item, Neighbours};
use crate::exact::{
    ExactBudget, ExactOutcome, SearchStats, solve_exact_deep, solve_exact_parallel,
};
use crate::greedy::{GreedyStrategy, greedy, peak_of};
use rayon::prelude::*;

/// One buffer of a CSV problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvBuffer {
    /// The buffer's name in the file.
    pub id: String,
    /// First time the buffer is live.
    pub lower: u64,
    /// One past the last time the buffer is live.
    pub upper: u64,
    /// Size in bytes.
    pub size: u64,
    /// Required alignment (a power of two; 1 when the column is absent).
    pub alignment: u64,
    /// A fixed offset, if the file gives one.
    pub offset: Option<u64>,
}

/// A single-arena problem read from CSV.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CsvProblem {
    /// The buffers in file order.
    pub buffers: Vec<CsvBuffer>,
}

/// Why a CSV file was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsvError {
    /// A row has the wrong number of fields or a field is not a number.
    #[error("line {line}: {message}; rows are `id,lower,upper,size[,alignment][,offset]`")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A buffer ends before it starts or has a bad alignment.
    #[error(
        "line {line}: buffer `{id}` is invalid ({message}); give lower <= upper and a power-of-two alignment"
    )]
    BadBuffer {
        /// 1-based line number.
        line: usize,
        /// The buffer id.
        id: String,
        /// What is wrong.
        message: String,
    },
}

/// The verdict of [`CsvProblem::solve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SolveResult {
    /// A placement within the capacity was found (and checked).
    Fits,
    /// No placement within the capacity exists (proved).
    Infeasible,
    /// Neither was established within the budget.
    Unknown,
}

impl std::fmt::Display for SolveResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SolveResult::Fits => "fits",
            SolveResult::Infeasible => "infeasible",
            SolveResult::Unknown => "unknown",
        })
    }
}

/// Budgets for [`CsvProblem::solve`].
#[derive(Clone, Debug)]
pub struct SolveConfig {
    /// Greedy passes to try first.
    pub strategies: Vec<GreedyStrategy>,
    /// Problems with more buffers than this use `large_strategies` instead:
    /// each pass costs time proportional to the overlaps, and on large
    /// traces the size-ordered passes are the ones that reach the bound.
    pub large_problem_buffers: usize,
    /// The passes for large problems.
    pub large_strategies: Vec<GreedyStrategy>,
    /// Exact-search node budget.
    pub max_nodes: u64,
    /// Wall-clock budget for the exact search.
    pub timeout: Option<Duration>,
    /// Run the exact search on two threads (the problem and its
    /// time-reversed copy); the first conclusive answer wins, so the
    /// placement found may differ between runs. Off: deterministic.
    pub parallel_search: bool,
}

impl Default for SolveConfig {
    fn default() -> Self {
        SolveConfig {
            strategies: GreedyStrategy::DEFAULT_SET.to_vec(),
            large_problem_buffers: 20_000,
            large_strategies: vec![
                GreedyStrategy::DEFAULT_SET[3],
                GreedyStrategy::DEFAULT_SET[0],
            ],
            max_nodes: 50_000_000,
            timeout: Some(Duration::from_secs(10)),
            parallel_search: true,
        }
    }
}

/// What [`CsvProblem::solve`] found.
#[derive(Clone, Debug)]
pub struct SolveOutcome {
    /// The verdict.
    pub result: SolveResult,
    /// The offsets of a placement within capacity, when `result` is `Fits`.
    pub offsets: Option<Vec<u64>>,
    /// The peak of the placement returned, or of the best greedy placement
    /// (which exceeds the capacity) otherwise.
    pub peak: u64,
    /// The peak-live lower bound.
    pub lower_bound: u64,
    /// Exact-search nodes visited (0 if greedy sufficed).
    pub nodes: u64,
    /// Whether the exact search was needed.
    pub used_exact: bool,
    /// How the exact search's nodes ended (all zero if it did not run).
    pub search: SearchStats,
}

/// One error found by [`CsvProblem::check`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsvCheckError {
    /// The solution has the wrong number of offsets.
    #[error("the solution has {got} offsets for {want} buffers")]
    Count {
        /// Offsets given.
        got: usize,
        /// Buffers in the problem.
        want: usize,
    },
    /// A buffer is misaligned, beyond the capacity or off its fixed offset.
    #[error(
        "buffer `{id}` at offset {offset} is misaligned, beyond the capacity or moved from its fixed offset"
    )]
    Misplaced {
        /// The buffer.
        id: String,
        /// Its offset.
        offset: u64,
    },
    /// Two buffers live at the same time overlap.
    #[error("buffers `{a}` and `{b}` are live at the same time and overlap in memory")]
    Overlap {
        /// One buffer.
        a: String,
        /// The other.
        b: String,
    },
}

fn parse_u64(field: &str, line: usize, what: &str) -> Result<u64, CsvError> {
    field.trim().parse().map_err(|_| CsvError::Syntax {
        line,
        message: format!("{what} `{}` is not a non-negative integer", field.trim()),
    })
}

impl CsvProblem {
    /// Parses a CSV problem.
    pub fn parse(text: &str) -> Result<CsvProblem, CsvError> {
        let mut columns: [Option<usize>; 6] =
            [Some(0), Some(1), Some(2), Some(3), Some(4), Some(5)];
        let mut buffers = Vec::new();
        for (k, raw) in text.lines().enumerate() {
            let line = k + 1;
            let row = raw.trim();
            if row.is_empty() || row.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = row.split(',').map(str::trim).collect();
            if buffers.is_empty() && fields.iter().any(|f| f.eq_ignore_ascii_case("lower")) {
                let find = |name: &str| fields.iter().position(|f| f.eq_ignore_ascii_case(name));
                columns = [
                    find("id").or(find("buffer")),
                    find("lower").or(find("start")),
                    find("upper").or(find("end")),
                    find("size"),
                    find("alignment").or(find("align")),
                    find("offset"),
                ];
                if columns[1..4].iter().any(Option::is_none) {
                    return Err(CsvError::Syntax {
                        line,
                        message: "the header lacks lower, upper or size".into(),
                    });
                }
                continue;
            }
            let get = |c: usize| columns[c].and_then(|i| fields.get(i)).copied();
            if fields.len() < 4 {
                return Err(CsvError::Syntax {
                    line,
                    message: format!("{} fields, at least 4 needed", fields.len()),
                });
            }
            let id = get(0).map_or_else(|| buffers.len().to_string(), str::to_owned);
            let lower = parse_u64(get(1).unwrap_or(""), line, "lower")?;
            let upper = parse_u64(get(2).unwrap_or(""), line, "upper")?;
            let size = parse_u64(get(3).unwrap_or(""), line, "size")?;
            let alignment = match get(4) {
                Some(f) if !f.is_empty() => parse_u64(f, line, "alignment")?,
                _ => 1,
            };
            let offset = match get(5) {
                Some(f) if !f.is_empty() => Some(parse_u64(f, line, "offset")?),
                _ => None,
            };
            let bad = |message: &str| CsvError::BadBuffer {
                line,
                id: id.clone(),
                message: message.into(),
            };
            if upper < lower {
                return Err(bad("upper < lower"));
            }
            if !alignment.is_power_of_two() {
                return Err(bad("alignment is not a power of two"));
            }
            buffers.push(CsvBuffer {
                id,
                lower,
                upper,
                size,
                alignment,
                offset,
            });
        }
        Ok(CsvProblem { buffers })
    }

    /// Writes the problem as CSV with a header; with `offsets`, every buffer
    /// gets its offset (a solution file), otherwise fixed offsets only.
    pub fn to_csv(&self, offsets: Option<&[u64]>) -> String {
        let mut out = String::from("id,lower,upper,size,alignment,offset\n");
        for (i, b) in self.buffers.iter().enumerate() {
            let off = offsets.and_then(|o| o.get(i).copied()).or(b.offset);
            let off = off.map_or_else(String::new, |o| o.to_string());
            out.push_str(&format!(
                "{},{},{},{},{},{}\n",
                b.id, b.lower, b.upper, b.size, b.alignment, off
            ));
        }
        out
    }

    /// The peak over time of the bytes live at once (and of any fixed
    /// buffer's end): no placement has a lower peak.
    pub fn lower_bound(&self) -> u64 {
        let arena = self.arena(u64::MAX >> 1);
        let fixed_end = self
            .buffers
            .iter()
            .filter(|b| b.upper > b.lower && b.size > 0)
            .filter_map(|b| b.offset.map(|o| o.saturating_add(b.size)))
            .max()
            .unwrap_or(0);
        arena.peak_live().0.max(fixed_end)
    }

    pub(crate) fn arena(&self, capacity: u64) -> Arena {
        let mut points: Vec<u64> = self
            .buffers
            .iter()
            .flat_map(|b| [b.lower, b.upper])
            .collect();
        points.sort_unstable();
        points.dedup();
        let section = |t: u64| points.partition_point(|&p| p < t) as u32;
        let items = self
            .buffers
            .iter()
            .map(|b| Item {
                start: section(b.lower),
                end: section(b.upper),
                size: b.size,
                align: b.alignment.max(1),
                windows: 0,
                fixed: b.offset,
                partners: SmallVec::new(),
            })
            .collect();
        Arena {
            items,
            sections: points.len().saturating_sub(1) as u32,
            times: points,
            window_sets: vec![vec![(0, capacity)]],
            elements: Vec::new(),
            base: 0,
            limit: capacity,
        }
    }

    /// Places the buffers within `capacity`: greedy passes first, then the
    /// exact search, which finds a placement or proves there is none within
    /// its budget. Every placement returned has passed [`CsvProblem::check`].
    pub fn solve(&self, capacity: u64, config: &SolveConfig) -> SolveOutcome {
        let started = Instant::now();
        let lower_bound = self.lower_bound();
        let open = self.arena(u64::MAX >> 1);
        let index = Neighbours::new(&open.items);
        // The passes are independent: run them in parallel and keep the
        // lowest peak, the earliest pass on ties, so the result does not
        // depend on the thread count.
        let strategies = if self.buffers.len() > config.large_problem_buffers {
            &config.large_strategies
        } else {
            &config.strategies
        };
        let runs: Vec<Option<(u64, Vec<u64>)>> = strategies
            .par_iter()
            .map(|&strategy| {
                greedy(&open, &index, strategy)
                    .ok()
                    .map(|offsets| (peak_of(&open, &offsets), offsets))
            })
            .collect();
        let mut best: Option<(u64, Vec<u64>)> = None;
        for (peak, offsets) in runs.into_iter().flatten() {
            if best.as_ref().is_none_or(|(p, _)| peak < *p) {
                best = Some((peak, offsets));
            }
        }
        let greedy_peak = best.as_ref().map_or(u64::MAX, |b| b.0);
        let outcome = |result, offsets, peak, nodes, used_exact| SolveOutcome {
            result,
            offsets,
            peak,
            lower_bound,
            nodes,
            used_exact,
            search: SearchStats::default(),
        };
        if let Some((peak, offsets)) = best.filter(|(p, _)| *p <= capacity) {
            if self.check(capacity, &offsets).is_ok() {
                return outcome(SolveResult::Fits, Some(offsets), peak, 0, false);
            }
        }
        if lower_bound > capacity {
            return outcome(SolveResult::Infeasible, None, greedy_peak, 0, false);
        }
        let bounded = self.arena(capacity);
        for &strategy in strategies {
            if let Ok(offsets) = greedy(&bounded, &index, strategy) {
                if self.check(capacity, &offsets).is_ok() {
                    let peak = peak_of(&bounded, &offsets);
                    return outcome(SolveResult::Fits, Some(offsets), peak, 0, false);
                }
            }
        }
        let budget = ExactBudget {
            max_nodes: config.max_nodes,
            deadline: config.timeout.map(|t| started + t),
            stop: None,
        };
        let report = if config.parallel_search && rayon::current_num_threads() > 1 {
            solve_exact_parallel(&bounded, budget)
        } else {
            solve_exact_deep(&bounded, budget)
        };
        let stats = report.stats;
        let mut out = match report.outcome {
            ExactOutcome::Found(offsets) if self.check(capacity, &offsets).is_ok() => {
                let peak = peak_of(&bounded, &offsets);
                outcome(SolveResult::Fits, Some(offsets), peak, report.nodes, true)
            }
            ExactOutcome::Found(_) | ExactOutcome::Unknown => {
                outcome(SolveResult::Unknown, None, greedy_peak, report.nodes, true)
            }
            ExactOutcome::Infeasible => outcome(
                SolveResult::Infeasible,
                None,
                greedy_peak,
                report.nodes,
                true,
            ),
        };
        out.search = stats;
        out
    }

    /// Checks a solution independently of the solver: one offset per
    /// buffer, aligned, within capacity, fixed offsets kept, and no two
    /// buffers live at the same time overlapping. Collects every error.
    pub fn check(&self, capacity: u64, offsets: &[u64]) -> Result<(), Vec<CsvCheckError>> {
        let mut errors = Vec::new();
        if offsets.len() != self.buffers.len() {
            errors.push(CsvCheckError::Count {
                got: offsets.len(),
                want: self.buffers.len(),
            });
            return Err(errors);
        }
        for (b, &o) in self.buffers.iter().zip(offsets) {
            let aligned = o % b.alignment.max(1) == 0;
            let inside = o.checked_add(b.size).is_some_and(|e| e <= capacity);
            let kept = b.offset.is_none_or(|f| f == o);
            if !aligned || !inside || !kept {
                errors.push(CsvCheckError::Misplaced {
                    id: b.id.clone(),
                    offset: o,
                });
            }
        }
        // Sweep over time: ends before starts at equal times, since
        // lifetimes are half-open. The active set is keyed by offset, so an
        // overlap always shows up against a neighbour in address order.
        let mut events: Vec<(u64, bool, usize)> = Vec::new();
        for (i, b) in self.buffers.iter().enumerate() {
            if b.upper > b.lower && b.size > 0 {
                events.push((b.lower, true, i));
                events.push((b.upper, false, i));
            }
        }
        events.sort_unstable_by_key(|&(t, start, i)| (t, start, i));
        let mut active: BTreeMap<(u64, usize), u64> = BTreeMap::new();
        for (_, start, i) in events {
            let key = (offsets[i], i);
            if !start {
                active.remove(&key);
                continue;
            }
            let end = offsets[i].saturating_add(self.buffers[i].size);
            for (&(o, j), &e) in active.range(..key).rev() {
                if e <= offsets[i] {
                    break;
                }
                let _ = o;
                errors.push(CsvCheckError::Overlap {
                    a: self.buffers[j].id.clone(),
                    b: self.buffers[i].id.clone(),
                });
            }
            for (&(o, j), _) in active.range(key..) {
                if o >= end {
                    break;
                }
                errors.push(CsvCheckError::Overlap {
                    a: self.buffers[j].id.clone(),
                    b: self.buffers[i].id.clone(),
                });
            }
            active.insert(key, end);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}
