//! # barrier-ktree
//!
//! A barrier backend written outside the `barrier` crate, with its public API only
//! ([`barrier::backend`], [`barrier::wait::Flag`], [`barrier::params`]): the proof that a vendor
//! with a barrier device, or an application with its own algorithm, plugs a backend in without
//! forking. Register it before the communicators it should serve:
//!
//! ```
//! barrier::register_backend(barrier_ktree::KTree).unwrap();
//! let params = barrier::Params::defaults_only().set("BARRIER_BACKEND", "ktree");
//! let backends = barrier::threads::Job::new(5).params(params).run(|world| {
//!     for _ in 0..100 {
//!         world.barrier().unwrap();
//!     }
//!     world.backend().to_string()
//! })
//! .unwrap();
//! assert!(backends.iter().all(|b| b == "ktree"));
//! ```
//!
//! # Protocol
//!
//! Ranks form a k-ary tree by rank (`BARRIER_KTREE_ARITY`, default 4): rank `r`'s children are
//! `k·r + 1 ..= k·r + k`, its parent `(r − 1) / k`. Every rank owns `k + 1` mailbox flags
//! ([`EnableContext::mailboxes`]): flag `j < k` is written only by its `j`-th child, flag `k`
//! only by its parent. For the barrier at epoch `e`:
//!
//! 1. **Gather.** A rank waits until each child's flag reaches `e` (the child's whole subtree
//!    has arrived), then signals flag `j` of its parent with `e`, where it is the parent's
//!    `j`-th child.
//! 2. **Release.** The root, having gathered, is released; every other rank waits until its
//!    flag `k` reaches `e`. A released rank signals flag `k` of each child with `e`, and is done.
//!
//! No rank is done before the root has gathered, and the root gathers only after every rank
//! has arrived: no early release. Every signal is a release store (or a put with release
//! semantics) and every wait an acquire load, so the chain child → parent → … → root → … →
//! child carries every rank's writes before its arrival to every rank after its release.
//! Flags hold epochs and only grow: nothing is reset.

use std::fmt;

use barrier::backend::{Backend, Decline, EnableContext, Mailboxes, Module, Outbox, Poll, QueryContext};
use barrier::params::{ParamInfo, ParamKind};
use barrier::Error;

/// The parameter that sets the tree's arity.
pub const ARITY: &str = "BARRIER_KTREE_ARITY";

/// The arity when `BARRIER_KTREE_ARITY` is not set.
pub const DEFAULT_ARITY: usize = 4;

/// The k-ary gather and release tree, as a backend to register
/// (`barrier::register_backend(barrier_ktree::KTree)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct KTree;

impl Backend for KTree {
    fn name(&self) -> &'static str {
        "ktree"
    }

    fn default_priority(&self) -> i32 {
        // Below the built-in software barrier (10): chosen when forced or given a priority.
        5
    }

    fn description(&self) -> &'static str {
        "k-ary gather and release tree over mailboxes (barrier-ktree, registered by the program)"
    }

    fn params(&self) -> Vec<ParamInfo> {
        vec![ParamInfo::new(
            ARITY,
            DEFAULT_ARITY.to_string(),
            "Children per rank in the ktree backend's gather and release tree.",
        )
        .kind(ParamKind::Int { min: 2, max: 64 })]
    }

    fn query(&self, ctx: &QueryContext<'_>) -> Result<(), Decline> {
        arity(ctx).map(|_| ())
    }

    fn enable(&self, ctx: &EnableContext<'_>) -> Result<Box<dyn Module>, Decline> {
        // Rank 0's arity: a setting that shapes the tree must be the same on every rank.
        let mine = arity(&ctx.query)?;
        let k = ctx.broadcast(0, mine as u64).map_err(|e| Decline::new(e.to_string()))? as usize;
        let (rank, size) = (ctx.query.rank, ctx.query.size);
        let mailboxes = ctx.mailboxes(k + 1)?;
        let children: Vec<usize> = (1..=k).map(|j| k * rank + j).take_while(|&c| c < size).collect();
        // Resolve every signal now, agreeing on the outcome: no rank may decline alone.
        let resolved = (|| -> Result<(Option<Outbox>, Vec<Outbox>), Error> {
            let up = match rank {
                0 => None,
                _ => Some(mailboxes.outbox((rank - 1) / k, (rank - 1) % k)?),
            };
            let down = children.iter().map(|&c| mailboxes.outbox(c, k)).collect::<Result<_, _>>()?;
            Ok((up, down))
        })();
        let everyone = ctx.all_agree(resolved.is_ok()).map_err(|e| Decline::new(e.to_string()))?;
        let (up, down) = match resolved {
            Ok(r) if everyone => r,
            Ok(_) => return Err(Decline::new("another rank could not reach its tree neighbours")),
            Err(e) => return Err(Decline::new(format!("cannot reach the tree neighbours: {e}"))),
        };
        let helps = mailboxes.needs_progress();
        Ok(Box::new(KTreeModule { k, children: children.len(), up, down, mailboxes, helps, stage: Stage::Done }))
    }
}

fn arity(ctx: &QueryContext<'_>) -> Result<usize, Decline> {
    ctx.params.parse(ARITY, DEFAULT_ARITY, "an arity from 2 to 64").map_err(|e| Decline::new(e.to_string()))
}

/// Where a rank is in the barrier of the current epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Waiting for child `j` (and those after it).
    Gather(usize),
    /// Gathered and reported to the parent; waiting for the release.
    AwaitRelease,
    /// Released (and the children released): the barrier is complete.
    Done,
}

/// One rank's tree.
struct KTreeModule {
    k: usize,
    /// Children this rank has (0 to k).
    children: usize,
    /// Flag `j` of the parent, where this rank is the parent's `j`-th child (none at the root).
    up: Option<Outbox>,
    /// Flag `k` of each child.
    down: Vec<Outbox>,
    mailboxes: Mailboxes,
    /// The transports need this rank's calls to move its signals (asynchronous puts across
    /// simulated nodes): progress on every call, rechecks while waiting, a flush before `Ready`.
    helps: bool,
    stage: Stage,
}

impl fmt::Debug for KTreeModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KTreeModule").field("k", &self.k).field("children", &self.children).finish()
    }
}

impl KTreeModule {
    fn release_children(&self, epoch: u64) -> Result<(), Error> {
        self.down.iter().try_for_each(|child| child.signal(epoch))
    }
}

impl Module for KTreeModule {
    fn algorithm(&self) -> &str {
        "k-ary gather and release tree"
    }

    fn arrive(&mut self, _epoch: u64) -> Result<(), Error> {
        self.stage = Stage::Gather(0);
        Ok(())
    }

    fn progress(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        if self.helps {
            self.mailboxes.progress();
        }
        let wait = |flag, helps: bool| {
            let pending = Poll::pending(flag, epoch);
            if helps {
                pending.recheck(Mailboxes::PROGRESS_SLICE)
            } else {
                pending
            }
        };
        loop {
            match self.stage {
                Stage::Gather(j) if j < self.children => {
                    if !self.mailboxes.own(j).reached(epoch) {
                        return Ok(wait(self.mailboxes.own(j), self.helps));
                    }
                    self.stage = Stage::Gather(j + 1);
                }
                Stage::Gather(_) => match &self.up {
                    Some(parent) => {
                        parent.signal(epoch)?;
                        self.stage = Stage::AwaitRelease;
                    }
                    None => {
                        self.release_children(epoch)?;
                        self.stage = Stage::Done;
                    }
                },
                Stage::AwaitRelease => {
                    let release = self.mailboxes.own(self.k);
                    if !release.reached(epoch) {
                        // A leaf has nothing to do once released (unless it must flush).
                        let last = self.children == 0 && !self.helps;
                        let pending = wait(release, self.helps);
                        return Ok(if last { pending.last() } else { pending });
                    }
                    self.release_children(epoch)?;
                    self.stage = Stage::Done;
                }
                Stage::Done => {
                    if self.helps {
                        // No peer may wait on a signal this rank left behind.
                        self.mailboxes.flush()?;
                    }
                    return Ok(Poll::Ready);
                }
            }
        }
    }

    fn network_ops(&self) -> u64 {
        self.mailboxes.network_ops()
    }
}
