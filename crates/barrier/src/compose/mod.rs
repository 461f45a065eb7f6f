//! The composer: one rank's barrier across nodes, the node's halves around the node roots'
//! phase, generic over the node's communicator ([`NodeHalves`]) and the roots' link
//! ([`RootsLink`]). Every layer that spans nodes runs it: barrier-mpi and barrier-openshmem
//! through [`crate::hierarchy`] (whose module docs describe the protocol), and the core's own
//! hierarchical backend over the simulated network. It sits beneath the communicators: it
//! names the node's communicator only through [`NodeHalves`], which `Communicator` implements,
//! so the communicator's engine can hold it.

pub mod clock;
pub mod flights;
pub mod report;
pub mod roots;

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::shm::Segment;

pub use report::Names;
pub use roots::{Choice, Chosen, Flight, OwnBarrier, OwnPending, Roots, RootsLink, RootsWaits, Way};

use clock::{Phase, PhaseClock};
use flights::{Flights, Leg};

/// The node's communicator as the composer uses it: alternate barriers that are the node's
/// gather (odd) and release (even), or a forced backend's whole barriers; blocking, or started
/// and completed later. The core's `Communicator` is one (`Communicator::halves`).
pub trait NodeHalves: fmt::Debug {
    /// This rank in the node.
    fn rank(&self) -> usize;

    /// A barrier, blocking.
    fn barrier(&self) -> Result<()>;

    /// A barrier started split phase: its number, for [`done`](Self::done).
    fn start(&self) -> Result<u64>;

    /// Whether barrier `epoch` (started) is complete, progressing it; waiting for it if
    /// `blocking`. Never yields the core otherwise: the caller's own test does.
    fn done(&self, epoch: u64, blocking: bool) -> Result<bool>;

    /// Every barrier started is complete and none failed.
    fn is_quiet(&self) -> bool;

    /// This rank will not finish its barriers here (its hierarchy broke): the others stop
    /// waiting for it at once, each naming it, instead of at their timeout.
    fn fail(&self);
}

/// A rank's barrier across nodes: the node's halves around the roots' phase (see the module
/// docs). One thread drives it at a time (it is not `Sync`).
#[derive(Debug)]
pub struct Hierarchy<H, L> {
    /// The node's gather and release (or its forced backend's whole barrier, twice).
    halves: H,
    /// The roots' phase, on the node's root.
    roots: Option<Roots<L>>,
    /// The node's segment, where the node has one of its own (MPI, OpenSHMEM): a root whose
    /// phase fails marks it aborted. The core's simulated nodes share the job's segment, which
    /// one communicator's failure must not abort: there the node's ranks learn it when the
    /// root leaves the communicator (or at their timeout).
    node_seg: Option<Arc<Segment>>,
    local_rank: usize,
    /// This rank is alone on its node (and no backend is forced there): a blocking barrier is
    /// the roots' phase alone.
    alone: bool,
    /// Barriers (blocking and split) whose roots' phase this rank entered.
    epoch: Cell<u64>,
    flights: Flights,
    /// Why the hierarchy is unusable, once it is.
    broken: RefCell<Option<String>>,
    /// This rank in the communicator, and where the timeout was given, for errors.
    rank: usize,
    limit: String,
    /// `BARRIER_HIER_DEBUG`'s time per phase of the flights, where asked for.
    clock: Option<PhaseClock>,
}

impl<H: NodeHalves, L: RootsLink> Hierarchy<H, L> {
    /// The composition of `halves` (the node's) and `roots` (on the node's root). `node_seg`:
    /// the node's own segment, marked aborted when this root's phase fails (see the field).
    /// `alone`: this rank is its node's only rank and the halves are the gather and the release
    /// (not a forced backend's barriers). `rank` and `limit` (where the timeout was given) are
    /// for errors.
    pub fn new(
        halves: H,
        roots: Option<Roots<L>>,
        node_seg: Option<Arc<Segment>>,
        alone: bool,
        rank: usize,
        limit: String,
    ) -> Self {
        let local_rank = halves.rank();
        Hierarchy {
            halves,
            roots,
            node_seg,
            local_rank,
            alone,
            epoch: Cell::new(0),
            flights: Flights::default(),
            broken: RefCell::new(None),
            rank,
            limit,
            clock: None,
        }
    }

    /// Times the phases of every barrier from here on and says, when the hierarchy goes, what
    /// each took per barrier, the report starting with `who` (`BARRIER_HIER_DEBUG`).
    pub fn time_phases(&mut self, who: String) {
        self.clock = Some(PhaseClock::new(who));
    }

    fn lap(&self, phase: Phase) {
        if let Some(clock) = &self.clock {
            clock.lap(phase);
        }
    }

    /// Tells the node's other ranks at once that this rank will not finish its barriers: the
    /// node's own segment is marked aborted, or, where the node shares the job's segment, this
    /// rank leaves the node's communicator as failed.
    fn abort_node(&self) {
        match &self.node_seg {
            Some(seg) => seg.set_abort(self.local_rank),
            None => self.halves.fail(),
        }
    }

    /// The node's halves (for descriptions).
    pub fn halves(&self) -> &H {
        &self.halves
    }

    /// The roots' phase, on a node's root.
    pub fn roots(&self) -> Option<&Roots<L>> {
        self.roots.as_ref()
    }

    /// Whether this rank is alone on its node.
    pub fn alone(&self) -> bool {
        self.alone
    }

    /// Whether every barrier started on this rank has completed (no flight outstanding, the
    /// node's halves quiet) and none failed.
    pub fn is_quiet(&self) -> bool {
        self.usable().is_ok() && self.flights.finished.get() == self.flights.started.get() && self.halves.is_quiet()
    }

    /// Barriers of ours the roots' phase entered on this rank, timing included.
    pub fn entered(&self) -> u64 {
        let epoch = self.epoch.get();
        self.roots.as_ref().map_or(epoch, |r| r.entered(epoch))
    }

    /// A barrier (collective): every split-phase barrier started before it completes first.
    /// Writes before it on any rank are visible after it on every rank.
    pub fn barrier(&self) -> Result<()> {
        self.usable()?;
        self.finish_flights()?;
        if let Some(clock) = &self.clock {
            clock.start();
        }
        if self.alone {
            if let Some(roots) = &self.roots {
                // The roots' phase is this rank's whole arrival: its stores come before it (the
                // halves' release store does this where they run), and every other rank's are
                // visible after it.
                fence(Ordering::Release);
                roots.barrier(self.next_epoch()).map_err(|e| self.failed_on_root(e))?;
                fence(Ordering::Acquire);
                self.lap(Phase::Roots);
                return Ok(());
            }
        }
        self.halves.barrier().map_err(|e| self.broken_by(e))?;
        self.lap(Phase::Gather);
        if let Some(roots) = &self.roots {
            roots.barrier(self.next_epoch()).map_err(|e| self.failed_on_root(e))?;
            self.lap(Phase::Roots);
        }
        self.halves.barrier().map_err(|e| self.broken_by(e))?;
        self.lap(Phase::Release);
        Ok(())
    }

    fn next_epoch(&self) -> u64 {
        let epoch = self.epoch.get() + 1;
        self.epoch.set(epoch);
        epoch
    }

    /// The root's phase failed: the node's ranks waiting for this root stop at once instead of
    /// at their timeout, and the hierarchy is broken.
    #[cold]
    fn failed_on_root(&self, e: Error) -> Error {
        self.abort_node();
        self.broken_by(e)
    }

    /// An error once an earlier barrier failed (or a split-phase one was abandoned).
    pub fn usable(&self) -> Result<()> {
        match &*self.broken.borrow() {
            Some(why) => Err(Error::Broken(why.clone())),
            None => Ok(()),
        }
    }

    /// Breaks the hierarchy after `e` (see the module docs) and returns `e`, its timeout named
    /// as the layer gave it.
    #[cold]
    pub fn broken_by(&self, e: Error) -> Error {
        let e = e.timeout_given_in(self.limit.clone());
        let mut broken = self.broken.borrow_mut();
        if broken.is_none() {
            *broken = Some(format!("barrier failed on rank {}: {e}", self.rank));
        }
        e
    }

    /// Breaks the hierarchy because a split-phase barrier was abandoned mid-flight, and tells
    /// the node's other ranks (they would wait for this rank's node barriers for ever).
    pub fn abandon(&self, why: String) {
        self.abort_node();
        *self.broken.borrow_mut() = Some(why);
    }
}

impl<H: NodeHalves, L: RootsLink> Hierarchy<H, L> {
    /// Starts a split-phase barrier: this rank's arrival is announced now; [`drive`](Self::drive)
    /// completes it. Returns its flight number.
    pub fn ibarrier(&self) -> Result<u64> {
        self.usable()?;
        let flights = &self.flights;
        let first = flights.queue.borrow().is_empty();
        let leg = if self.roots.is_some() {
            // The root: it joins this gather (alone on its node: the roots' phase) once the
            // flights before it are done.
            match first {
                true => self.first_leg()?,
                false => Leg::Queued,
            }
        } else {
            // Every other rank: both of the flight's node barriers, in order, now.
            self.halves.start()?;
            Leg::Release(self.halves.start()?)
        };
        flights.queue.borrow_mut().push_back(leg);
        flights.started.set(flights.started.get() + 1);
        if let Some(clock) = &self.clock {
            clock.start();
        }
        Ok(flights.started.get())
    }

    /// A root's first leg of a flight: the node's gather or, alone on its node, the roots' phase
    /// (the release fence of the blocking barrier's: this rank's stores come before it).
    fn first_leg(&self) -> Result<Leg> {
        if self.alone {
            fence(Ordering::Release);
            return Ok(Leg::Roots(Flight::new(self.next_epoch())));
        }
        Ok(Leg::Gather(self.halves.start()?))
    }

    /// Completes every flight started so far (a blocking barrier's first step).
    fn finish_flights(&self) -> Result<()> {
        if self.flights.finished.get() == self.flights.started.get() {
            return Ok(());
        }
        self.drive(self.flights.started.get(), true).map(|_| ())
    }

    /// Advances the flights in order until flight `flight` is done (`Ok(true)`) or, unless
    /// `blocking`, until one must wait (`Ok(false)`). A failure breaks the hierarchy, as a
    /// failed blocking barrier does.
    pub fn drive(&self, flight: u64, blocking: bool) -> Result<bool> {
        self.usable()?;
        self.drive_flights(flight, blocking).map_err(|e| self.broken_by(e))
    }

    fn drive_flights(&self, flight: u64, blocking: bool) -> Result<bool> {
        let halves = &self.halves;
        let flights = &self.flights;
        // The node's barrier `epoch`: done, or (not blocking) not yet.
        let node_done = |epoch: u64| halves.done(epoch, blocking);
        while flights.finished.get() < flight {
            let mut queue = flights.queue.borrow_mut();
            let Some(leg) = queue.front_mut() else { break };
            match leg {
                Leg::Queued => *leg = self.first_leg()?,
                Leg::Gather(epoch) => {
                    if !node_done(*epoch)? {
                        return Ok(false);
                    }
                    self.lap(Phase::Gather);
                    *leg = Leg::Roots(Flight::new(self.next_epoch()));
                }
                Leg::Roots(phase) => {
                    let roots = self.roots.as_ref().expect("only a node's root has a roots' phase");
                    let done = if blocking { roots.finish(phase).map(|()| true) } else { roots.advance(phase) };
                    match done {
                        Ok(false) => return Ok(false),
                        Ok(true) if self.alone => {
                            self.lap(Phase::Roots);
                            // Every other rank's stores are visible after it.
                            fence(Ordering::Acquire);
                            queue.pop_front();
                            flights.finished.set(flights.finished.get() + 1);
                        }
                        Ok(true) => {
                            self.lap(Phase::Roots);
                            *leg = Leg::Release(halves.start()?);
                        }
                        Err(e) => {
                            // As the blocking barrier does: the node's ranks waiting for this
                            // root stop at once instead of at their timeout.
                            self.abort_node();
                            return Err(e);
                        }
                    }
                }
                Leg::Release(epoch) => {
                    if !node_done(*epoch)? {
                        return Ok(false);
                    }
                    self.lap(Phase::Release);
                    queue.pop_front();
                    flights.finished.set(flights.finished.get() + 1);
                }
            }
        }
        Ok(true)
    }
}
