//! # barrier-pmpi: `MPI_Barrier` of unmodified MPI programs through the barrier selector
//!
//! `libbarrier_pmpi.so` defines `MPI_Barrier` (and the Fortran entry points) in the way the MPI
//! profiling interface allows: a program that loads it first (`LD_PRELOAD`, or linking it
//! before the MPI library) calls ours, and ours calls `PMPI_Barrier` whenever it does not serve
//! the communicator.
//!
//! * **First barrier on a communicator** (collective, as `MPI_Barrier` is): a
//!   `barrier_mpi::BarrierComm` is made for it, with every decision agreed among its ranks
//!   (bad `BARRIER_*` settings, a node segment that cannot be mapped, an internode set-up that
//!   fails): either every rank gets our barrier, or every rank declines and calls
//!   `PMPI_Barrier` from then on. Intercommunicators are declined. The outcome is cached on the
//!   communicator as an attribute (a keyval of this library). The ranks first meet asleep in an
//!   `MPI_Iallgather` that carries each rank's offers of a kept barrier: where every rank kept
//!   the barrier of a freed communicator of the same ranks in the same order, with the same
//!   settings and in the same state, it serves instead of a new build (`barrier_mpi::reuse`).
//! * **Later barriers**: one attribute lookup, then our barrier (or `PMPI_Barrier`).
//! * **Teardown**: the attribute's delete callback keeps our communicator's barrier for reuse (up
//!   to 16, when it is quiet) or drops it when the application frees its communicator
//!   (`MPI_Comm_free`); `MPI_Finalize` (also intercepted) deletes every attribute still set and
//!   drops the kept barriers, before `PMPI_Finalize`, so nothing of ours outlives MPI.
//! * **Fortran**: Open MPI's Fortran `MPI_BARRIER` calls `PMPI_Barrier` directly, so a C-only
//!   interposer would miss it: this library also defines `mpi_barrier_`, `mpi_barrier__`,
//!   `mpi_barrier`, `MPI_BARRIER` and `mpi_barrier_f08_` (and the same for `MPI_FINALIZE`),
//!   which convert the handle (`MPI_Comm_f2c`) and come here.
//! * **Not intercepted**: `MPI_Ibarrier` (and the persistent `MPI_Barrier_init`): completing our
//!   split-phase barrier from `MPI_Wait`/`MPI_Test`/`MPI_Waitall`/… would need every
//!   completion call intercepted and MPI's requests mixed with ours, so they stay MPI's.
//! * `BARRIER_VERBOSE=1`: the communicator's rank 0 says once, on stderr, which backend it got
//!   and why the others declined. A fall back caused by an error is always reported.
//!
//! A barrier error of ours (a timeout naming the missing ranks, a rank that left) is printed and
//! raised through the communicator's error handler with `MPI_ERR_OTHER`, as MPI would.

/// Every block this library allocates lives in mappings of its own, never in the heap of the
/// program that loaded it: a block freed there would leave a hole that the program's next
/// `malloc` fills, moving the program's own blocks and with them how glibc trims its heap
/// (ISx ran 1.7x slower so; see the `barrier-heap` crate).
#[global_allocator]
static HEAP: barrier_heap::PrivateHeap = barrier_heap::PrivateHeap::new();

#[cfg(feature = "mpi")]
mod interpose;
#[cfg(all(not(feature = "mpi"), target_os = "linux"))]
mod without_mpi;
