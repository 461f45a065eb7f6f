//! The communicator's dispatch to what runs its barriers: the software module statically (so
//! that the whole barrier inlines into the caller), any other module through the trait object,
//! and the hierarchical backend's composition across nodes ([`crate::compose`] over the
//! simulated network). It names a backend, so it sits above the backends, beside the registry.

use std::fmt;

use crate::backend::{Decline, EnableContext, Module, Poll};
use crate::error::Error;

/// A barrier composed of communicators (the hierarchical backend across nodes: the composer's
/// hierarchy over the communicator's nodes and roots, built by the communicator layer above;
/// see `comm/composed.rs`). It waits in its own parts, so it is no [`Module`]: a blocking
/// barrier is [`barrier`](Self::barrier) or [`finish`](Self::finish), a polled one
/// [`progress`](Self::progress).
pub(crate) trait Composition: fmt::Debug + Send {
    /// The algorithm, for reports.
    fn algorithm(&self) -> String;
    /// Operations sent across the network so far.
    fn network_ops(&self) -> u64;
    /// A blocking barrier with nothing outstanding.
    fn barrier(&self) -> Result<(), Error>;
    /// Starts a barrier split phase (this rank's arrival is announced now). The communicator
    /// hands barriers over in order, one at a time: `progress` and `finish` are for it.
    fn arrive(&mut self) -> Result<(), Error>;
    /// Advances the barrier started last as far as it goes without waiting.
    fn progress(&mut self) -> Result<Poll<'_>, Error>;
    /// Completes the barrier started last, waiting.
    fn finish(&mut self) -> Result<(), Error>;
}

/// Builds a composition on the communicator being made (collective; every rank returns `Ok`
/// or every rank declines): how the selector, beneath the communicators, is handed the
/// communicator layer's builder.
pub(crate) type Compose<'a> = &'a dyn Fn(&EnableContext<'_>) -> Result<Box<dyn Composition>, Decline>;

/// What runs a communicator's barriers. The software module is dispatched statically so that
/// the whole barrier inlines into the caller (at 2 ranks every cycle between seeing the
/// partner's epoch and storing ours is latency); any other module goes through the trait
/// object; a composition across nodes waits in its own parts, so a blocking wait is its own
/// ([`Engine::finish`]).
#[derive(Debug)]
pub(crate) enum Engine {
    Software(crate::algo::flag::SoftwareModule),
    Dyn(Box<dyn Module>),
    Composed(Box<dyn Composition>),
}

impl Engine {
    /// The algorithm or device mode in use, for reports.
    pub fn algorithm(&self) -> String {
        match self {
            Engine::Software(m) => m.algorithm().to_string(),
            Engine::Dyn(m) => m.algorithm().to_string(),
            Engine::Composed(c) => c.algorithm(),
        }
    }

    /// Operations this rank has sent across the network so far (see [`Module::network_ops`]).
    pub fn network_ops(&self) -> u64 {
        match self {
            Engine::Software(m) => m.network_ops(),
            Engine::Dyn(m) => m.network_ops(),
            Engine::Composed(c) => c.network_ops(),
        }
    }

    #[inline(always)]
    pub fn arrive(&mut self, epoch: u64) -> Result<(), Error> {
        match self {
            Engine::Software(m) => m.arrive(epoch),
            Engine::Dyn(m) => m.arrive(epoch),
            Engine::Composed(c) => c.arrive(),
        }
    }

    #[inline(always)]
    pub fn progress(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        match self {
            Engine::Software(m) => m.progress(epoch),
            Engine::Dyn(m) => m.progress(epoch),
            Engine::Composed(c) => c.progress(),
        }
    }

    /// Completes the barrier at `epoch` where the engine waits itself (a composition):
    /// `None` for a module, which the communicator's wait layer waits for.
    pub fn finish(&mut self) -> Option<Result<(), Error>> {
        match self {
            Engine::Composed(c) => Some(c.finish()),
            _ => None,
        }
    }
}
