//! A device's description ([`DeviceMap`], its group window [`GroupRegs`]) and the validator
//! that checks a map ([`DeviceMap::validate`], failing with [`MapError`]).

use crate::global;
use crate::iommu::{IOMMU_BASE, IOMMU_ENTRIES, IOMMU_ENTRY_BYTES};
use crate::layout::{ARRIVAL_SLOT_BYTES, FLAG_BYTES, GLOBAL_BYTES, MAX_FLAG_BYTES};
use crate::message::ArrivalEncoding;
use crate::register::{reg, Access::ReadOnly, Register};

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

/// Words in a member mask of `members` bits.
pub const fn mask_words(members: usize) -> usize {
    members.div_ceil(64)
}

/// The seed's switch register at 0x0000 of each group window.
pub const SWITCH_GROUP_NETWORK_ADDR: Register = reg("NETWORK_ADDR", 0x0000, 8, ReadOnly, "network address of switch");

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
pub(crate) fn check_disjoint(kind: &str, window: &str, regs: &[Register], limit: u64) -> Result<(), MapError> {
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
