//! What calibration measures: quantisation statistics of a tensor role
//! ([`Stats`]), an output against the F32 graph's ([`OutputStats`]), and
//! the choice of an FP8 scale from a largest magnitude ([`fp8_scale`]).
//! Every figure that reaches the precision report is finite ([`finite`]).

use ipu_layout::Precision;

/// Quantisation statistics of one role.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Stats {
    pub(super) elements: u64,
    pub(super) saturated: u64,
    pub(super) err2: f64,
    pub(super) ref2: f64,
    pub(super) max_abs: f64,
}

impl Stats {
    /// Adds `x` against its quantised `q`, counting `|x| > limit` as
    /// saturated.
    pub(super) fn add(&mut self, x: &[f32], q: &[f32], limit: f64) {
        for (&a, &b) in x.iter().zip(q) {
            let a = f64::from(a);
            let d = f64::from(b) - a;
            self.err2 += d * d;
            self.ref2 += a * a;
            self.max_abs = self.max_abs.max(a.abs());
            if a.abs() > limit || !a.is_finite() {
                self.saturated += 1;
            }
        }
        self.elements += x.len() as u64;
    }

    /// Adds values without a quantised counterpart (overflow only).
    pub(super) fn add_overflow(&mut self, x: &[f32], limit: f64) {
        for &a in x {
            let a = f64::from(a);
            if a.is_finite() {
                self.max_abs = self.max_abs.max(a.abs());
            }
            if a.abs() >= limit || !a.is_finite() {
                self.saturated += 1;
            }
        }
        self.elements += x.len() as u64;
    }

    pub(super) fn saturation(&self) -> f64 {
        if self.elements == 0 {
            0.0
        } else {
            self.saturated as f64 / self.elements as f64
        }
    }

    pub(super) fn error(&self) -> f64 {
        relative(self.err2, self.ref2)
    }
}

/// `x` if finite, else the largest finite value of its sign (NaN counts
/// as positive): JSON has no infinities, and a report figure that
/// overflowed must still read back as the worst value.
pub(super) fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else if x < 0.0 {
        f64::MIN
    } else {
        f64::MAX
    }
}

/// `sqrt(err2 / ref2)`, finite: an all-zero reference has error 0 when
/// nothing differs and 1 otherwise.
pub(super) fn relative(err2: f64, ref2: f64) -> f64 {
    if ref2 > 0.0 && err2.is_finite() {
        (err2 / ref2).sqrt()
    } else if err2 == 0.0 {
        0.0
    } else {
        1.0
    }
}

/// The smallest scale `s` with `max_abs ≤ max · 2^s` for FP8 format of
/// `template` (clamped to the scales an `i8` holds; 0 for an all-zero
/// tensor, which any scale holds exactly).
pub(super) fn fp8_scale(template: Precision, max_abs: f64) -> Precision {
    let Precision::F8 { format, .. } = template else {
        return template;
    };
    let max = f64::from(format.max_value());
    let scale = if max_abs > 0.0 && max_abs.is_finite() {
        let mut s = (max_abs / max).log2().floor() as i32 - 1;
        while max * 2f64.powi(s) < max_abs {
            s += 1;
        }
        s.clamp(i32::from(i8::MIN), i32::from(i8::MAX)) as i8
    } else {
        0
    };
    Precision::F8 { format, scale }
}

/// Values rounded to `precision`.
pub(super) fn quantised(precision: Precision, x: &[f32]) -> Vec<f32> {
    let q = precision.codec();
    x.iter().map(|&v| q.quantize(v)).collect()
}

/// Per output: accumulated error against the F32 graph, over every
/// calibration input, and the smallest cosine of one input's output.
#[derive(Clone, Debug, Default)]
pub(super) struct OutputStats {
    pub(super) err2: f64,
    pub(super) ref2: f64,
    pub(super) ours2: f64,
    pub(super) dot: f64,
    /// The smallest per-input cosine and that input's index (in the
    /// order added); `None` before the first input.
    pub(super) worst: Option<(f64, usize)>,
    /// Inputs added.
    pub(super) inputs: usize,
}

impl OutputStats {
    /// Adds one calibration input's output.
    pub(super) fn add(&mut self, reference: &[f32], ours: &[f32]) {
        let mut one = Sums::default();
        for (&r, &d) in reference.iter().zip(ours) {
            let (r, d) = (f64::from(r), f64::from(d));
            one.err2 += (d - r) * (d - r);
            one.ref2 += r * r;
            one.ours2 += d * d;
            one.dot += d * r;
        }
        self.err2 += one.err2;
        self.ref2 += one.ref2;
        self.ours2 += one.ours2;
        self.dot += one.dot;
        let c = cosine(one.dot, one.ref2, one.ours2, one.err2);
        if self.worst.is_none_or(|(w, _)| c < w) {
            self.worst = Some((c, self.inputs));
        }
        self.inputs += 1;
    }

    /// The cosine over every input's values together.
    pub(super) fn cosine(&self) -> f64 {
        cosine(self.dot, self.ref2, self.ours2, self.err2)
    }
}

#[derive(Default)]
struct Sums {
    err2: f64,
    ref2: f64,
    ours2: f64,
    dot: f64,
}

/// The cosine of two vectors from their dot product and squared norms:
/// 1 for two zero vectors (nothing differs, `err2` = 0), 0 where it is
/// not finite or one side alone is zero.
fn cosine(dot: f64, ref2: f64, ours2: f64, err2: f64) -> f64 {
    if ref2 == 0.0 && ours2 == 0.0 && err2 == 0.0 {
        return 1.0;
    }
    let norm = (ref2 * ours2).sqrt();
    let c = dot / norm;
    if norm > 0.0 && c.is_finite() { c } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use ipu_layout::Fp8Format;

    use super::*;

    fn scale_of(max_abs: f64) -> i8 {
        let template = Precision::F8 {
            format: Fp8Format::F143,
            scale: 0,
        };
        match fp8_scale(template, max_abs) {
            Precision::F8 { scale, .. } => scale,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_scale_is_the_smallest_that_holds_the_largest_magnitude() {
        assert_eq!(scale_of(240.0), 0);
        assert_eq!(scale_of(240.001), 1);
        assert_eq!(scale_of(120.0), -1);
        assert_eq!(scale_of(120.001), 0);
        assert_eq!(scale_of(240.0 * 2f64.powi(-20)), -20);
        // Nothing to hold, and beyond the scales an i8 holds.
        assert_eq!(scale_of(0.0), 0);
        assert_eq!(scale_of(f64::INFINITY), 0);
        assert_eq!(scale_of(1e300), i8::MAX);
        assert_eq!(scale_of(1e-300), i8::MIN);
        // F16 and F32 templates are left alone.
        assert_eq!(fp8_scale(Precision::F16, 1e9), Precision::F16);
    }

    #[test]
    fn statistics_count_saturation_and_relative_error() {
        let mut s = Stats::default();
        s.add(&[1.0, -2.0, 300.0], &[1.0, -2.0, 240.0], 240.0);
        assert_eq!((s.elements, s.saturated), (3, 1));
        assert!((s.error() - (60.0f64 / (1.0f64 + 4.0 + 90000.0).sqrt())).abs() < 1e-12);
        assert_eq!(relative(0.0, 0.0), 0.0);
        assert_eq!(relative(1.0, 0.0), 1.0);
        assert_eq!(finite(f64::NAN), f64::MAX);
        assert_eq!(finite(f64::NEG_INFINITY), f64::MIN);
    }

    #[test]
    fn output_statistics_keep_the_worst_inputs_cosine() {
        let mut s = OutputStats::default();
        assert_eq!(s.worst, None);
        s.add(&[1.0, 0.0], &[1.0, 0.0]);
        assert_eq!(s.worst, Some((1.0, 0)));
        // Orthogonal on the second input: that input's cosine is 0, the
        // pooled one is not.
        s.add(&[1.0, 0.0], &[0.0, 1.0]);
        s.add(&[1.0, 0.0], &[1.0, 1.0]);
        assert_eq!(s.worst, Some((0.0, 1)));
        assert!((s.cosine() - 2.0 / 12f64.sqrt()).abs() < 1e-12);
        // Two zero outputs agree.
        let mut z = OutputStats::default();
        z.add(&[0.0; 3], &[0.0; 3]);
        assert_eq!(z.worst, Some((1.0, 0)));
    }
}
