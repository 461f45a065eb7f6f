//! The intercepted entry points and the per-communicator cache. See the crate docs.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use barrier::{Error, Params};
use barrier_mpi::mpi::ffi::{self, MPI_Comm};
use barrier_mpi::BarrierComm;
use barrier_mpi::{raw, reuse};

/// `MPI_SUCCESS`.
const SUCCESS: c_int = 0;

/// What a communicator got on its first `MPI_Barrier`. Boxed in the attribute, made once per
/// communicator: the size of the variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Entry {
    /// Our barrier.
    Served(BarrierComm),
    /// `PMPI_Barrier`, and why.
    Declined,
}

/// A communicator handle that may sit in a static.
#[derive(Clone, Copy, PartialEq)]
struct Handle(MPI_Comm);
// SAFETY: an MPI handle is a plain value (a pointer or an integer) that MPI lets any thread use.
unsafe impl Send for Handle {}

/// Communicators that carry our attribute, for `MPI_Finalize` to clear.
static CACHED: Mutex<Vec<Handle>> = Mutex::new(Vec::new());
/// Our attribute key, made on the first barrier.
static KEYVAL: OnceLock<c_int> = OnceLock::new();

/// Set by our `MPI_Finalize`: barriers after it are MPI's (and erroneous).
static FINALIZED: AtomicBool = AtomicBool::new(false);
/// Bumped whenever an entry is deleted: a thread's remembered lookup is valid only while this
/// has not moved (a freed handle may come back as a new communicator).
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's last lookup: the handle, its entry, and the generation it was made in.
    /// Saves the attribute lookup (about 15 ns in Open MPI) on the barrier path.
    static LAST: Cell<(usize, *const Entry, u64)> = const { Cell::new((0, std::ptr::null(), u64::MAX)) };
}

fn cached() -> std::sync::MutexGuard<'static, Vec<Handle>> {
    CACHED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Frees the entry when the communicator goes (MPI_Comm_free, or our MPI_Finalize).
unsafe extern "C" fn delete_attr(comm: MPI_Comm, _keyval: c_int, value: *mut c_void, _extra: *mut c_void) -> c_int {
    cached().retain(|h| *h != Handle(comm));
    // Every thread's remembered lookup is stale from here on.
    GENERATION.fetch_add(1, Ordering::SeqCst);
    if !value.is_null() {
        // SAFETY: the value was made by Box::into_raw in `entry_for` and is deleted once (MPI
        // calls the callback once per attribute).
        let entry = unsafe { Box::from_raw(value as *mut Entry) };
        // A barrier quiet here is kept for the next communicator of the same ranks
        // (`barrier_mpi::reuse`; at MPI_Finalize, dropped with the others right after).
        let kept_or_dropped = || match *entry {
            Entry::Served(c) => drop(reuse::park(c)),
            other => drop(other),
        };
        if catch_unwind(AssertUnwindSafe(kept_or_dropped)).is_err() {
            return ffi_err_other();
        }
    }
    SUCCESS
}

fn ffi_err_other() -> c_int {
    // The MPI library's own value (16 in Open MPI, 15 in MPICH), from its mpi.h.
    ffi::MPI_ERR_OTHER as c_int
}

/// Ends the job: after a collective set-up, a rank that cannot keep what it agreed to (or
/// cannot take part at all) would leave the others waiting in our barrier.
fn abort_job(why: &str) -> ! {
    raw::abort_job(&format!("barrier: {why}; aborting the job (other ranks would wait for this one for ever)"))
}

fn keyval() -> c_int {
    raw::keyval(&KEYVAL, delete_attr, "barrier")
}

/// The cached entry of `comm`, made (collectively) on its first barrier.
fn entry_for(comm: MPI_Comm, key: c_int) -> Option<&'static Entry> {
    match raw::get_attr(comm, key) {
        // Not a communicator we can use: PMPI_Barrier reports it.
        Err(_) => return None,
        // SAFETY: set below from Box::into_raw; it lives until the attribute is deleted, which
        // cannot happen during a barrier on the same communicator.
        Ok(Some(value)) => return Some(unsafe { &*(value as *const Entry) }),
        Ok(None) => {}
    }
    // The attribute owns the box from here on; `delete_attr` frees it.
    let entry = Box::into_raw(Box::new(make_entry(comm)));
    // SAFETY: `delete_attr` takes back exactly this box, once.
    if let Err(e) = unsafe { raw::set_attr(comm, key, entry.cast()) } {
        // The others run our barrier on this communicator from now on: this rank cannot fall
        // back to PMPI_Barrier alone.
        abort_job(&format!("cannot cache the barrier on the communicator ({e})"));
    }
    cached().push(Handle(comm));
    // SAFETY: as above.
    Some(unsafe { &*entry })
}

fn make_entry(comm: MPI_Comm) -> Entry {
    let params = Params::from_env();
    let verbose = params.flag("BARRIER_VERBOSE").unwrap_or(false);
    let rank = raw::rank(comm).unwrap_or(0);
    let size = raw::size(comm).unwrap_or(0);
    let made = match raw::is_inter(comm) {
        Ok(true) => Err(None),
        // SAFETY: MPI is active (checked by the caller) and `comm` is the application's valid
        // intracommunicator; every rank makes this call in its first MPI_Barrier on it.
        _ => match unsafe { reuse::from_raw_or_kept(comm, params) } {
            Ok((c, true)) => {
                if verbose && rank == 0 && size > 1 {
                    barrier::text::say(&format!(
                        "barrier: MPI_Barrier on a communicator of {size} ranks: the barrier of a freed communicator \
                         of the same ranks ({})",
                        c.summary()
                    ));
                }
                return Entry::Served(c);
            }
            Ok((c, false)) => Ok(c),
            Err(e) => Err(Some(e)),
        },
    };
    match made {
        Ok(c) => {
            // A fall back caused by a failure is always reported: by rank 0 and by the rank
            // that failed (with its own error).
            // Verbose: one short line per communicator of two or more ranks (MPI makes
            // communicators of one, MPI_COMM_SELF among them, whose barrier does nothing).
            if c.fell_back() && (rank == 0 || c.failed_here()) {
                barrier::text::say(&format!(
                    "barrier: MPI_Barrier on a communicator of {size} ranks: {}",
                    c.describe()
                ));
            } else if verbose && rank == 0 && size > 1 {
                barrier::text::say(&format!("barrier: MPI_Barrier on a communicator of {size} ranks: {}", c.summary()));
            }
            Entry::Served(c)
        }
        Err(None) => {
            if verbose && rank == 0 {
                barrier::text::say("barrier: MPI_Barrier on an intercommunicator: PMPI_Barrier (not ours)");
            }
            Entry::Declined
        }
        Err(Some(e)) => {
            // Agreed: every rank declines. The rank whose own setting is bad says which; rank 0
            // says what happens.
            let own = !matches!(e, Error::PeerInvalidParam { .. });
            if own || rank == 0 {
                barrier::text::say(&format!(
                    "barrier: MPI_Barrier on a communicator of {size} ranks falls back to PMPI_Barrier on every \
                     rank (rank {rank}): {e}"
                ));
            }
            Entry::Declined
        }
    }
}

fn barrier(comm: MPI_Comm) -> c_int {
    let pass = || {
        // SAFETY: the application's handle, as it gave it to MPI_Barrier.
        unsafe { ffi::PMPI_Barrier(comm) }
    };
    let key_of_comm = raw::to_word(comm);
    let generation = GENERATION.load(Ordering::Acquire);
    let (last_comm, last_entry, last_generation) = LAST.with(Cell::get);
    let entry = if last_comm == key_of_comm && last_generation == generation {
        // SAFETY: remembered from `entry_for` in this generation: the entry is still alive.
        Some(unsafe { &*last_entry })
    } else {
        if comm == raw::comm_null() || FINALIZED.load(Ordering::Relaxed) || !raw::mpi_active() {
            return pass();
        }
        let entry = entry_for(comm, keyval());
        if let Some(e) = entry {
            LAST.with(|l| l.set((key_of_comm, e as *const Entry, generation)));
        }
        entry
    };
    match entry {
        Some(Entry::Served(c)) => match c.barrier() {
            Ok(()) => SUCCESS,
            Err(e) => {
                barrier::text::say(&format!("barrier: MPI_Barrier failed on rank {}: {e}", c.rank()));
                let code = ffi_err_other();
                // SAFETY: raises the error through the application's error handler for `comm`.
                unsafe { ffi::PMPI_Comm_call_errhandler(comm, code) };
                code
            }
        },
        Some(Entry::Declined) | None => pass(),
    }
}

/// Drops every cached communicator (their attributes), then the key.
fn teardown() {
    let Some(&key) = KEYVAL.get() else { return };
    let comms: Vec<Handle> = cached().clone();
    for Handle(comm) in comms {
        // Every handle here carries our attribute (freed communicators were removed by
        // `delete_attr`); deleting it runs `delete_attr`.
        let _ = raw::delete_attr(comm, key);
    }
    raw::free_keyval(key);
}

fn guarded(what: &str, f: impl FnOnce() -> c_int) -> c_int {
    barrier_mpi::glue::guarded("barrier", &format!("the {what} interposer"), f)
}

/// `MPI_Barrier`: ours, or `PMPI_Barrier` where we decline.
#[no_mangle]
pub extern "C" fn MPI_Barrier(comm: MPI_Comm) -> c_int {
    guarded("MPI_Barrier", || barrier(comm))
}

/// `MPI_Finalize`: our communicators go first, then MPI.
#[no_mangle]
pub extern "C" fn MPI_Finalize() -> c_int {
    guarded("MPI_Finalize", || {
        if raw::mpi_active() {
            teardown();
            reuse::free_all();
        }
        FINALIZED.store(true, Ordering::SeqCst);
        GENERATION.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the application's own call, passed on.
        unsafe { ffi::PMPI_Finalize() }
    })
}

/// The Fortran barrier: converts the handle and comes here.
///
/// # Safety
/// `comm` points to a Fortran communicator handle; `ierr` is null or writable.
unsafe fn fortran_barrier(comm: *const ffi::RSMPI_Fint, ierr: *mut ffi::RSMPI_Fint) {
    // SAFETY: the caller's contract.
    let rc = MPI_Barrier(unsafe { ffi::RSMPI_Comm_f2c(*comm) });
    if !ierr.is_null() {
        // SAFETY: the caller's contract.
        unsafe { *ierr = rc };
    }
}

/// # Safety
/// `ierr` is null or writable.
unsafe fn fortran_finalize(ierr: *mut ffi::RSMPI_Fint) {
    let rc = MPI_Finalize();
    if !ierr.is_null() {
        // SAFETY: the caller's contract.
        unsafe { *ierr = rc };
    }
}

macro_rules! fortran_entries {
    ($($barrier:ident),* ; $($finalize:ident),*) => {
        $(
            /// Fortran `MPI_BARRIER(COMM, IERROR)` (one of the compilers' name manglings).
            ///
            /// # Safety
            /// Called from Fortran: `comm` points to an `INTEGER` handle, `ierr` to an `INTEGER`
            /// (or is null: the `mpi_f08` binding's optional `ierror`).
            #[no_mangle]
            pub unsafe extern "C" fn $barrier(comm: *const ffi::RSMPI_Fint, ierr: *mut ffi::RSMPI_Fint) {
                // SAFETY: forwarded from the Fortran caller.
                unsafe { fortran_barrier(comm, ierr) }
            }
        )*
        $(
            /// Fortran `MPI_FINALIZE(IERROR)`.
            ///
            /// # Safety
            /// Called from Fortran: `ierr` points to an `INTEGER` (or is null, as above).
            #[no_mangle]
            pub unsafe extern "C" fn $finalize(ierr: *mut ffi::RSMPI_Fint) {
                // SAFETY: forwarded from the Fortran caller.
                unsafe { fortran_finalize(ierr) }
            }
        )*
    };
}

fortran_entries!(
    mpi_barrier_, mpi_barrier__, mpi_barrier, MPI_BARRIER, mpi_barrier_f08_;
    mpi_finalize_, mpi_finalize__, mpi_finalize, MPI_FINALIZE, mpi_finalize_f08_
);
