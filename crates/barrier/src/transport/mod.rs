//! The transport layer: how one rank's signal reaches a slot of another rank.
//!
//! Modelled on Open MPI's BTL (byte transfer layer), cut down to what barriers need:
//!
//! * **registration**: a rank registers slots of its own memory ([`Transport::register`]) and
//!   gets a [`MemHandle`], a few words it publishes to its peers (in an allgather while the
//!   communicator is created); a peer turns the handle into a [`RemoteSlot`] with
//!   [`Transport::resolve`];
//! * **one-sided operations** on a remote slot: [`Transport::put`] of a u64 (with release
//!   semantics: everything the initiator wrote before is visible to whoever sees the value),
//!   [`Transport::atomic_add`] and [`Transport::compare_swap`];
//! * **completion**: a put may complete asynchronously (a NIC, MPI); [`Transport::flush`] returns
//!   once every put this rank issued is visible at its target. A barrier never needs to flush:
//!   the peer it signals waits for the value, so delivery is all that matters, and a transport
//!   whose puts need the initiator's help to progress does that in [`Transport::progress`],
//!   which modules call while they wait;
//! * **exclusivity**: every transport says how much it wants a peer ([`Transport::exclusivity`],
//!   higher wins) and whether it can reach it at all; a [`Fabric`] picks, per peer, the
//!   reaching transport with the highest exclusivity: self > shared memory > network.
//!
//! Implementations here ([`segment`]): `self` (this rank), `shm` (ranks of one node store into
//! each other's slots directly, the XPMEM model: a handle resolves once to an address and every
//! signal after that is one CPU store), and `net-sim`, the simulated network between the
//! simulated nodes of `barrier run --nodes M` and `threads::Job::nodes(M)`: same machine, but
//! every internode operation goes through it, is counted, and waits out
//! `BARRIER_NET_PUT_LATENCY` before it lands. Real nodes use no transport: the layers above give
//! the hierarchy's roots' phase a link of their own ([`crate::hierarchy::RootsLink`]).
//!
//! On the barrier path a module holds [`Signal`]s: slots resolved once at set-up, either to a
//! direct store (self, shm) or to a put through the chosen transport.

pub mod segment;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::shm::Shared;
use crate::wait::Flag;

/// Exclusivity of the `self` transport (as Open MPI's `MCA_BTL_EXCLUSIVITY_HIGH`).
pub const EXCLUSIVITY_SELF: u32 = 64 * 1024;
/// Exclusivity of shared memory: below self, above any network.
pub const EXCLUSIVITY_SHM: u32 = 64 * 1024 - 1;
/// Exclusivity of a network transport (as Open MPI's `MCA_BTL_EXCLUSIVITY_DEFAULT`).
pub const EXCLUSIVITY_NET: u32 = 1024;

/// A rank as transports see it: where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer {
    /// Its rank in the world.
    pub world_rank: usize,
    /// The (simulated or real) node it runs on.
    pub node: usize,
}

/// A registered run of slots that a peer can target: what a rank publishes to its peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemHandle {
    /// World rank of the owner (the rank that reads the slots).
    pub owner: usize,
    /// Where the run starts (for the job-segment transports: its offset in the segment).
    pub offset: u64,
    /// How many slots it holds.
    pub slots: u32,
}

impl MemHandle {
    /// Words to publish in an exchange.
    pub fn to_words(self) -> [u64; 2] {
        [self.offset, (self.owner as u64) << 32 | self.slots as u64]
    }

    /// A handle from published words.
    pub fn from_words(words: [u64; 2]) -> Self {
        MemHandle { offset: words[0], owner: (words[1] >> 32) as usize, slots: words[1] as u32 }
    }
}

/// One slot of a peer's registered run, resolved for one transport.
#[derive(Debug)]
pub struct RemoteSlot {
    /// The owner.
    pub peer: Peer,
    /// The run it belongs to.
    pub handle: MemHandle,
    /// Its index in the run.
    pub slot: usize,
    /// For transports that reach the slot by load and store: its address.
    pub(crate) addr: Option<Shared<Flag>>,
}

impl RemoteSlot {
    /// A slot without a local address: how a transport outside this crate that only reaches
    /// slots through a network builds what its `resolve` returns.
    pub fn new(peer: Peer, handle: MemHandle, slot: usize) -> Self {
        RemoteSlot { peer, handle, slot, addr: None }
    }
}

/// What a transport has done for one rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportCounters {
    /// Puts issued.
    pub puts: u64,
    /// Atomic operations issued (add, compare-swap).
    pub atomics: u64,
    /// Flushes.
    pub flushes: u64,
}

/// Counters a transport instance keeps (one per rank and communicator).
#[derive(Debug, Default)]
pub struct Counters {
    puts: AtomicU64,
    atomics: AtomicU64,
    flushes: AtomicU64,
}

impl Counters {
    /// Counts one put.
    #[inline]
    pub fn put(&self) {
        self.puts.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts one atomic.
    pub fn atomic(&self) {
        self.atomics.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts one flush.
    pub fn flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }
    /// A snapshot.
    pub fn get(&self) -> TransportCounters {
        TransportCounters {
            puts: self.puts.load(Ordering::Relaxed),
            atomics: self.atomics.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
        }
    }
}

/// A way to reach other ranks' registered slots. See the module docs.
pub trait Transport: Send + Sync + fmt::Debug {
    /// Short name (`self`, `shm`, `net-sim`, ...).
    fn name(&self) -> &'static str;

    /// How much this transport wants the peers it reaches (higher wins).
    fn exclusivity(&self) -> u32;

    /// Whether a store into one of its slots crosses a network (counted as network traffic).
    fn is_network(&self) -> bool;

    /// Whether `me` can reach `peer` through this transport.
    fn reaches(&self, me: Peer, peer: Peer) -> bool;

    /// Registers `slots` (this rank's memory) so that peers can target them.
    fn register(&self, owner: Peer, slots: &[Flag]) -> Result<MemHandle>;

    /// Resolves slot `slot` of `peer`'s registered run `handle`.
    fn resolve(&self, peer: Peer, handle: MemHandle, slot: usize) -> Result<RemoteSlot>;

    /// Stores `value` into the slot (release semantics; wakes the owner if it parks). May
    /// complete asynchronously: see [`Transport::flush`].
    fn put(&self, to: &RemoteSlot, value: u64) -> Result<()>;

    /// Adds `value` to the slot; returns the previous value.
    fn atomic_add(&self, to: &RemoteSlot, value: u64) -> Result<u64>;

    /// Stores `new` if the slot holds `expected`; returns the value it held.
    fn compare_swap(&self, to: &RemoteSlot, expected: u64, new: u64) -> Result<u64>;

    /// Returns once every put this rank issued through this transport is visible at its target.
    fn flush(&self) -> Result<()>;

    /// Whether puts need the initiator's calls to [`Transport::progress`] to complete. Modules
    /// that use such a transport call the fabric's progress on every poll and ask to be polled
    /// again regularly while they wait ([`PROGRESS_SLICE`]).
    fn needs_progress(&self) -> bool {
        false
    }

    /// Advances outstanding operations without blocking (for transports that need the
    /// initiator's help); the default has nothing to do.
    fn progress(&self) {}

    /// What this transport has done for this rank.
    fn counters(&self) -> TransportCounters;
}

/// How often a module waiting with puts outstanding on a transport that
/// [needs progress](Transport::needs_progress) gets called back.
pub const PROGRESS_SLICE: std::time::Duration = std::time::Duration::from_micros(50);

/// A slot this rank signals, resolved once at set-up.
#[derive(Debug)]
pub enum Signal {
    /// Reached by a CPU store (self, shared memory).
    Store(Shared<Flag>),
    /// Reached by a put through a transport (boxed: the store is the variant on hot paths).
    Put(Box<(Arc<dyn Transport>, RemoteSlot)>),
}

impl Signal {
    /// Publishes `epoch` into the slot (waking its owner if `wake`).
    #[inline(always)]
    pub fn signal(&self, epoch: u64, wake: bool) -> Result<()> {
        match self {
            Signal::Store(flag) => {
                flag.signal(epoch, wake);
                Ok(())
            }
            Signal::Put(put) => put.0.put(&put.1, epoch),
        }
    }

    /// Whether signalling needs the initiator's progress calls to complete.
    pub fn needs_progress(&self) -> bool {
        matches!(self, Signal::Put(put) if put.0.needs_progress())
    }

    /// Whether signalling crosses a network.
    pub fn is_network(&self) -> bool {
        matches!(self, Signal::Put(put) if put.0.is_network())
    }
}

/// One rank's transports, and the choice among them per peer.
#[derive(Debug, Clone)]
pub struct Fabric {
    me: Peer,
    /// Highest exclusivity first.
    transports: Vec<Arc<dyn Transport>>,
}

/// One line of a [`Fabric`]'s ranking: a transport and the peers it was chosen for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Transport name.
    pub name: &'static str,
    /// Its exclusivity.
    pub exclusivity: u32,
    /// Whether it is a network.
    pub network: bool,
    /// The peers (world ranks) it serves for this rank.
    pub peers: Vec<usize>,
}

impl Fabric {
    /// A fabric over `transports` for the rank `me`.
    pub fn new(me: Peer, mut transports: Vec<Arc<dyn Transport>>) -> Self {
        transports.sort_by_key(|t| std::cmp::Reverse(t.exclusivity()));
        Fabric { me, transports }
    }

    /// This rank.
    pub fn me(&self) -> Peer {
        self.me
    }

    /// The transport that serves `peer`: the one with the highest exclusivity that reaches it.
    pub fn route(&self, peer: Peer) -> Result<&Arc<dyn Transport>> {
        self.transports.iter().find(|t| t.reaches(self.me, peer)).ok_or_else(|| {
            Error::Transport(format!(
                "no transport reaches world rank {} on node {} from world rank {} on node {} (have: {})",
                peer.world_rank,
                peer.node,
                self.me.world_rank,
                self.me.node,
                self.transports.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")
            ))
        })
    }

    /// Registers `slots` of this rank with the transport that reaches it from `reader`'s side
    /// (the owner registers; every transport of this build shares one handle format).
    pub fn register(&self, slots: &[Flag]) -> Result<MemHandle> {
        self.route(self.me)?.register(self.me, slots)
    }

    /// Resolves slot `slot` of `peer`'s run `handle` into something to signal.
    pub fn signal_to(&self, peer: Peer, handle: MemHandle, slot: usize) -> Result<Signal> {
        let t = self.route(peer)?;
        let remote = t.resolve(peer, handle, slot)?;
        Ok(match (t.is_network(), remote.addr) {
            (false, Some(addr)) => Signal::Store(addr),
            (_, addr) => Signal::Put(Box::new((t.clone(), RemoteSlot { addr, ..remote }))),
        })
    }

    /// Network puts and atomics this rank issued so far.
    pub fn network_ops(&self) -> u64 {
        self.transports
            .iter()
            .filter(|t| t.is_network())
            .map(|t| {
                let c = t.counters();
                c.puts + c.atomics
            })
            .sum()
    }

    /// Whether any transport needs this rank's progress calls.
    pub fn needs_progress(&self) -> bool {
        self.transports.iter().any(|t| t.needs_progress())
    }

    /// Lets every transport advance outstanding operations.
    pub fn progress(&self) {
        for t in &self.transports {
            t.progress();
        }
    }

    /// Returns once every put this rank issued through any transport is visible at its target.
    pub fn flush(&self) -> Result<()> {
        self.transports.iter().try_for_each(|t| t.flush())
    }

    /// The ranking: every transport, highest exclusivity first, with the peers it serves.
    pub fn ranking(&self, peers: &[Peer]) -> Vec<Route> {
        self.transports
            .iter()
            .map(|t| Route {
                name: t.name(),
                exclusivity: t.exclusivity(),
                network: t.is_network(),
                peers: peers
                    .iter()
                    .filter(|&&p| self.route(p).is_ok_and(|r| Arc::ptr_eq(r, t)))
                    .map(|p| p.world_rank)
                    .collect(),
            })
            .collect()
    }
}
