//! A node's barrier in two halves around a phase that only the root runs: the gather and the
//! release of [`super::tree`], as the barriers of a communicator of their own.
//!
//! The MPI and OpenSHMEM crates run their own phase among node roots (over MPI, over
//! OpenSHMEM puts) and need from the node only what the hierarchical backend's node phases
//! give it: every rank of the node has arrived (the root learns it), and then the root lets
//! them go. Two whole node barriers around the roots' phase would do, at twice the cost (each
//! is a gather and a release on its own); this module is the one gather and the one release.
//!
//! Its communicator ([`crate::Communicator::halves`]) alternates:
//!
//! * **odd epochs, the gather**: a rank stores its up-slot once its children's have reached the
//!   epoch, and is done; the root is done once every rank of the node has arrived;
//! * **even epochs, the release**: the root stores the epoch into the release flag and is done;
//!   every other rank is done once the flag reaches the epoch.
//!
//! So the caller calls `barrier()` twice per barrier, and the root runs its phase between the
//! two; the split-phase calls (`ibarrier`, requests) work the same way, in the same order.
//! The slots hold the communicator's epochs, which only grow; a rank stores the gather's epoch
//! `2k + 1` only after the release `2k` reached it, so the argument of [`super::tree`] holds
//! unchanged. The communicator's waits (policy, timeout, stall reports naming the missing
//! ranks) are every barrier's: a rank that waits in the release for a root still in its phase
//! names the root.
//!
//! This is not a backend, and its barriers break a backend's first promise on purpose: a
//! non-root leaves the gather before the others arrive. It is hidden, and only the composer's
//! hierarchies use it (barrier-mpi's, barrier-openshmem's and the core's hierarchical backend's,
//! whose node communicators are made of it), always in pairs.

use crate::backend::{Module, Poll};
use crate::error::Error;
use crate::shm::Shared;
use crate::wait::Flag;

use super::tree::TreeSlots;

/// One rank's halves (see the module docs).
#[derive(Debug)]
pub(crate) struct HalvesModule {
    slots: TreeSlots<Shared<Flag>>,
    next_child: usize,
    /// The last epoch this rank finished: the communicator calls `progress` again after an
    /// `arrive` that finished, and a second store of the up-slot or of the release would pull
    /// the line from every rank polling it (and wake parked ones again).
    finished: u64,
    wake: bool,
    algorithm: String,
}

impl HalvesModule {
    pub(crate) fn new(slots: TreeSlots<Shared<Flag>>, radix: usize, wake: bool) -> Self {
        let algorithm = format!("node gather (radix {radix}) and release, in halves around the roots' phase");
        HalvesModule { slots, next_child: 0, finished: 0, wake, algorithm }
    }
}

impl Module for HalvesModule {
    fn algorithm(&self) -> &str {
        &self.algorithm
    }

    fn arrive(&mut self, epoch: u64) -> Result<(), Error> {
        self.next_child = 0;
        // A leaf's gather and the root's release do not wait: done here.
        self.progress(epoch).map(|_| ())
    }

    fn progress(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        if self.finished >= epoch {
            return Ok(Poll::Ready);
        }
        let release = epoch.is_multiple_of(2);
        let waiting = if !release {
            self.slots.gather(&mut self.next_child, epoch, self.wake)
        } else {
            self.slots.release(epoch, self.wake)
        };
        match waiting {
            Ok(()) => {
                self.finished = epoch;
                Ok(Poll::Ready)
            }
            // After the release's wait nothing is left to do; after a child's, the up-slot is.
            Err(flag) => Ok(Poll::wait_for(flag, epoch, release)),
        }
    }
}
