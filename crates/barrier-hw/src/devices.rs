//! The device maps: the switch barrier accelerator ([`SWITCH`]) and the Global Barrier
//! Accelerator ([`GBA`]).

use crate::layout::{ARRIVAL_SLOT_BYTES, FLAG_BYTES};
use crate::map::{mask_words, DeviceMap, GroupRegs};
use crate::message::ArrivalEncoding;
use crate::register::reg;
use crate::register::Access::{ReadOnly, ReadWrite};

/// The switch barrier accelerator (seed `000`): 128 members, 256 groups. The group window keeps
/// the seed's map 0x0000 NETWORK_ADDR … 0x0058 ARRIVAL_ADDR exactly; NETWORK_ADDR, GROUP_ID and
/// the two 64-bit mask halves are per-group views.
pub static SWITCH: DeviceMap = {
    const MEMBERS: usize = 128;
    const GROUPS: usize = 256;
    const STRIDE: u64 = 0x8000;
    const GROUP_BASE: u64 = 0x100000;
    const DMA_BASE: u64 = GROUP_BASE + GROUPS as u64 * STRIDE;
    DeviceMap {
        kind: "switch",
        magic: u64::from_le_bytes(*b"SWBARACC"),
        version: 5,
        max_members: MEMBERS,
        max_groups: GROUPS,
        encoding: ArrivalEncoding::MemberHigh,
        group_base: GROUP_BASE,
        group_stride: STRIDE,
        group: GroupRegs {
            // 0x0000 NETWORK_ADDR is this window's copy of the global one (seed offset).
            group_id: reg("GROUP_ID", 0x0008, 8, ReadOnly, "barrier group identifier"),
            member_mask: reg(
                "MEMBER_MASK",
                0x0010,
                16,
                ReadWrite,
                "member mask: MEMBER_MASK_LO (bits 0-63) at 0x10, MEMBER_MASK_HI (64-127) at 0x18",
            ),
            member_count: reg("MEMBER_COUNT", 0x0020, 8, ReadWrite, "number of members"),
            control: reg("CONTROL", 0x0028, 8, ReadWrite, "ENABLE, RESET, ARM, INTERRUPT_EN"),
            status: reg("STATUS", 0x0030, 8, ReadOnly, "READY, ACTIVE, COMPLETE, ERROR"),
            arrived_mask: reg(
                "ARRIVED_MASK",
                0x0038,
                16,
                ReadOnly,
                "arrived members: ARRIVED_MASK_LO at 0x38, ARRIVED_MASK_HI at 0x40",
            ),
            local_member_id: reg(
                "LOCAL_MEMBER_ID",
                0x0048,
                8,
                ReadWrite,
                "member whose release address RELEASE_ADDR shows",
            ),
            release_addr: reg("RELEASE_ADDR", 0x0050, 8, ReadOnly, "release IOVA of LOCAL_MEMBER_ID"),
            arrival_addr: reg("ARRIVAL_ADDR", 0x0058, 8, ReadOnly, "device offset where arrival remote stores land"),
            // Extensions (not in the seed).
            arrival_count: reg(
                "ARRIVAL_COUNT",
                0x0060,
                8,
                ReadOnly,
                "arrivals counted for the current epoch (groups spanning mask words)",
            ),
            owner: reg("OWNER", 0x0068, 8, ReadWrite, "0 = free; claimed by compare-and-swap"),
            refs: reg("REFS", 0x0070, 8, ReadWrite, "members attached"),
            epoch_base: reg("EPOCH_BASE", 0x0078, 8, ReadWrite, "64-bit epoch before the first barrier"),
            completed_epoch: reg("COMPLETED_EPOCH", 0x0080, 8, ReadOnly, "last epoch released"),
            error_code: reg("ERROR_CODE", 0x0088, 8, ReadOnly, "why ERROR is set"),
            release_table: reg("RELEASE_TABLE", 0x0400, MEMBERS as u64 * 8, ReadWrite, "release IOVA per member"),
            netaddr_table: reg("NETADDR_TABLE", 0x0800, MEMBERS as u64 * 8, ReadWrite, "network address per member"),
            arrival_slots: reg(
                "ARRIVAL_SLOTS",
                0x1000,
                MEMBERS as u64 * ARRIVAL_SLOT_BYTES,
                ReadWrite,
                "arrival remote-store messages, one slot per member",
            ),
        },
        dma_base: DMA_BASE,
        size: DMA_BASE + (GROUPS * MEMBERS) as u64 * FLAG_BYTES,
    }
};

/// The Global Barrier Accelerator (seed `003`): 708 members (12 mask words), 32 groups.
///
/// The seed's map puts a 708-entry release-address table at 0x0080 (708 × 8 B = 0x1620 bytes,
/// ending at 0x16A0) and CONTROL at 0x1000, inside that table, in a 4 KiB group window. Here
/// the table keeps its seed offset, CONTROL and STATUS move to 0x1800/0x1808 after it, and the
/// group window is 128 KiB (it also holds 708 arrival slots of 128 bytes). GROUP_ID and
/// MEMBER_COUNT keep their seed offsets and 32-bit width.
pub static GBA: DeviceMap = {
    const MEMBERS: usize = 708;
    const GROUPS: usize = 32;
    const STRIDE: u64 = 0x20000;
    const GROUP_BASE: u64 = 0x100000;
    const DMA_BASE: u64 = GROUP_BASE + GROUPS as u64 * STRIDE;
    const MASK_BYTES: u64 = mask_words(MEMBERS) as u64 * 8;
    DeviceMap {
        kind: "gba",
        magic: u64::from_le_bytes(*b"GBARACC1"),
        version: 5,
        max_members: MEMBERS,
        max_groups: GROUPS,
        encoding: ArrivalEncoding::SequenceHigh,
        group_base: GROUP_BASE,
        group_stride: STRIDE,
        group: GroupRegs {
            group_id: reg("GROUP_ID", 0x0000, 4, ReadOnly, "barrier group identifier (32-bit)"),
            member_count: reg("MEMBER_COUNT", 0x0004, 4, ReadWrite, "number of members (32-bit)"),
            arrival_count: reg(
                "ARRIVAL_COUNT",
                0x0008,
                8,
                ReadOnly,
                "arrivals counted for the current epoch (groups spanning mask words)",
            ),
            member_mask: reg("MEMBER_MASK", 0x0010, MASK_BYTES, ReadWrite, "708-bit member mask, 12 × u64"),
            release_table: reg(
                "RELEASE_ADDR_TABLE",
                0x0080,
                MEMBERS as u64 * 8,
                ReadWrite,
                "release IOVA per member (seed 0x0080)",
            ),
            control: reg(
                "CONTROL",
                0x1800,
                8,
                ReadWrite,
                "ENABLE, RESET, ARM, INTERRUPT_EN (seed 0x1000 moved: it overlapped the table)",
            ),
            status: reg("STATUS", 0x1808, 8, ReadOnly, "READY, ACTIVE, COMPLETE, ERROR (seed 0x1008 moved)"),
            owner: reg("OWNER", 0x1810, 8, ReadWrite, "0 = free; claimed by compare-and-swap"),
            refs: reg("REFS", 0x1818, 8, ReadWrite, "members attached"),
            epoch_base: reg("EPOCH_BASE", 0x1820, 8, ReadWrite, "64-bit epoch before the first barrier"),
            // Alone on its line: written at every release, while CONTROL, STATUS and OWNER,
            // which every pass reads, change only when the group is configured.
            completed_epoch: reg("COMPLETED_EPOCH", 0x18C0, 8, ReadOnly, "last epoch released"),
            error_code: reg("ERROR_CODE", 0x1830, 8, ReadOnly, "why ERROR is set"),
            local_member_id: reg(
                "LOCAL_MEMBER_ID",
                0x1838,
                8,
                ReadWrite,
                "member whose release address RELEASE_ADDR shows",
            ),
            release_addr: reg("RELEASE_ADDR", 0x1840, 8, ReadOnly, "release IOVA of LOCAL_MEMBER_ID"),
            arrival_addr: reg("ARRIVAL_ADDR", 0x1848, 8, ReadOnly, "device offset where arrival remote stores land"),
            arrived_mask: reg("ARRIVED_MASK", 0x1900, MASK_BYTES, ReadOnly, "arrived members, 12 × u64"),
            netaddr_table: reg("NETADDR_TABLE", 0x2000, MEMBERS as u64 * 8, ReadWrite, "network address per member"),
            arrival_slots: reg(
                "ARRIVAL_SLOTS",
                0x4000,
                MEMBERS as u64 * ARRIVAL_SLOT_BYTES,
                ReadWrite,
                "arrival remote-store messages, one slot per member",
            ),
        },
        dma_base: DMA_BASE,
        size: DMA_BASE + (GROUPS * MEMBERS) as u64 * FLAG_BYTES,
    }
};

/// Every device map.
pub fn all_maps() -> [&'static DeviceMap; 2] {
    [&SWITCH, &GBA]
}
