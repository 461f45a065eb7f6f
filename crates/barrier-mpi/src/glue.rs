//! What the Open MPI components share (barrier-ompi's coll component, barrier-oshmem's scoll
//! component), on the Rust side of their C glue: the storage of the exported component
//! structure, the outcomes the glue understands, the settings the glue passes, the finalize
//! hook, and the guard that keeps a panic from unwinding into Open MPI. Not for users.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use barrier::{Error, Params};

use crate::raw;
use crate::BarrierComm;
use mpi::ffi;

/// Bytes of a component's exported structure storage (each component's build.rs passes the
/// same number to its C side, which checks that Open MPI's structure fits).
pub const COMPONENT_BYTES: usize = 1024;

/// The storage of a component structure that Open MPI looks up by name: a Rust static, so that
/// the cdylib exports it (a Rust cdylib exports only Rust items); the C side fills it when the
/// library is loaded, before Open MPI can read it.
#[repr(C, align(64))]
pub struct ComponentStorage([u8; COMPONENT_BYTES]);

impl ComponentStorage {
    /// Zeroed storage.
    pub const fn new() -> Self {
        ComponentStorage([0; COMPONENT_BYTES])
    }
}

impl Default for ComponentStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ComponentStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ComponentStorage")
    }
}

/// A split-phase barrier is still under way.
pub const PENDING: c_int = 0;
/// Done.
pub const DONE: c_int = 1;
/// Failed; the error was said on stderr.
pub const FAILED: c_int = 2;
/// Freed at `MPI_Finalize`: the previous module serves.
pub const GONE: c_int = 3;

/// A line on stderr, prefixed with the component (`coll/fastbar`).
pub fn say(component: &str, line: &str) {
    barrier::text::say(&format!("{component}: {line}"));
}

/// What a component says a first barrier came to: its prefix, and how it names the barrier
/// that serves where ours does not.
#[derive(Clone, Copy, Debug)]
pub struct Voice {
    /// Its prefix (`coll/fastbar`).
    pub component: &'static str,
    /// What the barriers do where ours does not serve ("stays Open MPI's own on every rank").
    pub stays: &'static str,
    /// That barrier ("Open MPI's own").
    pub own: &'static str,
}

impl Voice {
    /// A first barrier's build (`made`, for `subject`: "MPI_Barrier on a communicator of 4
    /// ranks"), said by both components' one rule, and ours where it serves. Where MPI's barrier
    /// came out of it, the previous module serves (without the detour): said where a set-up
    /// step failed, by the `speaker` (the rank that speaks for all) and the rank it failed on;
    /// where `verbose`, by the speaker. An error is agreed (every rank declines): said by a rank
    /// whose own setting is bad, or with its own error, and by the speaker, with `note` (what
    /// names this rank, if anything) after `stays`.
    pub fn first_barrier(
        &self,
        made: Result<BarrierComm, Error>,
        subject: &str,
        speaker: bool,
        verbose: bool,
        note: &str,
    ) -> Option<BarrierComm> {
        let line = |line: String| say(self.component, &line);
        match made {
            Ok(c) if c.backend() == crate::MPI_BACKEND => {
                if c.fell_back() && (speaker || c.failed_here()) {
                    line(format!("{subject} {}: {}", self.stays, c.describe()));
                } else if verbose && speaker {
                    line(format!("{subject}: {} ({})", self.own, c.summary()));
                }
                None
            }
            Ok(c) => {
                if verbose && speaker {
                    line(format!("{subject}: {}", c.summary()));
                }
                Some(c)
            }
            Err(e) => {
                if !matches!(e, Error::PeerInvalidParam { .. }) || speaker {
                    line(format!("{subject} {}{note}: {e}", self.stays));
                }
                None
            }
        }
    }
}

/// Says `why` and ends the job (`MPI_Abort` on `MPI_COMM_WORLD`): for a failure this process
/// cannot decline alone, the others waiting for it inside MPI.
pub fn abort_job(component: &str, why: &str) -> ! {
    raw::abort_job(&format!("{component}: {why}; aborting the job"))
}

/// Runs `f`; a panic must not unwind into Open MPI: it ends the job, saying where.
pub fn guarded<T>(component: &str, what: &str, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| abort_job(component, &format!("internal error (panic) in {what}")))
}

/// A component's MCA values as its C glue registered them, handed over as they are: the C side
/// formats nothing, this side names each after the `BARRIER_*` setting it stands for. A string
/// that is null or empty is unset, a number below 0 is unset. The C side is
/// `struct fastbar_mca_values` in this crate's `c/fastbar_glue.h`, which both C glues include
/// (the sizes are checked on both sides); a component that has no such parameter passes it
/// unset.
#[repr(C)]
#[derive(Debug)]
pub struct McaValues {
    /// `device_path`: both devices' path (`BARRIER_SWITCH_DEVICE_PATH`, `BARRIER_GBA_DEVICE_PATH`).
    pub device_path: *const c_char,
    /// `backend`: `BARRIER_BACKEND`.
    pub backend: *const c_char,
    /// `timeout`: `BARRIER_TIMEOUT`.
    pub timeout: *const c_char,
    /// `wait_policy`: `BARRIER_WAIT_POLICY`.
    pub wait_policy: *const c_char,
    /// `stall_report`: `BARRIER_STALL_REPORT`.
    pub stall_report: *const c_char,
    /// `verbose`: `BARRIER_VERBOSE`.
    pub verbose: c_int,
    /// `node_block`: `BARRIER_MPI_NODE_BLOCK`.
    pub node_block: c_int,
    /// `disable`: 1 where this rank's component serves nothing ([`join`] agrees it).
    pub disable: c_int,
    /// `min_comm_size`: the smallest communicator this rank's component serves (below 0: any).
    pub min_comm_size: c_int,
}

// The C side (c/fastbar_glue.h) asserts the same sizes on LP64.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::size_of::<McaValues>() == 56);
    assert!(std::mem::size_of::<StructSize>() == 24);
    assert!(std::mem::size_of::<BuiltFor>() == 40);
};

impl McaValues {
    /// The values that are set, laid over the environment; an error names each as the MCA
    /// parameter the user set (`coll_fastbar_timeout` for `BARRIER_TIMEOUT` with `framework`
    /// `coll`).
    ///
    /// # Safety
    /// Every string pointer is null or points to a NUL-terminated string.
    pub unsafe fn params(&self, framework: &str) -> Params {
        let text = |p: *const c_char| {
            // SAFETY: the caller's contract.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().trim().to_string())
        };
        let number = |n: c_int| (n >= 0).then(|| n.to_string());
        let device = text(self.device_path);
        let values = [
            ("BARRIER_SWITCH_DEVICE_PATH", "device_path", device.clone()),
            ("BARRIER_GBA_DEVICE_PATH", "device_path", device),
            ("BARRIER_BACKEND", "backend", text(self.backend)),
            ("BARRIER_TIMEOUT", "timeout", text(self.timeout)),
            ("BARRIER_WAIT_POLICY", "wait_policy", text(self.wait_policy)),
            ("BARRIER_STALL_REPORT", "stall_report", text(self.stall_report)),
            ("BARRIER_VERBOSE", "verbose", number(self.verbose)),
            (crate::catalogue::NODE_BLOCK, "node_block", number(self.node_block)),
        ];
        values.into_iter().fold(Params::from_env(), |p, (name, mca, value)| match value {
            Some(v) if !v.is_empty() => p.set_as(name, v, format!("MCA parameter {framework}_fastbar_{mca}")),
            _ => p,
        })
    }
}

/// One structure of Open MPI's that a component's C glue touches: its size in the running
/// library (the class's `cls_sizeof`) and in the headers the glue was built with.
#[repr(C)]
#[derive(Debug)]
pub struct StructSize {
    /// What it is ("communicator", "coll module"), NUL-terminated.
    pub name: *const c_char,
    /// `cls_sizeof` of the running library.
    pub running: usize,
    /// `sizeof` in the headers.
    pub built: usize,
}

/// What a component's C glue knows when Open MPI opens it, for the ABI guard.
#[repr(C)]
#[derive(Debug)]
pub struct BuiltFor {
    /// The Open MPI version of the headers (`OMPI_MAJOR_VERSION` and its kin).
    pub major: c_int,
    /// The minor version.
    pub minor: c_int,
    /// The release.
    pub release: c_int,
    /// The structures the glue touches, `count` of them.
    pub sizes: *const StructSize,
    /// How many `sizes` points to.
    pub count: usize,
    /// The component's `test_abi_mismatch` parameter: act as if they did not match.
    pub test_mismatch: bool,
}

/// The ABI guard, for both components: why the component must not open on the running
/// library (`None`: it may). A version of the library other than the headers', or a structure
/// of another size (the same version configured otherwise, a debug build), refuses.
///
/// # Safety
/// `built.sizes` points to `built.count` entries whose names are NUL-terminated; MPI may be
/// called (`MPI_Get_library_version` may be called before `MPI_Init`).
pub unsafe fn abi_refusal(framework: &str, built: &BuiltFor) -> Option<String> {
    let headers = format!("Open MPI v{}.{}.{}", built.major, built.minor, built.release);
    let mut running = vec![0 as c_char; ffi::MPI_MAX_LIBRARY_VERSION_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_LIBRARY_VERSION_STRING characters and a NUL.
    unsafe { ffi::PMPI_Get_library_version(running.as_mut_ptr(), &mut len) };
    // SAFETY: zeroed past what MPI wrote.
    let running = unsafe { CStr::from_ptr(running.as_ptr()) }.to_string_lossy().into_owned();
    if let Some(refusal) = version_refusal(&headers, &running) {
        return Some(refusal);
    }
    let sizes = match built.count {
        0 => &[][..],
        // SAFETY: the caller's contract.
        n => unsafe { std::slice::from_raw_parts(built.sizes, n) },
    };
    let differ: Vec<String> = sizes
        .iter()
        .filter(|s| s.running != s.built)
        .map(|s| {
            // SAFETY: the caller's contract.
            let name = unsafe { CStr::from_ptr(s.name) }.to_string_lossy();
            format!("{name} {} bytes, built for {}", s.running, s.built)
        })
        .collect();
    if !differ.is_empty() {
        return Some(format!(
            "the running library's structures differ from the headers it was built with ({}): the same version \
             configured differently (a debug build?)",
            differ.join("; ")
        ));
    }
    built.test_mismatch.then(|| {
        format!("{framework}_fastbar_test_abi_mismatch is set (a test of this check; built against {headers})")
    })
}

/// Whether `running` (MPI_Get_library_version's text) is the library of `headers` ("Open MPI
/// v4.1.4"): the same version, not a longer one ("v4.1.40"); else why not.
fn version_refusal(headers: &str, running: &str) -> Option<String> {
    let same = running.strip_prefix(headers).is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()));
    let shown = running.split(',').next().unwrap_or(running).trim();
    (!same).then(|| format!("it was built against {headers} and runs on {shown}"))
}

/// A component's `open`: 1 when it may serve, 0 when the ABI guard refuses ([`abi_refusal`]),
/// said once per node as `{framework}/fastbar: not opened: …; {stays}`, with how to rebuild
/// (`cargo build -p {package} --features {feature}`).
///
/// # Safety
/// As [`abi_refusal`].
pub unsafe fn open(framework: &str, built: &BuiltFor, stays: &str, package: &str, feature: &str) -> c_int {
    // SAFETY: the caller's contract.
    let Some(why) = (unsafe { abi_refusal(framework, built) }) else { return 1 };
    if first_process_of_node() {
        say(
            &format!("{framework}/fastbar"),
            &format!(
                "not opened: {why}; {stays}. Rebuild the component against this Open MPI (cargo build -p {package} \
                 --features {feature}), or remove it."
            ),
        );
    }
    0
}

/// Whether this process speaks for its node (the launcher's local rank 0, or no launcher): the
/// ABI guard's refusal is said once per node, and a refusal on some nodes only is said there.
pub fn first_process_of_node() -> bool {
    std::env::var("OMPI_COMM_WORLD_LOCAL_RANK").map_or(true, |local| local == "0")
}

/// How long a rank waits in [`join`] for the others before it says that some never came
/// (sooner when the stall report is set sooner).
pub const JOIN_REPORT: std::time::Duration = std::time::Duration::from_secs(10);

/// This rank's component declines the communicator: `disable` is set here.
const DISABLED_HERE: u64 = 1;
/// This rank's component declines the communicator: it is smaller than `min_comm_size` here.
const TOO_SMALL_HERE: u64 = 2;

/// The first step of a communicator's set-up in a component, on every rank that calls into it:
/// whether every rank's component will serve `comm`, agreed (issue 50 item 2). Each rank brings
/// what its own settings say (`disable`, `min_comm_size`); if any rank's component declines,
/// every rank declines, and rank 0 says once which ranks' settings differ. `Ok(None)`: serve;
/// `Ok(Some(why))`: every rank declines (said by rank 0 only where the ranks' settings differ,
/// once per process: a component turned off everywhere stays silent).
///
/// The step does not block: a rank whose own component never serves this communicator (the
/// component not loaded there, or a lower priority there) never joins, and the ranks that did
/// say so after [`JOIN_REPORT`] (or the stall report, if sooner), naming the communicator and
/// what to check, and go on waiting.
///
/// `extra`: words of the component's own gathered in the same exchange (the coll component's
/// offers of a freed communicator's barrier to reuse); every rank's, by rank, one after the
/// other, come back with the verdict.
///
/// # Safety
/// `values` is the component's (its strings null or NUL-terminated); `comm` is valid, and
/// every rank of it whose component serves it makes this call in its first barrier on it, with
/// as many `extra` words as every other.
pub unsafe fn join(
    framework: &str,
    comm: raw::Comm,
    values: &McaValues,
    stall_report: Option<std::time::Duration>,
    extra: &[u64],
) -> Result<(Option<String>, Vec<u64>), barrier::Error> {
    let report_after = stall_report.map_or(JOIN_REPORT, |s| s.min(JOIN_REPORT));
    let size = raw::size(comm)?;
    let mut words = vec![declines_here(values, size)];
    words.extend_from_slice(extra);
    let row = words.len();
    let all = raw::sleeping_allgather(comm, words, Some(report_after), |waited| not_joined(framework, comm, waited))?;
    let declines: Vec<u64> = all.chunks(row).map(|r| r[0]).collect();
    let extra = all.chunks(row).flat_map(|r| r[1..].iter().copied()).collect();
    Ok((verdict(framework, comm, &declines)?, extra))
}

/// What this rank's own settings say of a communicator of `size` ranks: 0 to serve it, else
/// why not (bits that [`verdict`] reads).
pub fn declines_here(values: &McaValues, size: usize) -> u64 {
    let mut here = 0;
    if values.disable > 0 {
        here |= DISABLED_HERE;
    }
    if values.min_comm_size >= 0 && size < values.min_comm_size as usize {
        here |= TOO_SMALL_HERE;
    }
    here
}

fn words_for(framework: &str) -> (&'static str, &'static str) {
    // OSHMEM's PEs are the ranks of MPI_COMM_WORLD: its reports speak of PEs.
    if framework == "scoll" {
        ("PE", "PEs")
    } else {
        ("rank", "ranks")
    }
}

/// Said by a rank that has waited `waited` for the others to join a communicator's set-up.
pub fn not_joined(framework: &str, comm: raw::Comm, waited: std::time::Duration) {
    let (one, ranks) = words_for(framework);
    let world_rank = raw::rank(raw::comm_world()).unwrap_or(0);
    let size = raw::size(comm).unwrap_or(0);
    let name = raw::name(comm);
    say(
        &format!("{framework}/fastbar"),
        &format!(
            "world rank {world_rank} has waited {waited:.1?} in the first barrier of {name} ({size} {ranks}) for \
             every one to set up this component's barrier on it; one whose component never does runs \
             another barrier there and never comes (the component not loaded there, or a lower or 0 \
             {framework}_fastbar_priority there): give every {one} the same component and settings \
             (ompi_info --param {framework} fastbar --level 9 on each node). Still waiting."
        ),
    )
}

/// What every rank's [`declines_here`] (by rank) says, one line per setting that declines
/// somewhere: on which ranks.
pub fn declines_named(framework: &str, all: &[u64]) -> Vec<String> {
    let (one, ranks) = words_for(framework);
    let size = all.len();
    let ranks_with = |bit: u64| -> Vec<usize> { (0..all.len()).filter(|&r| all[r] & bit != 0).collect() };
    let mut reasons = Vec::new();
    for (bit, what) in [
        (DISABLED_HERE, format!("{framework}_fastbar_disable is set")),
        (TOO_SMALL_HERE, format!("{framework}_fastbar_min_comm_size is above {size}")),
    ] {
        let these = ranks_with(bit);
        match these.len() {
            0 => {}
            n if n == all.len() => reasons.push(format!("{what} on every {one}")),
            _ => reasons.push(format!("{what} on {ranks} {these:?} of it only")),
        }
    }
    reasons
}

/// Every rank's [`declines_here`], by rank: `Ok(None)` when every rank serves; else why not
/// (said once per process by rank 0 where the ranks' settings differ).
pub fn verdict(framework: &str, comm: raw::Comm, all: &[u64]) -> Result<Option<String>, barrier::Error> {
    if all.iter().all(|&w| w == 0) {
        return Ok(None);
    }
    let size = all.len();
    let (one, ranks) = words_for(framework);
    let name = raw::name(comm);
    let differ = all.iter().any(|&w| w != all[0]);
    let why = declines_named(framework, all).join("; ");
    // Once per process (a program that makes many communicators would repeat it for each).
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if raw::rank(comm)? == 0 && differ && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        say(
            &format!("{framework}/fastbar"),
            &format!(
                "barriers of {name} ({size} {ranks}) stay the next component's on every {one}: {why} (the \
                 component's settings differ between {ranks}: give every {one} the same)"
            ),
        );
    }
    Ok(Some(why))
}

pub use crate::settings::injected;
pub use raw::hook_finalize;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_must_be_the_headers_own() {
        assert_eq!(version_refusal("Open MPI v4.1.4", "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4"), None);
        assert_eq!(version_refusal("Open MPI v4.1.4", "Open MPI v4.1.4"), None);
        let newer = version_refusal("Open MPI v4.1.4", "Open MPI v4.1.40, package: x").expect("refused");
        assert_eq!(newer, "it was built against Open MPI v4.1.4 and runs on Open MPI v4.1.40");
        assert!(version_refusal("Open MPI v4.1.4", "MPICH Version: 4.0").is_some());
    }

    #[test]
    fn mca_values_are_named_as_mca_parameters() {
        let unset = McaValues {
            device_path: std::ptr::null(),
            backend: c"".as_ptr(),
            timeout: std::ptr::null(),
            wait_policy: std::ptr::null(),
            stall_report: std::ptr::null(),
            verbose: -1,
            node_block: -1,
            disable: 0,
            min_comm_size: -1,
        };
        let values = McaValues { device_path: c"/x".as_ptr(), timeout: c"abc".as_ptr(), node_block: 2, ..unset };
        // SAFETY: every pointer is null or a C string literal.
        let p = unsafe { values.params("coll") };
        assert_eq!(p.source("BARRIER_TIMEOUT"), "MCA parameter coll_fastbar_timeout");
        assert_eq!(p.source("BARRIER_GBA_DEVICE_PATH"), "MCA parameter coll_fastbar_device_path");
        assert_eq!(p.get("BARRIER_SWITCH_DEVICE_PATH").as_deref(), Some("/x"));
        assert_eq!(p.source(crate::catalogue::NODE_BLOCK), "MCA parameter coll_fastbar_node_block");
        assert_eq!(p.get(crate::catalogue::NODE_BLOCK).as_deref(), Some("2"));
        let err = p.duration("BARRIER_TIMEOUT").unwrap_err().to_string();
        assert!(err.contains("coll_fastbar_timeout") && !err.contains("BARRIER_TIMEOUT"), "{err}");
        // Unset values (null, empty, below 0) leave the environment's.
        // SAFETY: as above.
        let none = unsafe { unset.params("coll") };
        for name in ["BARRIER_BACKEND", "BARRIER_VERBOSE", "BARRIER_WAIT_POLICY"] {
            assert!(!none.source(name).contains("MCA"), "{name}: {}", none.source(name));
        }
        let shmem = McaValues { wait_policy: c"spin".as_ptr(), verbose: 1, ..unset };
        // SAFETY: as above.
        let shmem = unsafe { shmem.params("scoll") };
        assert_eq!(shmem.source("BARRIER_WAIT_POLICY"), "MCA parameter scoll_fastbar_wait_policy");
        assert_eq!(shmem.source("BARRIER_VERBOSE"), "MCA parameter scoll_fastbar_verbose");
    }
}
