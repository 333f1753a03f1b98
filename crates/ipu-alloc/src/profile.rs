//! Memory profiles: live bytes per step per class per tile.
//!
//! The profile is a boundary type, written as JSON next to a package so that
//! memory pressure can be inspected without re-running placement.
//!
//! # JSON schema (`ipu-alloc/memory-profile/v1`)
//!
//! ```text
//! {
//!   "schema": "ipu-alloc/memory-profile/v1",
//!   "scope": string,                 // what was profiled, e.g. "baseline"
//!   "peak_tile": integer | null,     // tile with the largest effective peak
//!   "peak_step": integer,            // step of that peak
//!   "effective_peak_bytes": integer, // requests + reservations live then
//!   "tiles": [ {
//!     "tile": integer,
//!     "peak_step": integer,
//!     "effective_peak_bytes": integer,
//!     "runs": [ {                    // maximal runs of steps with equal values,
//!       "first_step": integer,       // in step order, covering every step
//!       "last_step": integer,        // from the first to the last live step
//!       "standard": integer,         // live Ipu21Standard request bytes
//!       "interleaved": integer,      // live Ipu21Interleaved request bytes
//!       "reserved": integer          // bytes of reservations live then
//!     } ]
//!   } ]
//! }
//! ```
//!
//! Runs rather than one entry per step keep the file small and bounded
//! whatever the step numbers are.

use ipu_layout::{MemoryClass, TileId};
use serde::{Deserialize, Serialize};

use crate::sections::Sections;
use crate::{Problem, TileProblem};

/// The schema identifier written into every profile.
pub const PROFILE_SCHEMA: &str = "ipu-alloc/memory-profile/v1";

/// Live bytes over a run of steps with equal values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileRun {
    /// First step of the run.
    pub first_step: u32,
    /// Last step of the run (inclusive).
    pub last_step: u32,
    /// Live `Ipu21Standard` request bytes.
    pub standard: u64,
    /// Live `Ipu21Interleaved` request bytes.
    pub interleaved: u64,
    /// Bytes of reservations live in the run.
    pub reserved: u64,
}

impl ProfileRun {
    /// Everything live in the run.
    pub fn total(&self) -> u64 {
        self.standard + self.interleaved + self.reserved
    }
}

/// The profile of one tile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileProfile {
    /// The tile.
    pub tile: TileId,
    /// The first step with the largest total.
    pub peak_step: u32,
    /// The largest total of live request and reservation bytes.
    pub effective_peak_bytes: u64,
    /// Live bytes per run of steps.
    pub runs: Vec<ProfileRun>,
}

/// Live bytes per step per class for every tile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryProfile {
    /// Always [`PROFILE_SCHEMA`].
    pub schema: String,
    /// What was profiled.
    pub scope: String,
    /// The tile with the largest effective peak (first such tile).
    pub peak_tile: Option<TileId>,
    /// The step of that peak.
    pub peak_step: u32,
    /// The largest effective peak of any tile.
    pub effective_peak_bytes: u64,
    /// Per-tile profiles, in problem order.
    pub tiles: Vec<TileProfile>,
}

impl MemoryProfile {
    /// The profile of a problem (independent of any placement: live bytes
    /// depend only on sizes and lifetimes).
    pub fn from_problem(problem: &Problem) -> MemoryProfile {
        Self::with_scope(problem, "baseline")
    }

    /// [`MemoryProfile::from_problem`] with a scope label.
    pub fn with_scope(problem: &Problem, scope: &str) -> MemoryProfile {
        let tiles: Vec<TileProfile> = problem.tiles.iter().map(tile_profile).collect();
        let mut peak: Option<&TileProfile> = None;
        for t in &tiles {
            if peak.is_none_or(|p| t.effective_peak_bytes > p.effective_peak_bytes) {
                peak = Some(t);
            }
        }
        MemoryProfile {
            schema: PROFILE_SCHEMA.to_owned(),
            scope: scope.to_owned(),
            peak_tile: peak.map(|p| p.tile),
            peak_step: peak.map_or(0, |p| p.peak_step),
            effective_peak_bytes: peak.map_or(0, |p| p.effective_peak_bytes),
            tiles,
        }
    }

    /// The profile as pretty JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain integers and strings cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads a profile back from JSON.
    pub fn from_json(text: &str) -> Result<MemoryProfile, serde_json::Error> {
        serde_json::from_str(text)
    }
}

fn tile_profile(tile: &TileProblem) -> TileProfile {
    let sections = Sections::of(tile);
    let n = sections.count();
    let mut delta = vec![[0i128; 3]; n + 1];
    for r in &tile.requests {
        let c = match r.class {
            MemoryClass::Ipu21Standard => 0,
            MemoryClass::Ipu21Interleaved => 1,
        };
        let (a, b) = sections.span(r.first_step, r.last_step);
        delta[a][c] += i128::from(r.bytes);
        delta[b][c] -= i128::from(r.bytes);
    }
    let mut always = 0u64;
    for r in &tile.reservations {
        let bytes = i128::from(r.end.saturating_sub(r.start));
        match r.steps {
            Some((a, b)) => {
                let (a, b) = sections.span(a, b);
                delta[a][2] += bytes;
                delta[b][2] -= bytes;
            }
            None => always += u64::from(r.end.saturating_sub(r.start)),
        }
    }
    let mut runs: Vec<ProfileRun> = Vec::with_capacity(n);
    let mut live = [0i128; 3];
    for (k, d) in delta.iter().take(n).enumerate() {
        for (l, x) in live.iter_mut().zip(d) {
            *l += x;
        }
        let clamp = |x: i128| u64::try_from(x.max(0)).unwrap_or(u64::MAX);
        let run = ProfileRun {
            first_step: sections.first_step(k),
            last_step: sections.last_step(k),
            standard: clamp(live[0]),
            interleaved: clamp(live[1]),
            reserved: clamp(live[2]).saturating_add(always),
        };
        match runs.last_mut() {
            Some(last)
                if (last.standard, last.interleaved, last.reserved)
                    == (run.standard, run.interleaved, run.reserved) =>
            {
                last.last_step = run.last_step;
            }
            _ => runs.push(run),
        }
    }
    let mut peak_step = 0;
    let mut peak = if runs.is_empty() { always } else { 0 };
    for r in &runs {
        if r.total() > peak {
            peak = r.total();
            peak_step = r.first_step;
        }
    }
    TileProfile {
        tile: tile.tile,
        peak_step,
        effective_peak_bytes: peak,
        runs,
    }
}
