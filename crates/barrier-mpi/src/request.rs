//! The split-phase barrier of a [`BarrierComm`]: [`BarrierComm::ibarrier`] and the [`Request`]
//! it returns, on each path of the crate docs.
//!
//! * **One node**: the node's own split-phase barrier (`barrier::Communicator::ibarrier`):
//!   several may be outstanding, and they complete in the order they were started.
//! * **`mpi`**: `MPI_Ibarrier` on the private duplicate, completed with `MPI_Test`/`MPI_Wait`.
//! * **Several nodes**: the same three phases as the blocking barrier, each advanced without
//!   waiting: the node's split-phase barrier (every rank of the node has arrived), then, on the
//!   node's root, the internode dissemination round by round, then the node's split-phase
//!   barrier again (the root releases its node). The node's barriers of all its ranks must pair
//!   up in the same order, so one split-phase barrier at a time may be under way on such a
//!   communicator: starting another (or a blocking barrier) before it completes is an error
//!   that says so, never a mismatched barrier.
//!
//! Waiting keeps MPI progressing: the node's waits probe MPI (the segment's progress hook,
//! `BARRIER_MPI_PROGRESS`), the internode phase drives its transport, and `MPI_Test` and
//! `MPI_Wait` progress MPI themselves.

use barrier::{Error, Result};

use crate::comm::{BarrierComm, Path};
use crate::internode::Flight;
use crate::raw;

/// The error of a second split-phase (or a blocking) barrier while one is under way on a
/// communicator across nodes.
pub(crate) fn one_at_a_time() -> Error {
    Error::InvalidArgument(
        "a split-phase barrier is still under way on this communicator, which spans nodes: complete it (test until \
         true, or wait) before starting another barrier on it"
            .into(),
    )
}

impl BarrierComm {
    /// Starts a barrier and returns at once (split phase, `MPI_Ibarrier`): this rank's arrival
    /// is announced now; [`Request::test`] or [`Request::wait`] completes it. On one node (and
    /// on the `mpi` path) several may be outstanding, completing in the order they were started;
    /// across nodes one at a time (see the module docs).
    pub fn ibarrier(&self) -> Result<Request<'_>> {
        if self.in_flight.get() {
            return Err(one_at_a_time());
        }
        let stage = match &self.path {
            Path::Node(node) => Stage::Node(node.world().ibarrier().map_err(|e| self.in_mpi_ranks(e))?),
            Path::Mpi => Stage::Mpi(raw::ibarrier(self.comm)?),
            Path::Hierarchical { node, .. } => {
                let gather = node.world().ibarrier().map_err(|e| self.in_mpi_ranks(e))?;
                self.in_flight.set(true);
                Stage::Gather(gather)
            }
        };
        Ok(Request { comm: self, stage })
    }
}

/// Where a split-phase barrier is.
#[derive(Debug)]
enum Stage<'c> {
    /// One node: the node's own request.
    Node(barrier::Request<'c>),
    /// `MPI_Ibarrier`'s request.
    Mpi(raw::Request),
    /// Across nodes: the node's first barrier (everyone on the node has arrived).
    Gather(barrier::Request<'c>),
    /// Across nodes, on the node's root: the internode rounds.
    Internode(Flight),
    /// Across nodes: the node's second barrier (the root releases the node).
    Release(barrier::Request<'c>),
    /// Complete (or failed: the error was returned once).
    Done,
}

/// A pending split-phase barrier of a [`BarrierComm`]: complete it with [`test`](Self::test)
/// or [`wait`](Self::wait). Dropping an incomplete request waits for it (so it is a blocking
/// barrier), except while the thread panics.
#[derive(Debug)]
#[must_use = "a dropped Request waits for its barrier (a blocking barrier): call wait() or test() on it"]
pub struct Request<'c> {
    comm: &'c BarrierComm,
    stage: Stage<'c>,
}

impl<'c> Request<'c> {
    /// Makes progress without blocking; `Ok(true)` once every rank has arrived (and on every
    /// call after that).
    pub fn test(&mut self) -> Result<bool> {
        self.step(false)
    }

    /// Blocks until every rank has arrived.
    pub fn wait(mut self) -> Result<()> {
        self.step(true).map(|_| ())
    }

    /// Advances the stages; `blocking` waits inside each one. A failure completes the request
    /// (the communicator is broken, or the error is MPI's) and frees the communicator for the
    /// error the next call will meet.
    fn step(&mut self, blocking: bool) -> Result<bool> {
        let result = self.advance(blocking);
        if result.is_err() {
            self.comm.in_flight.set(false);
            self.stage = Stage::Done;
        }
        result
    }

    fn advance(&mut self, blocking: bool) -> Result<bool> {
        let comm = self.comm;
        // A node's request: waited for (blocking), or tested and put back while pending.
        let node =
            |r: barrier::Request<'c>, pending: fn(barrier::Request<'c>) -> Stage<'c>| -> Result<Option<Stage<'c>>> {
                let mut r = r;
                if blocking {
                    r.wait().map_err(|e| comm.in_mpi_ranks(e))?;
                    Ok(None)
                } else if r.test().map_err(|e| comm.in_mpi_ranks(e))? {
                    Ok(None)
                } else {
                    Ok(Some(pending(r)))
                }
            };
        loop {
            // The stage is taken out while it advances: a failure leaves `Done` behind.
            match std::mem::replace(&mut self.stage, Stage::Done) {
                Stage::Done => return Ok(true),
                Stage::Node(r) => {
                    if let Some(pending) = node(r, Stage::Node)? {
                        self.stage = pending;
                        return Ok(false);
                    }
                }
                Stage::Mpi(mut req) => {
                    if blocking {
                        raw::wait(&mut req)?;
                    } else if !raw::test(&mut req)? {
                        self.stage = Stage::Mpi(req);
                        return Ok(false);
                    }
                }
                Stage::Gather(r) => {
                    if let Some(pending) = node(r, Stage::Gather)? {
                        self.stage = pending;
                        return Ok(false);
                    }
                    self.stage = match &comm.path {
                        Path::Hierarchical { internode: Some(_), .. } => {
                            let epoch = comm.epoch.get() + 1;
                            comm.epoch.set(epoch);
                            Stage::Internode(Flight::new(epoch))
                        }
                        _ => Stage::Release(comm.node_ibarrier()?),
                    };
                }
                Stage::Internode(mut flight) => {
                    let Path::Hierarchical { internode: Some(inter), seg, .. } = &comm.path else {
                        unreachable!("only a node root of a communicator across nodes has an internode phase")
                    };
                    let done =
                        if blocking { inter.finish(&mut flight).map(|()| true) } else { inter.advance(&mut flight) };
                    match done {
                        Ok(false) => {
                            self.stage = Stage::Internode(flight);
                            return Ok(false);
                        }
                        Ok(true) => self.stage = Stage::Release(comm.node_ibarrier()?),
                        Err(e) => {
                            // As the blocking barrier does: the node's ranks waiting for this
                            // root stop at once instead of at their timeout.
                            seg.set_abort(comm.local_rank);
                            return Err(e);
                        }
                    }
                }
                Stage::Release(r) => {
                    if let Some(pending) = node(r, Stage::Release)? {
                        self.stage = pending;
                        return Ok(false);
                    }
                    self.comm.in_flight.set(false);
                }
            }
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if matches!(self.stage, Stage::Done) {
            return;
        }
        if std::thread::panicking() || !raw::mpi_active() {
            // Waiting could deadlock a rank that unwinds; after MPI_Finalize nothing can finish.
            // The node's request, dropped with it, marks the node's communicator broken.
            if let Stage::Mpi(req) = &mut self.stage {
                raw::release(req);
            }
            self.stage = Stage::Done;
            self.comm.in_flight.set(false);
            return;
        }
        if let Err(e) = self.step(true) {
            barrier::sys::say(&format!("barrier-mpi: a dropped split-phase barrier failed: {e}"));
        }
    }
}

impl BarrierComm {
    /// The node's next split-phase barrier (across nodes).
    fn node_ibarrier(&self) -> Result<barrier::Request<'_>> {
        match &self.path {
            Path::Hierarchical { node, .. } | Path::Node(node) => {
                node.world().ibarrier().map_err(|e| self.in_mpi_ranks(e))
            }
            Path::Mpi => unreachable!("the mpi path has no node barrier"),
        }
    }
}
