//! The state of a communicator's split-phase barriers across nodes: a queue of flights, each at
//! one leg of the three phases (`request.rs` advances them and has the protocol).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use crate::internode::Flight;

/// One split-phase barrier across nodes, as the communicator advances it.
#[derive(Debug)]
pub(crate) enum Leg {
    /// The root waits for the flight before this one to finish before it joins the gather.
    Queued,
    /// The node's gather (its epoch in the node's communicator).
    Gather(u64),
    /// On the node's root: the internode rounds.
    Internode(Flight),
    /// The node's release.
    Release(u64),
}

/// The flights of a communicator across nodes (`request.rs` has the protocol).
#[derive(Debug, Default)]
pub(crate) struct Flights {
    pub(crate) queue: RefCell<VecDeque<Leg>>,
    /// Flights started and finished so far (a request is for flight number `started` at its
    /// start; it is done once `finished` reaches it).
    pub(crate) started: Cell<u64>,
    pub(crate) finished: Cell<u64>,
    /// Why the communicator is unusable (a request was abandoned mid-flight), once it is.
    pub(crate) broken: RefCell<Option<String>>,
}
