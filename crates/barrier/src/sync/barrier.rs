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
    /// The tail spin's hints, where threads outnumber this process's cores (made by `new`).
    #[cfg(not(loom))]
    tail: Option<Box<Tail>>,
}

/// The tail spin of the drop-in (as the central algorithm's among processes, `algo::tail`): a
/// thread that waits while every thread still missing from its generation last ran on another
/// CPU spins for the release (at most [`crate::wait::tail::DEFAULT_TAIL_SPIN`]) instead of
/// yielding its core to a thread that has nothing left to do, a context switch on the
/// barrier's path. The drop-in's threads have no ranks, so each thread takes a slot the first
/// time it waits here (a thread-local cache remembers it, by the barrier's serial number) and
/// records, at each arrival, its generation and its CPU there. A slot whose thread stopped
/// coming looks missing for good: a waiter on its CPU never spins (as before), one elsewhere
/// spins once per generation at most. Past [`crate::wait::tail::MAX_HINTS`] slots, later
/// threads take none and never spin. Hints only: nothing completes on them.
#[cfg(not(loom))]
#[derive(Debug)]
struct Tail {
    serial: u64,
    slots: std::sync::atomic::AtomicUsize,
    /// Per slot: the generation (plus one) of its thread's last arrival.
    at: Box<[crate::pad::CachePadded<std::sync::atomic::AtomicU64>]>,
    /// Per slot: its thread's CPU at that arrival, plus one (0: not known).
    cpus: Box<[crate::pad::CachePadded<std::sync::atomic::AtomicU64>]>,
}

#[cfg(not(loom))]
impl Tail {
    fn new() -> Box<Tail> {
        static SERIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let words = || (0..crate::wait::tail::MAX_HINTS).map(|_| Default::default()).collect();
        Box::new(Tail {
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
            slots: Default::default(),
            at: words(),
            cpus: words(),
        })
    }

    /// This thread's slot here, taken at its first wait (`None` once all are taken).
    fn slot(&self) -> Option<usize> {
        use std::cell::Cell;
        thread_local! {
            /// The last few barriers this thread waited at: (serial, slot + 1; 0: none).
            static SLOTS: Cell<[(u64, usize); 4]> = const { Cell::new([(0, 0); 4]) };
        }
        SLOTS.with(|cache| {
            let mut entries = cache.get();
            if let Some(&(_, slot)) = entries.iter().find(|e| e.0 == self.serial) {
                return slot.checked_sub(1);
            }
            let taken = self.slots.fetch_add(1, Ordering::Relaxed);
            let slot = if taken < self.at.len() { taken + 1 } else { 0 };
            entries.rotate_right(1);
            entries[0] = (self.serial, slot);
            cache.set(entries);
            slot.checked_sub(1)
        })
    }

    /// Records this thread's arrival at `generation` in `slot`; returns its CPU (plus one).
    fn arrived(&self, slot: usize, generation: u64) -> u64 {
        let cpu = crate::sys::current_cpu().map_or(0, |c| u64::from(c) + 1);
        self.at[slot].store(generation + 1, Ordering::Relaxed);
        if self.cpus[slot].load(Ordering::Relaxed) != cpu {
            self.cpus[slot].store(cpu, Ordering::Relaxed);
        }
        cpu
    }

    /// Whether every slot still missing from `generation` last ran on a CPU other than `cpu`
    /// (and there are few enough to look at).
    fn missing_all_elsewhere(&self, me: usize, generation: u64, cpu: u64) -> bool {
        let taken = self.slots.load(Ordering::Relaxed).min(self.at.len());
        let missing = (0..taken)
            .filter(|&j| j != me && self.at[j].load(Ordering::Relaxed) <= generation)
            .fold(0u64, |mask, j| mask | 1 << j);
        crate::wait::tail::spin_beside(missing, cpu, |j| self.cpus[j].load(Ordering::Relaxed))
    }
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
        // Threads outnumber cores: the tail spin (see `Tail`).
        if n > crate::sys::available_cores() {
            barrier.tail = Some(Tail::new());
        }
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
            #[cfg(not(loom))]
            tail: None,
        }
    }

    /// Blocks until `n` threads have called `wait` for this generation, then releases them
    /// all; exactly one of them gets a result whose [`is_leader`](BarrierWaitResult::is_leader)
    /// is true.
    pub fn wait(&self) -> BarrierWaitResult {
        let ticket = self.tickets.fetch_add(1, Ordering::AcqRel);
        let generation = ticket / self.n;
        #[cfg(not(loom))]
        let spin = self.tail.as_ref().and_then(|tail| {
            let slot = tail.slot()?;
            let cpu = tail.arrived(slot, generation);
            Some(tail).filter(|t| ticket % self.n != self.n - 1 && t.missing_all_elsewhere(slot, generation, cpu))
        });
        if ticket % self.n == self.n - 1 {
            self.released.raise(generation + 1, self.wait.policy.wakes());
            return BarrierWaitResult(true);
        }
        #[cfg(not(loom))]
        if spin.is_some() && self.wait.spin_for(&self.released, generation + 1, crate::wait::tail::DEFAULT_TAIL_SPIN) {
            return BarrierWaitResult(false);
        }
        // Spinning waiters watch the tickets themselves first: the generation is complete once
        // its n tickets are taken, and the leader's ticket reaches a waiter one cache-line
        // transfer sooner than its store of `released`, which needs the line again.
        if self.wait.policy == WaitPolicy::Spin && self.tickets_reach(generation) {
            return BarrierWaitResult(false);
        }
        let watch = Stalled { barrier: self, generation };
        // Without a timeout, and with a watch that never ends it, the wait ends only when the
        // generation is released.
        let waited = self.wait.wait(&self.released, generation + 1, &watch);
        debug_assert!(waited.is_ok(), "{waited:?}");
        BarrierWaitResult(false)
    }
}

/// Checks of the tickets before a spinning waiter turns to `released` (about the flag's own
/// spin phase).
const TICKET_SPINS: u32 = 2000;

impl Barrier {
    /// Whether every ticket of `generation` is taken within [`TICKET_SPINS`] checks (one under
    /// loom). The acquire load that sees it synchronizes with every arrival of the generation:
    /// each took its ticket with a read-modify-write, and those form one release sequence.
    #[inline]
    fn tickets_reach(&self, generation: u64) -> bool {
        let target = (generation + 1) * self.n;
        let checks = if cfg!(loom) { 1 } else { TICKET_SPINS };
        for _ in 0..checks {
            if self.tickets.load(Ordering::Acquire) >= target {
                return true;
            }
            std::hint::spin_loop();
        }
        false
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_tail_slot_and_the_spin_needs_every_missing_thread_elsewhere() {
        let tail = Tail::new();
        let mine = tail.slot().expect("a slot");
        assert_eq!(tail.slot(), Some(mine), "the same slot at the next wait");
        let other = std::thread::scope(|s| s.spawn(|| tail.slot()).join().expect("no panic")).expect("a slot");
        assert_ne!(other, mine);
        // This thread arrives at generation 3 on CPU 0 (1); the other thread last ran on CPU 1
        // (2) and has not arrived.
        tail.at[mine].store(4, Ordering::Relaxed);
        tail.cpus[other].store(2, Ordering::Relaxed);
        assert!(tail.missing_all_elsewhere(mine, 3, 1));
        assert!(!tail.missing_all_elsewhere(mine, 3, 2), "it shares this CPU: yield to it");
        tail.at[other].store(4, Ordering::Relaxed);
        assert!(tail.missing_all_elsewhere(mine, 3, 2), "nobody missing");
        // Another barrier: another serial, another slot table.
        assert_eq!(Tail::new().slot(), Some(0));
    }
}
