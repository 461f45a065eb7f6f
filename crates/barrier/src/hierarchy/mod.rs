//! One hierarchy, composed once: the barrier across nodes that the layers above the core
//! (`barrier-mpi`, `barrier-shmem`) serve. A layer brings two things:
//!
//! * **the node's communicator**: a core [`Communicator`] over the node's shared segment (set up
//!   once for every layer by [`set_up_node`] over the layer's exchange: [`node`]), split
//!   into its two halves ([`Communicator::halves`]: a gather, after which the node's root knows
//!   every rank of the node arrived, and a release), or, where a backend is forced on the
//!   node, a whole barrier of that backend in each place;
//! * **the roots' link** ([`RootsLink`]): its transport among the node roots (MPI
//!   point-to-point, OpenSHMEM atomics), set up for the dissemination's rounds, and its
//!   progress call; and, where it has one, the implementation's own barrier among the roots
//!   ([`OwnBarrier`]).
//!
//! The composer ([`Hierarchy`]) runs the rest, the same for every layer:
//!
//! 1. **gather**: the node's first half; its root returns once the node's ranks have arrived,
//!    the others at once;
//! 2. **roots** ([`Roots`]): ⌈log2 R⌉ rounds of dissemination among the R node roots over the
//!    link, or the implementation's own barrier among them: [`Choice::Measure`] times both once,
//!    when the communicator is made (a chunk of 20 of each to warm up, then five alternating
//!    chunks; root 0's medians decide, and ours is kept only when at least 5% faster), unless a
//!    timeout or a stall report is set: only our rounds can name the root a wait is for;
//! 3. **release**: the node's second half; the root stores it, the others wait for it.
//!
//! A rank alone on its node skips its node's halves (they would wait for nobody): its barrier,
//! blocking or split-phase, is the roots' phase alone, fenced (release before, acquire after).
//! Split-phase barriers (`ibarrier`) are *flights* queued in order (see [`flights`]).
//!
//! **Waits.** The node's halves wait as every core communicator does (spin, yield, park, the
//! layer's progress hook on the slow path: [`crate::wait`]). The roots' phase polls
//! ([`crate::wait::poll`]): the link's progress on every poll that finds its slot not yet
//! arrived (an MPI message lands only while this rank calls MPI), spinning or yielding between polls, never parking. Every few hundred
//! polls it looks at the clock: a root that left (finalized after fewer barriers) fails the
//! wait at once, `BARRIER_TIMEOUT` fails it naming the root waited for, and
//! `BARRIER_STALL_REPORT` says once who it waits for and goes on (one report function, in the
//! layer's words: [`Names`]). Both count from the first wait of the barrier's roots' phase.
//!
//! **Failure.** A root whose phase fails marks the node's segment aborted (the node's ranks
//! waiting for its release stop at once instead of at their timeout), and any failure breaks
//! the hierarchy on that rank: its halves and the roots' rounds are out of step, and a rank that
//! called again would join the failed barrier's release as a new gather and let its node's
//! ranks through before the others arrived. Every later call fails with the first error.

pub mod ahead;
pub mod aside;
pub mod flights;
pub mod node;
mod report;
mod roots;
pub mod settings;
#[cfg(test)]
mod tests;

use std::cell::{Cell, RefCell};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::shm::Segment;

pub use node::{agree, set_up_node, Node, NodeExchange, NodeFailure, NodeSpec};
pub use report::Names;
pub use roots::{Choice, Chosen, Flight, OwnBarrier, OwnPending, Roots, RootsLink, RootsWaits, Way};
pub use settings::{agree_settings, Agreed, Allgather, Layer};

use flights::{Flights, Leg};

/// A rank's barrier across nodes: the node's halves around the roots' phase (see the module
/// docs). One thread drives it at a time (it is not `Sync`).
#[derive(Debug)]
pub struct Hierarchy<L> {
    /// The node's gather and release (or its forced backend's whole barrier, twice).
    halves: Communicator,
    /// The roots' phase, on the node's root.
    roots: Option<Roots<L>>,
    /// The node's segment: a root whose phase fails marks it aborted.
    seg: Arc<Segment>,
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
}

impl<L: RootsLink> Hierarchy<L> {
    /// The composition of `halves` (the node's) and `roots` (on the node's root). `alone`: this
    /// rank is its node's only rank and the halves are the gather and the release (not a forced
    /// backend's barriers). `rank` and `limit` (where the timeout was given) are for errors.
    pub fn new(
        halves: Communicator,
        roots: Option<Roots<L>>,
        seg: Arc<Segment>,
        alone: bool,
        rank: usize,
        limit: String,
    ) -> Self {
        let local_rank = halves.rank();
        Hierarchy {
            halves,
            roots,
            seg,
            local_rank,
            alone,
            epoch: Cell::new(0),
            flights: Flights::default(),
            broken: RefCell::new(None),
            rank,
            limit,
        }
    }

    /// The node's halves (for descriptions).
    pub fn halves(&self) -> &Communicator {
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
        if self.alone {
            if let Some(roots) = &self.roots {
                // The roots' phase is this rank's whole arrival: its stores come before it (the
                // halves' release store does this where they run), and every other rank's are
                // visible after it.
                fence(Ordering::Release);
                roots.barrier(self.next_epoch()).map_err(|e| self.failed_on_root(e))?;
                fence(Ordering::Acquire);
                return Ok(());
            }
        }
        self.halves.barrier().map_err(|e| self.broken_by(e))?;
        if let Some(roots) = &self.roots {
            roots.barrier(self.next_epoch()).map_err(|e| self.failed_on_root(e))?;
        }
        self.halves.barrier().map_err(|e| self.broken_by(e))
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
        self.seg.set_abort(self.local_rank);
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
        self.seg.set_abort(self.local_rank);
        *self.broken.borrow_mut() = Some(why);
    }
}

impl<L: RootsLink> Hierarchy<L> {
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
            self.halves.ibarrier()?.detach();
            Leg::Release(self.halves.ibarrier()?.detach())
        };
        flights.queue.borrow_mut().push_back(leg);
        flights.started.set(flights.started.get() + 1);
        Ok(flights.started.get())
    }

    /// A root's first leg of a flight: the node's gather or, alone on its node, the roots' phase
    /// (the release fence of the blocking barrier's: this rank's stores come before it).
    fn first_leg(&self) -> Result<Leg> {
        if self.alone {
            fence(Ordering::Release);
            return Ok(Leg::Roots(Flight::new(self.next_epoch())));
        }
        Ok(Leg::Gather(self.halves.ibarrier()?.detach()))
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
        let node_done = |epoch: u64| -> Result<bool> {
            let mut request = halves.resume(epoch)?;
            if blocking {
                return request.wait().map(|()| true);
            }
            let done = request.test();
            if !matches!(done, Ok(true)) {
                request.detach();
            }
            done
        };
        while flights.finished.get() < flight {
            let mut queue = flights.queue.borrow_mut();
            let Some(leg) = queue.front_mut() else { break };
            match leg {
                Leg::Queued => *leg = self.first_leg()?,
                Leg::Gather(epoch) => {
                    if !node_done(*epoch)? {
                        return Ok(false);
                    }
                    *leg = Leg::Roots(Flight::new(self.next_epoch()));
                }
                Leg::Roots(phase) => {
                    let roots = self.roots.as_ref().expect("only a node's root has a roots' phase");
                    let done = if blocking { roots.finish(phase).map(|()| true) } else { roots.advance(phase) };
                    match done {
                        Ok(false) => return Ok(false),
                        Ok(true) if self.alone => {
                            // Every other rank's stores are visible after it.
                            fence(Ordering::Acquire);
                            queue.pop_front();
                            flights.finished.set(flights.finished.get() + 1);
                        }
                        Ok(true) => *leg = Leg::Release(halves.ibarrier()?.detach()),
                        Err(e) => {
                            // As the blocking barrier does: the node's ranks waiting for this
                            // root stop at once instead of at their timeout.
                            self.seg.set_abort(self.local_rank);
                            return Err(e);
                        }
                    }
                }
                Leg::Release(epoch) => {
                    if !node_done(*epoch)? {
                        return Ok(false);
                    }
                    queue.pop_front();
                    flights.finished.set(flights.finished.get() + 1);
                }
            }
        }
        Ok(true)
    }
}
