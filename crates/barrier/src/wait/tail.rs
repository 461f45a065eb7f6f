//! The tail spin's bounds, shared by the central algorithm (`algo::tail`) and the thread
//! barriers (`crate::sync`): a waiter that has nothing left to do after its arrival spins for
//! the release, rather than yielding its core, when every rank still missing last ran on
//! another CPU. Hints only: nothing completes on them.

use std::time::Duration;

/// The default bound of one tail spin (`BARRIER_SW_TAIL_SPIN`): a few context switches on the
/// other CPUs, which is what a rank that spins waits for.
pub const DEFAULT_TAIL_SPIN: Duration = Duration::from_micros(50);
/// The most ranks (or threads) whose hints a waiter keeps: one bit each in a mask that shares
/// its word with a 16-bit epoch tag (`algo::tail`).
pub const MAX_HINTS: usize = 48;
/// More missing ranks than this: no scan, no spin.
pub const SCAN_LIMIT: u32 = 16;
