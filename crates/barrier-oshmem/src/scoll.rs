//! The Rust side of the scoll component: the functions `c/scoll_fastbar.c` calls, the cache of
//! each set's barrier, and the storage of the component structure it exports. See the crate
//! docs for the protocol.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use barrier::Error;
use barrier_mpi::glue::{self, BuiltFor, ComponentStorage, McaValues, DONE, FAILED, GONE};
use barrier_mpi::mpi::ffi::{self, MPI_Comm};
use barrier_mpi::{raw, BarrierComm};

/// The component structure OSHMEM looks up by name (see [`ComponentStorage`]). Written once,
/// by the C side's constructor, before OSHMEM can see it; read by OSHMEM only.
#[no_mangle]
pub static mut mca_scoll_fastbar_component: ComponentStorage = ComponentStorage::new();

const COMPONENT: &str = "scoll/fastbar";
/// How this component's texts name OSHMEM's own barrier.
const VOICE: glue::Voice =
    glue::Voice { component: COMPONENT, stays: "stay OSHMEM's own on every PE", own: "OSHMEM's own" };

/// One set's barrier; `None` once `MPI_Finalize` freed it. Boxed and never freed before the
/// process ends (the C modules of later groups of the same set point at it).
pub struct Set {
    comm: Mutex<Option<BarrierComm>>,
}

/// A set seen by this PE.
#[derive(Clone, Copy)]
enum Entry {
    /// A thread of this PE is building its barrier (collective over the set's members).
    Building,
    /// Its barrier, or `None` where every member declined.
    Built(Option<&'static Set>),
}

/// Every set seen, by its PEs. The lock is held only to look an entry up or change it, never
/// through a set-up: under `SHMEM_THREAD_MULTIPLE` one thread's set-up of a set waits in MPI for
/// the set's other members, and a lock held there kept a thread of the same PE out of the
/// set-up of another set that those members were building first (issue 50 item 1: two sets
/// started in opposite orders on two PEs hung). Sets are built concurrently: each set's
/// communicator comes from `MPI_Comm_create_group` with a tag of its own, which MPI allows from
/// several threads at once.
static SETS: Mutex<Option<HashMap<Vec<c_int>, Entry>>> = Mutex::new(None);
/// Signalled when a set's barrier is built (a second thread of this PE at the same set waits).
static BUILT: Condvar = Condvar::new();
static FINALIZE_HOOK: OnceLock<Option<c_int>> = OnceLock::new();

fn sets() -> MutexGuard<'static, Option<HashMap<Vec<c_int>, Entry>>> {
    SETS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The set's barrier when a thread of this PE has built it; else this thread builds it (its
/// entry now says so) and gets `None`. A set another thread of this PE is building is waited
/// for.
fn built_or_claim(key: &[c_int]) -> Option<Option<&'static Set>> {
    let mut sets = sets();
    loop {
        let table = sets.get_or_insert_with(HashMap::new);
        match table.get(key).copied() {
            Some(Entry::Built(set)) => return Some(set),
            Some(Entry::Building) => sets = BUILT.wait(sets).unwrap_or_else(|p| p.into_inner()),
            None => {
                table.insert(key.to_vec(), Entry::Building);
                return None;
            }
        }
    }
}

fn say(line: &str) {
    glue::say(COMPONENT, line);
}

fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> T {
    glue::guarded(COMPONENT, what, f)
}

/// OSHMEM opens the component: 1 when it may serve, 0 when the ABI guard refuses (said once
/// per node: a refusal on some nodes only would leave PEs disagreeing).
///
/// # Safety
/// `built` points to the C glue's facts ([`glue::abi_refusal`]).
#[no_mangle]
pub unsafe extern "C" fn fastbar_scoll_rs_open(built: *const BuiltFor) -> c_int {
    // SAFETY: the caller's contract.
    let built = unsafe { &*built };
    let stays = "shmem barriers stay OSHMEM's own";
    // SAFETY: the caller's contract.
    guarded("opening the component", || unsafe { glue::open("scoll", built, stays, "barrier-oshmem", "oshmem") })
}

/// Deleted first thing in `MPI_Finalize` (OSHMEM finalizes MPI after its own barriers): frees
/// every set's barrier while MPI still works.
unsafe extern "C" fn at_finalize(_comm: MPI_Comm, _key: c_int, _value: *mut c_void, _extra: *mut c_void) -> c_int {
    guarded("MPI_Finalize", || {
        let all: Vec<&'static Set> = sets()
            .iter()
            .flat_map(|m| m.values())
            .filter_map(|e| match e {
                Entry::Built(set) => *set,
                Entry::Building => None,
            })
            .collect();
        for set in all {
            let taken = set.comm.lock().unwrap_or_else(|p| p.into_inner()).take();
            drop(taken);
        }
    });
    0
}

/// The component is closed (in `shmem_finalize`, before OSHMEM finalizes MPI, and before the
/// library is unloaded): the finalize hook's attribute goes now, running it, so that
/// `MPI_Finalize` never calls into an unloaded library.
#[no_mangle]
pub extern "C" fn fastbar_scoll_rs_close() {
    guarded("shmem_finalize", || {
        if let Some(Some(key)) = FINALIZE_HOOK.get() {
            if raw::mpi_active() {
                // Deleting it runs `at_finalize`, which frees every set's barrier.
                let _ = raw::delete_attr(raw::comm_self(), *key);
                raw::free_keyval(*key);
            }
        }
    })
}

/// A tag for `MPI_Comm_create_group` of the set `pes`: the same on every member, hashed into
/// MPI's whole tag range (1 to `MPI_TAG_UB`, about 2^31 in Open MPI; 32767, the least MPI
/// allows, where it cannot be read), so that two sets built at once by threads of one PE
/// almost never share one (MPI asks concurrent calls to differ in their tags).
fn tag_of(pes: &[c_int]) -> c_int {
    static UB: OnceLock<u64> = OnceLock::new();
    let ub = *UB.get_or_init(|| {
        let value = raw::get_attr(raw::comm_world(), ffi::MPI_TAG_UB as c_int).ok().flatten();
        // SAFETY: MPI_TAG_UB's value is a pointer to an int that lives as long as MPI.
        value.map_or(32_767, |p| unsafe { *(p as *const c_int) }).max(32_767) as u64
    });
    let hash = pes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &p| (h ^ p as u64).wrapping_mul(0x0100_0000_01b3));
    (hash % ub) as c_int + 1
}

/// The parent of every active set's communicator: a private duplicate of `MPI_COMM_WORLD`,
/// started in `shmem_init` (where every PE's scoll framework queries the component for the
/// whole job) and waited for at the first active set's set-up. `MPI_Comm_create_group` sends
/// point-to-point messages on its parent with the set's tag: on `MPI_COMM_WORLD` itself, a
/// hybrid program's wildcard `MPI_Irecv` there could take them (issue 50 item 9), and the set-up
/// would hang.
enum Parent {
    /// Not started (a component that was not queried for the whole job): `MPI_COMM_WORLD`.
    Unstarted,
    /// `MPI_Comm_idup` under way.
    Pending(MPI_Comm, raw::Request),
    Ready(MPI_Comm),
}

// SAFETY: MPI handles are plain handles; they are used under the mutex, by threads MPI's thread
// level lets call MPI (OSHMEM's barriers).
unsafe impl Send for Parent {}

static PARENT: Mutex<Parent> = Mutex::new(Parent::Unstarted);

/// OSHMEM queries the component for a group of every PE (in `shmem_init`, on every PE):
/// starts the private duplicate of `MPI_COMM_WORLD` there, once, without blocking.
#[no_mangle]
pub extern "C" fn fastbar_scoll_rs_whole_job() {
    guarded("shmem_init", || {
        let mut parent = PARENT.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*parent, Parent::Unstarted) && raw::mpi_active() {
            match raw::idup(raw::comm_world()) {
                Ok((comm, req)) => *parent = Parent::Pending(comm, req),
                // Collective: the other PEs' duplicates wait for this one's (and a PE on another
                // parent would never meet them in MPI_Comm_create_group).
                Err(e) => glue::abort_job(
                    COMPONENT,
                    &format!(
                        "PE {} cannot start the private duplicate of MPI_COMM_WORLD that every PE starts in shmem_init \
                         ({e}): the other PEs would wait for it at their first active set",
                        raw::rank(raw::comm_world()).unwrap_or(0)
                    ),
                ),
            }
        }
    })
}

/// The parent for `MPI_Comm_create_group` (see [`Parent`]).
fn parent() -> Result<MPI_Comm, Error> {
    let mut parent = PARENT.lock().unwrap_or_else(|p| p.into_inner());
    if let Parent::Pending(comm, req) = &mut *parent {
        // Every PE started it in shmem_init: this waits for their progress only.
        raw::wait_asleep(req, Some(glue::JOIN_REPORT), |waited| {
            say(&format!(
                "PE {} has waited {waited:.1?} for every PE's private duplicate of MPI_COMM_WORLD (started in \
                 shmem_init) before an active set's first barrier; a PE whose scoll/fastbar was not queried there \
                 never starts it (the component not loaded there, or a lower priority there): give every PE the \
                 same component and settings. Still waiting.",
                raw::rank(raw::comm_world()).unwrap_or(0)
            ))
        })?;
        *parent = Parent::Ready(*comm);
    }
    Ok(match &*parent {
        Parent::Ready(comm) => *comm,
        _ => raw::comm_world(),
    })
}

/// An MPI communicator of exactly `pes` (world ranks, in order), made collectively by them;
/// `None` for `MPI_COMM_WORLD` itself (nothing to free). `fault`: a test's injected failure
/// (`BARRIER_MPI_FAULT=group:PE` naming this PE), which it returns before `MPI_Comm_create_group`.
fn communicator_of(pes: &[c_int], fault: Result<(), Error>) -> Result<Option<MPI_Comm>, Error> {
    let world = raw::comm_world();
    let size = raw::size(world)?;
    if pes.len() == size && pes.iter().enumerate().all(|(i, &p)| p as usize == i) {
        return Ok(None);
    }
    let fail = |call: &str, rc: c_int| Error::Setup(format!("{call} failed: {}", raw::error_string(rc)));
    // Its group is MPI_COMM_WORLD's: the set's PEs are world ranks there too.
    let parent = parent()?;
    fault?;
    // SAFETY: plain MPI calls on valid handles; every out-pointer is written by MPI.
    unsafe {
        let mut world_group = std::mem::MaybeUninit::uninit();
        let rc = ffi::PMPI_Comm_group(world, world_group.as_mut_ptr());
        if rc != 0 {
            return Err(fail("MPI_Comm_group", rc));
        }
        let mut world_group = world_group.assume_init();
        let mut group = std::mem::MaybeUninit::uninit();
        let rc = ffi::PMPI_Group_incl(world_group, pes.len() as c_int, pes.as_ptr(), group.as_mut_ptr());
        ffi::PMPI_Group_free(&mut world_group);
        if rc != 0 {
            return Err(fail("MPI_Group_incl", rc));
        }
        let mut group = group.assume_init();
        let mut comm = std::mem::MaybeUninit::uninit();
        // Only the set's members take part; a tag of the set's own (from its PEs), so that
        // two sets' creations can never match each other's messages.
        let rc = ffi::PMPI_Comm_create_group(parent, group, tag_of(pes), comm.as_mut_ptr());
        ffi::PMPI_Group_free(&mut group);
        if rc != 0 {
            return Err(fail("MPI_Comm_create_group", rc));
        }
        Ok(Some(comm.assume_init()))
    }
}

/// The barrier of the set `pes` (collective over its members the first time it is seen): 1 and
/// `*out` set when every member serves it, 0 when every member declines.
///
/// # Safety
/// `pes` points to `count` world ranks, the same on every member; `values` points to the
/// component's MCA values (its strings null or NUL-terminated); `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn fastbar_scoll_rs_find(
    pes: *const c_int,
    count: c_int,
    values: *const McaValues,
    out: *mut *const Set,
) -> c_int {
    guarded("the first barrier of a set of PEs", || {
        // SAFETY: the caller's contract.
        let key = unsafe { std::slice::from_raw_parts(pes, count.max(0) as usize) }.to_vec();
        let set = built_or_claim(&key).unwrap_or_else(|| {
            // SAFETY: the caller's contract.
            let set = unsafe { build(&key, values) };
            sets().get_or_insert_with(HashMap::new).insert(key, Entry::Built(set));
            BUILT.notify_all();
            set
        });
        match set {
            Some(set) => {
                // SAFETY: the caller's contract.
                unsafe { *out = set };
                1
            }
            None => 0,
        }
    })
}

/// Builds the barrier of the set `key` (collective over its members), saying what serves it.
///
/// # Safety
/// As [`fastbar_scoll_rs_find`]'s `values`.
unsafe fn build(key: &[c_int], values: *const McaValues) -> Option<&'static Set> {
    if !raw::mpi_active() {
        return None;
    }
    // SAFETY: the caller's contract.
    let params = unsafe { (*values).params("scoll") };
    let verbose = params.flag("BARRIER_VERBOSE").unwrap_or(false);
    glue::hook_finalize(&FINALIZE_HOOK, at_finalize);
    let what = if key.len() == raw::size(raw::comm_world()).unwrap_or(0) {
        format!("every PE ({})", key.len())
    } else {
        format!("an active set of {} PEs", key.len())
    };
    // Until every member holds the set's communicator there is nothing to agree on: the
    // others wait for this PE inside MPI_Comm_create_group (or its parent's duplicate) and
    // cannot learn that it declined. A failure here ends the job, saying why; every later
    // step is agreed over the set's communicator (`glue::join`, then the barrier's set-up).
    let comm = communicator_of(key, glue::injected(&params, "group")).unwrap_or_else(|e| {
        glue::abort_job(
            COMPONENT,
            &format!(
                "shmem barriers of {what}: PE {} cannot make the set's MPI communicator ({e}), and the set's \
                 other PEs wait for it in MPI_Comm_create_group",
                raw::rank(raw::comm_world()).unwrap_or(0)
            ),
        )
    });
    let on = comm.unwrap_or_else(raw::comm_world);
    // Whether every member's component serves the set (`disable`), agreed (issue 50 item 2);
    // then the barrier.
    // SAFETY: `values` is the component's; `on` is a valid intracommunicator of exactly the
    // set's members, every one of which makes this call now.
    let made =
        match unsafe { glue::join("scoll", on, &*values, params.stall_report(), &[]) }.map(|(verdict, _)| verdict) {
            // SAFETY: as above.
            Ok(None) => unsafe { BarrierComm::from_raw_in_component(on, params) }.map(Some),
            Ok(Some(_)) => Ok(None),
            Err(e) => Err(e),
        };
    if let Some(mut own) = comm {
        // The barrier keeps its own duplicate.
        // SAFETY: made above, freed once.
        unsafe { ffi::PMPI_Comm_free(&mut own) };
    }
    // The set's first PE speaks for it.
    let first = raw::rank(raw::comm_world()).ok() == key.first().map(|&p| p as usize);
    // `None`: every member declined (said where the members' settings differ).
    let served = made.transpose()?;
    let c = VOICE.first_barrier(served, &format!("shmem barriers of {what}"), first, verbose, "")?;
    Some(&*Box::leak(Box::new(Set { comm: Mutex::new(Some(c)) })))
}

/// A barrier of the set: `DONE`, `FAILED` (said on stderr) or `GONE` (after finalize).
///
/// # Safety
/// `set` came from `fastbar_scoll_rs_find`.
#[no_mangle]
pub unsafe extern "C" fn fastbar_scoll_rs_barrier(set: *const Set) -> c_int {
    guarded("a shmem barrier", || {
        // SAFETY: the caller's contract: sets are never freed.
        let set = unsafe { &*set };
        let guard = set.comm.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref() {
            Some(c) => match c.barrier() {
                Ok(()) => DONE,
                Err(e) => {
                    say(&format!("a shmem barrier failed on PE {}: {e}", raw::rank(raw::comm_world()).unwrap_or(0)));
                    FAILED
                }
            },
            None => GONE,
        }
    })
}
