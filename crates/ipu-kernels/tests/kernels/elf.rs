//! Objects written by the host toolchain parse back with `object::read`:
//! ELF32, little endian, relocatable, machine 248, OS ABI standalone, the
//! entry symbols in `.text`, and the AMP programs in `.ipu.amp` equal to the
//! built ones.

use ipu_kernels::{
    AMP_SECTION, HostToolchain, KernelError, Toolchain, build_program, code_bytes,
    programs_from_object,
};
use object::read::elf::{ElfFile32, FileHeader};
use object::read::{Object, ObjectSection, ObjectSymbol};
use object::{Endianness, SymbolKind, elf};

use crate::support::seed_variants;

#[test]
fn seed_objects_round_trip() {
    for v in seed_variants() {
        let compiled = HostToolchain
            .compile(&v, ipu_target::Target::ipu21())
            .expect("compiles");
        let bytes = &compiled.object;
        let file = ElfFile32::<Endianness>::parse(bytes.as_slice()).expect("parses as ELF32");
        let header = file.elf_header();
        let endian = file.endian();
        assert_eq!(endian, Endianness::Little);
        assert_eq!(header.e_machine(endian).0, 248);
        assert_eq!(header.e_type(endian), elf::ET_REL);
        assert_eq!(header.e_ident().os_abi, elf::ELFOSABI_STANDALONE);
        assert_eq!(header.e_ident().class, elf::ELFCLASS32);
        assert_eq!(header.e_ident().data, elf::ELFDATA2LSB);

        let text = file.section_by_name(".text").expect(".text");
        assert_eq!(text.size(), u64::from(code_bytes(&v)));
        assert_eq!(compiled.metadata.code_bytes, code_bytes(&v));
        assert!(file.section_by_name(AMP_SECTION).is_some());

        let entries = v.entry_points();
        for (entry, meta) in entries.iter().zip(&compiled.metadata.entries) {
            let symbol = file
                .symbols()
                .find(|s| s.name() == Ok(entry.symbol.as_str()))
                .expect("entry symbol");
            assert_eq!(symbol.kind(), SymbolKind::Text);
            assert!(symbol.is_global());
            assert_eq!(symbol.section_index(), Some(text.index()));
            assert_eq!(symbol.address(), u64::from(meta.offset));
            assert_eq!(symbol.size(), u64::from(meta.code_bytes));
        }

        let programs = programs_from_object(bytes).expect("programs read back");
        assert_eq!(programs.len(), 4);
        for ((symbol, program), entry) in programs.iter().zip(&entries) {
            assert_eq!(symbol, &entry.symbol);
            assert_eq!(
                program,
                &build_program(&v, entry.rows, entry.mode).expect("builds")
            );
        }
    }
}

#[test]
fn compile_is_deterministic() {
    let v = seed_variants().remove(0);
    let a = HostToolchain
        .compile(&v, ipu_target::Target::ipu21())
        .expect("compiles");
    let b = HostToolchain
        .compile(&v, ipu_target::Target::ipu21())
        .expect("compiles");
    assert_eq!(a, b);
}

#[test]
fn readelf_reports_machine_248_when_available() {
    // readelf is not a build dependency; when the machine has it, the header
    // it prints must name machine 248 and the standalone OS ABI.
    let v = seed_variants().remove(1);
    let compiled = HostToolchain
        .compile(&v, ipu_target::Target::ipu21())
        .expect("compiles");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("kernel.o");
    std::fs::write(&path, &compiled.object).expect("written");
    let Ok(out) = std::process::Command::new("readelf")
        .arg("-h")
        .arg(&path)
        .output()
    else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("ELF32"), "{text}");
    assert!(text.contains("REL (Relocatable file)"), "{text}");
    assert!(
        text.contains("Graphcore") || text.contains("248") || text.contains("0xf8"),
        "{text}"
    );
    // Older binutils print the standalone OS ABI as "<unknown: ff>".
    assert!(text.contains("Standalone") || text.contains("ff"), "{text}");
}

#[test]
fn damaged_objects_are_rejected() {
    let v = seed_variants().remove(2);
    let object = HostToolchain
        .compile(&v, ipu_target::Target::ipu21())
        .expect("compiles")
        .object;
    for cut in [0, 16, object.len() / 2, object.len() - 1] {
        assert!(programs_from_object(&object[..cut]).is_err(), "cut {cut}");
    }
    // No ELF header at all: the ELF reader's error is kept as the cause.
    match programs_from_object(&object[..16]) {
        Err(
            e @ KernelError::ObjectRead {
                what: "is not an ELF32 object",
                ..
            },
        ) => {
            let cause = std::error::Error::source(&e).expect("a cause");
            assert!(cause.is::<object::read::Error>(), "{e}");
        }
        other => panic!("not an ELF read error: {other:?}"),
    }
    // Another machine number.
    let mut other = object.clone();
    other[18] = 3;
    other[19] = 0;
    assert!(matches!(
        programs_from_object(&other),
        Err(KernelError::Object {
            what: "has the wrong machine",
            ..
        })
    ));
    // Damage inside the AMP section.
    let file = ElfFile32::<Endianness>::parse(object.as_slice()).expect("parses");
    let (start, size) = file
        .section_by_name(AMP_SECTION)
        .and_then(|s| s.file_range())
        .expect("section range");
    let mut damaged = object.clone();
    damaged[(start + size / 2) as usize] ^= 0xff;
    damaged[start as usize] ^= 0xff;
    assert!(programs_from_object(&damaged).is_err());
}

/// Compares `text` with a golden file, rewriting it under `IPU_BLESS=1`.
fn golden(name: &str, text: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/kernels/golden")
        .join(name);
    if std::env::var_os("IPU_BLESS").is_some() {
        std::fs::write(&path, text).expect("golden written");
    }
    let expected = std::fs::read_to_string(&path).expect("golden exists (run with IPU_BLESS=1)");
    for (i, (a, b)) in text.lines().zip(expected.lines()).enumerate() {
        assert_eq!(
            a,
            b,
            "{name} line {} differs (rewrite with IPU_BLESS=1 if intended)",
            i + 1
        );
    }
    assert_eq!(
        text.lines().count(),
        expected.lines().count(),
        "{name} length"
    );
}

/// The first seed variant's object, dumped through `object::read`, and its
/// `kernel.json`, against golden files.
#[test]
fn seed_object_and_metadata_match_golden() {
    let v = seed_variants().remove(0);
    let compiled = HostToolchain
        .compile(&v, ipu_target::Target::ipu21())
        .expect("compiles");
    let file = ElfFile32::<Endianness>::parse(compiled.object.as_slice()).expect("parses");
    let header = file.elf_header();
    let endian = file.endian();
    let mut dump = format!(
        "class ELF32 data little machine {} type {} os_abi {}\n",
        header.e_machine(endian).0,
        header.e_type(endian).0,
        header.e_ident().os_abi.0
    );
    for s in file.sections() {
        dump.push_str(&format!(
            "section {:<10} size {:>6} align {}\n",
            s.name().unwrap_or("?"),
            s.size(),
            s.align()
        ));
    }
    for s in file.symbols() {
        dump.push_str(&format!(
            "symbol {} value {} size {} {:?}\n",
            s.name().unwrap_or("?"),
            s.address(),
            s.size(),
            s.kind()
        ));
    }
    golden("seed_object.txt", &dump);
    let mut json = serde_json::to_string_pretty(&compiled.metadata).expect("serialises");
    json.push('\n');
    golden("seed_kernel.json", &json);
}
