//! Communicators: a group of ranks with one barrier module.
//!
//! A [`Communicator`] is one rank's handle on a group. It is `Send` (move it to the thread that
//! uses it) but not `Sync`: like an MPI communicator, one thread drives it at a time. Creating,
//! splitting and duplicating communicators are **collective**: every member calls them, in the
//! same order.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Engine, Poll, QueryContext};
use crate::coll::Ctrl;
use crate::error::{Error, Result};
use crate::params::Params;
use crate::region::Region;
use crate::selector::{self, Selection};
use crate::shm::{Segment, Shared};
use crate::wait::{Flag, WaitConfig, WaitError, WaitPolicy};

/// The name of the backend a communicator uses. Compares equal to its `&str` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackendName(pub &'static str);

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl PartialEq<&str> for BackendName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<str> for BackendName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

/// The color argument of [`Communicator::split`]: a value, or `Undefined` to join no group
/// (MPI_UNDEFINED).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// Ranks with the same value end up in the same communicator.
    Value(u32),
    /// This rank gets no communicator.
    Undefined,
}

impl From<u32> for Color {
    fn from(v: u32) -> Self {
        Color::Value(v)
    }
}

const UNDEFINED_COLOR: u64 = u64::MAX;
const NO_REGION: u64 = u64::MAX;

const USABLE: u8 = 0;
const PENDING: u8 = 1;
const BROKEN: u8 = 2;

/// One rank's handle on a communicator.
pub struct Communicator {
    seg: Arc<Segment>,
    region: Region,
    rank: usize,
    /// World rank of each member, indexed by communicator rank.
    members: Vec<usize>,
    params: Params,
    wait: WaitConfig,
    epoch: Cell<u64>,
    ctrl_epoch: Cell<u64>,
    engine: RefCell<Engine>,
    arrival: Shared<Flag>,
    selection: Selection,
    /// USABLE, PENDING (an ibarrier is outstanding) or BROKEN (see `broken`).
    state: Cell<u8>,
    broken: RefCell<Option<String>>,
}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("size", &self.members.len())
            .field("backend", &self.selection.backend)
            .field("algorithm", &self.selection.algorithm)
            .field("epoch", &self.epoch.get())
            .finish()
    }
}

impl Communicator {
    /// Builds a communicator over an initialized region (collective over its members).
    pub(crate) fn create(
        seg: Arc<Segment>,
        region: Region,
        rank: usize,
        members: Vec<usize>,
        params: Params,
    ) -> Result<Self> {
        let size = members.len();
        let ctrl_epoch = Cell::new(0);
        let local_timeout = params.duration("BARRIER_TIMEOUT")?;
        let ctrl = Ctrl::new(&region, rank, &ctrl_epoch, local_timeout);

        // Rank 0's wait settings win: signallers and waiters must agree on whether anyone parks.
        let shape = seg.shape();
        let local_policy = match params.get("BARRIER_WAIT_POLICY").as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("auto") => WaitPolicy::auto(shape.ranks_on_machine, shape.cores),
            Some("spin") => WaitPolicy::Spin,
            Some("park") => WaitPolicy::Park,
            Some(other) => {
                return Err(Error::InvalidParam {
                    name: "BARRIER_WAIT_POLICY".into(),
                    value: other.into(),
                    expected: "auto, spin or park".into(),
                })
            }
        };
        let default_spin = if local_policy == WaitPolicy::Spin { 2000 } else { 64 };
        let spin = params.parse::<u32>("BARRIER_SPIN_COUNT", default_spin, "a non-negative integer")?;
        let yields = params.parse::<u32>("BARRIER_YIELD_COUNT", 4, "a non-negative integer")?;
        let timeout_us = local_timeout.map_or(0, |d| d.as_micros().min(u64::MAX as u128) as u64);
        let agreed = ctrl.allgather(&[local_policy.code(), spin as u64, yields as u64, timeout_us])?[0].clone();
        let policy = WaitPolicy::from_code(agreed[0]);
        let wait = WaitConfig {
            policy,
            spin: agreed[1] as u32,
            yields: agreed[2] as u32,
            timeout: (agreed[3] > 0).then(|| Duration::from_micros(agreed[3])),
        };

        let nodes = distinct_nodes(&members, shape.world_size, shape.nodes);
        let (engine, selection) = selector::select(selector::SelectInput {
            query: QueryContext {
                rank,
                size,
                job: shape,
                nodes,
                node: node_of(members[rank], shape.world_size, shape.nodes),
                params: &params,
            },
            policy,
            ctrl: &ctrl,
            region: &region,
        })?;

        let arrival = region.shared_flag(&region.arrivals()[rank]);
        Ok(Communicator {
            arrival,
            seg,
            region,
            rank,
            members,
            params,
            wait,
            epoch: Cell::new(0),
            ctrl_epoch,
            engine: RefCell::new(engine),
            selection,
            state: Cell::new(USABLE),
            broken: RefCell::new(None),
        })
    }

    /// The parameters communicators split from this one are created with.
    pub(crate) fn set_params(&mut self, params: Params) {
        self.params = params;
    }

    fn ctrl(&self) -> Ctrl<'_> {
        Ctrl::new(&self.region, self.rank, &self.ctrl_epoch, self.wait.timeout)
    }

    /// This rank's number in the communicator, `0..size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// This rank's number in the world.
    pub fn world_rank(&self) -> usize {
        self.members[self.rank]
    }

    /// The backend in use, e.g. `dissemination`.
    pub fn backend(&self) -> BackendName {
        BackendName(self.selection.backend)
    }

    /// The algorithm or mode of the backend in use, e.g. `central`.
    pub fn algorithm(&self) -> String {
        self.engine.borrow().module().algorithm().to_string()
    }

    /// How the backend was chosen: every backend with its outcome.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// The agreed wait policy.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.wait.policy
    }

    /// Barriers completed (or started) on this communicator: the current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch.get()
    }

    /// The node this rank runs on (simulated nodes with `barrier run --nodes M`).
    pub fn node(&self) -> usize {
        let s = self.seg.shape();
        node_of(self.world_rank(), s.world_size, s.nodes)
    }

    /// Number of distinct nodes among the members.
    pub fn num_nodes(&self) -> usize {
        let s = self.seg.shape();
        distinct_nodes(&self.members, s.world_size, s.nodes)
    }

    /// This rank's index among the members on its node.
    pub fn local_rank(&self) -> usize {
        let s = self.seg.shape();
        let me = self.node();
        self.members[..self.rank].iter().filter(|&&w| node_of(w, s.world_size, s.nodes) == me).count()
    }

    /// Members on this rank's node.
    pub fn local_size(&self) -> usize {
        let s = self.seg.shape();
        let me = self.node();
        self.members.iter().filter(|&&w| node_of(w, s.world_size, s.nodes) == me).count()
    }

    #[inline(always)]
    fn check_usable(&self) -> Result<()> {
        if self.state.get() == USABLE {
            Ok(())
        } else {
            Err(self.unusable())
        }
    }

    #[cold]
    fn unusable(&self) -> Error {
        match self.broken.borrow().as_ref() {
            Some(why) => Error::Broken(why.clone()),
            None => Error::RequestPending,
        }
    }

    #[cold]
    fn fail(&self, err: Error) -> Error {
        *self.broken.borrow_mut() = Some(err.to_string());
        self.state.set(BROKEN);
        err
    }

    fn set_pending(&self, pending: bool) {
        if self.state.get() != BROKEN {
            self.state.set(if pending { PENDING } else { USABLE });
        }
    }

    fn wait_error(&self, w: WaitError, epoch: u64) -> Error {
        self.fail(match w {
            WaitError::Aborted(r) => Error::Aborted { failed_rank: r },
            WaitError::Recheck => Error::Broken("a wait asked for a recheck without an interval".into()),
            WaitError::Timeout(waited) => Error::Timeout {
                rank: self.rank,
                size: self.size(),
                epoch,
                waited,
                missing: self.region.missing_at(epoch),
            },
        })
    }

    #[inline(always)]
    fn start(&self) -> Result<u64> {
        self.check_usable()?;
        let epoch = self.epoch.get() + 1;
        self.epoch.set(epoch);
        self.engine.borrow_mut().arrive(epoch).map_err(|e| self.fail(e))?;
        Ok(epoch)
    }

    #[inline(always)]
    fn finish(&self, epoch: u64) -> Result<()> {
        self.finish_with(&mut self.engine.borrow_mut(), epoch)
    }

    #[inline(always)]
    fn finish_with(&self, engine: &mut Engine, epoch: u64) -> Result<()> {
        // Time already spent in earlier recheck slices of this barrier (hardware modules).
        let mut waited = Duration::ZERO;
        loop {
            match engine.progress(epoch) {
                Ok(Poll::Ready) => return Ok(()),
                Ok(Poll::Pending { flag, target, recheck: None }) => self
                    .wait
                    .wait(flag, target, &*self.seg, Some((&self.arrival, epoch)))
                    .map_err(|w| self.wait_error(w, epoch))?,
                Ok(Poll::Pending { flag, target, recheck: Some(slice) }) => {
                    let budget =
                        WaitConfig { timeout: self.wait.timeout.map(|t| t.saturating_sub(waited)), ..self.wait };
                    let started = std::time::Instant::now();
                    match budget.wait_or_recheck(flag, target, &*self.seg, Some((&self.arrival, epoch)), Some(slice)) {
                        Ok(()) => {}
                        Err(WaitError::Recheck) => waited += started.elapsed(),
                        Err(WaitError::Timeout(d)) => {
                            return Err(self.wait_error(WaitError::Timeout(waited + d), epoch))
                        }
                        Err(w) => return Err(self.wait_error(w, epoch)),
                    }
                }
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// Blocks until every rank of the communicator has called `barrier()` as many times as this
    /// rank. Everything a rank wrote before the call is visible to every rank after it returns.
    ///
    /// Errors: a timeout (`BARRIER_TIMEOUT`) naming the ranks that have not arrived, an abort
    /// because another rank died, or a pending `ibarrier()`. After a timeout or abort the
    /// communicator is broken and every later call fails.
    #[inline]
    pub fn barrier(&self) -> Result<()> {
        self.check_usable()?;
        let epoch = self.epoch.get() + 1;
        self.epoch.set(epoch);
        let mut engine = self.engine.borrow_mut();
        if let Err(e) = engine.arrive(epoch) {
            return Err(self.fail(e));
        }
        self.finish_with(&mut engine, epoch)
    }

    /// Starts a barrier and returns at once (split phase): this rank's arrival is announced now;
    /// [`Request::test`] or [`Request::wait`] completes it later. Only one request may be
    /// pending per communicator.
    pub fn ibarrier(&self) -> Result<Request<'_>> {
        let epoch = self.start()?;
        // A request may be tested for ever without waiting: record the arrival now.
        self.arrival.raise(epoch, false);
        self.set_pending(true);
        let started = self.wait.timeout.map(|_| std::time::Instant::now());
        Ok(Request { comm: self, epoch, done: false, started })
    }

    /// Splits into disjoint communicators, one per color, ordered by `key` then by rank
    /// (MPI_Comm_split). Collective; returns `None` for [`Color::Undefined`].
    pub fn split(&self, color: impl Into<Color>, key: i32) -> Result<Option<Communicator>> {
        self.check_usable()?;
        let color = color.into();
        let code = match color {
            Color::Value(v) => v as u64,
            Color::Undefined => UNDEFINED_COLOR,
        };
        let ctrl = self.ctrl();
        let all = ctrl.allgather(&[code, key as i64 as u64])?;
        let mut group: Vec<usize> =
            (0..self.size()).filter(|&r| all[r][0] == code && code != UNDEFINED_COLOR).collect();
        group.sort_by_key(|&r| (all[r][1] as i64, r));
        // The group's first member (in parent order) creates the region and tells the others.
        let leader = group.iter().copied().min();
        let mut offer = NO_REGION;
        let mut alloc_err = None;
        if leader == Some(self.rank) {
            match Region::create(&self.seg, group.len()) {
                Ok(r) => offer = r.base() as u64,
                Err(e) => alloc_err = Some(e),
            }
        }
        let offers = ctrl.allgather(&[offer])?;

        let Some(leader) = leader else {
            return Ok(None);
        };
        if let Some(e) = alloc_err {
            return Err(e);
        }
        let base = offers[leader][0];
        if base == NO_REGION {
            return Err(Error::SegmentFull { needed: crate::region::RegionLayout::new(group.len()).total, free: 0 });
        }
        let region = Region::attach(&self.seg, base as usize, group.len())?;
        let new_rank = group.iter().position(|&r| r == self.rank).expect("member of own group");
        let members = group.iter().map(|&r| self.members[r]).collect();
        Communicator::create(self.seg.clone(), region, new_rank, members, self.params.clone()).map(Some)
    }

    /// A new communicator with the same members and ranks (collective).
    pub fn dup(&self) -> Result<Communicator> {
        Ok(self.split(0u32, self.rank as i32)?.expect("every rank has color 0"))
    }

    /// Allocates `len` shared 64-bit words that every member can read and write (collective),
    /// like `MPI_Win_allocate_shared`. Starts zeroed.
    pub fn shared_window(&self, len: usize) -> Result<SharedWindow> {
        self.check_usable()?;
        let ctrl = self.ctrl();
        let mut offer = NO_REGION;
        let mut err = None;
        if self.rank == 0 {
            match self.seg.alloc(len.max(1) * 8) {
                Ok(off) => offer = off as u64,
                Err(e) => err = Some(e),
            }
        }
        let offers = ctrl.allgather(&[offer])?;
        if let Some(e) = err {
            return Err(e);
        }
        if offers[0][0] == NO_REGION {
            return Err(Error::SegmentFull { needed: len * 8, free: 0 });
        }
        Ok(SharedWindow { seg: self.seg.clone(), offset: offers[0][0] as usize, len })
    }
}

/// A pending split-phase barrier. Dropping an incomplete request waits for it.
#[derive(Debug)]
pub struct Request<'c> {
    comm: &'c Communicator,
    epoch: u64,
    done: bool,
    /// When the request started, if a timeout applies.
    started: Option<std::time::Instant>,
}

impl Request<'_> {
    /// The barrier epoch this request completes.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Makes progress; `Ok(true)` once every rank has arrived. Never blocks. Once the request
    /// has been pending longer than `BARRIER_TIMEOUT`, returns the timeout error naming the
    /// ranks that have not arrived (polling for ever would otherwise hang silently).
    pub fn test(&mut self) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let mut engine = self.comm.engine.borrow_mut();
        match engine.progress(self.epoch) {
            Ok(Poll::Ready) => {
                self.done = true;
                self.comm.set_pending(false);
                Ok(true)
            }
            Ok(Poll::Pending { .. }) => {
                drop(engine);
                match (self.started, self.comm.wait.timeout) {
                    (Some(t0), Some(limit)) if t0.elapsed() >= limit => {
                        self.done = true;
                        self.comm.set_pending(false);
                        Err(self.comm.wait_error(WaitError::Timeout(t0.elapsed()), self.epoch))
                    }
                    _ => Ok(false),
                }
            }
            Err(e) => {
                self.done = true;
                drop(engine);
                self.comm.set_pending(false);
                Err(self.comm.fail(e))
            }
        }
    }

    /// Blocks until the barrier completes.
    pub fn wait(mut self) -> Result<()> {
        self.complete()
    }

    fn complete(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        // `finish` must not see PENDING: clear it first (it only waits and progresses).
        self.comm.set_pending(false);
        self.comm.finish(self.epoch)
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = self.complete() {
                tracing::warn!(error = %e, "ibarrier request dropped and its completion failed");
            }
        }
    }
}

/// Shared 64-bit words visible to every member of a communicator.
#[derive(Debug, Clone)]
pub struct SharedWindow {
    seg: Arc<Segment>,
    offset: usize,
    len: usize,
}

impl SharedWindow {
    /// The words.
    pub fn words(&self) -> &[AtomicU64] {
        self.seg.slice(self.offset, self.len)
    }
}

pub(crate) fn node_of(world_rank: usize, world_size: usize, nodes: usize) -> usize {
    let nodes = nodes.clamp(1, world_size.max(1));
    world_rank * nodes / world_size.max(1)
}

fn distinct_nodes(members: &[usize], world_size: usize, nodes: usize) -> usize {
    let mut ns: Vec<usize> = members.iter().map(|&w| node_of(w, world_size, nodes)).collect();
    ns.sort_unstable();
    ns.dedup();
    ns.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_contiguous_blocks() {
        let nodes: Vec<usize> = (0..8).map(|r| node_of(r, 8, 3)).collect();
        assert_eq!(nodes, vec![0, 0, 0, 1, 1, 1, 2, 2]);
        assert_eq!(distinct_nodes(&[0, 1, 2, 3, 4, 5, 6, 7], 8, 3), 3);
        assert_eq!(node_of(5, 8, 1), 0);
        assert_eq!(node_of(5, 8, 100), 5, "more nodes than ranks: one rank per node");
    }
}
