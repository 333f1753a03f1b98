//! Kernel objects: the [`Toolchain`] trait, the built-in host toolchain,
//! [`assemble_kernel`] (programs to an object and its metadata, for any
//! toolchain) and reading programs back out of objects.
//!
//! The host toolchain writes an ELF32 relocatable, little endian,
//! `e_machine = 248` (EM_GRAPHCORE_IPU), OS ABI standalone, with `object`'s
//! `build::elf::Builder` (the high-level writer cannot emit machine 248):
//!
//! - `.text` (alloc, exec, 8-byte aligned): one block per entry symbol, as
//!   long as the entry's code in the code-size model (so placement sizes
//!   are right). The host model has no instruction encoding: the first word
//!   of each block is the entry's index in `.ipu.amp`, the rest are zero.
//!   This code is not executable on hardware.
//! - `.ipu.amp` (not allocated): the serialised AMP programs the host model
//!   runs, as `magic "IPUAMPS\0", version u16, entry count u16`, then per
//!   entry `symbol length u16, symbol bytes, program length u32, program
//!   bytes` (the program's own format is in `program.rs`).
//! - the entry symbols: global functions in `.text`, valued at their block's
//!   offset, sized by it;
//! - `.symtab`, `.strtab`, `.shstrtab`.
//!
//! `kernel.json` ([`KernelMetadata`]) describes the same object.

use object::build::elf::{Builder, SectionData};
use object::elf;
use object::read::elf::{ElfFile32, FileHeader};
use object::read::{Object, ObjectSection, ObjectSymbol};
use object::{Endianness, build::ByteString};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[cfg(doc)]
use crate::check_program;
use crate::program::PROGRAM_FORMAT_VERSION;
use crate::variant::hex;
use crate::{
    AmpProgram, GemmShape, KernelError, Mode, RowSize, Variant, build_program, estimate_cycles,
};
use ipu_target::Target;

/// The section holding the serialised AMP programs.
pub const AMP_SECTION: &str = ".ipu.amp";

/// The version of `kernel.json` and of the `.ipu.amp` directory.
pub const KERNEL_METADATA_VERSION: u16 = 1;

const SECTION_MAGIC: &[u8; 8] = b"IPUAMPS\0";

/// `e_machine` of Graphcore IPU objects.
pub const EM_GRAPHCORE_IPU: u16 = 248;

/// Compiles variants into objects plus metadata.
///
/// `Send + Sync` so that a package builder can compile variants from
/// several threads through one toolchain. What a toolchain returns is
/// checked by its caller ([`check_kernel`](crate::check_kernel)) before it
/// is stored or used: an object in the format [`programs_from_object`]
/// reads (as [`assemble_kernel`] writes it), holding for each of the
/// variant's entries a program that [`check_program`] accepts, with
/// metadata that describes exactly the variant and the object.
pub trait Toolchain: Send + Sync {
    /// A string naming the toolchain and everything about it that changes
    /// its output (name, version, formats); part of the cache key.
    fn identity(&self) -> String;

    /// Compiles a variant for `target`, the device every fact about it
    /// comes from (the metadata records its name). A toolchain that fails
    /// for a reason of its own returns [`KernelError::Toolchain`].
    fn compile(&self, variant: &Variant, target: &Target) -> Result<CompiledKernel, KernelError>;

    /// The kernel source's name, for logs and metadata.
    fn source_name(&self) -> String {
        "builtin".to_owned()
    }

    /// The kernel source's bytes, if any (part of the cache key).
    fn source_bytes(&self) -> Vec<u8> {
        Vec::new()
    }
}

/// A compiled kernel: object bytes and metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledKernel {
    /// The ELF object.
    pub object: Vec<u8>,
    /// What `kernel.json` says about it.
    pub metadata: KernelMetadata,
}

/// One entry symbol in `kernel.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryMetadata {
    /// The symbol.
    pub symbol: String,
    /// Initialise or accumulate.
    pub mode: Mode,
    /// Small or large rows.
    pub size: RowSize,
    /// Rows it multiplies.
    pub rows: u32,
    /// Offset of its code in `.text`.
    pub offset: u32,
    /// Bytes of its code.
    pub code_bytes: u32,
    /// Estimated cycles per call.
    pub cycles: u64,
    /// MACs per call.
    pub macs: u64,
    /// Estimated AMP utilisation in parts per million (kept integral so the
    /// metadata bytes are deterministic).
    pub utilisation_ppm: u32,
}

/// `kernel.json`: everything a package builder needs to know about an
/// object without parsing it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelMetadata {
    /// [`KERNEL_METADATA_VERSION`].
    pub format_version: u16,
    /// The AMP program format inside the object: 1 for a panel-major left
    /// operand, 2 for a row-major one.
    pub program_format_version: u16,
    /// The variant's name.
    pub name: String,
    /// The variant's key (sha256 of its description).
    pub variant_key: String,
    /// The shard shape (rows = r_large).
    pub shape: GemmShape,
    /// The AMP instruction.
    pub instruction: String,
    /// Inner block.
    pub k: u32,
    /// Column block.
    pub c: u32,
    /// Small rows.
    pub r_small: u32,
    /// Large rows.
    pub r_large: u32,
    /// Bytes the AMP reads past the left operand.
    pub left_tail_bytes: u32,
    /// The entry symbols.
    pub entries: Vec<EntryMetadata>,
    /// Bytes of `.text`.
    pub code_bytes: u32,
    /// The toolchain's identity.
    pub toolchain: String,
    /// The source name.
    pub source: String,
    /// The target name.
    pub target: String,
    /// The cache key of the compile inputs ([`cache_key`](crate::cache_key);
    /// set by [`fetch_kernel`](crate::fetch_kernel), empty when compiled
    /// outside it).
    pub input_hash: String,
    /// sha256 (hex) of the object bytes.
    pub object_sha256: String,
    /// Size of the object in bytes.
    pub object_bytes: u64,
}

/// The built-in toolchain for the host model (`ipu-sim`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostToolchain;

impl Toolchain for HostToolchain {
    fn identity(&self) -> String {
        // The base program format: the programs of `Amp(Left)` variants are
        // still written in it byte for byte, so their cache entries stay
        // valid. Row-major-left variants (format 2) have keys of their own,
        // and the cache key hashes each variant's program format as well.
        format!(
            "ipu-kernels-host {} program-format {} metadata {}",
            env!("CARGO_PKG_VERSION"),
            PROGRAM_FORMAT_VERSION,
            KERNEL_METADATA_VERSION
        )
    }

    fn source_name(&self) -> String {
        "builtin:amp-program".to_owned()
    }

    fn compile(&self, variant: &Variant, target: &Target) -> Result<CompiledKernel, KernelError> {
        let programs = variant
            .entry_points()
            .iter()
            .map(|entry| build_program(variant, entry.rows, entry.mode))
            .collect::<Result<Vec<_>, _>>()?;
        assemble_kernel(variant, target, self, &programs)
    }
}

/// The object and metadata of `variant` compiled by `toolchain` for
/// `target`, from one program per entry of the variant, in the order of
/// [`Variant::entry_points`]: the object as the host toolchain writes it
/// (see the module header; each entry's code as long as the code-size model
/// says its program needs) and the metadata with the cost model's cycles
/// per entry. The programs are written as given, unchecked: a toolchain of
/// its own builds its programs and packs them with this, and its caller
/// checks the result.
pub fn assemble_kernel(
    variant: &Variant,
    target: &Target,
    toolchain: &dyn Toolchain,
    programs: &[AmpProgram],
) -> Result<CompiledKernel, KernelError> {
    let model = variant.model();
    let entries = variant.entry_points();
    if programs.len() != entries.len() {
        return Err(KernelError::ProgramCount {
            variant: variant.name().to_owned(),
            programs: programs.len(),
            entries: entries.len(),
        });
    }
    let mut directory = Vec::new();
    directory.extend_from_slice(SECTION_MAGIC);
    directory.extend_from_slice(&KERNEL_METADATA_VERSION.to_le_bytes());
    directory.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    let mut text = Vec::new();
    let mut metadata_entries = Vec::with_capacity(entries.len());
    for (index, (entry, program)) in entries.iter().zip(programs).enumerate() {
        let bytes = program.to_bytes();
        let name = entry.symbol.as_bytes();
        directory.extend_from_slice(&(name.len() as u16).to_le_bytes());
        directory.extend_from_slice(name);
        let length = u32::try_from(bytes.len()).map_err(|_| KernelError::Object {
            what: "program too large",
            reason: format!("{} bytes", bytes.len()),
        })?;
        directory.extend_from_slice(&length.to_le_bytes());
        directory.extend_from_slice(&bytes);

        let code = program
            .code_instructions(model)
            .saturating_mul(u64::from(model.instruction_bytes));
        let code = u32::try_from(code).map_err(|_| KernelError::Object {
            what: "code too large",
            reason: format!("{code} bytes"),
        })?;
        let offset = text.len() as u32;
        let mut block = vec![0u8; code as usize];
        if let Some(first) = block.get_mut(..4) {
            first.copy_from_slice(&(index as u32).to_le_bytes());
        }
        text.extend_from_slice(&block);
        let estimate = estimate_cycles(variant, entry.rows, entry.mode);
        metadata_entries.push(EntryMetadata {
            symbol: entry.symbol.clone(),
            mode: entry.mode,
            size: entry.size,
            rows: entry.rows,
            offset,
            code_bytes: code,
            cycles: estimate.cycles,
            macs: estimate.macs,
            utilisation_ppm: utilisation_ppm(&estimate),
        });
    }
    let object = write_object(&text, &directory, &metadata_entries)?;
    let metadata = KernelMetadata {
        format_version: KERNEL_METADATA_VERSION,
        program_format_version: variant.program_format_version(),
        name: variant.name().to_owned(),
        variant_key: variant.key().to_owned(),
        shape: *variant.shape(),
        instruction: variant.arithmetic().instruction().to_owned(),
        k: variant.k(),
        c: variant.c(),
        r_small: variant.r_small(),
        r_large: variant.r_large(),
        left_tail_bytes: variant.left_tail_bytes(),
        entries: metadata_entries,
        code_bytes: text.len() as u32,
        toolchain: toolchain.identity(),
        source: toolchain.source_name(),
        target: target.name().to_owned(),
        input_hash: String::new(),
        object_sha256: hex(&Sha256::digest(&object)),
        object_bytes: object.len() as u64,
    };
    Ok(CompiledKernel { object, metadata })
}

/// The estimated AMP utilisation in parts per million, as the metadata
/// records it (integral, so that the metadata's bytes are deterministic).
pub(crate) fn utilisation_ppm(estimate: &crate::CycleEstimate) -> u32 {
    (estimate.utilisation() * 1e6).round() as u32
}

fn write_object(
    text: &[u8],
    directory: &[u8],
    entries: &[EntryMetadata],
) -> Result<Vec<u8>, KernelError> {
    let mut b = Builder::new(Endianness::Little, false);
    b.header.os_abi = elf::ELFOSABI_STANDALONE;
    b.header.e_type = elf::ET_REL;
    b.header.e_machine = elf::Machine(EM_GRAPHCORE_IPU);

    let text_id = {
        let s = b.sections.add();
        s.name = ByteString::from(".text");
        s.sh_type = elf::SHT_PROGBITS;
        s.sh_flags = elf::SectionFlags(elf::SHF_ALLOC.0 | elf::SHF_EXECINSTR.0);
        s.sh_addralign = 8;
        s.data = SectionData::Data(text.to_vec().into());
        s.id()
    };
    {
        let s = b.sections.add();
        s.name = ByteString::from(AMP_SECTION);
        s.sh_type = elf::SHT_PROGBITS;
        s.sh_addralign = 4;
        s.data = SectionData::Data(directory.to_vec().into());
    }
    for entry in entries {
        let sym = b.symbols.add();
        sym.name = ByteString::from(entry.symbol.as_bytes().to_vec());
        sym.section = Some(text_id);
        sym.set_st_info(elf::STB_GLOBAL, elf::STT_FUNC);
        sym.st_value = u64::from(entry.offset);
        sym.st_size = u64::from(entry.code_bytes);
    }
    for (name, data) in [
        (".symtab", SectionData::Symbol),
        (".strtab", SectionData::String),
        (".shstrtab", SectionData::SectionString),
    ] {
        let s = b.sections.add();
        s.name = ByteString::from(name);
        s.data = data;
        s.sh_type = match name {
            ".symtab" => elf::SHT_SYMTAB,
            _ => elf::SHT_STRTAB,
        };
        if name == ".symtab" {
            s.sh_addralign = 4;
            s.sh_entsize = 16;
        } else {
            s.sh_addralign = 1;
        }
    }
    let mut out = Vec::new();
    b.write(&mut out)
        .map_err(|source| KernelError::ObjectWrite { source })?;
    Ok(out)
}

/// Reads the serialised AMP programs back out of an object written by the
/// host toolchain, checking that it is an EM 248 ELF32 object and that every
/// program has its entry symbol.
pub fn programs_from_object(object_bytes: &[u8]) -> Result<Vec<(String, AmpProgram)>, KernelError> {
    let bad = |what: &'static str, reason: String| KernelError::Object { what, reason };
    let unreadable = |what: &'static str| {
        move |source: object::read::Error| KernelError::ObjectRead { what, source }
    };
    let file = ElfFile32::<Endianness>::parse(object_bytes)
        .map_err(unreadable("is not an ELF32 object"))?;
    let machine = file.elf_header().e_machine(file.endian());
    if machine.0 != EM_GRAPHCORE_IPU {
        return Err(bad(
            "has the wrong machine",
            format!("e_machine {} is not {EM_GRAPHCORE_IPU}", machine.0),
        ));
    }
    let section = file.section_by_name(AMP_SECTION).ok_or_else(|| {
        bad(
            "has no AMP programs",
            format!("section {AMP_SECTION} is missing"),
        )
    })?;
    let data = section
        .data()
        .map_err(unreadable("has an unreadable AMP section"))?;
    let symbols: Vec<String> = file
        .symbols()
        .filter_map(|s| s.name().ok().map(str::to_owned))
        .collect();

    let malformed = |offset: usize, reason: &str| KernelError::MalformedProgram {
        offset,
        reason: format!("{AMP_SECTION}: {reason}"),
    };
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], KernelError> {
        let slice = data
            .get(at..at.saturating_add(n))
            .ok_or_else(|| malformed(at, "truncated"))?;
        at += n;
        Ok(slice)
    };
    if take(8)? != SECTION_MAGIC {
        return Err(malformed(0, "bad magic"));
    }
    let version = u16::from_le_bytes(take(2)?.try_into().unwrap_or([0, 0]));
    if version != KERNEL_METADATA_VERSION {
        return Err(KernelError::UnsupportedProgramVersion {
            found: version,
            supported: KERNEL_METADATA_VERSION,
        });
    }
    let count = u16::from_le_bytes(take(2)?.try_into().unwrap_or([0, 0]));
    let mut programs = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let length = u16::from_le_bytes(take(2)?.try_into().unwrap_or([0, 0]));
        let name = String::from_utf8(take(usize::from(length))?.to_vec())
            .map_err(|_| malformed(0, "symbol name is not UTF-8"))?;
        let size = u32::from_le_bytes(take(4)?.try_into().unwrap_or([0; 4]));
        let program = AmpProgram::from_bytes(take(size as usize)?)?;
        if !symbols.contains(&name) {
            return Err(bad(
                "lacks an entry symbol",
                format!("program {name} has no symbol of that name"),
            ));
        }
        programs.push((name, program));
    }
    Ok(programs)
}
