//! Waiting: spin, then yield, then park on a futex in shared memory.
//!
//! # The flag
//!
//! Every wait in this crate is "until this [`Flag`]'s value is at least `e`", and every signal
//! is "set this flag to `e`", where `e` is a 64-bit epoch that only grows. Values are never
//! reset, so a late reader never misses a signal and a stale one can never satisfy a newer wait.
//!
//! # The parking protocol (no lost wake-ups)
//!
//! A flag is one cache line holding `value` (the epoch; the kernel's 32-bit futex word is its
//! low half) and `waiters` (how many ranks are parked or about to park).
//!
//! ```text
//! signaller                         waiter
//! value.store(e, Release)           waiters.fetch_add(1)
//! fence(SeqCst)              (F1)   fence(SeqCst)                     (F2)
//! if waiters.load() > 0             v = value.load(Acquire)
//!     futex_wake_all(low(value))    if v < e { futex_wait(low(value), v as u32) }
//!                                   waiters.fetch_sub(1)
//! ```
//!
//! F1 and F2 are sequentially consistent fences, so one of them comes first in their single
//! total order. If F1 comes first, the waiter's load after F2 sees `value >= e` and never
//! sleeps. If F2 comes first, the signaller's load after F1 sees `waiters > 0` and wakes the
//! futex; if the wake happens before the waiter reaches `futex_wait`, the low half of `value`
//! already differs from `v as u32` and the kernel returns at once (`EAGAIN`). Either way the waiter
//! cannot sleep through the signal. (The low 32 bits of two epochs 2^32 apart are equal; a
//! waiter that sleeps through such a coincidence wakes at the next time slice, see
//! [`PARK_SLICE`], and re-checks the full 64-bit value.)
//!
//! Signallers skip F1 and the `waiters` load when the communicator's policy never parks
//! ([`WaitPolicy::Spin`]): that is the 2-rank, not-oversubscribed fast path, where one extra
//! fence would cost about as much as the whole barrier. All ranks of a communicator agree on the
//! policy when it is created, so a waiter never parks on a flag whose signaller will not wake it.
//!
//! # Layers
//!
//! The fast check is inline; everything else is in a `#[cold]` function. Spinning uses
//! `spin_loop` (PAUSE on x86); after [`WaitConfig::spin`] rounds it yields, after
//! [`WaitConfig::yields`] more it parks (if the policy allows). Time is read only on the slow
//! path: a wait starts its clock at its eighth yield or when it parks, whichever comes first (most
//! oversubscribed waits end after a yield or two and never read it), and then reads it every 64
//! yields (8 with a recheck interval) and once per park slice, to
//! check the timeout and to ask the caller's [`Watch`] whether the wait can still complete (the
//! job was aborted, a peer left, the launcher is gone) and whether it is time to report a stall.
//! A timeout therefore counts from that start, not from the first yield. A rank that parks
//! checks its flag once inline, with no PAUSE after the check.
//!
//! # Progress of an outside engine
//!
//! A communicator served under MPI must keep MPI's progress engine turning while it waits: MPI's
//! progress rule lets a program count on a rank blocked in `MPI_Barrier` to complete other MPI
//! operations (a rendezvous send to it, a one-sided read of its window), and a rank that never
//! calls into MPI would deadlock such a program. [`WaitConfig::progress`] is that engine's call
//! (`barrier-mpi` sets it on its node segments: one `MPI_Iprobe`). It runs on the slow path only,
//! never while spinning: once every [`PROGRESS_EVERY`] yields (most oversubscribed waits end
//! after a yield or two and never call it: MPI's progress may yield the CPU itself), once before
//! and after every park, and parks are cut to [`PROGRESS_PARK_SLICE`] so that a parked rank still
//! progresses MPI about a thousand times a second. A release found while spinning costs nothing.

use std::time::{Duration, Instant};

use self::primitive::{fence, futex_wait, futex_wake_all, yield_now, AtomicU32, AtomicU64, Ordering};

/// The primitives the protocol is built from: the real ones, or loom's for model checking
/// (`RUSTFLAGS="--cfg loom" cargo test -p barrier --test loom --release`).
#[cfg(not(loom))]
mod primitive {
    pub use crate::sys::{futex_wait, futex_wake_all, yield_now};
    pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
}

/// Loom's atomics, and a futex built from a loom mutex and condition variable with the kernel's
/// semantics: the word is compared under the same lock that wakers take, so a wake between the
/// waiter's check and its sleep cannot be lost; there is no timeout, so a lost wake-up is a
/// deadlock that loom reports.
#[cfg(loom)]
mod primitive {
    pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
    use std::time::Duration;

    pub fn yield_now() {
        loom::thread::yield_now();
    }

    loom::lazy_static! {
        static ref KERNEL: (loom::sync::Mutex<()>, loom::sync::Condvar) = (loom::sync::Mutex::new(()), loom::sync::Condvar::new());
    }

    pub fn futex_wait(word: super::FutexWord<'_>, expected: u32, _timeout: Option<Duration>) {
        let guard = KERNEL.0.lock().unwrap();
        if word.load() == expected {
            drop(KERNEL.1.wait(guard).unwrap());
        }
    }

    pub fn futex_wake_all(_word: super::FutexWord<'_>) {
        let _guard = KERNEL.0.lock().unwrap();
        KERNEL.1.notify_all();
    }
}

#[cfg(not(loom))]
use crate::pad::CACHE_LINE;

/// The longest a parked waiter sleeps before re-checking its flag, the job's abort word and
/// its deadline.
pub const PARK_SLICE: Duration = Duration::from_millis(50);

/// The longest a parked waiter sleeps when it also drives an outside progress engine
/// ([`WaitConfig::progress`]): a peer that needs this rank's MPI to progress (a rendezvous send
/// to it, a one-sided read) waits at most about this long per step.
pub const PROGRESS_PARK_SLICE: Duration = Duration::from_millis(1);

/// Yields between two calls of an outside progress engine ([`WaitConfig::progress`]) in the
/// yield phase. Not every yield: MPI's progress may itself yield the CPU (Open MPI does when
/// oversubscribed), and a wait that ends after a yield or two (the common oversubscribed
/// hand-off) must not pay a second context switch for it (measured: a pair of ranks sharing
/// one CPU, 2.0 us a barrier without the call, 4.0 us with it on every yield).
pub const PROGRESS_EVERY: u32 = 16;

/// A call that moves an outside progress engine (MPI's) a step, with one word of context (an
/// MPI communicator handle under `barrier-mpi`); see the module docs. Called on the thread that
/// waits, from the slow path of its waits only.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    call: fn(usize),
    context: usize,
}

impl Progress {
    /// `call(context)` is the step. Whoever sets it keeps `context` valid while any communicator
    /// that may call it lives.
    pub fn new(call: fn(usize), context: usize) -> Self {
        Progress { call, context }
    }

    /// Runs one step.
    #[inline]
    pub fn run(self) {
        (self.call)(self.context)
    }
}

/// The yield at which a slow wait starts its clock (if parking has not started it before); its
/// timeout, watch and recheck interval are checked every 64 yields (every 8 with a recheck
/// interval).
const FIRST_CHECK: u32 = 8;

/// Checks made inline before the out-of-line slow path.
#[cfg(not(loom))]
const INLINE_SPINS: u32 = 16;
/// One check under loom: every spin is a branch of the model.
#[cfg(loom)]
const INLINE_SPINS: u32 = 1;

/// One epoch word alone on a cache line, with the parking state beside it.
///
/// The futex word is the low 32 bits of the epoch itself (the kernel compares 32-bit words),
/// so a signal is one store: a second store to the same line could pull it across cores twice.
#[cfg_attr(target_arch = "x86_64", repr(C, align(128)))]
#[cfg_attr(target_arch = "aarch64", repr(C, align(256)))]
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), repr(C, align(64)))]
#[derive(Debug)]
pub struct Flag {
    value: AtomicU64,
    waiters: AtomicU32,
}

impl Default for Flag {
    fn default() -> Self {
        Flag { value: AtomicU64::new(0), waiters: AtomicU32::new(0) }
    }
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Flag>() == CACHE_LINE);
// A device writes flags into DMA memory in lines of this size: one Flag each, aligned.
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Flag>() as u64 == barrier_hw::FLAG_BYTES);

/// The 32-bit word the kernel compares: the low half of a flag's value.
#[cfg(not(loom))]
type FutexWord<'a> = &'a std::sync::atomic::AtomicU32;

/// Under loom: the flag itself, whose low 32 bits are read through the 64-bit atomic.
#[cfg(loom)]
pub(crate) struct FutexWord<'a>(&'a AtomicU64);

#[cfg(loom)]
impl FutexWord<'_> {
    fn load(&self) -> u32 {
        self.0.load(Ordering::SeqCst) as u32
    }
}

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

    /// The low 32 bits of `value`, as the kernel sees them.
    #[cfg(loom)]
    fn futex_word(&self) -> FutexWord<'_> {
        FutexWord(&self.value)
    }

    /// The low 32 bits of `value`, as the kernel sees them.
    #[cfg(not(loom))]
    fn futex_word(&self) -> FutexWord<'_> {
        let base = self.value.as_ptr() as *const std::sync::atomic::AtomicU32;
        // Little-endian: the low half comes first; big-endian: second.
        let low = if cfg!(target_endian = "little") { base } else { base.wrapping_add(1) };
        // SAFETY: `low` points to an aligned 4-byte half of `value`, which lives as long as
        // `self`. Rust code only touches it through the 64-bit atomic; the reference exists to
        // hand its address to the kernel, whose futex reads are atomic 32-bit loads.
        unsafe { &*low }
    }

    #[inline(always)]
    fn wake_parked(&self) {
        fence(Ordering::SeqCst); // F1 in the module docs
        if self.waiters.load(Ordering::Relaxed) != 0 {
            futex_wake_all(self.futex_word());
        }
    }

    /// Parks until the value reaches `epoch`, or at most `slice`.
    fn park(&self, epoch: u64, slice: Duration) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst); // F2 in the module docs
        let v = self.value.load(Ordering::Acquire);
        if v < epoch {
            futex_wait(self.futex_word(), v as u32, Some(slice));
        }
        self.waiters.fetch_sub(1, Ordering::Release);
    }
}

/// How ranks wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitPolicy {
    /// Spin, then yield; never park. Signallers skip the wake-up check. Right when every rank
    /// has a core of its own.
    Spin,
    /// Spin briefly, yield, then park on a futex. Right when ranks outnumber cores.
    Park,
}

impl WaitPolicy {
    /// The automatic choice: park when the job's ranks on this machine outnumber its cores.
    pub fn auto(ranks_on_machine: usize, cores: usize) -> Self {
        if ranks_on_machine > cores {
            WaitPolicy::Park
        } else {
            WaitPolicy::Spin
        }
    }

    /// Whether signallers must check for parked waiters.
    pub fn wakes(self) -> bool {
        matches!(self, WaitPolicy::Park)
    }

    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn code(self) -> u64 {
        match self {
            WaitPolicy::Spin => 0,
            WaitPolicy::Park => 1,
        }
    }

    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn from_code(code: u64) -> Self {
        if code == 1 {
            WaitPolicy::Park
        } else {
            WaitPolicy::Spin
        }
    }
}

impl std::fmt::Display for WaitPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WaitPolicy::Spin => "spin",
            WaitPolicy::Park => "park",
        })
    }
}

/// The waiting parameters of one communicator.
#[derive(Clone, Copy, Debug)]
pub struct WaitConfig {
    /// Spin or park.
    pub policy: WaitPolicy,
    /// Busy-wait rounds before the first yield.
    pub spin: u32,
    /// Yields before parking (Park policy only).
    pub yields: u32,
    /// Give up after this long (None: wait for ever).
    pub timeout: Option<Duration>,
    /// Called on the slow path of every wait (after the spin phase, every [`PROGRESS_EVERY`]
    /// yields and around every park): MPI's progress under `barrier-mpi`, `None` elsewhere. See
    /// the module docs.
    pub progress: Option<Progress>,
}

/// Why a wait ended without the flag reaching its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitError {
    /// The deadline passed after waiting this long.
    Timeout(Duration),
    /// The job was aborted because this world rank failed.
    Aborted(usize),
    /// The caller's recheck interval passed; call again (with the same clock) after
    /// re-examining the module.
    Recheck,
    /// This rank of the communicator left it (dropped it or exited) before doing its part, so
    /// the wait can never complete.
    PeerLeft(usize),
    /// The job itself is gone (its launcher died).
    JobGone,
}

/// What a slow wait consults to learn that it can never complete.
///
/// Called from the slow path only: every few dozen yields and once per park slice, never while
/// spinning. It may also report a long wait (the communicator's stall report) and return `Ok`.
pub trait Watch {
    /// `Err(why)` once the wait must end although its flag has not moved; `waited` is how long
    /// since the wait started its clock (see the module docs: at its eighth yield at the latest).
    fn check(&self, waited: Duration) -> Result<(), WaitError>;
}

/// A wait that nothing can cut short but its timeout (device engines, tests).
#[derive(Clone, Copy, Debug, Default)]
pub struct Unwatched;

impl Watch for Unwatched {
    fn check(&self, _waited: Duration) -> Result<(), WaitError> {
        Ok(())
    }
}

impl WaitConfig {
    /// Waits until `flag` reaches `epoch`, following the policy.
    #[inline(always)]
    pub fn wait(&self, flag: &Flag, epoch: u64, watch: &dyn Watch) -> Result<(), WaitError> {
        self.wait_or_recheck(flag, epoch, watch, None, &mut None)
    }

    /// [`WaitConfig::wait`] that also returns [`WaitError::Recheck`] once this call has waited
    /// `recheck` (hardware modules look at their device between slices). `clock` is when the
    /// whole wait started its clock: the caller keeps it across the slices of one wait (`None`
    /// at first), so the timeout and the watch count every slice whole.
    #[inline(always)]
    pub fn wait_or_recheck(
        &self,
        flag: &Flag,
        epoch: u64,
        watch: &dyn Watch,
        recheck: Option<Duration>,
        clock: &mut Option<Instant>,
    ) -> Result<(), WaitError> {
        if self.reached_soon(flag, epoch) {
            return Ok(());
        }
        self.wait_slow(flag, epoch, watch, recheck, clock)
    }

    /// The inline start of every wait: whether `flag` reaches `epoch` within a few checks. At 2
    /// spinning ranks the partner's store usually lands within them, and an out-of-line call
    /// on every barrier is measurable latency. Ranks that park (more ranks than cores) check
    /// once: their partner is likely not even running.
    #[inline(always)]
    pub fn reached_soon(&self, flag: &Flag, epoch: u64) -> bool {
        if self.policy != WaitPolicy::Spin {
            // No PAUSE after the one check: what follows (a tail spin, the policy's spin
            // phase, a yield) checks again or gives the core away, so a PAUSE here only delays
            // it. An oversubscribed barrier calls this twice per rank before its first yield
            // (`Communicator::finish_with` and the wait itself).
            return flag.reached(epoch);
        }
        for _ in 0..INLINE_SPINS {
            if flag.reached(epoch) {
                return true;
            }
            std::hint::spin_loop();
        }
        false
    }

    /// [`WaitConfig::reached_soon`], then the spin phase of the policy (no clock reads, no
    /// stores): whether `flag` reached `epoch` meanwhile. For callers that read the clock
    /// before a wait (hardware modules), so that waits that end spinning never read it; they
    /// then wait with `spin: 0`.
    #[inline]
    pub fn spun_until(&self, flag: &Flag, epoch: u64) -> bool {
        self.reached_soon(flag, epoch) || self.spin_phase(flag, epoch)
    }

    /// The spin phase: [`WaitConfig::spin`] checks, no clock reads, no stores; whether `flag`
    /// reached `epoch` meanwhile.
    #[inline]
    fn spin_phase(&self, flag: &Flag, epoch: u64) -> bool {
        for _ in 0..self.spin {
            if flag.reached(epoch) {
                return true;
            }
            std::hint::spin_loop();
        }
        false
    }

    /// Spins until `flag` reaches `epoch` or `limit` has passed: whether it reached. The clock
    /// is read every 64 checks, starting after the first 64, so a spin lasts `limit` plus those
    /// first checks (a few microseconds). No yield, no park, no stores: a waiter that knows its
    /// signaller runs on another CPU right now (see [`crate::backend::Poll::Pending`]'s `spin`).
    #[cold]
    #[inline(never)]
    pub fn spin_for(&self, flag: &Flag, epoch: u64, limit: Duration) -> bool {
        // Most tail spins end within the first 64 checks and never read the clock.
        let mut start = None;
        loop {
            for _ in 0..64 {
                if flag.reached(epoch) {
                    return true;
                }
                std::hint::spin_loop();
            }
            if start.get_or_insert_with(Instant::now).elapsed() >= limit {
                return flag.reached(epoch);
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn wait_slow(
        &self,
        flag: &Flag,
        epoch: u64,
        watch: &dyn Watch,
        recheck: Option<Duration>,
        clock: &mut Option<Instant>,
    ) -> Result<(), WaitError> {
        if self.spin_phase(flag, epoch) {
            return Ok(());
        }
        // This call's clock starts at the FIRST_CHECK-th yield (or the park phase), not here:
        // in an oversubscribed barrier most waits end after a yield or two, and a clock read
        // per wait was a measurable part of a rank's turn. The whole wait's clock (`clock`)
        // starts with the first call's; the recheck interval counts from this call's.
        let mut started: Option<Instant> = None;
        // Returns how long the whole wait and this call have waited.
        let check =
            |started: &mut Option<Instant>, clock: &mut Option<Instant>| -> Result<(Duration, Duration), WaitError> {
                let now = Instant::now();
                let this_call = now - *started.get_or_insert(now);
                let waited = now - *clock.get_or_insert(now - this_call);
                watch.check(waited)?;
                if let Some(limit) = self.timeout {
                    if waited >= limit {
                        return Err(WaitError::Timeout(waited));
                    }
                }
                if recheck.is_some_and(|r| this_call >= r) {
                    return Err(WaitError::Recheck);
                }
                Ok((waited, this_call))
            };
        let mut yields: u32 = 0;
        loop {
            // Yield phase: with the Spin policy this phase lasts for ever.
            if flag.reached(epoch) {
                return Ok(());
            }
            if self.policy == WaitPolicy::Park && yields >= self.yields {
                break;
            }
            yield_now();
            yields = yields.wrapping_add(1);
            if yields.is_multiple_of(PROGRESS_EVERY) {
                if let Some(progress) = self.progress {
                    progress.run();
                }
            }
            // (`started` is set before FIRST_CHECK only by a check, which comes first only
            // after the counter wraps.)
            if yields == FIRST_CHECK && started.is_none() {
                let now = Instant::now();
                started = Some(now);
                clock.get_or_insert(now);
            } else if yields.is_multiple_of(if recheck.is_some() { 8 } else { 64 }) {
                check(&mut started, clock)?;
            }
        }
        // Park phase.
        loop {
            if flag.reached(epoch) {
                return Ok(());
            }
            let (waited, this_call) = check(&mut started, clock)?;
            let mut slice = match self.timeout {
                Some(limit) => limit.saturating_sub(waited).clamp(Duration::from_micros(100), PARK_SLICE),
                None => PARK_SLICE,
            };
            if let Some(r) = recheck {
                slice = slice.min(r.saturating_sub(this_call).max(Duration::from_micros(50)));
            }
            if let Some(progress) = self.progress {
                // Before the park (what arrived while this rank yielded) and after it.
                progress.run();
                flag.park(epoch, slice.min(PROGRESS_PARK_SLICE));
                // Not when the wake was the release: MPI's progress may yield the CPU (Open
                // MPI's does when oversubscribed), which a released rank must not give away.
                if !flag.reached(epoch) {
                    progress.run();
                }
            } else {
                flag.park(epoch, slice);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn cfg(policy: WaitPolicy, timeout: Option<Duration>) -> WaitConfig {
        WaitConfig { policy, spin: 10, yields: 2, timeout, progress: None }
    }

    #[test]
    fn parked_waiter_is_woken_by_signal() {
        for _ in 0..200 {
            let flag = Arc::new(Flag::default());
            let f2 = flag.clone();
            let t = std::thread::spawn(move || cfg(WaitPolicy::Park, None).wait(&f2, 1, &Unwatched));
            std::thread::yield_now();
            flag.signal(1, true);
            assert_eq!(t.join().unwrap(), Ok(()));
        }
    }

    #[test]
    fn wait_times_out_and_reports_how_long() {
        let flag = Flag::default();
        // Yield counts below, at and above the one where the clock starts, and parking after.
        for (policy, yields) in [
            (WaitPolicy::Spin, 0),
            (WaitPolicy::Park, 0),
            (WaitPolicy::Park, 2),
            (WaitPolicy::Park, FIRST_CHECK),
            (WaitPolicy::Park, 300),
        ] {
            let config = WaitConfig { yields, ..cfg(policy, Some(Duration::from_millis(30))) };
            let begun = Instant::now();
            match config.wait(&flag, 1, &Unwatched) {
                // Never more than really passed, and not far past the limit (the clock starts
                // at the eighth yield, and a loaded machine may be slow to wake the waiter).
                Err(WaitError::Timeout(d)) => {
                    assert!(d <= begun.elapsed(), "{policy} {yields}: reported {d:?} of {:?}", begun.elapsed());
                    assert!(begun.elapsed() < Duration::from_secs(5), "{policy} {yields}: {:?}", begun.elapsed());
                }
                other => panic!("expected timeout, got {other:?}"),
            }
        }
    }

    #[test]
    fn recheck_slices_of_one_wait_share_its_clock_and_its_timeout() {
        let flag = Flag::default();
        let slice = Duration::from_millis(5);
        // Room for several slices even when a loaded machine is slow to run the waiter.
        let limit = Duration::from_millis(200);
        for (policy, yields) in [(WaitPolicy::Spin, 0), (WaitPolicy::Park, 0), (WaitPolicy::Park, 256)] {
            let config = WaitConfig { yields, ..cfg(policy, Some(limit)) };
            let begun = Instant::now();
            let mut clock = None;
            let mut slices = 0;
            let timed_out = loop {
                let slice_begun = Instant::now();
                match config.wait_or_recheck(&flag, 1, &Unwatched, Some(slice), &mut clock) {
                    Err(WaitError::Recheck) => {
                        assert!(slice_begun.elapsed() >= slice, "{policy} {yields}: a slice ended early");
                        slices += 1;
                    }
                    Err(WaitError::Timeout(d)) => break d,
                    other => panic!("expected a recheck or a timeout, got {other:?}"),
                }
                assert!(slices < 100, "{policy} {yields}: the slices never add up to the timeout");
            };
            // The timeout counts the slices together: several slices, then one timeout that
            // covers them, no longer than really passed.
            assert!(slices >= 2, "{policy} {yields}: {slices} slices");
            assert!(
                timed_out >= limit && timed_out <= begun.elapsed(),
                "{policy} {yields}: {timed_out:?} of {:?}",
                begun.elapsed()
            );
        }
    }

    #[test]
    fn an_outside_progress_engine_turns_on_the_slow_path_only() {
        use std::sync::atomic::AtomicUsize;
        static STEPS: AtomicUsize = AtomicUsize::new(0);
        fn step(context: usize) {
            assert_eq!(context, 7);
            STEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let progress = Some(Progress::new(step, 7));
        // A flag already reached: no call (a release found spinning pays nothing).
        let flag = Flag::default();
        flag.signal(1, false);
        for policy in [WaitPolicy::Spin, WaitPolicy::Park] {
            WaitConfig { progress, ..cfg(policy, None) }.wait(&flag, 1, &Unwatched).unwrap();
        }
        assert_eq!(STEPS.load(Ordering::Relaxed), 0);
        // A long wait, yielding (Spin) or parked (Park): the engine keeps turning throughout, a
        // parked waiter every millisecond or so (a 50 ms slice would give a handful of calls).
        for (policy, yields) in [(WaitPolicy::Spin, 0), (WaitPolicy::Park, 0), (WaitPolicy::Park, 64)] {
            STEPS.store(0, Ordering::Relaxed);
            let flag = Arc::new(Flag::default());
            let signaller = {
                let flag = flag.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(100));
                    flag.signal(1, true);
                })
            };
            let config = WaitConfig { progress, yields, ..cfg(policy, None) };
            config.wait(&flag, 1, &Unwatched).unwrap();
            signaller.join().unwrap();
            let steps = STEPS.load(Ordering::Relaxed);
            assert!(steps >= 10, "{policy} {yields}: {steps} progress calls in a 100 ms wait");
        }
    }

    #[test]
    fn abort_ends_the_wait() {
        struct Dead;
        impl Watch for Dead {
            fn check(&self, _: Duration) -> Result<(), WaitError> {
                Err(WaitError::Aborted(3))
            }
        }
        let flag = Flag::default();
        assert_eq!(cfg(WaitPolicy::Park, None).wait(&flag, 1, &Dead), Err(WaitError::Aborted(3)));
    }

    #[test]
    fn concurrent_bumps_are_never_merged() {
        // The device doorbell: every ring must count, or the engine may sleep past an arrival.
        let flag = Arc::new(Flag::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let flag = flag.clone();
                std::thread::spawn(move || {
                    for _ in 0..50_000 {
                        flag.bump(false);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(flag.load(), 200_000);
    }

    #[test]
    fn raise_only_increases() {
        let flag = Flag::default();
        assert_eq!(flag.raise(5, false), 0);
        assert_eq!(flag.raise(3, false), 5);
        assert_eq!(flag.load(), 5);
    }
}
