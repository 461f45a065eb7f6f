//! Control-plane collectives over a communicator's region: barrier, allgather, agreement.
//!
//! These run while communicators are created, split and selected, never on the barrier fast
//! path. The control barrier is a central counter with its own epoch: arrival `k` of epoch `e`
//! increments `ctrl_count`; the rank whose increment makes it `n * e` raises `ctrl_release`
//! to `e`, and everyone else waits for that. The counter's read-modify-writes form one
//! release sequence, so the last arriver acquires every earlier arriver's writes and publishes
//! them with its release store.
//!
//! An allgather writes this rank's words into its own exchange line, passes a control barrier,
//! reads every line, and passes a second control barrier so that nobody overwrites a line
//! another rank has not read yet. The last word of each exchange line records the control
//! epoch the rank reached, so a control-plane timeout names the missing ranks too.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::error::Result;
use crate::region::{Region, EXCHANGE_WORDS};
use crate::wait::{WaitConfig, WaitPolicy};
use crate::watch::{Need, PeerWatch};

/// Collectives over one communicator region, for one rank.
#[derive(Debug)]
pub(crate) struct Ctrl<'a> {
    region: &'a Region,
    rank: usize,
    /// World rank of each member.
    members: &'a [usize],
    epoch: &'a Cell<u64>,
    wait: WaitConfig,
    stall: Option<Duration>,
    /// The collective call these exchanges serve (for errors and stall reports).
    call: &'static str,
}

impl<'a> Ctrl<'a> {
    pub fn new(
        region: &'a Region,
        rank: usize,
        members: &'a [usize],
        epoch: &'a Cell<u64>,
        timeout: Option<Duration>,
        stall: Option<Duration>,
    ) -> Self {
        // Always able to park: setup may wait for a slow rank for a long time.
        // Under MPI, set-up waits let MPI progress too (the segment's progress call).
        let progress = region.segment().progress();
        let wait = WaitConfig { policy: WaitPolicy::Park, spin: 256, yields: 8, timeout, progress };
        Ctrl { region, rank, members, epoch, wait, stall, call: "communicator creation" }
    }

    /// The same control plane, serving the collective call `call`.
    pub fn call(mut self, call: &'static str) -> Self {
        self.call = call;
        self
    }

    pub fn barrier(&self) -> Result<()> {
        let n = self.region.size() as u64;
        let e = self.epoch.get() + 1;
        self.epoch.set(e);
        self.region.ctrl_arrive(self.rank, e);
        let arrived = self.region.ctrl_count().fetch_add(1, Ordering::AcqRel) + 1;
        if arrived == n * e {
            self.region.ctrl_release().signal(e, true);
        }
        let watch = PeerWatch::new(self.region, self.members, self.rank, Need::Control(e, self.call), self.stall);
        self.wait.wait(self.region.ctrl_release(), e, &watch).map_err(|w| watch.error(w))
    }

    /// Every rank's `words` (at most `EXCHANGE_WORDS - 1`), indexed by rank.
    pub fn allgather(&self, words: &[u64]) -> Result<Vec<Vec<u64>>> {
        assert!(words.len() < EXCHANGE_WORDS, "allgather of {} words exceeds one exchange line", words.len());
        let mine = &self.region.exchange()[self.rank].0;
        for (slot, w) in mine.iter().zip(words) {
            slot.store(*w, Ordering::Relaxed);
        }
        self.barrier()?;
        let all = self
            .region
            .exchange()
            .iter()
            .map(|line| line.0[..words.len()].iter().map(|w| w.load(Ordering::Relaxed)).collect())
            .collect();
        self.barrier()?;
        Ok(all)
    }

    pub fn all_agree(&self, ok: bool) -> Result<bool> {
        Ok(self.allgather(&[ok as u64])?.iter().all(|w| w[0] == 1))
    }
}
