//! The data plane: arrivals, release waits, the watchdog, and the fall back to software.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier_hw::{
    global, status, MessageType,
};

use crate::backend::{Module, Poll};
use crate::algo::tail::TailSpin;
use crate::algo::flag::SoftwareModule;
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
    /// Leaves the hardware for good; `raise` tells every other rank to do the same.
    ///
    /// The communicator's fault flag holds the epoch of the first rank that raised it (first
    /// writer wins, so every rank reads the same value F). No rank completes epoch F + 1 on the
    /// device (the raiser never sends that arrival), so every rank arrives at F + 2 already
    /// degraded: from there all of them run the software algorithm, and until then the flat
    /// barrier, which tolerates ranks switching one epoch apart.
    pub(super) fn degrade(&mut self, epoch: u64, reason: String, raise: bool) {
        let fault_epoch = if raise { self.fault.set_once(epoch, true) } else { self.fault.load() };
        self.resume_at = fault_epoch.max(1) + 2;
        if raise && fault_epoch == epoch {
            // The rank whose report set the fault epoch speaks for the communicator: once.
            let msg = format!(
                "barrier: the {} barrier of a communicator of {} ranks failed at barrier {epoch} ({reason}); \
                 its ranks complete barriers in software from now on",
                self.dev.map.kind, self.n
            );
            tracing::warn!(target: "barrier", "{msg}");
            if self.verbose {
                crate::sys::say(&msg);
            }
        } else {
            tracing::debug!(device = self.dev.map.kind, rank = self.rank, epoch, %reason, "leaving the hardware barrier");
        }
        self.algorithm = format!("fallback: flat ({reason})");
        self.degraded = Some(reason);
    }

    pub(super) fn flat(&mut self, epoch: u64) -> Poll<'_> {
        while self.flat_next < self.n {
            if !self.arrivals[self.flat_next].reached(epoch) {
                let last = self.flat_next + 1 == self.n;
                return Poll::Pending { flag: &self.arrivals[self.flat_next], target: epoch, recheck: None, last, spin: None };
            }
            self.flat_next += 1;
        }
        Poll::Ready
    }

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

    /// Whether member `member` of the shape's group `k` has sent its arrival for `epoch`: its
    /// rank records, after each send, how many of its arrivals (in plan order) it has sent.
    pub(super) fn member_sent(&self, k: usize, member: usize, epoch: u64) -> bool {
        let rank = self.shape.rank_of(k, member);
        let stage = self.shape.roles(rank).iter().position(|&(g, _)| g == k).expect("a member of its group");
        let arrivals = self.shape.plan(rank).into_iter().filter(|s| matches!(s, Step::Arrive(_)));
        let nth = arrivals.into_iter().position(|s| s == Step::Arrive(stage)).expect("every stage has an arrival");
        self.sent[rank].load() >= (epoch << 2 | (nth as u64 + 1))
    }

    /// Looks at stage `s`'s group while waiting; returns why the hardware cannot finish.
    pub(super) fn inspect(&mut self, s: usize, epoch: u64) -> Option<String> {
        let map = self.dev.map;
        let Stage { a, base, group_index } = self.stages[s];
        let st = self.dev.reg(a.group, &map.group.status);
        if st == status::GONE
            || self.dev.mmio.word(global::DEVICE_STATUS.offset).load(Ordering::Acquire) == status::GONE
        {
            return Some("the device vanished (registers read all ones)".into());
        }
        if st & status::ERROR != 0 {
            return Some(format!(
                "the device reported ERROR code {} in group {}",
                self.dev.reg(a.group, &map.group.error_code),
                a.group
            ));
        }
        let heartbeat = self.dev.mmio.word(global::HEARTBEAT.offset).load(Ordering::Acquire);
        if heartbeat != self.heartbeat.0 {
            self.heartbeat = (heartbeat, Instant::now());
        }
        let since = *self.pending_since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.watchdog {
            return None;
        }
        self.pending_since = Some(Instant::now());
        if self.dev.served() == Some(false) {
            return Some(format!(
                "the device stopped answering: nothing serves {} any more (its `barrier emu` daemon died?)",
                self.dev.path.display()
            ));
        }
        let silent = self.heartbeat.1.elapsed();
        if silent >= self.silence {
            return Some(format!("the device stopped answering (no heartbeat for {silent:.1?} although rung)"));
        }
        // Ring, so that a live device scans again before the next check.
        self.dev.ring();
        let target = base + epoch;
        let completed = self.dev.reg(a.group, &map.group.completed_epoch);
        let finding = if completed >= target {
            // The device stores COMPLETED_EPOCH before it writes the release flags: look again.
            (!self.dev.mmio.flag(a.flag_off).reached(target)).then(|| {
                format!("the device completed epoch {epoch} in group {} but its release never reached this rank", a.group)
            })
        } else if completed + 1 == target {
            let members = self.shape.members_of(group_index);
            let counted = |m: usize| {
                self.dev.group_word(a.group, &map.group.arrived_mask, m / 64).load(Ordering::Acquire) >> (m % 64) & 1
                    == 1
            };
            let lost: Vec<usize> =
                (0..members).filter(|&m| !counted(m) && self.member_sent(group_index, m, epoch)).collect();
            if !lost.is_empty() {
                Some(format!(
                    "the device never counted the arrival of member(s) {lost:?} at epoch {epoch} in group {}",
                    a.group
                ))
            } else if (0..members).all(counted) {
                Some(format!(
                    "the device counted every member's arrival at epoch {epoch} in group {} but never released it",
                    a.group
                ))
            } else {
                None
            }
        } else {
            None
        };
        // Only a finding that persists across a scan of the device counts: a device that had no
        // chance to look (an emulator starved of CPU), or a release still being written, is not
        // a fault.
        // (Two heartbeats: the pass under way at the first finding may have scanned this group
        // already; the next one started after it, so it has scanned since.)
        match (finding, self.suspect.take()) {
            (Some(f), Some((prev, seen))) if f == prev && heartbeat >= seen + 2 => Some(f),
            (Some(f), Some((prev, seen))) if f == prev => {
                self.suspect = Some((prev, seen));
                None
            }
            (Some(f), _) => {
                self.suspect = Some((f, heartbeat));
                None
            }
            (None, _) => None,
        }
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
                        return Ok(Poll::Pending { flag, target: base + epoch, recheck: Some(RECHECK), last, spin });
                    } else if let Some(reason) = self.inspect(s, epoch) {
                        self.degrade(epoch, reason, true);
                    } else {
                        let flag = self.dev.mmio.flag(a.flag_off);
                        return Ok(Poll::Pending { flag, target: base + epoch, recheck: Some(RECHECK), last: false, spin: None });
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
