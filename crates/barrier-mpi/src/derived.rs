//! Communicators made from a [`BarrierComm`]: [`dup`](BarrierComm::dup) and
//! [`split`](BarrierComm::split), as MPI makes them from an MPI communicator, each with the
//! settings its parent was made with.

use barrier::Result;

use crate::comm::BarrierComm;
use crate::raw::{self, OwnedComm};

impl BarrierComm {
    /// A new barrier communicator over the same ranks (`MPI_Comm_dup`), with its own barriers
    /// and the same settings. Collective.
    pub fn dup(&self) -> Result<BarrierComm> {
        self.on_home_thread()?;
        // SAFETY: `self.comm` is this communicator's private duplicate, valid while it lives;
        // MPI is initialized (checked by `from_raw`); every rank makes this call (collective).
        unsafe { BarrierComm::from_raw(self.comm, self.params.clone()) }
    }

    /// Splits into disjoint barrier communicators, one per color, ordered by `key` then by rank
    /// (`MPI_Comm_split`). Collective; `None` for the ranks that pass no color
    /// (`MPI_UNDEFINED`).
    pub fn split(&self, color: Option<u32>, key: usize) -> Result<Option<BarrierComm>> {
        self.on_home_thread()?;
        // MPI takes both as a C int, and a color must not be negative.
        let too_large = |what: &str, value: u64| {
            barrier::Error::InvalidArgument(format!(
                "split: the {what} {value} is larger than MPI takes ({})",
                i32::MAX
            ))
        };
        if let Some(c) = color.filter(|&c| c > i32::MAX as u32) {
            return Err(too_large("color", c.into()));
        }
        if key > i32::MAX as usize {
            return Err(too_large("key", key as u64));
        }
        let Some(part) = raw::split(self.comm, color, key)? else { return Ok(None) };
        // `from_raw` makes its own duplicate: the split's handle is freed when this goes.
        let part = OwnedComm(part);
        // SAFETY: `part.0` is a valid intracommunicator made just now by every rank with a
        // color; each of them makes this call (collective over the new communicator).
        unsafe { BarrierComm::from_raw(part.0, self.params.clone()) }.map(Some)
    }
}
