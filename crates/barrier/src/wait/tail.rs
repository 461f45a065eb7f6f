//! The tail spin's rule (see `algo::tail` for the central algorithm's use of it, and
//! `crate::sync` for the thread barriers'): a waiter that has nothing left to do after its
//! arrival spins for the release, rather than yielding its core, when every rank still missing
//! last ran on another CPU. Hints only: nothing completes on them.

use std::time::Duration;

/// The default bound of one tail spin (`BARRIER_SW_TAIL_SPIN`): a few context switches on the
/// other CPUs, which is what a rank that spins waits for.
pub const DEFAULT_TAIL_SPIN: Duration = Duration::from_micros(50);
/// The most ranks (or threads) whose hints a waiter keeps: one bit each in a mask that shares
/// its word with a 16-bit epoch tag (`algo::tail`).
pub const MAX_HINTS: usize = 48;
/// More missing ranks than this: no scan, no spin.
pub const SCAN_LIMIT: u32 = 16;
/// Where the missing ranks last ran, seen from a rank's CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Missing {
    /// Every one on another CPU: spin for the release.
    Elsewhere,
    /// One on this CPU: yield to it (and count towards an escape).
    Here,
    /// A CPU not known, or too many missing to look: neither.
    Unknown,
}

/// Whether a waiter on `cpu` (plus one; 0: not known) should spin: its CPU is known and every
/// rank in the bit set `missing` last ran on another one (`cpu_of(r)`, plus one). The tail
/// spin's rule, for the thread barriers too (`crate::sync`).
pub(crate) fn spin_beside(missing: u64, cpu: u64, cpu_of: impl Fn(usize) -> u64) -> bool {
    cpu != 0 && where_missing(missing, cpu, cpu_of) == Missing::Elsewhere
}

/// Where the ranks in the bit set `missing` last ran (`cpu_of(r)`: rank `r`'s CPU plus one, 0
/// if not known), seen from `cpu` (plus one). At most [`SCAN_LIMIT`] ranks are looked at; more
/// missing than that is `Unknown`.
pub(crate) fn where_missing(missing: u64, cpu: u64, cpu_of: impl Fn(usize) -> u64) -> Missing {
    if missing.count_ones() > SCAN_LIMIT {
        return Missing::Unknown;
    }
    let mut place = Missing::Elsewhere;
    let mut left = missing;
    while left != 0 {
        let r = left.trailing_zeros() as usize;
        left &= left - 1;
        match cpu_of(r) {
            theirs if theirs == cpu => return Missing::Here,
            0 => place = Missing::Unknown,
            _ => {}
        }
    }
    place
}
