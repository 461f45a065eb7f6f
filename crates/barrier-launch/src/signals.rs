//! Terminating signals (SIGINT, SIGTERM, SIGHUP) turned into a value the main loop polls, and
//! (for the launcher) the user signals SIGUSR1 and SIGUSR2, which it passes on to every rank
//! without stopping the job (checkpoint-on-signal workflows rely on it, and `mpirun` does it).
//!
//! The handler only stores the signal number into an atomic, which is async-signal-safe; the
//! launcher forwards what it finds to the ranks, the emulator daemon stops. [`install`] returns
//! a guard that puts back whatever handlers were there before (a library function must not
//! leave its handlers behind), and while the guard lives, SIGCHLD has its default action: a
//! caller that ignores SIGCHLD would otherwise make the kernel reap the ranks before the
//! launcher can learn how they ended. (One launch at a time per process: the handlers and the
//! received signal are process-wide.)

use std::sync::atomic::{AtomicI32, Ordering};

static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// User signals received and not yet passed on: bit 0 SIGUSR1, bit 1 SIGUSR2.
static TO_FORWARD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
}

extern "C" fn on_user_signal(sig: libc::c_int) {
    let bit = if sig == libc::SIGUSR1 { 1 } else { 2 };
    TO_FORWARD.fetch_or(bit, Ordering::SeqCst);
}

/// The user signals that [`install_forwarding`] passes on.
const USER: [libc::c_int; 2] = [libc::SIGUSR1, libc::SIGUSR2];

const TERMINATING: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The handlers in force before [`install`]; dropping this puts them back.
#[must_use = "the handlers are removed again when the guard is dropped"]
pub struct Installed {
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

impl std::fmt::Debug for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Installed").field("signals", &self.previous.len()).finish()
    }
}

fn set(sig: libc::c_int, action: &libc::sigaction) -> libc::sigaction {
    // SAFETY: sigaction is plain data; zeroed is a valid value to receive the old action into.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers point to live, fully initialized sigaction structs.
    unsafe {
        libc::sigaction(sig, action, &mut old);
    }
    old
}

/// Installs the handler for SIGINT, SIGTERM and SIGHUP, sets SIGCHLD to its default action,
/// and forgets any earlier signal. The previous state comes back when the guard is dropped.
pub fn install() -> Installed {
    // Forget earlier signals first: one arriving while the handlers go in must not be lost.
    RECEIVED.store(0, Ordering::SeqCst);
    // SAFETY: sigaction is plain data; every field used is set below.
    let mut handler: libc::sigaction = unsafe { std::mem::zeroed() };
    handler.sa_sigaction = on_signal as *const () as usize;
    // SAFETY: sa_mask is a live sigset_t inside `handler`.
    unsafe { libc::sigemptyset(&mut handler.sa_mask) };
    let mut previous: Vec<_> = TERMINATING.iter().map(|&sig| (sig, set(sig, &handler))).collect();
    // SAFETY: as above; SIG_DFL with an empty mask.
    let mut default: libc::sigaction = unsafe { std::mem::zeroed() };
    default.sa_sigaction = libc::SIG_DFL;
    // SAFETY: sa_mask is a live sigset_t inside `default`.
    unsafe { libc::sigemptyset(&mut default.sa_mask) };
    previous.push((libc::SIGCHLD, set(libc::SIGCHLD, &default)));
    Installed { previous }
}

/// [`install`], and SIGUSR1 and SIGUSR2 recorded for [`take_forwarded`] instead of ending
/// this process (the launcher passes them on to its ranks).
pub fn install_forwarding() -> Installed {
    let mut installed = install();
    TO_FORWARD.store(0, Ordering::SeqCst);
    // SAFETY: sigaction is plain data; every field used is set below.
    let mut handler: libc::sigaction = unsafe { std::mem::zeroed() };
    handler.sa_sigaction = on_user_signal as *const () as usize;
    // SAFETY: sa_mask is a live sigset_t inside `handler`.
    unsafe { libc::sigemptyset(&mut handler.sa_mask) };
    installed.previous.extend(USER.iter().map(|&sig| (sig, set(sig, &handler))));
    installed
}

/// The user signals received since the last call, in order SIGUSR1, SIGUSR2.
pub fn take_forwarded() -> Vec<i32> {
    let bits = TO_FORWARD.swap(0, Ordering::SeqCst);
    USER.iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, &s)| s).collect()
}

impl Drop for Installed {
    fn drop(&mut self) {
        for (sig, action) in self.previous.drain(..).rev() {
            set(sig, &action);
        }
    }
}

/// The signal received since the last call, if any.
pub fn take() -> Option<i32> {
    match RECEIVED.swap(0, Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// The signal received since the last [`take`], if any, left in place.
pub fn peek() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// Records `sig` as received again, for a caller that polls after a function that took it
/// (the launcher takes the signals of its job; `barrier bench` stops on them too).
pub fn remember(sig: i32) {
    RECEIVED.store(sig, Ordering::SeqCst);
}
