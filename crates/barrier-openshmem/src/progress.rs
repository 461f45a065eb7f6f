//! The implementation's progress engine, called while a PE waits (see the crate docs).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::real::Void;

/// The implementation's progress call, for the wait layer's hook (a plain `fn(usize)`).
static PROGRESS: AtomicUsize = AtomicUsize::new(0);

pub fn set_progress(progress: Void) {
    PROGRESS.store(progress as usize, Ordering::Release);
}

/// One step of the implementation's progress engine (the wait layer calls it on its slow path).
pub fn call_progress(_context: usize) {
    let p = PROGRESS.load(Ordering::Acquire);
    if p != 0 {
        // SAFETY: set from the implementation's `void opal_progress(void)`.
        unsafe { std::mem::transmute::<usize, Void>(p)() };
    }
}
