//! The IPU21 memory map read from `device/ipu21.toml`.

use ipu_alloc::{MapError, MemoryMap};
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
fn bad_device_descriptions_are_rejected_with_a_reason() {
    let e = MemoryMap::from_device_toml("name = 3").unwrap_err();
    assert!(matches!(e, MapError::Parse(_)), "{e}");
    let text = include_str!("../../../../device/ipu21.toml")
        .replace("0x4000, executable", "0, executable");
    let e = MemoryMap::from_device_toml(&text).unwrap_err();
    assert!(matches!(e, MapError::BadRegion { .. }), "{e}");
    assert!(e.to_string().contains("region0"));
}
