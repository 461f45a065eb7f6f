//! # barrier
//!
//! The fastest correct barrier the machine offers, for HPC programs.
//!
//! Every [`Communicator`] gets one barrier *module*, chosen by a collective *selector* from
//! several [`Backend`]s by priority; the software backend (`dissemination`) works everywhere and
//! ends every fallback chain. Epochs are 64-bit and only grow: every signal means "I reached
//! epoch e", every wait is "until at least e", nothing is ever reset.
//!
//! ```
//! // Four ranks as threads; under `barrier run -n 4 -- prog`, use `barrier::init()?` instead.
//! let sums = barrier::threads::run(4, |world| {
//!     for _ in 0..100 {
//!         world.barrier().unwrap();
//!     }
//!     world.epoch()
//! })
//! .unwrap();
//! assert_eq!(sums, vec![100; 4]);
//! ```
//!
//! See `docs/architecture.md` in the repository for the design, and `barrier info` for every
//! parameter.
//!
//! # The public surface
//!
//! For users and for backends written outside the crate: the communicators and [`init`],
//! [`sync`] (barriers for a program's own threads), [`backend`] (the traits a backend
//! implements), [`wait`], [`params`] and [`registry`] (the catalogue of backends and settings,
//! where a layer above the core registers its own), [`hierarchy`] (the barrier across nodes
//! that a layer over MPI or OpenSHMEM composes), and the wording of messages ([`text`]).
//!
//! The platform beneath them is documented too, for the crates that build on it (the launcher,
//! the emulator, barrier-mpi, barrier-openshmem) and for backends from outside:
//!
//! * [`sys`]: every system call the library makes (CPU placement, futexes, file locks);
//! * [`shm`]: the job segment and the node segments made over a memfd;
//! * [`mmio`]: device registers, as the hardware drivers and the emulator both reach them;
//! * [`transport`]: how a rank's signal reaches another rank's slot (shared memory, a network);
//! * [`algo`]: the algorithms more than one backend runs (trees, dissemination, flags).
//!
//! These follow semver with the rest of the crate, but they change more often: their changes
//! are listed in the CHANGELOG under "Restructure".

#[cfg(not(target_os = "linux"))]
compile_error!(
    "barrier runs on Linux only: it waits on futexes, maps POSIX shared memory and memfds, and reads \
     /proc and /sys for the job's placement; build it for a Linux target"
);

// Everything but the wait layer (and `pad`) needs real shared memory and system calls: under
// `--cfg loom` only the wait layer is built, on loom's primitives, for model checking
// (tests/loom.rs). Each item carries its own `cfg` (rather than one macro around them all) so
// that rustfmt and the architecture test read every module.
#[cfg(not(loom))]
pub mod algo;
#[cfg(not(loom))]
pub mod backend;
#[cfg(not(loom))]
pub mod backends;
#[cfg(not(loom))]
mod comm;
#[cfg(not(loom))]
pub mod compose;
#[cfg(not(loom))]
mod ctrl;
#[cfg(not(loom))]
mod engine;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
pub mod hierarchy;
#[cfg(not(loom))]
pub mod mmio;
#[cfg(not(loom))]
pub mod params;
#[cfg(not(loom))]
mod region;
#[cfg(not(loom))]
pub mod registry;
#[cfg(not(loom))]
mod selector;
#[cfg(not(loom))]
pub mod shm;
#[cfg(not(loom))]
pub mod sys;
#[cfg(not(loom))]
pub mod text;
#[cfg(not(loom))]
pub mod transport;
#[cfg(not(loom))]
mod universe;
#[cfg(not(loom))]
mod watch;
#[cfg(not(loom))]
pub use backend::{Backend, Decline, EnableContext, Module, Poll, QueryContext};
#[cfg(not(loom))]
pub use comm::{BackendName, Color, Communicator, Key, Request, SharedWindow};
#[cfg(not(loom))]
pub use error::{Error, Report, Result};
#[cfg(not(loom))]
pub use params::{ParamInfo, Params, DEFAULT_STALL_REPORT};
#[cfg(not(loom))]
pub use region::rounds;
#[cfg(not(loom))]
pub use registry::{backends, register_backend};
#[cfg(not(loom))]
pub use selector::{Candidate, Outcome, Selection};
#[cfg(not(loom))]
pub use universe::{init, init_with, threads, Universe, ENV_LIFELINE_FD, ENV_NODES, ENV_RANK, ENV_SHM_FD, ENV_SIZE};
pub mod pad;
pub mod sync;
pub mod wait;
pub use wait::WaitPolicy;

/// Under loom: the k-ary gather and release slot protocol, the same file as `algo::tree`, built
/// on loom's primitives for `tests/loom.rs`.
#[cfg(loom)]
#[path = "algo/tree.rs"]
pub mod hier_tree;
