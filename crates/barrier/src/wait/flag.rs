//! The [`Flag`]: one epoch word alone on a cache line, with the parking state beside it, and
//! the signalling half of the parking protocol (the folder's docs give the protocol).

use std::time::Duration;

use super::primitive::{fence, futex_wait, futex_wake_all, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
use crate::pad::CACHE_LINE;

/// One epoch word alone on a cache line, with the parking state beside it.
///
/// A signal is one store of the epoch while nobody parks. Parked waiters sleep on a 32-bit
/// word of their own (`wakes`, the kernel compares 32-bit words), which a signaller bumps only
/// when it finds waiters: the epoch is never read as two halves, so every access to it is the
/// same size (Miri checks the park protocol over the real futex calls).
#[cfg_attr(target_arch = "x86_64", repr(C, align(128)))]
#[cfg_attr(target_arch = "aarch64", repr(C, align(256)))]
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), repr(C, align(64)))]
#[derive(Debug)]
pub struct Flag {
    value: AtomicU64,
    waiters: AtomicU32,
    /// The futex word: bumped by a signaller that found waiters, before it wakes them.
    wakes: AtomicU32,
}

impl Default for Flag {
    fn default() -> Self {
        Flag { value: AtomicU64::new(0), waiters: AtomicU32::new(0), wakes: AtomicU32::new(0) }
    }
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Flag>() == CACHE_LINE);
// A device writes flags into DMA memory in lines of this size: one Flag each, aligned.
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Flag>() as u64 == barrier_hw::FLAG_BYTES);

impl Flag {
    /// The current epoch value.
    #[inline(always)]
    pub fn load(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }

    /// True once the flag has reached `epoch`.
    #[inline(always)]
    pub fn reached(&self, epoch: u64) -> bool {
        self.load() >= epoch
    }

    /// Publishes `epoch` (a release store: everything written before it is visible to a waiter
    /// that sees it), and wakes parked waiters if `wake` is set.
    #[inline(always)]
    pub fn signal(&self, epoch: u64, wake: bool) {
        self.value.store(epoch, Ordering::Release);
        if wake {
            self.wake_parked();
        }
    }

    /// Wakes the waiters parked on this flag, for a value this thread stored earlier without
    /// waking (`signal(_, false)`): the store precedes this call's fence F1 in program order,
    /// so the protocol is that of `signal(_, true)` split in two.
    #[inline]
    pub fn wake(&self) {
        self.wake_parked();
    }

    /// Raises the flag to `epoch` if it is lower (for flags with several writers, such as
    /// fault words): returns the previous value.
    pub fn raise(&self, epoch: u64, wake: bool) -> u64 {
        let prev = self.value.fetch_max(epoch, Ordering::AcqRel);
        if prev < epoch && wake {
            self.wake_parked();
        }
        prev
    }

    /// Sets the flag to `value` if it is still 0 (the first writer wins) and wakes parked
    /// waiters if `wake` is set; returns the value in force afterwards.
    pub fn set_once(&self, value: u64, wake: bool) -> u64 {
        match self.value.compare_exchange(0, value, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                if wake {
                    self.wake_parked();
                }
                value
            }
            Err(current) => current,
        }
    }

    /// Adds one (a counter with several writers, such as a device doorbell) and wakes parked
    /// waiters if `wake` is set; returns the new value. Unlike `raise(load() + 1)`, two
    /// concurrent bumps always count twice, so a ring is never merged into another.
    pub fn bump(&self, wake: bool) -> u64 {
        let now = self.value.fetch_add(1, Ordering::AcqRel) + 1;
        if wake {
            self.wake_parked();
        }
        now
    }

    /// Adds `value` (a transport's remote atomic add) and wakes parked waiters if `wake` is set;
    /// returns the previous value.
    pub fn fetch_add(&self, value: u64, wake: bool) -> u64 {
        let prev = self.value.fetch_add(value, Ordering::AcqRel);
        if wake {
            self.wake_parked();
        }
        prev
    }

    /// Stores `new` if the flag holds `expected` (a transport's remote compare-swap), waking
    /// parked waiters if it did and `wake` is set; returns the value it held.
    pub fn compare_swap(&self, expected: u64, new: u64, wake: bool) -> u64 {
        match self.value.compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(prev) => {
                if wake {
                    self.wake_parked();
                }
                prev
            }
            Err(current) => current,
        }
    }

    #[inline(always)]
    fn wake_parked(&self) {
        fence(Ordering::SeqCst); // F1 in the module docs
        if self.waiters.load(Ordering::Relaxed) != 0 {
            self.wakes.fetch_add(1, Ordering::Release);
            futex_wake_all(&self.wakes);
        }
    }

    /// Parks until the value reaches `epoch`, or at most `slice`.
    pub(super) fn park(&self, epoch: u64, slice: Duration) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst); // F2 in the module docs
        let w = self.wakes.load(Ordering::Acquire);
        let v = self.value.load(Ordering::Acquire);
        if v < epoch {
            futex_wait(&self.wakes, w, Some(slice));
        }
        self.waiters.fetch_sub(1, Ordering::Release);
    }
}
