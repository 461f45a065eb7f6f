//! A barrier communicator made from an MPI communicator. See the crate docs for the protocol.

use std::fmt;

use barrier::hierarchy::{NodeExchange as _, NodeFailure};
use barrier::shm::JobShape;
use barrier::{Error, Params, Result, Universe};

use crate::census;
use crate::channel::ChannelLink;
use crate::internode::RootPlace;
use crate::raw::{self, Comm, OwnedComm};
use crate::settings::{agree_settings, Agreed, FAULT, HIERARCHICAL, LAYER, MPI_BACKEND};

/// What runs a communicator's barriers.
pub(crate) enum Path {
    /// One node: the node's own barrier (the core selector's choice among its backends).
    Node(Universe),
    /// Several nodes: the node's gather (every rank has arrived, the root learns it), then the
    /// roots' dissemination over MPI, then the node's release: the two halves of the node's
    /// `halves` communicator (`barrier::Communicator::halves`), two barriers of it per barrier.
    Hierarchical {
        /// The core's composition of the node's halves and the roots' phase over MPI
        /// ([`barrier::hierarchy`]). Declared (and so dropped) before the node's universe its
        /// halves were made from. Boxed: it is large, and the other variants hold at most one
        /// communicator. A rank alone on its node (no forced backend) skips the node's two
        /// barriers, which would wait for nobody: at one rank per node with MPI's barrier among
        /// the roots, a barrier is MPI's barrier and nothing else, never slower than MPI's own.
        hier: Box<barrier::hierarchy::Hierarchy<ChannelLink>>,
        /// The node's universe, held only so that it outlives the halves (nothing calls it).
        _node: Universe,
    },
    /// `PMPI_Barrier` on a private copy of the communicator.
    Mpi,
}

/// One rank's barrier communicator over an MPI communicator.
///
/// Made collectively from any intracommunicator ([`BarrierComm::new`]); [`barrier`]
/// (`BarrierComm::barrier`) is collective over the same ranks. Like an MPI communicator, one
/// thread drives it at a time (it is `Send`, not `Sync`).
pub struct BarrierComm {
    pub(crate) path: Path,
    /// A private duplicate of the MPI communicator (for the fallback and for nothing the
    /// application sees).
    pub(crate) comm: Comm,
    pub(crate) rank: usize,
    size: usize,
    node: usize,
    nodes: usize,
    pub(crate) local_rank: usize,
    local_size: usize,
    /// Why this path, and what the others said.
    detail: String,
    /// A split-phase request's `test()` that finds the barrier incomplete gives the core away
    /// once (this machine's ranks outnumber its cores: the node's wait policy parks), so that
    /// the rank it waits for can run.
    pub(crate) test_yields: bool,
    /// Fell back to `MPI_Barrier` because a set-up step failed: on this rank (`Some(true)`) or
    /// on another (`Some(false)`).
    fell_back: Option<bool>,
    /// Below `MPI_THREAD_SERIALIZED`: the thread that made it, the only one that may call MPI
    /// through it (see `on_home_thread`).
    home: Option<usize>,
    /// The settings it was made with, for communicators made from it (`dup`, `split`).
    pub(crate) params: Params,
    /// The communicators the set-up made on the way (the machine's, a simulated node's, the
    /// node roots'), kept until this one is dropped rather than freed at once: MPI's frees
    /// leave blocks in the program's heap that its next small blocks fill, which moved ISx's
    /// blocks and made glibc trim its heap every iteration (examples/mpi/heap_holes.c).
    made_on_the_way: Vec<OwnedComm>,
    /// What names this build on every rank (its rank 0's machine word and build token), where
    /// the settings' allgather made it.
    build: Option<[u64; 2]>,
}

/// What identifies a barrier for another communicator of the same ranks (`barrier_mpi::reuse`).
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct ReuseKey {
    /// Its private duplicate (congruent with the communicator it was built for).
    pub private: raw::Comm,
    /// What names its build, the same on every rank.
    pub build: [u64; 2],
}

// SAFETY: the MPI handles are plain handles that MPI lets any thread use at
// MPI_THREAD_SERIALIZED and above; below it (SINGLE, FUNNELED) every call checks that it runs
// on the thread that made the communicator and fails otherwise (`on_home_thread`), so moving
// one to another thread never makes an MPI call from there. The node's communicator is `Send`.
unsafe impl Send for BarrierComm {}

/// A token of the calling thread (the address of a thread-local), cheap enough for every call.
fn this_thread() -> usize {
    thread_local!(static TOKEN: u8 = const { 0 });
    TOKEN.with(|t| t as *const u8 as usize)
}

impl fmt::Debug for BarrierComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BarrierComm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("backend", &self.backend())
            .field("nodes", &self.nodes)
            .finish()
    }
}

/// A set-up step's outcome: a failure names the world rank it failed on (the core's node
/// set-up's, whose ranks are world ranks here); boxed, the error is large and only the cold
/// path carries it.
type Step<T> = std::result::Result<T, Box<NodeFailure>>;

/// The set-up's collectives for the core's node set-up: the node's communicator hands the
/// first rank's words on; the communicator's allgather agrees on a step.
struct NodeExchange {
    comm: Comm,
    node_comm: Comm,
    world_rank: usize,
    /// `BARRIER_MPI_FAULT`'s stage and world rank (agreed).
    fault: Option<(String, usize)>,
}

impl barrier::hierarchy::NodeExchange for NodeExchange {
    fn me(&self) -> usize {
        self.world_rank
    }

    fn name(&self, id: usize) -> String {
        format!("world rank {id}")
    }

    fn share_from_node_first(&self, words: &mut [u64; 5]) -> Result<()> {
        raw::broadcast(self.node_comm, 0, words)
    }

    fn first_failed(&self, ok: bool) -> Result<Option<usize>> {
        let mine = if ok { u64::MAX } else { self.world_rank as u64 };
        let first = raw::allgather(self.comm, &[mine])?.iter().map(|w| w[0]).min().unwrap_or(u64::MAX);
        Ok((first != u64::MAX).then_some(first as usize))
    }

    fn fault(&self, stage: &str) -> Result<()> {
        crate::settings::fault_at(&self.fault, stage, self.world_rank)
    }
}

impl BarrierComm {
    /// A barrier communicator over the ranks of `comm` (collective over them).
    pub fn new<C: mpi::topology::Communicator>(comm: &C) -> Result<Self> {
        // SAFETY: rsmpi's communicators hold valid handles while they live, and MPI is
        // initialized while any of them exists.
        unsafe { Self::from_raw(comm.as_raw(), Params::from_env()) }
    }

    /// [`BarrierComm::new`] from a raw handle, with explicit parameters.
    ///
    /// # Safety
    /// `comm` must be a valid MPI communicator handle of this process, MPI must be initialized,
    /// and every rank of `comm` must make this call (it is collective).
    ///
    /// Ranks that arrive early wait asleep for the others (an `MPI_Ibarrier` tested between
    /// sleeps) before the set-up's own collectives, which wait in MPI's progress loop: with more
    /// ranks than cores, ranks waiting there for a first barrier (a benchmark's idle ones) held
    /// the cores the working ranks needed.
    pub unsafe fn from_raw(comm: Comm, params: Params) -> Result<Self> {
        // SAFETY: the caller's contract.
        unsafe { Self::from_raw_as(comm, params, true, true) }
    }

    /// [`BarrierComm::from_raw`] for an Open MPI component (coll, scoll): the ranks meet in
    /// MPI's own collectives, as an `MPI_Ibarrier` of ours on `comm` would come back to the
    /// component that is building this, and the node roots keep our rounds
    /// (`BARRIER_MPI_INTERNODE` does not apply).
    ///
    /// # Safety
    /// As for [`BarrierComm::from_raw`].
    #[doc(hidden)]
    pub unsafe fn from_raw_in_component(comm: Comm, params: Params) -> Result<Self> {
        // SAFETY: the caller's contract.
        unsafe { Self::from_raw_as(comm, params, false, false) }
    }

    /// `meet_asleep`: the ranks first meet asleep (not where they already met). `mpi_roots`:
    /// MPI's barrier may serve among the node roots (not for the Open MPI components: MPI's
    /// barrier on the roots' communicator would be the component's own).
    ///
    /// # Safety
    /// As for [`BarrierComm::from_raw`].
    pub(crate) unsafe fn from_raw_as(comm: Comm, params: Params, meet_asleep: bool, mpi_roots: bool) -> Result<Self> {
        if !raw::mpi_active() {
            return Err(Error::InvalidArgument(
                "MPI is not initialized (or already finalized): make barrier communicators between MPI_Init and \
                 MPI_Finalize"
                    .into(),
            ));
        }
        if raw::is_inter(comm)? {
            return Err(Error::InvalidArgument(
                "an intercommunicator has two groups and no barrier of ours; use MPI_Barrier on it".into(),
            ));
        }
        if meet_asleep && raw::size(comm)? > 1 {
            raw::sleeping_rendezvous(comm, params.stall_report())?;
        }
        let own = raw::dup(comm)?;
        let rank = raw::rank(own)?;
        let size = raw::size(own)?;
        let world_rank = raw::rank(raw::comm_world())?;
        let mut me = BarrierComm {
            path: Path::Mpi,
            comm: own,
            rank,
            size,
            node: rank,
            nodes: size,
            local_rank: 0,
            local_size: 1,
            detail: String::new(),
            test_yields: false,
            fell_back: None,
            home: (!raw::any_thread_may_call()).then(this_thread),
            params: params.clone(),
            made_on_the_way: Vec::new(),
            build: None,
        };
        let mut agreed = agree_settings(me.comm, &params, world_rank)?;
        me.build = agreed.build;
        if !mpi_roots {
            agreed.core.internode = barrier::hierarchy::Choice::Fixed(barrier::hierarchy::Way::Ours);
        }
        if agreed.core.own_only {
            me.detail = format!("{} names mpi first", params.source("BARRIER_BACKEND"));
            return Ok(me);
        }
        match me.build(&params, &agreed, world_rank) {
            Ok(()) => Ok(me),
            Err(f) if agreed.core.may_fall_back => {
                me.path = Path::Mpi;
                me.fell_back = Some(f.rank == world_rank);
                me.detail = if f.rank == world_rank {
                    format!("fell back to MPI_Barrier: {}", f.error)
                } else {
                    format!("fell back to MPI_Barrier: world rank {} failed: {}", f.rank, f.error)
                };
                Ok(me)
            }
            Err(f) => Err(f.error),
        }
    }

    /// Every step that can fail on one rank is agreed before the next: a failure anywhere fails
    /// the build on every rank, with the first failing world rank named.
    fn build(&mut self, params: &Params, agreed: &Agreed, world_rank: usize) -> Step<()> {
        let local = |error: Error| Box::new(NodeFailure { rank: world_rank, error });
        // One machine (and one node block): the communicator is its node, known from the place
        // words gathered with the settings, without a split (a communicator creation) or the
        // node's own collectives.
        let node_of = |row: &Vec<u64>| (row[0], (row[1] as usize).checked_div(agreed.core.node_block));
        let places = &agreed.places;
        let (node_comm, ranks, own) =
            if places.len() == self.size && places.iter().all(|row| node_of(row) == node_of(&places[0])) {
                let ranks = places.iter().enumerate().map(|(rank, row)| (row[1] as usize, rank)).collect();
                (self.comm, Some(ranks), census::one_machine(places))
            } else {
                // Node topology: the machine's ranks, cut into blocks of BARRIER_MPI_NODE_BLOCK.
                let (machine, own) = census::machine_of(self.comm, self.rank).map_err(local)?;
                let machine_comm = machine.0;
                self.made_on_the_way.push(machine);
                // Without blocks the machine is the node; with them, a block of it.
                let node_comm = match world_rank.checked_div(agreed.core.node_block) {
                    None => machine_comm,
                    Some(color) => {
                        let block = raw::split(machine_comm, Some(color as u32), self.rank).map_err(local)?;
                        let block = block.expect("a defined color gets a communicator");
                        self.made_on_the_way.push(OwnedComm(block));
                        block
                    }
                };
                (node_comm, None, own)
            };
        // The wait policy follows the job's processes on this machine, not this communicator's
        // (see `census`): a communicator over MPI_COMM_WORLD's group is the census itself.
        if raw::congruent_with_world(self.comm).map_err(local)? {
            census::record(own);
        }
        let job = census::job_on_machine(own);
        self.build_on_node(node_comm, ranks, params, agreed, world_rank, job)
    }

    /// The node's part of the set-up over `node_comm`. `one_node`: the communicator is its one
    /// node (`node_comm` is the communicator), with its ranks' (world rank, rank) already known.
    fn build_on_node(
        &mut self,
        node_comm: Comm,
        one_node: Option<Vec<(usize, usize)>>,
        params: &Params,
        agreed: &Agreed,
        world_rank: usize,
        job: census::MachineJob,
    ) -> Step<()> {
        let local = |error: Error| Box::new(NodeFailure { rank: world_rank, error });
        self.local_rank = raw::rank(node_comm).map_err(local)?;
        self.local_size = raw::size(node_comm).map_err(local)?;
        let leader = self.local_rank == 0;
        let mut roots = None;
        // The `MPI_COMM_WORLD` rank and the communicator rank of each rank of this rank's node
        // (by its rank in the node's segment): errors of the node's barrier name MPI ranks.
        let node_ranks: Vec<(usize, usize)>;
        if let Some(ranks) = one_node {
            (node_ranks, self.nodes, self.node) = (ranks, 1, 0);
        } else {
            node_ranks = raw::allgather(node_comm, &[world_rank as u64, self.rank as u64])
                .map_err(local)?
                .iter()
                .map(|w| (w[0] as usize, w[1] as usize))
                .collect();
            // The node roots, in rank order: how many, and this node's place among them. Their
            // communicator is made only where there are several nodes.
            let leaders = raw::allgather(self.comm, &[u64::from(leader)]).map_err(local)?;
            let nodes = leaders.iter().filter(|w| w[0] == 1).count();
            roots = match nodes > 1 {
                true => raw::split(self.comm, leader.then_some(0), self.rank).map_err(local)?,
                false => None,
            };
            // Kept from here on, so that a later step that fails leaves nothing behind either (and
            // until the roots' link, which runs on it, is dropped: see `Drop`).
            if let Some(r) = roots {
                self.made_on_the_way.push(OwnedComm(r));
            }
            let mut place = [0u64; 2];
            if leader {
                place = [nodes as u64, leaders[..self.rank].iter().filter(|w| w[0] == 1).count() as u64];
            }
            raw::broadcast(node_comm, 0, &mut place).map_err(local)?;
            (self.nodes, self.node) = (place[0] as usize, place[1] as usize);
        }

        // The node: its segment, its universe and, across nodes, its part of the hierarchy
        // (the core's set-up, over this communicator's collectives). Waits keep MPI
        // progressing (MPI's progress rule) by probing this communicator's private duplicate,
        // which outlives the node's communicators (see `Drop`); a bad value of the setting was
        // refused with every setting. Every node waits as long as the internode phase: the
        // timeout is the communicator's agreed one (its rank 0's), not each node root's own.
        let progress = params.flag_or(crate::catalogue::PROGRESS, true).unwrap_or(true);
        let spec = barrier::hierarchy::NodeSpec {
            local_rank: self.local_rank,
            shape: JobShape { world_size: self.local_size, nodes: 1, ranks_on_machine: job.ranks, cores: job.cores },
            params: agreed.core.node_params(params, &LAYER),
            progress: progress.then(|| barrier::wait::Progress::new(raw::progress, raw::to_word(self.comm))),
            names: barrier::shm::RankNames {
                world: node_ranks.iter().map(|n| n.0).collect(),
                comm: node_ranks.iter().map(|n| n.1).collect(),
                comm_size: self.size,
                hierarchical: self.nodes > 1,
            },
            across_nodes: self.nodes > 1,
        };
        let exchange = NodeExchange { comm: self.comm, node_comm, world_rank, fault: agreed.fault.clone() };
        let set_up = barrier::hierarchy::set_up_node(&exchange, spec);
        let barrier::hierarchy::Node { seg, universe: node, halves, forced: forced_node } = set_up.map_err(Box::new)?;
        self.test_yields = node.world().wait_policy() == barrier::wait::WaitPolicy::Park;
        let internode = match roots {
            Some(r) if self.nodes > 1 => {
                let injected = exchange.fault("internode");
                let waits = barrier::hierarchy::RootsWaits {
                    pace: barrier::wait::Pace::for_machine(job.ranks, job.cores),
                    timeout: agreed.core.timeout,
                    stall: agreed.core.stall,
                };
                let place = RootPlace { rank: self.rank, size: self.size, limit: params.source("BARRIER_TIMEOUT") };
                Some(crate::internode::set_up(r, place, waits, agreed.core.internode, injected))
            }
            _ => None,
        };
        let internode_runs = roots.is_some() && self.nodes > 1;
        let mut internode =
            barrier::hierarchy::agree(&exchange, internode.transpose(), "set up the internode phase over MPI")
                .map_err(Box::new)?;
        // How the roots meet (timed, if so, once every root's set-up has succeeded), agreed;
        // then on every rank (for `describe`): rank 0 is a root.
        let share = |words: &mut [u64; 3]| raw::broadcast(roots.expect("a root has the roots' communicator"), 0, words);
        let chose = internode.as_mut().map_or(Ok(()), |i| i.choose(agreed.core.internode, share).map(|_| ()));
        barrier::hierarchy::agree(&exchange, chose, "choose how the node roots meet").map_err(Box::new)?;
        let mut chosen = internode.as_ref().map_or([0; 3], |i| i.chosen().to_words());
        if self.nodes > 1 {
            raw::broadcast(self.comm, 0, &mut chosen).map_err(local)?;
        }
        let chosen = barrier::hierarchy::Chosen::from_words(chosen);
        // A fault for a rank the job does not have: said by world rank 0, once per process.
        static OUT_OF_RANGE_SAID: std::sync::Once = std::sync::Once::new();
        if let Some((stage, rank)) = agreed.fault.as_ref().filter(|_| world_rank == 0) {
            let world = raw::size(raw::comm_world()).unwrap_or(usize::MAX);
            if *rank >= world {
                OUT_OF_RANGE_SAID.call_once(|| {
                    barrier::text::say(&format!(
                        "barrier-mpi: {FAULT}={stage}:{rank} will not fire: MPI_COMM_WORLD has {world} ranks (0 to {})",
                        world - 1
                    ))
                });
            }
        }
        if let Some((stage, _)) = agreed.fault.as_ref().filter(|(_, r)| *r == world_rank) {
            // A test that injects a fault which cannot fire must not pass for the wrong reason.
            // (`group` and `exchange` fire outside this set-up, in the scoll component and the
            // background set-up; their tests check the text they fire with.)
            let never = match stage.as_str() {
                "open" if leader => Some("this rank makes its node's segment; `open` fails a node's other ranks"),
                "internode" if !internode_runs => Some(
                    "this rank has no internode phase; `internode` fails a node's first rank when there are several \
                     nodes",
                ),
                _ => None,
            };
            if let Some(why) = never {
                barrier::text::say(&format!("barrier-mpi: {FAULT}={stage}:{world_rank} did not fire: {why}"));
            }
        }
        let node_backend = halves.as_ref().map_or_else(|| node.world().backend(), |h| h.backend());
        // What decided the wait policy: the job's ranks on this machine, not this communicator's.
        let waits = format!(
            "waits {} ({} ranks of the job on {} cores here)",
            node.world().wait_policy(),
            job.ranks,
            job.cores
        );
        if let Some(halves) = halves {
            let solo = self.local_size == 1 && !forced_node;
            self.detail = format!(
                "{} nodes: intranode {} ({}{} over shared memory, {}, {waits}), internode {}",
                self.nodes,
                node_backend,
                if forced_node {
                    format!(
                        "forced by {}: two node barriers around the roots' phase, each ",
                        params.source("BARRIER_BACKEND")
                    )
                } else {
                    String::new()
                },
                halves.algorithm(),
                if solo {
                    "this rank alone on its node: a blocking barrier skips the node's gather and release".to_string()
                } else {
                    barrier::text::count(self.local_size, "rank") + " on this node"
                },
                chosen.describe("dissemination over mpi-p2p", "MPI's barrier", "BARRIER_MPI_INTERNODE=mpi")
            );
            let hier = barrier::hierarchy::Hierarchy::new(
                halves,
                internode,
                Some(seg),
                solo,
                self.rank,
                params.source("BARRIER_TIMEOUT"),
            );
            self.path = Path::Hierarchical { hier: Box::new(hier), _node: node };
        } else {
            self.detail = format!(
                "one node of {}: {} ({}) over shared memory, {waits}{DECLINED_LIST}{}",
                barrier::text::count(self.local_size, "rank"),
                node_backend,
                node.world().algorithm(),
                declined(node.world().selection())
            );
            self.path = Path::Node(node);
        }
        Ok(())
    }

    /// A communicator whose ranks share one node, built in the background
    /// ([`crate::background`]) from its joined node universe: it has no private duplicate
    /// (the set-up made none, and no fallback of it calls MPI), and its waits progress MPI
    /// through `MPI_COMM_SELF` (the segment's progress call, set by the set-up).
    pub(crate) fn on_one_node_built_aside(node: Universe, params: &Params, rank: usize, size: usize) -> Self {
        let world = node.world();
        let detail = format!(
            "one node of {}: {} ({}) over shared memory, waits {}, built in the background after a first \
             MPI_Ibarrier{DECLINED_LIST}{}",
            barrier::text::count(size, "rank"),
            world.backend(),
            world.algorithm(),
            world.wait_policy(),
            declined(world.selection())
        );
        BarrierComm {
            test_yields: world.wait_policy() == barrier::wait::WaitPolicy::Park,
            path: Path::Node(node),
            comm: raw::comm_null(),
            rank,
            size,
            node: 0,
            nodes: 1,
            local_rank: rank,
            local_size: size,
            detail,
            fell_back: None,
            home: (!raw::any_thread_may_call()).then(this_thread),
            params: params.clone(),
            made_on_the_way: Vec::new(),
            build: None,
        }
    }

    /// Waits until every rank of the communicator has called it (MPI_Barrier).
    pub fn barrier(&self) -> Result<()> {
        self.on_home_thread()?;
        self.mpi_still_up()?;
        match &self.path {
            Path::Node(node) => node.world().barrier(),
            Path::Hierarchical { hier, .. } => hier.barrier(),
            Path::Mpi => raw::barrier(self.comm),
        }
    }

    /// An error after `MPI_Finalize` on the paths that call MPI (across nodes, `mpi`): MPI
    /// would abort the job; the one-node path needs no MPI and goes on. Two cheap MPI queries,
    /// off the one-node path.
    #[inline]
    pub(crate) fn mpi_still_up(&self) -> Result<()> {
        if matches!(self.path, Path::Node(_)) || raw::mpi_active() {
            return Ok(());
        }
        Err(Error::InvalidArgument(
            "MPI is finalized: this barrier communicator's barriers across nodes (and MPI_Barrier) call MPI, so they \
             end with MPI_Finalize; call barriers before it"
                .into(),
        ))
    }

    /// An error when MPI allows only the thread that made this communicator to call it and
    /// another thread does (`MPI_THREAD_SINGLE` or `MPI_THREAD_FUNNELED`).
    #[inline]
    pub(crate) fn on_home_thread(&self) -> Result<()> {
        match self.home {
            Some(home) if home != this_thread() => Err(Error::InvalidArgument(
                "this barrier communicator was made on another thread, and MPI was initialized below \
                 MPI_THREAD_SERIALIZED (only that thread may call MPI): use it there, or initialize MPI with \
                 MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE"
                    .into(),
            )),
            _ => Ok(()),
        }
    }

    /// This rank in the communicator.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the communicator.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The backend in use: the node's backend on one node (`dissemination`, `switch`, …),
    /// `hierarchical` across nodes, `mpi` for `MPI_Barrier`.
    pub fn backend(&self) -> &str {
        match &self.path {
            Path::Node(node) => node.world().backend().0,
            Path::Hierarchical { .. } => HIERARCHICAL,
            Path::Mpi => MPI_BACKEND,
        }
    }

    /// How the backend was chosen, in one line: what runs inside and between nodes, or why
    /// the communicator fell back to `MPI_Barrier`.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.backend(), self.detail)
    }

    /// [`describe`](Self::describe) without the list of backends that were not chosen and
    /// why (`barrier info` has it): the line the interposer prints per communicator.
    pub fn summary(&self) -> String {
        let line = self.describe();
        match line.find(DECLINED_LIST) {
            Some(at) => line[..at].to_string(),
            None => line,
        }
    }

    /// Whether a set-up step failed (on any rank) and every rank fell back to `MPI_Barrier`.
    pub fn fell_back(&self) -> bool {
        self.fell_back.is_some()
    }

    /// Whether that failure was this rank's own (its [`describe`](Self::describe) has the error).
    pub fn failed_here(&self) -> bool {
        self.fell_back == Some(true)
    }

    /// This rank's node (its index among the nodes of the communicator).
    pub fn node(&self) -> usize {
        self.node
    }

    /// Nodes among the ranks (machines, or blocks of `BARRIER_MPI_NODE_BLOCK`).
    pub fn num_nodes(&self) -> usize {
        self.nodes
    }

    /// This rank's index on its node.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// Ranks on this rank's node.
    pub fn local_size(&self) -> usize {
        self.local_size
    }

    /// What identifies this barrier for another communicator of the same ranks (the Open MPI
    /// component and the interposer keep a freed communicator's barrier for the next one:
    /// `barrier_mpi::reuse`), where it can serve one: when it is ours (not `MPI_Barrier`, which a
    /// failed set-up falls back to), of two ranks or more, built with the settings' allgather
    /// (not in the background), and every barrier started on it has completed on this rank
    /// without an error. Ranks that all find it quiet are in the same state (see `reuse`).
    #[doc(hidden)]
    pub fn reuse_key(&self) -> Option<ReuseKey> {
        let quiet = match &self.path {
            Path::Node(node) => node.world().is_quiet(),
            Path::Hierarchical { hier, .. } => hier.is_quiet(),
            Path::Mpi => false,
        };
        // (A communicator of one rank is never offered one: the interposer makes no exchange
        // for it.)
        let build = self.build.filter(|_| quiet && self.size > 1)?;
        Some(ReuseKey { private: self.comm, build })
    }

    /// The settings it was made with.
    #[doc(hidden)]
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Messages this rank sent to other nodes for barriers so far (node roots only).
    pub fn network_ops(&self) -> u64 {
        match &self.path {
            Path::Hierarchical { hier, .. } => hier.roots().map_or(0, |r| r.link().messages_sent()),
            _ => 0,
        }
    }
}

impl Drop for BarrierComm {
    fn drop(&mut self) {
        // The node's communicator and the roots' link go first (they record their departure in
        // the node's segment and cancel their own MPI requests on the roots' communicator, which
        // `made_on_the_way` holds), then the communicators made on the way, then the private
        // duplicate.
        self.path = Path::Mpi;
        // Below MPI_THREAD_SERIALIZED only the home thread may call MPI: dropped elsewhere, the
        // private duplicate is left to MPI_Finalize rather than freed from the wrong thread.
        let made_on_the_way = std::mem::take(&mut self.made_on_the_way);
        if self.on_home_thread().is_ok() {
            drop(made_on_the_way);
            raw::free(&mut self.comm);
        } else {
            std::mem::forget(made_on_the_way);
        }
    }
}

/// Where [`BarrierComm::describe`]'s list of the backends not chosen begins.
const DECLINED_LIST: &str = "; declined or not needed:";

fn declined(selection: &barrier::Selection) -> String {
    let mut out = String::new();
    for c in selection.candidates.iter().filter(|c| c.name != selection.backend) {
        out.push_str(&format!(" {} ({});", c.name, c.outcome));
    }
    out.pop();
    if out.is_empty() {
        out.push_str(" none");
    }
    out
}
