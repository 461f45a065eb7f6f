//! Arrival messages: what a slot holds, and taking a member's message (the engine thread's
//! scans and an inline device's trapped stores run the same code).

use std::sync::atomic::Ordering;

use barrier_hw::{error_code, expand_sequence};

use crate::config::{Claim, Taken};

use super::state::*;

impl Engine {
    /// Reads member `member`'s arrival slot in group `g`. The slot is read before the group's
    /// COMPLETED_EPOCH: a member writes its message for epoch e only after its release from
    /// e - 1, which the device writes after COMPLETED_EPOCH, so the expected epoch read here is
    /// never older than the message's.
    pub(crate) fn look_at_slot(&self, g: usize, member: usize) -> Slot {
        let m = self.map;
        let at = self.regs[g];
        let slot = self.dev.words(at.slot(member), 5);
        // A message is present once its header is non-zero (slots are zeroed on attach), and
        // complete when the arrival word agrees with the member/sequence word: the sender
        // writes the arrival word last, so a disagreement is a message still in flight (or a
        // taken one). A zero arrival word is legal (member 0 at a sequence that wrapped to 0).
        let value = slot[4].load(Ordering::Acquire);
        let header = slot[0].load(Ordering::Acquire);
        let ident = slot[1].load(Ordering::Acquire);
        if header == 0 || ident == TAKEN {
            return Slot::Nothing;
        }
        let (who, seq) = m.encoding.decode(value);
        if ident != (who as u64 | (seq as u64) << 32) {
            return Slot::Nothing;
        }
        // The member's release flag holds the last epoch the device released it from, so a
        // message for the epoch after it is for the expected epoch (an untaken message's epoch
        // is not complete, and the flag never passes COMPLETED_EPOCH): the flag's line is the
        // member's own, where COMPLETED_EPOCH's is written by whichever rank completes.
        // Anything else is judged against COMPLETED_EPOCH. The same checks follow either way.
        let next_after_flag = self
            .member_index(g, member)
            .and_then(|i| self.dev.flag(self.groups[g].release[i].flag).load().checked_add(1))
            .filter(|&next| expand_sequence(next, seq) == next);
        let expected = match next_after_flag {
            Some(next) => next,
            None => self.dev.word(at.completed_epoch).load(Ordering::Acquire) + 1,
        };
        let epoch = expand_sequence(expected, seq);
        if epoch < expected {
            return Slot::Nothing;
        }
        if who as usize != member
            || (header >> 32) as usize != g
            || header & 0xff != barrier_hw::MessageType::Arrive as u64
            || epoch > expected
        {
            return Slot::Bad;
        }
        Slot::Current { ident, epoch }
    }

    /// Member `member`'s index in group `g`'s member list (and release table).
    #[inline]
    pub(crate) fn member_index(&self, g: usize, member: usize) -> Option<usize> {
        self.groups[g].index.get(member).filter(|&&i| i != NOT_A_MEMBER).map(|&i| i as usize)
    }

    /// Whether group `g` is still the running group this engine knows (same owner, enabled,
    /// armed, READY, no ERROR): checked before a release, never on the way to it, so that the
    /// registers' lines stay shared while barriers run.
    pub(crate) fn still_running(&self, g: usize) -> bool {
        let group = &self.groups[g];
        let at = self.regs[g];
        group.enabled
            && self.dev.word(at.owner).load(Ordering::Acquire) == group.owner
            && served(
                self.dev.word(at.control).load(Ordering::Acquire),
                self.dev.word(at.status).load(Ordering::Acquire),
            )
    }

    /// Whether group `g`'s registers say it is served: enabled and armed, READY, no ERROR.
    pub(crate) fn serving(&self, g: usize) -> bool {
        let m = self.map;
        served(self.reg(g, &m.group.control), self.reg(g, &m.group.status))
    }

    /// Takes member `member`'s arrival in group `g` if its slot holds one for the epoch the
    /// group expects: marks the slot [`TAKEN`] (see [`Claim`]), sets the member's
    /// ARRIVED_MASK bit and, if that completes the epoch, releases the group. Shared by the
    /// engine thread's scans and an inline device's trapped stores, which run at the same
    /// time in different ranks: every step is one atomic operation on a register, and exactly
    /// one arrival completes each epoch.
    pub(crate) fn take_arrival(&mut self, g: usize, member: usize, claim: Claim) -> Taken {
        let m = self.map;
        let (ident, epoch) = match self.look_at_slot(g, member) {
            Slot::Nothing => return Taken::Nothing,
            Slot::Bad => {
                self.fail(g, error_code::BAD_MESSAGE);
                return Taken::Arrival;
            }
            Slot::Current { ident, epoch } => (ident, epoch),
        };
        let at = self.regs[g];
        let identity = self.dev.word(at.slot(member) + 8);
        match claim {
            Claim::Swap => {
                if identity.compare_exchange(ident, TAKEN, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                    return Taken::Nothing; // another pass took it first
                }
            }
            Claim::Own => identity.store(TAKEN, Ordering::Relaxed),
        }
        if !self.plain && self.chance(self.config.faults.drop_arrival) {
            // Lost on the wire: taken, never counted.
            tracing::debug!(device = m.kind, group = g, member, epoch, "fault: arrival dropped");
            return Taken::Arrival;
        }
        // The member's bit is clear (its message for this epoch was taken once, just now), so
        // adding the bit sets it: one locked add, where an OR that returns the old word is a
        // compare-and-swap loop whose first load fetches the line only shared (a second trip).
        let bit = 1u64 << (member % 64);
        let before = self.dev.word(at.arrived_mask + 8 * (member / 64) as u64).fetch_add(bit, Ordering::AcqRel);
        let group = &self.groups[g];
        let complete = match group.single_word {
            Some(w) => before | bit == group.mask[w],
            None => {
                let count = self.dev.word(at.arrival_count).fetch_add(1, Ordering::AcqRel) + 1;
                count == group.members.len() as u64
            }
        };
        if !complete {
            Taken::Arrival
        } else if self.still_running(g) {
            self.release(g, epoch);
            Taken::Completed
        } else {
            // Failed (ERROR) meanwhile: no release. The waiting drivers see ERROR and fall
            // back; a full mask that is never released is also what their watchdog reports.
            self.groups[g] = Group::default();
            Taken::Arrival
        }
    }
}
