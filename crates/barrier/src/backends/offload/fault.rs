//! Faults of the device, seen from one rank: the watchdog's inspection of a group whose
//! release is late (a vanished device, an ERROR code, a device that stopped answering, a lost
//! arrival or release, each only once it persists across a scan), and what follows a fault:
//! every rank leaves the device at one agreed epoch for the flat barrier and then the software
//! algorithm (`degrade`, `flat`). The data plane that calls these is `module.rs`.

use std::sync::atomic::Ordering;
use std::time::Instant;

use barrier_hw::{global, status};

use crate::backend::Poll;

use super::groups::Step;
use super::module::{HwModule, Stage};

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
                crate::text::say(&msg);
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
                return Poll::wait_for(&self.arrivals[self.flat_next], epoch, last);
            }
            self.flat_next += 1;
        }
        Poll::Ready
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
                format!(
                    "the device completed epoch {epoch} in group {} but its release never reached this rank",
                    a.group
                )
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
