//! Communicators: a group of ranks with one barrier module.
//!
//! A [`Communicator`] is one rank's handle on a group. It is `Send` (move it to the thread that
//! uses it) but not `Sync`: like an MPI communicator, one thread drives it at a time. Creating,
//! splitting and duplicating communicators are **collective**: every member calls them, in the
//! same order.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Poll, QueryContext};
use crate::engine::Engine;
use crate::coll::Ctrl;
use crate::error::{Error, Result};
use crate::params::Params;
use crate::region::Region;
use crate::selector::{self, Selection};
use crate::shm::{Segment, Shared};
use crate::wait::{Flag, WaitConfig, WaitError, WaitPolicy, Watch};
use crate::watch::{LazyWatch, Need, PeerWatch};

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
/// (MPI_UNDEFINED). Any unsigned integer converts, so `split(rank % 3, rank)` needs no casts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// Ranks with the same value end up in the same communicator.
    Value(u64),
    /// This rank gets no communicator.
    Undefined,
}

macro_rules! color_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Color {
            fn from(v: $t) -> Self {
                Color::Value(v as u64)
            }
        }
    )*};
}
color_from!(u8, u16, u32, u64, usize);

/// The key argument of [`Communicator::split`]: ranks of a new communicator are ordered by key,
/// then by their rank in the old one. Any integer converts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key(pub i64);

macro_rules! key_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Key {
            fn from(v: $t) -> Self {
                Key(i64::try_from(v).unwrap_or(i64::MAX))
            }
        }
    )*};
}
key_from!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

const NO_REGION: u64 = u64::MAX;
/// No invalid parameter (in the settings exchange).
const NO_PARAM: u64 = u64::MAX;

fn micros(d: Option<Duration>) -> u64 {
    d.map_or(0, |d| d.as_micros().clamp(1, u64::MAX as u128) as u64)
}

/// This rank's own reading of the settings that must match across ranks. It never fails:
/// a bad value is reported through `registry::check_all` and agreed; here it reads as the default.
struct LocalSettings {
    policy: WaitPolicy,
    spin: u32,
    yields: u32,
    timeout: Option<Duration>,
    stall: Option<Duration>,
}


impl LocalSettings {
    fn load(params: &Params, shape: crate::shm::JobShape) -> Self {
        let policy = match params.get("BARRIER_WAIT_POLICY").map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            Some("spin") => WaitPolicy::Spin,
            Some("park") => WaitPolicy::Park,
            _ => WaitPolicy::auto(shape.ranks_on_machine, shape.cores),
        };
        // When ranks outnumber cores, a spinning waiter holds a core that the rank it waits for
        // needs (PAUSE is ~140 cycles on recent x86): waiters go straight to yielding, and park
        // only after many yields (a futex wake costs 15-20 us on the VM measured, a yield
        // hand-off about one). Measured on 2 cores: 8 ranks 12.0 -> 8.4 us, 4 ranks 4.0 -> 2.5 us.
        let default_spin = if policy == WaitPolicy::Spin { 2000 } else { 0 };
        let default_yields = if policy == WaitPolicy::Spin { 4 } else { 256 };
        LocalSettings {
            policy,
            spin: params.parse::<u32>("BARRIER_SPIN_COUNT", default_spin, "").unwrap_or(default_spin),
            yields: params.parse::<u32>("BARRIER_YIELD_COUNT", default_yields, "").unwrap_or(default_yields),
            timeout: params.duration("BARRIER_TIMEOUT").unwrap_or(None),
            stall: params.stall_report(),
        }
    }
}

const USABLE: u8 = 0;
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
    /// Report a wait that lasts this long (BARRIER_STALL_REPORT).
    stall: Option<Duration>,
    /// The last barrier started (by `barrier()` or `ibarrier()`): its epoch.
    epoch: Cell<u64>,
    /// The last barrier handed to the module (`arrive`): at most one is in flight.
    armed: Cell<u64>,
    /// The last barrier completed. Barriers complete in order: `done <= armed <= epoch`.
    done: Cell<u64>,
    /// When the barrier in flight was handed to the module by a split-phase call (only kept
    /// when a timeout applies): a polled request times out from then, not from when it was
    /// queued behind earlier ones.
    armed_at: Cell<Option<std::time::Instant>>,
    ctrl_epoch: Cell<u64>,
    engine: RefCell<Engine>,
    arrival: Shared<Flag>,
    selection: Selection,
    /// USABLE or BROKEN (see `broken`).
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
    /// Builds a communicator over an initialized region (collective over its members). If it
    /// fails, this rank is recorded as departed from the region, so that members still waiting
    /// in its creation learn that this rank will not come.
    pub(crate) fn create(
        seg: Arc<Segment>,
        region: Region,
        rank: usize,
        members: Vec<usize>,
        params: Params,
    ) -> Result<Self> {
        let fallback = region.clone();
        Self::build(seg, region, rank, members, params).inspect_err(|_| fallback.depart(rank, 0, true))
    }

    fn build(seg: Arc<Segment>, region: Region, rank: usize, members: Vec<usize>, params: Params) -> Result<Self> {
        let size = members.len();
        let ctrl_epoch = Cell::new(0);
        let shape = seg.shape();

        // Every setting is checked before the first collective, but the verdict is agreed: a
        // rank with a bad value takes part in the exchange and everybody fails together (a rank
        // that returned early would leave the others waiting in the exchange for ever). Values
        // that must match (wait policy, spin counts, timeout, stall report) are rank 0's.
        let checked = crate::registry::check_all(&params);
        let local = LocalSettings::load(&params, shape);
        let ctrl = Ctrl::new(&region, rank, &members, &ctrl_epoch, local.timeout, local.stall);
        let bad = checked.as_ref().err().map_or(NO_PARAM, |b| b.0 as u64);
        let all = ctrl.allgather(&[
            bad,
            local.policy.code(),
            local.spin as u64,
            local.yields as u64,
            micros(local.timeout),
            micros(local.stall),
        ])?;
        if let Err(bad) = checked {
            return Err(bad.1);
        }
        if let Some((r, w)) = all.iter().enumerate().find(|(_, w)| w[0] != NO_PARAM) {
            let name = crate::registry::all_params().get(w[0] as usize).map_or_else(String::new, |p| p.name.clone());
            return Err(Error::PeerInvalidParam { world_rank: members[r], name });
        }
        let agreed = &all[0];
        let policy = WaitPolicy::from_code(agreed[1]);
        let wait = WaitConfig {
            policy,
            spin: agreed[2] as u32,
            yields: agreed[3] as u32,
            timeout: (agreed[4] > 0).then(|| Duration::from_micros(agreed[4])),
            progress: seg.progress(),
        };
        let stall = (agreed[5] > 0).then(|| Duration::from_micros(agreed[5]));
        let ctrl = Ctrl::new(&region, rank, &members, &ctrl_epoch, wait.timeout, stall);

        let nodes = distinct_nodes(&members, shape.world_size, shape.nodes);
        let node_of_member: Vec<usize> = members.iter().map(|&w| node_of(w, shape.world_size, shape.nodes)).collect();
        let (engine, selection) = selector::select(selector::SelectInput {
            query: QueryContext {
                rank,
                size,
                job: shape,
                nodes,
                node: node_of_member[rank],
                members: &members,
                node_of: &node_of_member,
                one_process: {
                    let me = u64::from(std::process::id());
                    members.iter().all(|&w| region.segment().joined_pid(w) == Some(me))
                },
                params: &params,
            },
            members: &members,
            policy,
            ctrl: &ctrl,
            region: &region,
        })?;

        let arrival = region.shared_flag(&region.arrivals()[rank]);
        seg.communicator_made(members[rank]);
        Ok(Communicator {
            arrival,
            seg,
            region,
            rank,
            members,
            params,
            wait,
            stall,
            epoch: Cell::new(0),
            armed: Cell::new(0),
            done: Cell::new(0),
            armed_at: Cell::new(None),
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

    /// The control plane, for the collective call `call` (named in errors and stall reports).
    fn ctrl(&self, call: &'static str) -> Ctrl<'_> {
        Ctrl::new(&self.region, self.rank, &self.members, &self.ctrl_epoch, self.wait.timeout, self.stall).call(call)
    }

    /// A failed control-plane call: this rank's control epoch has moved on without the others
    /// (or they are gone), so the communicator can never run another collective correctly.
    #[cold]
    fn control_failed(&self, err: Error) -> Error {
        self.fail(err)
    }

    fn watch(&self, epoch: u64) -> PeerWatch<'_> {
        PeerWatch::new(&self.region, &self.members, self.rank, Need::Barrier(epoch), self.stall)
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

    /// Operations this rank has sent across the network for this communicator's barriers so
    /// far: transport puts and atomics to other nodes, and arrival messages to a barrier device.
    /// With the hierarchical backend only node roots send any. `barrier bench` divides it by
    /// the barriers run.
    pub fn network_ops(&self) -> u64 {
        self.engine.borrow().module().network_ops()
    }

    /// The transports this rank would use to reach each member, highest exclusivity first:
    /// self, shared memory within its node, the simulated network across simulated nodes.
    pub fn transport_ranking(&self) -> Vec<crate::transport::Route> {
        let s = self.seg.shape();
        let peer = |w: usize| crate::transport::Peer { world_rank: w, node: node_of(w, s.world_size, s.nodes) };
        let net = crate::backend::net_model(&self.params).unwrap_or_default();
        let fabric =
            crate::transport::segment::local_fabric(&self.seg, peer(self.world_rank()), self.wait.policy.wakes(), net);
        fabric.ranking(&self.members.iter().map(|&w| peer(w)).collect::<Vec<_>>())
    }

    /// How the backend was chosen: every backend with its outcome.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// Bytes of the job's shared segment in use now, and its size (`BARRIER_SHM_POOL_BYTES`
    /// plus the world's share). Freed communicators and windows come back.
    pub fn segment_usage(&self) -> (usize, usize) {
        self.seg.usage()
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
        Error::Broken(self.broken.borrow().clone().unwrap_or_default())
    }

    #[cold]
    fn fail(&self, err: Error) -> Error {
        *self.broken.borrow_mut() = Some(err.to_string());
        self.state.set(BROKEN);
        err
    }

    #[cold]
    fn wait_error(&self, watch: &PeerWatch<'_>, w: WaitError) -> Error {
        self.fail(watch.error(w))
    }

    fn note_armed(&self) {
        if self.wait.timeout.is_some() {
            self.armed_at.set(Some(std::time::Instant::now()));
        }
    }

    /// Completes barriers in order up to `target`, handing each to the module when the one
    /// before it is complete. Blocks if `block`; otherwise returns `Ok(false)` at the first
    /// barrier that is not complete yet.
    fn drive(&self, target: u64, block: bool) -> Result<bool> {
        while self.done.get() < target {
            self.check_usable()?;
            let next = self.done.get() + 1;
            let mut engine = self.engine.borrow_mut();
            if self.armed.get() < next {
                // The arrival record goes with the hand-over to the module (see `barrier`).
                self.arrival.signal(next, self.wait.policy.wakes());
                engine.arrive(next).map_err(|e| self.fail(e))?;
                self.armed.set(next);
                self.note_armed();
            }
            if block {
                self.finish_with(&mut engine, next)?;
            } else {
                match engine.progress(next) {
                    Ok(Poll::Ready) => {}
                    Ok(Poll::Pending { .. }) => return Ok(false),
                    Err(e) => return Err(self.fail(e)),
                }
            }
            self.done.set(next);
        }
        Ok(true)
    }

    /// Progresses the module until the barrier at `epoch` is complete for this rank. Inline:
    /// only the common end of a spinning barrier (the module's last wait, reached within the
    /// inline checks), so the caller stays small; everything else is [`Self::finish_waiting`].
    #[inline(always)]
    fn finish_with(&self, engine: &mut Engine, epoch: u64) -> Result<()> {
        match engine.progress(epoch) {
            Ok(Poll::Ready) => return Ok(()),
            // (A recheck interval asks for calls while a wait goes on; a few checks are not one.)
            Ok(Poll::Pending { flag, target, last: true, .. }) if self.wait.reached_soon(flag, target) => return Ok(()),
            Err(e) => return Err(self.fail(e)),
            Ok(Poll::Pending { .. }) => {}
        }
        self.finish_waiting(engine, epoch)
    }

    /// [`Self::finish_with`] beyond its inline checks: waits with the policy, the watch (built
    /// only here) and the timeout, and calls the module again after each wait.
    #[inline(never)]
    fn finish_waiting(&self, engine: &mut Engine, epoch: u64) -> Result<()> {
        let watch = LazyWatch::new(|| self.watch(epoch));
        // When this barrier's wait started its clock, kept across recheck slices (hardware
        // modules), so that the timeout counts them all.
        let mut clock = None;
        // A module's tail spin is tried once per barrier (Poll::Pending's `spin`).
        let mut spin_left = true;
        let mut spin_once = |flag: &Flag, target: u64, spin: Option<Duration>| {
            let limit = spin.filter(|_| std::mem::take(&mut spin_left));
            limit.is_some_and(|limit| self.wait.spin_for(flag, target, limit))
        };
        loop {
            match engine.progress(epoch) {
                Ok(Poll::Ready) => return Ok(()),
                Ok(Poll::Pending { flag, target, recheck: None, last, spin }) => {
                    if !spin_once(flag, target, spin) {
                        self.wait.wait(flag, target, &watch).map_err(|w| self.wait_error(watch.get(), w))?;
                    }
                    if last {
                        return Ok(());
                    }
                }
                Ok(Poll::Pending { flag, target, recheck: Some(slice), last, spin }) => {
                    // Most hardware waits end spinning or after a yield or two: no clock read
                    // then (it would delay the return of a rank whose release lands during
                    // the read). What comes before the first slice starts its clock (the spin
                    // phase, a tail spin of at most 1 ms, eight yields) is not counted against
                    // the timeout; from then on every slice is, through the shared `clock`.
                    // (A zero slice asks to be polled again at once: the flag may not be
                    // the one that moves, so only the inline checks.)
                    let reached = if slice.is_zero() {
                        self.wait.reached_soon(flag, target)
                    } else {
                        self.wait.spun_until(flag, target) || spin_once(flag, target, spin)
                    };
                    if !reached {
                        let spun = WaitConfig { spin: 0, ..self.wait };
                        match spun.wait_or_recheck(flag, target, &watch, Some(slice), &mut clock) {
                            Ok(()) => {}
                            Err(WaitError::Recheck) => continue,
                            Err(w) => return Err(self.wait_error(watch.get(), w)),
                        }
                    }
                    if last {
                        return Ok(());
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
    /// because another rank died, a rank that left. After any of them the communicator is
    /// broken and every later call fails. With `ibarrier()` requests outstanding, they complete
    /// first (barriers complete in the order they were started).
    #[inline]
    pub fn barrier(&self) -> Result<()> {
        self.check_usable()?;
        let epoch = self.epoch.get() + 1;
        self.epoch.set(epoch);
        if self.done.get() + 1 != epoch {
            return self.drive(epoch, true).map(|_| ());
        }
        // This rank's record that it handed barrier `epoch` to the module (one store to a line
        // only it writes; others read it to explain a wait (who has not arrived, whether a rank
        // that is gone had done its part), and the hardware module's flat fallback waits on it:
        // that module wakes its parked waiters when it takes the arrival). Made when the module
        // gets the barrier, not when it is called: a barrier queued behind outstanding
        // `ibarrier`s has done nothing for the others yet, and a rank that stops there must look
        // missing (to stall reports and to the check for ranks that exited).
        self.arrival.signal(epoch, false);
        let mut engine = self.engine.borrow_mut();
        if let Err(e) = engine.arrive(epoch) {
            return Err(self.fail(e));
        }
        self.armed.set(epoch);
        self.finish_with(&mut engine, epoch)?;
        self.done.set(epoch);
        Ok(())
    }

    /// Starts a barrier and returns at once (split phase, MPI_Ibarrier): this rank's arrival is
    /// announced now; [`Request::test`] or [`Request::wait`] completes it later. Several may be
    /// outstanding; they complete in the order they were started (a later one is announced to
    /// the module once the one before it completes). See [`Request::wait_all`] and
    /// [`Request::test_any`].
    pub fn ibarrier(&self) -> Result<Request<'_>> {
        self.check_usable()?;
        let epoch = self.epoch.get() + 1;
        self.epoch.set(epoch);
        // The arrival record is made when the module gets the barrier: now if nothing is
        // outstanding, else by `drive` once the barriers before it complete (see `barrier`).
        // Waking: the hardware module's flat fallback parks on this flag.
        if self.armed.get() == self.done.get() && self.done.get() + 1 == epoch {
            self.arrival.signal(epoch, self.wait.policy.wakes());
            self.engine.borrow_mut().arrive(epoch).map_err(|e| self.fail(e))?;
            self.armed.set(epoch);
            self.note_armed();
        }
        Ok(Request { comm: self, watch: self.watch(self.done.get() + 1), epoch, polls: 0 })
    }

    /// Splits into disjoint communicators, one per color, ordered by `key` then by rank
    /// (MPI_Comm_split). Collective; returns `None` for [`Color::Undefined`].
    pub fn split(&self, color: impl Into<Color>, key: impl Into<Key>) -> Result<Option<Communicator>> {
        self.split_as("split", color.into(), key.into())
    }

    fn split_as(&self, call: &'static str, color: Color, key: Key) -> Result<Option<Communicator>> {
        self.check_usable()?;
        // Collective calls happen in order: outstanding ibarriers complete first (the control
        // plane does not move the barrier module, and peers may need this rank's rounds).
        self.drive(self.epoch.get(), true)?;
        let (defined, code) = match color {
            Color::Value(v) => (1, v),
            Color::Undefined => (0, 0),
        };
        let ctrl = self.ctrl(call);
        let all = ctrl.allgather(&[defined, code, key.0 as u64]).map_err(|e| self.control_failed(e))?;
        let mut group: Vec<usize> =
            (0..self.size()).filter(|&r| defined == 1 && all[r][0] == 1 && all[r][1] == code).collect();
        group.sort_by_key(|&r| (all[r][2] as i64, r));
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
        let offers = match ctrl.allgather(&[offer]) {
            Ok(offers) => offers,
            Err(e) => {
                if offer != NO_REGION && nobody_completes(&e) {
                    // No member can ever attach the new region: give it back.
                    self.seg.free(offer as usize, crate::region::RegionLayout::new(group.len()).total);
                }
                return Err(self.control_failed(e));
            }
        };

        let Some(leader) = leader else {
            return Ok(None);
        };
        if let Some(e) = alloc_err {
            return Err(e);
        }
        let base = offers[leader][0];
        if base == NO_REGION {
            return Err(Error::SegmentFull {
                needed: crate::region::RegionLayout::new(group.len()).total,
                free: self.seg.free_bytes(),
            });
        }
        let region = Region::attach(&self.seg, base as usize, group.len())?;
        let new_rank = group.iter().position(|&r| r == self.rank).expect("member of own group");
        let members = group.iter().map(|&r| self.members[r]).collect();
        Communicator::create(self.seg.clone(), region, new_rank, members, self.params.clone()).map(Some)
    }

    /// A new communicator with the same members and ranks (collective).
    pub fn dup(&self) -> Result<Communicator> {
        Ok(self.split_as("dup", Color::Value(0), self.rank.into())?.expect("every rank has color 0"))
    }

    /// Ends the whole job at once, from any rank (MPI_Abort): every rank waiting in a barrier
    /// or collective call returns [`Error::Aborted`] naming this rank, the launcher stops the
    /// others and exits with `code`. In thread mode it ends the whole process.
    pub fn abort(&self, code: i32) -> ! {
        let world = self.world_rank();
        // The code first: the launcher reports this rank and this code, even if another rank,
        // woken by the abort, exits before this one.
        self.seg.mark_exited(world, crate::shm::RankExit::Status(code));
        self.seg.set_abort(world);
        crate::sys::say(&format!("barrier: world rank {world} called abort({code}); ending the job"));
        std::process::exit(code)
    }

    /// Allocates `len` shared 64-bit words that every member can read and write (collective),
    /// like `MPI_Win_allocate_shared` with one size for all. Starts zeroed. Every rank must pass
    /// the same `len`; a length that differs between ranks, or does not fit in memory, is an
    /// error on every rank.
    pub fn shared_window(&self, len: usize) -> Result<SharedWindow> {
        self.check_usable()?;
        self.drive(self.epoch.get(), true)?;
        let ctrl = self.ctrl("shared_window");
        // One header line (the count of handles) before the words.
        let bytes = len.max(1).checked_mul(8).and_then(|b| b.checked_add(WINDOW_HEADER)).filter(|&b| b <= isize::MAX as usize);
        let mut offer = NO_REGION;
        let mut err = None;
        if self.rank == 0 {
            if let Some(bytes) = bytes {
                match self.seg.alloc(bytes) {
                    Ok(off) => {
                        // Every member will hold one handle.
                        self.seg.at::<AtomicU64>(off).store(self.size() as u64, Ordering::Relaxed);
                        offer = off as u64;
                    }
                    Err(e) => err = Some(e),
                }
            }
        }
        let all = match ctrl.allgather(&[offer, len as u64]) {
            Ok(all) => all,
            Err(e) => {
                if offer != NO_REGION && nobody_completes(&e) {
                    // No member can ever hold a handle on the block: give it back.
                    self.seg.free(offer as usize, bytes.unwrap_or(0));
                }
                return Err(self.control_failed(e));
            }
        };
        let failed = |e: Error| {
            // Nobody will hold the block: give it back.
            if self.rank == 0 && offer != NO_REGION {
                self.seg.free(offer as usize, bytes.unwrap_or(0));
            }
            Err(e)
        };
        if let Some((r, _)) = all.iter().enumerate().find(|(_, w)| w[1] != len as u64) {
            return failed(Error::InvalidArgument(format!(
                "shared_window({len}) on world rank {}, but world rank {} passed {}: every rank must pass the \
                 same length",
                self.world_rank(),
                self.members[r],
                all[r][1]
            )));
        }
        if bytes.is_none() {
            return failed(Error::InvalidArgument(format!(
                "shared_window({len}): {len} words of 8 bytes do not fit in this machine's address space"
            )));
        }
        if let Some(e) = err {
            return Err(e);
        }
        if all[0][0] == NO_REGION {
            return Err(Error::SegmentFull { needed: len * 8, free: self.seg.free_bytes() });
        }
        Ok(SharedWindow { seg: self.seg.clone(), offset: all[0][0] as usize, len })
    }
}

/// Whether a control exchange that failed on this rank with `e` can complete for no member:
/// then what its creator allocated for it (a window's block, a split's region) is nobody's and
/// goes back at once. Only a member that left without arriving proves it (it never will, and
/// every member's exchange needs it). After a timeout, or an abort, others may still complete
/// (the release may land just after this rank gave up): the allocation stays, and is given back
/// through its handles or departures as usual (see docs/failures.md).
fn nobody_completes(e: &Error) -> bool {
    matches!(e, Error::RankLeft { .. })
}

impl Drop for Communicator {
    /// Records that this rank left, after the last barrier it completed: members still waiting
    /// for it in a later barrier or collective stop with [`Error::RankLeft`] instead of hanging.
    fn drop(&mut self) {
        // Dropped while unwinding: a barrier may have been cut short by the panic.
        if std::thread::panicking() {
            self.region.depart_panicking(self.rank, self.done.get());
        } else {
            self.region.depart(self.rank, self.done.get(), self.state.get() == BROKEN);
        }
        self.seg.communicator_dropped(self.world_rank());
    }
}

/// A pending split-phase barrier. Dropping an incomplete request waits for it, except while
/// the thread panics: then the communicator is marked broken instead (waiting could deadlock a
/// rank that is unwinding).
#[derive(Debug)]
pub struct Request<'c> {
    comm: &'c Communicator,
    /// Looks for departed or exited peers and reports stalls while the request is polled.
    watch: PeerWatch<'c>,
    epoch: u64,
    /// Calls to `test` so far (the watch runs on every 64th).
    polls: u32,
}

impl<'c> Request<'c> {
    /// The barrier epoch this request completes.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    fn is_done(&self) -> bool {
        self.comm.done.get() >= self.epoch
    }

    /// Makes progress; `Ok(true)` once every rank has arrived. Never blocks. Once the request
    /// has been pending longer than `BARRIER_TIMEOUT`, returns the timeout error naming the
    /// ranks that have not arrived, and once a rank has left without arriving, the error that
    /// says so (polling for ever would otherwise hang silently).
    pub fn test(&mut self) -> Result<bool> {
        if self.is_done() {
            return Ok(true);
        }
        if self.comm.drive(self.epoch, false)? {
            return Ok(true);
        }
        // The barrier in flight: this one, or an earlier one it is queued behind.
        let flight = self.comm.done.get() + 1;
        if self.watch.need != Need::Barrier(flight) {
            self.watch = self.comm.watch(flight);
        }
        self.polls = self.polls.wrapping_add(1);
        let verdict = match (self.comm.armed_at.get(), self.comm.wait.timeout) {
            (Some(t0), Some(limit)) if t0.elapsed() >= limit => Err(WaitError::Timeout(t0.elapsed())),
            _ if self.polls.is_multiple_of(64) => self.watch.check(Duration::ZERO),
            _ => Ok(()),
        };
        match verdict {
            Ok(()) => Ok(false),
            Err(w) => Err(self.comm.wait_error(&self.watch, w)),
        }
    }

    /// Blocks until the barrier completes (and every barrier started before it).
    pub fn wait(self) -> Result<()> {
        self.comm.drive(self.epoch, true).map(|_| ())
    }

    /// Completes every request (MPI_Waitall), of one communicator or several, progressing all
    /// of them in turn so that none waits on another rank that waits on this one elsewhere.
    /// Returns the first error; the other requests are still completed (or fail) first.
    pub fn wait_all(requests: Vec<Request<'c>>) -> Result<()> {
        let mut pending = requests;
        let mut first_error = None;
        while !pending.is_empty() {
            let mut still = Vec::with_capacity(pending.len());
            for mut r in pending {
                match r.test() {
                    Ok(true) => {}
                    Ok(false) => still.push(r),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            pending = still;
            if !pending.is_empty() {
                std::thread::yield_now();
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Tests the requests in order (MPI_Testany): the index of the first complete one, or
    /// `None` if none is complete yet. Never blocks.
    pub fn test_any(requests: &mut [Request<'c>]) -> Result<Option<usize>> {
        for (i, r) in requests.iter_mut().enumerate() {
            if r.test()? {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if self.is_done() || self.comm.state.get() == BROKEN {
            return;
        }
        if std::thread::panicking() {
            // Waiting here could wait for ranks that are themselves waiting for this one (in
            // another collective); the panic must reach the job instead.
            self.comm.fail(Error::Broken(format!(
                "an ibarrier() request for barrier {} was dropped while the thread panicked",
                self.epoch
            )));
            return;
        }
        if let Err(e) = self.comm.drive(self.epoch, true) {
            tracing::warn!(error = %e, "ibarrier request dropped and its completion failed");
        }
    }
}

/// Bytes before a window's words: one line whose first word counts the handles.
const WINDOW_HEADER: usize = crate::pad::CACHE_LINE;

/// Shared 64-bit words visible to every member of a communicator. Cloning makes another
/// handle; the memory goes back to the job's segment when the last handle of every member is
/// dropped.
#[derive(Debug)]
pub struct SharedWindow {
    seg: Arc<Segment>,
    /// Offset of the window's header line.
    offset: usize,
    len: usize,
}

impl SharedWindow {
    /// The words.
    pub fn words(&self) -> &[AtomicU64] {
        self.seg.slice(self.offset + WINDOW_HEADER, self.len)
    }

    fn handles(&self) -> &AtomicU64 {
        self.seg.at(self.offset)
    }
}

impl Clone for SharedWindow {
    fn clone(&self) -> Self {
        self.handles().fetch_add(1, Ordering::Relaxed);
        SharedWindow { seg: self.seg.clone(), offset: self.offset, len: self.len }
    }
}

impl Drop for SharedWindow {
    fn drop(&mut self) {
        if self.handles().fetch_sub(1, Ordering::AcqRel) == 1 {
            self.seg.free(self.offset, self.len.max(1) * 8 + WINDOW_HEADER);
        }
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
