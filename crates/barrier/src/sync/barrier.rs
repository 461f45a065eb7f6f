//! The drop-in for `std::sync::Barrier` (the protocol is in the module docs of `sync`).

use std::fmt;
#[cfg(not(loom))]
use std::time::Duration;

use crate::wait::primitive::{AtomicU64, Ordering};
use crate::wait::{Flag, WaitConfig, WaitError, WaitPolicy, Watch};

/// A barrier for `n` threads with the API of [`std::sync::Barrier`]; see the
/// [module docs](crate::sync).
pub struct Barrier {
    /// Arrivals so far, over every generation (alone on its line).
    tickets: crate::pad::CachePadded<AtomicU64>,
    /// Generations released so far.
    released: Flag,
    /// Threads per generation (at least 1: `new(0)` behaves as `new(1)`, as std's does).
    n: u64,
    wait: WaitConfig,
    #[cfg(not(loom))]
    stall: Option<Duration>,
    /// The latest generation (plus one) whose stall was reported: one report per generation.
    #[cfg(not(loom))]
    reported: AtomicU64,
}

/// What [`Barrier::wait`] returns: whether this thread is its generation's leader.
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    /// Whether this thread is the leader of its generation: exactly one thread of every
    /// generation is.
    pub fn is_leader(&self) -> bool {
        self.0
    }
}

impl fmt::Debug for BarrierWaitResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BarrierWaitResult").field("is_leader", &self.0).finish()
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier").field("n", &self.n).field("policy", &self.wait.policy).finish_non_exhaustive()
    }
}

impl Barrier {
    /// A barrier that releases its threads `n` at a time. The waits follow the environment's
    /// `BARRIER_WAIT_POLICY`, `BARRIER_SPIN_COUNT`, `BARRIER_YIELD_COUNT` and
    /// `BARRIER_STALL_REPORT` (read here, once); `auto` parks when `n` exceeds this process's
    /// cores. A value that does not parse is said on stderr (once per process) with the value
    /// used instead. Unlike std's, it is not a `const fn` (it reads those settings).
    #[cfg(not(loom))]
    pub fn new(n: usize) -> Barrier {
        let env = super::env::EnvWaits::read(n);
        let mut barrier = Barrier::with_policy(n, env.policy);
        barrier.wait.spin = env.spin.unwrap_or(barrier.wait.spin);
        barrier.wait.yields = env.yields.unwrap_or(barrier.wait.yields);
        barrier.stall = env.stall;
        barrier
    }

    /// A barrier for `n` threads that waits by `policy` (spin and yield counts as a
    /// communicator's defaults), with no stall report.
    pub fn with_policy(n: usize, policy: WaitPolicy) -> Barrier {
        // As a communicator's defaults (comm/communicator.rs): spinning waiters spin long and
        // yield a little; parking ones go straight to yielding and park after many yields.
        // (Under loom every spin and yield is a branch of the model: none.)
        let (spin, yields) = match policy {
            _ if cfg!(loom) => (0, 0),
            WaitPolicy::Spin => (2000, 4),
            _ => (0, 256),
        };
        Barrier {
            tickets: crate::pad::CachePadded(AtomicU64::new(0)),
            released: Flag::default(),
            n: n.max(1) as u64,
            wait: WaitConfig { policy, spin, yields, timeout: None, progress: None },
            #[cfg(not(loom))]
            stall: None,
            #[cfg(not(loom))]
            reported: AtomicU64::new(0),
        }
    }

    /// Blocks until `n` threads have called `wait` for this generation, then releases them
    /// all; exactly one of them gets a result whose [`is_leader`](BarrierWaitResult::is_leader)
    /// is true.
    pub fn wait(&self) -> BarrierWaitResult {
        let ticket = self.tickets.fetch_add(1, Ordering::AcqRel);
        let generation = ticket / self.n;
        if ticket % self.n == self.n - 1 {
            self.released.raise(generation + 1, self.wait.policy.wakes());
            return BarrierWaitResult(true);
        }
        let watch = Stalled { barrier: self, generation };
        // Without a timeout, and with a watch that never ends it, the wait ends only when the
        // generation is released.
        let waited = self.wait.wait(&self.released, generation + 1, &watch);
        debug_assert!(waited.is_ok(), "{waited:?}");
        BarrierWaitResult(false)
    }
}

/// The stall report of a thread waiting in `generation`.
struct Stalled<'a> {
    barrier: &'a Barrier,
    generation: u64,
}

impl Watch for Stalled<'_> {
    #[cfg(not(loom))]
    fn check(&self, waited: Duration) -> Result<(), WaitError> {
        let b = self.barrier;
        if b.stall.is_some_and(|s| waited >= s)
            && b.reported.fetch_max(self.generation + 1, Ordering::AcqRel) <= self.generation
        {
            let arrived = b.tickets.load(Ordering::Acquire).saturating_sub(self.generation * b.n).min(b.n);
            crate::text::say(&format!(
                "barrier::sync::Barrier: a thread has waited {waited:.1?} in generation {} of a barrier of {} \
                 threads: {arrived} of {} have arrived; still waiting (this report: BARRIER_STALL_REPORT)",
                self.generation, b.n, b.n
            ));
        }
        Ok(())
    }

    #[cfg(loom)]
    fn check(&self, _waited: std::time::Duration) -> Result<(), WaitError> {
        let _ = (self.barrier, self.generation);
        Ok(())
    }
}
