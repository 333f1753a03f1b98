//! The step sections of one tile: the maximal runs of steps in which no
//! request or step-bounded reservation starts or ends.
//!
//! The lower bound, the memory profile and the arena all sweep a tile by
//! these sections, since nothing changes inside one; this module is the one
//! place that computes them. Breakpoints are kept in `u64` so that a
//! lifetime ending at `u32::MAX` has an end (`last + 1`) without overflow.

use crate::TileProblem;

/// The sections of a tile: ascending breakpoints, section `k` covering steps
/// `points[k]..points[k + 1]`.
#[derive(Clone, Debug)]
pub(crate) struct Sections {
    points: Vec<u64>,
}

impl Sections {
    /// The sections of `tile`, from every request's and every step-bounded
    /// reservation's first step and last step + 1.
    pub(crate) fn of(tile: &TileProblem) -> Sections {
        let mut points: Vec<u64> = Vec::with_capacity(2 * tile.requests.len() + 2);
        for r in &tile.requests {
            points.push(u64::from(r.first_step));
            points.push(u64::from(r.last_step) + 1);
        }
        for r in &tile.reservations {
            if let Some((a, b)) = r.steps {
                points.push(u64::from(a));
                points.push(u64::from(b) + 1);
            }
        }
        points.sort_unstable();
        points.dedup();
        Sections { points }
    }

    /// The number of sections (0 for a tile without lifetimes).
    pub(crate) fn count(&self) -> usize {
        self.points.len().saturating_sub(1)
    }

    /// The index of the section that starts at `step` (or of the first one
    /// after it); `count()` for a step past the last breakpoint.
    pub(crate) fn at(&self, step: u64) -> usize {
        self.points.partition_point(|&p| p < step)
    }

    /// The half-open range of sections an inclusive lifetime covers.
    pub(crate) fn span(&self, first_step: u32, last_step: u32) -> (usize, usize) {
        (
            self.at(u64::from(first_step)),
            self.at(u64::from(last_step) + 1),
        )
    }

    /// The first step of section `k`, clamped to `u32`.
    pub(crate) fn first_step(&self, k: usize) -> u32 {
        self.points
            .get(k)
            .map_or(u32::MAX, |&p| u32::try_from(p).unwrap_or(u32::MAX))
    }

    /// The last step of section `k`, clamped to `u32`.
    pub(crate) fn last_step(&self, k: usize) -> u32 {
        self.points
            .get(k + 1)
            .map_or(u32::MAX, |&p| u32::try_from(p - 1).unwrap_or(u32::MAX))
    }

    /// The breakpoints, `count() + 1` ascending values (none when there are
    /// no sections).
    pub(crate) fn into_points(self) -> Vec<u64> {
        self.points
    }
}
