//! A backend (a component, in Open MPI's words): the [`Backend`] trait, why it declines
//! ([`Decline`]), and what it sees when the selector asks it about a communicator
//! ([`QueryContext`]) and when it builds a module ([`EnableContext`]: the query's facts plus
//! collectives, the transports, and the other backends by name).

use std::fmt::Debug;

use super::module::Module;
use crate::ctrl::Ctrl;
use crate::error::Error;
use crate::params::{ParamInfo, Params};
use crate::shm::JobShape;
use crate::transport::segment::{local_fabric, NetModel};
use crate::transport::{Fabric, Peer};
use crate::wait::WaitPolicy;

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
///
/// The built-in backends implement it, and so can a program or a vendor crate: register one with
/// [`crate::register_backend`] and the selector treats it like the built-in ones.
///
/// # What an implementation must guarantee
///
/// * **[`name`](Self::name)** is stable, unique and lowercase (`[a-z0-9_]`): ranks agree on
///   backends by name, and it makes the `BARRIER_<NAME>_PRIORITY`, `_DISABLE` and
///   `_MIN_COMM_SIZE` parameters (added for every backend; [`params`](Self::params) adds more).
/// * **[`query`](Self::query)** is local and cheap, has no side effects and joins no
///   collective: it says whether this rank could run the communicator, or why not
///   ([`Decline`], a reason a person can act on). The selector agrees on the answers: a
///   backend runs only where every rank accepted it.
/// * **Settings may differ between ranks** (each reads its own environment): a value that
///   shapes what the ranks build together (a tree's arity, a number of slots) must be taken
///   from one rank ([`EnableContext::broadcast`] of rank 0's), as the built-in backends do.
/// * **[`enable`](Self::enable)** is collective: every rank of the communicator calls it, in
///   the same order, and it may use the context's collectives (`allgather`, `all_agree`,
///   `mailboxes`), which every rank must then call alike. A decline must be the same on every
///   rank or come after an agreement (`all_agree`): a rank that returns while the others wait
///   in a collective leaves them waiting until their timeout. The selector agrees on the
///   outcome and drops the module everywhere if any rank failed.
/// * **The module it returns keeps the barrier contract** of the [module docs](super): no rank
///   sees [`Poll::Ready`](super::Poll::Ready) for epoch `e` before every rank has called
///   `arrive(e)`; everything a rank wrote before `arrive(e)` is visible to every rank after it
///   sees `Ready` (release on the signal, acquire on the wait: [`Flag::signal`] and
///   [`Flag::reached`] do this); epochs start at 1 and grow by one; `arrive` and `progress`
///   never block. See [`Module`] for what they may and may not do.
///
/// A backend that breaks these can let a rank through a barrier early: the safety of the
/// program's own data rests on them, though no memory safety of this crate does (which is why
/// the trait is safe to implement). The repository's `crates/barrier-ktree` is a backend
/// written outside the crate on this API, and runs the correctness suite.
///
/// [`Flag::signal`]: crate::wait::Flag::signal
/// [`Flag::reached`]: crate::wait::Flag::reached
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
