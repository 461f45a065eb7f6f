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
//! What this documentation shows is the API for users and for backends written outside the
//! crate ([`backend`], [`wait`], [`params`]) and the wording of messages ([`text`], which the
//! sibling crates print with too), and it follows semver. The modules `algo`, `mmio`,
//! `registry`, `shm`, `sys` and `transport` are public only because the workspace's sibling
//! crates (the launcher, the emulator, barrier-mpi) build on them: they are `#[doc(hidden)]`,
//! not part of the API, and may change in any release.

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
#[doc(hidden)]
pub mod algo;
#[cfg(not(loom))]
pub mod backend;
#[cfg(not(loom))]
pub mod backends;
#[cfg(not(loom))]
mod comm;
#[cfg(not(loom))]
mod ctrl;
#[cfg(not(loom))]
mod engine;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
pub mod hierarchy;
#[cfg(not(loom))]
#[doc(hidden)]
pub mod mmio;
#[cfg(not(loom))]
pub mod params;
#[cfg(not(loom))]
mod region;
#[cfg(not(loom))]
#[doc(hidden)]
pub mod registry;
#[cfg(not(loom))]
mod selector;
#[cfg(not(loom))]
#[doc(hidden)]
pub mod shm;
#[cfg(not(loom))]
#[doc(hidden)]
pub mod sys;
#[cfg(not(loom))]
pub mod text;
#[cfg(not(loom))]
#[doc(hidden)]
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
