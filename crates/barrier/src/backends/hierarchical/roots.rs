//! The hierarchical backend's link among the node roots for the composer's roots' phase
//! ([`crate::compose::Roots`]):
//!
//! * [`FabricLink`]: our dissemination's link over the simulated network. In round `r` root
//!   `j` puts the epoch into the round-`r` slot of root `(j + 2^r) mod nodes` (its row of this
//!   communicator's region), through the transport the fabric ranks first for that peer; its
//!   own slot of the round is a plain load. A transport whose puts need the sender's calls to
//!   move (an asynchronous network) gets one after each put, one on every poll that finds a
//!   slot short, and a flush when the root's rounds are done.
//! * a switch or GBA group of the roots is the roots' own barrier instead: a communicator of the
//!   node roots with that backend (`comm/composed.rs`). A device fault is that backend's
//!   business (every root leaves the device at the same epoch for its software fallback among
//!   the roots), so the ranks below the roots never notice.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::algo::dissemination::FabricDissemination;
use crate::backend::{EnableContext, QueryContext};
use crate::compose::{Names, RootsLink};
use crate::error::{Error, Result};
use crate::region::Region;
use crate::shm::Shared;
use crate::transport::{Fabric, Signal};
use crate::wait::{Flag, Watch};
use crate::watch::{Need, PeerWatch};

/// A node root's link to the other roots over the simulated network.
#[derive(Debug)]
pub struct FabricLink {
    /// Own slot per round.
    inbox: Vec<Shared<Flag>>,
    /// The round's partner's slot per round.
    outbox: Vec<Signal>,
    fabric: Fabric,
    /// The transports need this rank's calls to move its puts along.
    pushes: bool,
    /// The slots' owners may sleep on them (the wait policy parks): a put wakes them.
    wake: bool,
    /// The communicator's region, members and this rank: a root that left or exited is found
    /// there, as every wait of the communicator finds it.
    region: Region,
    members: Vec<usize>,
    rank: usize,
    /// For the barrier whose departures were last looked at: when a member that left after a
    /// failure was first the only one to blame (each look makes a new watch; the grace before
    /// naming it runs across them).
    exit_seen: Cell<(u64, Option<Instant>)>,
}

impl FabricLink {
    /// The link of a root of the dissemination `diss` over `fabric`.
    pub(crate) fn new(diss: FabricDissemination, fabric: Fabric, ctx: &EnableContext<'_>, members: Vec<usize>) -> Self {
        let pushes = diss.needs_progress();
        let (inbox, outbox) = diss.into_parts();
        let wake = ctx.policy.wakes();
        let (region, rank) = (ctx.region.clone(), ctx.query.rank);
        FabricLink { inbox, outbox, fabric, pushes, wake, region, members, rank, exit_seen: Cell::new((0, None)) }
    }

    /// The link of a root whose roots meet on a device: no rounds of ours (the device's
    /// communicator serves every barrier), only the fabric's counters.
    pub(crate) fn unused(fabric: Fabric, ctx: &EnableContext<'_>, members: Vec<usize>) -> Self {
        let wake = ctx.policy.wakes();
        let (region, rank) = (ctx.region.clone(), ctx.query.rank);
        let (inbox, outbox, exit_seen) = (Vec::new(), Vec::new(), Cell::new((0, None)));
        FabricLink { inbox, outbox, fabric, pushes: false, wake, region, members, rank, exit_seen }
    }

    /// Operations sent across the network so far.
    pub fn network_ops(&self) -> u64 {
        self.fabric.network_ops()
    }
}

impl RootsLink for FabricLink {
    fn signal(&self, round: usize, epoch: u64) -> Result<()> {
        self.outbox[round].signal(epoch, self.wake)?;
        if self.pushes {
            // The put just queued goes out now, not at the next poll.
            self.fabric.progress();
        }
        Ok(())
    }

    #[inline]
    fn reached(&self, round: usize, epoch: u64) -> bool {
        self.inbox[round].reached(epoch)
    }

    fn progress(&self) -> Result<()> {
        if self.pushes {
            self.fabric.progress();
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        match self.pushes {
            true => self.fabric.flush(),
            false => Ok(()),
        }
    }

    fn parks_on(&self, round: usize) -> Option<&Flag> {
        // A root whose own puts wait for its calls must not sleep: its partner would wait too.
        (self.wake && !self.pushes).then(|| &*self.inbox[round])
    }

    fn departed(&self, epoch: u64) -> Option<Error> {
        // The composer counts the roots' barriers as the communicator does (one per barrier).
        let (looked_at, seen) = self.exit_seen.get();
        let watch = PeerWatch::new(&self.region, &self.members, self.rank, Need::Barrier(epoch), None)
            .seen_since(if looked_at == epoch { seen } else { None });
        let left = watch.check(Duration::ZERO).err().map(|w| watch.error(w));
        self.exit_seen.set((epoch, watch.exit_seen()));
        left
    }
}

/// How the roots' reports name things: ranks of this communicator, their world ranks.
pub(crate) fn names(q: &QueryContext<'_>, roots: &[usize], index: usize) -> Names {
    Names {
        layer: "barrier",
        member: "rank",
        me: format!("world rank {} (rank {} of a communicator of {} ranks)", q.members[q.rank], q.rank, q.size),
        index,
        rank: q.rank,
        world_rank: q.members[q.rank],
        size: q.size,
        roots: roots
            .iter()
            .map(|&r| format!("the node root at world rank {} (communicator rank {r})", q.members[r]))
            .collect(),
        root_ranks: roots.iter().map(|&r| (r, q.members[r])).collect(),
        limit: q.params.source("BARRIER_TIMEOUT"),
        setting: "BARRIER_HIER_INTERNODE",
        flat: false,
    }
}
