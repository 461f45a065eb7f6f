//! The backend (component) and module traits.
//!
//! A [`Backend`] is a way to do barriers (a device, an algorithm family). For each new
//! communicator the selector asks every backend, by priority, whether it can serve it:
//! [`Backend::query`] is a cheap local check that returns a reason a person can read when the
//! answer is no; [`Backend::enable`] is collective and builds the per-communicator [`Module`].
//!
//! # The barrier contract
//!
//! A module's barrier at epoch `e` (arrive, then progress until [`Poll::Ready`]) guarantees:
//!
//! 1. **No early exit.** No rank sees `Ready` for `e` before every rank of the communicator has
//!    called `arrive(e)`.
//! 2. **Visibility.** Every write a rank made before `arrive(e)` happens-before every read any
//!    rank makes after it sees `Ready` for `e`. Software modules get this from release stores
//!    of epochs and acquire loads of them (a chain of release/acquire pairs across rounds);
//!    hardware modules from the device's release store into host memory, read with acquire.
//! 3. **Monotone epochs.** Epochs passed to `arrive` increase by one per barrier, starting at 1.
//!    Every signal means "reached epoch e" and every wait is "until at least e", so state is
//!    never reset and a module can take over at any epoch (how the fallback works).
//! 4. **Progress without blocking.** `arrive` and `progress` never block; a module that cannot
//!    finish yet returns [`Poll::Pending`] with the flag it waits on, and the communicator waits
//!    on it with the agreed wait policy (spin, yield, park) and timeout.

use std::fmt::Debug;

use crate::coll::Ctrl;
use crate::error::Error;
use crate::params::{ParamInfo, Params};
use crate::shm::JobShape;
use crate::transport::segment::{local_fabric, NetModel};
use crate::transport::{Fabric, Peer};
use crate::wait::{Flag, WaitPolicy};

/// What a module's `progress` returns.
#[derive(Debug)]
pub enum Poll<'a> {
    /// Every rank has arrived at the epoch: the barrier is complete for this rank.
    Ready,
    /// Not yet; `flag` reaching `target` is the next thing that can change that.
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
    },
}

/// A per-communicator barrier module. See the module docs for the contract.
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

/// Why a backend cannot serve a communicator, in words a person can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decline(pub String);

impl Decline {
    /// A decline with this reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Decline(reason.into())
    }
}

impl std::fmt::Display for Decline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a backend sees when asked about a communicator.
#[derive(Debug)]
pub struct QueryContext<'a> {
    /// This rank in the communicator.
    pub rank: usize,
    /// Ranks in the communicator.
    pub size: usize,
    /// The job this communicator belongs to.
    pub job: JobShape,
    /// Distinct nodes spanned by the communicator.
    pub nodes: usize,
    /// The node this rank is on.
    pub node: usize,
    /// World rank of each member, by communicator rank.
    pub members: &'a [usize],
    /// Node of each member, by communicator rank (the same numbering as `node`).
    pub node_of: &'a [usize],
    /// Every member is a thread of this process (a thread-mode job, or threads of one rank of
    /// a hybrid program); false when any member is another process. Resources that belong to
    /// one process (an A64FX barrier blade) can serve only such communicators.
    pub one_process: bool,
    /// Parameters.
    pub params: &'a Params,
}

/// What a backend gets when enabled: the query context plus collectives over the communicator.
#[derive(Debug)]
pub struct EnableContext<'a> {
    /// The same facts as at query time.
    pub query: QueryContext<'a>,
    /// The agreed wait policy (signallers must wake parked waiters iff it parks).
    pub policy: WaitPolicy,
    pub(crate) ctrl: &'a Ctrl<'a>,
    pub(crate) region: &'a crate::region::Region,
}

impl EnableContext<'_> {
    /// Rank `root`'s `value`, on every rank (collective).
    pub fn broadcast(&self, root: usize, value: u64) -> Result<u64, Error> {
        Ok(self.ctrl.allgather(&[value])?[root][0])
    }

    /// True on every rank iff `ok` is true on every rank (collective).
    pub fn all_agree(&self, ok: bool) -> Result<bool, Error> {
        self.ctrl.all_agree(ok)
    }

    /// A copy of every rank's `words` (at most 15), indexed by rank (collective).
    pub fn allgather(&self, words: &[u64]) -> Result<Vec<Vec<u64>>, Error> {
        self.ctrl.allgather(words)
    }

    /// Member `rank` as transports see it.
    pub fn peer(&self, rank: usize) -> Peer {
        Peer { world_rank: self.query.members[rank], node: self.query.node_of[rank] }
    }

    /// This rank's transports (self, shared memory, and the simulated network when the job
    /// spans simulated nodes), with `BARRIER_NET_PUT_LATENCY` applied.
    pub fn fabric(&self) -> Result<Fabric, Error> {
        let net = net_model(self.query.params)?;
        Ok(local_fabric(self.region.segment(), self.peer(self.query.rank), self.policy.wakes(), net))
    }
}

/// The parameter that gives the simulated network's per-put latency.
pub const NET_PUT_LATENCY: &str = "BARRIER_NET_PUT_LATENCY";
/// The parameter that makes the simulated network's puts asynchronous.
pub const NET_ASYNC: &str = "BARRIER_NET_ASYNC";

/// The simulated network's behaviour from the parameters.
pub(crate) fn net_model(params: &Params) -> Result<NetModel, Error> {
    Ok(NetModel { latency: params.duration(NET_PUT_LATENCY)?, asynchronous: params.flag(NET_ASYNC)? })
}

/// A way of doing barriers. Implementations are stateless descriptions; state lives in modules.
pub trait Backend: Send + Sync + Debug {
    /// Short name used in parameters (`BARRIER_<NAME>_*`) and reports.
    fn name(&self) -> &'static str;

    /// Priority when `BARRIER_<NAME>_PRIORITY` is not set; higher wins.
    fn default_priority(&self) -> i32;

    /// One line on what it is.
    fn description(&self) -> &'static str;

    /// Backend-specific parameters (the standard three are added by the selector).
    fn params(&self) -> Vec<ParamInfo> {
        Vec::new()
    }

    /// Can this backend serve the communicator? Local, cheap, no side effects. Called on every
    /// rank; the selector makes the answer collective.
    fn query(&self, ctx: &QueryContext<'_>) -> Result<(), Decline>;

    /// Builds the module. Collective: every rank calls it, in the same order, and may use the
    /// context's collectives. A decline here must be the same on all ranks (agree first).
    fn enable(&self, ctx: &EnableContext<'_>) -> Result<Box<dyn Module>, Decline>;
}

