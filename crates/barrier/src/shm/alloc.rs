//! The segment's lock-free allocator (the folder's docs give the protocol): size classes, free
//! lists with tagged heads, a bump pointer for the untouched pool, blocks zeroed on reuse.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::pad::CACHE_LINE;

use super::classes::*;
use super::segment::*;

impl Segment {
    /// Allocates a zeroed block of at least `bytes` and returns its offset.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<usize> {
        let len = self.map.len();
        let Some(class) = class_of(bytes).filter(|&c| class_lines(c) * CACHE_LINE <= len) else {
            return Err(Error::SegmentFull { needed: bytes, free: self.free_bytes() });
        };
        let size = class_lines(class) * CACHE_LINE;
        let h = self.header();
        let list = &h.free_lists[class];
        let mut head = list.load(Ordering::Acquire);
        loop {
            let index = head & INDEX_MASK;
            // The list lives in shared memory: a block that does not fit is treated as the end.
            let off = index as usize * CACHE_LINE;
            if index == 0 || off.checked_add(size).is_none_or(|end| end > len) {
                break;
            }
            let next = self.at::<AtomicU64>(off).load(Ordering::Acquire) & INDEX_MASK;
            let tag = (head >> INDEX_BITS).wrapping_add(1);
            match list.compare_exchange(head, tag << INDEX_BITS | next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    for word in self.slice::<AtomicU64>(off, size / 8) {
                        word.store(0, Ordering::Relaxed);
                    }
                    h.in_use.fetch_add(size as u64, Ordering::Relaxed);
                    return Ok(off);
                }
                Err(now) => head = now,
            }
        }
        // The bump pointer moves only for a block that fits: a request too large for the rest
        // (refused) must leave the rest to smaller ones, and two ranks allocating near the end at
        // once must not push it past the end for each other (a fetch_add that overshot and was
        // never taken back left the segment reporting itself full for good). It lives in shared
        // memory too: never trust it to be small.
        let mut off = h.bump.load(Ordering::Relaxed);
        loop {
            match (off as usize).checked_add(size) {
                Some(end) if off <= len as u64 && end <= len => {}
                _ => return Err(Error::SegmentFull { needed: size, free: len.saturating_sub(off as usize) }),
            }
            match h.bump.compare_exchange_weak(off, off + size as u64, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    h.in_use.fetch_add(size as u64, Ordering::Relaxed);
                    return Ok(off as usize);
                }
                Err(now) => off = now,
            }
        }
    }

    /// Returns the block at `off`, allocated with [`Segment::alloc`] for `bytes`, for reuse. The
    /// caller guarantees that no rank uses it any more.
    pub(crate) fn free(&self, off: usize, bytes: usize) {
        let Some(class) = class_of(bytes) else { return };
        let h = self.header();
        let list = &h.free_lists[class];
        let mut head = list.load(Ordering::Acquire);
        loop {
            self.at::<AtomicU64>(off).store(head & INDEX_MASK, Ordering::Relaxed);
            let tag = (head >> INDEX_BITS).wrapping_add(1);
            let new = tag << INDEX_BITS | (off / CACHE_LINE) as u64;
            match list.compare_exchange(head, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => head = now,
            }
        }
        h.in_use.fetch_sub((class_lines(class) * CACHE_LINE) as u64, Ordering::Relaxed);
    }

    /// Bytes never handed out yet (the pool beyond the bump pointer; freed blocks come on top).
    pub fn free_bytes(&self) -> usize {
        self.map.len().saturating_sub(self.header().bump.load(Ordering::Relaxed) as usize)
    }

    /// Bytes of the segment in use now (header, world, communicators, windows) and in all.
    pub fn usage(&self) -> (usize, usize) {
        (HEADER_BYTES + self.header().in_use.load(Ordering::Relaxed) as usize, self.map.len())
    }
}
