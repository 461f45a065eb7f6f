//! The MPI calls this crate makes, each checked and turned into a [`barrier::Error`].
//!
//! Every call goes to the `PMPI_` entry point: the interposer (`barrier-pmpi`) replaces
//! `MPI_Barrier` and `MPI_Finalize`, and profiling tools replace any `MPI_` name, so the
//! library's own traffic must neither re-enter the interposer nor show up in a profile of the
//! application.

use std::ffi::{c_int, c_void};

use barrier::{Error, Result};
use mpi::ffi;

/// An MPI communicator handle (`MPI_Comm`).
pub type Comm = ffi::MPI_Comm;

/// A raw request handle (`MPI_Request`).
pub type Request = ffi::MPI_Request;

/// `MPI_SUCCESS` (0 in every implementation).
const SUCCESS: c_int = 0;

/// MPI's text for an error code.
pub fn error_string(code: c_int) -> String {
    let mut buf = vec![0u8; 1024];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING (256 in Open MPI, 1024 in MPICH) bytes.
    let rc = unsafe { ffi::PMPI_Error_string(code, buf.as_mut_ptr().cast(), &mut len) };
    if rc != SUCCESS {
        return format!("MPI error code {code}");
    }
    buf.truncate(len.clamp(0, 1024) as usize);
    String::from_utf8_lossy(&buf).into_owned()
}

/// `Ok` for `MPI_SUCCESS`, else the error naming the call.
pub(crate) fn check(rc: c_int, call: &str) -> Result<()> {
    if rc == SUCCESS {
        Ok(())
    } else {
        Err(Error::Transport(format!("{call} failed: {}", error_string(rc))))
    }
}

/// `MPI_COMM_WORLD`.
pub fn comm_world() -> Comm {
    // SAFETY: a constant handle that rsmpi's C shim exports; reading it has no side effect.
    unsafe { ffi::RSMPI_COMM_WORLD }
}

/// `MPI_COMM_SELF`.
pub fn comm_self() -> Comm {
    // SAFETY: as for `comm_world`.
    unsafe { ffi::RSMPI_COMM_SELF }
}

/// `MPI_COMM_NULL`.
pub fn comm_null() -> Comm {
    // SAFETY: as for `comm_world`.
    unsafe { ffi::RSMPI_COMM_NULL }
}

fn undefined() -> c_int {
    // SAFETY: as for `comm_world`.
    unsafe { ffi::RSMPI_UNDEFINED }
}

fn uint64() -> ffi::MPI_Datatype {
    // SAFETY: as for `comm_world`.
    unsafe { ffi::RSMPI_UINT64_T }
}

/// Whether `MPI_Init` has been called and `MPI_Finalize` has not.
pub fn mpi_active() -> bool {
    let (mut init, mut fini) = (0, 0);
    // SAFETY: both may be called at any time, before MPI_Init and after MPI_Finalize included.
    unsafe {
        ffi::PMPI_Initialized(&mut init);
        ffi::PMPI_Finalized(&mut fini);
    }
    init != 0 && fini == 0
}

/// Whether MPI lets any thread call it as long as the calls do not overlap
/// (`MPI_THREAD_SERIALIZED` or `MPI_THREAD_MULTIPLE`, from `MPI_Query_thread`).
pub(crate) fn any_thread_may_call() -> bool {
    let mut provided: c_int = 0;
    // SAFETY: MPI is initialized (the callers check); `provided` is writable.
    let rc = unsafe { ffi::PMPI_Query_thread(&mut provided) };
    // SAFETY: a constant of rsmpi's C shim.
    rc == SUCCESS && provided >= unsafe { ffi::RSMPI_THREAD_SERIALIZED }
}

/// This process's rank in `comm`.
pub fn rank(comm: Comm) -> Result<usize> {
    let mut r: c_int = 0;
    // SAFETY: `comm` is a valid communicator (callers hold it) and `r` is writable.
    check(unsafe { ffi::PMPI_Comm_rank(comm, &mut r) }, "MPI_Comm_rank")?;
    Ok(r as usize)
}

/// The number of ranks in `comm`.
pub fn size(comm: Comm) -> Result<usize> {
    let mut s: c_int = 0;
    // SAFETY: as for `rank`.
    check(unsafe { ffi::PMPI_Comm_size(comm, &mut s) }, "MPI_Comm_size")?;
    Ok(s as usize)
}

/// How a report names `comm`: its name (`MPI_Comm_get_name`: `MPI_COMM_WORLD`, or the one the
/// program set) in quotes, else "a communicator".
pub fn name(comm: Comm) -> String {
    let mut buf = [0 as std::ffi::c_char; 256];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_OBJECT_NAME (at most 256 in the MPIs we build against)
    // characters; MPI writes a NUL-terminated name of at most that.
    let rc = unsafe { ffi::PMPI_Comm_get_name(comm, buf.as_mut_ptr(), &mut len) };
    buf[255] = 0;
    // SAFETY: NUL-terminated (MPI's terminator, or the one set above).
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
    if rc == SUCCESS && !text.is_empty() {
        format!("the communicator {text:?}")
    } else {
        "a communicator".into()
    }
}

/// Whether `comm` is an intercommunicator (two groups: no barrier of ours).
pub fn is_inter(comm: Comm) -> Result<bool> {
    let mut flag: c_int = 0;
    // SAFETY: as for `rank`.
    check(unsafe { ffi::PMPI_Comm_test_inter(comm, &mut flag) }, "MPI_Comm_test_inter")?;
    Ok(flag != 0)
}

/// A private copy of `comm`: our messages never match the application's. Made with
/// `MPI_Comm_create` over `comm`'s whole group, not `MPI_Comm_dup`: a duplicate copies the
/// program's attributes, running its copy callbacks (and its delete callbacks when ours is
/// freed), so the program would see our set-up (issue 50 item 5). Collective over `comm`.
pub(crate) fn dup(comm: Comm) -> Result<Comm> {
    let mut group = std::mem::MaybeUninit::uninit();
    // SAFETY: as for `rank`; `group` receives the communicator's group (a reference MPI counts).
    check(unsafe { ffi::PMPI_Comm_group(comm, group.as_mut_ptr()) }, "MPI_Comm_group")?;
    // SAFETY: written by MPI_Comm_group, which succeeded.
    let mut group = unsafe { group.assume_init() };
    let mut out = comm_null();
    // SAFETY: as for `rank`; every rank of `comm` passes the same (whole) group.
    let made = check(unsafe { ffi::PMPI_Comm_create(comm, group, &mut out) }, "MPI_Comm_create");
    // SAFETY: the group from MPI_Comm_group above, freed once.
    unsafe { ffi::PMPI_Group_free(&mut group) };
    made.map(|()| out)
}

/// `MPI_Comm_idup` (collective, non-blocking): the new communicator is valid once the request
/// completes. It copies `comm`'s attributes: for a communicator the program has set none on
/// yet (`MPI_COMM_WORLD` inside `shmem_init`).
pub fn idup(comm: Comm) -> Result<(Comm, Request)> {
    let mut out = comm_null();
    let mut req = request_null();
    // SAFETY: as for `rank`; both out-pointers are writable.
    check(unsafe { ffi::PMPI_Comm_idup(comm, &mut out, &mut req) }, "MPI_Comm_idup")?;
    Ok((out, req))
}

/// `MPI_Comm_split`; `None` as color is `MPI_UNDEFINED` (and gets no communicator).
pub(crate) fn split(comm: Comm, color: Option<u32>, key: usize) -> Result<Option<Comm>> {
    let mut out = comm_null();
    let color = color.map_or(undefined(), |c| c as c_int);
    // SAFETY: as for `rank`.
    check(unsafe { ffi::PMPI_Comm_split(comm, color, key as c_int, &mut out) }, "MPI_Comm_split")?;
    Ok((out != comm_null()).then_some(out))
}

/// The ranks of `comm` that can share memory with this one (`MPI_COMM_TYPE_SHARED`).
pub(crate) fn split_shared(comm: Comm, key: usize) -> Result<Comm> {
    let mut out = comm_null();
    check(
        // SAFETY: as for `rank`; the constants come from rsmpi's C shim.
        unsafe {
            ffi::PMPI_Comm_split_type(comm, ffi::RSMPI_COMM_TYPE_SHARED, key as c_int, ffi::RSMPI_INFO_NULL, &mut out)
        },
        "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)",
    )?;
    Ok(out)
}

/// A communicator this crate made for a while, freed when dropped (on every path).
#[derive(Debug)]
pub(crate) struct OwnedComm(pub(crate) Comm);

impl Drop for OwnedComm {
    fn drop(&mut self) {
        free(&mut self.0);
    }
}

/// Frees a communicator this crate made; nothing once MPI is finalized.
pub(crate) fn free(comm: &mut Comm) {
    if *comm == comm_null() || !mpi_active() {
        return;
    }
    // SAFETY: `comm` was made by `dup`/`split` and is freed once (the caller gives up its copy).
    let rc = unsafe { ffi::PMPI_Comm_free(comm) };
    if rc != SUCCESS {
        tracing::warn!(error = %error_string(rc), "MPI_Comm_free of a barrier communicator failed");
    }
}

/// `PMPI_Barrier`.
pub(crate) fn barrier(comm: Comm) -> Result<()> {
    // SAFETY: as for `rank`.
    check(unsafe { ffi::PMPI_Barrier(comm) }, "MPI_Barrier")
}

/// Every rank's `words` (all ranks pass the same count), by rank.
pub(crate) fn allgather(comm: Comm, words: &[u64]) -> Result<Vec<Vec<u64>>> {
    let n = size(comm)?;
    let k = words.len();
    let mut all = vec![0u64; n * k];
    check(
        // SAFETY: `words` holds k u64 and `all` n*k, as the counts and datatype say.
        unsafe {
            ffi::PMPI_Allgather(
                words.as_ptr().cast(),
                k as c_int,
                uint64(),
                all.as_mut_ptr().cast(),
                k as c_int,
                uint64(),
                comm,
            )
        },
        "MPI_Allgather",
    )?;
    Ok(all.chunks(k.max(1)).map(<[u64]>::to_vec).take(n).collect())
}

/// Bitwise or of every rank's `words`, in place.
pub(crate) fn allreduce_or(comm: Comm, words: &mut [u64]) -> Result<()> {
    let send = words.to_vec();
    check(
        // SAFETY: both buffers hold words.len() u64.
        unsafe {
            ffi::PMPI_Allreduce(
                send.as_ptr().cast(),
                words.as_mut_ptr().cast(),
                words.len() as c_int,
                uint64(),
                ffi::RSMPI_BOR,
                comm,
            )
        },
        "MPI_Allreduce",
    )
}

/// Whether `ok` holds on every rank of `comm` (collective): how every local decision is agreed.
pub(crate) fn all_agree(comm: Comm, ok: bool) -> Result<bool> {
    let mut word = [u64::from(!ok)];
    allreduce_or(comm, &mut word)?;
    Ok(word[0] == 0)
}

/// Root's `words` on every rank.
pub(crate) fn broadcast(comm: Comm, root: usize, words: &mut [u64]) -> Result<()> {
    check(
        // SAFETY: `words` holds words.len() u64 on every rank.
        unsafe { ffi::PMPI_Bcast(words.as_mut_ptr().cast(), words.len() as c_int, uint64(), root as c_int, comm) },
        "MPI_Bcast",
    )
}

/// The `MPI_COMM_WORLD` rank of every rank of `comm`.
pub(crate) fn world_ranks(comm: Comm) -> Result<Vec<usize>> {
    let n = size(comm)?;
    // SAFETY: MPI_Group is a handle (a pointer or an integer): all-zero is a valid placeholder,
    // overwritten by MPI_Comm_group before any use.
    let (mut group, mut world_group): (ffi::MPI_Group, ffi::MPI_Group) = unsafe { std::mem::zeroed() };
    let ranks: Vec<c_int> = (0..n as c_int).collect();
    let mut out = vec![0 as c_int; n];
    // SAFETY: the groups are written by MPI before use and freed below; the rank arrays hold n.
    unsafe {
        check(ffi::PMPI_Comm_group(comm, &mut group), "MPI_Comm_group")?;
        check(ffi::PMPI_Comm_group(comm_world(), &mut world_group), "MPI_Comm_group")?;
        let rc = ffi::PMPI_Group_translate_ranks(group, n as c_int, ranks.as_ptr(), world_group, out.as_mut_ptr());
        ffi::PMPI_Group_free(&mut group);
        ffi::PMPI_Group_free(&mut world_group);
        check(rc, "MPI_Group_translate_ranks")?;
    }
    Ok(out.into_iter().map(|r| r.max(0) as usize).collect())
}

/// Posts a receive of `buf.len()` u64 from rank `source` with `tag`.
pub(crate) fn irecv(comm: Comm, buf: &mut [u64], source: usize, tag: c_int) -> Result<Request> {
    let mut req = request_null();
    check(
        // SAFETY: `buf` stays valid and unmoved until the request completes or is cancelled (the
        // caller keeps it in a box beside the request).
        unsafe {
            ffi::PMPI_Irecv(buf.as_mut_ptr().cast(), buf.len() as c_int, uint64(), source as c_int, tag, comm, &mut req)
        },
        "MPI_Irecv",
    )?;
    Ok(req)
}

/// Starts a send of `buf` to `dest` with `tag`.
pub(crate) fn isend(comm: Comm, buf: &[u64], dest: usize, tag: c_int) -> Result<Request> {
    let mut req = request_null();
    check(
        // SAFETY: as for `irecv`: the caller keeps `buf` until the request completes.
        unsafe {
            ffi::PMPI_Isend(buf.as_ptr().cast(), buf.len() as c_int, uint64(), dest as c_int, tag, comm, &mut req)
        },
        "MPI_Isend",
    )?;
    Ok(req)
}

/// A point-to-point request of ours and the buffer of `N` words MPI reads or writes until it
/// completes (kept beside the request: boxed, it does not move).
pub(crate) struct InFlight<const N: usize> {
    pub req: Request,
    pub buf: Box<[u64; N]>,
}

/// `MPI_REQUEST_NULL`.
pub fn request_null() -> Request {
    // SAFETY: as for `comm_world`.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

/// `PMPI_Ibarrier`: starts MPI's own barrier.
pub(crate) fn ibarrier(comm: Comm) -> Result<Request> {
    let mut req = request_null();
    // SAFETY: as for `rank`; `req` receives the request.
    check(unsafe { ffi::PMPI_Ibarrier(comm, &mut req) }, "MPI_Ibarrier")?;
    Ok(req)
}

/// Returns once every rank of `comm` has called it, waiting asleep: `MPI_Ibarrier`, tested for
/// 50 µs (ranks that arrive together), then between sleeps that grow from 20 µs to 1 ms (to
/// 10 ms, a tenth of the wait so far, for long waits). A rank
/// that waits in MPI's own blocking calls stays runnable (Open MPI yields in a loop, MPICH
/// spins): with more ranks than cores it holds a core that a rank still working needs, for as
/// long as it waits (issue 41 item 7). After `stall`, it says once that it waits and for what.
/// A rank's sleep can hold up MPI's progress of the `MPI_Ibarrier` (across machines, its rounds
/// pass through every rank) by up to 1 ms a round (a tenth of the wait, for late ranks), once
/// per communicator made. An error here is
/// MPI's (its error handler is fatal by default) and, like one of `MPI_Comm_dup`, not agreed.
pub(crate) fn sleeping_rendezvous(comm: Comm, stall: Option<std::time::Duration>) -> Result<()> {
    let mut req = ibarrier(comm)?;
    wait_asleep(&mut req, stall, |waited| still_meeting(comm, waited))
}

/// The stall report of a rank that waits to meet the others before a build.
pub(crate) fn still_meeting(comm: Comm, waited: std::time::Duration) {
    let me = rank(comm_world()).unwrap_or(0);
    let size = size(comm).unwrap_or(0);
    barrier::text::say(&format!(
        "barrier: world rank {me} has waited {waited:.1?} for the other ranks of a communicator of {size} to set up \
         our barrier on it (its first barrier, or a dup, split or attach); still waiting, asleep (this report, \
         once: BARRIER_STALL_REPORT)"
    ))
}

/// Waits for `req` asleep (tested for 50 µs, then between growing sleeps: see
/// `sleeping_rendezvous`); after `report_after`, `said(waited)` is called once.
pub fn wait_asleep(
    req: &mut Request,
    report_after: Option<std::time::Duration>,
    said: impl FnOnce(std::time::Duration),
) -> Result<()> {
    let mut said = Some(said);
    barrier::wait::poll_asleep(
        std::time::Duration::from_micros(50),
        || test(req).map(|done| done.then_some(())),
        |waited| {
            if report_after.is_some_and(|at| waited >= at) {
                if let Some(said) = said.take() {
                    said(waited);
                }
            }
        },
    )
}

/// Every rank's `words` (the same count on each), by rank, one after the other, gathered without blocking (`MPI_Iallgather`) and waited for
/// asleep as [`sleeping_rendezvous`] waits. After `report_after`, `said(waited)` is called once:
/// a rank that never joins (one where another component's barrier serves: the component was
/// not loaded there, or its priority is lower there) leaves the others here, and they must say
/// so rather than hang silently.
pub(crate) fn sleeping_allgather(
    comm: Comm,
    words: Vec<u64>,
    report_after: Option<std::time::Duration>,
    said: impl FnOnce(std::time::Duration),
) -> Result<Vec<u64>> {
    let mut gather = Gather::start(comm, words)?;
    wait_asleep(&mut gather.req, report_after, said)?;
    Ok(gather.take())
}

/// An `MPI_Iallgather` of every rank's words (the same count on each) under way, with its
/// buffers: on the heap, and leaked if it is dropped before it completed (MPI may still write
/// into them then).
#[derive(Debug)]
pub(crate) struct Gather {
    req: Request,
    send: Vec<u64>,
    all: Vec<u64>,
}

impl Gather {
    /// Starts the gather of `words` (collective over `comm`, non-blocking).
    pub(crate) fn start(comm: Comm, words: Vec<u64>) -> Result<Gather> {
        let n = size(comm)?;
        let mut gather = Gather { req: request_null(), all: vec![0u64; n * words.len()], send: words };
        let count = gather.send.len() as c_int;
        check(
            // SAFETY: `send` holds `count` u64 and `all` n times as many, as the counts and
            // datatype say; both live in `gather`, whose drop leaks them while the request is
            // active.
            unsafe {
                ffi::PMPI_Iallgather(
                    gather.send.as_ptr().cast(),
                    count,
                    uint64(),
                    gather.all.as_mut_ptr().cast(),
                    count,
                    uint64(),
                    comm,
                    &mut gather.req,
                )
            },
            "MPI_Iallgather",
        )?;
        Ok(gather)
    }

    /// Whether it completed (without blocking).
    pub(crate) fn test(&mut self) -> Result<bool> {
        test(&mut self.req)
    }

    /// Waits for it asleep, as [`sleeping_rendezvous`] waits; after `report_after`,
    /// `said(waited)` is called once.
    pub(crate) fn wait_asleep(
        &mut self,
        report_after: std::time::Duration,
        said: impl FnOnce(std::time::Duration),
    ) -> Result<()> {
        wait_asleep(&mut self.req, Some(report_after), said)
    }

    /// Every rank's words, by rank, one after the other (once complete).
    pub(crate) fn take(&mut self) -> Vec<u64> {
        debug_assert!(self.req == request_null(), "taken before the gather completed");
        std::mem::take(&mut self.all)
    }
}

impl Drop for Gather {
    fn drop(&mut self) {
        if self.req != request_null() && mpi_active() {
            // Still under way: MPI may write into the buffers.
            std::mem::forget(std::mem::take(&mut self.send));
            std::mem::forget(std::mem::take(&mut self.all));
        }
    }
}

/// Waits for the request (it is then freed and set to `MPI_REQUEST_NULL`).
pub(crate) fn wait(req: &mut Request) -> Result<()> {
    // SAFETY: `req` is an active request (or MPI_REQUEST_NULL, which completes at once).
    check(unsafe { ffi::PMPI_Wait(req, ffi::RSMPI_STATUS_IGNORE) }, "MPI_Wait")
}

/// What MPI calls when it deletes an attribute: the communicator, the key, the value, the
/// key's extra state.
pub type DeleteAttr = unsafe extern "C" fn(Comm, c_int, *mut c_void, *mut c_void) -> c_int;

/// Never copies an attribute to a duplicate: a duplicate gets its own on first use.
unsafe extern "C" fn never_copy(
    _old: Comm,
    _keyval: c_int,
    _extra: *mut c_void,
    _value_in: *mut c_void,
    _value_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a valid flag pointer.
    unsafe { *flag = 0 };
    SUCCESS
}

/// Says `line` on stderr and ends the job (`MPI_Abort` on `MPI_COMM_WORLD`, code 70): for a
/// failure one process cannot decline alone, the others waiting for it inside MPI or our set-up.
pub fn abort_job(line: &str) -> ! {
    barrier::text::say(line);
    // SAFETY: MPI_Abort on MPI_COMM_WORLD ends the job; it does not return.
    unsafe { ffi::PMPI_Abort(comm_world(), 70) };
    std::process::abort()
}

/// The attribute key kept in `key`, made on first use, whose values are never copied to
/// duplicates (a duplicate gets its own barrier on its first use) and are deleted by `delete`.
/// Where MPI refuses to make one, the job ends, said under `prefix`: the other ranks may already
/// be building the barrier this key would cache (collective), and this rank cannot decline alone.
pub fn keyval(key: &std::sync::OnceLock<c_int>, delete: DeleteAttr, prefix: &str) -> c_int {
    if let Some(&k) = key.get() {
        return k;
    }
    let k = create_keyval(delete).unwrap_or_else(|e| {
        abort_job(&format!(
            "{prefix}: cannot create an MPI attribute key ({e}); aborting the job (the other ranks would wait for \
             this one for ever)"
        ))
    });
    // Two threads racing here make two keys; one is used, which is harmless.
    *key.get_or_init(|| k)
}

/// A new attribute key whose values are never copied to duplicates and are deleted by `delete`.
fn create_keyval(delete: DeleteAttr) -> Result<c_int> {
    let mut key: c_int = 0;
    // SAFETY: both callbacks have the signatures MPI expects; `key` receives the key.
    let rc = unsafe { ffi::PMPI_Comm_create_keyval(Some(never_copy), Some(delete), &mut key, std::ptr::null_mut()) };
    check(rc, "MPI_Comm_create_keyval").map(|()| key)
}

/// Sets, once, an `MPI_COMM_SELF` attribute whose deletion (first thing in `MPI_Finalize`,
/// while MPI still works) runs `at_finalize`; `key` keeps its key (`None` if MPI refused).
pub fn hook_finalize(key: &std::sync::OnceLock<Option<c_int>>, at_finalize: DeleteAttr) {
    key.get_or_init(|| {
        let k = create_keyval(at_finalize).ok()?;
        // SAFETY: the value is null; the callback frees nothing it points to.
        unsafe { set_attr(comm_self(), k, std::ptr::null_mut()) }.ok()?;
        Some(k)
    });
}

/// The value of attribute `key` on `comm`, if it has one.
pub fn get_attr(comm: Comm, key: c_int) -> Result<Option<*mut c_void>> {
    let mut value: *mut c_void = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: MPI writes the attribute's value (a pointer) into `value` if it is set.
    let rc = unsafe { ffi::PMPI_Comm_get_attr(comm, key, (&mut value as *mut *mut c_void).cast(), &mut flag) };
    check(rc, "MPI_Comm_get_attr")?;
    Ok((flag != 0).then_some(value))
}

/// Sets attribute `key` of `comm` to `value`; MPI calls the key's delete callback with it when
/// the communicator goes, or when the attribute is deleted.
///
/// # Safety
/// `value` must be what the key's delete callback expects to receive (and free) once.
pub unsafe fn set_attr(comm: Comm, key: c_int, value: *mut c_void) -> Result<()> {
    // SAFETY: MPI stores the pointer; the caller's delete callback owns what it points to.
    check(unsafe { ffi::PMPI_Comm_set_attr(comm, key, value) }, "MPI_Comm_set_attr")
}

/// Deletes attribute `key` of `comm` (MPI calls its delete callback).
pub fn delete_attr(comm: Comm, key: c_int) -> Result<()> {
    // SAFETY: as for `rank`; a communicator without the attribute is an error MPI reports.
    check(unsafe { ffi::PMPI_Comm_delete_attr(comm, key) }, "MPI_Comm_delete_attr")
}

/// Frees an attribute key (MPI keeps it valid until no attribute uses it).
pub fn free_keyval(mut key: c_int) {
    // SAFETY: the key was made by `create_keyval`.
    unsafe { ffi::PMPI_Comm_free_keyval(&mut key) };
}

/// Whether the request completed (it is then freed and set to `MPI_REQUEST_NULL`).
pub(crate) fn test(req: &mut Request) -> Result<bool> {
    let mut flag: c_int = 0;
    // SAFETY: `req` is an active request (or MPI_REQUEST_NULL, which tests complete).
    check(unsafe { ffi::PMPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) }, "MPI_Test")?;
    Ok(flag != 0)
}

/// Cancels a pending receive and waits for the cancellation.
pub(crate) fn cancel(req: &mut Request) {
    if *req == request_null() || !mpi_active() {
        return;
    }
    // SAFETY: `req` is an active receive; after MPI_Wait it is MPI_REQUEST_NULL.
    unsafe {
        ffi::PMPI_Cancel(req);
        ffi::PMPI_Wait(req, ffi::RSMPI_STATUS_IGNORE);
    }
}

/// Lets a send finish on its own: the request is freed, the message still goes.
pub(crate) fn release(req: &mut Request) {
    if *req == request_null() || !mpi_active() {
        return;
    }
    // SAFETY: `req` is an active request; MPI_Request_free sets it to MPI_REQUEST_NULL.
    unsafe {
        ffi::PMPI_Request_free(req);
    }
}

/// Whether `comm` has the same group as `MPI_COMM_WORLD` (`MPI_IDENT` or `MPI_CONGRUENT`).
pub(crate) fn congruent_with_world(comm: Comm) -> Result<bool> {
    congruent(comm, comm_world())
}

/// Whether `a` and `b` have the same group, in the same order (`MPI_IDENT` or
/// `MPI_CONGRUENT`). Local.
pub fn congruent(a: Comm, b: Comm) -> Result<bool> {
    let mut result: c_int = 0;
    // SAFETY: as for `rank`; `result` is writable.
    check(unsafe { ffi::PMPI_Comm_compare(a, b, &mut result) }, "MPI_Comm_compare")?;
    // SAFETY: constants from rsmpi's C shim.
    Ok(result == unsafe { ffi::RSMPI_IDENT } || result == unsafe { ffi::RSMPI_CONGRUENT })
}

/// A communicator handle as one word (a pointer in Open MPI, an `int` in MPICH): the context of
/// `progress` (`from_word` turns it back), and the interposer's key for a thread's last
/// lookup.
pub fn to_word(comm: Comm) -> usize {
    let mut word = [0u8; std::mem::size_of::<usize>()];
    let n = std::mem::size_of::<Comm>().min(word.len());
    // SAFETY: MPI_Comm is a plain handle of at most a pointer's size; `n` bytes are copied.
    unsafe { std::ptr::copy_nonoverlapping((&comm as *const Comm).cast::<u8>(), word.as_mut_ptr(), n) };
    usize::from_ne_bytes(word)
}

/// The handle [`to_word`] made `word` from.
pub(crate) fn from_word(word: usize) -> Comm {
    let bytes = word.to_ne_bytes();
    let mut comm = comm_null();
    let n = std::mem::size_of::<Comm>().min(bytes.len());
    // SAFETY: the inverse of `to_word`: the same `n` bytes of a handle, copied back.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut comm as *mut Comm).cast::<u8>(), n) };
    comm
}

/// One step of MPI's progress engine, for [`barrier::wait::Progress`] with a communicator
/// handle ([`to_word`]) as its context: `MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG)` on that
/// communicator, a private duplicate that carries no point-to-point message (the probe never
/// matches and takes nothing of the application's). Open MPI and MPICH both run their progress
/// engine (every transport, every pending request and one-sided operation of the process) in a
/// probe that finds nothing, but MPICH not on a communicator of one rank (a duplicate of
/// `MPI_COMM_SELF` progresses nothing there: measured), hence the communicator's own duplicate.
/// The slow path of a barrier's waits calls it (see `barrier::wait`'s module docs): a rank
/// waiting in our barrier keeps MPI's progress rule.
pub(crate) fn progress(comm: usize) {
    // A communicator of ours used after MPI_Finalize (its Rust owner outlived rsmpi's
    // `Universe`) still runs its one-node barriers in shared memory, without MPI.
    if !mpi_active() {
        return;
    }
    let mut flag: c_int = 0;
    // SAFETY: MPI is active (checked above) and the context is a valid communicator: the
    // communicator that set it frees it only after the node's communicators that call this are
    // dropped. `flag` is writable and the status is ignored.
    unsafe {
        ffi::PMPI_Iprobe(
            ffi::RSMPI_ANY_SOURCE,
            ffi::RSMPI_ANY_TAG,
            from_word(comm),
            &mut flag,
            ffi::RSMPI_STATUS_IGNORE,
        );
    }
}
