//! Mailboxes: the shared flags a backend signals its peers through, for backends written outside
//! this crate (a vendor's device driver, an application's own algorithm) as much as for ours.
//!
//! Every rank of the communicator owns `slots` [`Flag`]s, each alone on a cache line, that only
//! it waits on; any rank can signal any of them through an [`Outbox`], resolved once at set-up
//! to the transport the fabric ranks first for that peer: a plain store into shared memory
//! inside a node, a counted put across the simulated nodes of `barrier run --nodes M` (and
//! whatever transport a bootstrap adds). A signal of epoch `e` is a release store of `e`; the
//! owner sees it with an acquire load ([`Flag::reached`]), so everything the signaller wrote
//! before the signal is visible to the owner after it: the barrier contract's visibility, link
//! by link.
//!
//! # Protocol (collective over the communicator, inside [`EnableContext::mailboxes`])
//!
//! 1. Rank 0 allocates one block of the job segment: a line that counts the ranks that have let
//!    go of the block, then `slots` flags per rank (rank `r`'s row starts at line
//!    `1 + r * slots`), zeroed. It broadcasts the block's offset (or that it could not).
//! 2. Every rank registers its own row with the fabric and the handles are exchanged; whether
//!    every rank could is agreed, so the ranks decline together or not at all.
//! 3. Each rank's [`Mailboxes`] counts itself out of the block when dropped; the last one out
//!    returns the block to the segment. Nothing is freed while any rank can still signal.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::component::{Decline, EnableContext};
use crate::error::Error;
use crate::pad::CACHE_LINE;
use crate::shm::{Segment, Shared};
use crate::transport::{Fabric, MemHandle, Peer, Signal};
use crate::wait::Flag;

/// This rank's share of a communicator's mailboxes: its own flags to wait on, and the means to
/// signal every other rank's. Made by [`EnableContext::mailboxes`]; a module keeps it (and the
/// [`Outbox`]es it resolved) for as long as it runs.
#[derive(Debug)]
pub struct Mailboxes {
    own: Vec<Shared<Flag>>,
    handles: Vec<MemHandle>,
    peers: Vec<Peer>,
    fabric: Fabric,
    wake: bool,
    /// Held for its drop: this rank's count out of the block (the last one frees it).
    _block: Block,
}

/// One rank's hold on the block; the last rank to let go frees it.
#[derive(Debug)]
struct Block {
    seg: Arc<Segment>,
    offset: usize,
    bytes: usize,
    ranks: u64,
    left: Shared<AtomicU64>,
}

impl Drop for Block {
    fn drop(&mut self) {
        // AcqRel: the last one out sees every other rank's last use of the block before freeing.
        if self.left.fetch_add(1, Ordering::AcqRel) + 1 == self.ranks {
            self.seg.free(self.offset, self.bytes);
        }
    }
}

/// A resolved way to signal one flag of one rank's mailboxes.
#[derive(Debug)]
pub struct Outbox {
    signal: Signal,
    wake: bool,
}

impl Outbox {
    /// Raises the flag to `epoch` (a release store, or a put with release semantics), waking
    /// its owner if the communicator's wait policy parks. Never blocks beyond the transport's
    /// own injection (a simulated network's latency).
    #[inline]
    pub fn signal(&self, epoch: u64) -> Result<(), Error> {
        self.signal.signal(epoch, self.wake)
    }

    /// Whether this signal crosses the (real or simulated) network.
    pub fn is_network(&self) -> bool {
        self.signal.is_network()
    }
}

impl Mailboxes {
    /// This rank's flag `slot` (`0..slots`): what others signal and this rank waits on.
    ///
    /// # Panics
    /// If `slot` is not below the `slots` the mailboxes were made with.
    #[inline]
    pub fn own(&self, slot: usize) -> &Flag {
        &self.own[slot]
    }

    /// Flags per rank.
    pub fn slots(&self) -> usize {
        self.own.len()
    }

    /// A way to signal flag `slot` of communicator rank `rank` (this rank's own included),
    /// through the best transport to it. Resolve outboxes at set-up, not per barrier.
    pub fn outbox(&self, rank: usize, slot: usize) -> Result<Outbox, Error> {
        let (Some(&peer), Some(&handle)) = (self.peers.get(rank), self.handles.get(rank)) else {
            return Err(Error::InvalidArgument(format!(
                "no rank {rank} in a communicator of {} ranks",
                self.peers.len()
            )));
        };
        if slot >= self.own.len() {
            return Err(Error::InvalidArgument(format!(
                "no slot {slot}: the mailboxes have {} per rank",
                self.own.len()
            )));
        }
        Ok(Outbox { signal: self.fabric.signal_to(peer, handle, slot)?, wake: self.wake })
    }

    /// Whether some transport needs this rank's calls to move its signals along (then call
    /// [`progress`](Self::progress) from `Module::progress`).
    pub fn needs_progress(&self) -> bool {
        self.fabric.needs_progress()
    }

    /// Moves this rank's signals along, for transports whose puts need the initiator's help.
    pub fn progress(&self) {
        self.fabric.progress();
    }

    /// Returns once every signal this rank sent has landed. A module whose transports
    /// [need progress](Self::needs_progress) flushes before it reports `Ready`, so that no peer
    /// waits on a signal this rank left behind; while it waits it asks to be called back every
    /// [`PROGRESS_SLICE`](Self::PROGRESS_SLICE) (`Poll::pending(..).recheck(..)`) to progress them.
    ///
    /// It may be called inside `Module::progress` (which never blocks on *peers*): it completes
    /// this rank's own signals, which needs no other rank to act (at most the transport's
    /// latency: a put in flight, an eager MPI send), so it cannot wait for a rank that waits for
    /// this one.
    pub fn flush(&self) -> Result<(), Error> {
        self.fabric.flush()
    }

    /// How often a module waiting with signals in flight on a transport that needs progress
    /// asks to be called back.
    pub const PROGRESS_SLICE: std::time::Duration = crate::transport::PROGRESS_SLICE;

    /// Signals this rank sent across the network so far (for `Module::network_ops`).
    pub fn network_ops(&self) -> u64 {
        self.fabric.network_ops()
    }
}

impl EnableContext<'_> {
    /// Mailboxes of `slots` flags per rank (see [`Mailboxes`]), every flag at 0. Collective:
    /// every rank of the communicator calls it at the same point of `enable`, and every rank
    /// gets mailboxes or every rank gets the same kind of decline. Every rank must ask for the
    /// same `slots` (take a setting that sizes them from rank 0: [`EnableContext::broadcast`]);
    /// ranks that differ are declined together.
    pub fn mailboxes(&self, slots: usize) -> Result<Mailboxes, Decline> {
        let q = &self.query;
        let seg = self.region.segment();
        let coll = |e: Error| Decline::new(e.to_string());
        // The layout is rank 0's: a rank that counts other slots would place its row elsewhere.
        let asked = self.allgather(&[slots as u64]).map_err(coll)?;
        if let Some(r) = asked.iter().position(|w| w[0] != slots as u64) {
            return Err(Decline::new(format!(
                "the ranks asked for mailboxes of different sizes (rank {r}: {}, rank 0: {}): agree on the setting \
                 that sizes them first",
                asked[r][0], asked[0][0]
            )));
        }
        let bytes = slots
            .checked_mul(q.size)
            .and_then(|flags| flags.checked_add(1))
            .and_then(|lines| lines.checked_mul(CACHE_LINE))
            .filter(|_| slots > 0);
        let Some(bytes) = bytes else {
            return Err(Decline::new(format!("mailboxes of {slots} slots for {} ranks cannot be laid out", q.size)));
        };
        // 1. Rank 0 allocates; the offset travels as offset + 1 (0: it could not).
        let mut failure = None;
        let offer = if q.rank == 0 {
            match seg.alloc(bytes) {
                Ok(off) => off as u64 + 1,
                Err(e) => {
                    failure = Some(e);
                    0
                }
            }
        } else {
            0
        };
        let offer = self.broadcast(0, offer).map_err(coll)?;
        if offer == 0 {
            return Err(Decline::new(match failure {
                Some(e) => format!("no room for mailboxes: {e}"),
                None => "rank 0 had no room for the mailboxes (its decline says why)".into(),
            }));
        }
        let offset = (offer - 1) as usize;
        let block = Block { seg: seg.clone(), offset, bytes, ranks: q.size as u64, left: Shared::new(seg, offset) };
        let row = offset + CACHE_LINE * (1 + q.rank * slots);
        // 2. Every rank registers its row; the handles are exchanged and the outcome agreed (a
        // rank that failed takes part in the exchange, so that nobody waits for it).
        let fabric = self.fabric();
        let mine = match &fabric {
            Ok(fabric) => fabric.register(seg.slice::<Flag>(row, slots)),
            Err(e) => Err(Error::Transport(e.to_string())),
        };
        let words = mine.as_ref().map_or([0, 0], |h| h.to_words());
        let all = self.allgather(&[words[0], words[1], u64::from(mine.is_ok())]).map_err(coll)?;
        if let Some(r) = all.iter().position(|w| w[2] == 0) {
            return Err(Decline::new(match mine {
                Err(e) => format!("cannot register this rank's mailboxes: {e}"),
                Ok(_) => format!("rank {r} could not register its mailboxes (its decline says why)"),
            }));
        }
        let fabric = fabric.map_err(coll)?;
        Ok(Mailboxes {
            own: (0..slots).map(|s| Shared::new(seg, row + s * CACHE_LINE)).collect(),
            handles: all.iter().map(|w| MemHandle::from_words([w[0], w[1]])).collect(),
            peers: (0..q.size).map(|r| self.peer(r)).collect(),
            fabric,
            wake: self.policy.wakes(),
            _block: block,
        })
    }
}
