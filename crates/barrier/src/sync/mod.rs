//! Barriers for a process's own threads: threads from `std::thread::scope`, a rayon pool or
//! crossbeam, where the library's ranks are not threads it spawned itself.
//!
//! * [`Barrier`]: a drop-in for [`std::sync::Barrier`]. The same API and contract (any `n`
//!   threads form a generation; a thread may take part in one generation and not the next;
//!   exactly one leader per generation), so replacing std's is a one-line change:
//!
//!   ```
//!   use barrier::sync::Barrier; // was: use std::sync::Barrier;
//!   let barrier = Barrier::new(4);
//!   std::thread::scope(|s| {
//!       for _ in 0..4 {
//!           s.spawn(|| {
//!               let leaders = barrier.wait().is_leader() as usize;
//!               let _ = leaders; // exactly one of the four is the leader
//!           });
//!       }
//!   });
//!   ```
//!
//!   Its wait is the library's ([`crate::wait`]): spin, then yield; when the threads
//!   outnumber the cores (or `BARRIER_WAIT_POLICY=park`), park on a futex after the yields.
//!   Unlike std's, a waiter among no more threads than cores keeps yielding and never sleeps:
//!   a thread that waits minutes keeps a core busy (set `BARRIER_WAIT_POLICY=park` for such
//!   programs). Past `BARRIER_STALL_REPORT` (30 s unless set) it says on stderr how many of the
//!   `n` threads have arrived, in which generation.
//! * [`Team`]: a fixed set of member threads, each holding its [`Member`] handle, at the
//!   floor: a member's wait is the dissemination barrier among the members (one store and one
//!   wait per round, nothing shared by all), with a timeout, a stall report naming the member
//!   waited for, and an error (never a hang) when a member is dropped, for example by a panic
//!   unwinding its thread, while others wait for it.
//!
//! # The drop-in's protocol
//!
//! Two words, each alone on its cache line: `tickets` counts every arrival ever made, and
//! `released` (a [`Flag`](crate::wait::Flag)) counts the generations released. A thread's
//! arrival takes a ticket `t` (one `fetch_add`): it belongs to generation `g = t / n`, and the
//! thread holding the last ticket of a generation (`t % n == n - 1`) is its leader: every one
//! of the generation's `n` arrivals came before its own in the ticket order, so it raises
//! `released` to `g + 1` (a `fetch_max`: a leader that was descheduled after its ticket cannot
//! lower it) and returns; the others wait until `released` reaches `g + 1`. The tickets'
//! read-modify-writes form one release sequence, so every write a thread made before its
//! arrival is visible to the leader, and through `released` (release, acquire) to every thread
//! of the generation after it. A thread that comes back at once takes a ticket of the next
//! generation and waits for that one: generations never mix. Spinning waiters (no more threads
//! than cores) watch `tickets` itself first: generation `g` is complete once the count reaches
//! `(g + 1) n`, and an acquire load that sees it synchronizes with every arrival of `g` (their
//! read-modify-writes form one release sequence); the leader's ticket reaches them one
//! cache-line transfer before its store of `released` would (2 threads: 48 ns a barrier, the
//! floor, where watching `released` took 82). `tests/loom.rs` model-checks the hand-over between
//! generations, for both kinds of waiter.

mod barrier;
#[cfg(not(loom))]
mod env;
#[cfg(not(loom))]
mod team;

pub use barrier::{Barrier, BarrierWaitResult};
#[cfg(not(loom))]
pub use team::{Member, Team};
