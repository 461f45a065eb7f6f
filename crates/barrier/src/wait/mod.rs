//! Waiting: spin, then yield, then park on a futex in shared memory.
//!
//! # The flag
//!
//! Every wait in this crate is "until this [`Flag`]'s value is at least `e`", and every signal
//! is "set this flag to `e`", where `e` is a 64-bit epoch that only grows. Values are never
//! reset, so a late reader never misses a signal and a stale one can never satisfy a newer wait.
//!
//! # The parking protocol (no lost wake-ups)
//!
//! A flag is one cache line holding `value` (the epoch), `waiters` (how many ranks are parked
//! or about to park) and `wakes`, the 32-bit word parked waiters sleep on (the kernel's futex
//! compares 32-bit words; the epoch is 64 bits and is never read as two halves).
//!
//! ```text
//! signaller                         waiter
//! value.store(e, Release)           waiters.fetch_add(1)
//! fence(SeqCst)              (F1)   fence(SeqCst)                     (F2)
//! if waiters.load() > 0             w = wakes.load(Acquire)
//!     wakes.fetch_add(1, Release)   v = value.load(Acquire)
//!     futex_wake_all(wakes)         if v < e { futex_wait(wakes, w) }
//!                                   waiters.fetch_sub(1)
//! ```
//!
//! F1 and F2 are sequentially consistent fences, so one of them comes first in their single
//! total order. If F1 comes first, the waiter's load after F2 sees `value >= e` and never
//! sleeps. If F2 comes first, the signaller's load after F1 sees `waiters > 0`, bumps `wakes`
//! and wakes the futex. If the waiter read `w` after the bump, it synchronised with it (release,
//! acquire) and so sees `value >= e`; if it read `w` before, then either the bump precedes its
//! `futex_wait`, whose comparison fails at once (`EAGAIN`), or the wake follows it and wakes it.
//! Either way the waiter cannot sleep through the signal. A waiter re-checks the value at every
//! wake and at least every park slice ([`PARK_SLICE`]), so a device that stores the epoch without
//! the wake (or `wakes` wrapping 2^32 times while one waiter sleeps) costs a slice, not a hang.
//!
//! Signallers skip F1 and the `waiters` load when the communicator's policy never parks
//! ([`WaitPolicy::Spin`]): that is the 2-rank, not-oversubscribed fast path, where one extra
//! fence would cost about as much as the whole barrier. All ranks of a communicator agree on the
//! policy when it is created, so a waiter never parks on a flag whose signaller will not wake it.
//!
//! # Layers
//!
//! The fast check is inline; everything else is in a `#[cold]` function. Spinning uses
//! `spin_loop` (PAUSE on x86); after [`WaitConfig::spin`] rounds it yields, after
//! [`WaitConfig::yields`] more it parks (if the policy allows). Time is read only on the slow
//! path: a wait starts its clock at its eighth yield or when it parks, whichever comes first (most
//! oversubscribed waits end after a yield or two and never read it), and then reads it every 64
//! yields (8 with a recheck interval) and once per park slice, to
//! check the timeout and to ask the caller's [`Watch`] whether the wait can still complete (the
//! job was aborted, a peer left, the launcher is gone) and whether it is time to report a stall.
//! A timeout therefore counts from that start, not from the first yield. A rank that parks
//! checks its flag once inline, with no PAUSE after the check.
//!
//! # Progress of an outside engine
//!
//! A communicator served under MPI must keep MPI's progress engine turning while it waits: MPI's
//! progress rule lets a program count on a rank blocked in `MPI_Barrier` to complete other MPI
//! operations (a rendezvous send to it, a one-sided read of its window), and a rank that never
//! calls into MPI would deadlock such a program. [`WaitConfig::progress`] is that engine's call
//! (`barrier-mpi` sets it on its node segments: one `MPI_Iprobe`). It runs on the slow path only,
//! never while spinning: once every [`PROGRESS_EVERY`] yields (most oversubscribed waits end
//! after a yield or two and never call it: MPI's progress may yield the CPU itself), once before
//! and after every park, and parks are cut to [`PROGRESS_PARK_SLICE`] so that a parked rank still
//! progresses MPI about a thousand times a second. A release found while spinning costs nothing.
//!
//! # The folder
//!
//! `primitive.rs` (the atomics and futex calls, real or loom's) ← `timing.rs` (slices, the
//! progress call) ← `flag.rs` (the [`Flag`] and its signalling half) ← `policy.rs` (the wait
//! loop). Beside them, `poll.rs`: the waits that poll something other than a flag (an MPI
//! request, a transport that needs this thread's calls), spinning or yielding between polls. Under `--cfg loom` the same files are built on loom's primitives.

mod flag;
pub mod handover;
mod policy;
pub mod poll;
pub(crate) mod primitive;
#[cfg_attr(loom, allow(dead_code))]
pub(crate) mod tail;
mod timing;

pub use flag::Flag;
pub use policy::{Unwatched, WaitConfig, WaitError, WaitPolicy, Watch};
pub use poll::{poll_asleep, poll_for, poll_until, Pace};
pub use timing::{skip_progress_on_this_thread, Progress, PARK_SLICE, PROGRESS_EVERY, PROGRESS_PARK_SLICE};

#[cfg(all(test, not(loom)))]
mod tests;
