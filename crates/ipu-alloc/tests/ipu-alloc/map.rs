//! The tile memory map made from a device description.

use ipu_alloc::MemoryMap;
use ipu_layout::MemoryClass;

#[test]
fn ipu21_map_matches_the_recovered_facts() {
    let map = MemoryMap::ipu21();
    assert_eq!(map.sram_start(), 0x4c000);
    assert_eq!(map.sram_end(), 0xe8000);
    assert_eq!(map.loader_limit(), 0xe7bb0);
    assert_eq!(map.regions().len(), 2);
    assert_eq!(map.regions()[0].element_bytes, 0x4000);
    assert_eq!(map.regions()[1].element_bytes, 0x8000);
    // Standard ranges are split at the region boundary and cut at the loader limit.
    assert_eq!(
        map.class_ranges(MemoryClass::Ipu21Standard),
        &[(0x4c000, 0x80000), (0x80000, 0xe7bb0)]
    );
    assert_eq!(
        map.class_ranges(MemoryClass::Ipu21Interleaved),
        &[(0x80000, 0xe7bb0)]
    );
    assert_eq!(map.executable_ranges(), &[(0x4c000, 0x80000)]);
}

#[test]
fn elements_are_16k_in_region0_and_32k_pairs_in_region1() {
    let map = MemoryMap::ipu21();
    let e = map.element_of(0x4c000 + 0x4001).map(|e| (e.start, e.end));
    assert_eq!(e, Some((0x50000, 0x54000)));
    let e = map.element_of(0x80000 + 0x8001).map(|e| (e.start, e.end));
    assert_eq!(e, Some((0x88000, 0x90000)));
    assert_eq!(map.element_of(0x1000), None);
    assert_eq!(map.region_of(0x7ffff), Some(0));
    assert_eq!(map.region_of(0x80000), Some(1));
}

#[test]
fn the_map_follows_the_target() {
    // A smaller device: SRAM ends early and the loader limit moves with it,
    // so the interleaved class keeps only what is below the limit.
    let text = ipu_target::IPU21_TOML
        .replace("sram_end = 0xe8000", "sram_end = 0xc0000")
        .replace("loader_limit = 0xe7bb0", "loader_limit = 0xbff00")
        .replace(
            "start = 0x80000, end = 0xe8000",
            "start = 0x80000, end = 0xc0000",
        );
    let target = ipu_target::Target::from_toml(&text).expect("a valid description");
    let map = MemoryMap::new(&target);
    assert_eq!(map.loader_limit(), 0xbff00);
    assert_eq!(
        map.class_ranges(MemoryClass::Ipu21Interleaved),
        &[(0x80000, 0xbff00)]
    );
}
