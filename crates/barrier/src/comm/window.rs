//! Shared windows: 64-bit words every member of a communicator can read and write
//! ([`Communicator::shared_window`], [`SharedWindow`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::shm::Segment;

use super::communicator::*;

/// Bytes before a window's words: one line whose first word counts the handles.
const WINDOW_HEADER: usize = crate::pad::CACHE_LINE;

/// Shared 64-bit words visible to every member of a communicator. Cloning makes another
/// handle; the memory goes back to the job's segment when the last handle of every member is
/// dropped.
#[derive(Debug)]
pub struct SharedWindow {
    seg: Arc<Segment>,
    /// Offset of the window's header line.
    offset: usize,
    len: usize,
}

impl SharedWindow {
    /// The words.
    pub fn words(&self) -> &[AtomicU64] {
        self.seg.slice(self.offset + WINDOW_HEADER, self.len)
    }

    fn handles(&self) -> &AtomicU64 {
        self.seg.at(self.offset)
    }
}

impl Clone for SharedWindow {
    fn clone(&self) -> Self {
        self.handles().fetch_add(1, Ordering::Relaxed);
        SharedWindow { seg: self.seg.clone(), offset: self.offset, len: self.len }
    }
}

impl Drop for SharedWindow {
    fn drop(&mut self) {
        if self.handles().fetch_sub(1, Ordering::AcqRel) == 1 {
            self.seg.free(self.offset, self.len.max(1) * 8 + WINDOW_HEADER);
        }
    }
}

impl Communicator {
    /// Allocates `len` shared 64-bit words that every member can read and write (collective),
    /// like `MPI_Win_allocate_shared` with one size for all. Starts zeroed. Every rank must pass
    /// the same `len`; a length that differs between ranks, or does not fit in memory, is an
    /// error on every rank.
    pub fn shared_window(&self, len: usize) -> Result<SharedWindow> {
        self.check_usable()?;
        self.drive(self.epoch.get(), true)?;
        let ctrl = self.ctrl("shared_window");
        // One header line (the count of handles) before the words.
        let bytes =
            len.max(1).checked_mul(8).and_then(|b| b.checked_add(WINDOW_HEADER)).filter(|&b| b <= isize::MAX as usize);
        let mut offer = NO_REGION;
        let mut err = None;
        if self.rank == 0 {
            if let Some(bytes) = bytes {
                match self.seg.alloc(bytes) {
                    Ok(off) => {
                        // Every member will hold one handle.
                        self.seg.at::<AtomicU64>(off).store(self.size() as u64, Ordering::Relaxed);
                        offer = off as u64;
                    }
                    Err(e) => err = Some(e),
                }
            }
        }
        let all = match ctrl.allgather(&[offer, len as u64]) {
            Ok(all) => all,
            Err(e) => {
                if offer != NO_REGION && nobody_completes(&e) {
                    // No member can ever hold a handle on the block: give it back.
                    self.seg.free(offer as usize, bytes.unwrap_or(0));
                }
                return Err(self.control_failed(e));
            }
        };
        let failed = |e: Error| {
            // Nobody will hold the block: give it back.
            if self.rank == 0 && offer != NO_REGION {
                self.seg.free(offer as usize, bytes.unwrap_or(0));
            }
            Err(e)
        };
        if let Some((r, _)) = all.iter().enumerate().find(|(_, w)| w[1] != len as u64) {
            return failed(Error::InvalidArgument(format!(
                "shared_window({len}) on world rank {}, but world rank {} passed {}: every rank must pass the \
                 same length",
                self.world_rank(),
                self.members[r],
                all[r][1]
            )));
        }
        if bytes.is_none() {
            return failed(Error::InvalidArgument(format!(
                "shared_window({len}): {len} words of 8 bytes do not fit in this machine's address space"
            )));
        }
        if let Some(e) = err {
            return Err(e);
        }
        if all[0][0] == NO_REGION {
            return Err(Error::SegmentFull { needed: len * 8, free: self.seg.free_bytes() });
        }
        Ok(SharedWindow { seg: self.seg.clone(), offset: all[0][0] as usize, len })
    }
}
