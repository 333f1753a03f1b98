//! The versioned binary form of an AMP program (laid out in the header of
//! `program.rs`): writing it, and reading it back with every malformed
//! input reported by its byte offset.

use ipu_layout::{AmpOperand, ElementOrder, Fp8Format, MemoryClass, Precision};

use super::{
    AmpOp, AmpProgram, PROGRAM_FORMAT_VERSION, PROGRAM_FORMAT_VERSION_LATEST, ProgramHeader, Run,
    WorkerProgram,
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

impl AmpProgram {
    /// The versioned binary form (see the module header), in the version
    /// [`ProgramHeader::format_version`] names.
    pub fn to_bytes(&self) -> Vec<u8> {
        let h = &self.header;
        let version = h.format_version();
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&version.to_le_bytes());
        for p in [h.left, h.right, h.output] {
            out.extend_from_slice(&precision_code(p));
        }
        out.push(match h.output_order {
            ElementOrder::RowMajor => 0,
            ElementOrder::Amp(_) => 1,
        });
        if version >= 2 {
            out.push(match h.left_order {
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
        // Worker and run counts are small by construction (at most the
        // worker contexts and the panels of one block); saturating keeps
        // a hand-made oversized program from wrapping silently.
        let count16 = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
        out.extend_from_slice(&count16(self.workers.len()).to_le_bytes());
        for w in &self.workers {
            out.push(u8::try_from(w.worker.as_u32()).unwrap_or(u8::MAX));
            out.extend_from_slice(&u32::try_from(w.ops.len()).unwrap_or(u32::MAX).to_le_bytes());
            for op in &w.ops {
                out.push(op.tag());
                let (a, b) = op.dims();
                out.extend_from_slice(&a.to_le_bytes());
                out.extend_from_slice(&b.to_le_bytes());
                let runs = op.runs();
                out.extend_from_slice(&count16(runs.len()).to_le_bytes());
                for r in runs.iter().take(usize::from(u16::MAX)) {
                    for v in [r.offset, r.bytes, r.stride, r.count] {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                }
            }
        }
        out
    }

    /// Parses the binary form of any version this build reads, rejecting
    /// anything malformed or of another version.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, KernelError> {
        let mut r = Reader { bytes, at: 0 };
        let magic = r.take(8)?;
        if magic != MAGIC {
            return Err(r.error(0, "not an AMP program (bad magic)"));
        }
        let version = r.u16()?;
        if !(PROGRAM_FORMAT_VERSION..=PROGRAM_FORMAT_VERSION_LATEST).contains(&version) {
            return Err(KernelError::UnsupportedProgramVersion {
                found: version,
                supported: PROGRAM_FORMAT_VERSION_LATEST,
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
        let left_order = if version >= 2 {
            let at = r.at;
            match r.u8()? {
                0 => ElementOrder::RowMajor,
                // This build never writes it (an Amp(Left) program is
                // version 1), but it is a well-defined value.
                1 => ElementOrder::Amp(AmpOperand::Left),
                _ => return Err(r.error(at, "unknown left order")),
            }
        } else {
            ElementOrder::Amp(AmpOperand::Left)
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
        let worker_count = r.u16()?;
        let mut workers = Vec::new();
        for _ in 0..worker_count {
            let worker = WorkerId::from_u32(u32::from(r.u8()?));
            let op_count = r.u32()?;
            // Every op takes at least 11 bytes, which bounds the allocation
            // by the input size.
            if (op_count as usize) > r.remaining() / 11 {
                return Err(r.error(r.at, "op count exceeds the bytes left"));
            }
            let mut ops = Vec::with_capacity(op_count as usize);
            for _ in 0..op_count {
                let at = r.at;
                let tag = r.u8()?;
                let a = r.u32()?;
                let b = r.u32()?;
                let run_count = r.u16()?;
                let mut runs = Vec::with_capacity(usize::from(run_count).min(r.remaining() / 16));
                for _ in 0..run_count {
                    runs.push(Run {
                        offset: r.u32()?,
                        bytes: r.u32()?,
                        stride: r.u32()?,
                        count: r.u32()?,
                    });
                }
                let op = match tag {
                    0 => AmpOp::LoadCoefficients {
                        inner: a,
                        columns: b,
                        runs,
                    },
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
                    _ => return Err(r.error(at, "unknown op tag or runs on ZeroPartials")),
                };
                ops.push(op);
            }
            workers.push(WorkerProgram { worker, ops });
        }
        if r.remaining() != 0 {
            return Err(r.error(r.at, "trailing bytes after the last worker"));
        }
        Ok(AmpProgram { header, workers })
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
