//! GEMM shards, variants and the variant planner.
//!
//! A [`GemmShape`] describes what one tile multiplies: its left rows, the
//! inner dimension, its output columns, the operand precisions and orders.
//! A [`Variant`] fixes how: the inner block `k`, the output-column block
//! `c`, and the two row counts (`r_small`, `r_large`) one object serves so
//! that the long and short shards of one tiling share an object. The planner
//! [`plan_variant`] picks `k` and `c` by the cost model of
//! [`crate::estimate_cycles`] within the limits of a [`PlanConfig`].

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use ipu_layout::{AmpOperand, ElementOrder, MemoryClass, Precision};

use crate::{AmpModel, KernelError, estimate_cycles};

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

    /// The multiple `k` must be: the micro inner dimension of the weights.
    pub fn micro_inner(self, model: &AmpModel) -> u32 {
        match self {
            Arithmetic::Fp8HalfPartials => model.fp8_micro_inner,
            _ => model.f16_micro_inner,
        }
    }
}

/// Limits and target model for [`plan_variant`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PlanConfig {
    /// The target's AMP model.
    pub model: AmpModel,
    /// The largest weight block (`k × c × weight bytes`) a worker streams
    /// rows against. The default, 36864, is the largest block the seed's
    /// kernels used (`k256 × c144` FP8).
    pub max_block_bytes: u32,
    /// The largest `k` considered.
    pub max_k: u32,
    /// The largest `c` considered.
    pub max_c: u32,
    /// The largest object code the planner accepts, in bytes.
    pub max_code_bytes: u32,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            model: AmpModel::ipu21(),
            max_block_bytes: 36864,
            max_k: 512,
            max_c: 512,
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
/// is a positive multiple of the micro inner dimension no larger than the
/// inner dimension rounded up to it, `c` likewise for the column multiple,
/// `1 <= r_small <= r_large`, and every operand of `r_large` rows fits in 32
/// bits of address.
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
    /// A variant with explicit blocks; `shape.rows` is replaced by `r_large`.
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

    /// [`Variant::new`] without its name and key, which only the chosen
    /// variant needs: [`plan_variant`] costs hundreds of candidate blocks
    /// per shape, and serialising and hashing each one's description
    /// nearly doubled a SigLIP b2 build's kernel-planning instructions.
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
        let micro = arithmetic.micro_inner(model);
        let k_limit = round_up(shape.inner, micro);
        if k == 0 || k % micro != 0 || k > k_limit {
            return Err(KernelError::InvalidBlock {
                what: "inner (k)",
                value: k,
                multiple: micro,
                limit: k_limit,
            });
        }
        check_left_alignment(shape, model, Some(k))?;
        let cm = model.column_multiple;
        let c_limit = round_up(shape.columns, cm);
        if c == 0 || c % cm != 0 || c > c_limit {
            return Err(KernelError::InvalidBlock {
                what: "column (c)",
                value: c,
                multiple: cm,
                limit: c_limit,
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
            Err(e) => {
                return Err(KernelError::Metadata {
                    reason: e.to_string(),
                });
            }
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

    /// The inner block.
    pub fn k(&self) -> u32 {
        self.k
    }

    /// The output-column block.
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

    /// The version of the program format its programs are serialised in:
    /// [`crate::PROGRAM_FORMAT_VERSION`] for a panel-major left operand,
    /// [`crate::PROGRAM_FORMAT_VERSION_LATEST`] for a row-major one.
    pub fn program_format_version(&self) -> u16 {
        crate::program::format_version(self.shape.left_order)
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

/// Plans one variant serving a tiling's long and short shards
/// (`rows_small <= rows_large`).
///
/// Candidates are every `k` (a multiple of the micro inner dimension up to
/// the padded inner dimension and `max_k`) and every `c` (a multiple of 16 up
/// to the padded columns and `max_c`) whose weight block fits
/// `max_block_bytes` and whose code fits `max_code_bytes`. The planner keeps
/// the one with the fewest estimated cycles for a long shard (initialise and
/// accumulate together), then the smaller code, then the larger `k`, then the
/// larger `c`; the choice does not depend on anything else. With a row-major
/// left operand, `inner × element bytes` must be a multiple of the operand
/// alignment, and `k` candidates whose inner blocks would start misaligned
/// are skipped (none are on IPU21, where `k × element bytes` is a multiple
/// of 32 bytes).
pub fn plan_variant(
    shape: &GemmShape,
    rows_small: u32,
    rows_large: u32,
    config: &PlanConfig,
) -> Result<Variant, KernelError> {
    config.model.validate()?;
    let arithmetic = validate_shape(shape, rows_small, rows_large)?;
    let model = &config.model;
    check_left_alignment(shape, model, None)?;
    let micro = arithmetic.micro_inner(model);
    let cm = model.column_multiple;
    let k_top = round_up(shape.inner, micro).min(config.max_k);
    let c_top = round_up(shape.columns, cm).min(config.max_c);
    let weight_bytes = if arithmetic.widens_weights() {
        2
    } else {
        shape.right.element_bytes()
    };
    type Score = (u64, u32, std::cmp::Reverse<u32>, std::cmp::Reverse<u32>);
    let mut best: Option<(Score, Variant)> = None;
    let mut k = micro;
    while k <= k_top {
        if check_left_alignment(shape, model, Some(k)).is_err() {
            k += micro;
            continue;
        }
        let mut c = cm;
        while c <= c_top {
            let block = u64::from(k) * u64::from(c) * weight_bytes;
            if block <= u64::from(config.max_block_bytes) {
                let v = Variant::unnamed(shape, k, c, rows_small, rows_large, model)?;
                // Cycles rank first, so a block slower than the best so far
                // loses whatever its code size: its modes are costed only
                // while their sum could still win, and its code (the
                // costlier figure, and the feasibility test) is sized only
                // when it could.
                let limit = best.as_ref().map_or(u64::MAX, |(b, _)| b.0);
                let mut cycles = 0u64;
                for &m in &Mode::ALL {
                    if cycles > limit {
                        break;
                    }
                    cycles = cycles.saturating_add(estimate_cycles(&v, rows_large, m).cycles);
                }
                if best.is_none() || cycles <= limit {
                    let code = crate::code_bytes(&v);
                    let score = (cycles, code, std::cmp::Reverse(k), std::cmp::Reverse(c));
                    if code <= config.max_code_bytes
                        && best.as_ref().is_none_or(|(b, _)| score < *b)
                    {
                        best = Some((score, v));
                    }
                }
            }
            c += cm;
        }
        k += micro;
    }
    best.map(|(_, v)| v.named())
        .transpose()?
        .ok_or_else(|| KernelError::NoFeasibleBlock {
            variant: format!(
                "{} x {} x {} ({} x {} -> {})",
                rows_large, shape.inner, shape.columns, shape.left, shape.right, shape.output
            ),
            max_block_bytes: config.max_block_bytes,
            max_code_bytes: config.max_code_bytes,
        })
}

/// `value` rounded up to a multiple of `multiple` (saturating).
pub(crate) fn round_up(value: u32, multiple: u32) -> u32 {
    let m = multiple.max(1);
    value.div_ceil(m).saturating_mul(m)
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
