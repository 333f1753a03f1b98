//! Runs an AMP program on a byte image of tile memory, faithful to the
//! arithmetic the AMP performs.
//!
//! Arithmetic (the model this crate commits to; tests compare it with a
//! plain reference under a derived error bound):
//!
//! - Operands are decoded exactly: F16 as IEEE binary16, FP8 (F143/F152)
//!   through `ipu_layout::numeric` with the tensor's power-of-two scale.
//!   With F16 rows and FP8 weights the weights are widened to F16 when the
//!   coefficient block loads (rounded to nearest even if the scale pushes a
//!   value outside F16's range).
//! - Each product `left × weight` is computed exactly and rounded to the
//!   partial precision (F16 for `f16v4hihov4amp` / `f8v8hihov4amp`, F32 for
//!   `f16v4sisoamp`), round to nearest, ties to even.
//! - The AMP sums the products of one step — 4 inner elements for the `v4`
//!   instructions, 8 for `f8v8` — together with the running partial exactly
//!   and rounds once into the partial: round to nearest, ties to even, or
//!   stochastic rounding with a seeded generator when asked. Steps follow the
//!   inner dimension in increasing order and step boundaries are multiples of
//!   the group from inner index 0, so the result does not depend on `k` or
//!   `c`. Overflow gives ±infinity as IEEE arithmetic does.
//! - A stream's partials start from zero or from the output's bytes, as
//!   its op says (the first pass of an initialise call from zero, every
//!   other pass from what the earlier passes stored), and are stored back
//!   to the output. Partials are in the output precision, so a store and a
//!   reload change no bit: the result is that of one running partial over
//!   the whole inner dimension. A NaN partial is stored as the canonical
//!   quiet NaN (`f32::NAN` encoded in the output precision).
//!
//! Operand addresses must be multiples of the header's alignment (32 on
//! IPU21; the AMP's 128-bit loads fault otherwise). With a row-major left
//! operand every left run must also start, and repeat, at multiples of it,
//! because each repetition is a row the AMP loads from (the planner keeps
//! `inner × element bytes` and `k × element bytes` aligned so built programs
//! always pass; an `Amp(Left)` left operand is not checked run by run, as
//! before). Every access is bounds checked against the image and against
//! its operand's extent; the AMP's read of `left_tail_bytes` past the left
//! operand must also lie in the image; the output may not overlap an input.
//! Workers write disjoint outputs (the program checker proves it for built
//! programs), so running them in order gives the same bytes as any
//! interleaving. The coefficient state is the tile's, loaded once per pass
//! and read by every worker of the pass.
//!
//! # How it runs fast
//!
//! The arithmetic above is a sequence of f64 operations per output
//! element; the emulator performs exactly that sequence, in that order, for
//! every element, so its bytes are those of the plain formulation (a test
//! compares it with the plain, element-by-element emulator on random
//! programs and memory). What changes is the data movement around it:
//! operand blocks are copied out of the image once per op, a run at a
//! time, and decoded once (FP8 through a 256-entry table of
//! `decode × 2^scale`); the coefficient block is stored group by group
//! with each column's `group` coefficients together, so that one pass over
//! the columns does a whole AMP step per element with no bounds checks in
//! the loop (F32 partials keep the coefficients row major instead and add
//! each product to a row's columns in one vector loop, the same additions
//! per element in the same order). A worker's partials stored at the end
//! of a pass and loaded again by the next pass over the same block are kept
//! as values in between (`machine/pending.rs`), and written to the image
//! before anything could read it. A [`PreparedProgram`] with FP8 rows and
//! weights also holds
//! the table of all 65,536 rounded products `round(a × w)`, so the
//! innermost loop is one table load and one add per product.
//!
//! FP8 rows and weights into F16 partials (the SigLIP GEMMs) usually run
//! without the table, on the lane kernel (`lanes.rs`): each product is an
//! exact f64, rounded to F16's grid and turned into an integer by one
//! addition (one fused multiply-add), and a step's eight integers are
//! summed as integers, eight columns at a time. The crate is compiled for
//! the baseline instruction set; the kernel runs on the widest vector
//! extension the host has (AVX-512 or AVX2, chosen when it runs through
//! `pulp`'s safe interface, `vector.rs`), where the eight columns are one
//! or two registers and the rounding of the partials is vector
//! arithmetic too (`cargo bench -p ipu-kernels --bench emulate` compares
//! it with the baseline build of the same kernel). It applies when
//! operands are finite and partials cannot overflow within the stream, and
//! gives the table loop's bytes there (its tests hold it to them); the
//! weights and the decoded rows are shared by the workers and column
//! blocks that load them again.
//!
//! F16 rows into F16 partials rounded to nearest (attention's products)
//! run on the F16 lane kernel (`half.rs`) the same way: eight columns at
//! a time, each product rounded to F16 by one addition of a constant
//! built from its exponent, the same operations per element as the
//! scalar loop, where a row's sums cannot overflow
//! (`cargo bench -p ipu-kernels --bench emulate -- f16`).

mod half;
mod kernel;
mod lanes;
mod machine;
#[cfg(test)]
mod reference;
mod rounding;
mod vector;

use std::sync::Arc;

use ipu_layout::{AmpOperand, ElementOrder, Precision};

use crate::error::{EmulateError, OpSite};
use crate::program::{AmpProgram, ProgramHeader, Run};
use crate::variant::Arithmetic;

use kernel::ProductTable;
use machine::run;
pub use rounding::{round_f16, round_f32};

/// Absolute tile byte addresses of a call's operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelArgs {
    /// The left operand's first byte.
    pub left: u32,
    /// The weights' first byte.
    pub right: u32,
    /// The output's first byte.
    pub output: u32,
}

/// How partials are rounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// Round to nearest, ties to even (the AMP's default).
    #[default]
    NearestEven,
    /// Stochastic rounding of every partial update, driven by a generator
    /// seeded from `seed` and the update's position in the program (pass,
    /// worker, row and column of the stream, step within the pass), so a
    /// program and seed give the same bytes on every run whatever order
    /// workers run in (another program for the same GEMM draws different
    /// numbers).
    Stochastic {
        /// The generator seed.
        seed: u64,
    },
}

/// Options of [`emulate_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EmulateOptions {
    /// How partials are rounded.
    pub rounding: Rounding,
}

/// What an emulated call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EmulationStats {
    /// Multiply-accumulates performed.
    pub macs: u64,
    /// AMP steps (group sums rounded into a partial).
    pub amp_steps: u64,
    /// Weight bytes loaded into the coefficient state.
    pub coefficient_bytes: u64,
    /// Left bytes streamed.
    pub left_bytes: u64,
    /// Output bytes read as starting partials.
    pub partial_bytes_read: u64,
    /// Output bytes written.
    pub output_bytes_written: u64,
    /// Ops executed.
    pub ops: u64,
}

/// Exact values of every code of a one-byte precision, or the precision's
/// own decoder for wider ones.
#[derive(Clone, Debug)]
struct Decoder {
    precision: Precision,
    /// `f64::from(precision.decode_from(&[code]))` for every code, when the
    /// precision is one byte wide.
    codes: Option<Box<[f64; 256]>>,
}

impl Decoder {
    fn new(precision: Precision) -> Self {
        let codes = (precision.element_bytes() == 1).then(|| {
            let mut table = Box::new([0.0f64; 256]);
            for (code, v) in (0u8..=255).zip(table.iter_mut()) {
                *v = f64::from(precision.decode_from(&[code]));
            }
            table
        });
        Self { precision, codes }
    }

    /// The exact values of `bytes`, element by element.
    fn decode(&self, bytes: &[u8]) -> Vec<f64> {
        match &self.codes {
            Some(table) => bytes.iter().map(|&b| table[usize::from(b)]).collect(),
            None => {
                // The slice codec converts a vector at a time (the partials
                // of every pass go through here).
                let width = self.precision.element_bytes() as usize;
                let mut values = vec![0f32; bytes.len() / width.max(1)];
                self.precision
                    .codec()
                    .decode_slice(&bytes[..values.len() * width], &mut values);
                values.into_iter().map(f64::from).collect()
            }
        }
    }
}

/// The tables a program's runs share: decoders of the three precisions and,
/// when built, the rounded products of FP8 rows and weights.
#[derive(Clone, Debug)]
struct Tables {
    left: Decoder,
    right: Decoder,
    output: Decoder,
    products: Option<Arc<ProductTable>>,
}

impl Tables {
    /// The decoders of `h` and, when `products` holds (or may add) one,
    /// the product table of its precisions.
    fn new(h: &ProgramHeader, products: Option<&mut ProductTables>) -> Self {
        let left = Decoder::new(h.left);
        let right = Decoder::new(h.right);
        let output = Decoder::new(h.output);
        let products = match (products, &left.codes, &right.codes) {
            (Some(cache), Some(l), Some(r)) => {
                let key = (h.left, h.right, h.arithmetic);
                match cache.tables.get(&key) {
                    Some(t) => Some(Arc::clone(t)),
                    None if cache.tables.len() < ProductTables::LIMIT => {
                        let widen = h.arithmetic.widens_weights();
                        let single = h.arithmetic.single_partials();
                        let table = Arc::new(ProductTable::new(l, r, |a, w| {
                            let w = if widen { round_f16(w) } else { w };
                            if single {
                                round_f32(a * w)
                            } else {
                                round_f16(a * w)
                            }
                        }));
                        cache.tables.insert(key, Arc::clone(&table));
                        Some(table)
                    }
                    // Past the limit a program runs on decoded values:
                    // the same bytes, more slowly.
                    None => None,
                }
            }
            _ => None,
        };
        Self {
            left,
            right,
            output,
            products,
        }
    }
}

/// Product tables shared by the [`PreparedProgram`]s of one run, one per
/// combination of row and weight precision and arithmetic, at most
/// [`ProductTables::LIMIT`] of them (512 KiB each): programs past the limit
/// run without a table, so a package with many precisions cannot make the
/// tables grow without bound.
#[derive(Clone, Debug, Default)]
pub struct ProductTables {
    tables: std::collections::HashMap<(Precision, Precision, Arithmetic), Arc<ProductTable>>,
}

impl ProductTables {
    /// The most tables kept (32 MiB).
    pub const LIMIT: usize = 64;

    /// No tables yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tables built so far.
    pub fn len(&self) -> usize {
        self.tables.len()
    }

    /// Whether none was built.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }
}

/// An AMP program made ready to run many times: its header checked once,
/// its decode tables built and, when rows and weights are both FP8, the
/// table of every product rounded to the partial precision (512 KiB),
/// which makes the innermost loop a table load and an add. Runs through
/// [`emulate_prepared`] give the same bytes as [`emulate_with`].
#[derive(Clone, Debug)]
pub struct PreparedProgram {
    program: AmpProgram,
    tables: Tables,
}

impl PreparedProgram {
    /// Checks `program`'s header and builds its tables.
    pub fn new(program: AmpProgram) -> Result<Self, EmulateError> {
        Self::with_tables(program, &mut ProductTables::new())
    }

    /// [`PreparedProgram::new`], taking its product table from `tables`
    /// (or adding it there), so that programs of the same precisions share
    /// one.
    pub fn with_tables(
        program: AmpProgram,
        tables: &mut ProductTables,
    ) -> Result<Self, EmulateError> {
        check_header(&program.header)?;
        let tables = Tables::new(&program.header, Some(tables));
        Ok(Self { program, tables })
    }

    /// The program.
    pub fn program(&self) -> &AmpProgram {
        &self.program
    }
}

/// Runs `program` on the tile memory image `memory`, whose first byte is at
/// address `memory_base`, with round to nearest even.
pub fn emulate(
    program: &AmpProgram,
    memory: &mut [u8],
    memory_base: u32,
    args: &KernelArgs,
) -> Result<EmulationStats, EmulateError> {
    emulate_with(
        program,
        memory,
        memory_base,
        args,
        &EmulateOptions::default(),
    )
}

/// [`emulate`] with options (stochastic rounding).
pub fn emulate_with(
    program: &AmpProgram,
    memory: &mut [u8],
    memory_base: u32,
    args: &KernelArgs,
    options: &EmulateOptions,
) -> Result<EmulationStats, EmulateError> {
    check_header(&program.header)?;
    let tables = Tables::new(&program.header, None);
    run(program, &tables, memory, memory_base, args, options)
}

/// [`emulate_with`] for a prepared program (the same bytes, faster when the
/// program runs many times).
pub fn emulate_prepared(
    prepared: &PreparedProgram,
    memory: &mut [u8],
    memory_base: u32,
    args: &KernelArgs,
    options: &EmulateOptions,
) -> Result<EmulationStats, EmulateError> {
    run(
        &prepared.program,
        &prepared.tables,
        memory,
        memory_base,
        args,
        options,
    )
}

fn check_header(h: &ProgramHeader) -> Result<(), EmulateError> {
    if !matches!(
        h.left_order,
        ElementOrder::RowMajor | ElementOrder::Amp(AmpOperand::Left)
    ) {
        return Err(EmulateError::MalformedHeader {
            reason: format!(
                "left order {:?} is neither RowMajor nor Amp(Left)",
                h.left_order
            ),
        });
    }
    let expected = Arithmetic::select(h.left, h.right, h.output);
    if expected != Some(h.arithmetic) {
        return Err(EmulateError::MalformedHeader {
            reason: format!(
                "arithmetic {:?} does not match left {}, right {}, output {}",
                h.arithmetic, h.left, h.right, h.output
            ),
        });
    }
    Ok(())
}

/// Checks that every repetition of row-major left `runs` starts at a
/// multiple of `alignment` from the (aligned) operand base. The stride
/// matters only when a run repeats: a single repetition never uses it.
fn check_row_runs(site: OpSite, runs: &[Run], alignment: u32) -> Result<(), EmulateError> {
    // The operand bases were checked against a non-zero alignment already.
    let a = alignment.max(1);
    for (j, r) in runs.iter().enumerate() {
        if r.offset % a != 0 || (r.count > 1 && r.stride % a != 0) {
            return Err(EmulateError::MisalignedLeftRun {
                site,
                run: j,
                offset: r.offset,
                stride: r.stride,
                alignment,
            });
        }
    }
    Ok(())
}
