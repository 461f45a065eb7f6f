//! Creating communicators (collective): the world's, and every split and duplicate, each over
//! a region of its own, with the settings agreed and a backend selected.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::QueryContext;
use crate::ctrl::Ctrl;
use crate::error::{Error, Result};
use crate::params::Params;
use crate::region::Region;
use crate::selector::{self};
use crate::shm::Segment;
use crate::wait::{WaitConfig, WaitPolicy};

use super::communicator::*;
use super::names::{Color, Key};

/// What runs a new communicator's barriers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Make {
    /// The backend the selector agrees on.
    Select,
    /// The node's gather and release as alternate barriers ([`crate::algo::halves`]).
    Halves,
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
        let (engine, selection) = match make {
            Make::Halves => halves(&ctrl, &region, rank, &node_of_member, &params, policy)?,
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
        Communicator::create_as(self.seg.clone(), region, new_rank, members, self.params.clone(), make).map(Some)
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
        Ok(self.split_made("halves", Color::Value(0), self.rank.into(), Make::Halves)?.expect("every rank has color 0"))
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
    use crate::backends::hierarchical;
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
