//! The Rust side of the component: the functions `c/coll_fastbar.c` calls, and the storage of
//! the component structure it exports. See the crate docs for the protocol.

use std::ffi::{c_char, c_int, CStr};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use barrier::Error;
use barrier_mpi::background::{Background, Turn};
use barrier_mpi::channel::PrivateP2p;
use barrier_mpi::glue::{self, BuiltFor, ComponentStorage, McaValues, DONE, FAILED, GONE, PENDING};
use barrier_mpi::mpi::ffi::{self, MPI_Comm};
use barrier_mpi::{raw, reuse, BarrierComm, Detached};

/// The component structure Open MPI looks up by name (see [`ComponentStorage`]). Written
/// once, by the C side's constructor, before Open MPI can see it; read by Open MPI only.
#[no_mangle]
pub static mut mca_coll_fastbar_component: ComponentStorage = ComponentStorage::new();

const COMPONENT: &str = "coll/fastbar";
/// How this component's texts name Open MPI's own barrier.
const VOICE: glue::Voice =
    glue::Voice { component: COMPONENT, stays: "stays Open MPI's own on every rank", own: "Open MPI's own" };

/// One communicator's barrier. The lock is taken by every call: a user's barrier blocks on
/// it, the progress callback only tries it (so a re-entered callback, or one on another
/// thread while this communicator is busy, leaves the request for a later round). `None` once
/// `MPI_Finalize` took it.
pub struct Served {
    comm: Mutex<Option<Serving>>,
    /// Still building in the background (read by the progress callback without the lock, which
    /// a thread inside one of our barriers holds: a built communicator found busy is not a
    /// build to advance).
    building: std::sync::atomic::AtomicBool,
}

/// Built at a first `MPI_Barrier`, or building in the background since a first `MPI_Ibarrier`.
// One per communicator, already on the heap (in an `Arc`): boxing the larger variant would add a
// pointer chase to every barrier.
#[allow(clippy::large_enum_variant)]
enum Serving {
    Built(BarrierComm),
    Background(Background),
}

/// The previous module serves this call (the barrier is still building in the background).
const PREVIOUS: c_int = 4;
/// Build now, as a first `MPI_Barrier` does (see `Turn::BuildNow`).
const BUILD: c_int = 5;

/// A split-phase barrier between `fastbar_rs_ibarrier` and its completion.
pub enum Started {
    /// Of a barrier of ours.
    Ours(Option<Detached>),
    /// A flight of a communicator across nodes served ahead (`Turn::Ahead`).
    Ahead(u64),
}

extern "C" {
    /// The C glue's private channel (Open MPI's PML with reserved tags): see `PrivateP2p`.
    fn fastbar_reserve_tags(comm: MPI_Comm, count: c_int) -> c_int;
    fn fastbar_pml_isend(
        buf: *const u64,
        words: c_int,
        dest: c_int,
        tag: c_int,
        comm: MPI_Comm,
        req: *mut ffi::MPI_Request,
    ) -> c_int;
    fn fastbar_pml_irecv(
        buf: *mut u64,
        words: c_int,
        source: c_int,
        tag: c_int,
        comm: MPI_Comm,
        req: *mut ffi::MPI_Request,
    ) -> c_int;
    fn fastbar_on_this_machine(comm: MPI_Comm, rank: c_int) -> c_int;
}

/// The private channel a communicator across nodes whose first barrier is `MPI_Ibarrier` is
/// served over (barrier-mpi's `background`).
const P2P: PrivateP2p = PrivateP2p {
    reserve_tags: fastbar_reserve_tags,
    isend: fastbar_pml_isend,
    irecv: fastbar_pml_irecv,
    on_this_machine: fastbar_on_this_machine,
};

/// Every barrier not yet freed, for the finalize hook and the background builds' progress (the
/// C side holds one more reference each: `Arc::into_raw`).
static LIVE: Mutex<Vec<Arc<Served>>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<Arc<Served>>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

fn lock(served: &Served) -> MutexGuard<'_, Option<Serving>> {
    served.comm.lock().unwrap_or_else(|p| p.into_inner())
}

fn say(line: &str) {
    glue::say(COMPONENT, line);
}

fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> T {
    glue::guarded(COMPONENT, what, f)
}

/// Open MPI opens the component: 1 when it may serve, 0 when the ABI guard refuses (said once
/// per node).
///
/// # Safety
/// `built` points to the C glue's facts ([`glue::abi_refusal`]).
#[no_mangle]
pub unsafe extern "C" fn fastbar_rs_open(built: *const BuiltFor) -> c_int {
    // SAFETY: the caller's contract.
    let built = unsafe { &*built };
    let stays = "MPI_Barrier stays Open MPI's own";
    // SAFETY: the caller's contract.
    guarded("opening the component", || unsafe { glue::open("coll", built, stays, "barrier-ompi", "ompi") })
}

extern "C" {
    /// The C glue: advances the split-phase barriers still in flight until they complete (for
    /// up to a second), so that only one that did not complete is reported at finalize.
    fn fastbar_drain_in_flight();
}

/// The C glue's `MPI_COMM_SELF` attribute is deleted in `MPI_Finalize` (after the program's
/// own, which were set later: it is set inside `MPI_Init`): completes what it can of the
/// split-phase barriers in flight, then frees every barrier while MPI still works.
#[no_mangle]
pub extern "C" fn fastbar_rs_at_finalize() {
    // SAFETY: the C glue's function; MPI still works (the first thing in MPI_Finalize).
    guarded("MPI_Finalize", || unsafe { fastbar_drain_in_flight() });
    guarded("MPI_Finalize", || loop {
        // One at a time, taken off the list under its lock: dropping a barrier progresses MPI,
        // which may complete a request whose module then frees another entry (`fastbar_rs_free`
        // finds it gone from the list). The list's reference keeps this one alive meanwhile.
        let Some(served) = live().pop() else { break };
        let taken = lock(&served).take();
        drop(taken);
    });
    guarded("MPI_Finalize", reuse::free_all);
}

/// The info key with which a program keeps one communicator on Open MPI's own barrier
/// (`MPI_Comm_set_info` before its first barrier; rank 0's value decides).
pub const OPT_OUT_KEY: &str = "coll_fastbar_disable";

/// Whether `comm`'s info has [`OPT_OUT_KEY`] set to true.
fn opted_out(comm: MPI_Comm) -> bool {
    let mut info = std::mem::MaybeUninit::<ffi::MPI_Info>::uninit();
    // SAFETY: `comm` is valid (the caller's contract); MPI writes a new info object.
    if unsafe { ffi::PMPI_Comm_get_info(comm, info.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: written by the successful call above.
    let mut info = unsafe { info.assume_init() };
    let key = std::ffi::CString::new(OPT_OUT_KEY).expect("no NUL in the key");
    let mut value = [0 as c_char; 64];
    let mut flag: c_int = 0;
    // SAFETY: `value` has room for the length given plus the terminating NUL.
    let rc =
        unsafe { ffi::PMPI_Info_get(info, key.as_ptr(), (value.len() - 1) as c_int, value.as_mut_ptr(), &mut flag) };
    // SAFETY: `value` is NUL-terminated (zeroed, and MPI writes at most len - 1 bytes).
    let text = unsafe { CStr::from_ptr(value.as_ptr()) }.to_string_lossy().to_ascii_lowercase();
    // SAFETY: the info object from MPI_Comm_get_info is ours to free.
    unsafe { ffi::PMPI_Info_free(&mut info) };
    rc == 0 && flag != 0 && matches!(text.trim(), "true" | "1" | "yes" | "on")
}

/// Builds the barrier of `comm` (collective). 1 and `*out` set: served; 0: every rank
/// declines and the previous module serves.
///
/// # Safety
/// `comm` is the communicator whose first `MPI_Barrier` this is, on every rank; `values`
/// points to the component's MCA values (its strings null or NUL-terminated); `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn fastbar_rs_create(comm: MPI_Comm, values: *const McaValues, out: *mut *mut Served) -> c_int {
    guarded("the first MPI_Barrier of a communicator", || {
        // SAFETY: the caller's contract.
        let mut params = unsafe { (*values).params("coll") };
        if opted_out(comm) {
            // Agreed like any setting: rank 0's value decides for every rank.
            let given_in = format!("the communicator's info key {OPT_OUT_KEY}");
            params = params.set_as("BARRIER_BACKEND", barrier_mpi::MPI_BACKEND, given_in);
        }
        let verbose = params.flag("BARRIER_VERBOSE").unwrap_or(false);
        let rank = raw::rank(comm).unwrap_or(0);
        let size = raw::size(comm).unwrap_or(0);
        // Whether every rank's component serves it (disable, min_comm_size), agreed (a rank that
        // never joins is reported by the others); with it, each rank's offers of a freed
        // communicator's barrier for this one.
        let offers = reuse::offers(comm, &params);
        // SAFETY: the caller's contract.
        match unsafe { glue::join("coll", comm, &*values, params.stall_report(), offers.words()) } {
            Ok((None, all)) => {
                if let Some(c) = offers.adopt(&all) {
                    if verbose && rank == 0 {
                        say(&format!(
                            "MPI_Barrier on a communicator of {size} ranks: the barrier of a freed communicator of the \
                             same ranks ({})",
                            c.summary()
                        ));
                    }
                    // SAFETY: the caller's contract.
                    unsafe { *out = keep(Serving::Built(c)) };
                    return 1;
                }
            }
            Ok((Some(_), _)) => return 0,
            Err(e) => {
                say(&format!("MPI_Barrier on a communicator of {size} ranks stays Open MPI's own: {e}"));
                return 0;
            }
        }
        // SAFETY: MPI is initialized (this is an MPI_Barrier) and every rank of `comm` makes
        // this call in its first MPI_Barrier on it.
        let made = unsafe { BarrierComm::from_raw_in_component(comm, params) };
        let subject = format!("MPI_Barrier on a communicator of {size} ranks");
        match VOICE.first_barrier(made, &subject, rank == 0, verbose, &format!(" (rank {rank})")) {
            Some(c) => {
                // SAFETY: the caller's contract.
                unsafe { *out = keep(Serving::Built(c)) };
                1
            }
            None => 0,
        }
    })
}

fn failed(c: &BarrierComm, what: &str, e: &Error) -> c_int {
    failed_on(c.rank(), what, e)
}

fn failed_on(rank: usize, what: &str, e: &Error) -> c_int {
    say(&format!("{what} failed on rank {rank}: {e}"));
    FAILED
}

/// A flight's outcome (`Background::drive_ahead`) as the C side reads it.
fn ahead_outcome(done: barrier::Result<bool>, rank: usize, what: &str) -> c_int {
    match done {
        Ok(true) => DONE,
        Ok(false) => PENDING,
        Err(e) => failed_on(rank, what, &e),
    }
}

fn keep(serving: Serving) -> *mut Served {
    let building = std::sync::atomic::AtomicBool::new(matches!(serving, Serving::Background(_)));
    let served = Arc::new(Served { comm: Mutex::new(Some(serving)), building });
    live().push(served.clone());
    Arc::into_raw(served).cast_mut()
}

/// Starts building `comm`'s barrier in the background, in its first `MPI_Ibarrier` (which must
/// not block): 1 and `*out` set. A rank that cannot start it ends the job, saying why (the
/// others started the set-up's exchange in this call: it cannot decline alone).
///
/// # Safety
/// As for `fastbar_rs_create`, in the first `MPI_Ibarrier` of `comm`.
#[no_mangle]
pub unsafe extern "C" fn fastbar_rs_start(comm: MPI_Comm, values: *const McaValues, out: *mut *mut Served) -> c_int {
    guarded("the first MPI_Ibarrier of a communicator", || {
        // SAFETY: the caller's contract.
        let values = unsafe { &*values };
        // SAFETY: as above.
        let mut params = unsafe { values.params("coll") };
        if opted_out(comm) {
            let given_in = format!("the communicator's info key {OPT_OUT_KEY}");
            params = params.set_as("BARRIER_BACKEND", barrier_mpi::MPI_BACKEND, given_in);
        }
        // SAFETY: the caller's contract.
        match unsafe { Background::start(comm, params, values, P2P) } {
            Ok(b) => {
                // SAFETY: the caller's contract.
                unsafe { *out = keep(Serving::Background(b)) };
                1
            }
            // Every other rank started the set-up's exchange in this call and would wait for
            // this one's part at its first MPI_Barrier: this rank cannot decline alone.
            Err(e) => glue::abort_job(
                COMPONENT,
                &format!(
                    "world rank {}: MPI_Ibarrier: cannot start building a communicator's barrier here ({e}), and the \
                     other ranks started its exchange in this call and would wait for this one",
                    raw::rank(raw::comm_world()).unwrap_or(0)
                ),
            ),
        }
    })
}

/// Advances every barrier building in the background, without blocking: how many still are
/// building, or -1 when the list is busy (a re-entered progress callback, another thread).
#[no_mangle]
pub extern "C" fn fastbar_rs_advance_all() -> c_int {
    guarded("the progress of a barrier building in the background", || {
        // Referenced, and the list released: advancing progresses MPI, which may free a module
        // (its `fastbar_rs_free` takes the list's lock).
        // Only those building: a built one's last reference must not be dropped here (its
        // drop frees MPI communicators, which a progress callback must not).
        let Ok(list) = LIVE.try_lock().map(|l| {
            l.iter().filter(|s| s.building.load(std::sync::atomic::Ordering::Relaxed)).cloned().collect::<Vec<_>>()
        }) else {
            return -1;
        };
        let mut pending = 0;
        for served in &list {
            use std::sync::atomic::Ordering::Relaxed;
            let Ok(mut guard) = served.comm.try_lock() else {
                pending += c_int::from(served.building.load(Relaxed));
                continue;
            };
            if let Some(Serving::Background(b)) = guard.as_mut() {
                b.advance();
                served.building.store(b.building(), Relaxed);
                pending += c_int::from(b.building());
            }
        }
        pending
    })
}

/// A blocking barrier: `DONE`, `FAILED` (said on stderr), `GONE` (after finalize), `PREVIOUS`
/// or `BUILD` (building in the background).
///
/// # Safety
/// `served` came from `fastbar_rs_create` or `fastbar_rs_start` and was not freed.
#[no_mangle]
pub unsafe extern "C" fn fastbar_rs_barrier(served: *const Served) -> c_int {
    guarded("MPI_Barrier", || {
        // SAFETY: the caller's contract.
        let mut guard = lock(unsafe { &*served });
        let c = match guard.as_mut() {
            Some(Serving::Built(c)) => c,
            Some(Serving::Background(b)) => match b.call(true) {
                Turn::Ours(c) => c,
                Turn::Previous => return PREVIOUS,
                Turn::BuildNow => return BUILD,
                Turn::Ahead(flight) => {
                    let rank = b.rank();
                    return ahead_outcome(b.drive_ahead(flight, true), rank, "MPI_Barrier");
                }
                Turn::Failed(e) => return failed_on(b.rank(), "MPI_Barrier", &e),
            },
            None => return GONE,
        };
        match c.barrier() {
            Ok(()) => DONE,
            Err(e) => failed(c, "MPI_Barrier", &e),
        }
    })
}

/// Starts a split-phase barrier: `DONE` with `*out` set, `FAILED` or `GONE`.
///
/// # Safety
/// As for `fastbar_rs_barrier`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn fastbar_rs_ibarrier(served: *const Served, out: *mut *mut Started) -> c_int {
    guarded("MPI_Ibarrier", || {
        // SAFETY: the caller's contract.
        let mut guard = lock(unsafe { &*served });
        let c = match guard.as_mut() {
            Some(Serving::Built(c)) => &*c,
            Some(Serving::Background(b)) => match b.call(false) {
                Turn::Ours(c) => c,
                // (A split-phase call never gets `BuildNow`.)
                Turn::Previous | Turn::BuildNow => return PREVIOUS,
                Turn::Ahead(flight) => {
                    // SAFETY: the caller's contract.
                    unsafe { *out = Box::into_raw(Box::new(Started::Ahead(flight))) };
                    return DONE;
                }
                Turn::Failed(e) => return failed_on(b.rank(), "MPI_Ibarrier", &e),
            },
            None => return GONE,
        };
        let outcome = match c.ibarrier() {
            Ok(request) => {
                let started = Box::into_raw(Box::new(Started::Ours(Some(request.detach()))));
                // SAFETY: the caller's contract.
                unsafe { *out = started };
                DONE
            }
            Err(e) => failed(c, "MPI_Ibarrier", &e),
        };
        outcome
    })
}

/// Advances a split-phase barrier without blocking: `PENDING`, `DONE` or `FAILED`. `mpi_yields`:
/// Open MPI's progress loop yields the core itself when idle (`mpi_yield_when_idle`, which it
/// sets when it knows its ranks outnumber the cores), so a test that finds the barrier
/// incomplete does not yield a second time (4 ranks on 2 cores, `MPI_Ibarrier` + `MPI_Wait`:
/// about 3 us instead of 5.3 to 7.4).
///
/// # Safety
/// `served` as above; `started` came from its `fastbar_rs_ibarrier` and was not freed.
#[no_mangle]
pub unsafe extern "C" fn fastbar_rs_test(served: *const Served, started: *mut Started, mpi_yields: c_int) -> c_int {
    guarded("the progress of MPI_Ibarrier", || {
        // SAFETY: the caller's contract.
        let (served, started) = unsafe { (&*served, &mut *started) };
        let mut guard = match served.comm.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            // This thread is inside this communicator's barrier (a re-entered progress
            // callback), or another thread is: later.
            Err(TryLockError::WouldBlock) => return PENDING,
        };
        let (c, started) = match (guard.as_mut(), started) {
            (Some(Serving::Background(b)), Started::Ahead(flight)) => {
                let rank = b.rank();
                let outcome = ahead_outcome(b.drive_ahead(*flight, false), rank, "MPI_Ibarrier");
                if outcome == PENDING && mpi_yields == 0 && b.waits_yield() {
                    // As the node's requests do where ranks may outnumber cores: the rank this
                    // one waits for may need the core.
                    barrier::wait::Pace::Yield.pause();
                }
                return outcome;
            }
            (Some(Serving::Built(c)), Started::Ours(started)) => (&*c, started),
            (Some(Serving::Background(b)), Started::Ours(started)) => {
                (b.switched().expect("a split-phase barrier of ours runs once switched"), started)
            }
            (Some(Serving::Built(_)), Started::Ahead(_)) => unreachable!("a flight belongs to a barrier served ahead"),
            (None, _) => {
                say("MPI_Ibarrier still pending at MPI_Finalize");
                return FAILED;
            }
        };
        let Some(detached) = started.take() else { return DONE };
        let mut request = match c.resume(detached) {
            Ok(r) => r,
            Err(e) => return failed(c, "MPI_Ibarrier", &e),
        };
        let done = if mpi_yields != 0 { request.poll() } else { request.test() };
        match done {
            Ok(true) => DONE,
            Ok(false) => {
                *started = Some(request.detach());
                PENDING
            }
            Err(e) => failed(c, "MPI_Ibarrier", &e),
        }
    })
}

/// Frees a split-phase barrier's state (it is complete, or the job is ending).
///
/// # Safety
/// `started` came from `fastbar_rs_ibarrier`, is freed once, or is null.
#[no_mangle]
pub unsafe extern "C" fn fastbar_rs_request_free(started: *mut Started) {
    if !started.is_null() {
        // SAFETY: the caller's contract.
        drop(unsafe { Box::from_raw(started) });
    }
}

/// Frees a communicator's barrier (its module is destroyed: the communicator was freed).
///
/// # Safety
/// `served` came from `fastbar_rs_create` or `fastbar_rs_start` and is freed once.
#[no_mangle]
pub unsafe extern "C" fn fastbar_rs_free(served: *mut Served) {
    guarded("MPI_Comm_free", || {
        live().retain(|a| !std::ptr::eq(Arc::as_ptr(a), served));
        // SAFETY: the caller's contract: the C side's reference, given up once.
        let served = unsafe { Arc::from_raw(served.cast_const()) };
        // The last reference (no progress callback holds one now) to a built barrier: kept
        // for the next communicator of the same ranks where it can serve one (`reuse`).
        // Otherwise dropped while MPI works (MPI_Comm_free), or already taken at MPI_Finalize.
        let left = match Arc::try_unwrap(served) {
            Ok(served) => match served.comm.into_inner().unwrap_or_else(|p| p.into_inner()) {
                Some(Serving::Built(c)) => reuse::park(c).map(Serving::Built),
                other => other,
            },
            Err(shared) => {
                drop(shared);
                None
            }
        };
        drop(left);
    })
}
