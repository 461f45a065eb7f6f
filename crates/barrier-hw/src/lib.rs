//! Barrier hardware described as data: register maps, bit fields, message formats and limits.
//!
//! The drivers (in `barrier`) and the emulator (`barrier-emu`) both read these tables, so the
//! emulated device serves exactly the registers the driver uses. Every map is checked by
//! [`DeviceMap::validate`] (no two registers overlap, every window fits the device), and the
//! test suite runs it on every map.
//!
//! # Device layout (both devices)
//!
//! ```text
//! 0x0000_0000  global window      identification, doorbell, counters          (GLOBAL_BYTES)
//! 0x0000_1000  IOMMU table        IOMMU_ENTRIES entries of IOMMU_ENTRY_BYTES
//! 0x0010_0000  group windows      max_groups windows of group_stride bytes
//! dma_base     DMA memory         host memory the device may write (release flags), one
//!                                 FLAG_BYTES line per (group, member)
//! ```
//!
//! A group window holds the seed's registers at the seed's offsets where they do not collide,
//! our extensions after them, then the per-member tables (release addresses, network
//! addresses) and the per-member arrival slots (where members' arrival remote stores land).

// Files: `register.rs` (Register, Access, the CONTROL/STATUS/ERROR_CODE values), `global.rs`
// (the global window), `layout.rs` (window and line sizes), `iommu.rs` (the IOMMU table),
// `map.rs` (DeviceMap, GroupRegs, the validator), `devices.rs` (SWITCH, GBA), `message.rs`,
// `a64fx.rs`. Imports run one way (register <- global <- map <- devices); this file only
// declares and re-exports, so no file imports it and every item keeps its `barrier_hw::` path.

pub mod a64fx;
mod devices;
pub mod global;
mod iommu;
mod layout;
mod map;
pub mod message;
mod register;

#[cfg(test)]
mod tests;

pub use devices::{all_maps, GBA, SWITCH};
pub use iommu::{
    IOMMU_BASE, IOMMU_CLAIMED, IOMMU_ENTRIES, IOMMU_ENTRY_BYTES, IOMMU_FREE, IOMMU_HOST, IOMMU_IOVA, IOMMU_LEN,
    IOMMU_STATE, IOMMU_STATE_CODE, IOMMU_TAG_BITS, IOMMU_TAG_SHIFT, IOMMU_VALID, IOVA_BASE,
};
pub use layout::{ARRIVAL_SLOT_BYTES, FLAG_BYTES, GLOBAL_BYTES, MAX_FLAG_BYTES};
pub use map::{mask_words, DeviceMap, GroupRegs, MapError, SWITCH_GROUP_NETWORK_ADDR};
pub use message::{expand_sequence, ArrivalEncoding, Message, MessageType};
pub use register::{control, error_code, status, Access, Register};

/// A hash of this crate's sources (made by its build script): `barrier` folds it into the
/// interface version of the inline emulator library, since both sides read these tables.
pub const SOURCE_HASH: u64 = {
    let hex = env!("BARRIER_HW_SOURCE_HASH").as_bytes();
    let mut value = 0u64;
    let mut i = 0;
    while i < hex.len() {
        let digit = match hex[i] {
            b'0'..=b'9' => hex[i] - b'0',
            b'a'..=b'f' => hex[i] - b'a' + 10,
            _ => panic!("the build script writes lowercase hex"),
        };
        value = value << 4 | digit as u64;
        i += 1;
    }
    value
};
