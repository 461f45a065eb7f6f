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
//!    table, but it never dropped the communicator: `std::process::exit`; in thread mode only a
//!    rank with no communicator left alive in the process is marked, so a leaked handle is not)
//!    before it arrived where this rank waits (every rank records each arrival when its module
//!    gets the barrier).
//!
//! And it reports a **stall** once per wait: after `BARRIER_STALL_REPORT` (default 30 s) it
//! prints the ranks not yet arrived, in world ranks, and keeps waiting.
//!
//! The common case costs two loads (the region's departure count and the job's exit count).

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::region::Region;
use crate::shm::{RankNames, Segment};
use crate::wait::{WaitError, Watch};

/// How long a wait goes on, once every live member has arrived, after a member left the
/// communicator because one of its own calls failed (it may still have had a part to play).
pub(crate) const EXIT_GRACE: Duration = Duration::from_secs(1);

/// What the waiting rank needs from its peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// Every member's arrival at barrier `e`.
    Barrier(u64),
    /// Every member's arrival at control epoch `c`, in the collective call named (split, dup,
    /// shared_window, communicator creation).
    Control(u64, &'static str),
}

impl Need {
    /// The call this wait is part of, in words.
    pub fn describe(self) -> String {
        match self {
            Need::Barrier(e) => format!("barrier {e}"),
            Need::Control(_, call) => format!("the collective call {call}"),
        }
    }

    fn epoch(self) -> u64 {
        match self {
            Need::Barrier(e) => e,
            Need::Control(..) => 0,
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
    /// The names of the communicator's ranks as the user knows them, where they are not the
    /// segment's own ([`PeerWatch::named`]).
    names: Option<&'a RankNames>,
    /// When this wait first found only a member that left after a failure to blame.
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
            names: None,
            exit_seen: Cell::new(None),
            first_check: Cell::new(None),
            reported: Cell::new(false),
        }
    }

    /// Names the ranks with `names` (a communicator that is one node of a hierarchical barrier
    /// in the job's segment: the core's simulated nodes) instead of the segment's
    /// ([`Segment::rank_names`], a node segment of barrier-mpi or barrier-shmem).
    pub fn named(mut self, names: Option<&'a RankNames>) -> Self {
        self.names = names;
        self
    }

    /// Carries on a wait that earlier watches of the same need looked at: when the first of
    /// them found only a member that left after a failure to blame (see
    /// [`PeerWatch::exit_seen`]), so that its grace runs out across them.
    pub fn seen_since(self, exit_seen: Option<Instant>) -> Self {
        self.exit_seen.set(exit_seen);
        self
    }

    /// When this watch (or one before it, [`PeerWatch::seen_since`]) first found only a member
    /// that left after a failure to blame.
    pub fn exit_seen(&self) -> Option<Instant> {
        self.exit_seen.get()
    }

    /// Whether every member is on one node (a node's segment of barrier-mpi or barrier-shmem;
    /// not a communicator of node roots).
    fn on_one_node(&self) -> bool {
        let s = self.seg().shape();
        let node = |&w: &usize| crate::shm::node_of(w, s.world_size, s.nodes);
        self.members.iter().map(node).min() == self.members.iter().map(node).max()
    }

    /// The names of the ranks as the user knows them, if they differ from the segment's.
    fn rank_names(&self) -> Option<&RankNames> {
        self.names.or_else(|| self.seg().rank_names())
    }

    fn seg(&self) -> &Segment {
        self.region.segment()
    }

    /// Whether member `r` has reached what this wait needs, as far as shared memory records.
    fn reached(&self, r: usize) -> bool {
        match self.need {
            Need::Barrier(e) => self.region.arrivals()[r].load() >= e,
            Need::Control(c, _) => self.region.ctrl_reached(r) >= c,
        }
    }

    /// A member that left (or exited) before doing its part of this wait.
    ///
    /// Every rank records its arrival at each barrier (and each control epoch) before anything
    /// else, so whether a member that is gone had arrived is known exactly:
    ///
    /// * one that left cleanly (dropped the communicator) before completing what is needed
    ///   never arrived: named at once;
    /// * one that exited without leaving and had not arrived: named at once; one that had
    ///   arrived exited after completing the barrier (a rank cannot exit from inside a blocking
    ///   one), so it holds nobody up. The exception is a barrier handed to the module by an
    ///   `ibarrier` that the rank never completed: it is not named (it cannot be told from a
    ///   rank that completed and exited while a slow peer still finishes), and the stall report
    ///   lists it as exited when nobody is missing;
    /// * one that left after its own call failed had perhaps arrived but not finished its part
    ///   (a dissemination round): named only once every live member has arrived and the wait
    ///   is still stuck [`EXIT_GRACE`] later. Until then the live members that have not
    ///   arrived are the better answer (the waiter's own timeout names them).
    fn hopeless_member(&self) -> Option<usize> {
        let mut after_failure = None;
        if self.region.departures() > 0 {
            for r in 0..self.members.len() {
                let Some((completed, failed)) = self.region.departed(r) else { continue };
                let gone_early = match self.need {
                    Need::Barrier(e) => completed < e,
                    Need::Control(c, _) => self.region.ctrl_reached(r) < c,
                };
                if !gone_early {
                    continue;
                }
                if !failed || !self.reached(r) {
                    return Some(r);
                }
                after_failure.get_or_insert(r);
            }
        }
        if self.seg().exit_count() > 0 {
            for (r, &world) in self.members.iter().enumerate() {
                if r != self.rank
                    && self.region.departed(r).is_none()
                    && self.seg().exited(world).is_some()
                    && !self.reached(r)
                {
                    return Some(r);
                }
            }
        }
        let everyone_alive_arrived =
            || (0..self.members.len()).all(|r| self.reached(r) || self.region.departed(r).is_some());
        match after_failure {
            Some(r) if everyone_alive_arrived() && since(&self.exit_seen).elapsed() >= EXIT_GRACE => Some(r),
            _ => None,
        }
    }

    /// Members (communicator ranks) that have not reached what this wait needs.
    pub fn missing(&self) -> Vec<usize> {
        (0..self.members.len()).filter(|&r| !self.reached(r)).collect()
    }

    /// Members that exited (without leaving) after arriving: with nobody missing, the likely
    /// culprits of a stuck wait (an `ibarrier` handed to the module and never completed).
    fn exited_after_arriving(&self) -> Vec<usize> {
        if self.seg().exit_count() == 0 {
            return Vec::new();
        }
        (0..self.members.len())
            .filter(|&r| r != self.rank && self.region.departed(r).is_none())
            .filter(|&r| self.seg().exited(self.members[r]).is_some())
            .collect()
    }

    fn report_stall(&self, waited: Duration) {
        let missing = self.missing();
        let msg = match self.rank_names() {
            None => {
                let world: Vec<usize> = missing.iter().map(|&r| self.members[r]).collect();
                format!(
                    "barrier: world rank {} (rank {} of a communicator of {} ranks) has waited {:.1?} in {}; not \
                     arrived yet: world ranks {world:?} (communicator ranks {missing:?}); still waiting",
                    self.members[self.rank],
                    self.rank,
                    self.members.len(),
                    waited,
                    self.need.describe(),
                )
            }
            Some(names) => self.named_stall(names, &missing, waited),
        };
        let exited = if missing.is_empty() { self.exited_after_arriving() } else { Vec::new() };
        let msg = if exited.is_empty() {
            msg
        } else {
            let world: Vec<usize> = exited.iter().map(|&r| self.members[r]).collect();
            format!(
                "{msg}; every rank has arrived, but world ranks {world:?} exited since: one may have left an \
                 ibarrier unfinished"
            )
        };
        let msg = format!("{msg} (this report: BARRIER_STALL_REPORT; to give up instead, set BARRIER_TIMEOUT)");
        tracing::warn!(target: "barrier", "{msg}");
        crate::text::say(&msg);
    }

    /// A stall report in the ranks the user knows (see [`crate::shm::RankNames`]).
    fn named_stall(&self, names: &crate::shm::RankNames, missing: &[usize], waited: Duration) -> String {
        let name = |table: &[usize], r: usize| table.get(self.members[r]).copied().unwrap_or(self.members[r]);
        let world: Vec<usize> = missing.iter().map(|&r| name(&names.world, r)).collect();
        let comm: Vec<usize> = missing.iter().map(|&r| name(&names.comm, r)).collect();
        let me = format!(
            "barrier: world rank {} (rank {} of a communicator of {} ranks)",
            name(&names.world, self.rank),
            name(&names.comm, self.rank),
            names.comm_size
        );
        match self.need {
            Need::Barrier(e) if names.hierarchical => {
                let (call, phase) = (e.div_ceil(2), if e % 2 == 1 { "gather" } else { "release" });
                // In the release phase only the node's first rank (the node communicator's rank
                // 0) can be missing, and it is there only after the internode phase: that is what
                // it waits for, and its own report names the node root it waits for in turn.
                let root_in_internode = e % 2 == 0 && !missing.is_empty() && missing.iter().all(|&r| r == 0);
                let who = if root_in_internode {
                    format!(
                        "this node's root (world rank {}) has not released the node: it waits in the internode \
                         phase for another node, whose root's report names it",
                        name(&names.world, 0)
                    )
                } else {
                    format!("not arrived yet: world ranks {world:?} (communicator ranks {comm:?})")
                };
                format!(
                    "{me} has waited {waited:.1?} in barrier {call}, within this node ({phase} phase); {who}; still \
                     waiting"
                )
            }
            need => format!(
                "{me} has waited {waited:.1?} in {}{}; not arrived yet: world ranks {world:?} (communicator ranks \
                 {comm:?}); still waiting",
                need.describe(),
                if self.on_one_node() { ", within this node" } else { "" }
            ),
        }
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

/// A [`PeerWatch`] built only when a wait first reaches its slow path: a barrier that
/// completes within the inline spins (the common case at two spinning ranks) never builds one.
pub(crate) struct LazyWatch<'a, F: Fn() -> PeerWatch<'a>> {
    make: F,
    watch: std::cell::OnceCell<PeerWatch<'a>>,
}

impl<'a, F: Fn() -> PeerWatch<'a>> LazyWatch<'a, F> {
    #[inline(always)]
    pub fn new(make: F) -> Self {
        LazyWatch { make, watch: std::cell::OnceCell::new() }
    }

    /// The watch, built now if it was not yet.
    pub fn get(&self) -> &PeerWatch<'a> {
        self.watch.get_or_init(&self.make)
    }
}

impl<'a, F: Fn() -> PeerWatch<'a>> Watch for LazyWatch<'a, F> {
    fn check(&self, waited: Duration) -> Result<(), WaitError> {
        self.get().check(waited)
    }
}

impl PeerWatch<'_> {
    /// Member `r` as the user knows it: its world rank (`world`) or its rank in the user's
    /// communicator, through the segment's [`crate::shm::RankNames`] where it has them.
    fn user_rank(&self, r: usize, world: bool) -> usize {
        let seg_rank = self.members[r];
        match self.rank_names() {
            Some(names) => {
                let table = if world { &names.world } else { &names.comm };
                table.get(seg_rank).copied().unwrap_or(seg_rank)
            }
            None if world => seg_rank,
            None => r,
        }
    }

    /// The call this wait is part of, in the user's count: across nodes a node's barrier `e` is
    /// the user's barrier ⌈e/2⌉ (its gather or its release).
    fn user_describe(&self) -> String {
        match (self.need, self.rank_names()) {
            (Need::Barrier(e), Some(names)) if names.hierarchical => {
                let phase = if e % 2 == 1 { "gather" } else { "release" };
                format!("barrier {} (within this node, its {phase} phase)", e.div_ceil(2))
            }
            (need, _) => need.describe(),
        }
    }

    /// The error a rank returns when this wait ended with `w`.
    pub fn error(&self, w: WaitError) -> Error {
        match w {
            WaitError::Aborted(r) => {
                Error::Aborted { failed_rank: self.rank_names().and_then(|n| n.world.get(r).copied()).unwrap_or(r) }
            }
            WaitError::JobGone => Error::JobGone,
            WaitError::Recheck => Error::Broken("a wait asked for a recheck without an interval".into()),
            WaitError::PeerLeft(r) => {
                // Across nodes a node counts two barriers per user barrier (gather, release).
                let halves = self.rank_names().is_some_and(|n| n.hierarchical);
                let user = |completed: u64| if halves { completed / 2 } else { completed };
                let departed = self.region.departed(r).map(|(completed, failed)| (user(completed), failed));
                let how = match (departed, self.seg().exited(self.members[r])) {
                    (Some((completed, false)), _) => {
                        format!("left the communicator (dropped it) after barrier {completed}")
                    }
                    (Some((completed, true)), _) if self.region.departed_panicking(r) => format!(
                        "panicked and left the communicator after barrier {completed} (the panic's message is in \
                         that rank's output)"
                    ),
                    (Some((completed, true)), _) => {
                        format!("left the communicator after barrier {completed}, when one of its own calls failed")
                    }
                    (None, Some(how)) => format!("{how} without leaving the communicator"),
                    (None, None) => "left the communicator".into(),
                };
                // In the ranks the user knows (a node's segment of barrier-mpi or barrier-shmem
                // numbers its ranks from 0).
                Error::RankLeft {
                    rank: self.user_rank(r, false),
                    world_rank: self.user_rank(r, true),
                    during: self.user_describe(),
                    how,
                }
            }
            WaitError::Timeout(waited) => {
                let missing = self.missing();
                let names = self.rank_names();
                let halves = names.is_some_and(|n| n.hierarchical);
                let mut during = self.user_describe();
                // A node's release waits for its root, which waits in the internode phase: the
                // root is not the straggler (as the stall report says).
                if halves
                    && matches!(self.need, Need::Barrier(e) if e % 2 == 0)
                    && !missing.is_empty()
                    && missing.iter().all(|&r| r == 0)
                {
                    during.push_str(&format!(
                        ", waiting for this node's root (world rank {}), which waits in the internode phase for \
                         another node, whose root's error names it",
                        self.user_rank(missing[0], true)
                    ));
                }
                Error::Timeout {
                    rank: self.user_rank(self.rank, false),
                    world_rank: self.user_rank(self.rank, true),
                    size: names.map_or(self.members.len(), |n| n.comm_size),
                    epoch: if halves { self.need.epoch().div_ceil(2) } else { self.need.epoch() },
                    during,
                    waited,
                    missing_world: missing.iter().map(|&r| self.user_rank(r, true)).collect(),
                    missing: missing.iter().map(|&r| self.user_rank(r, false)).collect(),
                    // The variable; the communicator names it as its settings gave it (`fail`).
                    limit: "BARRIER_TIMEOUT".into(),
                }
            }
        }
    }
}
