//! The primitives the waiting protocol is built from: the real ones (atomics, the futex calls,
//! `sched_yield`), or loom's for model checking.

#[cfg(loom)]
pub(crate) use self::model::*;
#[cfg(not(loom))]
pub(crate) use self::real::*;

/// The primitives the protocol is built from: the real ones, or loom's for model checking
/// (`RUSTFLAGS="--cfg loom" cargo test -p hpc-barrier --test loom --release`).
#[cfg(not(loom))]
mod real {
    pub use crate::sys::{futex_wait, futex_wake_all, yield_now};
    pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
}

/// Loom's atomics, and a futex built from a loom mutex and condition variable with the kernel's
/// semantics: the word is compared under the same lock that wakers take, so a wake between the
/// waiter's check and its sleep cannot be lost; there is no timeout, so a lost wake-up is a
/// deadlock that loom reports.
#[cfg(loom)]
mod model {
    pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
    use std::time::Duration;

    pub fn yield_now() {
        loom::thread::yield_now();
    }

    loom::lazy_static! {
        static ref KERNEL: (loom::sync::Mutex<()>, loom::sync::Condvar) = (loom::sync::Mutex::new(()), loom::sync::Condvar::new());
    }

    pub fn futex_wait(word: &AtomicU32, expected: u32, _timeout: Option<Duration>) {
        let guard = KERNEL.0.lock().unwrap();
        if word.load(Ordering::SeqCst) == expected {
            drop(KERNEL.1.wait(guard).unwrap());
        }
    }

    pub fn futex_wake_all(_word: &AtomicU32) {
        let _guard = KERNEL.0.lock().unwrap();
        KERNEL.1.notify_all();
    }
}
