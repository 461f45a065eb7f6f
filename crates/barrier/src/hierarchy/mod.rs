//! One hierarchy, composed once: the barrier across nodes that the layers above the core
//! (`barrier-mpi`, `barrier-shmem`) serve, and the core's own hierarchical backend over the
//! simulated network (`comm/create.rs`'s `compose`). The composer itself is
//! [`crate::compose`], beneath the communicators; this module adds what the layers above
//! need around it (their node set-up, their settings' agreement, flights fixed in advance)
//! and names it over the core's [`Communicator`] ([`Hierarchy`]). A layer brings two things:
//!
//! * **the node's communicator**: a core [`Communicator`] over the node's shared segment (set up
//!   once for every layer by [`set_up_node`] over the layer's exchange: [`node`]), split
//!   into its two halves ([`Communicator::halves`]: a gather, after which the node's root knows
//!   every rank of the node arrived, and a release), or, where a backend is forced on the
//!   node, a whole barrier of that backend in each place;
//! * **the roots' link** ([`RootsLink`]): its transport among the node roots (MPI
//!   point-to-point, OpenSHMEM atomics), set up for the dissemination's rounds, and its
//!   progress call; and, where it has one, the implementation's own barrier among the roots
//!   ([`OwnBarrier`]).
//!
//! The composer ([`Hierarchy`]) runs the rest, the same for every layer:
//!
//! 1. **gather**: the node's first half; its root returns once the node's ranks have arrived,
//!    the others at once;
//! 2. **roots** ([`Roots`]): ⌈log2 R⌉ rounds of dissemination among the R node roots over the
//!    link, or the implementation's own barrier among them: [`Choice::Measure`] times both once,
//!    when the communicator is made (a chunk of 20 of each to warm up, then five alternating
//!    chunks; root 0's medians decide, and ours is kept only when at least 5% faster), unless a
//!    timeout or a stall report is set: only our rounds can name the root a wait is for;
//! 3. **release**: the node's second half; the root stores it, the others wait for it.
//!
//! A rank alone on its node skips its node's halves (they would wait for nobody): its barrier,
//! blocking or split-phase, is the roots' phase alone, fenced (release before, acquire after).
//! Split-phase barriers (`ibarrier`) are *flights* queued in order (see [`flights`]).
//!
//! **Waits.** The node's halves wait as every core communicator does (spin, yield, park, the
//! layer's progress hook on the slow path: [`crate::wait`]). The roots' phase polls
//! ([`crate::wait::poll`]): the link's progress on every poll that finds its slot not yet
//! arrived (an MPI message lands only while this rank calls MPI), spinning or yielding between
//! polls. Only where the link's slot is a flag that lands without this rank's calls and whose
//! sender wakes sleepers (the core's simulated network where the wait policy parks:
//! `RootsLink::parks_on`) does a root sleep on it through the wait layer, looking every 10 ms.
//! Every few hundred polls it looks at the clock: a root that left (finalized after fewer barriers) fails the
//! wait at once, `BARRIER_TIMEOUT` fails it naming the root waited for, and
//! `BARRIER_STALL_REPORT` says once who it waits for and goes on (one report function, in the
//! layer's words: [`Names`]). Both count from the first wait of the barrier's roots' phase.
//!
//! **Failure.** A root whose phase fails marks the node's segment aborted, or, where the node
//! shares the job's segment (the core's simulated nodes), leaves the node's communicator as
//! failed: either way the node's ranks waiting for its release stop at once instead of at
//! their timeout. Any failure breaks
//! the hierarchy on that rank: its halves and the roots' rounds are out of step, and a rank that
//! called again would join the failed barrier's release as a new gather and let its node's
//! ranks through before the others arrived. Every later call fails with the first error.

pub mod ahead;
pub mod aside;
pub mod node;
pub mod settings;
#[cfg(test)]
mod tests;

use crate::comm::Communicator;

pub use crate::compose::flights;
pub use crate::compose::{
    Choice, Chosen, Flight, Names, NodeHalves, OwnBarrier, OwnPending, Roots, RootsLink, RootsWaits, Way,
};
pub use node::{agree, number_nodes, set_up_node, Node, NodeExchange, NodeFailure, NodeSpec};
pub use settings::{agree_settings, Agreed, Allgather, Layer, Proposal, PROPOSAL_WORDS};

/// A rank's barrier across nodes over the core's node communicator (see the module docs): the
/// composer's [`crate::compose::Hierarchy`] with a [`Communicator`]'s halves.
pub type Hierarchy<L> = crate::compose::Hierarchy<Communicator, L>;
