//! Creating communicators (collective): the world's, and every split and duplicate, each over
//! a region of its own, with the settings agreed and a backend selected; and, where the
//! selector agrees on the hierarchical backend across nodes, its composition ([`compose`]:
//! the communicator's nodes and roots are communicators too, made here).

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::algo::dissemination::FabricDissemination;
use crate::algo::topology::Topology;
use crate::backend::{Decline, EnableContext, QueryContext};
use crate::backends::hierarchical::{self, roots::FabricLink, Settings};
use crate::compose::{Choice, Hierarchy, OwnBarrier, Roots, RootsWaits, Way};
use crate::ctrl::Ctrl;
use crate::engine::Composition;
use crate::error::{Error, Result};
use crate::params::Params;
use crate::region::Region;
use crate::selector::{self};
use crate::shm::Segment;
use crate::wait::{Pace, WaitConfig, WaitPolicy};

use super::communicator::*;
use super::composed::{Composed, DeviceOwn, RootsWay};
use super::names::{Color, Key};

/// What runs a new communicator's barriers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Make {
    /// The backend the selector agrees on.
    Select,
    /// The node's gather and release as alternate barriers ([`crate::algo::halves`]), waiting
    /// as given (the waits a communicator made of such nodes agreed) or as its members agree.
    Halves(Option<LocalSettings>),
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
        Self::create_as(seg, region, rank, members, params, Make::Select)
    }

    fn create_as(
        seg: Arc<Segment>,
        region: Region,
        rank: usize,
        members: Vec<usize>,
        params: Params,
        make: Make,
    ) -> Result<Self> {
        let fallback = region.clone();
        let limit = params.source("BARRIER_TIMEOUT");
        Self::build(seg, region, rank, members, params, make)
            .inspect_err(|_| fallback.depart(rank, 0, true))
            .map_err(|e| e.timeout_given_in(limit))
    }

    fn build(
        seg: Arc<Segment>,
        region: Region,
        rank: usize,
        members: Vec<usize>,
        params: Params,
        make: Make,
    ) -> Result<Self> {
        let size = members.len();
        let ctrl_epoch = Cell::new(0);
        let shape = seg.shape();

        // Every setting is checked before the first collective, but the verdict is agreed: a
        // rank with a bad value takes part in the exchange and everybody fails together (a rank
        // that returned early would leave the others waiting in the exchange for ever). Values
        // that must match (wait policy, spin counts, timeout, stall report) are rank 0's.
        // (BARRIER_BACKEND's names are agreed by the selector: a rank may lack a registered one.)
        let checked = crate::registry::check_all_but_backend_names(&params);
        let local = match make {
            Make::Halves(Some(given)) => given,
            _ => LocalSettings::load(&params, shape),
        };
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
        let (engine, selection) = match make {
            Make::Halves(_) => halves(&ctrl, &region, rank, &node_of_member, &params, policy)?,
            Make::Select => selector::select(selector::SelectInput {
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
                compose: &|ctx| compose(ctx, &wait, stall),
            })?,
        };

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
            names: None,
            departed: Cell::new(false),
            polls: Cell::new(0),
            broken: RefCell::new(None),
        })
    }

    /// The parameters communicators split from this one are created with.
    pub(crate) fn set_params(&mut self, params: Params) {
        self.params = params;
    }

    /// Splits into disjoint communicators, one per color, ordered by `key` then by rank
    /// (MPI_Comm_split). Collective; returns `None` for [`Color::Undefined`].
    ///
    /// ```
    /// let sizes = barrier::threads::run(5, |world| {
    ///     // Even and odd ranks: communicators of 3 and 2 ranks.
    ///     let half = world.split(world.rank() % 2, world.rank()).unwrap().expect("every rank has a color");
    ///     half.barrier().unwrap();
    ///     half.size()
    /// })
    /// .unwrap();
    /// assert_eq!(sizes, vec![3, 2, 3, 2, 3]);
    /// ```
    pub fn split(&self, color: impl Into<Color>, key: impl Into<Key>) -> Result<Option<Communicator>> {
        self.split_as("split", color.into(), key.into())
    }

    fn split_as(&self, call: &'static str, color: Color, key: Key) -> Result<Option<Communicator>> {
        self.split_made(call, color, key, Make::Select)
    }

    fn split_made(&self, call: &'static str, color: Color, key: Key, make: Make) -> Result<Option<Communicator>> {
        self.check_usable()?;
        // Collective calls happen in order: outstanding ibarriers complete first (the control
        // plane does not move the barrier module, and peers may need this rank's rounds).
        self.drive(self.epoch.get(), true)?;
        let parent = Parent { ctrl: &self.ctrl(call), seg: &self.seg, rank: self.rank, members: &self.members };
        split_over(&parent, color, key, make, self.params.clone(), &|e| self.control_failed(e))
    }

    /// A new communicator with the same members and ranks (collective).
    pub fn dup(&self) -> Result<Communicator> {
        Ok(self.split_as("dup", Color::Value(0), self.rank.into())?.expect("every rank has color 0"))
    }

    /// A new communicator over the same members, all on one node, whose barriers are the two
    /// halves of a barrier around a phase that rank 0 runs between them: odd barriers gather
    /// (rank 0 returns once every rank has arrived, the others at once), even barriers release
    /// (rank 0 at once, the others once rank 0 has called it). Collective. For crates that run
    /// their own phase among node roots (barrier-mpi, barrier-shmem); see
    /// `algo/halves.rs`. `BARRIER_HIER_RADIX` (rank 0's) shapes the gather.
    ///
    /// Errors: [`Error::InvalidArgument`] when the members span nodes.
    #[doc(hidden)]
    pub fn halves(&self) -> Result<Communicator> {
        if self.num_nodes() > 1 {
            return Err(Error::InvalidArgument(format!(
                "halves: the communicator spans {} nodes; a gather and a release are a node's",
                self.num_nodes()
            )));
        }
        Ok(self
            .split_made("halves", Color::Value(0), self.rank.into(), Make::Halves(None))?
            .expect("every rank has color 0"))
    }
}

/// The engine of a [`Make::Halves`] communicator (collective: rank 0's radix is agreed).
fn halves(
    ctrl: &Ctrl<'_>,
    region: &Region,
    rank: usize,
    node_of: &[usize],
    params: &Params,
    policy: WaitPolicy,
) -> Result<(crate::engine::Engine, selector::Selection)> {
    let local = params
        .parse::<usize>("BARRIER_HIER_RADIX", hierarchical::DEFAULT_RADIX, "")
        .unwrap_or(hierarchical::DEFAULT_RADIX);
    let radix = (ctrl.allgather(&[local as u64])?[0][0] as usize).clamp(1, 64);
    let topo = crate::algo::topology::Topology::new(node_of, rank, radix);
    let module =
        crate::algo::halves::HalvesModule::new(crate::algo::topology::node_slots(region, &topo), radix, policy.wakes());
    let algorithm = crate::backend::Module::algorithm(&module).to_string();
    let selection = selector::Selection { backend: hierarchical::NAME, algorithm, candidates: Vec::new() };
    Ok((crate::engine::Engine::Dyn(Box::new(module)), selection))
}

/// What a split needs of its parent: its control plane (for the call being made), its
/// segment, its members and this rank's place among them.
pub(crate) struct Parent<'a> {
    pub ctrl: &'a Ctrl<'a>,
    pub seg: &'a Arc<Segment>,
    pub rank: usize,
    pub members: &'a [usize],
}

/// Splits `parent` into disjoint communicators, one per color, ordered by `key` then by rank,
/// each made as `make` says with `params` (collective over the parent's members; `None` for
/// [`Color::Undefined`]). `control_failed` maps a failure of the parent's control plane (the
/// parent can run no collective after it). A communicator splits itself through this
/// ([`Communicator::split`]); the hierarchical backend splits the communicator it is being
/// enabled on into its nodes and its roots, before that communicator exists.
pub(crate) fn split_over(
    parent: &Parent<'_>,
    color: Color,
    key: Key,
    make: Make,
    params: Params,
    control_failed: &dyn Fn(Error) -> Error,
) -> Result<Option<Communicator>> {
    let (defined, code) = match color {
        Color::Value(v) => (1, v),
        Color::Undefined => (0, 0),
    };
    let all = parent.ctrl.allgather(&[defined, code, key.0 as u64]).map_err(control_failed)?;
    let mut group: Vec<usize> =
        (0..parent.members.len()).filter(|&r| defined == 1 && all[r][0] == 1 && all[r][1] == code).collect();
    group.sort_by_key(|&r| (all[r][2] as i64, r));
    // The group's first member (in parent order) creates the region and tells the others.
    let leader = group.iter().copied().min();
    let mut offer = NO_REGION;
    let mut alloc_err = None;
    if leader == Some(parent.rank) {
        match Region::create(parent.seg, group.len()) {
            Ok(r) => offer = r.base() as u64,
            Err(e) => alloc_err = Some(e),
        }
    }
    let offers = match parent.ctrl.allgather(&[offer]) {
        Ok(offers) => offers,
        Err(e) => {
            if offer != NO_REGION && nobody_completes(&e) {
                // No member can ever attach the new region: give it back.
                parent.seg.free(offer as usize, crate::region::RegionLayout::new(group.len()).total);
            }
            return Err(control_failed(e));
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
            free: parent.seg.free_bytes(),
        });
    }
    let region = Region::attach(parent.seg, base as usize, group.len())?;
    let new_rank = group.iter().position(|&r| r == parent.rank).expect("member of own group");
    let members = group.iter().map(|&r| parent.members[r]).collect();
    Communicator::create_as(parent.seg.clone(), region, new_rank, members, params, make).map(Some)
}

/// Builds the composition across nodes (collective over the communicator being made, whose
/// agreed waits are `wait` and `stall`): the settings agreed (rank 0's), the node's halves
/// (waiting as the communicator does), a device group of the roots if one is asked
/// for or (auto) serves them, and our dissemination among the roots. Every rank returns `Ok`
/// or every rank declines.
pub(crate) fn compose(
    ctx: &EnableContext<'_>,
    wait: &WaitConfig,
    stall: Option<Duration>,
) -> Result<Box<dyn Composition>, Decline> {
    let q = &ctx.query;
    let decline = |e: Error| Decline::new(e.to_string());
    let local = Settings::load(q.params).map_err(decline)?;
    let settings = Settings::unpack(ctx.broadcast(0, local.pack()).map_err(decline)?);
    let topo = Topology::new(q.node_of, q.rank, settings.radix);
    let fabric = ctx.fabric();
    if !ctx.all_agree(fabric.is_ok()).map_err(decline)? {
        return Err(Decline::new(
            fabric.err().map_or("the transports could not be set up on another rank".into(), |e| e.to_string()),
        ));
    }
    let fabric = fabric.map_err(decline)?;
    let parent = Parent { ctrl: ctx.ctrl, seg: ctx.region.segment(), rank: q.rank, members: q.members };

    // The node's communicator, as its gather and release (rank 0's radix on every node), waiting
    // as this communicator agreed (its rank 0's waits, whatever the node's first rank was given).
    let node_params = q.params.clone().derive("BARRIER_HIER_RADIX", settings.radix.to_string());
    let waits =
        LocalSettings { policy: wait.policy, spin: wait.spin, yields: wait.yields, timeout: wait.timeout, stall };
    let node = Color::Value(q.node_of[q.rank] as u64);
    let halves = split_over(&parent, node, Key(q.rank as i64), Make::Halves(Some(waits)), node_params, &|e| e);
    if !ctx.all_agree(halves.is_ok()).map_err(decline)? {
        return Err(Decline::new(halves.err().map_or_else(
            || "another rank could not make its node's communicator".into(),
            |e| format!("this rank's node communicator: {e}"),
        )));
    }
    let mut halves = halves.map_err(decline)?.expect("every rank has a node");
    // Its reports speak of the communicator the user called: its ranks, its barriers.
    halves.name_ranks(user_names(q, parent.seg.shape().world_size, true));

    let device = roots_device(ctx, &parent, settings, &topo)?;
    let route = {
        // The transport between two nodes, as seen from this node (the same on every rank).
        let my_node = topo.root_index(topo.rank_of(0)).expect("the root is a root");
        let other = ctx.peer(topo.roots()[(my_node + 1) % topo.nodes()]);
        fabric.route(other).map_or("?", |t| t.name())
    };
    // A root's side of the roots' phase: the link, the names its reports use, its waits.
    let root = topo.root_index(q.rank);
    let roots_of = |link: FabricLink, own: Option<Box<dyn OwnBarrier>>, index: usize| {
        let names = hierarchical::roots::names(q, topo.roots(), index);
        let pace = match ctx.policy {
            WaitPolicy::Spin => Pace::Spin,
            WaitPolicy::Park => Pace::Yield,
        };
        let waits = RootsWaits { pace, timeout: wait.timeout, stall };
        let way = if own.is_some() { Way::Own } else { Way::Ours };
        let mut roots = Roots::new(link, own, names, waits);
        roots.park_with(*wait);
        roots.choose(Choice::Fixed(way), |_| Ok(())).map(|_| roots)
    };
    let (roots, way) = match device {
        // The device's communicator serves every barrier among the roots: no rounds of ours.
        Some((name, comm)) => match (root, comm) {
            (Some(index), Some(comm)) => {
                let comm = Arc::new(Mutex::new(comm));
                let own = Box::new(DeviceOwn::new(name, comm.clone()));
                let link = FabricLink::unused(fabric, ctx, q.members.to_vec());
                (Some(roots_of(link, Some(own), index).map_err(decline)?), RootsWay::Device(name, Some(comm)))
            }
            _ => (None, RootsWay::Device(name, None)),
        },
        None => match FabricDissemination::enable(ctx, &fabric, topo.roots())? {
            Some(diss) => {
                let index = root.expect("a member of the roots' dissemination is a root");
                let link = FabricLink::new(diss, fabric, ctx, q.members.to_vec());
                (Some(roots_of(link, None, index).map_err(decline)?), RootsWay::Ours(route))
            }
            None => (None, RootsWay::Ours(route)),
        },
    };
    let alone = topo.local.len() == 1;
    let limit = q.params.source("BARRIER_TIMEOUT");
    let mut hier = Hierarchy::new(halves, roots, None, alone, q.rank, limit);
    if settings.debug {
        hier.time_phases(format!("barrier: hierarchical rank {} (node {}, local rank {})", q.rank, q.node, topo.me));
    }
    Ok(Box::new(Composed::new(hier, settings.radix, way)))
}

/// A device group of the node roots, if `BARRIER_HIER_INTERNODE` asks for one or (auto) one
/// serves them: its backend's name and, on a root, the roots' communicator over it. Collective
/// over the communicator being made; every rank returns the same answer. An explicit device
/// that fails declines with its reason; auto goes on to the next, then to our dissemination.
fn roots_device(
    ctx: &EnableContext<'_>,
    parent: &Parent<'_>,
    settings: Settings,
    topo: &Topology,
) -> Result<Option<(&'static str, Option<Communicator>)>, Decline> {
    let q = &ctx.query;
    let root = topo.root_index(q.rank).is_some();
    let mut why = Vec::new();
    for name in settings.devices() {
        let params = q.params.clone().set_as("BARRIER_BACKEND", name, "BARRIER_HIER_INTERNODE");
        let color = if root { Color::Value(0) } else { Color::Undefined };
        let made = split_over(parent, color, Key(q.rank as i64), Make::Select, params, &|e| e);
        if ctx.all_agree(made.is_ok()).map_err(|e| Decline::new(e.to_string()))? {
            let mut made = made.expect("agreed");
            if let Some(comm) = &mut made {
                // Its reports speak of the communicator the user called.
                comm.name_ranks(user_names(q, parent.seg.shape().world_size, false));
            }
            return Ok(Some((name, made)));
        }
        let reason = match made {
            Err(Error::ForcedBackendUnavailable { reasons, .. }) => reasons,
            Err(e) => e.to_string(),
            Ok(_) => format!("the node roots could not make a {name} group (their errors say why)"),
        };
        if let Some(device) = settings.explicit_device() {
            return Err(Decline::new(format!("BARRIER_HIER_INTERNODE={device}: {reason}")));
        }
        why.push(format!("{name}: {reason}"));
    }
    if !why.is_empty() {
        tracing::debug!(reasons = ?why, "hierarchical: no device among the node roots");
    }
    Ok(None)
}

/// The names of the ranks of the communicator the user called (`q`'s), for the reports of a
/// communicator it is made of: by world rank (the job segment's ranks), the user's rank of each,
/// and (`node`) whether that communicator is one node's halves, two barriers per user barrier.
fn user_names(q: &QueryContext<'_>, world_size: usize, node: bool) -> crate::shm::RankNames {
    let mut comm = vec![usize::MAX; world_size];
    for (rank, &world) in q.members.iter().enumerate() {
        comm[world] = rank;
    }
    crate::shm::RankNames { world: (0..world_size).collect(), comm, comm_size: q.size, hierarchical: node }
}
