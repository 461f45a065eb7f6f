//! The communicator's dispatch to its module: the software module statically (so that the whole
//! barrier inlines into the caller), any other through the trait object. It names a backend's
//! module, so it sits above the backends, beside the registry.

use crate::backend::{Module, Poll};
use crate::error::Error;

/// The module in use by a communicator. The software module is dispatched statically so that
/// the whole barrier inlines into the caller (at 2 ranks every cycle between seeing the
/// partner's epoch and storing ours is latency); any other module goes through the trait object.
#[derive(Debug)]
pub(crate) enum Engine {
    Software(crate::algo::flag::SoftwareModule),
    Dyn(Box<dyn Module>),
}

impl Engine {
    pub fn module(&self) -> &dyn Module {
        match self {
            Engine::Software(m) => m,
            Engine::Dyn(m) => m.as_ref(),
        }
    }

    #[inline(always)]
    pub fn arrive(&mut self, epoch: u64) -> Result<(), Error> {
        match self {
            Engine::Software(m) => m.arrive(epoch),
            Engine::Dyn(m) => m.arrive(epoch),
        }
    }

    #[inline(always)]
    pub fn progress(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        match self {
            Engine::Software(m) => m.progress(epoch),
            Engine::Dyn(m) => m.progress(epoch),
        }
    }
}
