//! The hierarchical backend's barrier across nodes as a communicator runs it: the composer's
//! hierarchy ([`crate::compose::Hierarchy`]) over the communicator's nodes, each made as its
//! halves, and over its node roots: our dissemination over the simulated network
//! ([`FabricLink`]), or a switch or GBA group of the roots, a communicator of the roots with
//! that device's backend, run as the roots' own barrier ([`DeviceOwn`]). The protocol is in
//! the backend's docs (`backends/hierarchical`); `create.rs` builds it (`compose`), because
//! building it makes communicators.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::Poll;
use crate::backends::hierarchical::roots::FabricLink;
use crate::compose::{Hierarchy, OwnBarrier, OwnPending};
use crate::engine::Composition;
use crate::error::{Error, Result};
use crate::wait::Flag;

use super::Communicator;

/// How the roots meet, for descriptions.
#[derive(Debug)]
pub(super) enum RootsWay {
    /// Our dissemination over the transport of this name.
    Ours(&'static str),
    /// A device group of the roots: the backend's name and, on a root, the roots' communicator.
    Device(&'static str, Option<Arc<Mutex<Communicator>>>),
}

/// One rank's hierarchical barrier across nodes: the composer's [`Hierarchy`] over this
/// communicator's node and its roots (see the module docs).
#[derive(Debug)]
pub(super) struct Composed {
    hier: Hierarchy<Communicator, FabricLink>,
    radix: usize,
    roots: RootsWay,
    /// What [`progress`](Self::progress) gives the communicator when a barrier must wait: it
    /// never moves. A blocking wait is [`finish`](Self::finish); a polled one calls again.
    never: Flag,
    /// The composer's number of the flight [`arrive`](Self::arrive) started last (the
    /// communicator hands split-phase barriers over one at a time, in order; a blocking barrier
    /// with nothing outstanding is [`barrier`](Self::barrier), not a flight).
    flight: u64,
}

impl Composed {
    pub(super) fn new(hier: Hierarchy<Communicator, FabricLink>, radix: usize, roots: RootsWay) -> Self {
        Composed { hier, radix, roots, never: Flag::default(), flight: 0 }
    }
}

impl Composition for Composed {
    fn algorithm(&self) -> String {
        let roots = match &self.roots {
            RootsWay::Ours(route) => format!("dissemination over {route}"),
            RootsWay::Device(name, Some(comm)) => format!("{name} {}", lock(comm).algorithm()),
            RootsWay::Device(name, None) => format!("{name} group of the node roots"),
        };
        format!("radix {}; roots: {roots}", self.radix)
    }

    fn network_ops(&self) -> u64 {
        let device = match &self.roots {
            RootsWay::Device(_, Some(comm)) => lock(comm).network_ops(),
            _ => 0,
        };
        self.hier.roots().map_or(0, |r| r.link().network_ops()) + device
    }

    /// A blocking barrier with nothing outstanding: the composer's own, without a flight.
    fn barrier(&self) -> Result<(), Error> {
        self.hier.barrier()
    }

    /// Starts a barrier split phase: this rank's arrival is announced now (the communicator
    /// hands barriers over in order, one at a time, so `progress` and `finish` are for it).
    fn arrive(&mut self) -> Result<(), Error> {
        self.flight = self.hier.ibarrier()?;
        Ok(())
    }

    /// Advances the barrier [`arrive`](Self::arrive) started as far as it goes without waiting.
    fn progress(&mut self) -> Result<Poll<'_>, Error> {
        match self.hier.drive(self.flight, false)? {
            true => Ok(Poll::Ready),
            false => Ok(Poll::pending(&self.never, 1)),
        }
    }

    /// Completes the barrier [`arrive`](Self::arrive) started, waiting in the composition's parts.
    fn finish(&mut self) -> Result<(), Error> {
        self.hier.drive(self.flight, true).map(|_| ())
    }
}

/// The roots' communicator, locked (one thread drives a communicator at a time; a panic that
/// poisoned it left nothing half-done that a barrier call would not report).
fn lock(comm: &Mutex<Communicator>) -> MutexGuard<'_, Communicator> {
    comm.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A device group of the node roots, as the roots' own barrier: their communicator with the
/// device's backend. Shared with its started split-phase barriers (behind a lock that only one
/// thread ever takes: the communicator's).
#[derive(Debug)]
pub(super) struct DeviceOwn {
    name: &'static str,
    comm: Arc<Mutex<Communicator>>,
}

impl DeviceOwn {
    pub(super) fn new(name: &'static str, comm: Arc<Mutex<Communicator>>) -> Self {
        DeviceOwn { name, comm }
    }
}

/// A split-phase barrier of the roots' device group, started.
#[derive(Debug)]
struct DevicePending {
    comm: Arc<Mutex<Communicator>>,
    epoch: u64,
}

impl OwnPending for DevicePending {
    fn test(&mut self) -> Result<bool> {
        let comm = lock(&self.comm);
        let mut request = comm.resume(self.epoch)?;
        // Never a yield here: the caller's own test yields where ranks outnumber cores.
        let done = request.poll();
        if !matches!(done, Ok(true)) {
            request.detach();
        }
        done
    }
}

impl OwnBarrier for DeviceOwn {
    fn name(&self) -> &'static str {
        self.name
    }

    fn barrier(&self) -> Result<()> {
        lock(&self.comm).barrier()
    }

    fn start(&self) -> Result<Option<Box<dyn OwnPending>>> {
        let epoch = lock(&self.comm).ibarrier()?.detach();
        Ok(Some(Box::new(DevicePending { comm: self.comm.clone(), epoch })))
    }
}
