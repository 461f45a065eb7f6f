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

pub mod a64fx;
pub mod message;

pub use message::{expand_sequence, ArrivalEncoding, Message, MessageType};

/// How software may access a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Written by the device only.
    ReadOnly,
    /// Written by drivers, read by both.
    ReadWrite,
}

/// One register (or table) in a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Register {
    /// Name as in the documentation.
    pub name: &'static str,
    /// Byte offset inside its window.
    pub offset: u64,
    /// Size in bytes (a table's whole size).
    pub bytes: u64,
    /// Access.
    pub access: Access,
    /// What it is.
    pub description: &'static str,
}

const fn reg(name: &'static str, offset: u64, bytes: u64, access: Access, description: &'static str) -> Register {
    Register { name, offset, bytes, access, description }
}

/// Bits of the per-group CONTROL register (seed).
pub mod control {
    /// Enable the group.
    pub const ENABLE: u64 = 1 << 0;
    /// Reset barrier state (the device clears the bit when done).
    pub const RESET: u64 = 1 << 1;
    /// Arm: count arrivals (the device re-arms itself after each release).
    pub const ARM: u64 = 1 << 2;
    /// Wake waiters after each release (the emulator's "interrupt" is a futex wake on the
    /// release flag).
    pub const INTERRUPT_EN: u64 = 1 << 3;
}

/// Bits of the per-group STATUS register (seed). A read of all ones means the device is gone
/// (as a surprise-removed PCIe device reads).
pub mod status {
    /// Configured and waiting for arrivals.
    pub const READY: u64 = 1 << 0;
    /// Some, not all, members have arrived.
    pub const ACTIVE: u64 = 1 << 1;
    /// Every member arrived at `COMPLETED_EPOCH`; releases sent.
    pub const COMPLETE: u64 = 1 << 2;
    /// Error; see `ERROR_CODE`.
    pub const ERROR: u64 = 1 << 3;
    /// What a vanished device reads as.
    pub const GONE: u64 = u64::MAX;
}

/// Values of a group's ERROR_CODE register.
pub mod error_code {
    /// No error.
    pub const NONE: u64 = 0;
    /// A release address did not translate through the IOMMU.
    pub const IOMMU_FAULT: u64 = 1;
    /// An arrival message named another group or member, or a sequence out of range.
    pub const BAD_MESSAGE: u64 = 2;
    /// Configuration invalid (member count or mask out of range).
    pub const BAD_CONFIG: u64 = 3;
    /// Injected by the emulator's fault model.
    pub const INJECTED: u64 = 4;
}

/// Global window (offset 0) registers, common to both devices.
pub mod global {
    use super::{reg, Access::*, Register};
    /// Identification magic.
    pub const MAGIC: Register = reg("MAGIC", 0x000, 8, ReadOnly, "device identification (ASCII)");
    /// Layout version.
    pub const VERSION: Register = reg("VERSION", 0x008, 8, ReadOnly, "register-map version");
    /// Device present: 1; all ones once the device is gone.
    pub const DEVICE_STATUS: Register = reg("DEVICE_STATUS", 0x010, 8, ReadOnly, "1 = present, all ones = gone");
    /// Network address of the device.
    pub const NETWORK_ADDR: Register = reg("NETWORK_ADDR", 0x018, 8, ReadOnly, "network address of the switch");
    /// Doorbell: drivers bump it after sending arrivals or changing a group (lets an emulator
    /// sleep; real hardware sees the transactions themselves). A flag line with a waiter count:
    /// [`MAX_FLAG_BYTES`] bytes at an offset aligned to them, so that it is one aligned line
    /// whatever this architecture's [`FLAG_BYTES`].
    pub const DOORBELL: Register = reg(
        "DOORBELL",
        0x200,
        super::MAX_FLAG_BYTES,
        ReadWrite,
        "arrival/config doorbell (epoch-style counter + waiters)",
    );
    /// Counters (read-only): arrivals accepted.
    pub const ARRIVALS: Register = reg("ARRIVALS", 0x100, 8, ReadOnly, "arrival messages accepted");
    /// Releases written.
    pub const RELEASES: Register = reg("RELEASES", 0x108, 8, ReadOnly, "release stores written");
    /// Errors raised.
    pub const ERRORS: Register = reg("ERRORS", 0x110, 8, ReadOnly, "errors raised in any group");
    /// Groups owned.
    pub const GROUPS_IN_USE: Register = reg("GROUPS_IN_USE", 0x118, 8, ReadOnly, "groups currently allocated");
    /// Barriers completed.
    pub const BARRIERS: Register = reg("BARRIERS", 0x120, 8, ReadOnly, "barriers completed in any group");
    /// Engine time spent serving, in ns (emulator).
    pub const ENGINE_BUSY_NS: Register =
        reg("ENGINE_BUSY_NS", 0x128, 8, ReadOnly, "emulator CPU time serving the device, ns");
    /// Configuration sequence: drivers bump it after claiming, configuring or freeing a group,
    /// so the device re-reads group configuration only when something changed.
    pub const CONFIG_SEQ: Register =
        reg("CONFIG_SEQ", 0x130, 8, ReadWrite, "bumped by drivers after any group configuration change");
    /// The CONFIG_SEQ value the device has finished processing.
    pub const CONFIG_SEEN: Register = reg("CONFIG_SEEN", 0x138, 8, ReadOnly, "last CONFIG_SEQ the device has applied");
    /// Incremented by the device every time it scans its groups for arrivals: a driver that
    /// suspects a lost arrival first checks that the device has looked since it arrived.
    pub const HEARTBEAT: Register = reg("HEARTBEAT", 0x140, 8, ReadOnly, "scans of the arrival slots so far");
    /// How the device does its work: [`DEVICE_MODE_SELF`] (hardware, or an emulator's own
    /// engine) or [`DEVICE_MODE_INLINE`] (an emulated device whose work runs in the context of
    /// the store that triggers it, the way an emulator traps an MMIO write).
    pub const DEVICE_MODE: Register =
        reg("DEVICE_MODE", 0x148, 8, ReadOnly, "0: the device works on its own; 1: emulated inline");
    /// The inline engine's lock: scans of every group (doorbell rings) run under it.
    pub const ENGINE_LOCK: Register = reg("ENGINE_LOCK", 0x150, 8, ReadWrite, "inline engine lock");
    /// A random number fixed when the device powers on: tells two devices apart that were
    /// reached through the same path at different times.
    pub const INSTANCE: Register = reg("INSTANCE", 0x158, 8, ReadOnly, "random id of this power-on");
    /// DEVICE_MODE: the device works on its own.
    pub const DEVICE_MODE_SELF: u64 = 0;
    /// DEVICE_MODE: emulated inline.
    pub const DEVICE_MODE_INLINE: u64 = 1;
    /// Every global register.
    pub const ALL: &[Register] = &[
        MAGIC,
        VERSION,
        DEVICE_STATUS,
        NETWORK_ADDR,
        DOORBELL,
        ARRIVALS,
        RELEASES,
        ERRORS,
        GROUPS_IN_USE,
        BARRIERS,
        ENGINE_BUSY_NS,
        CONFIG_SEQ,
        CONFIG_SEEN,
        HEARTBEAT,
        DEVICE_MODE,
        ENGINE_LOCK,
        INSTANCE,
    ];
}

/// Bytes of the global window.
pub const GLOBAL_BYTES: u64 = 0x1000;
/// Offset of the IOMMU table.
pub const IOMMU_BASE: u64 = 0x1000;
/// Entries in the IOMMU table.
pub const IOMMU_ENTRIES: u64 = 8192;
/// Bytes per IOMMU entry: `[iova, len, host_offset, state]` as four u64 words.
pub const IOMMU_ENTRY_BYTES: u64 = 32;
/// Offset of an IOMMU entry's IOVA word (the window's start).
pub const IOMMU_IOVA: u64 = 0;
/// Offset of an IOMMU entry's window length.
pub const IOMMU_LEN: u64 = 8;
/// Offset of an IOMMU entry's host offset (where in DMA memory the window lands).
pub const IOMMU_HOST: u64 = 16;
/// Offset of an IOMMU entry's state word: the state ([`IOMMU_FREE`], [`IOMMU_CLAIMED`],
/// [`IOMMU_VALID`]) in the low byte ([`IOMMU_STATE_CODE`]); in a VALID entry a tag of the claim
/// above it (bits 8-31, drawn at random for every claim, never zero) and the claiming process's
/// pid (bits 32-63). A driver changes an entry only through FREE, so a state word that reads
/// the same twice means the words between were one mapping's (unless the same process claimed
/// the entry again and drew the same tag: one claim in 2^24).
pub const IOMMU_STATE: u64 = 24;
/// The state code's bits in an IOMMU state word.
pub const IOMMU_STATE_CODE: u64 = 0xff;
/// Where a claim's tag sits in an IOMMU state word, and its bits.
pub const IOMMU_TAG_SHIFT: u32 = 8;
/// The bits of a claim's tag (before the shift).
pub const IOMMU_TAG_BITS: u64 = 0xff_ffff;
/// IOMMU entry state: free.
pub const IOMMU_FREE: u64 = 0;
/// IOMMU entry state: being written by a driver (claimed, not valid yet).
pub const IOMMU_CLAIMED: u64 = 1;
/// IOMMU entry state: valid translation, device may write.
pub const IOMMU_VALID: u64 = 2;
/// Bytes of one release flag line in DMA memory: one cache line of this architecture, the size
/// of the library's `Flag` (it asserts the two agree at compile time), so every flag in DMA
/// memory is aligned and the last one ends inside the device.
///
/// * x86_64: 128 (64-byte lines fetched in adjacent pairs by Intel's spatial prefetcher);
/// * aarch64: 256 (the A64FX L1 and L2 line, A64FX Microarchitecture Manual);
/// * everything else: 64.
#[cfg(target_arch = "x86_64")]
pub const FLAG_BYTES: u64 = 128;
/// Bytes of one release flag line in DMA memory (see the x86_64 definition).
#[cfg(target_arch = "aarch64")]
pub const FLAG_BYTES: u64 = 256;
/// Bytes of one release flag line in DMA memory (see the x86_64 definition).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const FLAG_BYTES: u64 = 64;
const _: () = assert!(FLAG_BYTES.is_power_of_two());
/// The largest [`FLAG_BYTES`] of any architecture: flag-shaped registers (the doorbell) take
/// this much room, aligned to it, so one device layout serves every architecture.
pub const MAX_FLAG_BYTES: u64 = 256;
const _: () = assert!(FLAG_BYTES <= MAX_FLAG_BYTES && MAX_FLAG_BYTES.is_multiple_of(FLAG_BYTES));
/// Bytes of one member's arrival slot (one remote-store message, padded to a line).
pub const ARRIVAL_SLOT_BYTES: u64 = 128;
/// Where the IOVA space handed out by drivers starts (so that an IOVA is never a small number).
pub const IOVA_BASE: u64 = 0x1_0000_0000;

/// A device's complete description.
#[derive(Debug)]
pub struct DeviceMap {
    /// `switch` or `gba`.
    pub kind: &'static str,
    /// Value of the MAGIC register.
    pub magic: u64,
    /// Value of the VERSION register.
    pub version: u64,
    /// Members per group.
    pub max_members: usize,
    /// Groups per device.
    pub max_groups: usize,
    /// How an arrival is encoded in the message's `store_value`.
    pub encoding: ArrivalEncoding,
    /// First group window.
    pub group_base: u64,
    /// Bytes between group windows.
    pub group_stride: u64,
    /// Registers of a group window.
    pub group: GroupRegs,
    /// Where a member's release flag line lives in DMA memory is
    /// `dma_base + (group * max_members + member) * FLAG_BYTES`.
    pub dma_base: u64,
    /// Total device size.
    pub size: u64,
}

/// The registers of one group window (offsets relative to the window).
#[derive(Clone, Copy, Debug)]
pub struct GroupRegs {
    /// GROUP_ID (ro).
    pub group_id: Register,
    /// MEMBER_COUNT.
    pub member_count: Register,
    /// MEMBER_MASK words (`mask_words` × u64).
    pub member_mask: Register,
    /// ARRIVED_MASK words (ro).
    pub arrived_mask: Register,
    /// CONTROL.
    pub control: Register,
    /// STATUS (ro).
    pub status: Register,
    /// LOCAL_MEMBER_ID: the member whose release address RELEASE_ADDR shows.
    pub local_member_id: Register,
    /// RELEASE_ADDR: release IOVA of LOCAL_MEMBER_ID (a view of the release table).
    pub release_addr: Register,
    /// ARRIVAL_ADDR (ro): device offset of the group's arrival slots.
    pub arrival_addr: Register,
    /// ARRIVAL_COUNT (ro): arrivals counted for the current epoch, in groups whose members span
    /// more than one ARRIVED_MASK word (where it decides completion).
    pub arrival_count: Register,
    /// OWNER: 0 = free; a driver claims the group by compare-and-swap of its id.
    pub owner: Register,
    /// REFS: members attached (the last to detach frees the group).
    pub refs: Register,
    /// EPOCH_BASE: epochs before this one are complete; 32-bit sequences expand around it.
    pub epoch_base: Register,
    /// COMPLETED_EPOCH (ro): the last epoch released.
    pub completed_epoch: Register,
    /// ERROR_CODE (ro).
    pub error_code: Register,
    /// Release IOVA per member.
    pub release_table: Register,
    /// Network address per member.
    pub netaddr_table: Register,
    /// Arrival slots, one per member (ARRIVAL_SLOT_BYTES each).
    pub arrival_slots: Register,
}

impl GroupRegs {
    /// Every register, for validation and listing.
    pub fn all(&self) -> [Register; 18] {
        [
            self.group_id,
            self.member_count,
            self.member_mask,
            self.arrived_mask,
            self.control,
            self.status,
            self.local_member_id,
            self.release_addr,
            self.arrival_addr,
            self.arrival_count,
            self.owner,
            self.refs,
            self.epoch_base,
            self.completed_epoch,
            self.error_code,
            self.release_table,
            self.netaddr_table,
            self.arrival_slots,
        ]
    }
}

use Access::{ReadOnly, ReadWrite};

/// Words in a member mask of `members` bits.
pub const fn mask_words(members: usize) -> usize {
    members.div_ceil(64)
}

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

/// The seed's switch register at 0x0000 of each group window.
pub const SWITCH_GROUP_NETWORK_ADDR: Register = reg("NETWORK_ADDR", 0x0000, 8, ReadOnly, "network address of switch");

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

/// A problem found by [`DeviceMap::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapError(pub String);

impl DeviceMap {
    /// Device offset of register `r` in group `g`'s window.
    pub fn group_reg(&self, g: usize, r: &Register) -> u64 {
        self.group_base + g as u64 * self.group_stride + r.offset
    }

    /// Device offset of member `m`'s arrival slot in group `g`.
    pub fn arrival_slot(&self, g: usize, m: usize) -> u64 {
        self.group_reg(g, &self.group.arrival_slots) + m as u64 * ARRIVAL_SLOT_BYTES
    }

    /// Device offset of member `m`'s release flag line in group `g` (DMA memory).
    pub fn release_flag(&self, g: usize, m: usize) -> u64 {
        self.dma_base + (g * self.max_members + m) as u64 * FLAG_BYTES
    }

    /// Device offset of IOMMU entry `i`.
    pub fn iommu_entry(&self, i: usize) -> u64 {
        IOMMU_BASE + i as u64 * IOMMU_ENTRY_BYTES
    }

    /// Byte of the device file (past its end) whose lock a driver holds while it claims group
    /// `g` and until its members have attached. See [`DeviceMap::member_lock`].
    pub fn claim_lock(&self, g: usize) -> u64 {
        self.size + g as u64
    }

    /// Byte of the device file (past its end) whose lock member `m` of group `g` holds for as
    /// long as it is attached.
    ///
    /// # Liveness through locks
    ///
    /// A device must know when the processes that use a group are gone, to free the group. A
    /// process id cannot tell it (a pid from another pid namespace names another process, and
    /// pids are reused); an open file can. Drivers hold open-file-description locks
    /// (`F_OFD_SETLK`) on these bytes of the device file while they use a resource, and the
    /// kernel drops the locks when the process dies, whatever its namespace. The device (the
    /// emulator's collector) frees a group only when neither its claim lock nor any of its
    /// member locks is held, and an IOMMU entry only when its lock is free. This is what a
    /// kernel driver learns from a file handle's release.
    pub fn member_lock(&self, g: usize, m: usize) -> u64 {
        self.size + self.max_groups as u64 + (g * self.max_members + m) as u64
    }

    /// Byte of the device file (past its end) whose lock the holder of IOMMU entry `i` holds.
    pub fn iommu_lock(&self, i: usize) -> u64 {
        self.size + (self.max_groups * (1 + self.max_members)) as u64 + i as u64
    }

    /// Checks that no two registers overlap, every register is naturally aligned, every group
    /// window fits its stride, the tables are big enough for `max_members`, and everything fits
    /// the device.
    pub fn validate(&self) -> Result<(), MapError> {
        let err = |s: String| Err(MapError(format!("{} map: {s}", self.kind)));
        check_disjoint(self.kind, "global", global::ALL, GLOBAL_BYTES)?;
        let doorbell = global::DOORBELL;
        if !doorbell.offset.is_multiple_of(MAX_FLAG_BYTES) || doorbell.bytes < MAX_FLAG_BYTES {
            return err(format!("DOORBELL is not a {MAX_FLAG_BYTES}-byte aligned flag line"));
        }
        let mut group: Vec<Register> = self.group.all().to_vec();
        if self.kind == "switch" {
            group.push(SWITCH_GROUP_NETWORK_ADDR);
        }
        check_disjoint(self.kind, "group", &group, self.group_stride)?;
        let words = mask_words(self.max_members) as u64 * 8;
        if self.group.member_mask.bytes < words || self.group.arrived_mask.bytes < words {
            return err(format!("masks hold fewer than {} members", self.max_members));
        }
        let m = self.max_members as u64;
        if self.group.release_table.bytes < m * 8
            || self.group.netaddr_table.bytes < m * 8
            || self.group.arrival_slots.bytes < m * ARRIVAL_SLOT_BYTES
        {
            return err(format!("member tables hold fewer than {} members", self.max_members));
        }
        let iommu_end = IOMMU_BASE + IOMMU_ENTRIES * IOMMU_ENTRY_BYTES;
        if GLOBAL_BYTES > IOMMU_BASE || iommu_end > self.group_base {
            return err("global window, IOMMU table and group windows overlap".into());
        }
        let groups_end = self.group_base + self.max_groups as u64 * self.group_stride;
        if groups_end > self.dma_base {
            return err(format!(
                "group windows end at {groups_end:#x}, after DMA memory starts at {:#x}",
                self.dma_base
            ));
        }
        if !self.dma_base.is_multiple_of(FLAG_BYTES) {
            return err(format!("DMA memory at {:#x} is not aligned to {FLAG_BYTES}-byte flag lines", self.dma_base));
        }
        let dma_end = self.dma_base + (self.max_groups * self.max_members) as u64 * FLAG_BYTES;
        if dma_end > self.size {
            return err(format!("DMA memory ends at {dma_end:#x}, after the device ends at {:#x}", self.size));
        }
        Ok(())
    }
}

fn check_disjoint(kind: &str, window: &str, regs: &[Register], limit: u64) -> Result<(), MapError> {
    let mut sorted = regs.to_vec();
    sorted.sort_by_key(|r| r.offset);
    for r in &sorted {
        let align = r.bytes.min(8);
        if r.offset % align != 0 {
            return Err(MapError(format!(
                "{kind} map: {window} register {} at {:#x} is not {align}-byte aligned",
                r.name, r.offset
            )));
        }
        if r.offset + r.bytes > limit {
            return Err(MapError(format!(
                "{kind} map: {window} register {} ({:#x}..{:#x}) runs past the {window} window ({limit:#x})",
                r.name,
                r.offset,
                r.offset + r.bytes
            )));
        }
    }
    for w in sorted.windows(2) {
        if w[0].offset + w[0].bytes > w[1].offset {
            return Err(MapError(format!(
                "{kind} map: {window} registers {} ({:#x}..{:#x}) and {} ({:#x}) overlap",
                w[0].name,
                w[0].offset,
                w[0].offset + w[0].bytes,
                w[1].name,
                w[1].offset
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
