//! The waiting half: the [`WaitPolicy`] a communicator agrees on, the [`WaitConfig`] that
//! carries it with the spin and yield counts and the timeout, and the wait loop itself (inline
//! fast check, then a `#[cold]` slow path that spins, yields and parks), with what can cut a
//! wait short ([`Watch`], [`WaitError`]).

use std::time::{Duration, Instant};

use super::flag::Flag;
use super::primitive::yield_now;
use super::timing::{Progress, PARK_SLICE, PROGRESS_EVERY, PROGRESS_PARK_SLICE};

/// The yield at which a slow wait starts its clock (if parking has not started it before); its
/// timeout, watch and recheck interval are checked every 64 yields (every 8 with a recheck
/// interval).
pub(super) const FIRST_CHECK: u32 = 8;

/// Checks made inline before the out-of-line slow path.
#[cfg(not(loom))]
const INLINE_SPINS: u32 = 16;
/// One check under loom: every spin is a branch of the model.
#[cfg(loom)]
const INLINE_SPINS: u32 = 1;

/// How ranks wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitPolicy {
    /// Spin, then yield; never park. Signallers skip the wake-up check. Right when every rank
    /// has a core of its own.
    Spin,
    /// Spin briefly, yield, then park on a futex. Right when ranks outnumber cores.
    Park,
}

impl WaitPolicy {
    /// The automatic choice: park when the job's ranks on this machine outnumber its cores.
    pub fn auto(ranks_on_machine: usize, cores: usize) -> Self {
        if ranks_on_machine > cores {
            WaitPolicy::Park
        } else {
            WaitPolicy::Spin
        }
    }

    /// Whether signallers must check for parked waiters.
    pub fn wakes(self) -> bool {
        matches!(self, WaitPolicy::Park)
    }

    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn code(self) -> u64 {
        match self {
            WaitPolicy::Spin => 0,
            WaitPolicy::Park => 1,
        }
    }

    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn from_code(code: u64) -> Self {
        if code == 1 {
            WaitPolicy::Park
        } else {
            WaitPolicy::Spin
        }
    }
}

impl std::fmt::Display for WaitPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WaitPolicy::Spin => "spin",
            WaitPolicy::Park => "park",
        })
    }
}

/// The waiting parameters of one communicator.
#[derive(Clone, Copy, Debug)]
pub struct WaitConfig {
    /// Spin or park.
    pub policy: WaitPolicy,
    /// Busy-wait rounds before the first yield.
    pub spin: u32,
    /// Yields before parking (Park policy only).
    pub yields: u32,
    /// Give up after this long (None: wait for ever).
    pub timeout: Option<Duration>,
    /// Called on the slow path of every wait (after the spin phase, every [`PROGRESS_EVERY`]
    /// yields and around every park): MPI's progress under `barrier-mpi`, `None` elsewhere. See
    /// the module docs.
    pub progress: Option<Progress>,
}

/// Why a wait ended without the flag reaching its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitError {
    /// The deadline passed after waiting this long.
    Timeout(Duration),
    /// The job was aborted because this world rank failed.
    Aborted(usize),
    /// The caller's recheck interval passed; call again (with the same clock) after
    /// re-examining the module.
    Recheck,
    /// This rank of the communicator left it (dropped it or exited) before doing its part, so
    /// the wait can never complete.
    PeerLeft(usize),
    /// The job itself is gone (its launcher died).
    JobGone,
}

/// What a slow wait consults to learn that it can never complete.
///
/// Called from the slow path only: every few dozen yields and once per park slice, never while
/// spinning. It may also report a long wait (the communicator's stall report) and return `Ok`.
pub trait Watch {
    /// `Err(why)` once the wait must end although its flag has not moved; `waited` is how long
    /// since the wait started its clock (see the module docs: at its eighth yield at the latest).
    fn check(&self, waited: Duration) -> Result<(), WaitError>;
}

/// A wait that nothing can cut short but its timeout (device engines, tests).
#[derive(Clone, Copy, Debug, Default)]
pub struct Unwatched;

impl Watch for Unwatched {
    fn check(&self, _waited: Duration) -> Result<(), WaitError> {
        Ok(())
    }
}

impl WaitConfig {
    /// Waits until `flag` reaches `epoch`, following the policy.
    #[inline(always)]
    pub fn wait(&self, flag: &Flag, epoch: u64, watch: &dyn Watch) -> Result<(), WaitError> {
        self.wait_or_recheck(flag, epoch, watch, None, &mut None)
    }

    /// [`WaitConfig::wait`] that also returns [`WaitError::Recheck`] once this call has waited
    /// `recheck` (hardware modules look at their device between slices). `clock` is when the
    /// whole wait started its clock: the caller keeps it across the slices of one wait (`None`
    /// at first), so the timeout and the watch count every slice whole.
    #[inline(always)]
    pub fn wait_or_recheck(
        &self,
        flag: &Flag,
        epoch: u64,
        watch: &dyn Watch,
        recheck: Option<Duration>,
        clock: &mut Option<Instant>,
    ) -> Result<(), WaitError> {
        if self.reached_soon(flag, epoch) {
            return Ok(());
        }
        self.wait_slow(flag, epoch, watch, recheck, clock)
    }

    /// The inline start of every wait: whether `flag` reaches `epoch` within a few checks. At 2
    /// spinning ranks the partner's store usually lands within them, and an out-of-line call
    /// on every barrier is measurable latency. Ranks that park (more ranks than cores) check
    /// once: their partner is likely not even running.
    #[inline(always)]
    pub fn reached_soon(&self, flag: &Flag, epoch: u64) -> bool {
        if self.policy != WaitPolicy::Spin {
            // No PAUSE after the one check: what follows (a tail spin, the policy's spin
            // phase, a yield) checks again or gives the core away, so a PAUSE here only delays
            // it. An oversubscribed barrier calls this twice per rank before its first yield
            // (`Communicator::finish_with` and the wait itself).
            return flag.reached(epoch);
        }
        for _ in 0..INLINE_SPINS {
            if flag.reached(epoch) {
                return true;
            }
            std::hint::spin_loop();
        }
        false
    }

    /// [`WaitConfig::reached_soon`], then the spin phase of the policy (no clock reads, no
    /// stores): whether `flag` reached `epoch` meanwhile. For callers that read the clock
    /// before a wait (hardware modules), so that waits that end spinning never read it; they
    /// then wait with `spin: 0`.
    #[inline]
    pub fn spun_until(&self, flag: &Flag, epoch: u64) -> bool {
        self.reached_soon(flag, epoch) || self.spin_phase(flag, epoch)
    }

    /// The spin phase: [`WaitConfig::spin`] checks, no clock reads, no stores; whether `flag`
    /// reached `epoch` meanwhile.
    #[inline]
    fn spin_phase(&self, flag: &Flag, epoch: u64) -> bool {
        for _ in 0..self.spin {
            if flag.reached(epoch) {
                return true;
            }
            std::hint::spin_loop();
        }
        false
    }

    /// Spins until `flag` reaches `epoch` or `limit` has passed: whether it reached. The clock
    /// is read every 64 checks, starting after the first 64, so a spin lasts `limit` plus those
    /// first checks (a few microseconds). No yield, no park, no stores: a waiter that knows its
    /// signaller runs on another CPU right now (see [`crate::backend::Poll::Pending`]'s `spin`).
    #[cold]
    #[inline(never)]
    pub fn spin_for(&self, flag: &Flag, epoch: u64, limit: Duration) -> bool {
        // Most tail spins end within the first 64 checks and never read the clock.
        let mut start = None;
        loop {
            for _ in 0..64 {
                if flag.reached(epoch) {
                    return true;
                }
                std::hint::spin_loop();
            }
            if start.get_or_insert_with(Instant::now).elapsed() >= limit {
                return flag.reached(epoch);
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn wait_slow(
        &self,
        flag: &Flag,
        epoch: u64,
        watch: &dyn Watch,
        recheck: Option<Duration>,
        clock: &mut Option<Instant>,
    ) -> Result<(), WaitError> {
        if self.spin_phase(flag, epoch) {
            return Ok(());
        }
        // This call's clock starts at the FIRST_CHECK-th yield (or the park phase), not here:
        // in an oversubscribed barrier most waits end after a yield or two, and a clock read
        // per wait was a measurable part of a rank's turn. The whole wait's clock (`clock`)
        // starts with the first call's; the recheck interval counts from this call's.
        let mut started: Option<Instant> = None;
        // Returns how long the whole wait and this call have waited.
        let check =
            |started: &mut Option<Instant>, clock: &mut Option<Instant>| -> Result<(Duration, Duration), WaitError> {
                let now = Instant::now();
                let this_call = now - *started.get_or_insert(now);
                let waited = now - *clock.get_or_insert(now - this_call);
                watch.check(waited)?;
                if let Some(limit) = self.timeout {
                    if waited >= limit {
                        return Err(WaitError::Timeout(waited));
                    }
                }
                if recheck.is_some_and(|r| this_call >= r) {
                    return Err(WaitError::Recheck);
                }
                Ok((waited, this_call))
            };
        let mut yields: u32 = 0;
        loop {
            // Yield phase: with the Spin policy this phase lasts for ever.
            if flag.reached(epoch) {
                return Ok(());
            }
            if self.policy == WaitPolicy::Park && yields >= self.yields {
                break;
            }
            yield_now();
            yields = yields.wrapping_add(1);
            if yields.is_multiple_of(PROGRESS_EVERY) {
                if let Some(progress) = self.progress {
                    progress.run();
                }
            }
            // (`started` is set before FIRST_CHECK only by a check, which comes first only
            // after the counter wraps.)
            if yields == FIRST_CHECK && started.is_none() {
                let now = Instant::now();
                started = Some(now);
                clock.get_or_insert(now);
            } else if yields.is_multiple_of(if recheck.is_some() { 8 } else { 64 }) {
                check(&mut started, clock)?;
            }
        }
        // Park phase. A wait that parks at once (no yields: the tail spin's escape) parks before
        // its first progress call: MPI's progress may yield the CPU (Open MPI's does when
        // oversubscribed), which would let the signaller on this CPU finish first and leave no
        // wake to move this rank.
        let mut progress_first = self.yields > 0;
        loop {
            if flag.reached(epoch) {
                return Ok(());
            }
            let (waited, this_call) = check(&mut started, clock)?;
            let mut slice = match self.timeout {
                Some(limit) => limit.saturating_sub(waited).clamp(Duration::from_micros(100), PARK_SLICE),
                None => PARK_SLICE,
            };
            if let Some(r) = recheck {
                slice = slice.min(r.saturating_sub(this_call).max(Duration::from_micros(50)));
            }
            if let Some(progress) = self.progress {
                // Before the park (what arrived while this rank yielded) and after it.
                if std::mem::replace(&mut progress_first, true) {
                    progress.run();
                }
                flag.park(epoch, slice.min(PROGRESS_PARK_SLICE));
                // Not when the wake was the release: MPI's progress may yield the CPU (Open
                // MPI's does when oversubscribed), which a released rank must not give away.
                if !flag.reached(epoch) {
                    progress.run();
                }
            } else {
                flag.park(epoch, slice);
            }
        }
    }
}
