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

/// Items that need real shared memory and system calls: everything but the wait layer. Under
/// `--cfg loom` only the wait layer is built, on loom's primitives, for model checking
/// (tests/loom.rs).
macro_rules! not_under_loom {
    ($($item:item)*) => { $( #[cfg(not(loom))] $item )* };
}

not_under_loom! {
    pub mod algo;
    pub mod backend;
    pub mod backends;
    mod ctrl;
    mod engine;
    mod comm;
    mod error;
    pub mod mmio;
    pub mod params;
    mod region;
    pub mod registry;
    pub mod selector;
    pub mod shm;
    pub mod sys;
    pub mod transport;
    mod universe;
    mod watch;

    pub use backend::{Backend, Decline, EnableContext, Module, Poll, QueryContext};
    pub use comm::{BackendName, Color, Communicator, Key, Request, SharedWindow};
    pub use error::{Error, Report, Result};
    pub use params::{ParamInfo, Params, DEFAULT_STALL_REPORT};
    pub use region::rounds;
    pub use registry::backends;
    pub use selector::{Candidate, Outcome, Selection};
    pub use universe::{
        init, init_with, threads, Universe, ENV_LIFELINE_FD, ENV_NODES, ENV_RANK, ENV_SHM_FD, ENV_SIZE,
    };
}
pub mod pad;
pub mod wait;
pub use wait::WaitPolicy;

/// Under loom: the k-ary gather and fanout slot protocol, the same file as `algo::tree`, built
/// on loom's primitives for `tests/loom.rs`.
#[cfg(loom)]
#[path = "algo/tree.rs"]
pub mod hier_tree;
