//! How long waits sleep, and how often they turn an outside progress engine ([`Progress`]).

use std::time::Duration;

/// The longest a parked waiter sleeps before re-checking its flag, the job's abort word and
/// its deadline.
pub const PARK_SLICE: Duration = Duration::from_millis(50);

/// The longest a parked waiter sleeps when it also drives an outside progress engine
/// ([`crate::wait::WaitConfig::progress`]): a peer that needs this rank's MPI to progress (a rendezvous send
/// to it, a one-sided read) waits at most about this long per step.
pub const PROGRESS_PARK_SLICE: Duration = Duration::from_millis(1);

/// Yields between two calls of an outside progress engine ([`crate::wait::WaitConfig::progress`]) in the
/// yield phase. Not every yield: MPI's progress may itself yield the CPU (Open MPI does when
/// oversubscribed), and a wait that ends after a yield or two (the common oversubscribed
/// hand-off) must not pay a second context switch for it (measured: a pair of ranks sharing
/// one CPU, 2.0 us a barrier without the call, 4.0 us with it on every yield).
pub const PROGRESS_EVERY: u32 = 16;

/// A call that moves an outside progress engine (MPI's) a step, with one word of context (an
/// MPI communicator handle under `barrier-mpi`); see the module docs. Called on the thread that
/// waits, from the slow path of its waits only.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    call: fn(usize),
    context: usize,
}

impl Progress {
    /// `call(context)` is the step. Whoever sets it keeps `context` valid while any communicator
    /// that may call it lives.
    pub fn new(call: fn(usize), context: usize) -> Self {
        Progress { call, context }
    }

    /// Runs one step (nothing on a thread marked by [`skip_progress_on_this_thread`]).
    #[inline]
    pub fn run(self) {
        if !SKIP_PROGRESS.get() {
            (self.call)(self.context)
        }
    }
}

std::thread_local! {
    static SKIP_PROGRESS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as one whose waits never run the layer's progress call: a thread of
/// ours that the layer's engine does not know (MPI's thread level may not let it call MPI), such
/// as the node's set-up aside ([`crate::hierarchy::aside`]).
pub fn skip_progress_on_this_thread() {
    SKIP_PROGRESS.set(true);
}
