//! The OpenSHMEM implementation's own functions, found at run time.
//!
//! This library links no OpenSHMEM library: it is preloaded in front of whichever the program
//! uses. Each function is looked up once, when the program calls `shmem_init`: the profiling
//! name (`pshmem_barrier_all`, which OpenSHMEM 1.5 defines and Open MPI's OSHMEM exports) where
//! the implementation has it, else the next definition of the standard name after this
//! library (`dlsym(RTLD_NEXT, "shmem_barrier_all")`), so a call never comes back here.

use std::ffi::{c_char, c_int, c_long, c_ulong, c_void, CStr};

/// `void f(void)`.
pub type Void = unsafe extern "C" fn();
/// The active-set barrier's signature: `PE_start, logPE_stride, PE_size, pSync`.
pub type ActiveSet = unsafe extern "C" fn(c_int, c_int, c_int, *mut c_long);

macro_rules! load {
    ($name:literal, $ty:ty) => {
        match function($name) {
            // SAFETY: the implementation defines this name with the signature OpenSHMEM
            // specifies, which is `$ty`.
            Some(p) => Some(unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }),
            None => None,
        }
    };
}

/// The implementation's own definitions of the names this library exports: what a call that
/// is not served goes to. Each is looked up on its own, so a call passes through even when the
/// implementation lacks something only serving needs ([`Real`]).
#[derive(Clone, Copy, Debug)]
pub struct Forward {
    pub init: Option<Void>,
    pub init_thread: Option<unsafe extern "C" fn(c_int, *mut c_int) -> c_int>,
    pub start_pes: Option<unsafe extern "C" fn(c_int)>,
    pub finalize: Option<Void>,
    pub barrier_all: Option<Void>,
    pub sync_all: Option<Void>,
    pub barrier: Option<ActiveSet>,
    pub sync: Option<ActiveSet>,
}

impl Forward {
    pub fn find() -> Forward {
        Forward {
            init: load!("shmem_init", Void),
            init_thread: load!("shmem_init_thread", unsafe extern "C" fn(c_int, *mut c_int) -> c_int),
            start_pes: load!("start_pes", unsafe extern "C" fn(c_int)),
            finalize: load!("shmem_finalize", Void),
            barrier_all: load!("shmem_barrier_all", Void),
            sync_all: load!("shmem_sync_all", Void),
            barrier: load!("shmem_barrier", ActiveSet),
            sync: load!("shmem_sync", ActiveSet),
        }
    }
}

/// The implementation's functions serving needs.
#[derive(Clone, Copy, Debug)]
pub struct Real {
    pub barrier_all: Void,
    pub quiet: Void,
    pub my_pe: unsafe extern "C" fn() -> c_int,
    pub n_pes: unsafe extern "C" fn() -> c_int,
    pub align: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub free: unsafe extern "C" fn(*mut c_void),
    pub putmem: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int),
    /// Adds to a remote word: the internode signal (an add, unlike a set, needs no ordering
    /// between two signals from one PE to one word: `shmem_sync_all` has no quiet between).
    pub ulong_atomic_add: unsafe extern "C" fn(*mut c_ulong, c_ulong, c_int),
    pub global_exit: Option<unsafe extern "C" fn(c_int)>,
    /// The implementation's progress engine where it has one to call (Open MPI's
    /// `opal_progress`, which OSHMEM needs for puts to static variables: active messages that
    /// only move while the target calls into the library).
    pub progress: Option<Void>,
    /// What the implementation calls itself (its `shmem_info_get_name`, or the library's file).
    pub name: &'static str,
}

/// The address of `name` after this library (`RTLD_NEXT`), or anywhere (`RTLD_DEFAULT`).
fn symbol(name: &CStr, next: bool) -> Option<*mut c_void> {
    let handle = if next { libc::RTLD_NEXT } else { libc::RTLD_DEFAULT };
    // SAFETY: `name` is NUL-terminated; dlsym only looks the name up.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// The profiling name if the implementation has it, else the next definition of the name.
fn function(name: &str) -> Option<*mut c_void> {
    let profiling = std::ffi::CString::new(format!("p{name}")).ok()?;
    let plain = std::ffi::CString::new(name).ok()?;
    symbol(&profiling, false).or_else(|| symbol(&plain, true))
}

impl Real {
    /// Looks every function serving needs up; `Err` names the first one the program's OpenSHMEM
    /// lacks (then every call passes through).
    pub fn find() -> Result<Real, String> {
        let missing = |name: &str| format!("the program's OpenSHMEM defines no {name}");
        macro_rules! need {
            ($name:literal, $ty:ty) => {
                load!($name, $ty).ok_or_else(|| missing($name))?
            };
        }
        let progress = symbol(c"opal_progress", false)
            // SAFETY: Open MPI's `void opal_progress(void)`.
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, Void>(p) });
        Ok(Real {
            barrier_all: need!("shmem_barrier_all", Void),
            quiet: need!("shmem_quiet", Void),
            my_pe: need!("shmem_my_pe", unsafe extern "C" fn() -> c_int),
            n_pes: need!("shmem_n_pes", unsafe extern "C" fn() -> c_int),
            align: need!("shmem_align", unsafe extern "C" fn(usize, usize) -> *mut c_void),
            free: need!("shmem_free", unsafe extern "C" fn(*mut c_void)),
            putmem: need!("shmem_putmem", unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int)),
            ulong_atomic_add: need!("shmem_ulong_atomic_add", unsafe extern "C" fn(*mut c_ulong, c_ulong, c_int)),
            global_exit: load!("shmem_global_exit", unsafe extern "C" fn(c_int)),
            progress,
            name: implementation_name(progress.is_some()),
        })
    }
}

/// The implementation's name, as far as it can be told without calling it.
fn implementation_name(open_mpi: bool) -> &'static str {
    if open_mpi {
        return "Open MPI's OSHMEM";
    }
    for (library, name) in [
        (c"sandia_shmem_version", "Sandia OpenSHMEM"),
        (c"shmem_internal_init", "Sandia OpenSHMEM"),
        (c"MPIDI_SHM_init", "MPICH's OpenSHMEM"),
    ] {
        if symbol(library, false).is_some() {
            return name;
        }
    }
    "an OpenSHMEM implementation"
}

/// The process's host name, hashed (FNV-1a): which PEs share a machine.
pub fn host_hash() -> u64 {
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` holds 256 bytes; gethostname writes at most that many.
    unsafe { libc::gethostname(buf.as_mut_ptr(), buf.len()) };
    buf[255] = 0;
    // SAFETY: NUL-terminated above.
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
    name.to_bytes().iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}
