//! What a waiting rank watches besides its flag: why a wait can never complete, and when to
//! say that it is taking long.
//!
//! Every slow-path wait of a communicator (barrier or control plane) consults a [`PeerWatch`]
//! every few dozen yields and on every park slice (never while spinning). It ends the wait when:
//!
//! 1. **the job is aborted**: a rank died or failed, or the launcher is gone (the segment's
//!    abort word);
//! 2. **a member left without doing its part**: it dropped the communicator (recorded in the
//!    region's `departed` line: the last barrier it completed) before the barrier this rank
//!    waits in, or before the control epoch this rank waits for;
//! 3. **a member exited without leaving** (the launcher or thread mode marked it in the rank
//!    table, but it never dropped the communicator: `std::process::exit`, a leaked handle):
//!    at once in the control plane if it never reached the control epoch; in a barrier after
//!    [`EXIT_GRACE`], because whether it completed that barrier is not recorded (a rank that
//!    did complete it cannot hold anyone up for that long).
//!
//! And it reports a **stall** once per wait: after `BARRIER_STALL_REPORT` (default 30 s) it
//! prints the ranks not yet arrived, in world ranks, and keeps waiting.
//!
//! The common case costs two loads (the region's departure count and the job's exit count).

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::region::Region;
use crate::shm::Segment;
use crate::wait::{WaitError, Watch};

/// How long a wait goes on after a member exited without leaving the communicator, or left it
/// after one of its own calls failed.
pub(crate) const EXIT_GRACE: Duration = Duration::from_secs(1);

/// What the waiting rank needs from its peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// Every member's arrival at barrier `e`.
    Barrier(u64),
    /// Every member's arrival at control epoch `c` (split, dup, shared_window, creation).
    Control(u64),
}

impl Need {
    /// The call this wait is part of, in words.
    pub fn describe(self) -> String {
        match self {
            Need::Barrier(e) => format!("barrier {e}"),
            Need::Control(_) => "a collective call (split, dup, shared_window or communicator creation)".into(),
        }
    }

    fn epoch(self) -> u64 {
        match self {
            Need::Barrier(e) => e,
            Need::Control(_) => 0,
        }
    }
}

/// One wait's watch over the members of one communicator.
#[derive(Debug)]
pub(crate) struct PeerWatch<'a> {
    pub region: &'a Region,
    /// World rank of each member.
    pub members: &'a [usize],
    /// The waiting rank, in the communicator.
    pub rank: usize,
    pub need: Need,
    /// Report a stall after this long (None: never).
    pub stall: Option<Duration>,
    /// When this wait first saw a member that left after a failure or exited without leaving.
    exit_seen: Cell<Option<Instant>>,
    /// The first check (the wait's slow path began): hardware waits come back every recheck
    /// slice, so the waited time the wait layer passes restarts; this does not.
    first_check: Cell<Option<Instant>>,
    reported: Cell<bool>,
}

/// The instant in `cell`, set to now on first use.
fn since(cell: &Cell<Option<Instant>>) -> Instant {
    *cell.get().get_or_insert_with(|| {
        let now = Instant::now();
        cell.set(Some(now));
        now
    })
}

impl<'a> PeerWatch<'a> {
    pub fn new(region: &'a Region, members: &'a [usize], rank: usize, need: Need, stall: Option<Duration>) -> Self {
        PeerWatch {
            region,
            members,
            rank,
            need,
            stall,
            exit_seen: Cell::new(None),
            first_check: Cell::new(None),
            reported: Cell::new(false),
        }
    }

    fn seg(&self) -> &Segment {
        self.region.segment()
    }

    /// Whether member `r` has reached what this wait needs, as far as shared memory records.
    fn reached(&self, r: usize) -> bool {
        match self.need {
            Need::Barrier(e) => self.region.arrivals()[r].load() >= e,
            Need::Control(c) => self.region.ctrl_reached(r) >= c,
        }
    }

    /// A member that left (or exited) before doing its part of this wait.
    ///
    /// A member that left cleanly is named at once. One that left after its own call failed
    /// (a consequence, usually of the same cause this rank is about to see, such as a shared
    /// timeout) and one that exited without leaving (whether it did its part is not recorded)
    /// are named only if this wait is still stuck [`EXIT_GRACE`] after they were first seen.
    fn hopeless_member(&self) -> Option<usize> {
        // Causes first: a member that exited without leaving is more likely the cause than one
        // that left after its own call failed.
        let (mut exited, mut after_failure) = (None, None);
        if self.region.departures() > 0 {
            for r in 0..self.members.len() {
                let Some((completed, failed)) = self.region.departed(r) else { continue };
                let gone_early = match self.need {
                    Need::Barrier(e) => completed < e,
                    Need::Control(c) => self.region.ctrl_reached(r) < c,
                };
                if gone_early && !failed {
                    return Some(r);
                }
                if gone_early {
                    after_failure.get_or_insert(r);
                }
            }
        }
        if self.seg().exit_count() > 0 {
            for (r, &world) in self.members.iter().enumerate() {
                if r == self.rank || self.region.departed(r).is_some() || self.seg().exited(world).is_none() {
                    continue;
                }
                match self.need {
                    Need::Control(_) if !self.reached(r) => return Some(r),
                    Need::Control(_) => {}
                    Need::Barrier(_) => {
                        exited.get_or_insert(r);
                    }
                }
            }
        }
        match exited.or(after_failure) {
            Some(r) if since(&self.exit_seen).elapsed() >= EXIT_GRACE => Some(r),
            _ => None,
        }
    }

    /// Members (communicator ranks) that have not reached what this wait needs.
    pub fn missing(&self) -> Vec<usize> {
        (0..self.members.len()).filter(|&r| !self.reached(r)).collect()
    }

    fn report_stall(&self, waited: Duration) {
        let missing = self.missing();
        let world: Vec<usize> = missing.iter().map(|&r| self.members[r]).collect();
        let what = self.need.describe();
        let msg = format!(
            "barrier: world rank {} (rank {} of a communicator of {} ranks) has waited {:.1?} in {what}; \
             not arrived yet: world ranks {world:?} (communicator ranks {missing:?}); still waiting \
             (this report: BARRIER_STALL_REPORT; to give up instead, set BARRIER_TIMEOUT)",
            self.members[self.rank],
            self.rank,
            self.members.len(),
            waited,
        );
        tracing::warn!(target: "barrier", "{msg}");
        crate::sys::say(&msg);
    }
}

impl Watch for PeerWatch<'_> {
    fn check(&self, _waited: Duration) -> Result<(), WaitError> {
        self.seg().abort_state()?;
        if let Some(r) = self.hopeless_member() {
            return Err(WaitError::PeerLeft(r));
        }
        if let Some(limit) = self.stall {
            let waited = since(&self.first_check).elapsed();
            if waited >= limit && !self.reported.replace(true) {
                self.report_stall(waited);
            }
        }
        Ok(())
    }
}

impl PeerWatch<'_> {
    /// The error a rank returns when this wait ended with `w`.
    pub fn error(&self, w: WaitError) -> Error {
        match w {
            WaitError::Aborted(r) => Error::Aborted { failed_rank: r },
            WaitError::JobGone => Error::JobGone,
            WaitError::Recheck => Error::Broken("a wait asked for a recheck without an interval".into()),
            WaitError::PeerLeft(r) => {
                let how = match (self.region.departed(r), self.seg().exited(self.members[r])) {
                    (Some((completed, false)), _) => {
                        format!("left the communicator (dropped it) after barrier {completed}")
                    }
                    (Some((completed, true)), _) => {
                        format!("left the communicator after barrier {completed}, when one of its own calls failed")
                    }
                    (None, Some(how)) => format!("{how} without leaving the communicator"),
                    (None, None) => "left the communicator".into(),
                };
                Error::RankLeft { rank: r, world_rank: self.members[r], during: self.need.describe(), how }
            }
            WaitError::Timeout(waited) => {
                let missing = self.missing();
                Error::Timeout {
                    rank: self.rank,
                    world_rank: self.members[self.rank],
                    size: self.members.len(),
                    epoch: self.need.epoch(),
                    during: self.need.describe(),
                    waited,
                    missing_world: missing.iter().map(|&r| self.members[r]).collect(),
                    missing,
                }
            }
        }
    }
}
