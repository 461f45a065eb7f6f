//! The device: the register driver, group claims, member attachment and detachment.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use barrier_hw::{
    control, global, status, DeviceMap, FLAG_BYTES, IOMMU_CLAIMED, IOMMU_ENTRIES, IOMMU_FREE, IOMMU_HOST, IOMMU_IOVA,
    IOMMU_LEN, IOMMU_STATE, IOMMU_TAG_BITS, IOMMU_TAG_SHIFT, IOMMU_VALID, IOVA_BASE,
};

use crate::mmio::Mmio;

/// How long the control plane waits for the device to answer RESET or ENABLE.
pub(super) const DEVICE_ANSWER: Duration = Duration::from_secs(3);

pub(super) const NO_GROUP: u64 = u64::MAX;

pub(super) const NO_ANSWER: u64 = u64::MAX - 1;

/// A device's counters (global window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Groups allocated.
    pub groups_in_use: u64,
    /// Barriers completed.
    pub barriers: u64,
    /// Errors raised.
    pub errors: u64,
}

/// A mapped barrier device.
#[derive(Debug)]
pub struct Device {
    pub(super) mmio: Mmio,
    pub(super) map: &'static DeviceMap,
    pub(super) path: PathBuf,
    /// A regular file (an emulated device), as opposed to a character device.
    pub(super) regular: bool,
    /// An inline emulated device: its work runs here, after each ring.
    pub(super) inline: Option<crate::mmio::InlineDevice>,
    /// The device's INSTANCE register (read once: it names this power-on of the device).
    pub(super) instance: u64,
}

impl Device {
    /// The device's counters.
    pub fn counters(&self) -> DeviceCounters {
        let r = |reg: &barrier_hw::Register| self.mmio.word(reg.offset).load(Ordering::Relaxed);
        DeviceCounters {
            groups_in_use: r(&global::GROUPS_IN_USE),
            barriers: r(&global::BARRIERS),
            errors: r(&global::ERRORS),
        }
    }

    /// Whether anything serves this device. An emulated device is a regular file whose emulator
    /// holds its `flock` for as long as it runs; a real device is a character device served by
    /// its kernel driver while it exists, which the file cannot tell (`None`).
    pub(super) fn served(&self) -> Option<bool> {
        if !self.regular {
            return None;
        }
        self.mmio.file().map(|f| crate::sys::flock_held(f.as_raw_fd()))
    }

    /// Takes this driver's lock on byte `at` of the device file (see
    /// `barrier_hw::DeviceMap::member_lock`); false if another open file holds it.
    pub(super) fn lock(&self, at: u64) -> bool {
        self.mmio.file().is_none_or(|f| crate::sys::ofd_lock(f.as_raw_fd(), at).unwrap_or(false))
    }

    pub(super) fn unlock(&self, at: u64) {
        if let Some(f) = self.mmio.file() {
            crate::sys::ofd_unlock(f.as_raw_fd(), at);
        }
    }

    pub(super) fn reg(&self, g: usize, r: &barrier_hw::Register) -> u64 {
        self.mmio.group_load(self.map, g, r)
    }

    pub(super) fn set_reg(&self, g: usize, r: &barrier_hw::Register, v: u64) {
        self.mmio.group_store(self.map, g, r, v)
    }

    pub(super) fn group_word(&self, g: usize, r: &barrier_hw::Register, index: usize) -> &AtomicU64 {
        self.mmio.group_word(self.map, g, r, index)
    }

    /// Rings the doorbell (the device, or its emulator, looks for new work). An atomic add:
    /// two rings are never merged into one, so the device cannot sleep past an arrival. An
    /// inline device does the work now, in this call.
    pub(super) fn ring(&self) {
        let ticket = self.mmio.flag(global::DOORBELL.offset).bump(self.inline.is_none());
        if let Some(device) = self.inline {
            device(&self.path, self.instance, self.map, crate::mmio::InlineWork::Ring { ticket });
        }
    }

    /// Tells the device that `member` of `group` wrote its arrival message. A device with an
    /// engine of its own is rung; an inline device takes the message now, in this call (the
    /// trapped store), without touching the doorbell, which every rank would otherwise write.
    pub(super) fn arrived(&self, group: usize, member: usize) {
        match self.inline {
            Some(device) => {
                device(&self.path, self.instance, self.map, crate::mmio::InlineWork::Arrival { group, member })
            }
            None => {
                self.mmio.flag(global::DOORBELL.offset).bump(true);
            }
        }
    }

    pub(super) fn config_changed(&self) {
        self.mmio.word(global::CONFIG_SEQ.offset).fetch_add(1, Ordering::AcqRel);
        self.ring();
    }

    pub(super) fn wait_for(&self, what: impl Fn() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < DEVICE_ANSWER {
            if what() {
                return true;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        what()
    }

    /// Frees group `g` if `owner` still owns it: the device forgets it, OWNER goes back to 0.
    pub(super) fn free(&self, g: usize, owner: u64) {
        self.set_reg(g, &self.map.group.control, 0);
        let _ = self.group_word(g, &self.map.group.owner, 0).compare_exchange(
            owner,
            0,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.config_changed();
    }

    /// Claims, resets and sizes a free group, holding its claim lock until
    /// [`Device::release_claim`]; `NO_GROUP` if all are taken, `NO_ANSWER` if the device did not
    /// acknowledge the reset.
    pub(super) fn claim(&self, owner: u64, members: usize) -> u64 {
        let m = self.map;
        // The claim lock first, then OWNER: the device frees only groups whose locks are all
        // free, so a group is never collected between being claimed and being attached to.
        let Some(g) = (0..m.max_groups).find(|&g| {
            let word = self.group_word(g, &m.group.owner, 0);
            if word.load(Ordering::Acquire) != 0 || !self.lock(m.claim_lock(g)) {
                return false;
            }
            let won = word.compare_exchange(0, owner, Ordering::AcqRel, Ordering::Acquire).is_ok();
            if !won {
                self.release_claim(g);
            }
            won
        }) else {
            return NO_GROUP;
        };
        self.set_reg(g, &m.group.control, control::RESET);
        self.config_changed();
        if !self.wait_for(|| self.reg(g, &m.group.control) & control::RESET == 0) {
            self.free(g, owner);
            self.release_claim(g);
            return NO_ANSWER;
        }
        self.set_reg(g, &m.group.refs, 0);
        self.set_reg(g, &m.group.member_count, members as u64);
        for w in 0..barrier_hw::mask_words(m.max_members) {
            let bits = (0..64).filter(|b| w * 64 + b < members).fold(0u64, |acc, b| acc | 1 << b);
            self.group_word(g, &m.group.member_mask, w).store(bits, Ordering::Release);
        }
        g as u64
    }

    pub(super) fn release_claim(&self, g: usize) {
        self.unlock(self.map.claim_lock(g));
    }

    /// Attaches member `member` of group `g`, which `owner` must still own: member lock taken,
    /// slot cleared, flag mapped through the IOMMU, tables written.
    pub(super) fn attach(&self, g: usize, member: usize, node: u64, owner: u64) -> Result<Attachment, String> {
        let m = self.map;
        if !self.lock(m.member_lock(g, member)) {
            return Err(format!("member {member} of group {g} at {} is held by another process", self.path.display()));
        }
        // The lock first, then OWNER: the device frees a group only after it has marked OWNER and
        // found no member lock, so either it sees this lock or this rank sees its mark.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.reg(g, &m.group.owner) != owner {
            self.unlock(m.member_lock(g, member));
            return Err(format!(
                "group {g} at {} was freed or taken over before this rank attached (it came too late to a \
                 collective that had already failed)",
                self.path.display()
            ));
        }
        let slot = m.arrival_slot(g, member);
        for w in 0..5 {
            self.mmio.word(slot + 8 * w).store(0, Ordering::Relaxed);
        }
        let flag_off = m.release_flag(g, member);
        let pid = (std::process::id() as u64) << 32;
        // As for groups: an entry's lock is taken before its state leaves FREE.
        let Some(entry) = (0..IOMMU_ENTRIES as usize).find(|&i| {
            let state = self.mmio.word(m.iommu_entry(i) + IOMMU_STATE);
            if state.load(Ordering::Acquire) != IOMMU_FREE || !self.lock(m.iommu_lock(i)) {
                return false;
            }
            let won =
                state.compare_exchange(IOMMU_FREE, IOMMU_CLAIMED | pid, Ordering::AcqRel, Ordering::Acquire).is_ok();
            if !won {
                self.unlock(m.iommu_lock(i));
            }
            won
        }) else {
            self.unlock(m.member_lock(g, member));
            return Err(format!("the IOMMU table of {} is full ({IOMMU_ENTRIES} mappings)", self.path.display()));
        };
        let e = m.iommu_entry(entry);
        // The claim (CLAIMED) before the words below, for a device that reads the state, the
        // words and the state again.
        fence(Ordering::Release);
        let iova = IOVA_BASE + flag_off;
        self.mmio.word(e + IOMMU_IOVA).store(iova, Ordering::Relaxed);
        self.mmio.word(e + IOMMU_LEN).store(FLAG_BYTES, Ordering::Relaxed);
        self.mmio.word(e + IOMMU_HOST).store(flag_off, Ordering::Relaxed);
        // A tag new for this claim, so the device can tell this mapping from any later one of
        // the same entry by its state word alone.
        let tag = (owner_id() & IOMMU_TAG_BITS).max(1) << IOMMU_TAG_SHIFT;
        self.mmio.word(e + IOMMU_STATE).store(IOMMU_VALID | tag | pid, Ordering::Release);
        self.group_word(g, &m.group.release_table, member).store(iova, Ordering::Release);
        self.group_word(g, &m.group.netaddr_table, member).store(node, Ordering::Release);
        self.group_word(g, &m.group.refs, 0).fetch_add(1, Ordering::AcqRel);
        // Set when the device powers on, never changed: read once.
        let arrival_addr = self.reg(g, &m.group.arrival_addr);
        Ok(Attachment { group: g, member, entry, flag_off, slot, owner, arrival_addr })
    }

    /// Frees a group this rank claimed if nobody attached to it (a failed enable).
    pub(super) fn free_unattached(&self, g: usize, owner: u64) {
        if self.reg(g, &self.map.group.owner) == owner && self.reg(g, &self.map.group.refs) == 0 {
            self.free(g, owner);
        }
        self.release_claim(g);
    }

    /// Undoes `attach`; the last member frees the group. Group registers are touched only while
    /// the group is still this attachment's (a group is never freed under a member holding its
    /// lock, but a device reset by hand may have freed it anyway).
    pub(super) fn detach(&self, a: &Attachment) {
        let m = self.map;
        let ours = self.reg(a.group, &m.group.owner) == a.owner;
        if ours {
            self.group_word(a.group, &m.group.release_table, a.member).store(0, Ordering::Release);
        }
        self.mmio.word(m.iommu_entry(a.entry) + IOMMU_STATE).store(IOMMU_FREE, Ordering::Release);
        self.unlock(m.iommu_lock(a.entry));
        if ours && self.group_word(a.group, &m.group.refs, 0).fetch_sub(1, Ordering::AcqRel) == 1 {
            self.free(a.group, a.owner);
        }
        self.unlock(m.member_lock(a.group, a.member));
    }

    /// Starts the group at `base` and waits until the device reports READY (or ERROR).
    pub(super) fn enable(&self, g: usize, base: u64, interrupts: bool) -> Result<(), String> {
        let m = self.map;
        self.set_reg(g, &m.group.epoch_base, base);
        let irq = if interrupts { control::INTERRUPT_EN } else { 0 };
        self.set_reg(g, &m.group.control, control::ENABLE | control::ARM | irq);
        self.config_changed();
        let answered = self.wait_for(|| self.reg(g, &m.group.status) & (status::READY | status::ERROR) != 0);
        let st = self.reg(g, &m.group.status);
        if !answered {
            Err(format!("group {g} of {} did not become READY within {DEVICE_ANSWER:?}", self.path.display()))
        } else if st & status::ERROR != 0 {
            Err(format!(
                "group {g} of {} reported ERROR code {} when enabled",
                self.path.display(),
                self.reg(g, &m.group.error_code)
            ))
        } else {
            Ok(())
        }
    }
}

/// One member's hold on a group.
#[derive(Debug, Clone, Copy)]
pub(super) struct Attachment {
    pub(super) group: usize,
    pub(super) member: usize,
    pub(super) entry: usize,
    pub(super) flag_off: u64,
    pub(super) slot: u64,
    /// The owner id the group had when this member attached.
    pub(super) owner: u64,
    /// The group's ARRIVAL_ADDR (where arrival messages land), for the messages.
    pub(super) arrival_addr: u64,
}

/// A group owner id: random, so that no two claims share one, whatever their processes' pid
/// namespaces or pid reuse (0 is "free" and all ones is the collector's mark).
pub(super) fn owner_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    loop {
        // RandomState is seeded from the operating system's random source.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
        h.write_u32(std::process::id());
        let id = h.finish();
        if id != 0 && id != u64::MAX {
            return id;
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(device) = self.inline {
            device(&self.path, self.instance, self.map, crate::mmio::InlineWork::Flush);
        }
    }
}
