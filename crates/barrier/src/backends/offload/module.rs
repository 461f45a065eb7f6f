//! The data plane: arrivals and release waits (the tail spin among them). What happens when the
//! device does not release (the watchdog, degrading, the flat fallback) is in `fault.rs`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier_hw::{global, status, MessageType};

use crate::algo::flag::SoftwareModule;
use crate::algo::tail::TailSpin;
use crate::backend::{Module, Poll};
use crate::error::Error;
use crate::shm::Shared;
use crate::wait::Flag;

use super::device::{Attachment, Device};
use super::groups::{Step, TreeShape};

/// How often a waiting rank looks at the device and the fault flag.
pub(super) const RECHECK: Duration = Duration::from_millis(5);

/// One group this rank belongs to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stage {
    pub(super) group_index: usize,
    pub(super) a: Attachment,
    /// Device epoch = base + communicator epoch.
    pub(super) base: u64,
}

/// One rank's hardware barrier on one communicator.
#[derive(Debug)]
pub struct HwModule {
    pub(super) dev: Arc<Device>,
    pub(super) stages: Vec<Stage>,
    pub(super) plan: Vec<Step>,
    /// For each step of the plan, how many arrivals the plan sends up to and including it.
    pub(super) sends_through: Vec<u64>,
    pub(super) shape: TreeShape,
    /// The epoch base of every group of the shape.
    pub(super) bases: Vec<u64>,
    /// Next step of the plan for the current epoch.
    pub(super) step: usize,
    pub(super) n: usize,
    pub(super) rank: usize,
    pub(super) wake: bool,
    pub(super) watchdog: Duration,
    /// A device whose HEARTBEAT has not moved for this long, although it was rung, has
    /// stopped answering.
    pub(super) silence: Duration,
    pub(super) pending_since: Option<Instant>,
    /// Calls that found the current wait pending. The first two hand the wait to the
    /// communicator (its inline checks, then its wait); the device is inspected from the third
    /// on, a recheck slice later, not on the fast path, where reading the clock would be a good
    /// part of the barrier.
    pub(super) polls: u8,
    /// What the previous watchdog check found wrong (and the heartbeat then): the same finding
    /// twice in a row, with the device having scanned in between, is a fault.
    pub(super) suspect: Option<(String, u64)>,
    /// The device's HEARTBEAT, and when it last changed.
    pub(super) heartbeat: (u64, Instant),
    pub(super) fault: Shared<Flag>,
    pub(super) arrivals: Vec<Shared<Flag>>,
    /// Every rank's record of the arrivals it has sent: `(epoch << 2) | sends so far`.
    pub(super) sent: Vec<Shared<Flag>>,
    pub(super) degraded: Option<String>,
    /// After a fault: the epoch from which the software algorithm runs (fault epoch + 2).
    pub(super) resume_at: u64,
    pub(super) software: SoftwareModule,
    pub(super) on_software: bool,
    /// BARRIER_VERBOSE: say on stderr, too, when the hardware fails.
    pub(super) verbose: bool,
    pub(super) flat_next: usize,
    pub(super) algorithm: String,
    /// Arrival messages sent to the device (each one crosses the network to it).
    pub(super) messages: std::cell::Cell<u64>,
    /// One group, ranks that park: when to spin for the release instead of yielding.
    pub(super) tail: Option<Box<TailSpin>>,
}

impl HwModule {
    /// This rank's arrival record (the communicator's arrival flag, which the flat fallback
    /// waits on) at `epoch`. The communicator stores it when it hands the barrier to this module
    /// (`Communicator::barrier` without waking anyone, its `drive` and `ibarrier` waking): the
    /// ranks of a flat fallback that parked on it are woken here. A locked add only if the record is behind (a module driven
    /// without a communicator): the flag is this rank's alone, and with spinning ranks (no
    /// wake, whose fence drains the store buffer anyway) a locked instruction would wait for
    /// this rank's release stores to other ranks' flags to drain.
    #[inline]
    pub(super) fn record_arrival(&self, epoch: u64) {
        let own = &self.arrivals[self.rank];
        if own.load() < epoch {
            own.raise(epoch, self.wake);
        } else if self.wake {
            own.wake();
        }
    }

    /// Sends this rank's arrival at `epoch` to stage `s`.
    pub(super) fn send(&self, s: usize, epoch: u64) {
        let Stage { a, base, .. } = &self.stages[s];
        let map = self.dev.map;
        let target = base + epoch;
        let msg = barrier_hw::Message {
            msg_type: MessageType::Arrive,
            group_id: a.group as u32,
            member_id: a.member as u32,
            sequence: target as u32,
            timestamp: crate::sys::coarse_wall_clock_ns(),
            target_addr: a.arrival_addr,
            store_value: map.encoding.encode(a.member as u32, target as u32),
        };
        let words = msg.to_words();
        let slot = self.dev.mmio.words(a.slot, words.len());
        for (reg, w) in slot.iter().zip(words).take(4) {
            reg.store(w, Ordering::Release);
        }
        // The arrival word last: the device takes the message as complete only when it agrees
        // with the member/sequence word written above.
        slot[4].store(words[4], Ordering::Release);
        self.dev.arrived(a.group, a.member);
        self.messages.set(self.messages.get() + 1);
        // For the lost-arrival check of whoever waits on this group: how many of this rank's
        // arrivals (in plan order) it has sent for this epoch.
        self.sent[self.rank].signal(epoch << 2 | self.sends_through[self.step], false);
    }
}

impl Module for HwModule {
    fn algorithm(&self) -> &str {
        &self.algorithm
    }

    fn network_ops(&self) -> u64 {
        self.messages.get() + self.software.network_ops()
    }

    fn arrive(&mut self, epoch: u64) -> Result<(), Error> {
        self.pending_since = None;
        self.polls = 0;
        self.suspect = None;
        self.flat_next = 0;
        self.step = 0;
        if self.degraded.is_none() && self.fault.load() != 0 {
            self.degrade(epoch, "another rank's hardware barrier failed".into(), false);
        }
        if self.degraded.is_some() && epoch >= self.resume_at {
            if !self.on_software {
                self.on_software = true;
                let reason = self.degraded.as_deref().unwrap_or_default();
                self.algorithm = format!("fallback: {} ({reason})", self.software.algorithm());
            }
            self.record_arrival(epoch);
            return self.software.arrive(epoch);
        }
        // Send every arrival that does not wait for a release first, then make sure the arrival
        // is recorded (the flat fallback waits on it).
        if self.degraded.is_none() {
            while let Some(&Step::Arrive(s)) = self.plan.get(self.step) {
                self.send(s, epoch);
                self.step += 1;
            }
            if let Some(tail) = self.tail.as_deref_mut() {
                // Whether this arrival completed the group is the device's to know; the last
                // arriver finds no one missing and does not spin. (The arrival record below is
                // read only by flat fallbacks, which do not mind the few nanoseconds.)
                tail.arrived(epoch, false);
            }
        }
        self.record_arrival(epoch);
        Ok(())
    }

    fn progress(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        if self.on_software {
            return self.software.progress(epoch);
        }
        while self.degraded.is_none() {
            match self.plan.get(self.step).copied() {
                None => return Ok(Poll::Ready),
                Some(Step::Arrive(s)) => {
                    self.send(s, epoch);
                    self.step += 1;
                }
                Some(Step::Wait(s)) => {
                    let Stage { a, base, .. } = self.stages[s];
                    if self.dev.mmio.flag(a.flag_off).reached(base + epoch) {
                        self.step += 1;
                        self.pending_since = None;
                        self.polls = 0;
                        self.suspect = None;
                        continue;
                    }
                    if self.fault.load() != 0 {
                        self.degrade(epoch, "another rank's hardware barrier failed".into(), false);
                    } else if self.polls < 2 {
                        self.polls += 1;
                        let flag = self.dev.mmio.flag(a.flag_off);
                        let spin = self.tail.as_deref().and_then(|t| t.spin());
                        // The plan's last wait: its flag reaching the target completes the
                        // barrier (the next arrive resets the wait's bookkeeping).
                        let last = self.step + 1 == self.plan.len();
                        return Ok(Poll::Pending {
                            flag,
                            target: base + epoch,
                            recheck: Some(RECHECK),
                            last,
                            spin,
                            park: false,
                        });
                    } else if let Some(reason) = self.inspect(s, epoch) {
                        self.degrade(epoch, reason, true);
                    } else {
                        let flag = self.dev.mmio.flag(a.flag_off);
                        return Ok(Poll::pending(flag, base + epoch).recheck(RECHECK));
                    }
                }
            }
        }
        Ok(self.flat(epoch))
    }
}

impl Drop for HwModule {
    fn drop(&mut self) {
        if self.dev.mmio.word(global::DEVICE_STATUS.offset).load(Ordering::Acquire) != status::GONE {
            for st in self.stages.drain(..) {
                self.dev.detach(&st.a);
            }
        }
    }
}
