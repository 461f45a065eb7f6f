//! The flag barriers: barriers over shared memory that work everywhere. The software backend
//! (`dissemination`) runs them; an offload module falls back to them after a device fault.
//!
//! It offers several algorithms, like OpenSHMEM's basic collectives, chosen with
//! `BARRIER_SW_ALGORITHM`. All of them signal by storing an epoch into a flag that one rank
//! writes, and wait until a flag reaches at least the current epoch; no flag is ever reset.
//!
//! * **central**: a cumulative arrival counter: each rank adds up to the epoch it arrives at
//!   (one per barrier). Barrier `e` is complete when the counter reaches `n * e`; the rank
//!   whose `fetch_add` makes it so stores `e` into the release flag
//!   that everyone else polls. One shared RMW line plus one broadcast line: cheapest when the
//!   ranks are few and when ranks park (one futex wake releases everybody). With more ranks
//!   than cores, a rank whose CPU holds no missing rank spins for the release instead of
//!   yielding ([`tail`], `BARRIER_SW_TAIL_SPIN`).
//! * **dissemination**: ⌈log2 n⌉ rounds; in round `r` rank `i` stores `e` into the round-`r`
//!   flag of rank `(i + 2^r) mod n` and waits for its own round-`r` flag to reach `e`. Works
//!   for any `n`. Every flag has one writer (`(i - 2^r) mod n`).
//! * **tournament**: in round `r` the rank whose low `r+1` bits are zero waits for its opponent
//!   `i + 2^r` (if it exists) to store `e` into its round-`r` flag; the loser stores and then
//!   waits for the champion (rank 0) to store `e` into one release flag.
//! * **tree**: a k-ary tree (`BARRIER_TREE_ARITY`, default 4). Each rank waits for its children's
//!   up-flags, stores its own up-flag, waits for its down-flag, and stores its children's
//!   down-flags.
//! * **gather**: the hierarchical backend's node phases ([`super::tree`]) as a flat barrier:
//!   the ranks gather up a k-ary tree of padded up-slots (`BARRIER_GATHER_RADIX`, default
//!   [`DEFAULT_GATHER_RADIX`]: flat, rank 0 reads every slot, up to that many ranks and one),
//!   and rank 0 releases everybody through one flag. Two hand-overs, one after the other, but
//!   neither grows with the ranks as long as the root can read their slots as fast as they come.
//!
//! Why `>= e` is enough, even for the fallback: a rank only ever stores epoch `e` after it has
//! itself arrived at `e`, and a rank reaching `e + 1` implies that every rank arrived at `e`.
//! So any flag value `>= e` carries at least the knowledge the algorithm needs for epoch `e`,
//! and a module can start at any epoch (the slot-based algorithms, dissemination in particular,
//! are what a failed hardware backend falls back to).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::backend::{Decline, EnableContext, Module, Poll};
use crate::error::Error;
use crate::region::Region;
use crate::shm::Shared;
use crate::transport::{Fabric, Signal, PROGRESS_SLICE};
use crate::wait::Flag;

use super::dissemination::FabricDissemination;
use super::tail;
use super::tree::LocalTree;

/// The software barrier algorithms (more may come: match with a `_` arm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Algorithm {
    /// Pick by communicator size and wait policy (see [`Algorithm::resolve`]).
    Auto,
    /// Cumulative counter plus release flag.
    Central,
    /// ⌈log2 n⌉ rounds of pairwise flags.
    Dissemination,
    /// Pairwise tournament with a global release flag.
    Tournament,
    /// k-ary gather/release tree.
    Tree,
    /// k-ary gather into padded slots, one release flag.
    Gather,
}

/// Children per rank of the `gather` algorithm's tree unless `BARRIER_GATHER_RADIX` says
/// otherwise: a flat gather up to 17 ranks.
pub const DEFAULT_GATHER_RADIX: usize = 16;

/// With a core per rank, `auto` runs `gather` from this many ranks on (dissemination below):
/// at 9 ranks dissemination's rounds go from 3 to 4, and on a 16-core node (2026-11-27, two
/// runs) it went from 1.05-1.09x the floor at 8 ranks to 1.33-1.50x at 9, where gather was
/// 1.00-1.09x; see [`Algorithm::resolve`].
pub const GATHER_FROM: usize = 9;

impl Algorithm {
    /// Every concrete algorithm.
    pub const ALL: [Algorithm; 5] =
        [Algorithm::Central, Algorithm::Dissemination, Algorithm::Tournament, Algorithm::Tree, Algorithm::Gather];

    /// The parameter spelling.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Auto => "auto",
            Algorithm::Central => "central",
            Algorithm::Dissemination => "dissemination",
            Algorithm::Tournament => "tournament",
            Algorithm::Tree => "tree",
            Algorithm::Gather => "gather",
        }
    }

    /// Parses the parameter spelling.
    pub fn parse(text: &str) -> Option<Self> {
        std::iter::once(Algorithm::Auto).chain(Algorithm::ALL).find(|a| a.name().eq_ignore_ascii_case(text.trim()))
    }

    fn code(self) -> u64 {
        self as u64
    }

    fn from_code(code: u64) -> Self {
        match code {
            1 => Algorithm::Central,
            2 => Algorithm::Dissemination,
            3 => Algorithm::Tournament,
            4 => Algorithm::Tree,
            5 => Algorithm::Gather,
            _ => Algorithm::Auto,
        }
    }

    /// The `auto` choice for `n` ranks, from measurements (`docs/benchmark.md`; the reason
    /// in words is [`Algorithm::reason`], which `barrier info` prints):
    ///
    /// * ranks park (oversubscribed): **central**. One release flag means one futex wake
    ///   releases everyone; dissemination needs a wake per round per rank (8 ranks on 2 cores:
    ///   central ~9 us, dissemination ~15 us, `std::sync::Barrier` ~47 us).
    /// * ranks spin (a core each), fewer than [`GATHER_FROM`]: **dissemination**. At 2 ranks it
    ///   is one flag store and one wait, the same work as the floor, and its ⌈log2 n⌉ rounds run
    ///   in parallel on every rank.
    /// * ranks spin, [`GATHER_FROM`] or more: **gather**. The rounds grow with n; the gather's
    ///   two hand-overs do not, and on a 16-core node the raw flat gather with one release flag
    ///   was ahead of raw dissemination from 9 ranks on (the floor rows of `barrier bench`), as
    ///   were our own gather rows against our dissemination (1.00-1.12x the floor against
    ///   1.16-1.50x at 9 to 11 ranks).
    pub fn resolve(self, n: usize, parks: bool) -> Algorithm {
        match self {
            Algorithm::Auto if parks => Algorithm::Central,
            Algorithm::Auto if n >= GATHER_FROM => Algorithm::Gather,
            Algorithm::Auto => Algorithm::Dissemination,
            a => a,
        }
    }

    /// Why `auto` resolves as it does for `n` ranks (`barrier info`).
    pub fn reason(n: usize, parks: bool) -> String {
        if n < 2 {
            return "one rank: there is nobody to wait for".into();
        }
        match Algorithm::Auto.resolve(n, parks) {
            Algorithm::Central => "the ranks park (more ranks than cores): one release flag, one wake for all".into(),
            Algorithm::Gather => format!(
                "{n} ranks spin, {GATHER_FROM} or more: a gather and one release flag, which do not grow with the \
                 ranks as dissemination's rounds do"
            ),
            _ => format!(
                "{n} ranks spin, fewer than {GATHER_FROM}: dissemination's {} parallel rounds",
                crate::region::rounds(n)
            ),
        }
    }
}

/// `BARRIER_SW_TAIL_SPIN`: the default when unset, zero when turned off. Values above
/// [`tail::MAX_TAIL_SPIN`] are refused by the parameter check (`ParamKind::DurationAtMost`)
/// before any backend is asked, and capped here for callers that skipped it.
pub fn tail_spin(params: &crate::params::Params) -> Result<Duration, Error> {
    if params.get("BARRIER_SW_TAIL_SPIN").is_none() {
        return Ok(tail::DEFAULT_TAIL_SPIN);
    }
    Ok(params.duration("BARRIER_SW_TAIL_SPIN")?.unwrap_or(Duration::ZERO).min(tail::MAX_TAIL_SPIN))
}

/// Across nodes only put-based dissemination runs: every flag is written by one peer and read
/// by its owner, so a signal is one put into the owner's memory. (Central and tournament end in
/// one flag that every rank reads, which over a network is a remote read per rank and poll;
/// the tree's flags work with puts too, but the hierarchical backend is the tree for nodes.)
fn multi_node_algorithm(requested: Algorithm) -> Algorithm {
    match requested {
        Algorithm::Dissemination | Algorithm::Auto => Algorithm::Dissemination,
        other => {
            tracing::info!(
                requested = other.name(),
                "the communicator spans nodes: the software backend runs dissemination, its put-based algorithm"
            );
            Algorithm::Dissemination
        }
    }
}

/// Builds the flag barrier for a communicator (collective): rank 0's algorithm, tree arity and
/// tail spin win (`BARRIER_SW_ALGORITHM`, `BARRIER_TREE_ARITY`, `BARRIER_SW_TAIL_SPIN`), so
/// every rank runs the same algorithm the same way. The software backend runs it; an offload
/// module keeps one to fall back to after a device fault.
pub fn enable(ctx: &EnableContext<'_>) -> Result<SoftwareModule, Decline> {
    let params = ctx.query.params;
    let local_algo = params.get("BARRIER_SW_ALGORITHM").and_then(|a| Algorithm::parse(&a)).unwrap_or(Algorithm::Auto);
    let local_arity = params.parse::<u64>("BARRIER_TREE_ARITY", 4, "").unwrap_or(4).clamp(2, 64);
    // In nanoseconds (at most a millisecond: 20 bits), so that `500ns` is not rounded to 0.
    let local_tail = tail_spin(params).unwrap_or(tail::DEFAULT_TAIL_SPIN).as_nanos() as u64;
    let local_radix = params
        .parse::<u64>("BARRIER_GATHER_RADIX", DEFAULT_GATHER_RADIX as u64, "")
        .unwrap_or(DEFAULT_GATHER_RADIX as u64)
        .clamp(1, 64);
    // Rank 0's choices win, so that every rank runs the same algorithm the same way. (The tail
    // spin, in ns, is at most a millisecond: 20 bits from bit 16.)
    let agreed = ctx
        .broadcast(0, local_algo.code() | (local_arity << 8) | (local_tail << 16) | (local_radix << 40))
        .map_err(|e| Decline::new(e.to_string()))?;
    let n = ctx.query.size;
    let wakes = ctx.policy.wakes();
    let algo = Algorithm::from_code(agreed & 0xff).resolve(n, wakes);
    let arity = ((agreed >> 8) as u8 as usize).clamp(2, 64);
    let radix = ((agreed >> 40) as u8 as usize).clamp(1, 64);
    let arity = if algo == Algorithm::Gather { radix } else { arity };
    let mut module = SoftwareModule::new(ctx.region.clone(), ctx.query.rank, algo, arity, wakes);
    module.tail_limit = Duration::from_nanos((agreed >> 16) & 0xff_ffff);
    if algo == Algorithm::Central && tail::wanted(ctx) {
        module.tail = tail::TailSpin::new(ctx.region, ctx.query.rank, module.tail_limit);
    }
    if ctx.query.nodes > 1 {
        module.route_over_fabric(ctx)?;
    }
    Ok(module)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Working through `inbox` (dissemination rounds, tournament wins, tree children).
    Gather,
    /// Waiting for `down` (tournament release, tree parent).
    Release,
    /// Complete for this epoch.
    Done,
}

/// One rank's software barrier state on one communicator.
///
/// Every flag the rank touches is resolved once, at construction, into a [`Shared`] reference,
/// so the barrier path is loads and stores with no index arithmetic. The tree and the tournament
/// share one shape: wait for every flag in `inbox`, store `up` (if not the root), wait for
/// `down`, store every flag in `outbox`.
#[derive(Debug)]
pub struct SoftwareModule {
    algo: Algorithm,
    n: u64,
    wake: bool,
    phase: Phase,
    step: usize,
    /// Central: the epoch this rank last added to the counter.
    contributed: u64,
    /// Central: the cumulative arrival counter.
    counter: Option<Shared<AtomicU64>>,
    /// Central: the release flag.
    release: Option<Shared<Flag>>,
    /// Central, ranks that park, one node: when to spin for the release instead of yielding.
    tail: Option<Box<tail::TailSpin>>,
    /// The communicator's agreed `BARRIER_SW_TAIL_SPIN` (hardware modules use it too).
    pub(crate) tail_limit: Duration,
    /// Flags to wait for, in order.
    inbox: Vec<Shared<Flag>>,
    /// Dissemination: the partner's flag per round; tree/tournament: flags to release. A store
    /// within a node, a put through the transport across nodes.
    outbox: Vec<Signal>,
    /// Tree/tournament: the flag that reports this rank's subtree or loss upwards.
    up: Option<Signal>,
    /// Tree/tournament: the flag that releases this rank.
    down: Option<Shared<Flag>>,
    /// Across nodes: the transports the outbox goes through (boxed: the module is dispatched
    /// by value, and single-node communicators never have one).
    fabric: Option<Box<Fabric>>,
    /// A transport of the outbox needs this rank's progress calls to complete its puts.
    net_progress: bool,
    /// What [`Module::algorithm`] says instead of the algorithm's name (another backend runs
    /// this module for a communicator on one node).
    label: Option<String>,
}

impl SoftwareModule {
    pub(crate) fn new(region: Region, rank: usize, algo: Algorithm, arity: usize, wake: bool) -> Self {
        let n = region.size();
        let rounds = region.rounds();
        let mut m = SoftwareModule {
            algo,
            n: n as u64,
            wake,
            phase: Phase::Done,
            step: 0,
            contributed: 0,
            counter: None,
            release: None,
            tail: None,
            tail_limit: Duration::ZERO,
            inbox: Vec::new(),
            outbox: Vec::new(),
            up: None,
            down: None,
            fabric: None,
            net_progress: false,
            label: None,
        };
        let f = |flag: &Flag| region.shared_flag(flag);
        let store = |flag: &Flag| Signal::Store(region.shared_flag(flag));
        match algo {
            Algorithm::Central | Algorithm::Auto => {
                m.counter = Some(region.shared_counter(region.central_count()));
                m.release = Some(f(region.central_release()));
            }
            Algorithm::Dissemination => {
                for r in 0..rounds {
                    m.inbox.push(f(region.diss(rank, r)));
                    m.outbox.push(store(region.diss((rank + (1 << r)) % n, r)));
                }
            }
            Algorithm::Tournament => {
                for r in 0..rounds {
                    let span = 1usize << r;
                    if rank & (2 * span - 1) == 0 {
                        if rank + span < n {
                            m.inbox.push(f(region.tourn(rank, r)));
                        }
                    } else {
                        // Lowest set bit: this rank loses in round r to rank - 2^r.
                        m.up = Some(store(region.tourn(rank - span, r)));
                        break;
                    }
                }
                if m.up.is_some() {
                    m.down = Some(f(region.tourn_release()));
                } else {
                    m.outbox.push(store(region.tourn_release()));
                }
            }
            Algorithm::Tree => {
                let tree = LocalTree::new(n, arity);
                for c in tree.children(rank) {
                    m.inbox.push(f(&region.tree_up()[c]));
                    m.outbox.push(store(&region.tree_down()[c]));
                }
                if tree.parent(rank).is_some() {
                    m.up = Some(store(&region.tree_up()[rank]));
                    m.down = Some(f(&region.tree_down()[rank]));
                }
            }
            Algorithm::Gather => {
                // The slots of `super::tree`: up-slots, and rank 0's down-slot as the one
                // release flag (rank 0 has no parent to write it otherwise).
                let tree = LocalTree::new(n, arity);
                for c in tree.children(rank) {
                    m.inbox.push(f(&region.tree_up()[c]));
                }
                if tree.parent(rank).is_some() {
                    m.up = Some(store(&region.tree_up()[rank]));
                    m.down = Some(f(&region.tree_down()[0]));
                } else {
                    m.outbox.push(store(&region.tree_down()[0]));
                }
            }
        }
        m
    }

    /// A communicator that spans nodes: dissemination among all ranks, each round's partner
    /// flag reached through the transport the fabric ranks first for that partner (a store
    /// within a node, a put across nodes). Collective.
    fn route_over_fabric(&mut self, ctx: &EnableContext<'_>) -> Result<(), Decline> {
        let q = &ctx.query;
        let decline = |e: Error| Decline::new(e.to_string());
        self.algo = multi_node_algorithm(self.algo);
        let fabric = ctx.fabric();
        if !ctx.all_agree(fabric.is_ok()).map_err(decline)? {
            return Err(Decline::new(fabric.err().map_or_else(
                || "another rank could not set up its transports".into(),
                |e| format!("the transports between nodes: {e}"),
            )));
        }
        let fabric = fabric.map_err(decline)?;
        let everyone: Vec<usize> = (0..q.size).collect();
        let diss = FabricDissemination::enable(ctx, &fabric, &everyone)?.expect("every rank takes part");
        self.net_progress = diss.needs_progress();
        (self.inbox, self.outbox) = diss.into_parts();
        self.counter = None;
        self.release = None;
        self.up = None;
        self.down = None;
        self.fabric = Some(Box::new(fabric));
        Ok(())
    }

    /// Dissemination over a transport whose puts need this rank's help: the transports are
    /// progressed on every call, a wait asks to be called back every [`PROGRESS_SLICE`], and the
    /// barrier is complete only once this rank's puts are (a flush), so that no peer waits on
    /// a put this rank left behind.
    #[cold]
    fn progress_helping_the_network(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        let fabric = self.fabric.as_deref().expect("a fabric across nodes");
        fabric.progress();
        while self.step < self.inbox.len() {
            if !self.inbox[self.step].reached(epoch) {
                // The put this call just queued goes out now, not a slice later.
                fabric.progress();
                let flag = &self.inbox[self.step];
                return Ok(Poll::pending(flag, epoch).recheck(PROGRESS_SLICE));
            }
            self.step += 1;
            if let Some(next) = self.outbox.get(self.step) {
                next.signal(epoch, self.wake)?;
            }
        }
        fabric.flush()?;
        self.phase = Phase::Done;
        Ok(Poll::Ready)
    }
}

impl SoftwareModule {
    /// The module with `label(algorithm)` as what it reports for its algorithm.
    pub(crate) fn labelled(mut self, label: impl FnOnce(&str) -> String) -> Self {
        self.label = Some(label(self.algorithm()));
        self
    }
}

impl Module for SoftwareModule {
    fn algorithm(&self) -> &str {
        if let Some(label) = &self.label {
            return label;
        }
        if self.tail.is_some() {
            "central + tail spin"
        } else {
            self.algo.name()
        }
    }

    fn network_ops(&self) -> u64 {
        self.fabric.as_ref().map_or(0, |f| f.network_ops())
    }

    #[inline]
    fn arrive(&mut self, epoch: u64) -> Result<(), Error> {
        self.phase = Phase::Gather;
        self.step = 0;
        match self.algo {
            Algorithm::Central | Algorithm::Auto => {
                // Each rank adds up to its epoch (one per barrier in steady use): the counter is
                // the sum of the ranks' epochs, n * e exactly when all of them reached e, even for
                // a module that starts at a later epoch (the return after a hardware fault).
                let counter = self.counter.as_ref().expect("central counter");
                let add = epoch - self.contributed;
                self.contributed = epoch;
                let total = counter.fetch_add(add, Ordering::AcqRel) + add;
                let complete = total == self.n * epoch;
                if complete {
                    self.release.as_ref().expect("central release").signal(epoch, self.wake);
                }
                // After the release, so the completing rank's bookkeeping delays nobody.
                if let Some(tail) = self.tail.as_deref_mut() {
                    tail.arrived(epoch, complete);
                }
            }
            Algorithm::Dissemination => {
                if let Some(first) = self.outbox.first() {
                    first.signal(epoch, self.wake)?;
                }
            }
            // Tournament losers and tree and gather leaves report upwards without waiting.
            Algorithm::Tournament | Algorithm::Tree | Algorithm::Gather => {
                self.progress(epoch)?;
            }
        }
        Ok(())
    }

    /// Dissemination within a node is inline in the caller (the whole 2-rank barrier is one
    /// store and this one check); the other algorithms are a call away.
    #[inline(always)]
    fn progress(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        if self.phase == Phase::Done {
            return Ok(Poll::Ready);
        }
        if self.algo == Algorithm::Dissemination && !self.net_progress {
            while self.step < self.inbox.len() {
                if !self.inbox[self.step].reached(epoch) {
                    // After the last round there is nothing left to signal.
                    let last = self.step + 1 == self.inbox.len();
                    return Ok(Poll::wait_for(&self.inbox[self.step], epoch, last));
                }
                self.step += 1;
                if let Some(next) = self.outbox.get(self.step) {
                    next.signal(epoch, self.wake)?;
                }
            }
            self.phase = Phase::Done;
            return Ok(Poll::Ready);
        }
        self.progress_other(epoch)
    }
}

impl SoftwareModule {
    /// [`Module::progress`] for central, tournament, tree, gather and dissemination across nodes.
    #[inline(never)]
    fn progress_other(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        match self.algo {
            Algorithm::Central | Algorithm::Auto => {
                let flag = self.release.as_deref().expect("central release");
                if flag.reached(epoch) {
                    self.phase = Phase::Done;
                    return Ok(Poll::Ready);
                }
                let spin = self.tail.as_deref().and_then(|t| t.spin());
                let park = self.tail.as_deref().is_some_and(|t| t.escaping());
                Ok(Poll::Pending { flag, target: epoch, recheck: None, last: true, spin, park })
            }
            Algorithm::Dissemination => self.progress_helping_the_network(epoch),
            Algorithm::Tournament | Algorithm::Tree | Algorithm::Gather => {
                if self.phase == Phase::Gather {
                    while self.step < self.inbox.len() {
                        if !self.inbox[self.step].reached(epoch) {
                            let flag = &self.inbox[self.step];
                            return Ok(Poll::pending(flag, epoch));
                        }
                        self.step += 1;
                    }
                    if let Some(up) = &self.up {
                        up.signal(epoch, self.wake)?;
                    }
                    self.phase = Phase::Release;
                }
                if let Some(down) = self.down.as_deref() {
                    if !down.reached(epoch) {
                        let last = self.outbox.is_empty();
                        return Ok(Poll::wait_for(down, epoch, last));
                    }
                }
                for flag in &self.outbox {
                    flag.signal(epoch, self.wake)?;
                }
                self.phase = Phase::Done;
                Ok(Poll::Ready)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_follows_the_rank_count_and_the_wait_policy() {
        for n in 1..GATHER_FROM {
            assert_eq!(Algorithm::Auto.resolve(n, false), Algorithm::Dissemination, "{n} spinning ranks");
        }
        for n in [GATHER_FROM, 16, 64, 1000] {
            assert_eq!(Algorithm::Auto.resolve(n, false), Algorithm::Gather, "{n} spinning ranks");
        }
        for n in [2, 8, GATHER_FROM, 64] {
            assert_eq!(Algorithm::Auto.resolve(n, true), Algorithm::Central, "{n} parked ranks");
            assert!(Algorithm::reason(n, true).contains("park"));
        }
        assert!(Algorithm::reason(4, false).contains("2 parallel rounds"));
        assert!(Algorithm::reason(16, false).contains("gather"));
        // A choice that is set stays set.
        assert_eq!(Algorithm::Tree.resolve(16, false), Algorithm::Tree);
    }

    #[test]
    fn the_tail_spin_setting_is_capped_defaulted_and_turned_off() {
        let with = |v: &str| tail_spin(&crate::params::Params::defaults_only().set("BARRIER_SW_TAIL_SPIN", v)).unwrap();
        assert_eq!(tail_spin(&crate::params::Params::defaults_only()).unwrap(), tail::DEFAULT_TAIL_SPIN);
        assert_eq!(with("1s"), tail::MAX_TAIL_SPIN);
        assert_eq!(with("0"), Duration::ZERO);
        assert_eq!(with("20us"), Duration::from_micros(20));
    }
}
