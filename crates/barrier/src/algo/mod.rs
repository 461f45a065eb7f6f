//! The shared algorithms: what more than one backend runs, written once, beneath the backends
//! (Open MPI keeps its in `coll/base`; components only wire them in). A module here imports the
//! layers below it (`backend`, `transport`, `region`, `wait`), never a backend.
//!
//! * [`tree`]: the k-ary gather over cache-line-padded slots and the node's release flag
//!   (loom-checked);
//! * [`topology`]: nodes, their roots and a rank's node tree;
//! * `dissemination`: put-based dissemination over the fabric among some ranks;
//! * [`flag`]: the flag barriers (central, dissemination, tournament, tree, gather) over shared memory,
//!   which the software backend runs and an offload module falls back to;
//! * `halves`: a node's gather and release as the two barriers of a communicator, for crates
//!   that run their own phase among node roots between them;
//! * [`tail`]: the tail spin of a central barrier (the waiter whose CPU holds no missing rank
//!   spins for it).

pub(crate) mod dissemination;
pub mod flag;
pub(crate) mod halves;
pub mod tail;
pub mod topology;
pub mod tree;
