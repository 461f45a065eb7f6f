//! # barrier-oshmem: the OSHMEM scoll component `fastbar`
//!
//! `mca_scoll_fastbar.so` gives OpenSHMEM programs on Open MPI's OSHMEM our barrier the way
//! the GBA analysis (`seeds/003`) plugs an accelerator in: as an *scoll* component, selected by
//! priority for every group of PEs, with the previous component's barrier kept. It serves
//! `shmem_barrier_all`, `shmem_sync_all` and the active-set `shmem_barrier`/`shmem_sync`
//! (every group OSHMEM runs a barrier on), never touching `pSync`.
//!
//! This crate builds `libbarrier_oshmem.so` (with the `oshmem` feature, against the Open MPI
//! found by `mpicc --showme`, and rsmpi built with `MPI_PKG_CONFIG=ompi`); installed as
//! `mca_scoll_fastbar.so` it is the component (`barrier ompi` prints how). Without the
//! feature the library is empty.
//!
//! ## The protocol
//!
//! * **Open**: the ABI guard, as for the coll component: the running Open MPI must be the
//!   version the headers were, with the same group and scoll module sizes; otherwise it
//!   refuses to open, saying why once per job, and OSHMEM's own barriers serve.
//! * **Query and enable** (per group, and OSHMEM makes a group for every active-set call):
//!   a module that keeps the previous component's barrier. Enable never fails: in scoll a
//!   failed enable wipes the group's other modules and `shmem_init` aborts, so the fall back
//!   happens inside the module.
//! * **First barrier of a set of PEs** (collective over them): the PEs are MPI_COMM_WORLD
//!   ranks (OSHMEM's PEs are), so the set gets an MPI communicator (`MPI_Comm_create_group`,
//!   collective over the set alone; `MPI_COMM_WORLD` itself for every PE) and a
//!   `barrier_mpi::BarrierComm` over it, with every decision agreed: every member serves the
//!   set or every member keeps the previous barrier. The outcome is cached by the set's PEs
//!   (an active set comes back as a new group each call).
//! * **A barrier**: `shmem_barrier_all` and `shmem_barrier` complete the PE's puts first (OSHMEM
//!   does it before calling scoll in its specification-compatible build, which Debian's is;
//!   otherwise the module does); then the set's barrier, whose waits keep MPI (and so OSHMEM's
//!   puts to static variables) progressing.
//! * **Finalize**: an `MPI_COMM_SELF` attribute frees every set's barrier at `MPI_Finalize`
//!   (OSHMEM finalizes MPI last); later barriers go to the previous module.

/// Every block this library allocates lives in mappings of its own, never in the heap of the
/// program that loaded it: a block freed there would leave a hole that the program's next
/// `malloc` fills, moving the program's own blocks and with them how glibc trims its heap
/// (ISx ran 1.7x slower so; see the `barrier-heap` crate).
#[global_allocator]
static HEAP: barrier_heap::PrivateHeap = barrier_heap::PrivateHeap::new();

#[cfg(feature = "oshmem")]
mod scoll;
