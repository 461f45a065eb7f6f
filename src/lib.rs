//! The workspace's correctness suite, shared by `examples/correctness.rs` (processes under the
//! launcher) and `tests/` (threads in one process), so both run exactly the same checks.
//!
//! The check: every rank owns a counter on its own cache line of a shared window. Before
//! barrier `k` a rank stores `k` into its counter; after barrier `k` it reads every counter and
//! requires `k <= counter <= k + 1`. A value below `k` means some rank left barrier `k` before
//! that rank arrived (an early release); a value above `k + 1` means a rank got two barriers
//! ahead, which is also impossible in a correct barrier.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use barrier::{Communicator, Error};

pub mod program;

/// Words between two ranks' counters: one 128-byte line.
const STRIDE: usize = 16;

/// How to stress a communicator.
#[derive(Clone, Copy, Debug)]
pub struct StressOptions {
    /// Barriers to run.
    pub iterations: u64,
    /// Seed of the random delays (mixed with the rank).
    pub seed: u64,
    /// One iteration in `spin_one_in` spins for a random while before arriving (0: never).
    pub spin_one_in: u64,
    /// One iteration in `sleep_one_in` sleeps up to 200 us before arriving (0: never).
    pub sleep_one_in: u64,
    /// Use `ibarrier` + `test` polling on odd iterations.
    pub split_phase: bool,
    /// Fault injection for launcher tests: this rank kills itself with SIGKILL just before
    /// barrier `.1` when its rank is `.0`.
    pub die_before: Option<(usize, u64)>,
}

impl Default for StressOptions {
    fn default() -> Self {
        StressOptions {
            iterations: 2000,
            seed: 1,
            spin_one_in: 8,
            sleep_one_in: 512,
            split_phase: true,
            die_before: None,
        }
    }
}

/// A barrier that let a rank through too early (or too late), with everything needed to see why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The checking rank.
    pub rank: usize,
    /// The barrier number.
    pub iteration: u64,
    /// The rank whose counter was out of range.
    pub peer: usize,
    /// The counter value seen.
    pub seen: u64,
}

/// Why a stress run failed.
#[derive(Debug)]
pub enum StressError {
    /// A barrier call returned an error.
    Barrier(Error),
    /// The barrier was incorrect.
    Violation(Violation),
}

impl std::fmt::Display for StressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StressError::Barrier(e) => write!(f, "barrier failed: {e}"),
            StressError::Violation(v) => write!(
                f,
                "INCORRECT BARRIER: rank {} after barrier {} saw rank {}'s counter at {} (allowed {}..={})",
                v.rank,
                v.iteration,
                v.peer,
                v.seen,
                v.iteration,
                v.iteration + 1
            ),
        }
    }
}

impl From<Error> for StressError {
    fn from(e: Error) -> Self {
        StressError::Barrier(e)
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Runs the check on `comm` (collective) and returns the number of barriers passed.
pub fn stress(comm: &Communicator, opts: &StressOptions) -> Result<u64, StressError> {
    let window = comm.shared_window(comm.size() * STRIDE)?;
    let counters = window.words();
    let me = comm.rank();
    let mut rng = XorShift(
        opts.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (me as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03) | 1,
    );
    let mine: &AtomicU64 = &counters[me * STRIDE];
    for k in 1..=opts.iterations {
        if opts.spin_one_in > 0 && rng.next().is_multiple_of(opts.spin_one_in) {
            for _ in 0..rng.next() % 4000 {
                std::hint::spin_loop();
            }
        }
        if opts.sleep_one_in > 0 && rng.next().is_multiple_of(opts.sleep_one_in) {
            std::thread::sleep(Duration::from_micros(rng.next() % 200));
        }
        mine.store(k, Ordering::Relaxed);
        if opts.die_before == Some((me, k)) {
            // SAFETY: kill and getpid have no memory-safety preconditions.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        if opts.split_phase && k % 2 == 1 {
            let mut req = comm.ibarrier()?;
            while !req.test()? {
                std::hint::spin_loop();
                std::thread::yield_now();
            }
        } else {
            comm.barrier()?;
        }
        for peer in 0..comm.size() {
            // Relaxed is enough: the barrier's acquire makes the peer's store visible.
            let seen = counters[peer * STRIDE].load(Ordering::Relaxed);
            if seen < k || seen > k + 1 {
                return Err(StressError::Violation(Violation { rank: me, iteration: k, peer, seen }));
            }
        }
    }
    comm.barrier()?;
    Ok(opts.iterations)
}

/// The README's examples, compiled and run as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;
