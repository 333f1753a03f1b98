//! GEMM problems for testing kernels: a shape with operand values, a plain
//! reference, a run through plan → build → emulate, and a tolerance check
//! with an error bound derived from the arithmetic model.
//!
//! Operand bytes are laid out with `ipu_layout::TensorType::element_offset`
//! (the layouts the package places), not with the program builder's own
//! panel arithmetic, so a run also cross-checks the builder's addressing.

use ipu_layout::{
    AmpOperand, ElementOrder, Layout, MemoryClass, Precision, TensorFormat, TensorShape,
    TensorTiling, TensorType, TileId,
};

use crate::emulate::{EmulateOptions, Rounding, emulate_with};
use crate::{
    AmpProgram, EmulateError, GemmShape, KernelArgs, KernelError, Mode, PlanConfig, Variant,
    build_program, plan_variant,
};

/// The address problem images start at: the SRAM base of the built-in
/// IPU21 target.
pub fn image_base() -> u32 {
    ipu_target::Target::ipu21().memory().sram_start
}

/// A GEMM with concrete operand values. Values are exactly representable in
/// their precisions (see [`GemmProblem::new`]).
#[derive(Clone, Debug, PartialEq)]
pub struct GemmProblem {
    /// The shape (`rows` is the rows run).
    pub shape: GemmShape,
    /// Initialise or accumulate.
    pub mode: Mode,
    /// `rows × inner`, row major.
    pub left: Vec<f32>,
    /// `inner × columns`, row major.
    pub right: Vec<f32>,
    /// `rows × columns`, row major: the output's bytes before the call
    /// (used in accumulate mode).
    pub initial: Vec<f32>,
}

/// Why a problem run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProblemError {
    /// Planning, building or layout failed.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// The emulator rejected the program.
    #[error(transparent)]
    Emulate(#[from] EmulateError),
    /// The operand vectors do not match the shape.
    #[error("problem operand {what} has {found} values, the shape needs {expected}")]
    Size {
        /// Which operand.
        what: &'static str,
        /// Values needed.
        expected: usize,
        /// Values given.
        found: usize,
    },
    /// ipu-layout rejected an operand description.
    #[error("operand {what} layout: {source}")]
    Layout {
        /// Which operand.
        what: &'static str,
        /// The layout error.
        #[source]
        source: ipu_layout::LayoutError,
    },
    /// An output element's layout puts it on no tile of the single-tile
    /// problem.
    #[error("operand element layout: element ({row}, {column}) is not on the tile")]
    ElementOffTile {
        /// The element's row.
        row: u32,
        /// The element's column.
        column: u32,
    },
}

/// One output element outside the error bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mismatch {
    /// Output row.
    pub row: u32,
    /// Output column.
    pub column: u32,
    /// The exact result.
    pub expected: f64,
    /// What the kernel produced.
    pub found: f64,
    /// The allowed absolute error.
    pub bound: f64,
}

/// What [`GemmProblem::run`] produced.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// The variant used.
    pub variant: Variant,
    /// The program run.
    pub program: AmpProgram,
    /// Output values, `rows × columns`, row major.
    pub output: Vec<f64>,
    /// Emulation statistics.
    pub stats: crate::EmulationStats,
}

fn single_tile_type(
    what: &'static str,
    rows: u32,
    columns: u32,
    precision: Precision,
    order: ElementOrder,
) -> Result<TensorType, ProblemError> {
    let err = |source| ProblemError::Layout { what, source };
    TensorType::new(
        TensorShape::new([u64::from(rows), u64::from(columns)]),
        TensorFormat {
            precision,
            layout: Layout {
                order,
                tiling: TensorTiling::replicated(1).map_err(err)?,
                memory_class: MemoryClass::Ipu21Standard,
            },
        },
    )
    .map_err(err)
}

/// Encodes a row-major `rows × columns` matrix into `out` in `order`.
pub fn pack_matrix(
    values: &[f32],
    rows: u32,
    columns: u32,
    precision: Precision,
    order: ElementOrder,
    out: &mut [u8],
) -> Result<(), ProblemError> {
    let ty = single_tile_type("packed", rows, columns, precision, order)?;
    let eb = precision.element_bytes() as usize;
    let needed = rows as usize * columns as usize;
    if values.len() != needed || out.len() < needed * eb {
        return Err(ProblemError::Size {
            what: "packed matrix",
            expected: needed,
            found: values.len().min(out.len() / eb.max(1)),
        });
    }
    for r in 0..rows {
        for c in 0..columns {
            let offset = element_offset(&ty, r, c)?;
            precision.encode_into(
                values[r as usize * columns as usize + c as usize],
                &mut out[offset..offset + eb],
            );
        }
    }
    Ok(())
}

/// Decodes a `rows × columns` matrix stored in `order` into row-major values.
pub fn unpack_matrix(
    bytes: &[u8],
    rows: u32,
    columns: u32,
    precision: Precision,
    order: ElementOrder,
) -> Result<Vec<f64>, ProblemError> {
    let ty = single_tile_type("unpacked", rows, columns, precision, order)?;
    let eb = precision.element_bytes() as usize;
    let needed = rows as usize * columns as usize;
    if bytes.len() < needed * eb {
        return Err(ProblemError::Size {
            what: "unpacked matrix bytes",
            expected: needed * eb,
            found: bytes.len(),
        });
    }
    let mut values = vec![0.0; needed];
    for r in 0..rows {
        for c in 0..columns {
            let offset = element_offset(&ty, r, c)?;
            values[r as usize * columns as usize + c as usize] =
                f64::from(precision.decode_from(&bytes[offset..offset + eb]));
        }
    }
    Ok(values)
}

fn element_offset(ty: &TensorType, r: u32, c: u32) -> Result<usize, ProblemError> {
    match ty.element_offset(TileId::from_u32(0), &[u64::from(r), u64::from(c)]) {
        Ok(Some(o)) => Ok(o as usize),
        Ok(None) => Err(ProblemError::ElementOffTile { row: r, column: c }),
        Err(source) => Err(ProblemError::Layout {
            what: "element",
            source,
        }),
    }
}

fn align32(x: u64) -> u64 {
    x.div_ceil(32) * 32
}

impl GemmProblem {
    /// A problem whose values are first rounded to their precisions, so the
    /// reference sees exactly what the kernel reads.
    pub fn new(
        shape: GemmShape,
        mode: Mode,
        left: Vec<f32>,
        right: Vec<f32>,
        initial: Vec<f32>,
    ) -> Result<Self, ProblemError> {
        let sizes = [
            ("left", &left, shape.rows as usize * shape.inner as usize),
            (
                "right",
                &right,
                shape.inner as usize * shape.columns as usize,
            ),
            (
                "initial",
                &initial,
                shape.rows as usize * shape.columns as usize,
            ),
        ];
        for (what, v, expected) in sizes {
            if v.len() != expected {
                return Err(ProblemError::Size {
                    what,
                    expected,
                    found: v.len(),
                });
            }
        }
        let q = |p: Precision, v: Vec<f32>| v.into_iter().map(|x| p.quantize(x)).collect();
        Ok(Self {
            left: q(shape.left, left),
            right: q(shape.right, right),
            initial: q(shape.output, initial),
            shape,
            mode,
        })
    }

    /// The exact result in f64: `initial (accumulate only) + left × right`.
    pub fn reference(&self) -> Vec<f64> {
        let s = &self.shape;
        let (m, k, n) = (s.rows as usize, s.inner as usize, s.columns as usize);
        let mut out = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = match self.mode {
                    Mode::Accumulate => f64::from(self.initial[i * n + j]),
                    Mode::Initialise => 0.0,
                };
                for kk in 0..k {
                    acc += f64::from(self.left[i * k + kk]) * f64::from(self.right[kk * n + j]);
                }
                out[i * n + j] = acc;
            }
        }
        out
    }

    /// Plans a variant with `config` (serving `rows` as both row counts) and
    /// runs it with round to nearest even.
    pub fn run(&self, config: &PlanConfig) -> Result<RunOutput, ProblemError> {
        let variant = plan_variant(&self.shape, self.shape.rows, self.shape.rows, config)?;
        self.run_variant(&variant, &EmulateOptions::default())
    }

    /// Runs a given variant (whose rows must include `shape.rows`).
    pub fn run_variant(
        &self,
        variant: &Variant,
        options: &EmulateOptions,
    ) -> Result<RunOutput, ProblemError> {
        let s = &self.shape;
        let program = build_program(variant, s.rows, self.mode)?;
        let [left_bytes, right_bytes, output_bytes] = program.header.operand_bytes();
        // Operands at 32-byte aligned offsets, the left one followed by its
        // read tail, in a compact image starting at the SRAM base.
        let left_at = 0u64;
        let right_at = align32(left_bytes + u64::from(program.header.left_tail_bytes));
        let output_at = align32(right_at + right_bytes);
        let size = align32(output_at + output_bytes);
        let mut image = vec![0u8; size as usize];
        // The left operand is laid out in the shape's left order, as the
        // output is in its output order, so one problem with two left
        // orders runs the same logical matrices.
        pack_matrix(
            &self.left,
            s.rows,
            s.inner,
            s.left,
            s.left_order,
            &mut image[left_at as usize..right_at as usize],
        )?;
        pack_matrix(
            &self.right,
            s.inner,
            s.columns,
            s.right,
            ElementOrder::Amp(AmpOperand::Right),
            &mut image[right_at as usize..output_at as usize],
        )?;
        pack_matrix(
            &self.initial,
            s.rows,
            s.columns,
            s.output,
            s.output_order,
            &mut image[output_at as usize..],
        )?;
        let args = KernelArgs {
            left: image_base() + left_at as u32,
            right: image_base() + right_at as u32,
            output: image_base() + output_at as u32,
        };
        let stats = emulate_with(&program, &mut image, image_base(), &args, options)?;
        let output = unpack_matrix(
            &image[output_at as usize..],
            s.rows,
            s.columns,
            s.output,
            s.output_order,
        )?;
        Ok(RunOutput {
            variant: variant.clone(),
            program,
            output,
            stats,
        })
    }

    /// The allowed absolute error of each output element under `rounding`.
    ///
    /// With unit roundoff `u` of the partials (2^-11 for F16, 2^-24 for F32;
    /// doubled for stochastic rounding, whose error is below one gap) and
    /// `G = ceil(inner / group)` AMP steps, each product is rounded once and
    /// each step once, so the error is at most
    /// `u (G + 2) (|initial| + Σ|a b|) + (inner + G + 2) · tiny`, where `tiny`
    /// is half the smallest subnormal gap; widened FP8 weights are exact in
    /// F16 for the scales the generators use.
    pub fn bounds(&self, rounding: Rounding) -> Vec<f64> {
        let s = &self.shape;
        let (m, k, n) = (s.rows as usize, s.inner as usize, s.columns as usize);
        let single = matches!(s.output, Precision::F32);
        let group = if s.left.is_fp8() { 8 } else { 4 };
        let steps = k.div_ceil(group) as f64;
        let (mut u, tiny) = if single {
            (2f64.powi(-24), 2f64.powi(-150))
        } else {
            (2f64.powi(-11), 2f64.powi(-25))
        };
        if matches!(rounding, Rounding::Stochastic { .. }) {
            u *= 2.0;
        }
        let mut bounds = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut magnitude = match self.mode {
                    Mode::Accumulate => f64::from(self.initial[i * n + j]).abs(),
                    Mode::Initialise => 0.0,
                };
                for kk in 0..k {
                    magnitude += (f64::from(self.left[i * k + kk])
                        * f64::from(self.right[kk * n + j]))
                    .abs();
                }
                bounds[i * n + j] =
                    u * (steps + 2.0) * magnitude * 1.001 + (k as f64 + steps + 2.0) * tiny * 2.0;
            }
        }
        bounds
    }

    /// Compares an output with the reference under the bound of `rounding`,
    /// returning every element outside it.
    pub fn check(&self, output: &[f64], rounding: Rounding) -> Result<(), Vec<Mismatch>> {
        let reference = self.reference();
        let bounds = self.bounds(rounding);
        let n = self.shape.columns as usize;
        let mut mismatches = Vec::new();
        for (index, ((&expected, &bound), &found)) in
            reference.iter().zip(&bounds).zip(output).enumerate()
        {
            // NaN differences fail too.
            let within = (found - expected).abs() <= bound;
            if !within {
                mismatches.push(Mismatch {
                    row: (index / n.max(1)) as u32,
                    column: (index % n.max(1)) as u32,
                    expected,
                    found,
                    bound,
                });
            }
        }
        if output.len() != reference.len() {
            mismatches.push(Mismatch {
                row: u32::MAX,
                column: u32::MAX,
                expected: reference.len() as f64,
                found: output.len() as f64,
                bound: 0.0,
            });
        }
        if mismatches.is_empty() {
            Ok(())
        } else {
            Err(mismatches)
        }
    }
}
