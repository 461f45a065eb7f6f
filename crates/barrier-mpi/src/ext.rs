//! Our barrier on every rsmpi communicator: the [`FastBarrier`] trait, its settings
//! ([`FastBarrierSettings`]) and the per-communicator cache behind it.
//!
//! # The cache
//!
//! The first [`fast_barrier`](FastBarrier::fast_barrier) (or `immediate_fast_barrier`) on an
//! MPI communicator builds a [`BarrierComm`] for it (collective, as the barrier is) and caches
//! it as an attribute of the MPI communicator, as the PMPI interposer does: later calls find it
//! with one `MPI_Comm_get_attr`. The attribute is never copied to a duplicate (a duplicate
//! gets its own on first use) and is deleted with the communicator (`MPI_Comm_free`, or the
//! drop of rsmpi's owner), which frees the barrier. At `MPI_Finalize` an attribute on
//! `MPI_COMM_SELF` (whose deletion MPI runs first thing in finalize, while MPI still works)
//! deletes every cached barrier that is left.
//!
//! MPI deletes `MPI_COMM_SELF`'s attributes in the reverse order of their setting. That hook is
//! set by [`initialize`] (or [`set_finalize_hook`]), else at the first barrier built. A library
//! whose own `MPI_COMM_SELF` callback runs a fast barrier at finalize needs ours set first, on
//! every rank: set at each rank's first build, after the library's attribute on some ranks and
//! before it on others, the callback's barrier finds ours deleted on some ranks and serving on
//! the others (a failed barrier there, a wait for ever here). Initialize MPI with
//! [`initialize`] in place of `mpi::initialize()`.
//!
//! A cached barrier is in use while a call runs on it and while a split-phase request of it
//! is pending: an entry deleted meanwhile (finalize with a request still pending) is freed when
//! the last use ends, never under it. One thread uses a communicator's barrier at a time, as
//! MPI's collectives require; a second thread meanwhile gets an error, not a race.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use barrier::{Error, Params, Result, WaitPolicy};

use crate::comm::BarrierComm;
use crate::raw::{self, Comm};
use crate::request::Request;

/// Our barrier on any rsmpi communicator, beside rsmpi's own `barrier()` and
/// `immediate_barrier()`: bring the trait into scope and call it on the communicator you have.
///
/// ```no_run
/// use barrier_mpi::FastBarrier;
/// use mpi::traits::*;
///
/// let universe = mpi::initialize().unwrap();
/// let world = universe.world();
/// world.fast_barrier()?; // MPI_Barrier's meaning, our barrier's speed
/// let mut request = world.immediate_fast_barrier()?; // arrive now...
/// // ... overlap independent work ...
/// while !request.test()? {} // ...complete later (or request.wait())
/// let half = world.split_by_color(mpi::topology::Color::with_value(world.rank() % 2)).unwrap();
/// half.fast_barrier()?;
/// println!("{}", world.fast_barrier_describe()?); // what runs it, and why
/// # Ok::<(), barrier_mpi::Error>(())
/// ```
///
/// Every method is collective where MPI's barrier is: every rank of the communicator calls it.
/// The first call builds and caches the barrier (see the [crate docs](crate)) with the
/// settings of the environment (`BARRIER_*`), or with those a [`FastBarrierSettings`] attached
/// before it.
pub trait FastBarrier {
    /// Blocks until every rank of the communicator has called it (`MPI_Barrier`): everything a
    /// rank wrote before the call is visible to every rank after it returns. Waiting keeps
    /// MPI progressing.
    fn fast_barrier(&self) -> Result<()>;

    /// Starts a barrier and returns at once (`MPI_Ibarrier`); complete the request with `test`
    /// or `wait`. Waiting and testing keep MPI progressing. See [`BarrierComm::ibarrier`] for
    /// how many may be outstanding.
    fn immediate_fast_barrier(&self) -> Result<FastBarrierRequest<'_>>;

    /// What runs this communicator's barriers, with every backend that declined and why (builds
    /// the barrier on first use): the backend inside the node, the path between nodes, or why it
    /// fell back to `MPI_Barrier`. [`BarrierComm::describe`].
    fn fast_barrier_describe(&self) -> Result<String>;

    /// The same in one short line for a log, without the declined backends
    /// ([`BarrierComm::summary`]), e.g. `dissemination: one node of 4 ranks: dissemination
    /// (central + tail spin) over shared memory, waits park (4 ranks of the job on 2 cores here)`.
    fn fast_barrier_summary(&self) -> Result<String>;
}

impl<C: mpi::topology::Communicator + ?Sized> FastBarrier for C {
    fn fast_barrier(&self) -> Result<()> {
        let entry = cached(self.as_raw(), None)?;
        let _busy = entry.busy()?;
        entry.comm.barrier()
    }

    fn immediate_fast_barrier(&self) -> Result<FastBarrierRequest<'_>> {
        let entry = cached(self.as_raw(), None)?;
        // The request borrows the entry itself, for as long as the use keeps it.
        let shared: &Entry = entry.entry;
        let busy = shared.busy()?;
        let request = shared.comm.ibarrier()?;
        drop(busy);
        Ok(FastBarrierRequest { request: Some(request), entry })
    }

    fn fast_barrier_describe(&self) -> Result<String> {
        let entry = cached(self.as_raw(), None)?;
        let _busy = entry.busy()?;
        Ok(entry.comm.describe())
    }

    fn fast_barrier_summary(&self) -> Result<String> {
        let entry = cached(self.as_raw(), None)?;
        let _busy = entry.busy()?;
        Ok(entry.comm.summary())
    }
}

/// A pending [`immediate_fast_barrier`](FastBarrier::immediate_fast_barrier). Dropping an
/// incomplete one waits for it (a blocking barrier), except while the thread panics.
#[must_use = "a dropped request waits for its barrier (a blocking barrier): call wait() or test() on it"]
pub struct FastBarrierRequest<'a> {
    // Declared before the entry: dropped (completed) while the entry is still held.
    request: Option<Request<'a>>,
    entry: Use<'a>,
}

impl std::fmt::Debug for FastBarrierRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Nothing of the communicator: another thread may be in a call on it.
        f.debug_struct("FastBarrierRequest").field("pending", &self.request.is_some()).finish()
    }
}

impl FastBarrierRequest<'_> {
    /// Makes progress (MPI's too) without blocking; `Ok(true)` once every rank has arrived.
    pub fn test(&mut self) -> Result<bool> {
        let _busy = self.entry.busy()?;
        match &mut self.request {
            Some(_) if !raw::mpi_active() => Err(finalized_while_pending()),
            Some(r) => r.test(),
            None => Ok(true),
        }
    }

    /// Blocks until every rank has arrived, keeping MPI progressing.
    pub fn wait(mut self) -> Result<()> {
        let _busy = self.entry.busy()?;
        match self.request.take() {
            Some(_) if !raw::mpi_active() => Err(finalized_while_pending()),
            Some(r) => r.wait(),
            None => Ok(()),
        }
    }
}

fn finalized_while_pending() -> Error {
    Error::InvalidArgument("MPI was finalized while this split-phase barrier was pending: it cannot complete".into())
}

/// `mpi::initialize()`, then our finalize hook set at once, before the program or a library
/// can set an `MPI_COMM_SELF` attribute of its own (see [`set_finalize_hook`]): a library's
/// callback that runs a fast barrier at `MPI_Finalize` then finds ours serving on every rank.
/// `None` where MPI was already initialized, as rsmpi's.
///
/// ```no_run
/// use barrier_mpi::FastBarrier;
/// use mpi::traits::*;
///
/// let universe = barrier_mpi::initialize().expect("MPI_Init");
/// universe.world().fast_barrier()?;
/// # Ok::<(), barrier_mpi::Error>(())
/// ```
pub fn initialize() -> Option<mpi::environment::Universe> {
    let universe = mpi::initialize()?;
    hook_or_say();
    Some(universe)
}

/// [`initialize`] with a threading level (`mpi::initialize_with_threading`): the level MPI
/// provides is returned beside the universe.
pub fn initialize_with_threading(threading: mpi::Threading) -> Option<(mpi::environment::Universe, mpi::Threading)> {
    let made = mpi::initialize_with_threading(threading)?;
    hook_or_say();
    Some(made)
}

/// Sets our finalize hook now, for a program whose MPI was initialized by other code (a C
/// `main`, another library): call it right after `MPI_Init`, before anything else sets an
/// `MPI_COMM_SELF` attribute. MPI deletes those in the reverse order of their setting, so a
/// library's callback set later runs first at `MPI_Finalize` and finds ours serving on every
/// rank. Idempotent; an error when MPI is not active, or when MPI refused the hook's key or
/// attribute.
pub fn set_finalize_hook() -> Result<()> {
    if !raw::mpi_active() {
        return Err(not_active());
    }
    raw::hook_finalize(&HOOK, at_finalize);
    match HOOK.get() {
        Some(Some(_)) => Ok(()),
        _ => Err(Error::Setup(
            "MPI refused the attribute on MPI_COMM_SELF that frees our barriers at MPI_Finalize".into(),
        )),
    }
}

/// [`set_finalize_hook`] inside initialization, where a refusal can only be said.
fn hook_or_say() {
    if let Err(e) = set_finalize_hook() {
        barrier::text::say(&format!("barrier-mpi: {e}; a library's finalize callback may meet our barriers freed"));
    }
}

fn not_active() -> Error {
    Error::InvalidArgument(
        "MPI is not initialized (or already finalized): call barriers between MPI_Init and MPI_Finalize".into(),
    )
}

impl Drop for FastBarrierRequest<'_> {
    fn drop(&mut self) {
        if let Some(request) = self.request.take() {
            // A use by another thread is an error of the program's; wait it out rather than
            // race it (dropping the request waits for the barrier).
            let busy = barrier::wait::poll_for(barrier::wait::Pace::Yield, None, || {
                Ok::<_, std::convert::Infallible>(self.entry.busy().ok())
            });
            let _busy = busy.map(|b| b.expect("no limit: polled until it came"));
            drop(request);
        }
    }
}

/// The settings of a communicator's barrier, given in code: each overrides the environment's
/// `BARRIER_*` value of the same setting (`barrier info` lists them all).
///
/// ```no_run
/// use std::time::Duration;
/// use barrier_mpi::{FastBarrier, FastBarrierSettings};
///
/// let universe = mpi::initialize().unwrap();
/// let world = universe.world();
/// FastBarrierSettings::new()
///     .timeout(Duration::from_secs(30)) // report the ranks that never arrive
///     .backend("dissemination,mpi") // only these, in this order
///     .attach(&world)?; // collective; before the first fast_barrier on `world`
/// world.fast_barrier()?;
/// # Ok::<(), barrier_mpi::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct FastBarrierSettings {
    params: Params,
}

impl Default for FastBarrierSettings {
    fn default() -> Self {
        Self::new()
    }
}

impl FastBarrierSettings {
    /// The environment's settings, to override one by one.
    pub fn new() -> Self {
        FastBarrierSettings { params: Params::from_env() }
    }

    /// `BARRIER_BACKEND`: only these backends (comma-separated, `mpi` for `MPI_Barrier`),
    /// in this order; creating the barrier fails if none can run.
    pub fn backend(self, names: &str) -> Self {
        self.set_as("BARRIER_BACKEND", names, "FastBarrierSettings::backend")
    }

    /// `BARRIER_TIMEOUT`: give up on a barrier after this long, naming the ranks that have not
    /// arrived (`Duration::ZERO`: wait for ever).
    pub fn timeout(self, limit: Duration) -> Self {
        let micros = limit.as_micros();
        let value = if limit.is_zero() { "0".to_string() } else { format!("{}us", micros.max(1)) };
        self.set_as("BARRIER_TIMEOUT", value, "FastBarrierSettings::timeout")
    }

    /// `BARRIER_WAIT_POLICY`: spin or park (by default: park when the job's ranks outnumber
    /// the cores).
    pub fn wait_policy(self, policy: WaitPolicy) -> Self {
        self.set_as("BARRIER_WAIT_POLICY", policy.to_string(), "FastBarrierSettings::wait_policy")
    }

    /// `BARRIER_MPI_NODE_BLOCK`: treat every `ranks` consecutive ranks of a machine as a node
    /// (the path between nodes on one machine).
    pub fn node_block(self, ranks: usize) -> Self {
        self.set_as(crate::catalogue::NODE_BLOCK, ranks.to_string(), "FastBarrierSettings::node_block")
    }

    /// Any other setting by its name (`BARRIER_*`); checked, with every other, when the barrier
    /// is built.
    pub fn set(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        let given_in = format!("FastBarrierSettings::set(\"{name}\", ..)");
        self.set_as(name, value, given_in)
    }

    /// Errors about this setting name it `given_in` (the method the user called).
    fn set_as(mut self, name: impl Into<String>, value: impl Into<String>, given_in: impl Into<String>) -> Self {
        self.params = self.params.set_as(name, value, given_in);
        self
    }

    /// Builds the barrier of `comm` with these settings and caches it for
    /// [`FastBarrier`]'s methods (collective). An error if `comm` already has one: settings
    /// apply when a barrier is built, so attach them before the first `fast_barrier`.
    pub fn attach<C: mpi::topology::Communicator + ?Sized>(&self, comm: &C) -> Result<()> {
        if !raw::mpi_active() {
            return Err(not_active());
        }
        let handle = comm.as_raw();
        let key = keyval();
        if raw::get_attr(handle, key)?.is_some() {
            return Err(Error::InvalidArgument(
                "this communicator's barrier is already built: attach settings before its first fast_barrier".into(),
            ));
        }
        cached(handle, Some(&self.params)).map(drop)
    }

    /// A barrier communicator over `comm`'s ranks with these settings, not cached: the
    /// advanced type, with `dup`, `split` and its reports (collective).
    pub fn build<C: mpi::topology::Communicator + ?Sized>(&self, comm: &C) -> Result<BarrierComm> {
        // SAFETY: rsmpi's communicators hold valid handles while they live, and MPI is
        // initialized while any of them exists (checked again inside).
        unsafe { BarrierComm::from_raw(comm.as_raw(), self.params.clone()) }
    }
}

/// A cached barrier: the communicator, how many uses hold it (with [`DELETED`] once MPI has
/// deleted the attribute), and whether a thread is running a call on it.
struct Entry {
    comm: BarrierComm,
    uses: AtomicUsize,
    busy: AtomicBool,
}

/// In [`Entry::uses`]: the attribute was deleted; the last use frees the entry.
const DELETED: usize = 1 << (usize::BITS - 1);

/// One use of a cached entry, for as long as a borrow of the rsmpi communicator lasts.
struct Use<'a> {
    entry: &'a Entry,
}

impl<'a> std::ops::Deref for Use<'a> {
    type Target = Entry;
    fn deref(&self) -> &Entry {
        self.entry
    }
}

impl Drop for Use<'_> {
    fn drop(&mut self) {
        if self.entry.uses.fetch_sub(1, Ordering::AcqRel) == DELETED | 1 {
            // SAFETY: the attribute was deleted and this was the last use: nothing refers to
            // the entry any more, which `Box::into_raw` made.
            drop(unsafe { Box::from_raw(self.entry as *const Entry as *mut Entry) });
        }
    }
}

/// A thread's exclusive run of a call on an entry.
struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Entry {
    fn busy(&self) -> Result<Busy<'_>> {
        if self.busy.swap(true, Ordering::Acquire) {
            return Err(Error::InvalidArgument(
                "another thread is in a barrier call on this communicator: MPI allows one collective at a time on a \
                 communicator"
                    .into(),
            ));
        }
        Ok(Busy(&self.busy))
    }
}

/// Our attribute key, made on first use.
static KEYVAL: OnceLock<c_int> = OnceLock::new();
/// Held while an entry is looked up and its use counted, while one is set, and while MPI
/// deletes one: a lookup never counts a use of an entry that is being freed.
static LOOKUP: Mutex<()> = Mutex::new(());
/// Communicators (as words) whose barrier a thread of this process is building: a second
/// thread must not build another (MPI allows one collective at a time on a communicator).
static BUILDING: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// Communicators that carry our attribute (as words), for the finalize hook.
static CACHED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// The finalize hook on `MPI_COMM_SELF`, set once.
static HOOK: OnceLock<Option<c_int>> = OnceLock::new();

fn lock<T>(m: &'static Mutex<T>) -> std::sync::MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn keyval() -> c_int {
    raw::keyval(&KEYVAL, delete_entry, "barrier-mpi")
}

/// MPI deletes our attribute (the communicator is freed, or finalize runs): the entry goes
/// once no use holds it.
unsafe extern "C" fn delete_entry(comm: Comm, _key: c_int, value: *mut c_void, _extra: *mut c_void) -> c_int {
    lock(&CACHED).retain(|&c| c != raw::to_word(comm));
    let _lookup = lock(&LOOKUP);
    if !value.is_null() {
        // SAFETY: the value was made by Box::into_raw in `cached` and MPI deletes it once.
        let entry = unsafe { &*(value as *const Entry) };
        if entry.uses.fetch_or(DELETED, Ordering::AcqRel) == 0 {
            // SAFETY: no use holds it: this is the last reference.
            drop(unsafe { Box::from_raw(value as *mut Entry) });
        }
    }
    0
}

/// `MPI_Finalize` deletes `MPI_COMM_SELF`'s attributes first: ours deletes every cached
/// barrier while MPI still works, then the key.
unsafe extern "C" fn at_finalize(_comm: Comm, _key: c_int, _value: *mut c_void, _extra: *mut c_void) -> c_int {
    let comms: Vec<usize> = lock(&CACHED).clone();
    if let Some(&key) = KEYVAL.get() {
        // MPI_COMM_SELF's own attributes are being deleted right now: MPI frees ours on it.
        let own = raw::to_word(raw::comm_self());
        for word in comms.into_iter().filter(|&w| w != own) {
            // Deleting it runs `delete_entry`.
            let _ = raw::delete_attr(raw::from_word(word), key);
        }
        raw::free_keyval(key);
    }
    0
}

/// The cached barrier of `comm`, built (collectively) with `params` (the environment's when
/// `None`) if it has none yet.
fn cached<'a>(comm: Comm, params: Option<&Params>) -> Result<Use<'a>> {
    if !raw::mpi_active() {
        return Err(not_active());
    }
    let key = keyval();
    {
        let _lookup = lock(&LOOKUP);
        if let Some(value) = raw::get_attr(comm, key)? {
            // SAFETY: the attribute holds the entry until MPI deletes it, which takes LOOKUP
            // (held here); a deleted entry stays until its last use ends, and the use counted
            // here keeps it for 'a (a borrow of the rsmpi communicator, which cannot be freed
            // meanwhile).
            let entry = unsafe { &*(value as *const Entry) };
            if entry.uses.fetch_add(1, Ordering::AcqRel) & DELETED != 0 {
                drop(Use { entry });
                return Err(Error::InvalidArgument(
                    "this communicator's barrier was deleted (MPI_Finalize ran)".into(),
                ));
            }
            return Ok(Use { entry });
        }
    }
    build(comm, key, params)
}

/// Builds `comm`'s barrier and caches it: collective, with every rank's outcome agreed.
fn build<'a>(comm: Comm, key: c_int, params: Option<&Params>) -> Result<Use<'a>> {
    let word = raw::to_word(comm);
    {
        let mut building = lock(&BUILDING);
        if building.contains(&word) {
            return Err(Error::InvalidArgument(
                "another thread is building this communicator's barrier: MPI allows one collective at a time on a \
                 communicator"
                    .into(),
            ));
        }
        building.push(word);
    }
    struct Built(usize);
    impl Drop for Built {
        fn drop(&mut self) {
            lock(&BUILDING).retain(|&w| w != self.0);
        }
    }
    let _built = Built(word);
    let params = params.cloned().unwrap_or_else(Params::from_env);
    // SAFETY: rsmpi's communicators hold valid handles while they live, MPI is active (checked
    // by the caller), and every rank makes this call (the barrier is collective).
    let made = unsafe { BarrierComm::from_raw(comm, params) }?;
    // Counted as this call's use from the start: nothing can free it under this call.
    let entry = Box::into_raw(Box::new(Entry { comm: made, uses: AtomicUsize::new(1), busy: AtomicBool::new(false) }));
    let set = {
        let _lookup = lock(&LOOKUP);
        // SAFETY: `delete_entry` takes back exactly this box, once.
        unsafe { raw::set_attr(comm, key, entry.cast()) }
    };
    // Every rank keeps the barrier or none does: a rank without it would build it again alone.
    // SAFETY: MPI did not take the box if `set` failed; otherwise the attribute holds it and
    // this call's use keeps it alive.
    let private = unsafe { &*entry }.comm.comm;
    let everyone = raw::all_agree(private, set.is_ok());
    match (set, everyone) {
        (Ok(()), Ok(true)) => {
            lock(&CACHED).push(word);
            raw::hook_finalize(&HOOK, at_finalize);
            // SAFETY: as above; this call's use is handed to the caller.
            Ok(Use { entry: unsafe { &*entry } })
        }
        (Ok(()), agreed) => {
            // The attribute holds it: deleting it marks it deleted, and this use frees it.
            let _ = raw::delete_attr(comm, key);
            // SAFETY: as above.
            drop(Use { entry: unsafe { &*entry } });
            Err(agreed.err().unwrap_or_else(|| {
                Error::Setup("another rank could not cache this communicator's barrier (its error says why)".into())
            }))
        }
        (Err(e), _) => {
            // SAFETY: MPI did not take it: still ours alone.
            drop(unsafe { Box::from_raw(entry) });
            Err(e)
        }
    }
}
