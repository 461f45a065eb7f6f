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

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

use barrier_mpi::mpi::ffi;
use barrier_mpi::mpi::raw::{AsRaw, FromRaw};
use barrier_mpi::mpi::topology::SimpleCommunicator;
use barrier_mpi::mpi::traits::*;
use barrier_mpi::FastBarrier;

/// The library's communicator (a duplicate of the world).
static LIBRARY: std::sync::OnceLock<Handle> = std::sync::OnceLock::new();

struct Handle(ffi::MPI_Comm);
// SAFETY: an MPI handle is a plain value; this program calls MPI from its main thread only.
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}
static RANK: AtomicI32 = AtomicI32::new(-1);

fn library() -> std::mem::ManuallyDrop<SimpleCommunicator> {
    let handle = LIBRARY.get().expect("the library's communicator").0;
    // SAFETY: the handle is the one `main` made with MPI_Comm_dup and freed by nobody before
    // the callback; ManuallyDrop keeps rsmpi from freeing it here (the callback does).
    std::mem::ManuallyDrop::new(unsafe { SimpleCommunicator::from_raw(handle) })
}

/// The library's attribute goes with a duplicate of its communicator (`MPI_COMM_DUP_FN`; none is
/// made here).
unsafe extern "C" fn copy_value(
    _old: ffi::MPI_Comm,
    _key: c_int,
    _extra: *mut c_void,
    value_in: *mut c_void,
    value_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a valid flag pointer and a place for the copy's value (a pointer).
    unsafe {
        *(value_out as *mut *mut c_void) = value_in;
        *flag = 1;
    }
    0
}

/// The library's `MPI_COMM_SELF` callback: a fast barrier on its communicator, then frees it.
unsafe extern "C" fn at_finalize(_comm: ffi::MPI_Comm, _key: c_int, _value: *mut c_void, _extra: *mut c_void) -> c_int {
    let rank = RANK.load(Ordering::Relaxed);
    let comm = library();
    match comm.fast_barrier() {
        Ok(()) => println!("self_hook: rank {rank}: the library's finalize barrier passed"),
        Err(e) => {
            barrier::text::say(&format!("self_hook: rank {rank}: the library's finalize barrier failed: {e}"));
            return 1;
        }
    }
    let mut raw = comm.as_raw();
    // SAFETY: the library's own duplicate, freed once, here.
    unsafe { ffi::MPI_Comm_free(&mut raw) };
    0
}

fn main() {
    let late = std::env::args().nth(1).as_deref() == Some("late");
    let universe = if late { barrier_mpi::mpi::initialize() } else { barrier_mpi::initialize() }.expect("MPI_Init");
    let world = universe.world();
    let rank = world.rank();
    RANK.store(rank, Ordering::Relaxed);
    // SAFETY: plain MPI calls on valid handles; every out-pointer is written by MPI.
    let key = unsafe {
        let mut dup = std::mem::MaybeUninit::uninit();
        ffi::MPI_Comm_dup(world.as_raw(), dup.as_mut_ptr());
        LIBRARY.set(Handle(dup.assume_init())).ok().expect("set once");
        let mut key: c_int = 0;
        ffi::MPI_Comm_create_keyval(Some(copy_value), Some(at_finalize), &mut key, std::ptr::null_mut());
        key
    };
    let set = || {
        // SAFETY: a null value; the callback frees nothing it points to.
        unsafe { ffi::MPI_Comm_set_attr(ffi::RSMPI_COMM_SELF, key, std::ptr::null_mut()) };
    };
    if rank % 2 == 0 {
        set();
    }
    // The first fast barriers: ours is built here (on the library's communicator and the world).
    let fail = |what: &str, e: barrier_mpi::Error| -> ! {
        barrier::text::say(&format!("self_hook: rank {rank}: {what} failed: {e}"));
        world.abort(1)
    };
    library().fast_barrier().unwrap_or_else(|e| fail("the first barrier", e));
    world.fast_barrier().unwrap_or_else(|e| fail("the world's first barrier", e));
    if rank % 2 == 1 {
        set();
    }
    for i in 0..100 {
        library().fast_barrier().unwrap_or_else(|e| fail(&format!("barrier {i}"), e));
    }
    println!("self_hook: rank {rank}: before MPI_Finalize");
    drop(world);
    drop(universe);
    println!("self_hook: rank {rank} finished");
}
