//! The primitives the waiting protocol is built from: the real ones (atomics, the futex calls,
//! `sched_yield`), or loom's for model checking, and the 32-bit word the kernel compares.

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
    use crate::wait::primitive::FutexWord;
    pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
    use std::time::Duration;

    pub fn yield_now() {
        loom::thread::yield_now();
    }

    loom::lazy_static! {
        static ref KERNEL: (loom::sync::Mutex<()>, loom::sync::Condvar) = (loom::sync::Mutex::new(()), loom::sync::Condvar::new());
    }

    pub fn futex_wait(word: FutexWord<'_>, expected: u32, _timeout: Option<Duration>) {
        let guard = KERNEL.0.lock().unwrap();
        if word.load() == expected {
            drop(KERNEL.1.wait(guard).unwrap());
        }
    }

    pub fn futex_wake_all(_word: FutexWord<'_>) {
        let _guard = KERNEL.0.lock().unwrap();
        KERNEL.1.notify_all();
    }
}

/// The 32-bit word the kernel compares: the low half of a flag's value.
#[cfg(not(loom))]
pub(super) type FutexWord<'a> = &'a std::sync::atomic::AtomicU32;

/// Under loom: the flag itself, whose low 32 bits are read through the 64-bit atomic.
#[cfg(loom)]
pub(super) struct FutexWord<'a>(pub(super) &'a AtomicU64);

#[cfg(loom)]
impl FutexWord<'_> {
    pub(super) fn load(&self) -> u32 {
        self.0.load(Ordering::SeqCst) as u32
    }
}
