//! A library's own `MPI_COMM_SELF` callback that runs a fast barrier at `MPI_Finalize` (issue 50
//! item 9), through the rsmpi trait.
//!
//! MPI deletes `MPI_COMM_SELF`'s attributes first thing in `MPI_Finalize`, in the reverse order
//! of their setting. The "library" here sets its attribute before the program's first fast
//! barrier on even ranks and after it on odd ones; its callback runs a fast barrier on the
//! library's communicator. Our own finalize hook (which frees the cached barriers) must run
//! after every such callback on every rank, or the callback's barrier is deleted on some ranks
//! and serving on the others. `barrier_mpi::initialize()` sets it inside initialization, first.
//!
//! ```sh
//! cargo build --release -p barrier-mpi --features mpi --example self_hook
//! mpirun -np 3 target/release/examples/self_hook   # "self_hook: rank R finished" on every rank
//! ```
//!
//! `self_hook late` initializes with `mpi::initialize()` instead, so that our hook is set at the
//! first build, as it was before `barrier_mpi::initialize()` existed (the negative control:
//! the callbacks' barriers fail or wait).

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

use barrier_mpi::mpi::attribute::CommAttribute;
use barrier_mpi::mpi::ffi;
use barrier_mpi::mpi::topology::{AnyCommunicator, SimpleCommunicator};
use barrier_mpi::mpi::traits::*;
use barrier_mpi::FastBarrier;

thread_local! {
    /// The library's communicator (a duplicate of the world), until its finalize callback.
    static LIBRARY: RefCell<Option<SimpleCommunicator>> = const { RefCell::new(None) };
}
static RANK: AtomicI32 = AtomicI32::new(-1);

/// The library's finalize marker on `MPI_COMM_SELF` (rsmpi's attribute API): its deletion, in
/// `MPI_Finalize`, runs a fast barrier on the library's communicator, then frees it.
#[derive(Clone)]
struct AtFinalize;

impl CommAttribute for AtFinalize {
    unsafe extern "C" fn comm_delete_attr_fn(
        _comm: ffi::MPI_Comm,
        _key: c_int,
        value: *mut c_void,
        _extra: *mut c_void,
    ) -> c_int {
        // SAFETY: rsmpi's set_attr boxed the value; MPI deletes it once.
        drop(unsafe { Box::from_raw(value as *mut AtFinalize) });
        let rank = RANK.load(Ordering::Relaxed);
        // Freed (MPI_Comm_free) when it goes out of scope here, after the barrier.
        let Some(library) = LIBRARY.with(|l| l.borrow_mut().take()) else { return 1 };
        match library.fast_barrier() {
            Ok(()) => {
                println!("self_hook: rank {rank}: the library's finalize barrier passed");
                0
            }
            Err(e) => {
                barrier::text::say(&format!("self_hook: rank {rank}: the library's finalize barrier failed: {e}"));
                1
            }
        }
    }
}

fn with_library(f: impl FnOnce(&SimpleCommunicator)) {
    LIBRARY.with(|l| f(l.borrow().as_ref().expect("the library's communicator")));
}

fn main() {
    let late = std::env::args().nth(1).as_deref() == Some("late");
    let universe = if late { barrier_mpi::mpi::initialize() } else { barrier_mpi::initialize() }.expect("MPI_Init");
    let world = universe.world();
    let rank = world.rank();
    RANK.store(rank, Ordering::Relaxed);
    LIBRARY.with(|l| *l.borrow_mut() = Some(world.duplicate()));
    let set = || SimpleCommunicator::self_comm().set_attr(AtFinalize);
    if rank % 2 == 0 {
        set();
    }
    // The first fast barriers: ours is built here (on the library's communicator and the world).
    let fail = |what: &str, e: barrier_mpi::Error| -> ! {
        barrier::text::say(&format!("self_hook: rank {rank}: {what} failed: {e}"));
        world.abort(1)
    };
    with_library(|l| l.fast_barrier().unwrap_or_else(|e| fail("the first barrier", e)));
    world.fast_barrier().unwrap_or_else(|e| fail("the world's first barrier", e));
    if rank % 2 == 1 {
        set();
    }
    for i in 0..100 {
        with_library(|l| l.fast_barrier().unwrap_or_else(|e| fail(&format!("barrier {i}"), e)));
    }
    println!("self_hook: rank {rank}: before MPI_Finalize");
    drop(world);
    drop(universe);
    println!("self_hook: rank {rank} finished");
}
