//! The error types of this crate: one for planning, building, compiling,
//! storing and fetching ([`KernelError`]), one for running a program on a
//! memory image ([`EmulateError`]). What the kernel check finds wrong with
//! a compiled kernel is [`KernelCheckError`](crate::KernelCheckError).
//!
//! Every variant carries the names, ids and values involved so that the
//! message alone tells a user what to change.

use std::path::PathBuf;

use ipu_layout::{ElementOrder, Precision};

use crate::{KernelCheckError, KernelKey, WorkerId};

/// Why a variant could not be planned, built, compiled or cached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A GEMM dimension was zero.
    #[error("GEMM {what} is zero; every GEMM dimension must be at least 1")]
    ZeroDimension {
        /// Which dimension.
        what: &'static str,
    },
    /// The two row counts a variant serves are out of order.
    #[error(
        "rows_small {rows_small} is larger than rows_large {rows_large}; pass the short shard's rows first"
    )]
    RowsOutOfOrder {
        /// The short shard's rows.
        rows_small: u32,
        /// The long shard's rows.
        rows_large: u32,
    },
    /// The precision combination has no AMP instruction.
    #[error(
        "no AMP instruction takes left {left}, right {right} and output {output}; \
         use F16 or FP8 weights with F16 or FP8 left rows (FP8 left needs FP8 weights) \
         and an F16 output (F32 only with F16 left rows)"
    )]
    UnsupportedPrecisions {
        /// Left operand precision.
        left: Precision,
        /// Weight precision.
        right: Precision,
        /// Output precision.
        output: Precision,
    },
    /// The output element order is neither row major nor the AMP output order.
    #[error("GEMM output order {order:?} is not supported; use RowMajor or Amp(Output)")]
    UnsupportedOutputOrder {
        /// The order given.
        order: ElementOrder,
    },
    /// The left element order is neither row major nor the AMP left order.
    #[error("GEMM left order {order:?} is not supported; use RowMajor or Amp(Left)")]
    UnsupportedLeftOrder {
        /// The order given.
        order: ElementOrder,
    },
    /// A row-major left operand's rows or inner blocks would start at
    /// offsets the AMP cannot load from.
    #[error(
        "row-major left operand: the {what} is {bytes} bytes, not a multiple of the \
         {alignment}-byte operand alignment, so its rows would start misaligned; \
         pad the inner dimension to a multiple of {alignment} bytes or use the Amp(Left) order"
    )]
    MisalignedLeftRows {
        /// Which size: a row or an inner block.
        what: &'static str,
        /// Its bytes.
        bytes: u64,
        /// The operand alignment.
        alignment: u32,
    },
    /// An explicit block is not the pass shape of the AMP.
    #[error(
        "{what} block {value} is invalid: the AMP's coefficient registers hold one pass of \
         {expected} for this arithmetic, so a variant's block must be {expected}"
    )]
    InvalidBlock {
        /// `"inner (k)"` or `"column (c)"`.
        what: &'static str,
        /// The block given.
        value: u32,
        /// The pass extent it must be.
        expected: u32,
    },
    /// The variant's code does not fit the plan configuration.
    #[error(
        "the kernel code of {variant} exceeds max_code_bytes {max_code_bytes}; raise the limit"
    )]
    NoFeasibleBlock {
        /// A description of the shape being planned.
        variant: String,
        /// The limit.
        max_code_bytes: u32,
    },
    /// A program was requested for a row count the variant does not serve.
    #[error(
        "variant {variant} serves {rows_small} or {rows_large} rows, not {rows}; \
         plan a variant for this shard's rows"
    )]
    RowsNotServed {
        /// The variant's name.
        variant: String,
        /// The rows asked for.
        rows: u32,
        /// The short shard's rows.
        rows_small: u32,
        /// The long shard's rows.
        rows_large: u32,
    },
    /// An operand or offset does not fit the 32-bit tile address space.
    #[error(
        "{what} of variant {variant} does not fit in 32 bits; the shard is too large for one tile"
    )]
    AddressOverflow {
        /// What overflowed.
        what: &'static str,
        /// The variant's name.
        variant: String,
    },
    /// The device description could not be read.
    #[error("device description is invalid: {reason}; fix the [amp] section of the device file")]
    Device {
        /// What was wrong.
        reason: String,
    },
    /// Serialised AMP program bytes are malformed.
    #[error("serialised AMP program is malformed at byte {offset}: {reason}")]
    MalformedProgram {
        /// Byte offset of the problem.
        offset: usize,
        /// What was wrong.
        reason: String,
    },
    /// The program format version is not one this crate reads.
    #[error(
        "AMP program format version {found} is not supported (this build reads versions up to \
         {supported}); rebuild the kernel object"
    )]
    UnsupportedProgramVersion {
        /// The version in the bytes.
        found: u16,
        /// The newest version this build reads.
        supported: u16,
    },
    /// A kernel object is too large to write, or reads but is not the
    /// object it should be.
    #[error("kernel object {what}: {reason}")]
    Object {
        /// What was being done.
        what: &'static str,
        /// The underlying problem.
        reason: String,
    },
    /// The ELF writer could not write a kernel object.
    #[error("kernel object could not be written: {source}")]
    ObjectWrite {
        /// The ELF writer's error.
        #[source]
        source: object::build::Error,
    },
    /// A kernel object's bytes do not read as the ELF they should be.
    #[error("kernel object {what}: {source}")]
    ObjectRead {
        /// What is wrong with the object.
        what: &'static str,
        /// The ELF reader's error.
        #[source]
        source: object::read::Error,
    },
    /// A kernel cache path could not be determined.
    #[error(
        "no kernel cache directory: set IPU_KERNEL_CACHE, XDG_CACHE_HOME or HOME, or open a cache explicitly"
    )]
    NoCacheDirectory,
    /// A file-system operation on the kernel cache failed.
    #[error("kernel cache I/O failed while {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A kernel's metadata and object as one stored value do not decode.
    #[error("a stored kernel entry is malformed: {reason}")]
    MalformedEntry {
        /// What was wrong.
        reason: String,
    },
    /// A stored kernel entry's framing is sound but its metadata is not
    /// `kernel.json`.
    #[error("a stored kernel entry is malformed: its metadata does not parse: {source}")]
    EntryMetadata {
        /// The JSON reader's error.
        #[source]
        source: serde_json::Error,
    },
    /// A toolchain gave a program count that is not the variant's entry
    /// count.
    #[error(
        "variant {variant} has {entries} entries but {programs} programs were given; give one program per entry, in entry order"
    )]
    ProgramCount {
        /// The variant's name.
        variant: String,
        /// Programs given.
        programs: usize,
        /// Entries of the variant.
        entries: usize,
    },
    /// Another toolchain ([`Toolchain`](crate::Toolchain)) failed for a
    /// reason of its own.
    #[error("toolchain {toolchain} failed: {source}")]
    Toolchain {
        /// The toolchain's identity.
        toolchain: String,
        /// Its cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Another kernel store ([`KernelStore`](crate::KernelStore)) failed
    /// for a reason of its own.
    #[error("kernel store {store} failed: {source}")]
    Store {
        /// The store's name.
        store: String,
        /// Its cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// What a toolchain compiled fails the kernel check
    /// ([`check_kernel`](crate::check_kernel)): the toolchain is wrong.
    #[error(
        "the kernel toolchain {toolchain} compiled a kernel that fails its check with {} error(s); first: {}",
        errors.len(),
        errors.first().map(ToString::to_string).unwrap_or_default()
    )]
    CompiledRejected {
        /// The toolchain's identity.
        toolchain: String,
        /// Every error the check found.
        errors: Vec<KernelCheckError>,
    },
    /// What a store returned for a key fails the kernel check
    /// ([`check_kernel`](crate::check_kernel)): the store holds wrong bytes
    /// under that key.
    #[error(
        "kernel store {store} returned an entry for key {key} that fails its check with {} error(s); first: {}; remove the entry from the store",
        errors.len(),
        errors.first().map(ToString::to_string).unwrap_or_default()
    )]
    StoredRejected {
        /// The store's name.
        store: String,
        /// The key looked up.
        key: KernelKey,
        /// Every error the check found.
        errors: Vec<KernelCheckError>,
    },
    /// Metadata could not be serialised (a bug in this crate).
    #[error("kernel metadata could not be serialised: {source}; this is a bug in ipu-kernels")]
    Metadata {
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// Metadata is too long for a stored entry's 32-bit length field.
    #[error(
        "kernel metadata of {bytes} bytes does not fit a stored entry's 32-bit length; \
         this is a bug in ipu-kernels"
    )]
    MetadataTooLarge {
        /// The serialised metadata's bytes.
        bytes: usize,
    },
}

/// Which operand an emulated access touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// The streamed left rows.
    Left,
    /// The weights.
    Right,
    /// The output (partials read in accumulate mode, results written).
    Output,
}

impl std::fmt::Display for Operand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Operand::Left => "left",
            Operand::Right => "right",
            Operand::Output => "output",
        })
    }
}

/// Where in a program an op is: a pass's coefficient load (the
/// supervisor's) or an op of one worker's part of a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpSite {
    /// The pass, counted over the whole program.
    pub pass: usize,
    /// The worker, or `None` for the supervisor's coefficient load.
    pub worker: Option<WorkerId>,
    /// The op's index in the worker's part of the pass (0 for the load).
    pub op: usize,
}

impl OpSite {
    /// The coefficient load of pass `pass`.
    pub fn load(pass: usize) -> Self {
        Self {
            pass,
            worker: None,
            op: 0,
        }
    }

    /// Op `op` of `worker`'s part of pass `pass`.
    pub fn worker(pass: usize, worker: WorkerId, op: usize) -> Self {
        Self {
            pass,
            worker: Some(worker),
            op,
        }
    }
}

impl std::fmt::Display for OpSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.worker {
            None => write!(f, "pass {} coefficient load", self.pass),
            Some(w) => write!(f, "pass {} {w} op {}", self.pass, self.op),
        }
    }
}

/// Why an AMP program could not run on a memory image.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmulateError {
    /// An access falls outside the memory image.
    #[error(
        "{site}: {operand} access of {bytes} bytes at {address:#x} is outside tile memory \
         {memory_start:#x}..{memory_end:#x}; check the operand address"
    )]
    OutOfBounds {
        /// Where the op is.
        site: OpSite,
        /// The operand.
        operand: Operand,
        /// First byte address of the access.
        address: u64,
        /// Bytes accessed.
        bytes: u64,
        /// First address of the image.
        memory_start: u64,
        /// One past the last address of the image.
        memory_end: u64,
    },
    /// An operand address is not aligned as the AMP needs.
    #[error(
        "the {operand} operand at {address:#x} is not a multiple of {alignment} bytes; \
         place GEMM operands at {alignment}-byte aligned addresses"
    )]
    Misaligned {
        /// The operand.
        operand: Operand,
        /// Its address.
        address: u32,
        /// The alignment required.
        alignment: u32,
    },
    /// An operand does not lie inside the memory image.
    #[error(
        "the {operand} operand {start:#x}..{end:#x} is not inside tile memory \
         {memory_start:#x}..{memory_end:#x}; check the operand address and size"
    )]
    OperandOutOfBounds {
        /// The operand.
        operand: Operand,
        /// Its first byte address.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// First address of the image.
        memory_start: u64,
        /// One past the last address of the image.
        memory_end: u64,
    },
    /// An access leaves its operand's extent (a malformed program).
    #[error(
        "{site}: {operand} access at operand offset {offset} of {bytes} bytes runs past \
         the operand's {operand_bytes} bytes; the program is malformed"
    )]
    OperandOverrun {
        /// Where the op is.
        site: OpSite,
        /// The operand.
        operand: Operand,
        /// Offset from the operand base.
        offset: u64,
        /// Bytes accessed.
        bytes: u64,
        /// The operand's size.
        operand_bytes: u64,
    },
    /// The AMP reads past the end of the left operand and that tail is not
    /// inside the memory image.
    #[error(
        "the AMP reads {tail} bytes past the left operand ending at {end:#x}, outside tile memory \
         ending at {memory_end:#x}; allocate the left operand with its read tail"
    )]
    LeftTailOutOfBounds {
        /// One past the left operand's last byte.
        end: u64,
        /// Tail bytes read.
        tail: u64,
        /// One past the last address of the image.
        memory_end: u64,
    },
    /// The output overlaps an input.
    #[error(
        "output {output_start:#x}..{output_end:#x} overlaps the {operand} operand \
         {start:#x}..{end:#x}; a GEMM may not write its inputs"
    )]
    OperandsOverlap {
        /// The input overlapped.
        operand: Operand,
        /// Input range start.
        start: u64,
        /// Input range end.
        end: u64,
        /// Output range start.
        output_start: u64,
        /// Output range end.
        output_end: u64,
    },
    /// A run of a row-major left operand starts, or repeats, at an offset
    /// that is not a multiple of the operand alignment.
    #[error(
        "{site}: row-major left run {run} at operand offset {offset} with row stride \
         {stride} is not a multiple of {alignment} bytes; the AMP cannot load rows from there, \
         so place rows at {alignment}-byte multiples (pad the inner dimension)"
    )]
    MisalignedLeftRun {
        /// Where the op is.
        site: OpSite,
        /// The run index in the op.
        run: usize,
        /// The run's offset from the left operand base.
        offset: u32,
        /// The run's stride.
        stride: u32,
        /// The alignment required.
        alignment: u32,
    },
    /// An op is inconsistent with the program or the AMP state.
    #[error("{site} is malformed: {reason}")]
    Malformed {
        /// Where the op is.
        site: OpSite,
        /// What was wrong.
        reason: String,
    },
    /// The program header is inconsistent.
    #[error("AMP program header is malformed: {reason}")]
    MalformedHeader {
        /// What was wrong.
        reason: String,
    },
}
