//! MiniMalloc-style CSV problems: import, export, lower bound and check.
//!
//! A row is `id,lower,upper,size[,alignment][,offset]`: a buffer live over
//! the half-open interval `[lower, upper)` of `size` bytes, optionally with an
//! alignment and a fixed `offset`. A header row naming the columns is
//! optional; with a header the columns may come in any order and may use
//! MiniMalloc's names (`buffer,start,end,size`). Sizes and capacities are
//! 64-bit because research traces exceed 4 GiB. Ids must be unique.
//!
//! This single-arena form is the standard research benchmark for the
//! problem; `solve.rs` places it, and [`CsvProblem::check`] is an
//! independent checker of a solution.

use std::collections::{BTreeMap, HashMap};
use std::num::ParseIntError;

use smallvec::SmallVec;

use crate::arena::{Arena, Item};

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
#[non_exhaustive]
pub enum CsvError {
    /// A row has fewer than four fields.
    #[error(
        "line {line}: {fields} field(s), at least 4 needed; rows are `id,lower,upper,size[,alignment][,offset]`"
    )]
    FieldCount {
        /// 1-based line number.
        line: usize,
        /// Fields found.
        fields: usize,
    },
    /// A header names no column for a required field.
    #[error(
        "line {line}: the header has no `{column}` column; name the columns id,lower,upper,size"
    )]
    Header {
        /// 1-based line number.
        line: usize,
        /// The missing column.
        column: &'static str,
    },
    /// A field is not a non-negative integer.
    #[error("line {line}: {column} `{text}` is not a non-negative 64-bit integer")]
    Number {
        /// 1-based line number.
        line: usize,
        /// The column.
        column: &'static str,
        /// The text found.
        text: String,
        /// The parse error.
        #[source]
        source: ParseIntError,
    },
    /// A buffer ends before it starts.
    #[error(
        "line {line}: buffer `{id}` ends ({upper}) before it starts ({lower}); give lower <= upper"
    )]
    Reversed {
        /// 1-based line number.
        line: usize,
        /// The buffer.
        id: String,
        /// Its start.
        lower: u64,
        /// Its end.
        upper: u64,
    },
    /// An alignment is not a power of two.
    #[error("line {line}: buffer `{id}` has alignment {alignment}, which is not a power of two")]
    Alignment {
        /// 1-based line number.
        line: usize,
        /// The buffer.
        id: String,
        /// The alignment given.
        alignment: u64,
    },
    /// Two rows have the same id.
    #[error(
        "line {line}: buffer id `{id}` was already used on line {first_line}; give every buffer its own id"
    )]
    DuplicateId {
        /// 1-based line number of the second use.
        line: usize,
        /// The id.
        id: String,
        /// 1-based line number of the first use.
        first_line: usize,
    },
}

/// One error found by [`CsvProblem::check`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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

/// The peak of live bytes over time: its value (which may exceed 64 bits
/// when many large buffers are live at once) and the first time it occurs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LivePeak {
    pub bytes: u128,
    pub time: u64,
}

/// Column names a header may use, per field.
const NAMES: [(&str, &[&str]); 6] = [
    ("id", &["id", "buffer", "name"]),
    ("lower", &["lower", "start", "begin"]),
    ("upper", &["upper", "end"]),
    ("size", &["size", "bytes"]),
    ("alignment", &["alignment", "align"]),
    ("offset", &["offset"]),
];

fn parse_u64(field: &str, line: usize, column: &'static str) -> Result<u64, CsvError> {
    field.trim().parse().map_err(|source| CsvError::Number {
        line,
        column,
        text: field.trim().to_owned(),
        source,
    })
}

impl CsvProblem {
    /// Parses a CSV problem.
    pub fn parse(text: &str) -> Result<CsvProblem, CsvError> {
        let mut columns: [Option<usize>; 6] =
            [Some(0), Some(1), Some(2), Some(3), Some(4), Some(5)];
        let mut buffers = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (k, raw) in text.lines().enumerate() {
            let line = k + 1;
            let row = raw.trim();
            if row.is_empty() || row.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = row.split(',').map(str::trim).collect();
            let named = |f: &&str| {
                NAMES
                    .iter()
                    .any(|(_, names)| names.iter().any(|n| f.eq_ignore_ascii_case(n)))
            };
            let is_header = buffers.is_empty()
                && fields.iter().any(named)
                && fields
                    .iter()
                    .all(|f| f.parse::<u64>().is_err() || f.is_empty());
            if is_header {
                for (c, (_, names)) in NAMES.iter().enumerate() {
                    columns[c] = fields
                        .iter()
                        .position(|f| names.iter().any(|n| f.eq_ignore_ascii_case(n)));
                }
                for c in 1..4 {
                    if columns[c].is_none() {
                        return Err(CsvError::Header {
                            line,
                            column: NAMES[c].0,
                        });
                    }
                }
                continue;
            }
            if fields.len() < 4 {
                return Err(CsvError::FieldCount {
                    line,
                    fields: fields.len(),
                });
            }
            let get = |c: usize| columns[c].and_then(|i| fields.get(i)).copied();
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
            if upper < lower {
                return Err(CsvError::Reversed {
                    line,
                    id,
                    lower,
                    upper,
                });
            }
            if !alignment.is_power_of_two() {
                return Err(CsvError::Alignment {
                    line,
                    id,
                    alignment,
                });
            }
            if let Some(&first_line) = seen.get(&id) {
                return Err(CsvError::DuplicateId {
                    line,
                    id,
                    first_line,
                });
            }
            seen.insert(id.clone(), line);
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

    /// The peak over time of the bytes live at once, and the first time it
    /// is reached (0 when nothing is ever live).
    pub(crate) fn live_peak(&self) -> LivePeak {
        let mut events: Vec<(u64, i128)> = Vec::with_capacity(2 * self.buffers.len());
        for b in &self.buffers {
            if b.upper > b.lower && b.size > 0 {
                events.push((b.lower, i128::from(b.size)));
                events.push((b.upper, -i128::from(b.size)));
            }
        }
        events.sort_unstable();
        let (mut run, mut best) = (0i128, LivePeak { bytes: 0, time: 0 });
        let mut k = 0;
        while k < events.len() {
            let t = events[k].0;
            while k < events.len() && events[k].0 == t {
                run += events[k].1;
                k += 1;
            }
            let live = u128::try_from(run).unwrap_or(0);
            if live > best.bytes {
                best = LivePeak {
                    bytes: live,
                    time: t,
                };
            }
        }
        best
    }

    /// The peak over time of the bytes live at once (and of any fixed
    /// buffer's end): no placement has a lower peak. Saturates at
    /// `u64::MAX`.
    pub fn lower_bound(&self) -> u64 {
        let fixed_end = self
            .buffers
            .iter()
            .filter(|b| b.upper > b.lower && b.size > 0)
            .filter_map(|b| b.offset.map(|o| o.saturating_add(b.size)))
            .max()
            .unwrap_or(0);
        u64::try_from(self.live_peak().bytes)
            .unwrap_or(u64::MAX)
            .max(fixed_end)
    }

    /// The problem as an arena whose single window is `[0, capacity)`.
    /// Buffers with an empty lifetime make no section boundary: they
    /// constrain nothing in time.
    pub(crate) fn arena(&self, capacity: u64) -> Arena {
        let mut points: Vec<u64> = self
            .buffers
            .iter()
            .filter(|b| b.upper > b.lower)
            .flat_map(|b| [b.lower, b.upper])
            .collect();
        points.sort_unstable();
        points.dedup();
        let section = |t: u64| points.partition_point(|&p| p < t) as u32;
        let items = self
            .buffers
            .iter()
            .map(|b| {
                let (start, end) = if b.upper > b.lower {
                    (section(b.lower), section(b.upper))
                } else {
                    (0, 0)
                };
                Item {
                    start,
                    end,
                    size: b.size,
                    align: b.alignment.max(1),
                    windows: 0,
                    fixed: b.offset,
                    partners: SmallVec::new(),
                }
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
            for (&(_, j), &e) in active.range(..key).rev() {
                if e <= offsets[i] {
                    break;
                }
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
