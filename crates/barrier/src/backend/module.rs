//! A module: one communicator's barrier, as a backend built it, and what its `progress`
//! returns. The contract every module keeps is in the [folder's docs](super).

use std::fmt::Debug;

use crate::error::Error;
use crate::wait::Flag;

/// What a module's `progress` returns.
#[derive(Debug)]
#[non_exhaustive]
pub enum Poll<'a> {
    /// Every rank has arrived at the epoch: the barrier is complete for this rank.
    Ready,
    /// Not yet; `flag` reaching `target` is the next thing that can change that. Outside this
    /// crate, build it with [`Poll::pending`] (the variant may gain fields).
    #[non_exhaustive]
    Pending {
        /// The flag to wait on.
        flag: &'a Flag,
        /// The value it must reach.
        target: u64,
        /// Call `progress` again after this long even if the flag has not moved (hardware
        /// modules watch for device faults this way). `None`: only when the flag moves.
        recheck: Option<std::time::Duration>,
        /// Once `flag` reaches `target`, the barrier is complete for this rank and `progress`
        /// need not be called again for this epoch (the next `arrive` starts afresh). Saves a
        /// call on the critical path between seeing the last signal and the next barrier.
        last: bool,
        /// Spin on `flag` (no yield, no clock read but every few dozen checks) for up to this
        /// long before the communicator's wait policy takes over: the module expects the flag
        /// to move soon, set by a rank that runs on another CPU, and a yield now would only
        /// hand this core to ranks with nothing to do (the tail spin). Honoured once per
        /// barrier, by the first blocking wait that offers one: a spin that ended without the
        /// flag means the hint was wrong. `None` for every other wait.
        spin: Option<std::time::Duration>,
        /// Park at once, without the policy's yields (honoured only where the policy parks, so
        /// that the signaller wakes the waiter): the module expects the flag to be set by a
        /// rank that shares this CPU and would run sooner, and on another CPU, if this rank's
        /// wake moved it to an idle one (the tail spin's escape, see `algo::tail`).
        park: bool,
    },
}

impl<'a> Poll<'a> {
    /// Not yet: wait until `flag` reaches `target`, then call `progress` again. The other
    /// fields start at their plain values (no recheck, not the last wait, no tail spin); the
    /// methods below set them. (The variant may gain fields: a backend outside this crate
    /// builds it here.)
    #[inline]
    pub fn pending(flag: &'a Flag, target: u64) -> Self {
        Self::wait_for(flag, target, false)
    }

    /// [`Poll::pending`] with `last` as given: this crate's modules' common wait.
    #[inline]
    pub(crate) fn wait_for(flag: &'a Flag, target: u64, last: bool) -> Self {
        Poll::Pending { flag, target, recheck: None, last, spin: None, park: false }
    }

    /// Also call `progress` again after `every` even if the flag has not moved.
    pub fn recheck(mut self, every: std::time::Duration) -> Self {
        if let Poll::Pending { recheck, .. } = &mut self {
            *recheck = Some(every);
        }
        self
    }

    /// Once the flag reaches the target the barrier is complete for this rank (no further
    /// `progress` call for this epoch).
    pub fn last(mut self) -> Self {
        if let Poll::Pending { last, .. } = &mut self {
            *last = true;
        }
        self
    }

    /// Park at once where the policy parks (see the field).
    pub fn park(mut self) -> Self {
        if let Poll::Pending { park, .. } = &mut self {
            *park = true;
        }
        self
    }

    /// Spin on the flag for up to `limit` before the wait policy takes over (see the field).
    pub fn spin(mut self, limit: std::time::Duration) -> Self {
        if let Poll::Pending { spin, .. } = &mut self {
            *spin = Some(limit);
        }
        self
    }
}

/// A per-communicator barrier module. See the [folder's docs](super) for the contract.
///
/// The communicator drives it: for the barrier at epoch `e` it calls [`arrive`](Self::arrive)
/// once, then [`progress`](Self::progress) until it returns [`Poll::Ready`], waiting between
/// calls on the flag a [`Poll::Pending`] names, with the agreed wait policy (spin, yield, park)
/// and timeout. Split-phase barriers (`ibarrier`) use the same calls, spread over `test`.
///
/// * `arrive(e)` announces this rank (a signal, a store, a device write) and returns at once.
/// * `progress(e)` looks at flags, sends what it can send now (the next round's signal) and
///   returns; it never waits, never sleeps and joins no collective. It may be called again
///   after `Ready` for the same epoch (it must then return `Ready` again), and with a
///   `Pending` flag that has not moved (spurious wake-ups, rechecks).
/// * Signals that someone waits on must wake parked waiters when the communicator's policy
///   parks ([`EnableContext::policy`](super::EnableContext)`.wakes()`; an
///   [`Outbox`](super::Outbox) does it).
/// * **Failure**: an `Err` from either (a device fault, a transport error) breaks the
///   communicator on this rank, and the error reaches the caller of `barrier()`; the other
///   ranks see this rank leave and fail too, or time out naming it. A module that can recover
///   (fall back to software at an agreed epoch) does so inside, as the hardware modules do.
/// * Dropping the module is leaving the communicator: it must not wait for other ranks.
pub trait Module: Send + Debug {
    /// The algorithm or device mode in use, for reports (e.g. "central", "dissemination").
    fn algorithm(&self) -> &str;

    /// Announces this rank's arrival at `epoch`. Never blocks.
    fn arrive(&mut self, epoch: u64) -> Result<(), Error>;

    /// Advances the barrier at `epoch` as far as possible without blocking.
    fn progress(&mut self, epoch: u64) -> Result<Poll<'_>, Error>;

    /// Operations this rank has sent across the network so far: transport puts and atomics to
    /// other nodes, and arrival messages to a barrier device (the switch or GBA is reached over
    /// the network). Counters for tests and `barrier bench`.
    fn network_ops(&self) -> u64 {
        0
    }
}
