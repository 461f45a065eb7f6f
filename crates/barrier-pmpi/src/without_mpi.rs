//! The library as built without its `mpi` feature: it defines no MPI symbol, so preloaded into
//! an MPI program it would intercept nothing and the program would time the MPI library's own
//! barrier while its user believes it timed ours. (`cargo build --workspace` builds it this way:
//! features are per build, and the workspace's default has no MPI.) Instead of passing for the
//! real one in silence, it says so on stderr when it is loaded into a process that has MPI's
//! profiling symbols, once per process, from rank 0 of the job where the launcher says which
//! that is.

/// What the library says, and how to build the real one.
pub const WARNING: &str = "barrier: this libbarrier_pmpi.so was built without its `mpi` feature: it intercepts \
                           nothing, and MPI_Barrier here is the MPI library's own. Build the interposer with `cargo \
                           build --release -p barrier-pmpi --features mpi` (MPI_PKG_CONFIG=mpich for MPICH) and \
                           preload that one";

/// Whether this process is an MPI program: it has `PMPI_Barrier` among its loaded symbols.
fn is_mpi_program() -> bool {
    // SAFETY: a NUL-terminated name looked up in the default scope; nothing is called through it.
    !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"PMPI_Barrier".as_ptr()) }.is_null()
}

/// Rank 0 of the job, or a process whose rank the launcher does not give.
fn first_rank() -> bool {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .is_none_or(|r| r.trim() == "0")
}

extern "C" fn on_load() {
    if is_mpi_program() && first_rank() {
        barrier::text::say(WARNING);
    }
}

/// Runs [`on_load`] when the dynamic loader maps this library (before `main`).
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
