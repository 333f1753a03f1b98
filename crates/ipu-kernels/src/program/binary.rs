//! The versioned binary form of an AMP program (laid out in the header of
//! `program.rs`): writing it, and reading it back with every malformed
//! input reported by its byte offset.

use ipu_layout::{AmpOperand, ElementOrder, Fp8Format, MemoryClass, Precision};

use super::{
    AmpOp, AmpProgram, CoefficientLoad, PROGRAM_FORMAT_VERSION, Pass, PassGroup, ProgramHeader,
    Run, WorkerProgram,
};
use crate::variant::Arithmetic;
use crate::{KernelError, Mode, WorkerId};

const MAGIC: &[u8; 8] = b"IPUAMP\0\0";

fn precision_code(p: Precision) -> [u8; 2] {
    match p {
        Precision::F32 => [0, 0],
        Precision::F16 => [1, 0],
        Precision::F8 { format, scale } => [
            match format {
                Fp8Format::F143 => 2,
                Fp8Format::F152 => 3,
            },
            scale.to_le_bytes()[0],
        ],
    }
}

fn arithmetic_code(a: Arithmetic) -> u8 {
    match a {
        Arithmetic::F16HalfPartials => 0,
        Arithmetic::F16SinglePartials => 1,
        Arithmetic::Fp8HalfPartials => 2,
        Arithmetic::MixedHalfPartials => 3,
        Arithmetic::MixedSinglePartials => 4,
    }
}

/// Writes `runs` as a count and the runs. Run counts are small by
/// construction (the panels of one tile); saturating keeps a hand-made
/// oversized program from wrapping silently.
fn put_runs(out: &mut Vec<u8>, runs: &[Run]) {
    let count = u16::try_from(runs.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&count.to_le_bytes());
    for r in runs.iter().take(usize::from(u16::MAX)) {
        for v in [r.offset, r.bytes, r.stride, r.count] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

impl AmpProgram {
    /// The versioned binary form (see the module header).
    pub fn to_bytes(&self) -> Vec<u8> {
        let h = &self.header;
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&h.format_version().to_le_bytes());
        for p in [h.left, h.right, h.output] {
            out.extend_from_slice(&precision_code(p));
        }
        for order in [h.output_order, h.left_order] {
            out.push(match order {
                ElementOrder::RowMajor => 0,
                ElementOrder::Amp(_) => 1,
            });
        }
        out.push(match h.right_class {
            MemoryClass::Ipu21Standard => 0,
            MemoryClass::Ipu21Interleaved => 1,
        });
        out.push(match h.mode {
            Mode::Initialise => 0,
            Mode::Accumulate => 1,
        });
        out.push(arithmetic_code(h.arithmetic));
        for v in [
            h.rows,
            h.inner,
            h.columns,
            h.k,
            h.c,
            h.left_tail_bytes,
            h.alignment,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        // Counts are bounded by construction (passes by the operand
        // sizes, workers by the contexts, ops at three); saturating keeps
        // a hand-made oversized program from wrapping silently.
        let count32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let count8 = |n: usize| u8::try_from(n).unwrap_or(u8::MAX);
        out.extend_from_slice(&count32(self.groups.len()).to_le_bytes());
        for g in &self.groups {
            out.extend_from_slice(&count32(g.passes.len()).to_le_bytes());
            for pass in &g.passes {
                let c = &pass.coefficients;
                out.extend_from_slice(&c.inner.to_le_bytes());
                out.extend_from_slice(&c.columns.to_le_bytes());
                put_runs(&mut out, &c.runs);
                out.push(count8(pass.workers.len()));
                for w in pass.workers.iter().take(usize::from(u8::MAX)) {
                    out.push(u8::try_from(w.worker.as_u32()).unwrap_or(u8::MAX));
                    out.push(count8(w.ops.len()));
                    for op in w.ops.iter().take(usize::from(u8::MAX)) {
                        out.push(op.tag());
                        let (a, b) = op.dims();
                        out.extend_from_slice(&a.to_le_bytes());
                        out.extend_from_slice(&b.to_le_bytes());
                        put_runs(&mut out, op.runs());
                    }
                }
            }
        }
        out
    }

    /// Parses the binary form, rejecting anything malformed or of another
    /// version.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, KernelError> {
        let mut r = Reader { bytes, at: 0 };
        let magic = r.take(8)?;
        if magic != MAGIC {
            return Err(r.error(0, "not an AMP program (bad magic)"));
        }
        let version = r.u16()?;
        if version != PROGRAM_FORMAT_VERSION {
            return Err(KernelError::UnsupportedProgramVersion {
                found: version,
                supported: PROGRAM_FORMAT_VERSION,
            });
        }
        let left = r.precision()?;
        let right = r.precision()?;
        let output = r.precision()?;
        let at = r.at;
        let output_order = match r.u8()? {
            0 => ElementOrder::RowMajor,
            1 => ElementOrder::Amp(AmpOperand::Output),
            _ => return Err(r.error(at, "unknown output order")),
        };
        let at = r.at;
        let left_order = match r.u8()? {
            0 => ElementOrder::RowMajor,
            1 => ElementOrder::Amp(AmpOperand::Left),
            _ => return Err(r.error(at, "unknown left order")),
        };
        let at = r.at;
        let right_class = match r.u8()? {
            0 => MemoryClass::Ipu21Standard,
            1 => MemoryClass::Ipu21Interleaved,
            _ => return Err(r.error(at, "unknown memory class")),
        };
        let at = r.at;
        let mode = match r.u8()? {
            0 => Mode::Initialise,
            1 => Mode::Accumulate,
            _ => return Err(r.error(at, "unknown mode")),
        };
        let at = r.at;
        let arithmetic = match r.u8()? {
            0 => Arithmetic::F16HalfPartials,
            1 => Arithmetic::F16SinglePartials,
            2 => Arithmetic::Fp8HalfPartials,
            3 => Arithmetic::MixedHalfPartials,
            4 => Arithmetic::MixedSinglePartials,
            _ => return Err(r.error(at, "unknown arithmetic")),
        };
        let header = ProgramHeader {
            left,
            right,
            output,
            left_order,
            output_order,
            right_class,
            mode,
            arithmetic,
            rows: r.u32()?,
            inner: r.u32()?,
            columns: r.u32()?,
            k: r.u32()?,
            c: r.u32()?,
            left_tail_bytes: r.u32()?,
            alignment: r.u32()?,
        };
        // Every count below is checked against the bytes left, at the
        // fewest bytes its item can take, which bounds each allocation by
        // the input size.
        let group_count = r.count32(4, "group count")?;
        let mut groups = Vec::with_capacity(group_count);
        for _ in 0..group_count {
            // A pass takes at least 11 bytes: two u32, a run count, a
            // worker count.
            let pass_count = r.count32(11, "pass count")?;
            let mut passes = Vec::with_capacity(pass_count);
            for _ in 0..pass_count {
                let inner = r.u32()?;
                let columns = r.u32()?;
                let runs = r.runs()?;
                let coefficients = CoefficientLoad {
                    inner,
                    columns,
                    runs,
                };
                let worker_count = r.u8()?;
                let mut workers = Vec::with_capacity(usize::from(worker_count));
                for _ in 0..worker_count {
                    let worker = WorkerId::from_u32(u32::from(r.u8()?));
                    let op_count = r.u8()?;
                    let mut ops = Vec::with_capacity(usize::from(op_count));
                    for _ in 0..op_count {
                        ops.push(r.op()?);
                    }
                    workers.push(WorkerProgram { worker, ops });
                }
                passes.push(Pass {
                    coefficients,
                    workers,
                });
            }
            groups.push(PassGroup { passes });
        }
        if r.remaining() != 0 {
            return Err(r.error(r.at, "trailing bytes after the last pass"));
        }
        Ok(AmpProgram { header, groups })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn error(&self, offset: usize, reason: &str) -> KernelError {
        KernelError::MalformedProgram {
            offset,
            reason: reason.to_owned(),
        }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize) -> Result<&[u8], KernelError> {
        if self.remaining() < n {
            return Err(self.error(self.at, "truncated"));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, KernelError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, KernelError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, KernelError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A u32 count of items of at least `min_bytes` bytes each, checked
    /// against the bytes left.
    fn count32(&mut self, min_bytes: usize, what: &str) -> Result<usize, KernelError> {
        let at = self.at;
        let count = self.u32()? as usize;
        if count > self.remaining() / min_bytes.max(1) {
            return Err(self.error(at, &format!("{what} exceeds the bytes left")));
        }
        Ok(count)
    }

    /// A run count and the runs.
    fn runs(&mut self) -> Result<Vec<Run>, KernelError> {
        let count = self.u16()?;
        let mut runs = Vec::with_capacity(usize::from(count).min(self.remaining() / 16));
        for _ in 0..count {
            runs.push(Run {
                offset: self.u32()?,
                bytes: self.u32()?,
                stride: self.u32()?,
                count: self.u32()?,
            });
        }
        Ok(runs)
    }

    /// One worker op.
    fn op(&mut self) -> Result<AmpOp, KernelError> {
        let at = self.at;
        let tag = self.u8()?;
        let a = self.u32()?;
        let b = self.u32()?;
        let runs = self.runs()?;
        Ok(match tag {
            1 if runs.is_empty() => AmpOp::ZeroPartials {
                rows: a,
                columns: b,
            },
            2 => AmpOp::LoadPartials {
                rows: a,
                columns: b,
                runs,
            },
            3 => AmpOp::StreamRows {
                rows: a,
                inner: b,
                runs,
            },
            4 => AmpOp::StorePartials {
                rows: a,
                columns: b,
                runs,
            },
            _ => return Err(self.error(at, "unknown op tag or runs on ZeroPartials")),
        })
    }

    fn precision(&mut self) -> Result<Precision, KernelError> {
        let at = self.at;
        let tag = self.u8()?;
        let scale = i8::from_le_bytes([self.u8()?]);
        match (tag, scale) {
            (0, 0) => Ok(Precision::F32),
            (1, 0) => Ok(Precision::F16),
            (2, scale) => Ok(Precision::F8 {
                format: Fp8Format::F143,
                scale,
            }),
            (3, scale) => Ok(Precision::F8 {
                format: Fp8Format::F152,
                scale,
            }),
            _ => Err(self.error(at, "unknown precision")),
        }
    }
}
