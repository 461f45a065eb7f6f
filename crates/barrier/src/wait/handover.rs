//! The hand-over: the call at which every rank of a node switches from one barrier to another,
//! agreed in shared memory without any rank waiting for another.
//!
//! A communicator's barrier built in the background (barrier-mpi's, for a program whose first
//! barrier is `MPI_Ibarrier`, which must not block) is ready on each rank at a different moment,
//! while the program goes on calling barriers, served meanwhile by the barrier it had. Every
//! rank makes the same barrier calls in the same order, numbered 0, 1, 2, …; all must switch at
//! the same number, and none may wait for another to decide it (the others may be computing,
//! or waiting for this rank's messages).
//!
//! Four words, in the node's segment, changed only under a lock word (each critical section is
//! a few loads and stores; a waiter yields after a few spins):
//!
//! - `ready`: ranks that have their new barrier;
//! - `issued`: the highest count of calls any ready rank has made, or is making, on the old
//!   barrier (each ready rank raises it before it makes such a call);
//! - `at`: 0 while undecided; the switch call plus one once decided; [`NEVER`] when a rank's
//!   build failed.
//!
//! A rank becomes ready with [`Handover::ready`] (`issued` raised to the calls it has made:
//! before then it told nobody, and nobody could decide). The last rank to become ready sets
//! `at` to `issued`: every call any rank has made on the old barrier is below it, since every
//! rank is ready and every ready rank's calls are counted, under the lock, before they are
//! made. Before each call a ready rank asks [`Handover::call`]: decided, the answer is whether
//! the call's number is at least the switch call; undecided, the call is counted in `issued`
//! and goes to the old barrier. Once decided, `at` never changes and is read without the lock.
//!
//! Model-checked in tests/loom.rs: ranks that become ready at any point of their calls decide
//! every call alike.

use super::primitive::{yield_now, AtomicU64, Ordering};

/// `at` once a rank's build failed: no call switches.
pub const NEVER: u64 = u64::MAX;

/// The hand-over's words (see the module docs), zero at first.
#[repr(C)]
#[derive(Debug, Default)]
pub struct HandoverWords {
    lock: AtomicU64,
    ready: AtomicU64,
    issued: AtomicU64,
    at: AtomicU64,
}

impl HandoverWords {
    /// Zeroed words (for tests and models; a segment's are zero when it is made).
    pub fn new() -> Self {
        HandoverWords {
            lock: AtomicU64::new(0),
            ready: AtomicU64::new(0),
            issued: AtomicU64::new(0),
            at: AtomicU64::new(0),
        }
    }
}

/// One rank's view of a node's hand-over among `ranks` ranks.
#[derive(Debug, Clone, Copy)]
pub struct Handover<'a> {
    words: &'a HandoverWords,
    ranks: u64,
}

/// Whether a call goes to the new barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// Not decided yet (or decided for a later call): the old barrier serves this call.
    Old,
    /// The new barrier serves this call and every later one.
    New,
    /// A rank's build failed: the old barrier serves every call.
    Never,
}

impl<'a> Handover<'a> {
    /// The hand-over of `ranks` ranks over `words`.
    pub fn new(words: &'a HandoverWords, ranks: usize) -> Self {
        Handover { words, ranks: ranks as u64 }
    }

    fn locked<T>(&self, f: impl FnOnce() -> T) -> T {
        let mut spins = 0u32;
        while self.words.lock.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            spins += 1;
            if spins < 16 && !cfg!(loom) {
                std::hint::spin_loop();
            } else {
                // The holder may be descheduled (more ranks than cores): let it run.
                yield_now();
            }
        }
        let out = f();
        self.words.lock.store(0, Ordering::Release);
        out
    }

    fn decided(at: u64, call: u64) -> Switch {
        match at {
            0 => Switch::Old,
            NEVER => Switch::Never,
            at if call + 1 >= at => Switch::New,
            _ => Switch::Old,
        }
    }

    /// This rank has its new barrier, having made `calls` calls on the old one (numbers 0 to
    /// `calls - 1`). Call it once per rank.
    pub fn ready(&self, calls: u64) {
        let w = self.words;
        self.locked(|| {
            if w.at.load(Ordering::Relaxed) != 0 {
                return;
            }
            w.issued.store(w.issued.load(Ordering::Relaxed).max(calls), Ordering::Relaxed);
            let ready = w.ready.load(Ordering::Relaxed) + 1;
            w.ready.store(ready, Ordering::Relaxed);
            if ready == self.ranks {
                // Stored plus one: 0 is "undecided".
                w.at.store(w.issued.load(Ordering::Relaxed) + 1, Ordering::Release);
            }
        });
    }

    /// This rank's build failed (before [`ready`](Self::ready)): no rank switches.
    pub fn fail(&self) {
        let w = self.words;
        self.locked(|| {
            if w.at.load(Ordering::Relaxed) == 0 {
                w.at.store(NEVER, Ordering::Release);
            }
        });
    }

    /// Which barrier serves call number `call` of a ready rank (calls are asked in order, each
    /// once). An undecided call is counted as the old barrier's before this returns.
    pub fn call(&self, call: u64) -> Switch {
        let w = self.words;
        let at = w.at.load(Ordering::Acquire);
        if at != 0 {
            return Self::decided(at, call);
        }
        self.locked(|| {
            let at = w.at.load(Ordering::Relaxed);
            if at == 0 {
                w.issued.store(w.issued.load(Ordering::Relaxed).max(call + 1), Ordering::Relaxed);
            }
            Self::decided(at, call)
        })
    }

    /// The switch call, once decided (`None`: undecided or never).
    pub fn switch_call(&self) -> Option<u64> {
        match self.words.at.load(Ordering::Acquire) {
            0 | NEVER => None,
            at => Some(at - 1),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_last_rank_ready_decides_after_every_call_made() {
        let words = HandoverWords::new();
        let (a, b) = (Handover::new(&words, 2), Handover::new(&words, 2));
        a.ready(1);
        // Rank a's calls 1 and 2 go to the old barrier and are counted.
        assert_eq!(a.call(1), Switch::Old);
        assert_eq!(a.call(2), Switch::Old);
        // Rank b, ready after 2 calls: the switch is call 3, after a's 0..=2.
        b.ready(2);
        assert_eq!(a.switch_call(), Some(3));
        assert_eq!(b.call(2), Switch::Old);
        assert_eq!(b.call(3), Switch::New);
        assert_eq!(a.call(3), Switch::New);
    }

    #[test]
    fn a_failed_build_keeps_every_call_on_the_old_barrier() {
        let words = HandoverWords::new();
        let (a, b) = (Handover::new(&words, 2), Handover::new(&words, 2));
        a.ready(0);
        b.fail();
        assert_eq!(a.call(5), Switch::Never);
        assert_eq!(a.switch_call(), None);
    }

    #[test]
    fn one_rank_switches_at_its_next_call() {
        let words = HandoverWords::new();
        let a = Handover::new(&words, 1);
        a.ready(4);
        assert_eq!(a.call(4), Switch::New);
    }
}
