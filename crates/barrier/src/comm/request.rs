//! The split-phase barrier: [`Communicator::ibarrier`] and the [`Request`] it returns.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::wait::{WaitError, Watch};
use crate::watch::{Need, PeerWatch};

use super::communicator::*;

impl Communicator {
    /// Starts a barrier and returns at once (split phase, MPI_Ibarrier): this rank's arrival is
    /// announced now; [`Request::test`] or [`Request::wait`] completes it later. Several may be
    /// outstanding; they complete in the order they were started (a later one is announced to
    /// the module once the one before it completes). See [`Request::wait_all`] and
    /// [`Request::test_any`].
    ///
    /// ```
    /// barrier::threads::run(4, |world| {
    ///     let request = world.ibarrier().unwrap(); // arrive now...
    ///     let local = (0..1000u64).sum::<u64>(); // ...overlap independent work...
    ///     request.wait().unwrap(); // ...and complete it
    ///     local
    /// })
    /// .unwrap();
    /// ```
    pub fn ibarrier(&self) -> Result<Request<'_>> {
        self.check_usable()?;
        let epoch = self.epoch.get() + 1;
        self.epoch.set(epoch);
        // The arrival record is made when the module gets the barrier: now if nothing is
        // outstanding, else by `drive` once the barriers before it complete (see `barrier`).
        // Waking: the hardware module's flat fallback parks on this flag.
        if self.armed.get() == self.done.get() && self.done.get() + 1 == epoch {
            self.arrival.signal(epoch, self.wait.policy.wakes());
            self.engine.borrow_mut().arrive(epoch).map_err(|e| self.fail(e))?;
            self.armed.set(epoch);
            self.note_armed();
        }
        Ok(Request { comm: self, watch: self.watch(self.done.get() + 1), epoch })
    }

    /// The request of barrier `epoch`, which an [`ibarrier`](Self::ibarrier) started and
    /// [`Request::detach`] let go of: how a caller that cannot hold a borrow of the
    /// communicator (a state machine beside it, barrier-mpi's) completes it later.
    #[doc(hidden)]
    pub fn resume(&self, epoch: u64) -> Result<Request<'_>> {
        if epoch == 0 || epoch > self.epoch.get() {
            return Err(Error::InvalidArgument(format!(
                "barrier {epoch} was never started on this communicator (the last one started is {})",
                self.epoch.get()
            )));
        }
        Ok(Request { comm: self, watch: self.watch(self.done.get() + 1), epoch })
    }
}

/// The node's communicator as the composer uses it ([`crate::compose::NodeHalves`]).
impl crate::compose::NodeHalves for Communicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn barrier(&self) -> Result<()> {
        Communicator::barrier(self)
    }

    fn start(&self) -> Result<u64> {
        Ok(self.ibarrier()?.detach())
    }

    fn done(&self, epoch: u64, blocking: bool) -> Result<bool> {
        let mut request = self.resume(epoch)?;
        if blocking {
            return request.wait().map(|()| true);
        }
        let done = request.poll();
        if !matches!(done, Ok(true)) {
            request.detach();
        }
        done
    }

    fn is_quiet(&self) -> bool {
        Communicator::is_quiet(self)
    }

    fn fail(&self) {
        Communicator::fail(self, Error::Broken("this rank's barrier across nodes failed".into()));
        // Recorded now, not when the communicator is dropped: the others' waits read it.
        if !self.departed.replace(true) {
            self.region.depart(self.rank, self.done.get(), true);
        }
    }
}

/// A pending split-phase barrier: complete it with [`test`](Request::test) or
/// [`wait`](Request::wait).
///
/// Dropping an incomplete request *waits* for it (a blocking barrier, since the communicator
/// cannot start the next barrier before this one completes), except while the thread panics:
/// then the communicator is marked broken instead (waiting could deadlock a rank that is
/// unwinding). So `world.ibarrier()?;` alone is a blocking barrier, and the compiler warns.
///
/// ```
/// barrier::threads::run(3, |world| {
///     let mut request = world.ibarrier().unwrap();
///     // ... work that overlaps the barrier ...
///     while !request.test().unwrap() {
///         std::hint::spin_loop();
///     }
///     assert_eq!(request.epoch(), 1);
/// })
/// .unwrap();
/// ```
///
/// Discarding one is caught at compile time (`unused_must_use`, denied here):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// barrier::threads::run(2, |world| {
///     world.ibarrier().unwrap(); // a blocking barrier in disguise
/// })
/// .unwrap();
/// ```
///
/// while the same program that completes its request compiles:
///
/// ```
/// #![deny(unused_must_use)]
/// barrier::threads::run(2, |world| {
///     world.ibarrier().unwrap().wait().unwrap();
/// })
/// .unwrap();
/// ```
#[derive(Debug)]
#[must_use = "a dropped Request waits for its barrier (a blocking barrier): call wait() or test() on it"]
pub struct Request<'c> {
    comm: &'c Communicator,
    /// Looks for departed or exited peers and reports stalls while the request is polled.
    watch: PeerWatch<'c>,
    epoch: u64,
}

impl<'c> Request<'c> {
    /// The barrier epoch this request completes.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Lets go of the request without waiting for it and returns its epoch, for
    /// [`Communicator::resume`]. The barrier stays started: the communicator's next blocking
    /// barrier completes it first, as it completes every barrier started before it.
    #[doc(hidden)]
    pub fn detach(self) -> u64 {
        let epoch = self.epoch;
        // Nothing to free (the request holds references and plain values): only the wait in
        // `Drop` is skipped.
        std::mem::forget(self);
        epoch
    }

    fn is_done(&self) -> bool {
        self.comm.done.get() >= self.epoch
    }

    /// Makes progress; `Ok(true)` once every rank has arrived. Never blocks. Once the request
    /// has been pending longer than `BARRIER_TIMEOUT`, returns the timeout error naming the
    /// ranks that have not arrived, and once a rank has left without arriving, the error that
    /// says so (polling for ever would otherwise hang silently). Under the `Park` wait policy
    /// (ranks outnumber cores) a call that finds the barrier incomplete yields the core once
    /// (`sched_yield`, no wait): a `while !request.test()? {}` loop lets the ranks it waits for
    /// run, as [`Request::wait`] does.
    pub fn test(&mut self) -> Result<bool> {
        self.test_yielding(self.comm.wait.policy == crate::wait::WaitPolicy::Park)
    }

    /// [`test`](Self::test) that never yields: for a caller whose own loop yields already (Open
    /// MPI's progress loop when it knows its ranks outnumber the cores), where a second yield
    /// per round only delays the rank it waits for.
    pub fn poll(&mut self) -> Result<bool> {
        self.test_yielding(false)
    }

    fn test_yielding(&mut self, yields: bool) -> Result<bool> {
        if self.is_done() {
            return Ok(true);
        }
        if self.comm.drive(self.epoch, false)? {
            return Ok(true);
        }
        // The barrier in flight: this one, or an earlier one it is queued behind.
        let flight = self.comm.done.get() + 1;
        if self.watch.need != Need::Barrier(flight) {
            self.watch = self.comm.watch(flight);
        }
        let polls = self.comm.polls.get().wrapping_add(1);
        self.comm.polls.set(polls);
        let verdict = match (self.comm.armed_at.get(), self.comm.wait.timeout) {
            (Some(t0), Some(limit)) if t0.elapsed() >= limit => Err(WaitError::Timeout(t0.elapsed())),
            _ if polls.is_multiple_of(64) => self.watch.check(Duration::ZERO),
            _ => Ok(()),
        };
        match verdict {
            Ok(()) => {
                if yields {
                    crate::sys::yield_now();
                }
                Ok(false)
            }
            Err(w) => Err(self.comm.wait_error(&self.watch, w)),
        }
    }

    /// Blocks until the barrier completes (and every barrier started before it).
    pub fn wait(self) -> Result<()> {
        self.comm.drive(self.epoch, true).map(|_| ())
    }

    /// Completes every request (MPI_Waitall), of one communicator or several, progressing all
    /// of them in turn so that none waits on another rank that waits on this one elsewhere.
    /// Returns the first error; the other requests are still completed (or fail) first.
    pub fn wait_all(requests: Vec<Request<'c>>) -> Result<()> {
        let mut pending = requests;
        let mut first_error = None;
        while !pending.is_empty() {
            let mut still = Vec::with_capacity(pending.len());
            for mut r in pending {
                match r.test() {
                    Ok(true) => {}
                    Ok(false) => still.push(r),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            pending = still;
            if !pending.is_empty() {
                std::thread::yield_now();
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Tests the requests in order (MPI_Testany): the index of the first complete one, or
    /// `None` if none is complete yet. Never blocks.
    pub fn test_any(requests: &mut [Request<'c>]) -> Result<Option<usize>> {
        for (i, r) in requests.iter_mut().enumerate() {
            if r.test()? {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if self.is_done() || self.comm.state.get() == BROKEN {
            return;
        }
        if std::thread::panicking() {
            // Waiting here could wait for ranks that are themselves waiting for this one (in
            // another collective); the panic must reach the job instead.
            self.comm.fail(Error::Broken(format!(
                "an ibarrier() request for barrier {} was dropped while the thread panicked",
                self.epoch
            )));
            return;
        }
        if let Err(e) = self.comm.drive(self.epoch, true) {
            tracing::warn!(error = %e, "ibarrier request dropped and its completion failed");
        }
    }
}
