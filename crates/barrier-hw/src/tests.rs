//! Unit tests of the device maps and the validator.

use crate::devices::{all_maps, GBA, SWITCH};
use crate::map::{check_disjoint, mask_words, DeviceMap, SWITCH_GROUP_NETWORK_ADDR};
use crate::register::reg;
use crate::register::Access::{ReadOnly, ReadWrite};

#[test]
fn every_map_is_valid() {
    for map in all_maps() {
        map.validate().unwrap();
    }
}

#[test]
fn the_switch_group_window_keeps_the_seed_offsets() {
    let g = &SWITCH.group;
    let seed = [
        (SWITCH_GROUP_NETWORK_ADDR.offset, 0x00),
        (g.group_id.offset, 0x08),
        (g.member_mask.offset, 0x10),
        (g.member_mask.offset + 8, 0x18),
        (g.member_count.offset, 0x20),
        (g.control.offset, 0x28),
        (g.status.offset, 0x30),
        (g.arrived_mask.offset, 0x38),
        (g.arrived_mask.offset + 8, 0x40),
        (g.local_member_id.offset, 0x48),
        (g.release_addr.offset, 0x50),
        (g.arrival_addr.offset, 0x58),
    ];
    for (ours, theirs) in seed {
        assert_eq!(ours, theirs);
    }
    assert_eq!((SWITCH.max_members, SWITCH.max_groups), (128, 256));
    assert_eq!((GBA.max_members, GBA.max_groups, mask_words(GBA.max_members)), (708, 32, 12));
}

#[test]
fn the_seed_gba_map_overlaps_and_the_validator_says_so() {
    // The published map: 708 release addresses at 0x80 and CONTROL at 0x1000 in 4 KiB.
    let seed = [
        reg("RELEASE_ADDR_BASE", 0x0080, 708 * 8, ReadWrite, ""),
        reg("CONTROL", 0x1000, 8, ReadWrite, ""),
        reg("STATUS", 0x1008, 8, ReadOnly, ""),
    ];
    let e = check_disjoint("seed-gba", "group", &seed, 0x1000).unwrap_err();
    assert!(e.0.contains("RELEASE_ADDR_BASE"), "{e:?}");
    let e = check_disjoint("seed-gba", "group", &seed, 0x10000).unwrap_err();
    assert!(e.0.contains("overlap"), "{e:?}");
}

#[test]
fn a_broken_map_is_rejected() {
    let mut bad = SWITCH.group;
    bad.status.offset = bad.control.offset;
    let map = DeviceMap { group: bad, ..copy(&SWITCH) };
    assert!(map.validate().unwrap_err().0.contains("overlap"));
    let map = DeviceMap { size: SWITCH.dma_base, ..copy(&SWITCH) };
    assert!(map.validate().is_err());
}

fn copy(m: &DeviceMap) -> DeviceMap {
    DeviceMap { ..*m }
}
