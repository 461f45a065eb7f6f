//! Split-phase barriers across nodes (their state here; `mod.rs` drives them): a queue of *flights*, advanced without waiting by any
//! request's test (or completed by a wait, and by the next blocking barrier). Any number may be
//! outstanding; they complete in the order they were started.
//!
//! The node's halves (a gather, then a release) of all its ranks must pair up in the same
//! order, and they do:
//! - a rank that is not its node's root arrives at both of a flight's halves (the gather, which
//!   a leaf completes at once and a rank with children once they have arrived, then the
//!   release) when the flight starts, and its flight is done when the release completes;
//! - the node's root arrives at a flight's gather when the flight before it is done (at once if
//!   there is none), runs the roots' phase once the gather completes, and only then arrives at
//!   the release.
//!
//! A root alone on its node (no backend forced there) has no halves to pair: its flight is the
//! roots' phase alone.
//!
//! So every rank's halves go gather 1, release 1, gather 2, release 2, …, and no rank of any
//! node is released before every root has finished the phase that proves every node gathered.
//! A flight completes only while its rank keeps calling test, wait or another barrier, as
//! with MPI's own nonblocking barrier.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use super::roots::Flight;

/// One split-phase barrier across nodes, as the hierarchy advances it.
#[derive(Debug)]
pub(crate) enum Leg {
    /// The root waits for the flight before this one to finish before it joins the gather.
    Queued,
    /// The node's gather (its epoch in the halves' communicator).
    Gather(u64),
    /// On the node's root: the roots' phase.
    Roots(Flight),
    /// The node's release.
    Release(u64),
}

/// The flights of a hierarchy.
#[derive(Debug, Default)]
pub(crate) struct Flights {
    pub(crate) queue: RefCell<VecDeque<Leg>>,
    /// Flights started and finished so far (flight number `started` at its start; it is done
    /// once `finished` reaches it).
    pub(crate) started: Cell<u64>,
    pub(crate) finished: Cell<u64>,
}
