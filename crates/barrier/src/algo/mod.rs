//! The shared algorithms: what more than one backend runs, written once, beneath the backends
//! (Open MPI keeps its in `coll/base`; components only wire them in). A module here imports the
//! layers below it (`backend`, `transport`, `region`, `wait`), never a backend.
//!
//! * [`tree`]: the k-ary gather and fanout over cache-line-padded slots (loom-checked);
//! * [`topology`]: nodes, their roots and a rank's node tree;
//! * `dissemination`: put-based dissemination over the fabric among some ranks;
//! * [`flag`]: the flag barriers (central, dissemination, tournament, tree) over shared memory,
//!   which the software backend runs and an offload module falls back to;
//! * [`tail`]: the tail spin of a central barrier (the waiter whose CPU holds no missing rank
//!   spins for it).

pub(crate) mod dissemination;
pub mod flag;
pub mod tail;
pub mod topology;
pub mod tree;
