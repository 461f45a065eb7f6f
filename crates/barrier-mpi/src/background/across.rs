//! Across nodes: a communicator whose first barrier is `MPI_Ibarrier` and whose ranks span
//! nodes (`Turn::Ahead`).
//!
//! Where the component offers a private channel on the communicator ([`PrivateP2p`]) and the
//! ranks span nodes, the switch cannot be decided in a node's segment, so it is fixed in
//! advance: from its second barrier call on, every barrier is ours (the core's flights ahead,
//! [`barrier::hierarchy::ahead`]).
//! Each rank decides that in the first call, from what it knows alone: its component serves
//! here (`disable`, `min_comm_size`, the settings' backend list) and the MPI library places a
//! rank of the communicator on another machine (or in another node block). It says so in the
//! exchange, and the verdict checks that every rank decided alike; where they did not (settings
//! that differ between ranks), the barriers cannot be agreed without waiting, and every rank ends
//! the job, saying which ranks differ. Then each node's set-up runs aside as on one node, making
//! the node's part of the hierarchy too; the node roots' link is the private channel. The first
//! flight agrees, across all ranks, whether every set-up succeeded.

use std::ffi::c_int;
use std::os::fd::OwnedFd;

use barrier::hierarchy::ahead::{self, Ahead, Built};
use barrier::hierarchy::aside::{AsideState, NodeAside, JOIN_SLACK};
use barrier::hierarchy::{Hierarchy, Names, Roots, RootsWaits};
use barrier::wait::Pace;
use barrier::{Error, Result};

use super::record::{self, Member, COMPONENT, FRAMEWORK, HEAD};
use crate::channel::{Carrier, ChannelLink, PrivateP2p};
use crate::glue;
use crate::internode::{self, RootPlace};
use crate::raw::{self, Comm};
use crate::settings;

/// What the hierarchy needs once the node's set-up aside has finished.
#[derive(Debug)]
struct Plan {
    /// The roots' phase, on a node's first rank.
    roots: Option<Roots<ChannelLink>>,
    waits: RootsWaits,
    nodes: usize,
    limit: String,
}

/// One rank's side of a communicator served ahead across nodes: its set-up after the exchange,
/// and its flights.
#[derive(Debug)]
pub(super) struct Across {
    me: Member,
    /// The private channel and its first reserved tag (the roots' is the next one down).
    channel: (PrivateP2p, c_int),
    flights: Ahead<ChannelLink>,
    /// Every rank's world rank, once gathered.
    world: Vec<usize>,
    /// How a split-phase barrier that finds itself waiting paces its rank: yield until the
    /// machine's ranks and cores are known, then only where ranks outnumber cores.
    pace: Pace,
    /// The node's set-up under way.
    joining: Option<(NodeAside, Box<Plan>)>,
}

impl Across {
    /// Decided in the first call; nothing is sent yet.
    pub(super) fn new(me: Member, channel: (PrivateP2p, c_int)) -> Self {
        Across { flights: Ahead::new(me.rank), me, channel, world: Vec::new(), pace: Pace::Yield, joining: None }
    }

    /// Calls a flight (a barrier call from the second on): its number.
    pub(super) fn start_flight(&mut self) -> Result<u64> {
        self.flights.start()
    }

    /// Whether this rank's set-up has resolved (the flights can begin).
    pub(super) fn resolved(&self) -> bool {
        self.flights.resolved()
    }

    /// Whether the node's set-up is still under way.
    pub(super) fn building(&self) -> bool {
        self.joining.is_some()
    }

    /// Whether a split-phase barrier that finds itself waiting should give the core away.
    pub(super) fn waits_yield(&self) -> bool {
        matches!(self.pace, Pace::Yield)
    }

    /// The node's set-up under way gives up (the communicator is freed, or it failed).
    pub(super) fn give_up(&self) {
        if let Some((aside, _)) = &self.joining {
            aside.give_up();
        }
    }

    /// Advances the flights in order until flight `flight` has completed (`Ok(true)`), or, unless
    /// `blocking`, until one must wait; before this rank's set-up has resolved, `Ok(false)` (the
    /// caller advances it).
    pub(super) fn drive(&mut self, flight: u64, blocking: bool) -> Result<bool> {
        let done = self.flights.drive(flight, blocking);
        if let Some(agreed) = self.flights.take_agreed() {
            self.say_agreed(agreed);
        }
        done
    }

    /// The first flight agreed the way of every later one: said by rank 0 where verbose.
    fn say_agreed(&self, agreed: ahead::Agreed) {
        if !self.me.verbose || self.me.rank != 0 {
            return;
        }
        let way = match (agreed, self.flights.detail()) {
            (ahead::Agreed::Hierarchy, Some(detail)) => detail.to_string(),
            _ => "a dissemination among its ranks over the private channel (the hierarchy's set-up failed on a \
                  rank, which said why)"
                .to_string(),
        };
        glue::say(
            COMPONENT,
            &format!(
                "barriers on a communicator of {} ranks: ours from its barrier call 1 on (its first was \
                 MPI_Ibarrier and its ranks span nodes; set up in the background): {way}",
                self.me.size
            ),
        );
    }

    /// The exchange completed (`agreed`: the settings' agreement over it): this node's set-up
    /// aside and the node roots' link over the private channel.
    pub(super) fn gathered(&mut self, rows: &[&[u64]], agreed: Result<settings::Agreed>, memfd: Option<OwnedFd>) {
        self.world = rows.iter().map(|r| r[1] as usize).collect();
        let agreed = match agreed {
            Ok(a) => a,
            Err(e) => {
                // Agreed: every rank fails its set-up; the rank whose own setting is bad says
                // which.
                let say = !matches!(e, Error::PeerInvalidParam { .. }) || self.me.rank == 0;
                let why = e.to_string();
                return self.failed(say.then_some(why.as_str()), self.local_waits());
            }
        };
        let node = record::node_of(rows, self.me.rank, agreed.core.node_block);
        self.pace = Pace::for_machine(node.job.ranks, node.job.cores);
        let waits = RootsWaits { pace: self.pace, timeout: agreed.core.timeout, stall: agreed.core.stall };
        let me = &self.me;
        let spec = match record::aside_spec(rows, &node, (me.rank, me.world_rank), &agreed, &me.params, memfd, true) {
            Ok(spec) => spec,
            Err(why) => return self.failed(Some(&why), waits),
        };
        let (p2p, tag) = self.channel;
        let limit = self.me.params.source("BARRIER_TIMEOUT");
        // The node roots' link, on each node's first rank.
        let roots = (spec.local_rank == 0).then(|| {
            let link = ChannelLink::new(self.me.comm, tag - 1, Carrier::Private(p2p), node.firsts.clone(), node.node);
            let names = self.names(&node.firsts, node.node, internode::node_root);
            Roots::new(link, None, names, waits)
        });
        match NodeAside::start(spec) {
            Ok(aside) => {
                let plan = Plan { roots, waits, nodes: node.firsts.len(), limit };
                self.joining = Some((aside, Box::new(plan)));
            }
            Err(e) => self.failed(Some(&format!("building it in the background failed: {e}")), waits),
        }
    }

    /// Advances the node's set-up aside without blocking (the progress callback's, and each
    /// call's).
    pub(super) fn advance(&mut self) {
        let Some((aside, plan)) = &self.joining else { return };
        match aside.poll() {
            AsideState::Finished => self.joined(),
            AsideState::Overdue(limit) => {
                let (why, waits) =
                    (format!("the node's other ranks did not join its barrier within {limit:?}"), plan.waits);
                self.give_up();
                self.joining = None;
                self.failed(Some(&why), waits);
            }
            AsideState::Running => {}
        }
    }

    /// The node's set-up aside finished: the hierarchy, or a failure.
    fn joined(&mut self) {
        let (aside, plan) = self.joining.take().expect("joined() runs while joining");
        let Plan { roots, waits, nodes, limit } = *plan;
        match aside.finish() {
            Ok(node) => {
                let alone = node.alone();
                let halves = node.halves.expect("the set-up aside across nodes makes the node's part");
                let local_size = halves.size();
                let detail = format!(
                    "hierarchical: {nodes} nodes: intranode {} ({} over shared memory, {} on this node), internode \
                     dissemination among the node roots over the private channel",
                    halves.backend(),
                    halves.algorithm(),
                    barrier::text::count(local_size, "rank"),
                );
                let hier = Hierarchy::new(halves, roots, Some(node.seg), alone, self.me.rank, limit);
                self.resolve(Some(Built { hier, node: node.universe, detail }), waits);
            }
            // Another rank's failure (which that rank says) ended this one's join.
            Err(Error::Aborted { .. }) => self.failed(None, waits),
            Err(e) => self.failed(Some(&format!("building it in the background failed: {e}")), waits),
        }
    }

    /// This rank's set-up failed (`why`, said; `None`: another rank's failure, which that rank
    /// says): the flights run flat, with `waits` (the agreed ones, or this rank's own where the
    /// settings could not be agreed).
    fn failed(&mut self, why: Option<&str>, waits: RootsWaits) {
        if let Some(why) = why {
            glue::say(
                COMPONENT,
                &format!(
                    "world rank {}: the hierarchy for a communicator of {} ranks could not be set up here ({why}); \
                     its barriers are a dissemination among its ranks over the private channel instead, on every \
                     rank",
                    self.me.world_rank, self.me.size
                ),
            );
        }
        self.resolve(None, waits);
    }

    /// The waits of this rank's own settings (where they could not be agreed).
    fn local_waits(&self) -> RootsWaits {
        RootsWaits {
            pace: Pace::Yield,
            timeout: self.me.params.duration("BARRIER_TIMEOUT").ok().flatten(),
            stall: self.me.params.stall_report(),
        }
    }

    /// This rank's set-up resolved: the flights begin (the first carries `built.is_none()`). The
    /// first flight's timeout allows for the others' set-up too: a node's first rank may wait
    /// its open limit and [`JOIN_SLACK`] more for a node's other rank before it gives up.
    fn resolve(&mut self, built: Option<Built<ChannelLink>>, waits: RootsWaits) {
        let (p2p, tag) = self.channel;
        let everyone: Vec<usize> = (0..self.me.size).collect();
        let link = ChannelLink::new(self.me.comm, tag, Carrier::Private(p2p), everyone.clone(), self.me.rank)
            .agreeing(built.is_none());
        let names = Names {
            flat: true,
            ..self.names(&everyone, self.me.rank, |j, w| format!("world rank {w} (communicator rank {j})"))
        };
        let set_up = record::open_limit(waits.timeout) + JOIN_SLACK;
        let first = RootsWaits { timeout: waits.timeout.map(|t| t + set_up), ..waits };
        let flat = Roots::new(link, None, names, first);
        self.flights.resolve(flat, built, waits);
    }

    /// How reports name the members of a link among `members` (communicator ranks), this rank
    /// being member `index`.
    fn names(&self, members: &[usize], index: usize, name: fn(usize, usize) -> String) -> Names {
        let place =
            RootPlace { rank: self.me.rank, size: self.me.size, limit: self.me.params.source("BARRIER_TIMEOUT") };
        let members: Vec<(usize, usize)> = members.iter().map(|&j| (j, self.world[j])).collect();
        internode::names(place, self.me.world_rank, index, &members, name)
    }
}

/// Some ranks made their barriers ours from the second call on and others did not (the rows of
/// the exchange say which): they cannot be agreed any more without waiting (the calls since have
/// gone two ways). Every rank ends the job, saying which ranks differ.
pub(super) fn mixed(comm: Comm, world_rank: usize, rows: &[&[u64]]) -> ! {
    let ranks = |ahead: bool| -> Vec<usize> { (0..rows.len()).filter(|&r| (rows[r][7] != 0) == ahead).collect() };
    let f = FRAMEWORK;
    let mut differ = glue::declines_named(f, &rows.iter().map(|r| r[0]).collect::<Vec<_>>());
    // The settings' agreement's words 2 (the backend list names the layer's own first) and
    // 1 (the node block).
    let own: Vec<usize> = (0..rows.len()).filter(|&r| rows[r][HEAD + 2] != 0).collect();
    if !own.is_empty() {
        differ.push(format!(
            "{f}_fastbar_backend or BARRIER_BACKEND names mpi first (or the info key {f}_fastbar_disable is set) \
             on ranks {own:?}"
        ));
    }
    let blocks: Vec<u64> = rows.iter().map(|r| r[HEAD + 1]).collect();
    if blocks.iter().any(|&b| b != blocks[0]) {
        differ.push(format!("{f}_fastbar_node_block or BARRIER_MPI_NODE_BLOCK is, by rank, {blocks:?}"));
    }
    glue::abort_job(
        &format!("{f}/fastbar"),
        &format!(
            "world rank {}: the barriers of {} ({} ranks), whose first barrier was MPI_Ibarrier and whose ranks \
             span nodes, are ours from the second call on ranks {:?} and Open MPI's on ranks {:?}, and cannot be \
             agreed without waiting: the component's settings differ between ranks ({}): give every rank the \
             same",
            world_rank,
            raw::name(comm),
            rows.len(),
            ranks(true),
            ranks(false),
            differ.join("; ")
        ),
    )
}

/// Whether `comm`'s ranks span nodes as this rank sees them alone: a rank on another machine
/// (as the MPI library places it), or, with node blocks of `block` ranks, in another block.
pub(super) fn spans_nodes(comm: Comm, rank: usize, block: usize, p2p: &PrivateP2p) -> Result<bool> {
    let world = raw::world_ranks(comm)?;
    let my_block = world[rank].checked_div(block);
    Ok((0..world.len()).any(|r| {
        // SAFETY: `comm` is valid (the caller's contract) and `r` one of its ranks.
        let here = r == rank || unsafe { (p2p.on_this_machine)(comm, r as c_int) } != 0;
        !here || world[r].checked_div(block) != my_block
    }))
}
