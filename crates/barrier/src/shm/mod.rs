//! The job segment: one shared mapping per job that holds every communicator's region.
//!
//! # Life cycle and cleanup
//!
//! The launcher creates the segment with `shm_open(O_CREAT|O_EXCL, 0600)` under a name unique
//! to the job (`/barrier-<pid>-<nanos>`), sizes it, writes the header and the world region,
//! and **unlinks the name at once**. The ranks inherit the open descriptor (its number is in
//! `BARRIER_SHM_FD`) and map it. From the moment the launcher has unlinked it, nothing is left in
//! `/dev/shm` whatever happens next: a rank killed with `kill -9`, the launcher killed, a
//! power-off. The kernel frees the memory when the last mapping goes.
//!
//! In thread mode and for a program started without the launcher, the segment is an anonymous
//! shared mapping and has no name at all.
//!
//! # Allocation
//!
//! Communicator regions and shared windows come from an allocator in the header that any rank
//! may use, without locks (a rank that dies mid-call can leak a block, never block the others):
//! blocks come in size classes of whole lines, four per power of two (at most a quarter
//! wasted); a freed block goes onto its class's
//! free list (a Treiber stack whose head carries a tag against ABA), and an allocation takes
//! from that list first, from the untouched rest of the pool (a bump pointer) otherwise. A block
//! is zeroed when it is reused, because regions rely on starting from zeros.
//!
//! When is memory free? A communicator's region once every member has left it (the region's
//! departure count reaches its size: no rank can touch it any more); a shared window once the
//! last handle to it is dropped (a count in the window's first line). The world region is never
//! freed. The pool is sparse (tmpfs allocates pages on first touch), so its size costs nothing
//! until used.
//!
//! # Abort, exits and the rank table
//!
//! The header's abort word holds `failed world rank + 1` once any rank fails (the launcher sets
//! it when a rank dies; thread mode sets it when a rank panics), or [`JOB_GONE`] once a rank
//! learns that the launcher itself died. Every slow-path wait checks it, so no rank waits for a
//! rank that will never come.
//!
//! The rank table holds two words per world rank: the pid of the process that joined as that
//! rank (so a subprocess of a rank that inherited its environment cannot join as a second copy
//! of it), and how the rank ended once the launcher (or thread mode) saw it exit cleanly. A
//! waiter that finds a member exited without leaving its communicator stops waiting for it (see
//! `watch.rs`).
//!
//! # The folder
//!
//! `classes.rs` and `plain.rs` at the bottom ← `segment.rs` (header, shape, mapping, typed
//! access) ← `alloc.rs` (the allocator), `ranks.rs` (rank table, abort), `shared.rs`
//! ([`Shared`]).

mod alloc;
mod classes;
mod plain;
mod ranks;
mod segment;
mod shared;

pub use plain::SharedPlain;
pub use segment::{JobShape, RankExit, RankNames, Segment, DEFAULT_POOL_BYTES, JOB_GONE, MAX_RANKS};
pub use shared::Shared;

pub(crate) use segment::node_of;

#[cfg(test)]
mod tests;
