//! Faults: the device that vanishes, and the collector that frees the groups and IOMMU entries
//! of jobs that died.

use std::sync::atomic::Ordering;
use std::time::Instant;

use barrier_hw::{global, status, IOMMU_ENTRIES, IOMMU_FREE, IOMMU_STATE};

use super::state::*;

impl Engine {
    /// Every register reads all ones from now on; nothing is served.
    pub(crate) fn vanish(&mut self) {
        self.vanished = true;
        self.dev.word(global::DEVICE_STATUS.offset).store(status::GONE, Ordering::Release);
        for g in 0..self.map.max_groups {
            self.dev.group_word(self.map, g, &self.map.group.status, 0).store(status::GONE, Ordering::Release);
            self.dev.group_word(self.map, g, &self.map.group.completed_epoch, 0).store(status::GONE, Ordering::Release);
        }
        tracing::debug!(device = self.map.kind, "fault: device vanished");
    }

    /// Frees groups and IOMMU entries that no live process uses any more.
    ///
    /// Liveness is read from the locks drivers hold on the device file (see
    /// `barrier_hw::DeviceMap::member_lock`), never from process ids: a group is freed only when
    /// neither its claim lock nor any member lock is held, so a group whose claimer exited while
    /// other members are still attached stays theirs, a group claimed by a process that died
    /// before anyone attached is freed, and processes in other pid namespaces are judged right.
    ///
    /// A group is marked [`FREEING`] before it is looked at a second time: a driver attaches by
    /// taking its member lock and then reading OWNER, so either this pass sees that lock and
    /// gives the group back, or the driver sees the mark and refuses to attach.
    pub(crate) fn collect_garbage(&mut self) {
        self.last_gc = Instant::now();
        let m = self.map;
        let Some(file) = &self.dev.own else { return };
        let fd = file.raw_fd();
        let in_use = |g: usize| {
            barrier::sys::ofd_held(fd, m.claim_lock(g), 1)
                || barrier::sys::ofd_held(fd, m.member_lock(g, 0), m.max_members as u64)
        };
        let mut changed = false;
        for g in 0..m.max_groups {
            let owner = self.dev.group_word(m, g, &m.group.owner, 0);
            let id = owner.load(Ordering::Acquire);
            if id == 0 || id == FREEING || in_use(g) {
                continue;
            }
            if owner.compare_exchange(id, FREEING, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            if in_use(g) {
                let _ = owner.compare_exchange(FREEING, id, Ordering::AcqRel, Ordering::Acquire);
                continue;
            }
            tracing::debug!(device = m.kind, group = g, owner = id, "freeing a group no live process uses");
            self.set_reg(g, &m.group.control, 0);
            self.set_reg(g, &m.group.refs, 0);
            for member in 0..m.max_members {
                self.dev.group_word(m, g, &m.group.release_table, member).store(0, Ordering::Relaxed);
            }
            owner.store(0, Ordering::Release);
            changed = true;
        }
        // IOMMU entries the same way: mark, look at the lock again, then free or give back (a
        // plain store could free an entry that was released and claimed again meanwhile).
        for i in 0..IOMMU_ENTRIES as usize {
            let state = self.dev.word(m.iommu_entry(i) + IOMMU_STATE);
            let seen = state.load(Ordering::Acquire);
            if seen == IOMMU_FREE || seen == FREEING || barrier::sys::ofd_held(fd, m.iommu_lock(i), 1) {
                continue;
            }
            if state.compare_exchange(seen, FREEING, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            let back = if barrier::sys::ofd_held(fd, m.iommu_lock(i), 1) { seen } else { IOMMU_FREE };
            state.store(back, Ordering::Release);
        }
        if changed {
            self.refresh();
        }
    }
}
