//! What the Open MPI components share (barrier-ompi's coll component, barrier-oshmem's scoll
//! component), on the Rust side of their C glue: the storage of the exported component
//! structure, the outcomes the glue understands, the settings the glue passes, the finalize
//! hook, and the guard that keeps a panic from unwinding into Open MPI. Not for users.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use barrier::Params;

use crate::mpi::ffi;
use crate::raw::{self, DeleteAttr};

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

/// Runs `f`; a panic must not unwind into Open MPI: it ends the job, saying where.
pub fn guarded<T>(component: &str, what: &str, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        say(component, &format!("internal error (panic) in {what}; aborting the job"));
        // SAFETY: MPI_Abort on MPI_COMM_WORLD ends the job; it does not return.
        unsafe { ffi::PMPI_Abort(raw::comm_world(), 70) };
        std::process::abort()
    })
}

/// The MCA parameters the C glue passes, as `NAME=value` lines, laid over the environment;
/// errors name each as the MCA parameter the user set (`coll_fastbar_timeout` for
/// `BARRIER_TIMEOUT` with `framework` `coll`).
pub fn settings(text: &str, framework: &str) -> Params {
    text.lines().filter_map(|l| l.split_once('=')).fold(Params::from_env(), |p, (name, value)| {
        let name = name.trim();
        let given_in = format!("MCA parameter {}", mca_name(framework, name));
        p.set_as(name, value.trim(), given_in)
    })
}

/// The component's MCA parameter that sets `BARRIER_*` variable `name`.
fn mca_name(framework: &str, name: &str) -> String {
    let own = match name {
        "BARRIER_SWITCH_DEVICE_PATH" | "BARRIER_GBA_DEVICE_PATH" => "device_path".to_string(),
        "BARRIER_MPI_NODE_BLOCK" => "node_block".to_string(),
        other => other.trim_start_matches("BARRIER_").to_ascii_lowercase(),
    };
    format!("{framework}_fastbar_{own}")
}

/// Sets, once, an `MPI_COMM_SELF` attribute whose deletion (first thing in `MPI_Finalize`,
/// while MPI still works) runs `at_finalize`; `key` keeps its key (`None` if MPI refused).
pub fn hook_finalize(key: &OnceLock<Option<c_int>>, at_finalize: DeleteAttr) {
    key.get_or_init(|| {
        let k = raw::create_keyval(at_finalize).ok()?;
        // SAFETY: the value is null; the callback frees nothing it points to.
        unsafe { raw::set_attr(raw::comm_self(), k, std::ptr::null_mut()) }.ok()?;
        Some(k)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mca_settings_are_named_as_mca_parameters() {
        let p = settings("BARRIER_TIMEOUT=abc\nBARRIER_GBA_DEVICE_PATH=/x\nBARRIER_MPI_NODE_BLOCK=2\n", "coll");
        assert_eq!(p.source("BARRIER_TIMEOUT"), "MCA parameter coll_fastbar_timeout");
        assert_eq!(p.source("BARRIER_GBA_DEVICE_PATH"), "MCA parameter coll_fastbar_device_path");
        assert_eq!(p.source(barrier::params::MPI_NODE_BLOCK), "MCA parameter coll_fastbar_node_block");
        let err = p.duration("BARRIER_TIMEOUT").unwrap_err().to_string();
        assert!(err.contains("coll_fastbar_timeout") && !err.contains("BARRIER_TIMEOUT"), "{err}");
        let shmem = settings("BARRIER_WAIT_POLICY=spin\n", "scoll");
        assert_eq!(shmem.source("BARRIER_WAIT_POLICY"), "MCA parameter scoll_fastbar_wait_policy");
    }
}
