//! # barrier-ompi: the Open MPI coll component `fastbar`
//!
//! `mca_coll_fastbar.so` gives every Open MPI program our barrier without a preload: Open MPI
//! loads it like its own collective components (from its component directory, or from
//! `mca_base_component_path`), selects it per communicator by priority, and calls it *below*
//! the MPI and PMPI entry points, so profilers and other PMPI tools keep seeing every
//! `MPI_Barrier`. `ompi_info --param coll fastbar --level 9` lists its parameters.
//!
//! This crate builds `libbarrier_ompi.so` (with the `ompi` feature, against the Open MPI
//! found by `mpicc --showme`, and rsmpi built with `MPI_PKG_CONFIG=ompi`); installed under the
//! name `mca_coll_fastbar.so` it is the component (`barrier ompi` prints where and how).
//! Without the feature the library is empty.
//!
//! ## The shape
//!
//! A thin C glue (`c/coll_fastbar.c`, compiled by `build.rs` against the installed headers)
//! owns every Open MPI structure: the component, the per-communicator module with the
//! *previous* barrier functions it replaces, the MCA parameters, the split-phase requests and
//! the progress callback that completes them. It calls this crate through six functions that
//! know nothing of Open MPI's structures (`src/coll.rs`); the barriers themselves are
//! `barrier_mpi::BarrierComm`s, the same code as the rsmpi trait and the PMPI interposer.
//!
//! ## The protocol
//!
//! * **Open** (once per process): the ABI guard. The component refuses to open, saying why
//!   once per job, unless the running Open MPI is the version it was built against and its
//!   communicator, coll module and request classes have the sizes of the headers it was
//!   compiled with (a debug build of the same version differs). Open MPI then runs without
//!   it: `MPI_Barrier` stays Open MPI's own.
//! * **Query** (per communicator): intracommunicators of at least `min_comm_size` ranks get a
//!   module at `priority` (default 40, above `tuned` and `han`), unless `disable` is set.
//! * **Enable**: the module keeps the barrier and ibarrier functions of the components below
//!   it (the *previous* ones), retained for the communicator's life.
//! * **First `MPI_Barrier`** (collective): every rank builds a `BarrierComm` over the
//!   communicator, with the MCA parameters laid over the `BARRIER_*` environment. Every
//!   decision is agreed among the ranks: either every rank serves it, or every rank declines
//!   and uses the previous functions from then on. A communicator whose barrier would be
//!   `MPI_Barrier` itself (the `mpi` fall back) is declined the same way, straight to the
//!   previous module. The communicators the build makes for itself get no module of ours.
//!   Where every rank kept the barrier of a freed communicator of the same ranks in the same
//!   order, with the same settings and in the same state, it serves instead of a new build
//!   (`barrier_mpi::reuse`).
//! * **`MPI_Ibarrier`**: on a served communicator, our split-phase barrier in an Open MPI
//!   request; `opal_progress` (every `MPI_Wait`, `MPI_Test`, and any call that progresses)
//!   advances it without blocking. A first `MPI_Ibarrier` must not block, so it starts a
//!   build in the background while the previous module serves (`barrier_mpi::background`).
//! * **Free**: a communicator's barrier is freed with its module, or kept for reuse (up to 16
//!   per process) when it is quiet on this rank.
//! * **Finalize**: an `MPI_COMM_SELF` attribute (deleted first thing in `MPI_Finalize`, while
//!   MPI still works) frees every barrier; later calls go to the previous module. It is set
//!   inside `MPI_Init` (at `MPI_COMM_WORLD`'s `comm_query`), before any of the program's: MPI
//!   deletes them in the reverse order, so a library's own callback that runs a barrier finds
//!   ours serving on every rank.

/// Every block this library allocates lives in mappings of its own, never in the heap of the
/// program that loaded it: a block freed there would leave a hole that the program's next
/// `malloc` fills, moving the program's own blocks and with them how glibc trims its heap
/// (ISx ran 1.7x slower so; see the `barrier-heap` crate).
#[global_allocator]
static HEAP: barrier_heap::PrivateHeap = barrier_heap::PrivateHeap::new();

#[cfg(feature = "ompi")]
mod coll;
