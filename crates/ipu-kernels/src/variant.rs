//! GEMM shards, variants and the variant planner.
//!
//! A [`GemmShape`] describes what one tile multiplies: its left rows, the
//! inner dimension, its output columns, the operand precisions and orders.
//! A [`Variant`] fixes how: the pass shape `k × c` (one coefficient tile:
//! the arithmetic's micro inner extent by the AMP's 16 columns, which the
//! hardware fixes) and the two row counts (`r_small`, `r_large`) one object
//! serves so that the long and short shards of one tiling share an object.
//! The planner [`plan_variant`] builds the variant of a shape and checks it
//! against the limits of a [`PlanConfig`].

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use ipu_layout::{AmpOperand, ElementOrder, MemoryClass, Precision};

use crate::{AmpModel, KernelError};

/// One tile's GEMM: `output[rows, columns] (+)= left[rows, inner] × right[inner, columns]`.
///
/// Dimensions are the stored (padded) shard extents; padding holds zeros.
/// The left operand is in `left_order` (`Amp(Left)` or `RowMajor`) and the
/// weights in `Amp(Right)` order (see `ipu_layout::ElementOrder`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmShape {
    /// Left rows held by the tile. [`plan_variant`] takes the rows it serves
    /// from its own arguments; this field is what [`crate::GemmProblem`] runs.
    pub rows: u32,
    /// The inner (reduction) dimension.
    pub inner: u32,
    /// Output columns.
    pub columns: u32,
    /// Left operand precision (F16 or FP8).
    pub left: Precision,
    /// Weight precision (F16 or FP8).
    pub right: Precision,
    /// Output and partial precision (F16, or F32 with F16 left rows).
    pub output: Precision,
    /// `Amp(Left)` (the default) or `RowMajor`. A row-major left operand's
    /// rows must start at aligned addresses: `inner × element bytes` must be
    /// a multiple of the model's operand alignment (see [`Variant::new`]).
    ///
    /// The default is not serialised, so a shape that does not use a
    /// row-major left serialises exactly as before the field existed: its
    /// variant key, cache key, name and `kernel.json` are unchanged, and
    /// metadata written before the field existed reads back as `Amp(Left)`.
    #[serde(
        default = "default_left_order",
        skip_serializing_if = "is_default_left_order"
    )]
    pub left_order: ElementOrder,
    /// `RowMajor` or `Amp(Output)`.
    pub output_order: ElementOrder,
    /// Where the weights live; interleaved memory allows 128-bit loads.
    pub right_class: MemoryClass,
}

/// The left order of shapes that do not say otherwise: the AMP's own
/// panel-major order.
pub const DEFAULT_LEFT_ORDER: ElementOrder = ElementOrder::Amp(AmpOperand::Left);

fn default_left_order() -> ElementOrder {
    DEFAULT_LEFT_ORDER
}

fn is_default_left_order(order: &ElementOrder) -> bool {
    *order == DEFAULT_LEFT_ORDER
}

/// Whether a call overwrites the output or adds to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// `output = left × right`.
    Initialise,
    /// `output += left × right`, the partials starting from the output's bytes.
    Accumulate,
}

impl Mode {
    /// Both modes, initialise first.
    pub const ALL: [Mode; 2] = [Mode::Initialise, Mode::Accumulate];

    /// The lower-case name used in symbols and listings.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Initialise => "initialise",
            Mode::Accumulate => "accumulate",
        }
    }
}

/// Which of a variant's two row counts an entry serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RowSize {
    /// `r_small` rows.
    Small,
    /// `r_large` rows.
    Large,
}

impl RowSize {
    /// The lower-case name used in symbols.
    pub const fn name(self) -> &'static str {
        match self {
            RowSize::Small => "small",
            RowSize::Large => "large",
        }
    }
}

/// The AMP arithmetic a precision combination runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Arithmetic {
    /// F16 rows × F16 weights into F16 partials: `f16v4hihov4amp`.
    F16HalfPartials,
    /// F16 rows × F16 weights into F32 partials: `f16v4sisoamp`.
    F16SinglePartials,
    /// FP8 rows × FP8 weights into F16 partials: `f8v8hihov4amp`.
    Fp8HalfPartials,
    /// F16 rows × FP8 weights widened to F16 on the coefficient load, into F16
    /// partials: `f16v4hihov4amp`.
    MixedHalfPartials,
    /// F16 rows × FP8 weights widened to F16, into F32 partials: `f16v4sisoamp`.
    MixedSinglePartials,
}

impl Arithmetic {
    /// The arithmetic for a precision combination, if the AMP has one.
    pub fn select(left: Precision, right: Precision, output: Precision) -> Option<Self> {
        use Precision::{F16, F32};
        match (left, right, output) {
            (F16, F16, F16) => Some(Arithmetic::F16HalfPartials),
            (F16, F16, F32) => Some(Arithmetic::F16SinglePartials),
            (Precision::F8 { .. }, Precision::F8 { .. }, F16) => Some(Arithmetic::Fp8HalfPartials),
            (F16, Precision::F8 { .. }, F16) => Some(Arithmetic::MixedHalfPartials),
            (F16, Precision::F8 { .. }, F32) => Some(Arithmetic::MixedSinglePartials),
            _ => None,
        }
    }

    /// The AMP instruction's mnemonic.
    pub const fn instruction(self) -> &'static str {
        match self {
            Arithmetic::F16HalfPartials | Arithmetic::MixedHalfPartials => "f16v4hihov4amp",
            Arithmetic::F16SinglePartials | Arithmetic::MixedSinglePartials => "f16v4sisoamp",
            Arithmetic::Fp8HalfPartials => "f8v8hihov4amp",
        }
    }

    /// Inner elements one AMP step sums before rounding into the partial:
    /// 4 for the `v4` F16 instructions, 8 for `f8v8`.
    pub const fn group(self) -> u32 {
        match self {
            Arithmetic::Fp8HalfPartials => 8,
            _ => 4,
        }
    }

    /// Whether the weights are widened to F16 when the coefficients load.
    pub const fn widens_weights(self) -> bool {
        matches!(
            self,
            Arithmetic::MixedHalfPartials | Arithmetic::MixedSinglePartials
        )
    }

    /// Whether partials are F32.
    pub const fn single_partials(self) -> bool {
        matches!(
            self,
            Arithmetic::F16SinglePartials | Arithmetic::MixedSinglePartials
        )
    }

    /// MACs per AMP instruction of one worker under `model`.
    pub fn macs_per_instruction(self, model: &AmpModel) -> u32 {
        let base = match self {
            Arithmetic::Fp8HalfPartials => model.fp8_macs_per_instruction,
            _ => model.f16_macs_per_instruction,
        };
        if self.single_partials() {
            (base / model.f32_partials_rate_divisor.max(1)).max(1)
        } else {
            base.max(1)
        }
    }

    /// The inner extent of one pass (one coefficient tile): the micro
    /// inner dimension of the weights.
    pub fn micro_inner(self, model: &AmpModel) -> u32 {
        match self {
            Arithmetic::Fp8HalfPartials => model.fp8_micro_inner,
            _ => model.f16_micro_inner,
        }
    }

    /// The kernel path's overheads: the FP8 path for FP8 rows and
    /// weights, the F16 path for F16 rows (whatever the weights).
    pub fn path(self, model: &AmpModel) -> &crate::PathCosts {
        match self {
            Arithmetic::Fp8HalfPartials => &model.fp8,
            _ => &model.f16,
        }
    }

    /// Which slice the supervisor's outer loop runs over, as in poplibs'
    /// ConvPartial1x1Out vertices: inner slices for F16 rows, column
    /// slices for FP8.
    pub const fn outer_loop(self) -> crate::OuterLoop {
        match self {
            Arithmetic::Fp8HalfPartials => crate::OuterLoop::Columns,
            _ => crate::OuterLoop::Inner,
        }
    }

    /// AMP instructions a worker spends on one row of one pass: the AMP
    /// takes the whole tile (`micro_inner × column_multiple` MACs) per row,
    /// whatever part of it a narrow last slice uses.
    pub fn row_instructions(self, model: &AmpModel) -> u64 {
        (u64::from(self.micro_inner(model)) * u64::from(model.column_multiple))
            .div_ceil(u64::from(self.macs_per_instruction(model)))
    }
}

/// Limits and target model for [`plan_variant`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PlanConfig {
    /// The target's AMP model.
    pub model: AmpModel,
    /// The largest object code the planner accepts, in bytes.
    pub max_code_bytes: u32,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            model: AmpModel::ipu21(),
            max_code_bytes: 16384,
        }
    }
}

/// An entry symbol of a variant's object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EntryPoint {
    /// The symbol name.
    pub symbol: String,
    /// Initialise or accumulate.
    pub mode: Mode,
    /// Which row count.
    pub size: RowSize,
    /// The rows it multiplies.
    pub rows: u32,
}

/// A planned GEMM kernel: one shape, its blocks and the rows it serves.
///
/// Invariant (established by [`Variant::new`]): the shape is supported, `k`
/// is the arithmetic's micro inner dimension and `c` the AMP's column
/// multiple (the pass shape the coefficient registers hold), `1 <= r_small
/// <= r_large`, and every operand of `r_large` rows fits in 32 bits of
/// address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    shape: GemmShape,
    arithmetic: Arithmetic,
    k: u32,
    c: u32,
    r_small: u32,
    r_large: u32,
    model: AmpModel,
    name: String,
    key: String,
}

/// The canonical description hashed into a variant's key.
#[derive(Serialize)]
struct VariantSpec<'a> {
    shape: &'a GemmShape,
    k: u32,
    c: u32,
    r_small: u32,
    r_large: u32,
    model: &'a AmpModel,
}

impl Variant {
    /// A variant with the pass shape `k × c` (which must be the
    /// arithmetic's micro inner dimension by the column multiple, see
    /// [`pass_shape`]); `shape.rows` is replaced by `r_large`.
    pub fn new(
        shape: &GemmShape,
        k: u32,
        c: u32,
        r_small: u32,
        r_large: u32,
        model: &AmpModel,
    ) -> Result<Self, KernelError> {
        Self::unnamed(shape, k, c, r_small, r_large, model)?.named()
    }

    /// [`Variant::new`] without its name and key, which a variant only
    /// needs once [`plan_variant`] accepts it.
    pub(crate) fn unnamed(
        shape: &GemmShape,
        k: u32,
        c: u32,
        r_small: u32,
        r_large: u32,
        model: &AmpModel,
    ) -> Result<Self, KernelError> {
        model.validate()?;
        let arithmetic = validate_shape(shape, r_small, r_large)?;
        // The coefficient registers hold one tile of this shape; a kernel
        // has no other.
        let micro = arithmetic.micro_inner(model);
        if k != micro {
            return Err(KernelError::InvalidBlock {
                what: "inner (k)",
                value: k,
                expected: micro,
            });
        }
        check_left_alignment(shape, model, Some(k))?;
        let cm = model.column_multiple;
        if c != cm {
            return Err(KernelError::InvalidBlock {
                what: "column (c)",
                value: c,
                expected: cm,
            });
        }
        let shape = GemmShape {
            rows: r_large,
            ..*shape
        };
        let variant = Self {
            shape,
            arithmetic,
            k,
            c,
            r_small,
            r_large,
            model: model.clone(),
            name: String::new(),
            key: String::new(),
        };
        // Every address the programs compute is below the largest operand
        // size, so checking the sizes once here makes the builder's
        // arithmetic safe.
        variant.operand_bytes(r_large)?;
        Ok(variant)
    }

    /// Gives an [`Variant::unnamed`] variant its name and key.
    pub(crate) fn named(mut self) -> Result<Self, KernelError> {
        let shape = &self.shape;
        let prefix = if shape.right.is_fp8() { "f8" } else { "f16" };
        let memory = match shape.right_class {
            MemoryClass::Ipu21Interleaved => "_interleaved",
            MemoryClass::Ipu21Standard => "",
        };
        // The default left order adds nothing, so existing names stay.
        let left = match shape.left_order {
            ElementOrder::RowMajor => "_left_rowmajor",
            ElementOrder::Amp(_) => "",
        };
        let (k, c, r_small, r_large) = (self.k, self.c, self.r_small, self.r_large);
        self.name = format!("gemm_{prefix}{memory}{left}_k{k}_c{c}_r{r_small}_r{r_large}");
        let spec = VariantSpec {
            shape,
            k,
            c,
            r_small,
            r_large,
            model: &self.model,
        };
        self.key = match serde_json::to_vec(&spec) {
            Ok(bytes) => hex(&Sha256::digest(&bytes)),
            Err(source) => return Err(KernelError::Metadata { source }),
        };
        Ok(self)
    }

    /// The seed's name scheme: `gemm_{f16|f8}{_interleaved}_k{K}_c{C}_r{S}_r{L}`,
    /// with `_left_rowmajor` after the memory part when the left operand is
    /// row major.
    /// Two variants of different shapes can share a name; [`Variant::key`]
    /// and the entry symbols are unique.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The sha256 (hex) of the variant's canonical description.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The shape, with `rows == r_large`.
    pub fn shape(&self) -> &GemmShape {
        &self.shape
    }

    /// The AMP arithmetic.
    pub fn arithmetic(&self) -> Arithmetic {
        self.arithmetic
    }

    /// The inner extent of a pass.
    pub fn k(&self) -> u32 {
        self.k
    }

    /// The column extent of a pass.
    pub fn c(&self) -> u32 {
        self.c
    }

    /// Rows of the short shards.
    pub fn r_small(&self) -> u32 {
        self.r_small
    }

    /// Rows of the long shards.
    pub fn r_large(&self) -> u32 {
        self.r_large
    }

    /// The version of the program format its programs are serialised in.
    pub fn program_format_version(&self) -> u16 {
        crate::program::PROGRAM_FORMAT_VERSION
    }

    /// The model the variant was planned with.
    pub fn model(&self) -> &AmpModel {
        &self.model
    }

    /// Bytes the AMP reads past the end of the left operand.
    pub fn left_tail_bytes(&self) -> u32 {
        match self.shape.left {
            Precision::F32 => self.model.left_tail_bytes_f32,
            _ => self.model.left_tail_bytes_f16,
        }
    }

    /// Byte sizes of the left, right and output operands for `rows` rows.
    pub fn operand_bytes(&self, rows: u32) -> Result<[u32; 3], KernelError> {
        let s = &self.shape;
        let size = |a: u32, b: u32, p: Precision, what: &'static str| {
            u64::from(a)
                .checked_mul(u64::from(b))
                .and_then(|n| n.checked_mul(p.element_bytes()))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| KernelError::AddressOverflow {
                    what,
                    variant: self.name.clone(),
                })
        };
        Ok([
            size(rows, s.inner, s.left, "left operand size")?,
            size(s.inner, s.columns, s.right, "weight operand size")?,
            size(rows, s.columns, s.output, "output operand size")?,
        ])
    }

    /// The rows served by an entry size.
    pub fn rows(&self, size: RowSize) -> u32 {
        match size {
            RowSize::Small => self.r_small,
            RowSize::Large => self.r_large,
        }
    }

    /// The four entry points: initialise and accumulate, for small and large
    /// rows. Symbols are `{name}_{key[..8]}_{mode}_{size}` so that variants
    /// sharing a name do not clash in one package.
    pub fn entry_points(&self) -> Vec<EntryPoint> {
        let tag = self.key.get(..8).unwrap_or(&self.key);
        let mut entries = Vec::with_capacity(4);
        for size in [RowSize::Small, RowSize::Large] {
            for mode in Mode::ALL {
                entries.push(EntryPoint {
                    symbol: format!("{}_{tag}_{}_{}", self.name, mode.name(), size.name()),
                    mode,
                    size,
                    rows: self.rows(size),
                });
            }
        }
        entries
    }
}

/// Checks a shape and row pair, returning the arithmetic it runs on.
pub(crate) fn validate_shape(
    shape: &GemmShape,
    r_small: u32,
    r_large: u32,
) -> Result<Arithmetic, KernelError> {
    for (value, what) in [
        (shape.inner, "inner"),
        (shape.columns, "columns"),
        (r_small, "rows_small"),
        (r_large, "rows_large"),
    ] {
        if value == 0 {
            return Err(KernelError::ZeroDimension { what });
        }
    }
    if r_small > r_large {
        return Err(KernelError::RowsOutOfOrder {
            rows_small: r_small,
            rows_large: r_large,
        });
    }
    if !matches!(
        shape.left_order,
        ElementOrder::RowMajor | ElementOrder::Amp(AmpOperand::Left)
    ) {
        return Err(KernelError::UnsupportedLeftOrder {
            order: shape.left_order,
        });
    }
    if !matches!(
        shape.output_order,
        ElementOrder::RowMajor | ElementOrder::Amp(AmpOperand::Output)
    ) {
        return Err(KernelError::UnsupportedOutputOrder {
            order: shape.output_order,
        });
    }
    Arithmetic::select(shape.left, shape.right, shape.output).ok_or(
        KernelError::UnsupportedPrecisions {
            left: shape.left,
            right: shape.right,
            output: shape.output,
        },
    )
}

/// Checks that every run of a row-major left operand starts at an aligned
/// offset from the (aligned) operand base, as the AMP's 128-bit loads need
/// (the reason operand bases are aligned at all).
///
/// The run of rows `r0..` and inner block `k0..` starts at
/// `(r0 × inner + k0) × eb` and repeats every `inner × eb` bytes, and `k0` is
/// a multiple of `k`, so every repetition is aligned exactly when
/// `inner × eb` and (with `k` given) `k × eb` are multiples of the
/// alignment. A panel-major left operand is not checked: its runs are the
/// same as before the left order existed.
fn check_left_alignment(
    shape: &GemmShape,
    model: &AmpModel,
    k: Option<u32>,
) -> Result<(), KernelError> {
    if shape.left_order != ElementOrder::RowMajor {
        return Ok(());
    }
    let eb = shape.left.element_bytes();
    let alignment = model.operand_alignment;
    let sizes = [
        ("row (inner x element bytes)", Some(shape.inner)),
        ("inner block (k x element bytes)", k),
    ];
    for (what, elements) in sizes {
        let Some(elements) = elements else { continue };
        // At most 2^32 × 4 bytes: the multiplication never saturates.
        let bytes = u64::from(elements).saturating_mul(eb);
        if bytes % u64::from(alignment.max(1)) != 0 {
            return Err(KernelError::MisalignedLeftRows {
                what,
                bytes,
                alignment,
            });
        }
    }
    Ok(())
}

/// The pass shape `(k, c)` of a shape's variants: the arithmetic's micro
/// inner dimension and the column multiple, or why the shape has none.
pub fn pass_shape(shape: &GemmShape, model: &AmpModel) -> Result<(u32, u32), KernelError> {
    let arithmetic = Arithmetic::select(shape.left, shape.right, shape.output).ok_or(
        KernelError::UnsupportedPrecisions {
            left: shape.left,
            right: shape.right,
            output: shape.output,
        },
    )?;
    Ok((arithmetic.micro_inner(model), model.column_multiple))
}

/// Plans the variant serving a tiling's long and short shards
/// (`rows_small <= rows_large`): the shape's pass shape ([`pass_shape`]),
/// if its code fits `max_code_bytes`. With a row-major left operand,
/// `inner × element bytes` must be a multiple of the operand alignment
/// (`k × element bytes` is one on IPU21: 32 bytes).
pub fn plan_variant(
    shape: &GemmShape,
    rows_small: u32,
    rows_large: u32,
    config: &PlanConfig,
) -> Result<Variant, KernelError> {
    config.model.validate()?;
    validate_shape(shape, rows_small, rows_large)?;
    let model = &config.model;
    check_left_alignment(shape, model, None)?;
    let (k, c) = pass_shape(shape, model)?;
    let variant = Variant::unnamed(shape, k, c, rows_small, rows_large, model)?;
    if crate::code_bytes(&variant) > config.max_code_bytes {
        return Err(KernelError::NoFeasibleBlock {
            variant: format!(
                "{} x {} x {} ({} x {} -> {})",
                rows_large, shape.inner, shape.columns, shape.left, shape.right, shape.output
            ),
            max_code_bytes: config.max_code_bytes,
        });
    }
    variant.named()
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(s, "{b:02x}");
    }
    s
}
