//! The split-phase barrier of a [`BarrierComm`]: [`BarrierComm::ibarrier`] and the [`Request`]
//! it returns, on each path of the crate docs. Any number may be outstanding on every path;
//! they complete in the order they were started, and a blocking barrier completes them first.
//!
//! * **One node**: the node's own split-phase barrier (`barrier::Communicator::ibarrier`).
//! * **`mpi`**: `MPI_Ibarrier` on the private duplicate, completed with `MPI_Test`/`MPI_Wait`.
//! * **Several nodes**: the composer's flights ([`barrier::hierarchy::flights`]): the
//!   blocking barrier's three phases, queued in the communicator's hierarchy, advanced without
//!   waiting by any request's `test` (or completed by `wait` and by the next blocking barrier).
//!
//! Waiting keeps MPI progressing: the node's waits probe MPI (the segment's progress hook,
//! `BARRIER_MPI_PROGRESS`), the internode rounds drive their transport, and `MPI_Test` and
//! `MPI_Wait` progress MPI themselves. As with MPI's own nonblocking barrier, a request
//! completes only while its rank keeps calling `test`, `wait` or another barrier of the
//! communicator: a rank that blocks elsewhere (an `MPI_Recv` that waits for a rank which waits
//! for this barrier) holds up the node behind it.

use barrier::{Error, Result};

use crate::comm::{BarrierComm, Path};
use crate::raw;

impl BarrierComm {
    /// Starts a barrier and returns at once (split phase, `MPI_Ibarrier`): this rank's arrival
    /// is announced now; [`Request::test`] or [`Request::wait`] completes it. Several may be
    /// outstanding; they complete in the order they were started (see the module docs).
    pub fn ibarrier(&self) -> Result<Request<'_>> {
        self.on_home_thread()?;
        self.mpi_still_up()?;
        let stage = match &self.path {
            Path::Node(node) => Stage::Node(node.world().ibarrier()?),
            Path::Mpi => Stage::Mpi(raw::ibarrier(self.comm)?),
            Path::Hierarchical { hier, .. } => Stage::Flight(hier.ibarrier()?),
        };
        Ok(Request { comm: self, stage })
    }

    /// The hierarchy across nodes (the paths of flights).
    fn hierarchy(&self) -> &barrier::hierarchy::Hierarchy<crate::channel::ChannelLink> {
        match &self.path {
            Path::Hierarchical { hier, .. } => hier,
            _ => unreachable!("flights run only across nodes"),
        }
    }
}

/// Where a split-phase barrier is.
#[derive(Debug)]
enum Stage<'c> {
    /// One node: the node's own request.
    Node(barrier::Request<'c>),
    /// `MPI_Ibarrier`'s request.
    Mpi(raw::Request),
    /// Across nodes: this flight number of the communicator's.
    Flight(u64),
    /// Complete (or failed: the error was returned once).
    Done,
}

/// A pending split-phase barrier of a [`BarrierComm`]: complete it with [`test`](Self::test)
/// or [`wait`](Self::wait). Dropping an incomplete request waits for it (so it is a blocking
/// barrier), except while the thread panics or after `MPI_Finalize`: then a communicator
/// across nodes is broken and its node's ranks are told.
#[derive(Debug)]
#[must_use = "a dropped Request waits for its barrier (a blocking barrier): call wait() or test() on it"]
pub struct Request<'c> {
    comm: &'c BarrierComm,
    stage: Stage<'c>,
}

impl Request<'_> {
    /// Makes progress without blocking; `Ok(true)` once every rank has arrived (and on every
    /// call after that). When ranks outnumber cores, a call that finds the barrier incomplete
    /// yields the core once (never waits): a `while !request.test()? {}` loop then lets the
    /// rank it waits for run, as `wait()` does.
    pub fn test(&mut self) -> Result<bool> {
        self.test_yielding(true)
    }

    /// [`test`](Self::test) that never yields the core: for a caller whose own progress loop
    /// yields already (the coll component under Open MPI's `mpi_yield_when_idle`).
    #[doc(hidden)]
    pub fn poll(&mut self) -> Result<bool> {
        self.test_yielding(false)
    }

    fn test_yielding(&mut self, yields: bool) -> Result<bool> {
        let done = self.step(false, yields);
        if yields && matches!(done, Ok(false)) && self.comm.test_yields && !matches!(self.stage, Stage::Node(_)) {
            // (The node's own request yields in the core.)
            barrier::wait::Pace::Yield.pause();
        }
        done
    }

    /// Blocks until every rank has arrived.
    pub fn wait(mut self) -> Result<()> {
        self.step(true, true).map(|_| ())
    }

    /// `yields`: a test that finds the node's barrier incomplete may yield the core (see `test`).
    fn step(&mut self, blocking: bool, yields: bool) -> Result<bool> {
        let comm = self.comm;
        if !matches!(self.stage, Stage::Done) {
            comm.mpi_still_up()?;
        }
        let done = match &mut self.stage {
            Stage::Done => return Ok(true),
            Stage::Node(request) if blocking => {
                let Stage::Node(request) = std::mem::replace(&mut self.stage, Stage::Done) else { unreachable!() };
                return request.wait().map(|()| true);
            }
            Stage::Node(request) if yields => request.test(),
            Stage::Node(request) => request.poll(),
            Stage::Mpi(request) if blocking => raw::wait(request).map(|()| true),
            Stage::Mpi(request) => raw::test(request),
            // A failed flight breaks the communicator, as a failed blocking barrier does.
            Stage::Flight(flight) => comm.hierarchy().drive(*flight, blocking),
        };
        // A failure completes the request too: the error is returned once.
        if !matches!(done, Ok(false)) {
            self.stage = Stage::Done;
        }
        done
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if matches!(self.stage, Stage::Done) {
            return;
        }
        let panicking = std::thread::panicking();
        if panicking || !raw::mpi_active() {
            // Waiting could deadlock a rank that unwinds, and after MPI_Finalize the internode
            // rounds and MPI's request cannot finish. (A node's request, dropped with this one,
            // marks the node's communicator broken while panicking.)
            match std::mem::replace(&mut self.stage, Stage::Done) {
                Stage::Mpi(mut request) => raw::release(&mut request),
                Stage::Flight(flight) => self.comm.hierarchy().abandon(format!(
                    "split-phase barrier {flight} was dropped before it completed, {}",
                    if panicking { "while the thread panicked" } else { "after MPI_Finalize" }
                )),
                _ => {}
            }
            return;
        }
        if let Err(e) = self.step(true, true) {
            barrier::text::say(&format!("barrier-mpi: a dropped split-phase barrier failed: {e}"));
        }
    }
}

/// A split-phase barrier let go of by [`Request::detach`]: it holds no borrow of its
/// communicator, so a caller that keeps it elsewhere (the Open MPI component keeps it in an MPI
/// request) completes it with [`BarrierComm::resume`]. Dropping one does nothing: its barrier
/// stays started, and the communicator's next blocking barrier completes it.
#[doc(hidden)]
#[derive(Debug)]
pub struct Detached(Held);

#[derive(Debug)]
enum Held {
    Node(u64),
    Mpi(raw::Request),
    Flight(u64),
    Done,
}

impl Request<'_> {
    /// Lets go of the request without waiting for it (see [`Detached`]).
    #[doc(hidden)]
    pub fn detach(mut self) -> Detached {
        Detached(match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Node(request) => Held::Node(request.detach()),
            Stage::Mpi(request) => Held::Mpi(request),
            Stage::Flight(flight) => Held::Flight(flight),
            Stage::Done => Held::Done,
        })
    }
}

impl BarrierComm {
    /// The request that [`Request::detach`] let go of. `detached` must come from this
    /// communicator.
    #[doc(hidden)]
    pub fn resume(&self, detached: Detached) -> Result<Request<'_>> {
        let stage = match (detached.0, &self.path) {
            (Held::Node(epoch), Path::Node(node)) => Stage::Node(node.world().resume(epoch)?),
            (Held::Mpi(request), _) => Stage::Mpi(request),
            (Held::Flight(flight), Path::Hierarchical { .. }) => Stage::Flight(flight),
            (Held::Done, _) => Stage::Done,
            _ => return Err(Error::InvalidArgument("a split-phase barrier resumed on another communicator".into())),
        };
        Ok(Request { comm: self, stage })
    }
}
