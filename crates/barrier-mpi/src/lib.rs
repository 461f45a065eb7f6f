//! # barrier-mpi
//!
//! Barrier communicators over MPI (Open MPI or MPICH, through rsmpi): shared memory inside a
//! node, MPI between nodes, and `MPI_Barrier` itself when nothing better can serve. The
//! `barrier-pmpi` interposer gives the same to unmodified MPI programs.
//!
//! Everything here needs the `mpi` feature (and an MPI library, libclang and pkg-config to
//! build); without it the crate is empty, so the workspace builds on machines without MPI.
//!
//! ## From an rsmpi program
//!
//! Bring `FastBarrier` into scope and every rsmpi communicator has our barrier beside its own
//! `barrier()` and `immediate_barrier()` (the trait's own examples are compiled with the `mpi`
//! feature; this one is only shown):
//!
//! ```ignore
//! use barrier_mpi::FastBarrier;
//! use mpi::traits::*;
//!
//! let universe = mpi::initialize().unwrap();
//! let world = universe.world();
//! world.fast_barrier()?; // blocking
//! let request = world.immediate_fast_barrier()?; // split phase: arrive now...
//! request.wait()?; // ...complete later (or poll request.test())
//! # Ok::<(), barrier_mpi::Error>(())
//! ```
//!
//! The first call on a communicator builds its barrier (steps below) and caches it as an
//! attribute of the MPI communicator, freed with it (`FastBarrier` says more);
//! `FastBarrierSettings` gives settings in code. `BarrierComm` is the same barrier as a
//! value of its own, with `dup`, `split` and its reports, for programs that want to hold it.
//!
//! ## Making a communicator (collective over the MPI communicator's ranks)
//!
//! 1. **Settings, agreed** (the core's agreement, `barrier::hierarchy::settings`, as under
//!    OpenSHMEM). Every rank checks every `BARRIER_*` setting it has; the verdicts and rank 0's
//!    values of the settings that must match (`BARRIER_MPI_NODE_BLOCK`, `BARRIER_BACKEND`,
//!    `BARRIER_TIMEOUT`, `BARRIER_STALL_REPORT`, `BARRIER_MPI_INTERNODE`) are exchanged in one
//!    `MPI_Allgather`, with each rank's machine and CPU mask. A bad value anywhere fails the call
//!    on every rank, naming the rank and the setting.
//! 2. **Nodes.** Where every rank is on one machine (and one node block), the communicator is
//!    its one node, known from that allgather. Otherwise `MPI_Comm_split_type
//!    (MPI_COMM_TYPE_SHARED)` finds the ranks of each machine; with `BARRIER_MPI_NODE_BLOCK=K`
//!    every K consecutive world ranks of a machine are one node, so the internode path runs on
//!    one machine. The first rank of each node is its root.
//! 3. **The node's segment.** The node's first rank creates a shared segment (0600, exclusive,
//!    unlinked at once: nothing is ever left in `/dev/shm`, whatever dies); the others map it
//!    through that process's descriptor (`/proc/<pid>/fd/<n>`) while it is alive. Whether every
//!    rank mapped it is agreed.
//! 4. **The node's communicator.** Each rank joins the node's segment as a core
//!    [`barrier::Universe`]: the core selector picks the node's backend (dissemination on shared
//!    memory, or a barrier device), with its own agreement inside the node. Agreed across nodes.
//! 5. **The internode phase.** With more than one node, the roots set up dissemination over
//!    MPI point-to-point messages on their private communicator (one message per round, no
//!    receive posted between barriers), or MPI's own barrier among them. Agreed.
//!
//! Any step that fails on any rank makes every rank fall back together to the `mpi` backend
//! (`PMPI_Barrier` on a private duplicate, `PMPI_Ibarrier` for the split phase), with the
//! reason in `BarrierComm::describe`,
//! unless `BARRIER_BACKEND` names backends without `mpi`: then it fails on every rank.
//!
//! ## A barrier
//!
//! One node: the node's barrier. Several nodes (`hierarchical`): the node's gather (the root
//! learns that every rank of the node has arrived; the others go on at once), the roots'
//! dissemination over MPI, the node's release (one flag the root stores, the others wait for):
//! one gather and one release, not two whole node barriers. `mpi`: `PMPI_Barrier`.
//!
//! Every MPI call of this crate goes to a `PMPI_` entry point, so neither the interposer nor a
//! profiler sees the library's own traffic.

#![cfg_attr(docsrs, feature(doc_cfg))]

// For the Open MPI coll component's Rust side (barrier-ompi), not for users.
#[cfg(feature = "mpi")]
#[doc(hidden)]
pub mod background;
pub mod catalogue;
#[cfg(feature = "mpi")]
mod census;
// The node roots' link; public for the Open MPI coll component's Rust side (barrier-ompi): its
// private channel.
#[cfg(feature = "mpi")]
#[doc(hidden)]
pub mod channel;
#[cfg(feature = "mpi")]
mod comm;
#[cfg(feature = "mpi")]
mod derived;
#[cfg(feature = "mpi")]
mod ext;
// For the Open MPI components' Rust side (barrier-ompi, barrier-oshmem), not for users.
#[cfg(feature = "mpi")]
#[doc(hidden)]
pub mod glue;
#[cfg(feature = "mpi")]
mod internode;
// `raw` is public for the interposer (barrier-pmpi), not for users.
#[cfg(feature = "mpi")]
#[doc(hidden)]
pub mod raw;
#[cfg(feature = "mpi")]
mod request;
// For the Open MPI coll component and the interposer, not for users.
#[doc(hidden)]
pub mod reuse;
#[cfg(feature = "mpi")]
mod settings;

/// How a waiting rank waits ([`FastBarrierSettings::wait_policy`]), re-exported so that a
/// program needs no dependency on the core crate to name one.
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
pub use barrier::WaitPolicy;
/// The errors this crate returns (the core library's).
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
pub use barrier::{Error, Report, Result};
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
pub use census::hybrid_team;
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
pub use comm::BarrierComm;
#[cfg(feature = "mpi")]
#[doc(hidden)]
pub use comm::ReuseKey;
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
pub use ext::{
    initialize, initialize_with_threading, set_finalize_hook, FastBarrier, FastBarrierRequest, FastBarrierSettings,
};
#[cfg(feature = "mpi")]
#[doc(hidden)]
pub use request::Detached;
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
pub use request::Request;
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
pub use settings::{HIERARCHICAL, MPI_BACKEND};
/// The old name of [`BarrierComm`] (it clashed with rsmpi's `Communicator` trait).
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
#[deprecated(since = "0.1.0", note = "renamed BarrierComm: the name clashed with rsmpi's Communicator trait")]
pub type Communicator = BarrierComm;
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
pub use mpi;
