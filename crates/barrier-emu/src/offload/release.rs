//! Completing an epoch: clearing the arrival state, then the release stores (with the latency
//! and fault models when they are configured).

use std::sync::atomic::Ordering;

use barrier_hw::{control, error_code, global, status};

use super::state::*;

impl Engine {
    /// Completes group `g`'s epoch `epoch`: clears the arrival state for the next epoch,
    /// records COMPLETED_EPOCH and stores the epoch into every member's release flag.
    pub(crate) fn release(&mut self, g: usize, epoch: u64) {
        let at = self.regs[g];
        let plain = self.plain;
        let interrupt = self.dev.word(at.control).load(Ordering::Acquire) & control::INTERRUPT_EN != 0;
        if !plain {
            self.before_modelled_release(g, interrupt);
        }
        // The next epoch's arrival state is cleared before any member is released: a member
        // sends its next arrival only after its release, so none is ever cleared here.
        let group = &self.groups[g];
        match group.single_word {
            Some(w) => self.dev.word(at.arrived_mask + 8 * w as u64).store(0, Ordering::Relaxed),
            None => {
                let mask = self.dev.words(at.arrived_mask, group.mask.len());
                for (word, &members) in mask.iter().zip(&group.mask) {
                    if members != 0 {
                        word.store(0, Ordering::Relaxed);
                    }
                }
                self.dev.word(at.arrival_count).store(0, Ordering::Release);
            }
        }
        self.dev.word(at.completed_epoch).store(epoch, Ordering::Release);
        let done = status::READY | status::COMPLETE;
        // Only if it changes (an inline device keeps it at READY | COMPLETE): the line is shared.
        let st = self.dev.word(at.status);
        if st.load(Ordering::Acquire) != done {
            st.store(done, Ordering::Release);
        }
        let members = group.members.len() as u64;
        // Each store re-checks the IOMMU entry: an unmapped flag must never be written. The
        // first one found unmapped stops the release there.
        let sent = if plain {
            let all = group.release.iter().all(|target| {
                if !target.mapped(&self.dev) {
                    return false;
                }
                // A plain store: a read-modify-write would hold the completing rank until the
                // line, which the member is polling, came over. A member that waits on this
                // group cannot pass this epoch before this store, so its flag only moves
                // forward. One that does not wait on it (a non-leader of a gather group in a
                // tree) can have the group complete again, by another rank, while this store
                // is delayed, and then see its flag go back one epoch for a moment: nothing
                // waits on that flag, the device uses it only as a hint it checks against
                // COMPLETED_EPOCH, and EPOCH_BASE takes the maximum over the members, whose
                // leader's flag is exact.
                self.dev.flag(target.flag).signal(epoch, interrupt);
                true
            });
            all.then_some(members)
        } else {
            self.modelled_release_stores(g, epoch, interrupt)
        };
        let Some(sent) = sent else {
            self.fail(g, error_code::IOMMU_FAULT);
            return;
        };
        // Arrivals are counted here, all at once.
        self.tally(members, sent, 1, 0);
        if !plain {
            self.after_modelled_release();
        }
    }

    /// What a device with latency or faults configured does before a release: a slow engine
    /// waits; late duplicates of the previous barrier's releases go out (harmless by design: a
    /// duplicate never moves a flag backwards, nor past what the device completed), to flags
    /// that are still mapped (a duplicate whose mapping is gone is dropped).
    #[cold]
    pub(crate) fn before_modelled_release(&mut self, g: usize, interrupt: bool) {
        if !self.config.faults.slow_engine.is_zero() {
            std::thread::sleep(self.config.faults.slow_engine);
        }
        for (target, e) in std::mem::take(&mut self.groups[g].duplicates) {
            if target.mapped(&self.dev) {
                self.dev.flag(target.flag).raise(e, interrupt);
            }
        }
    }

    /// The release stores of a device with latency or faults configured: each store waits its
    /// latency, may be lost or sent twice. The stores sent, or `None` at a target that is not
    /// mapped any more (the caller fails the group).
    #[cold]
    pub(crate) fn modelled_release_stores(&mut self, g: usize, epoch: u64, interrupt: bool) -> Option<u64> {
        let m = self.map;
        let faults = self.config.faults;
        let delay = self.config.latency.per_hop + self.config.latency.per_member;
        let mut sent = 0;
        for i in 0..self.groups[g].release.len() {
            let target = self.groups[g].release[i];
            if !delay.is_zero() {
                spin_for(delay);
            }
            if !target.mapped(&self.dev) {
                return None;
            }
            if self.chance(faults.drop_release) {
                tracing::debug!(
                    device = m.kind,
                    group = g,
                    member = self.groups[g].members[i],
                    epoch,
                    "fault: release dropped"
                );
                continue;
            }
            self.dev.flag(target.flag).signal(epoch, interrupt);
            sent += 1;
            if self.chance(faults.duplicate_release) {
                self.groups[g].duplicates.push((target, epoch));
            }
        }
        Some(sent)
    }

    /// The device-wide faults that follow a release (a sticky ERROR, vanishing) when their
    /// barrier count is reached.
    #[cold]
    pub(crate) fn after_modelled_release(&mut self) {
        let faults = self.config.faults;
        if faults.stick_error_after.is_some() || faults.vanish_after.is_some() {
            let barriers = self.dev.word(global::BARRIERS.offset).load(Ordering::Relaxed);
            if faults.stick_error_after.is_some_and(|n| barriers >= n) {
                self.error_stuck = true;
                for &g in &self.active.clone() {
                    self.fail(g, error_code::INJECTED);
                }
            }
            if faults.vanish_after.is_some_and(|n| barriers >= n) {
                self.vanish();
            }
        }
    }
}
