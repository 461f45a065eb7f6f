//! # barrier-shmem
//!
//! `libbarrier_shmem.so`, an interposer for unmodified OpenSHMEM programs: preloaded, it defines
//! `shmem_barrier_all`, `shmem_sync_all`, `shmem_barrier` and `shmem_sync` (and the
//! initialisation and finalisation calls around them) in front of the implementation's, and
//! serves them with the barrier library's selected barrier. It links no OpenSHMEM library:
//! the implementation's functions are found at run time (`pshmem_*`, the OpenSHMEM 1.5
//! profiling names, where the implementation exports them, else `dlsym(RTLD_NEXT, …)`), so
//! one build serves any implementation that exports the standard names.
//!
//! What it does at `shmem_init` and while it serves (the set-up, the node's barrier, the roots'
//! rounds over OpenSHMEM atomics, the active sets, the settings) is the OpenSHMEM layer,
//! [`barrier_openshmem`]; this crate is its surface: the exported names, when calls pass
//! through, the counts, and the private heap.
//!
//! Until set-up has finished (the implementation calls `shmem_barrier_all` inside its own
//! init), after a decline, from the start of `shmem_finalize`, and where the implementation's
//! own barrier was chosen (nodes of one PE), every call passes through.
//!
//! * `BARRIER_VERBOSE=1`: PE 0 says what serves the barriers (or why every PE declined), and at
//!   finalize how many calls were served and how many passed through.

/// Every block this library allocates lives in mappings of its own, never in the heap of the
/// program that loaded it: a block freed there would leave a hole that the program's next
/// `malloc` fills, moving the program's own blocks and with them how glibc trims its heap
/// (ISx ran 1.7x slower so; see the `barrier-heap` crate).
#[global_allocator]
static HEAP: barrier_heap::PrivateHeap = barrier_heap::PrivateHeap::new();

use std::ffi::{c_int, c_long};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use barrier::text::say;
use barrier_openshmem::real::{Forward, Real};
use barrier_openshmem::serve::{Serving, SetServing};
use barrier_openshmem::setup::{self, Outcome, Symmetric};
use barrier_openshmem::waits;

/// Where the library is: calls pass through until set-up finishes, and again from finalize.
static PHASE: AtomicU8 = AtomicU8::new(PASS);
const PASS: u8 = 0;
const SERVE: u8 = 1;

/// The implementation's functions serving needs, found in the first init call.
static REAL: OnceLock<Result<Real, String>> = OnceLock::new();
/// The implementation's definitions of our exported names, for the calls that pass through.
static FORWARD: OnceLock<Forward> = OnceLock::new();

fn forward() -> &'static Forward {
    FORWARD.get_or_init(Forward::find)
}
/// The barrier of every PE, once every PE agreed to serve (the lock keeps one thread in it at a
/// time).
static SERVING: Mutex<Option<Box<Serving>>> = Mutex::new(None);
/// The active sets' barriers. The lock is held only to take a reference: a thread waits in a
/// set's barrier holding no lock, so it never keeps another thread of this PE out of
/// `shmem_barrier_all` (see `serve`'s module docs).
static SETS: Mutex<Option<Arc<SetServing>>> = Mutex::new(None);
/// Symmetric memory to free at finalize.
static SYMMETRIC: Mutex<Option<Symmetric>> = Mutex::new(None);

/// Calls served and passed through, per entry point (for the verbose summary and the tests).
static COUNTS: [[AtomicU64; 2]; 4] = [const { [const { AtomicU64::new(0) }, const { AtomicU64::new(0) }] }; 4];
const NAMES: [&str; 4] = ["shmem_barrier_all", "shmem_sync_all", "shmem_barrier", "shmem_sync"];

fn real() -> Option<&'static Real> {
    REAL.get_or_init(Real::find).as_ref().ok()
}

fn lock<T>(m: &'static Mutex<T>) -> std::sync::MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// After the implementation's init: sets up (collective) and says what happened.
fn after_init() {
    let Some(real) = real() else {
        if let Some(Err(why)) = REAL.get() {
            say(&format!("barrier-shmem: passes every call through to the implementation: {why}"));
        }
        return;
    };
    if PHASE.load(Ordering::Acquire) == SERVE {
        return; // a second init
    }
    let params = barrier::Params::from_env();
    let verbose = params.flag("BARRIER_VERBOSE").unwrap_or(false);
    // SAFETY: the implementation is initialized.
    let me = unsafe { (real.my_pe)() };
    let (outcome, symmetric) = setup::run(real, &params);
    *lock(&SYMMETRIC) = Some(symmetric);
    match outcome {
        Outcome::Serve(serving) => {
            if verbose && me == 0 {
                say(&format!("barrier-shmem: {} (under {}): {}", NAMES[..2].join(", "), real.name, serving.describe()));
            }
            *lock(&SETS) = Some(serving.sets());
            *lock(&SERVING) = Some(serving);
            PHASE.store(SERVE, Ordering::Release);
        }
        Outcome::Decline(why) => {
            if verbose && me == 0 || why.starts_with(&format!("PE {me}:")) {
                say(&format!("barrier-shmem: every PE passes its barriers through to {}: {why}", real.name));
            }
        }
    }
}

/// Our barrier, or `None` when the call must pass through.
fn serve(kind: usize, quiet: bool) -> Option<()> {
    if PHASE.load(Ordering::Acquire) != SERVE {
        COUNTS[kind][1].fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let real = real()?;
    let guard = lock(&SERVING);
    let Some(serving) = guard.as_ref().filter(|s| !s.delegated()) else {
        COUNTS[kind][1].fetch_add(1, Ordering::Relaxed);
        return None;
    };
    if quiet {
        // SAFETY: the implementation's quiet: this PE's puts complete before it arrives.
        unsafe { (real.quiet)() };
    }
    if let Err(e) = serving.barrier() {
        // The program cannot go on past it, and the other PEs must not wait for this one.
        waits::end_job(real, NAMES[kind], &e);
    }
    COUNTS[kind][0].fetch_add(1, Ordering::Relaxed);
    Some(())
}

/// An active set's barrier when all its members share this PE's node, or `None` to pass through.
fn serve_set(kind: usize, quiet: bool, start: c_int, stride: c_int, size: c_int) -> Option<()> {
    if PHASE.load(Ordering::Acquire) != SERVE {
        return None;
    }
    let real = real()?;
    let sets = lock(&SETS).clone()?;
    if quiet {
        // SAFETY: the implementation's quiet (a no-op for the pass-through path's own).
        unsafe { (real.quiet)() };
    }
    match sets.set_barrier(start, stride, size) {
        Ok(true) => {
            COUNTS[kind][0].fetch_add(1, Ordering::Relaxed);
            Some(())
        }
        Ok(false) => None,
        Err(e) => waits::end_job(real, NAMES[kind], &e),
    }
}

/// `shmem_init`: the implementation's, then our set-up.
#[no_mangle]
pub extern "C" fn shmem_init() {
    let Some(init) = forward().init else { return no_implementation("shmem_init") };
    // SAFETY: the implementation's own init.
    unsafe { init() };
    after_init();
}

/// The program called a name the implementation does not define (it is preloaded into a
/// program that is not an OpenSHMEM program, or one linked statically): nothing can stand in.
fn no_implementation(name: &str) {
    say(&format!(
        "barrier-shmem: the program's OpenSHMEM defines no {name} (is libbarrier_shmem.so preloaded into an \
         OpenSHMEM program linked dynamically?); ending the process"
    ));
    std::process::exit(70);
}

/// `shmem_init_thread`: the implementation's, then our set-up.
///
/// # Safety
/// As the implementation's: `provided` must be writable (or null where it allows).
#[no_mangle]
pub unsafe extern "C" fn shmem_init_thread(requested: c_int, provided: *mut c_int) -> c_int {
    let Some(f) = forward().init_thread else {
        no_implementation("shmem_init_thread");
        return -1;
    };
    // SAFETY: the implementation's own, with the caller's arguments.
    let rc = unsafe { f(requested, provided) };
    if rc == 0 {
        after_init();
    }
    rc
}

/// `start_pes` (OpenSHMEM 1.0's init): the implementation's, then our set-up.
#[no_mangle]
pub extern "C" fn start_pes(npes: c_int) {
    let Some(f) = forward().start_pes else { return no_implementation("start_pes") };
    // SAFETY: the implementation's own, with the caller's argument.
    unsafe { f(npes) };
    after_init();
}

/// `shmem_finalize`: everything passes through from here on; our barrier and symmetric memory
/// go (collectively) before the implementation's finalize.
#[no_mangle]
pub extern "C" fn shmem_finalize() {
    let Some(finalize) = forward().finalize else { return no_implementation("shmem_finalize") };
    let was = PHASE.swap(PASS, Ordering::AcqRel);
    // A PE still waiting for this one (a missed barrier) learns it will never come.
    if let Some(sets) = lock(&SETS).take() {
        sets.depart();
    }
    if let Some(serving) = lock(&SERVING).take() {
        serving.depart();
    }
    if let Some(real) = real() {
        if let Some(symmetric) = lock(&SYMMETRIC).take() {
            symmetric.free(real);
        }
        let params = barrier::Params::from_env();
        // SAFETY: the implementation is still initialized.
        if params.flag("BARRIER_VERBOSE").unwrap_or(false) && unsafe { (real.my_pe)() } == 0 {
            let counts: Vec<String> = NAMES
                .iter()
                .zip(&COUNTS)
                .map(|(name, c)| {
                    format!(
                        "{name} {} served, {} passed through",
                        c[0].load(Ordering::Relaxed),
                        c[1].load(Ordering::Relaxed)
                    )
                })
                .collect();
            say(&format!(
                "barrier-shmem: PE 0 at finalize ({}): {}",
                if was == SERVE { "served" } else { "declined" },
                counts.join("; ")
            ));
        }
    }
    // SAFETY: the implementation's own finalize.
    unsafe { finalize() };
}

/// `shmem_barrier_all`: `shmem_quiet`, then our barrier of every PE.
#[no_mangle]
pub extern "C" fn shmem_barrier_all() {
    if serve(0, true).is_none() {
        match forward().barrier_all {
            // SAFETY: the implementation's own barrier.
            Some(f) => unsafe { f() },
            None => no_implementation("shmem_barrier_all"),
        }
    }
}

/// `shmem_sync_all`: our barrier of every PE (no quiet).
#[no_mangle]
pub extern "C" fn shmem_sync_all() {
    if serve(1, false).is_none() {
        match forward().sync_all {
            // SAFETY: the implementation's own.
            Some(f) => unsafe { f() },
            None => no_implementation("shmem_sync_all"),
        }
    }
}

/// Serves an active set's barrier (entry point `kind`, after a quiet if `quiet`): the whole
/// job's, or one whose PEs share a node; `false` (counted as passed through) for any other.
fn served_active_set(kind: usize, quiet: bool, start: c_int, stride: c_int, size: c_int) -> bool {
    // The whole job's set.
    // SAFETY: the implementation is initialized while we serve.
    if real().is_some_and(|real| start == 0 && stride == 0 && size == unsafe { (real.n_pes)() }) {
        return serve(kind, quiet).is_some();
    }
    if serve_set(kind, quiet, start, stride, size).is_some() {
        return true;
    }
    COUNTS[kind][1].fetch_add(1, Ordering::Relaxed);
    false
}

/// `shmem_barrier` over an active set: ours (after `shmem_quiet`) for the whole job or a set
/// whose PEs share a node, the implementation's for any other set. `pSync` is never touched by
/// us.
///
/// # Safety
/// As the implementation's: `p_sync` must be a symmetric work array as OpenSHMEM specifies.
#[no_mangle]
pub unsafe extern "C" fn shmem_barrier(start: c_int, stride: c_int, size: c_int, p_sync: *mut c_long) {
    let Some(f) = forward().barrier else { return no_implementation("shmem_barrier") };
    if served_active_set(2, true, start, stride, size) {
        return;
    }
    // SAFETY: the implementation's own, with the caller's arguments.
    unsafe { f(start, stride, size, p_sync) };
}

/// `shmem_sync` over an active set: ours for the whole job or a set whose PEs share a node,
/// the implementation's otherwise.
///
/// # Safety
/// As the implementation's: `p_sync` must be a symmetric work array as OpenSHMEM specifies.
#[no_mangle]
pub unsafe extern "C" fn shmem_sync(start: c_int, stride: c_int, size: c_int, p_sync: *mut c_long) {
    let Some(f) = forward().sync else { return no_implementation("shmem_sync") };
    if served_active_set(3, false, start, stride, size) {
        return;
    }
    // SAFETY: the implementation's own, with the caller's arguments.
    unsafe { f(start, stride, size, p_sync) };
}
