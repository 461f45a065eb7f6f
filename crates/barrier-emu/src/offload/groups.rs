//! Group configuration as the engine sees it: enable, reset, errors, member masks, and the
//! IOMMU translation of every member's release flag.

use std::sync::atomic::{fence, Ordering};

use barrier_hw::{
    control, error_code, global, status, DeviceMap, FLAG_BYTES, IOMMU_ENTRIES, IOMMU_IOVA, IOMMU_STATE,
    IOMMU_STATE_CODE, IOMMU_VALID,
};

use super::state::*;

impl Group {
    /// A configured, running group (the threaded engine configured it, or an inline engine
    /// adopted it).
    pub(crate) fn running(owner: u64, mask: Vec<u64>, members: Vec<usize>, release: Vec<ReleaseTarget>) -> Self {
        let used: Vec<usize> = (0..mask.len()).filter(|&w| mask[w] != 0).collect();
        let mut index = vec![NOT_A_MEMBER; members.last().map_or(0, |&m| m + 1)];
        for (i, &member) in members.iter().enumerate() {
            index[member] = i as u32;
        }
        Group {
            index,
            owner,
            enabled: true,
            failed: false,
            single_word: (used.len() == 1).then(|| used[0]),
            mask,
            members,
            release,
            duplicates: Vec::new(),
        }
    }
}

impl ReleaseTarget {
    /// Whether the mapping this target was translated through is still in place.
    #[inline]
    pub(crate) fn mapped(&self, dev: &barrier::mmio::Mmio) -> bool {
        dev.word(self.entry + IOMMU_STATE).load(Ordering::Acquire) == self.state
    }
}

impl RegsAt {
    pub(crate) fn of(map: &DeviceMap, g: usize) -> RegsAt {
        let r = &map.group;
        let word = |reg: &barrier_hw::Register| {
            assert_eq!(reg.bytes, 8, "{} is read as one 64-bit word", reg.name);
            map.group_reg(g, reg)
        };
        RegsAt {
            owner: word(&r.owner),
            control: word(&r.control),
            status: word(&r.status),
            completed_epoch: word(&r.completed_epoch),
            arrival_count: word(&r.arrival_count),
            arrived_mask: map.group_reg(g, &r.arrived_mask),
            slots: map.group_reg(g, &r.arrival_slots),
        }
    }

    pub(crate) fn slot(&self, member: usize) -> u64 {
        self.slots + member as u64 * barrier_hw::ARRIVAL_SLOT_BYTES
    }
}

impl Engine {
    pub(crate) fn reset(&mut self, g: usize) {
        self.groups[g] = Group::default();
        let words = barrier_hw::mask_words(self.map.max_members);
        for w in 0..words {
            self.dev.group_word(self.map, g, &self.map.group.arrived_mask, w).store(0, Ordering::Relaxed);
        }
        self.set_reg(g, &self.map.group.arrival_count, 0);
        self.set_reg(g, &self.map.group.completed_epoch, 0);
        self.set_reg(g, &self.map.group.error_code, error_code::NONE);
        self.set_reg(g, &self.map.group.status, 0);
        self.dev.group_word(self.map, g, &self.map.group.control, 0).fetch_and(!control::RESET, Ordering::AcqRel);
    }

    pub(crate) fn fail(&mut self, g: usize, code: u64) {
        self.set_reg(g, &self.map.group.error_code, code);
        let st = self.reg(g, &self.map.group.status);
        self.set_reg(g, &self.map.group.status, st | status::ERROR);
        self.count(&global::ERRORS, 1);
        self.groups[g].enabled = false;
        self.groups[g].failed = true;
        tracing::debug!(device = self.map.kind, group = g, code, "emulated device raised ERROR");
    }

    /// Checks a group's configuration and translates its release addresses.
    pub(crate) fn configure(&mut self, g: usize) {
        let m = self.map;
        if self.error_stuck {
            self.fail(g, error_code::INJECTED);
            return;
        }
        let count = self.reg(g, &m.group.member_count) as usize;
        let (mask, members) = self.member_mask(g);
        if count == 0 || count > m.max_members || members.len() != count {
            self.fail(g, error_code::BAD_CONFIG);
            return;
        }
        let Some(release) = self.release_targets(g, &members) else {
            self.fail(g, error_code::IOMMU_FAULT);
            return;
        };
        let base = self.reg(g, &m.group.epoch_base);
        self.groups[g] = Group::running(self.reg(g, &m.group.owner), mask, members, release);
        self.set_reg(g, &m.group.completed_epoch, base);
        self.set_reg(g, &m.group.status, status::READY);
    }

    /// Group `g`'s MEMBER_MASK words, and its members in order.
    pub(crate) fn member_mask(&self, g: usize) -> (Vec<u64>, Vec<usize>) {
        let m = self.map;
        let words = barrier_hw::mask_words(m.max_members);
        let mask: Vec<u64> =
            (0..words).map(|w| self.dev.group_word(m, g, &m.group.member_mask, w).load(Ordering::Acquire)).collect();
        let members = (0..m.max_members).filter(|i| mask[i / 64] >> (i % 64) & 1 == 1).collect();
        (mask, members)
    }

    /// Where each of `members` of group `g` is released (its RELEASE_TABLE entry translated);
    /// `None` if any entry does not translate.
    pub(crate) fn release_targets(&self, g: usize, members: &[usize]) -> Option<Vec<ReleaseTarget>> {
        let m = self.map;
        members
            .iter()
            .map(|&member| {
                self.translate(self.dev.group_word(m, g, &m.group.release_table, member).load(Ordering::Acquire))
            })
            .collect()
    }

    /// IOVA → release target, through VALID entries only, inside DMA memory.
    pub(crate) fn translate(&self, iova: u64) -> Option<ReleaseTarget> {
        (0..IOMMU_ENTRIES as usize).find_map(|i| {
            let e = self.map.iommu_entry(i);
            // The state first (a driver writes it last, with release), then the window and
            // host, then the state again: the same claim's state twice means the words read
            // between are that mapping's (a driver changes an entry only through FREE, and
            // every claim draws a new tag), never a mix of two. Most entries of a scan are FREE:
            // their state alone says so.
            let state_word = self.dev.word(e + IOMMU_STATE);
            let state = state_word.load(Ordering::Acquire);
            if state & IOMMU_STATE_CODE != IOMMU_VALID {
                return None;
            }
            let words = self.dev.words(e + IOMMU_IOVA, 3);
            let [start, len, host] = [0, 1, 2].map(|w| words[w].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if state_word.load(Ordering::Relaxed) != state {
                return None;
            }
            // Every word of an entry comes from drivers: checked arithmetic, or a crafted entry
            // near 2^64 could wrap around and translate to memory outside DMA.
            let window_end = start.checked_add(len)?;
            let flag_end = iova.checked_add(FLAG_BYTES)?;
            if iova < start || flag_end > window_end {
                return None;
            }
            let off = host.checked_add(iova - start)?;
            let end = off.checked_add(FLAG_BYTES)?;
            (off >= self.map.dma_base && end <= self.map.size && off.is_multiple_of(FLAG_BYTES))
                .then_some(ReleaseTarget { flag: off, entry: e, state })
        })
    }
}
