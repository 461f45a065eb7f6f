//! # barrier-openshmem
//!
//! The OpenSHMEM layer: the barrier library's barrier for OpenSHMEM programs, set up through
//! OpenSHMEM alone and served over the core's hierarchy. Its surface is the interposer
//! `barrier-shmem` (`libbarrier_shmem.so`), which defines the OpenSHMEM names and calls this
//! crate; `barrier info` lists its settings ([`settings`]). It links no OpenSHMEM library: the
//! implementation's functions are found at run time ([`real`]).
//!
//! # Set-up (in `shmem_init`, `shmem_init_thread` or `start_pes`, after the implementation's)
//!
//! Every PE takes every step; an exchange is an allgather over OpenSHMEM (each PE puts its
//! words into every PE's row of a symmetric buffer, then `shmem_quiet` and the implementation's
//! own barrier), and a failure anywhere travels as a word of the next one, so every PE serves
//! or every PE declines:
//!
//! 1. **Settings**: the core's agreement (`barrier::hierarchy::settings`, as under MPI): every
//!    `BARRIER_*` value checked on every PE, `BARRIER_BACKEND`'s names agreed, rank 0's
//!    `BARRIER_SHMEM_NODE_BLOCK` (or barrier-mpi's `BARRIER_MPI_NODE_BLOCK`), timeout, stall
//!    report and `BARRIER_SHMEM_INTERNODE`.
//! 2. **Nodes**, from the PEs themselves: each PE's host name (hashed) is exchanged (the
//!    implementation's "shared" team is not a node everywhere); with a node block, every K PEs
//!    of a machine are one simulated node. A node's first PE is its root.
//! 3. **The node's segment**, made by the core's node set-up (`barrier::hierarchy::node`, as
//!    under MPI): a memfd of the node's first PE, opened by the others through
//!    `/proc/<pid>/fd/<n>` and checked to be the same file; agreed.
//! 4. **The node's barrier**: every PE joins the segment as a core `Universe`, whose selector
//!    picks the node's backend (and wait policy, from the job's PEs on the machine); agreed.
//! 5. **Between nodes**: the roots' dissemination over `shmem_ulong_atomic_add` into a
//!    symmetric inbox (a line per round, then a departure word per root), ⌈log2 nodes⌉ rounds.
//!
//! PE 0's `BARRIER_TIMEOUT` and `BARRIER_STALL_REPORT` are every PE's. Every wait reports a
//! stall naming whom it waits for, and fails at once when that PE called `shmem_finalize`
//! (docs/shmem.md, "Faults").
//!
//! (Not where the implementation's own barrier serves the barriers of every PE: nodes of one
//! PE, `BARRIER_SHMEM_INTERNODE`, step 6 of docs/shmem.md's set-up; `auto` keeps ours when a
//! timeout or stall report is set.)
//!
//! # Semantics
//!
//! * `shmem_barrier_all` = `shmem_quiet` + a barrier of every PE; `shmem_sync_all` = the barrier
//!   alone (it orders this PE's local stores, as the specification asks, but completes no puts).
//! * The active-set `shmem_barrier(start, stride, size, pSync)` and `shmem_sync(…)` are served
//!   when the set is the whole job (`0, 0, npes`) or its PEs share this PE's node (a table in
//!   the node's shared memory, `sets`), without touching `pSync`; any other set passes through
//!   to the implementation.
//! * Ordering: a PE's writes before its arrival are visible to every PE after it leaves: the
//!   node's barrier stores its flags with release and loads them with acquire (so on a weaker
//!   memory model, A64FX's included, the same holds), and between nodes each root's remote set
//!   follows its node's gather and precedes its node's release.
//! * **Progress**: a waiting PE keeps the implementation progressing where it must (Open MPI's
//!   OSHMEM moves puts to static variables only while the target calls into it): the wait
//!   layer's progress hook calls `opal_progress` when the implementation has it
//!   (`BARRIER_SHMEM_PROGRESS=0` turns it off: a negative control, the put then never lands).

pub mod progress;
pub mod real;
pub mod serve;
pub mod sets;
pub mod settings;
pub mod setup;
pub mod waits;
