//! Terminating signals (SIGINT, SIGTERM, SIGHUP) turned into a value the main loop polls.
//!
//! The handler only stores the signal number into an atomic, which is async-signal-safe; the
//! launcher forwards what it finds to the ranks, the emulator daemon stops.

use std::sync::atomic::{AtomicI32, Ordering};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
}

/// Installs the handler for SIGINT, SIGTERM and SIGHUP and forgets any earlier signal.
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe); the sigaction struct
        // is fully initialized before the call.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    RECEIVED.store(0, Ordering::SeqCst);
}

/// The signal received since the last call, if any.
pub fn take() -> Option<i32> {
    match RECEIVED.swap(0, Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}
