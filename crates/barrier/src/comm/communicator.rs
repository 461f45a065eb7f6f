//! The [`Communicator`]: its state, what it reports, and the barrier path (arrive, drive the
//! module, wait on the flag it names with the agreed policy, report who is missing). Creating
//! and splitting are in `create.rs`, the split-phase barrier in `request.rs`, shared windows in
//! `window.rs`.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::Poll;
use crate::ctrl::Ctrl;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::params::Params;
use crate::region::Region;
use crate::selector::Selection;
use crate::shm::{Segment, Shared};
use crate::wait::{Flag, WaitConfig, WaitError, WaitPolicy};
use crate::watch::{LazyWatch, Need, PeerWatch};

use super::names::BackendName;

pub(super) const NO_REGION: u64 = u64::MAX;
/// No invalid parameter (in the settings exchange).
pub(super) const NO_PARAM: u64 = u64::MAX;

pub(super) fn micros(d: Option<Duration>) -> u64 {
    d.map_or(0, |d| d.as_micros().clamp(1, u64::MAX as u128) as u64)
}

/// This rank's own reading of the settings that must match across ranks. It never fails:
/// a bad value is reported through `registry::check_all` and agreed; here it reads as the default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LocalSettings {
    pub(super) policy: WaitPolicy,
    pub(super) spin: u32,
    pub(super) yields: u32,
    pub(super) timeout: Option<Duration>,
    pub(super) stall: Option<Duration>,
}

impl LocalSettings {
    pub(super) fn load(params: &Params, shape: crate::shm::JobShape) -> Self {
        let policy = match params.get("BARRIER_WAIT_POLICY").map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            Some("spin") => WaitPolicy::Spin,
            Some("park") => WaitPolicy::Park,
            _ => WaitPolicy::auto(shape.ranks_on_machine, shape.cores),
        };
        // When ranks outnumber cores, a spinning waiter holds a core that the rank it waits for
        // needs (PAUSE is ~140 cycles on recent x86): waiters go straight to yielding, and park
        // only after many yields (a futex wake costs 15-20 us on the VM measured, a yield
        // hand-off about one). Measured on 2 cores: 8 ranks 12.0 -> 8.4 us, 4 ranks 4.0 -> 2.5 us.
        let default_spin = if policy == WaitPolicy::Spin { 2000 } else { 0 };
        let default_yields = if policy == WaitPolicy::Spin { 4 } else { 256 };
        LocalSettings {
            policy,
            spin: params.parse::<u32>("BARRIER_SPIN_COUNT", default_spin, "").unwrap_or(default_spin),
            yields: params.parse::<u32>("BARRIER_YIELD_COUNT", default_yields, "").unwrap_or(default_yields),
            timeout: params.duration("BARRIER_TIMEOUT").unwrap_or(None),
            stall: params.stall_report(),
        }
    }
}

pub(super) const USABLE: u8 = 0;
pub(super) const BROKEN: u8 = 2;

/// One rank's handle on a communicator.
pub struct Communicator {
    pub(super) seg: Arc<Segment>,
    pub(super) region: Region,
    pub(super) rank: usize,
    /// World rank of each member, indexed by communicator rank.
    pub(super) members: Vec<usize>,
    pub(super) params: Params,
    pub(super) wait: WaitConfig,
    /// Report a wait that lasts this long (BARRIER_STALL_REPORT).
    pub(super) stall: Option<Duration>,
    /// The last barrier started (by `barrier()` or `ibarrier()`): its epoch.
    pub(super) epoch: Cell<u64>,
    /// The last barrier handed to the module (`arrive`): at most one is in flight.
    pub(super) armed: Cell<u64>,
    /// The last barrier completed. Barriers complete in order: `done <= armed <= epoch`.
    pub(super) done: Cell<u64>,
    /// When the barrier in flight was handed to the module by a split-phase call (only kept
    /// when a timeout applies): a polled request times out from then, not from when it was
    /// queued behind earlier ones.
    pub(super) armed_at: Cell<Option<std::time::Instant>>,
    pub(super) ctrl_epoch: Cell<u64>,
    pub(super) engine: RefCell<Engine>,
    pub(super) arrival: Shared<Flag>,
    pub(super) selection: Selection,
    /// How reports name this communicator's ranks where the segment's names are not the user's
    /// (a node of the core's hierarchical barrier: [`Communicator::name_ranks`]).
    pub(super) names: Option<Arc<crate::shm::RankNames>>,
    /// This rank already left the region ([`crate::compose::NodeHalves::fail`]): dropping the
    /// communicator must not record it again (the region may have been freed and handed out
    /// since, to another communicator).
    pub(super) departed: Cell<bool>,
    /// Polls of split-phase requests on this communicator (their watch looks every 64th): kept
    /// here, not per request, because a resumed request is a new one at every poll.
    pub(super) polls: Cell<u32>,
    /// USABLE or BROKEN (see `broken`).
    pub(super) state: Cell<u8>,
    pub(super) broken: RefCell<Option<String>>,
}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("size", &self.members.len())
            .field("backend", &self.selection.backend)
            .field("algorithm", &self.selection.algorithm)
            .field("epoch", &self.epoch.get())
            .finish()
    }
}

impl Communicator {
    /// The control plane, for the collective call `call` (named in errors and stall reports).
    pub(super) fn ctrl(&self, call: &'static str) -> Ctrl<'_> {
        Ctrl::new(&self.region, self.rank, &self.members, &self.ctrl_epoch, self.wait.timeout, self.stall).call(call)
    }

    /// A failed control-plane call: this rank's control epoch has moved on without the others
    /// (or they are gone), so the communicator can never run another collective correctly.
    #[cold]
    pub(super) fn control_failed(&self, err: Error) -> Error {
        self.fail(err)
    }

    pub(super) fn watch(&self, epoch: u64) -> PeerWatch<'_> {
        PeerWatch::new(&self.region, &self.members, self.rank, Need::Barrier(epoch), self.stall)
            .named(self.names.as_deref())
    }

    /// This rank's number in the communicator, `0..size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// This rank's number in the world.
    pub fn world_rank(&self) -> usize {
        self.members[self.rank]
    }

    /// Names this communicator's ranks in its reports and errors as `names` says (a node's
    /// communicator of the hierarchical backend: the ranks and barriers of the communicator
    /// the user called).
    pub(crate) fn name_ranks(&mut self, names: crate::shm::RankNames) {
        self.names = Some(Arc::new(names));
    }

    /// The backend in use, e.g. `dissemination`.
    pub fn backend(&self) -> BackendName {
        BackendName(self.selection.backend)
    }

    /// The algorithm or mode of the backend in use, e.g. `central`.
    pub fn algorithm(&self) -> String {
        self.engine.borrow().algorithm()
    }

    /// Operations this rank has sent across the network for this communicator's barriers so
    /// far: transport puts and atomics to other nodes, and arrival messages to a barrier device.
    /// With the hierarchical backend only node roots send any. `barrier bench` divides it by
    /// the barriers run.
    pub fn network_ops(&self) -> u64 {
        self.engine.borrow().network_ops()
    }

    /// The transports this rank would use to reach each member, highest exclusivity first:
    /// self, shared memory within its node, the simulated network across simulated nodes.
    pub fn transport_ranking(&self) -> Vec<crate::transport::Route> {
        let s = self.seg.shape();
        let peer = |w: usize| crate::transport::Peer { world_rank: w, node: node_of(w, s.world_size, s.nodes) };
        let net = crate::backend::net_model(&self.params).unwrap_or_default();
        let fabric =
            crate::transport::segment::local_fabric(&self.seg, peer(self.world_rank()), self.wait.policy.wakes(), net);
        fabric.ranking(&self.members.iter().map(|&w| peer(w)).collect::<Vec<_>>())
    }

    /// How the backend was chosen: every backend with its outcome.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// Bytes of the job's shared segment in use now, and its size (`BARRIER_SHM_POOL_BYTES`
    /// plus the world's share). Freed communicators and windows come back.
    pub fn segment_usage(&self) -> (usize, usize) {
        self.seg.usage()
    }

    /// The agreed wait policy.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.wait.policy
    }

    /// Barriers completed (or started) on this communicator: the current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch.get()
    }

    /// Whether every barrier started on this communicator has completed on this rank and none
    /// failed: a layer that keeps a communicator's barrier for another communicator of the
    /// same ranks (`barrier_mpi::reuse`) hands over only a quiet one.
    pub fn is_quiet(&self) -> bool {
        self.done.get() == self.epoch.get() && self.check_usable().is_ok()
    }

    /// The node this rank runs on (simulated nodes with `barrier run --nodes M`).
    pub fn node(&self) -> usize {
        let s = self.seg.shape();
        node_of(self.world_rank(), s.world_size, s.nodes)
    }

    /// Number of distinct nodes among the members.
    pub fn num_nodes(&self) -> usize {
        let s = self.seg.shape();
        distinct_nodes(&self.members, s.world_size, s.nodes)
    }

    /// This rank's index among the members on its node.
    pub fn local_rank(&self) -> usize {
        let s = self.seg.shape();
        let me = self.node();
        self.members[..self.rank].iter().filter(|&&w| node_of(w, s.world_size, s.nodes) == me).count()
    }

    /// Members on this rank's node.
    pub fn local_size(&self) -> usize {
        let s = self.seg.shape();
        let me = self.node();
        self.members.iter().filter(|&&w| node_of(w, s.world_size, s.nodes) == me).count()
    }

    #[inline(always)]
    pub(super) fn check_usable(&self) -> Result<()> {
        if self.state.get() == USABLE {
            Ok(())
        } else {
            Err(self.unusable())
        }
    }

    #[cold]
    pub(super) fn unusable(&self) -> Error {
        Error::Broken(self.broken.borrow().clone().unwrap_or_default())
    }

    #[cold]
    pub(super) fn fail(&self, err: Error) -> Error {
        let err = err.timeout_given_in(self.params.source("BARRIER_TIMEOUT"));
        *self.broken.borrow_mut() = Some(err.to_string());
        self.state.set(BROKEN);
        err
    }

    #[cold]
    pub(super) fn wait_error(&self, watch: &PeerWatch<'_>, w: WaitError) -> Error {
        self.fail(watch.error(w))
    }

    pub(super) fn note_armed(&self) {
        if self.wait.timeout.is_some() {
            self.armed_at.set(Some(std::time::Instant::now()));
        }
    }

    /// Completes barriers in order up to `target`, handing each to the module when the one
    /// before it is complete. Blocks if `block`; otherwise returns `Ok(false)` at the first
    /// barrier that is not complete yet.
    pub(super) fn drive(&self, target: u64, block: bool) -> Result<bool> {
        while self.done.get() < target {
            self.check_usable()?;
            let next = self.done.get() + 1;
            let mut engine = self.engine.borrow_mut();
            if self.armed.get() < next {
                // The arrival record goes with the hand-over to the module (see `barrier`).
                self.arrival.signal(next, self.wait.policy.wakes());
                engine.arrive(next).map_err(|e| self.fail(e))?;
                self.armed.set(next);
                self.note_armed();
            }
            if block {
                self.finish_with(&mut engine, next)?;
            } else {
                match engine.progress(next) {
                    Ok(Poll::Ready) => {}
                    Ok(Poll::Pending { .. }) => return Ok(false),
                    Err(e) => return Err(self.fail(e)),
                }
            }
            self.done.set(next);
        }
        Ok(true)
    }

    /// Progresses the module until the barrier at `epoch` is complete for this rank. Inline:
    /// only the common end of a spinning barrier (the module's last wait, reached within the
    /// inline checks), so the caller stays small; everything else is [`Self::finish_waiting`].
    #[inline(always)]
    pub(super) fn finish_with(&self, engine: &mut Engine, epoch: u64) -> Result<()> {
        match engine.progress(epoch) {
            Ok(Poll::Ready) => return Ok(()),
            // (A recheck interval asks for calls while a wait goes on; a few checks are not one.)
            Ok(Poll::Pending { flag, target, last: true, .. }) if self.wait.reached_soon(flag, target) => return Ok(()),
            Err(e) => return Err(self.fail(e)),
            Ok(Poll::Pending { .. }) => {}
        }
        self.finish_waiting(engine, epoch)
    }

    /// [`Self::finish_with`] beyond its inline checks: waits with the policy, the watch (built
    /// only here) and the timeout, and calls the module again after each wait.
    #[inline(never)]
    pub(super) fn finish_waiting(&self, engine: &mut Engine, epoch: u64) -> Result<()> {
        if let Some(done) = engine.finish() {
            return done.map_err(|e| self.fail(e));
        }
        let watch = LazyWatch::new(|| self.watch(epoch));
        // When this barrier's wait started its clock, kept across recheck slices (hardware
        // modules), so that the timeout counts them all.
        let mut clock = None;
        // A module's tail spin is tried once per barrier (Poll::Pending's `spin`).
        let mut spin_left = true;
        let mut spin_once = |flag: &Flag, target: u64, spin: Option<Duration>| {
            let limit = spin.filter(|_| std::mem::take(&mut spin_left));
            limit.is_some_and(|limit| self.wait.spin_for(flag, target, limit))
        };
        loop {
            match engine.progress(epoch) {
                Ok(Poll::Ready) => return Ok(()),
                Ok(Poll::Pending { flag, target, recheck: None, last, spin, park }) => {
                    if !spin_once(flag, target, spin) {
                        // A park at once only where the signaller wakes (the policy parks).
                        let wait = if park && self.wait.policy.wakes() {
                            WaitConfig { spin: 0, yields: 0, ..self.wait }
                        } else {
                            self.wait
                        };
                        wait.wait(flag, target, &watch).map_err(|w| self.wait_error(watch.get(), w))?;
                    }
                    if last {
                        return Ok(());
                    }
                }
                Ok(Poll::Pending { flag, target, recheck: Some(slice), last, spin, park: _ }) => {
                    // Most hardware waits end spinning or after a yield or two: no clock read
                    // then (it would delay the return of a rank whose release lands during
                    // the read). What comes before the first slice starts its clock (the spin
                    // phase, a tail spin of at most 1 ms, eight yields) is not counted against
                    // the timeout; from then on every slice is, through the shared `clock`.
                    // (A zero slice asks to be polled again at once: the flag may not be
                    // the one that moves, so only the inline checks.)
                    let reached = if slice.is_zero() {
                        self.wait.reached_soon(flag, target)
                    } else {
                        self.wait.spun_until(flag, target) || spin_once(flag, target, spin)
                    };
                    if !reached {
                        let spun = WaitConfig { spin: 0, ..self.wait };
                        match spun.wait_or_recheck(flag, target, &watch, Some(slice), &mut clock) {
                            Ok(()) => {}
                            Err(WaitError::Recheck) => continue,
                            Err(w) => return Err(self.wait_error(watch.get(), w)),
                        }
                    }
                    if last {
                        return Ok(());
                    }
                }
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// Blocks until every rank of the communicator has called `barrier()` as many times as this
    /// rank. Everything a rank wrote before the call is visible to every rank after it returns.
    ///
    /// Errors: a timeout (`BARRIER_TIMEOUT`) naming the ranks that have not arrived, an abort
    /// because another rank died, a rank that left. After any of them the communicator is
    /// broken and every later call fails. With `ibarrier()` requests outstanding, they complete
    /// first (barriers complete in the order they were started).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// let arrived = AtomicUsize::new(0);
    /// barrier::threads::run(4, |world| {
    ///     arrived.fetch_add(1, Ordering::Relaxed);
    ///     world.barrier().unwrap();
    ///     // No rank gets here before every rank has counted itself.
    ///     assert_eq!(arrived.load(Ordering::Relaxed), 4);
    /// })
    /// .unwrap();
    /// ```
    #[inline]
    pub fn barrier(&self) -> Result<()> {
        self.check_usable()?;
        let epoch = self.epoch.get() + 1;
        self.epoch.set(epoch);
        if self.done.get() + 1 != epoch {
            return self.drive(epoch, true).map(|_| ());
        }
        // This rank's record that it handed barrier `epoch` to the module (one store to a line
        // only it writes; others read it to explain a wait (who has not arrived, whether a rank
        // that is gone had done its part), and the hardware module's flat fallback waits on it:
        // that module wakes its parked waiters when it takes the arrival). Made when the module
        // gets the barrier, not when it is called: a barrier queued behind outstanding
        // `ibarrier`s has done nothing for the others yet, and a rank that stops there must look
        // missing (to stall reports and to the check for ranks that exited).
        self.arrival.signal(epoch, false);
        let mut engine = self.engine.borrow_mut();
        if let Engine::Composed(composed) = &*engine {
            return self.composed_barrier(&**composed, epoch);
        }
        if let Err(e) = engine.arrive(epoch) {
            return Err(self.fail(e));
        }
        self.armed.set(epoch);
        self.finish_with(&mut engine, epoch)?;
        self.done.set(epoch);
        Ok(())
    }

    /// [`barrier`](Self::barrier) where the hierarchical backend composes its phases across
    /// nodes: the composer's blocking barrier, which waits in its own parts.
    #[inline(never)]
    fn composed_barrier(&self, composed: &dyn crate::engine::Composition, epoch: u64) -> Result<()> {
        self.armed.set(epoch);
        composed.barrier().map_err(|e| self.fail(e))?;
        self.done.set(epoch);
        Ok(())
    }

    /// Ends the whole job at once, from any rank (MPI_Abort): every rank waiting in a barrier
    /// or collective call returns [`Error::Aborted`] naming this rank, the launcher stops the
    /// others and exits with `code`. In thread mode it ends the whole process.
    pub fn abort(&self, code: i32) -> ! {
        let world = self.world_rank();
        // The code first: the launcher reports this rank and this code, even if another rank,
        // woken by the abort, exits before this one.
        self.seg.mark_exited(world, crate::shm::RankExit::Status(code));
        self.seg.set_abort(world);
        crate::text::say(&format!("barrier: world rank {world} called abort({code}); ending the job"));
        std::process::exit(code)
    }
}

/// Whether a control exchange that failed on this rank with `e` can complete for no member:
/// then what its creator allocated for it (a window's block, a split's region) is nobody's and
/// goes back at once. Only a member that left without arriving proves it (it never will, and
/// every member's exchange needs it). After a timeout, or an abort, others may still complete
/// (the release may land just after this rank gave up): the allocation stays, and is given back
/// through its handles or departures as usual (see docs/failures.md).
pub(super) fn nobody_completes(e: &Error) -> bool {
    matches!(e, Error::RankLeft { .. })
}

impl Drop for Communicator {
    /// Records that this rank left, after the last barrier it completed: members still waiting
    /// for it in a later barrier or collective stop with [`Error::RankLeft`] instead of hanging.
    fn drop(&mut self) {
        // Left already: the region may be another communicator's by now.
        if self.departed.get() {
            self.seg.communicator_dropped(self.world_rank());
            return;
        }
        // Dropped while unwinding: a barrier may have been cut short by the panic.
        if std::thread::panicking() {
            self.region.depart_panicking(self.rank, self.done.get());
        } else {
            self.region.depart(self.rank, self.done.get(), self.state.get() == BROKEN);
        }
        self.seg.communicator_dropped(self.world_rank());
    }
}

pub(crate) use crate::shm::node_of;

pub(super) fn distinct_nodes(members: &[usize], world_size: usize, nodes: usize) -> usize {
    let mut ns: Vec<usize> = members.iter().map(|&w| node_of(w, world_size, nodes)).collect();
    ns.sort_unstable();
    ns.dedup();
    ns.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_contiguous_blocks() {
        let nodes: Vec<usize> = (0..8).map(|r| node_of(r, 8, 3)).collect();
        assert_eq!(nodes, vec![0, 0, 0, 1, 1, 1, 2, 2]);
        assert_eq!(distinct_nodes(&[0, 1, 2, 3, 4, 5, 6, 7], 8, 3), 3);
        assert_eq!(node_of(5, 8, 1), 0);
        assert_eq!(node_of(5, 8, 100), 5, "more nodes than ranks: one rank per node");
    }
}
