//! A communicator's barrier built in the background, for a component whose communicator's first
//! barrier is `MPI_Ibarrier` (issue 50 item 8). Not for users.
//!
//! The set-up of [`BarrierComm`] is collective and waits for every rank, which `MPI_Ibarrier`
//! must never do: in the NBX pattern of sparse data exchange (`MPI_Issend`, then
//! `MPI_Ibarrier` while probing for messages), a rank's send completes only once its partner,
//! in its own probe loop, receives it, so a rank that waited inside `MPI_Ibarrier` for the
//! others would deadlock the job. So the first `MPI_Ibarrier` starts a set-up that nothing
//! waits for, the barrier the communicator had (Open MPI's) serves every call meanwhile, and
//! every rank switches to ours at the same call:
//!
//! 1. **One exchange** (in that first call, on every rank: `MPI_Iallgather` on the user's
//!    communicator, which every rank starts in the same collective call, so it is ordered like
//!    the program's collectives). Each rank brings what the blocking set-up agrees on in several
//!    steps: its component's verdict (`disable`, `min_comm_size`), the settings' agreement's
//!    words ([`barrier::hierarchy::agree_settings`], recorded here and replayed on the gathered
//!    words), its machine (host, boot and PID namespace), its CPU mask, and an empty memfd of
//!    its own with its descriptor and identity, made before anyone knows which rank is a node's
//!    first.
//! 2. **The verdict**, read alike on every rank from the same words once the gather completed
//!    (tested by the progress callback and at each barrier call; a blocking `MPI_Barrier` waits
//!    for it, asleep, since every rank started it): the settings or a component decline (the
//!    communicator stays Open MPI's), the ranks span several machines or node blocks (built at
//!    the first blocking `MPI_Barrier`, as before: the roots' set-up needs the communicators
//!    this path cannot make without blocking), or one node.
//! 3. **The node's segment and universe**, made aside by the core
//!    ([`barrier::hierarchy::aside`]): the first rank lays the segment out in its memfd, the
//!    others drop theirs and map the first's, and a thread of ours joins the node's universe (it
//!    waits in shared memory and runs no MPI: the segment's progress call is skipped on it). The
//!    rank yields its core at each call meanwhile, so that the thread runs.
//! 4. **The hand-over** ([`barrier::wait::handover`]): a rank whose thread has joined marks
//!    itself ready in the segment with its count of barrier calls so far; the last one ready
//!    fixes the switch call above every call any rank has made on Open MPI's barrier. From that
//!    call on, every rank's barriers are ours.
//!
//! A failure on one rank (its join, the segment) marks the hand-over failed where the segment
//! is mapped (no rank switches), and the others' joins end on the segment's abort or their
//! timeout; the communicator then stays Open MPI's on every rank, said once. A failure of the
//! exchange itself on one rank (it cannot start, or MPI reports an error) cannot be agreed: the
//! others have started it and go on with it. That rank ends the job, saying why.
//!
//! # Across nodes
//!
//! Where the component offers a private channel on the communicator ([`PrivateP2p`]) and the
//! ranks span nodes, the switch cannot be decided in a node's segment, so it is fixed in
//! advance: from its second barrier call on, every barrier is ours (the flights of `ahead.rs`).
//! Each rank decides that in the first call, from what it knows alone: its component serves
//! here (`disable`, `min_comm_size`, the settings' backend list) and the MPI library places a
//! rank of the communicator on another machine (or in another node block). It says so in the
//! exchange, and the verdict checks that every rank decided alike; where they did not (settings
//! that differ between ranks), the barriers cannot be agreed without waiting, and every rank ends
//! the job, saying which ranks differ. Then each node's set-up runs aside as on one node, making
//! the node's part of the hierarchy too; the node roots' link is the private channel. The first
//! flight agrees, across all ranks, whether every set-up succeeded.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::ffi::c_int;

use barrier::hierarchy::aside::{AsideSpec, AsideState, NodeAside, Offer, JOIN_SLACK};
use barrier::hierarchy::{Allgather, Hierarchy, Names, Roots, RootsWaits};
use barrier::shm::{JobShape, Segment};
use barrier::wait::handover::Switch;
use barrier::wait::{poll_until, Pace};
use barrier::{Error, Params, Result};

use crate::ahead::{self, Ahead, Built};
use crate::census::{self, MachineJob};
use crate::channel::{ChannelLink, PrivateP2p};
use crate::comm::BarrierComm;
use crate::glue::{self, McaValues};
use crate::internode::{self, RootPlace};
use crate::raw::{self, Comm, Gather};
use crate::settings::{self, LAYER};

/// Words of a rank's record before the settings' words.
const HEAD: usize = 8;
/// The settings' agreement's words ([`barrier::hierarchy::agree_settings`]).
const SETTINGS: usize = 10;
/// The CPU mask's words.
const MASK: usize = 16;
const RECORD: usize = HEAD + SETTINGS + MASK;

/// What serves a barrier call of a communicator built in the background.
#[derive(Debug)]
pub enum Turn<'a> {
    /// The barrier the communicator had (Open MPI's).
    Previous,
    /// Ours.
    Ours(&'a BarrierComm),
    /// A blocking call where the ranks span several nodes: build it now, as a first
    /// `MPI_Barrier` does (every rank does it at this call).
    BuildNow,
    /// Across nodes, ours from the second call on: this flight ([`Background::drive_ahead`]).
    Ahead(u64),
    /// Across nodes: the communicator broke at an earlier barrier.
    Failed(Error),
}

/// A communicator's barrier under construction without blocking (see the module docs).
#[derive(Debug)]
pub struct Background {
    comm: Comm,
    params: Params,
    framework: &'static str,
    rank: usize,
    size: usize,
    world_rank: usize,
    /// Barrier calls made on the communicator since the first (number of the next).
    calls: u64,
    stage: Stage,
    verbose: bool,
    /// Across nodes, ours from the second call on (see the module docs).
    ahead: Option<Ahead>,
    /// The private channel and its first reserved tag (the roots' is the next one down).
    channel: Option<(PrivateP2p, c_int)>,
    /// Every rank's world rank, once gathered.
    world: Vec<usize>,
    /// How a split-phase barrier served ahead that finds itself waiting paces its rank: yield
    /// until the machine's ranks and cores are known, then only where ranks outnumber cores.
    pace: Pace,
}

// SAFETY: the MPI handles (the communicator, the gather's request, and across nodes the private
// channel's requests and the hierarchy's) are plain handles, and the rest is ours (the node's
// segment and communicators are `Send`; the channel's cells are touched only by the thread that
// holds the component's lock of this communicator); the component calls this only from inside
// MPI calls (a barrier, the progress callback), one thread at a time under that lock, where MPI's
// thread level already allows the calling thread to call MPI.
unsafe impl Send for Background {}

#[derive(Debug)]
enum Stage {
    Gathering {
        gather: Gather,
        memfd: Option<OwnedFd>,
        began: Instant,
        said: bool,
    },
    Joining {
        aside: NodeAside,
        world: Vec<usize>,
    },
    Ready {
        comm: Box<BarrierComm>,
        seg: Arc<Segment>,
    },
    Switched(Box<BarrierComm>),
    /// Across nodes: the node's set-up aside, then the hierarchy.
    AheadJoining {
        aside: NodeAside,
        plan: Box<Plan>,
    },
    /// Across nodes: this rank's set-up resolved ([`Ahead`] serves).
    AheadResolved,
    /// Built at the first blocking barrier.
    Blocking,
    /// Open MPI's serves every call.
    Declined,
}

/// Across nodes: what the hierarchy needs once the node's set-up aside has finished.
#[derive(Debug)]
struct Plan {
    /// The roots' phase, on a node's first rank.
    roots: Option<Roots<ChannelLink>>,
    waits: RootsWaits,
    nodes: usize,
    limit: String,
}

/// The core's agreement's allgather, recorded: the words are kept, and the call fails (the
/// gather is made with the rest of the record).
struct Record {
    me: usize,
    words: std::cell::RefCell<Vec<u64>>,
}

impl Allgather for Record {
    fn me(&self) -> usize {
        self.me
    }

    fn allgather(&self, words: &[u64]) -> Result<Vec<Vec<u64>>> {
        *self.words.borrow_mut() = words.to_vec();
        Err(Error::Setup("recorded".into()))
    }
}

/// The core's agreement's allgather, replayed from the gathered records.
struct Replay<'a> {
    me: usize,
    rows: &'a [Vec<u64>],
}

impl Allgather for Replay<'_> {
    fn me(&self) -> usize {
        self.me
    }

    fn allgather(&self, words: &[u64]) -> Result<Vec<Vec<u64>>> {
        debug_assert_eq!(words.len(), SETTINGS);
        Ok(self.rows.to_vec())
    }
}

impl Background {
    /// Starts the set-up of `comm`'s barrier in its first barrier call, an `MPI_Ibarrier`
    /// (collective: every rank's component makes this call in the same call; it does not block).
    /// `p2p`: the private channel, where the component offers one (then a communicator across
    /// nodes is ours from its second call: see the module docs).
    ///
    /// # Safety
    /// MPI is initialized; `comm` is a valid intracommunicator that outlives this value; `p2p`'s
    /// functions may be called on it.
    pub unsafe fn start(
        framework: &'static str,
        comm: Comm,
        params: Params,
        values: &McaValues,
        p2p: Option<PrivateP2p>,
    ) -> Result<Background> {
        let size = raw::size(comm)?;
        let rank = raw::rank(comm)?;
        let world_rank = raw::rank(raw::comm_world())?;
        let record = Record { me: world_rank, words: Default::default() };
        let _ = settings::agree_settings_over(&record, &params);
        let settings = record.words.into_inner();
        if settings.len() != SETTINGS {
            return Err(Error::Setup(format!("the settings' agreement has {} words, not {SETTINGS}", settings.len())));
        }
        // An empty memfd, offered in case this rank is its node's first.
        let memfd = barrier::sys::memfd_empty("barrier-node").ok();
        let offer = memfd.as_ref().and_then(|fd| {
            let (dev, ino) = barrier::sys::fd_identity(fd.as_raw_fd()).ok()?;
            Some([fd.as_raw_fd() as u64, dev, ino])
        });
        let [fd, dev, ino] = offer.unwrap_or([u64::MAX, 0, 0]);
        let here = glue::declines_here(values, size);
        // The private channel's tags: reserved by every rank in this call, so every rank gets
        // the same ones (and the communicator's later non-blocking collectives stay in step).
        // SAFETY: the caller's contract.
        let channel = p2p.map(|p| (p, unsafe { (p.reserve_tags)(comm, 2) }));
        // Ours from the second call on, where this rank serves and the ranks span nodes (the
        // settings' own backend list and node block: words 2 and 1 of the agreement's).
        let ahead = match p2p {
            Some(p) if here == 0 && settings[2] == 0 => spans_nodes(comm, rank, settings[1] as usize, &p)?,
            _ => false,
        };
        let mut words = vec![
            here,
            world_rank as u64,
            census::machine_key(),
            u64::from(std::process::id()),
            fd,
            dev,
            ino,
            u64::from(ahead),
        ];
        words.extend_from_slice(&settings);
        words.extend_from_slice(&census::affinity_mask());
        debug_assert_eq!(words.len(), RECORD);
        if glue::fault_here(&params, "exchange") {
            return Err(Error::Setup(format!("fault injected by BARRIER_MPI_FAULT=exchange:{world_rank}")));
        }
        let gather = Gather::start(comm, words)?;
        let verbose = params.flag("BARRIER_VERBOSE").unwrap_or(false);
        Ok(Background {
            comm,
            params,
            framework,
            rank,
            size,
            world_rank,
            calls: 0,
            stage: Stage::Gathering { gather, memfd, began: Instant::now(), said: false },
            verbose,
            ahead: ahead.then(|| Ahead::new(rank)),
            channel,
            world: Vec::new(),
            pace: Pace::Yield,
        })
    }

    /// What serves the communicator's next barrier call (`blocking`: `MPI_Barrier`), advancing
    /// the set-up first. Every rank gets the same answer for the same call.
    pub fn call(&mut self, blocking: bool) -> Turn<'_> {
        let call = self.calls;
        self.calls += 1;
        self.advance();
        if let Some(ahead) = self.ahead.as_mut().filter(|_| call > 0) {
            return match ahead.start() {
                Ok(flight) => Turn::Ahead(flight),
                Err(e) => Turn::Failed(e),
            };
        }
        if blocking {
            self.wait_for_exchange();
            if matches!(self.stage, Stage::Blocking) {
                // Every rank knows it now: the gather completed everywhere before this call.
                self.stage = Stage::Declined;
                return Turn::BuildNow;
            }
        }
        if let Stage::Ready { seg, .. } = &self.stage {
            if seg.handover().call(call) == Switch::New {
                let Stage::Ready { comm, .. } = std::mem::replace(&mut self.stage, Stage::Declined) else {
                    unreachable!()
                };
                if self.verbose && self.rank == 0 {
                    glue::say(
                        &format!("{}/fastbar", self.framework),
                        &format!(
                            "barriers on a communicator of {} ranks: ours from its barrier call {call} on (built in \
                             the background after its first MPI_Ibarrier: {})",
                            self.size,
                            comm.summary()
                        ),
                    );
                }
                self.stage = Stage::Switched(comm);
            }
        }
        match &self.stage {
            Stage::Switched(comm) => Turn::Ours(comm),
            _ => Turn::Previous,
        }
    }

    /// A blocking call: waits for the exchange, asleep. Every rank started it: waiting here
    /// waits for their progress only. Said once (the progress callback may have said it).
    fn wait_for_exchange(&mut self) {
        if let Stage::Gathering { gather, said, began, .. } = &mut self.stage {
            let (framework, comm) = (self.framework, self.comm);
            let report = if *said { Duration::MAX } else { glue::JOIN_REPORT.saturating_sub(began.elapsed()) };
            let waited = gather.wait_asleep(report, |w| glue::not_joined(framework, comm, w));
            if let Err(e) = waited {
                self.exchange_failed(&e);
            }
            self.advance();
        }
    }

    /// This rank in the communicator.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Whether a split-phase barrier served ahead that finds itself waiting should give the
    /// core away (the machine's ranks may outnumber its cores).
    pub fn waits_yield(&self) -> bool {
        matches!(self.pace, Pace::Yield)
    }

    /// Whether the set-up still has a step to advance (its exchange or its join).
    pub fn building(&self) -> bool {
        matches!(self.stage, Stage::Gathering { .. } | Stage::Joining { .. } | Stage::AheadJoining { .. })
    }

    /// Advances flight `flight` ([`Turn::Ahead`]) without blocking, or (`blocking`) until it
    /// completes, this rank's set-up first: `Ok(true)` once it has completed. A failure breaks
    /// the communicator (every later call fails too).
    pub fn drive_ahead(&mut self, flight: u64, blocking: bool) -> Result<bool> {
        if blocking {
            // The exchange asleep, then the node's join (milliseconds, done by a thread of ours:
            // this rank yields it the core), which the aside itself bounds.
            self.wait_for_exchange();
            poll_until(Pace::Yield, |_| {
                self.advance();
                Ok::<_, Error>(self.ahead.as_ref().is_none_or(Ahead::resolved))
            })?;
        } else {
            self.advance();
        }
        let Some(ahead) = self.ahead.as_mut() else {
            return Err(Error::InvalidArgument("a flight of a communicator not served ahead".into()));
        };
        let done = ahead.drive(flight, blocking);
        if let Some(agreed) = ahead.take_agreed() {
            self.say_agreed(agreed);
        }
        done
    }

    /// The first flight agreed the way of every later one: said by rank 0 where verbose.
    fn say_agreed(&self, agreed: ahead::Agreed) {
        if !self.verbose || self.rank != 0 {
            return;
        }
        let way = match (agreed, self.ahead.as_ref().and_then(Ahead::detail)) {
            (ahead::Agreed::Hierarchy, Some(detail)) => detail.to_string(),
            _ => "a dissemination among its ranks over the private channel (the hierarchy's set-up failed on a \
                  rank, which said why)"
                .to_string(),
        };
        glue::say(
            &format!("{}/fastbar", self.framework),
            &format!(
                "barriers on a communicator of {} ranks: ours from its barrier call 1 on (its first was \
                 MPI_Ibarrier and its ranks span nodes; set up in the background): {way}",
                self.size
            ),
        );
    }

    /// Ours, once every rank switched to it.
    pub fn switched(&self) -> Option<&BarrierComm> {
        match &self.stage {
            Stage::Switched(comm) => Some(comm),
            _ => None,
        }
    }

    /// Advances the set-up without blocking (the progress callback's, and each call's).
    pub fn advance(&mut self) {
        match &mut self.stage {
            Stage::Gathering { gather, began, said, .. } => match gather.test() {
                Ok(true) => self.gathered(),
                Ok(false) => {
                    if !*said && began.elapsed() >= glue::JOIN_REPORT {
                        *said = true;
                        let waited = began.elapsed();
                        self.still_gathering(waited);
                    }
                }
                Err(e) => self.exchange_failed(&e),
            },
            Stage::Joining { aside, .. } => match aside.poll() {
                AsideState::Finished => self.joined(),
                // Nobody switches; the others' joins end on the segment's abort.
                AsideState::Overdue(limit) => {
                    self.decline(&format!("the node's other ranks did not join its barrier within {limit:?}"))
                }
                AsideState::Running => {}
            },
            Stage::AheadJoining { aside, plan } => match aside.poll() {
                AsideState::Finished => self.joined_ahead(),
                AsideState::Overdue(limit) => {
                    let (why, waits) =
                        (format!("the node's other ranks did not join its barrier within {limit:?}"), plan.waits);
                    self.give_up_join();
                    self.failed_ahead(Some(&why), waits);
                }
                AsideState::Running => {}
            },
            _ => {}
        }
    }

    /// Said once by the progress callback when the exchange has not completed after
    /// [`glue::JOIN_REPORT`]: harmless where a rank computes without calling MPI, a hang of the
    /// program's barriers where a rank's component never serves this communicator.
    fn still_gathering(&self, waited: Duration) {
        glue::say(
            &format!("{}/fastbar", self.framework),
            &format!(
                "world rank {}: the set-up of our barrier for {} ({} ranks), started at its first MPI_Ibarrier \
                 {waited:.1?} ago, still waits for every rank's part of its exchange; Open MPI's barrier serves \
                 meanwhile. A rank that computes without calling MPI delays it (harmless); a rank whose component \
                 never serves this communicator (not loaded there, or a lower or 0 coll_fastbar_priority there) \
                 never sends it, and the program's barriers there hang: give every rank the same component and \
                 settings (ompi_info --param coll fastbar --level 9 on each node).",
                self.world_rank,
                raw::name(self.comm),
                self.size
            ),
        );
    }

    /// The exchange failed here (an MPI error): the others may have this rank's part and go on
    /// (to a build at their first `MPI_Barrier`, or a join that waits for this rank), and this
    /// rank cannot tell them that it declines. It ends the job, saying why.
    fn exchange_failed(&self, e: &Error) -> ! {
        glue::abort_job(
            &format!("{}/fastbar", self.framework),
            &format!(
                "world rank {}: the exchange of the set-up of our barrier for {} ({} ranks) failed here ({e}); \
                 the other ranks go on with it and would wait for this one",
                self.world_rank,
                raw::name(self.comm),
                self.size
            ),
        )
    }

    fn decline(&mut self, why: &str) {
        self.give_up_join();
        glue::say(
            &format!("{}/fastbar", self.framework),
            &format!(
                "world rank {}: barriers on a communicator of {} ranks stay Open MPI's own: {why}",
                self.world_rank, self.size
            ),
        );
        self.stage = Stage::Declined;
    }

    /// The gather completed: the verdict (see the module docs).
    fn gathered(&mut self) {
        let Stage::Gathering { mut gather, memfd, .. } = std::mem::replace(&mut self.stage, Stage::Declined) else {
            unreachable!()
        };
        let all = gather.take();
        let rows: Vec<&[u64]> = all.chunks(RECORD).collect();
        self.world = rows.iter().map(|r| r[1] as usize).collect();
        if rows.iter().any(|r| r[7] != rows[0][7]) {
            self.mixed(&rows);
        }
        if self.ahead.is_some() {
            return self.gathered_ahead(&rows, memfd);
        }
        let agreed = match self.agree_gathered(&rows) {
            Ok(a) => a,
            Err(e) => {
                // Agreed: every rank declines; the rank whose own setting is bad says which.
                if !matches!(e, Error::PeerInvalidParam { .. }) || self.rank == 0 {
                    self.decline(&e.to_string());
                }
                return;
            }
        };
        if agreed.core.own_only {
            return;
        }
        let here: Vec<u64> = rows.iter().map(|r| r[0]).collect();
        match glue::verdict(self.framework, self.comm, &here) {
            Ok(None) => {}
            Ok(Some(_)) => return,
            Err(e) => return self.decline(&e.to_string()),
        }
        // One node?
        let block = agreed.core.node_block;
        let mine = node_key(rows[self.rank], block);
        if rows.iter().any(|r| node_key(r, block) != mine) {
            self.stage = Stage::Blocking;
            return;
        }
        let first = rows[0];
        if first[4] == u64::MAX {
            return self.decline(&format!("world rank {} could not make an empty memfd", first[1]));
        }
        let own = census::machine_of_masks(rows.iter().map(|r| &r[HEAD + SETTINGS..]));
        let job = census::job_on_machine(MachineJob { ranks: self.size, cores: own.cores });
        let shape = JobShape { world_size: self.size, nodes: 1, ranks_on_machine: job.ranks, cores: job.cores };
        let node_params = agreed.core.node_params(&self.params, &LAYER);
        let progress = barrier::wait::Progress::new(raw::progress, raw::to_word(raw::comm_self()));
        let names = barrier::shm::RankNames {
            world: rows.iter().map(|r| r[1] as usize).collect(),
            comm: (0..self.size).collect(),
            comm_size: self.size,
            hierarchical: false,
        };
        let world = names.world.clone();
        let spec = AsideSpec {
            local_rank: self.rank,
            shape,
            params: node_params,
            progress: Some(progress),
            names,
            first: offer_of(first),
            memfd,
            open_limit: open_limit(&agreed),
            fault: self.fault(&agreed),
            across_nodes: false,
        };
        match NodeAside::start(spec) {
            Ok(aside) => self.stage = Stage::Joining { aside, world },
            Err(e) => self.decline(&format!("building it in the background failed: {e}")),
        }
    }

    /// A join under way or failed: no rank switches, and the thread stops waiting.
    fn give_up_join(&self) {
        if let Stage::Joining { aside, .. } | Stage::AheadJoining { aside, .. } = &self.stage {
            aside.give_up();
        }
    }

    /// The thread finished: ready, or declined.
    fn joined(&mut self) {
        let Stage::Joining { aside, world, .. } = std::mem::replace(&mut self.stage, Stage::Declined) else {
            unreachable!("joined() runs in the joining stage")
        };
        match aside.finish() {
            Ok(barrier::hierarchy::Node { seg, universe, .. }) => {
                let comm = BarrierComm::on_one_node_built_aside(universe, &self.params, self.rank, self.size, world);
                seg.handover().ready(self.calls);
                self.stage = Stage::Ready { comm: Box::new(comm), seg };
            }
            // Another rank's failure (which that rank says) ended this one's join: quiet here.
            Err(Error::Aborted { .. }) => {}
            // The thread marked the hand-over failed where it had mapped the segment.
            Err(e) => self.decline(&format!("building it in the background failed: {e}")),
        }
    }
}

/// Across nodes (see the module docs).
impl Background {
    /// Some ranks made their barriers ours from the second call on and others did not: they
    /// cannot be agreed any more without waiting (the calls since have gone two ways). Every
    /// rank ends the job, saying which ranks differ.
    fn mixed(&self, rows: &[&[u64]]) -> ! {
        let ranks = |ahead: bool| -> Vec<usize> { (0..rows.len()).filter(|&r| (rows[r][7] != 0) == ahead).collect() };
        let f = self.framework;
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
                self.world_rank,
                raw::name(self.comm),
                self.size,
                ranks(true),
                ranks(false),
                differ.join("; ")
            ),
        )
    }

    /// The exchange completed on a communicator served ahead: the settings, then this node's
    /// set-up aside and the node roots' link over the private channel.
    fn gathered_ahead(&mut self, rows: &[&[u64]], memfd: Option<OwnedFd>) {
        let agreed = match self.agree_gathered(rows) {
            Ok(a) => a,
            Err(e) => {
                // Agreed: every rank fails its set-up; the rank whose own setting is bad says
                // which.
                let say = !matches!(e, Error::PeerInvalidParam { .. }) || self.rank == 0;
                let why = e.to_string();
                return self.failed_ahead(say.then_some(why.as_str()), self.local_waits());
            }
        };
        // The nodes, in the order of their first ranks.
        let block = agreed.core.node_block;
        let mut firsts: Vec<usize> = Vec::new();
        for (rank, row) in rows.iter().enumerate() {
            if !firsts.iter().any(|&f| node_key(rows[f], block) == node_key(row, block)) {
                firsts.push(rank);
            }
        }
        let mine = node_key(rows[self.rank], block);
        let node = firsts.iter().position(|&f| node_key(rows[f], block) == mine).expect("this rank's node has a first");
        let local: Vec<usize> = (0..rows.len()).filter(|&r| node_key(rows[r], block) == mine).collect();
        let local_rank = local.iter().position(|&r| r == self.rank).expect("this rank is on its node");
        let first = rows[local[0]];
        // The job on this machine: the communicator's ranks here, and their cores.
        let here = census::machine_of_masks(rows.iter().filter(|r| r[2] == mine.0).map(|r| &r[HEAD + SETTINGS..]));
        let job = census::job_on_machine(here);
        self.pace = Pace::for_machine(job.ranks, job.cores);
        let waits = RootsWaits { pace: self.pace, timeout: agreed.core.timeout, stall: agreed.core.stall };
        if first[4] == u64::MAX {
            let why = format!("world rank {} could not make an empty memfd", first[1]);
            return self.failed_ahead(Some(&why), waits);
        }
        let (p2p, tag) = self.channel.expect("a communicator served ahead has the private channel");
        let limit = self.params.source("BARRIER_TIMEOUT");
        // The node roots' link, on each node's first rank.
        let roots = (local_rank == 0).then(|| {
            let link = ChannelLink::new(self.comm, tag - 1, p2p, firsts.clone(), node);
            let names = self.names(&firsts, node, internode::node_root);
            Roots::new(link, None, names, waits)
        });
        let spec = AsideSpec {
            local_rank,
            shape: JobShape { world_size: local.len(), nodes: 1, ranks_on_machine: job.ranks, cores: job.cores },
            params: agreed.core.node_params(&self.params, &LAYER),
            progress: Some(barrier::wait::Progress::new(raw::progress, raw::to_word(raw::comm_self()))),
            names: barrier::shm::RankNames {
                world: local.iter().map(|&r| self.world[r]).collect(),
                comm: local.clone(),
                comm_size: self.size,
                hierarchical: firsts.len() > 1,
            },
            first: offer_of(first),
            memfd,
            open_limit: open_limit(&agreed),
            fault: self.fault(&agreed),
            across_nodes: true,
        };
        match NodeAside::start(spec) {
            Ok(aside) => {
                let plan = Plan { roots, waits, nodes: firsts.len(), limit };
                self.stage = Stage::AheadJoining { aside, plan: Box::new(plan) };
            }
            Err(e) => self.failed_ahead(Some(&format!("building it in the background failed: {e}")), waits),
        }
    }

    /// The node's set-up aside finished: the hierarchy, or a failure.
    fn joined_ahead(&mut self) {
        let Stage::AheadJoining { aside, plan } = std::mem::replace(&mut self.stage, Stage::AheadResolved) else {
            unreachable!("joined_ahead() runs in its joining stage")
        };
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
                let hier = Hierarchy::new(halves, roots, node.seg, alone, self.rank, limit);
                self.resolve_ahead(Some(Built { hier, _node: node.universe, detail }), waits);
            }
            // Another rank's failure (which that rank says) ended this one's join.
            Err(Error::Aborted { .. }) => self.failed_ahead(None, waits),
            Err(e) => self.failed_ahead(Some(&format!("building it in the background failed: {e}")), waits),
        }
    }

    /// This rank's set-up failed (`why`, said; `None`: another rank's failure, which that rank
    /// says): the flights run flat, with `waits` (the agreed ones, or this rank's own where the
    /// settings could not be agreed).
    fn failed_ahead(&mut self, why: Option<&str>, waits: RootsWaits) {
        if let Some(why) = why {
            glue::say(
                &format!("{}/fastbar", self.framework),
                &format!(
                    "world rank {}: the hierarchy for a communicator of {} ranks could not be set up here ({why}); \
                     its barriers are a dissemination among its ranks over the private channel instead, on every \
                     rank",
                    self.world_rank, self.size
                ),
            );
        }
        self.resolve_ahead(None, waits);
    }

    /// The waits of this rank's own settings (where they could not be agreed).
    fn local_waits(&self) -> RootsWaits {
        RootsWaits {
            pace: Pace::Yield,
            timeout: self.params.duration("BARRIER_TIMEOUT").ok().flatten(),
            stall: self.params.stall_report(),
        }
    }

    /// This rank's set-up resolved: the flights begin (the first carries `built.is_none()`). The
    /// first flight's timeout allows for the others' set-up too: a node's first rank may wait
    /// its open limit and [`JOIN_SLACK`] more for a node's other rank before it gives up.
    fn resolve_ahead(&mut self, built: Option<Built>, waits: RootsWaits) {
        self.stage = Stage::AheadResolved;
        let (p2p, tag) = self.channel.expect("a communicator served ahead has the private channel");
        let everyone: Vec<usize> = (0..self.size).collect();
        let link = ChannelLink::new(self.comm, tag, p2p, everyone.clone(), self.rank).agreeing(built.is_none());
        let names = self.names(&everyone, self.rank, |j, w| format!("world rank {w} (communicator rank {j})"));
        let set_up = waits.timeout.unwrap_or(OPEN_LIMIT).max(OPEN_LIMIT) + JOIN_SLACK;
        let first = RootsWaits { timeout: waits.timeout.map(|t| t + set_up), ..waits };
        let flat = Roots::new(link, None, names, first);
        if let Some(ahead) = self.ahead.as_mut() {
            ahead.resolve(flat, built, waits);
        }
    }

    /// How reports name the members of a link among `members` (communicator ranks), this rank
    /// being member `index`.
    fn names(&self, members: &[usize], index: usize, name: fn(usize, usize) -> String) -> Names {
        let place = RootPlace { rank: self.rank, size: self.size, limit: self.params.source("BARRIER_TIMEOUT") };
        let members: Vec<(usize, usize)> = members.iter().map(|&j| (j, self.world[j])).collect();
        internode::names(place, self.world_rank, index, &members, name)
    }
}

/// The set-up's steps both ways share.
impl Background {
    /// The settings' agreement, replayed from the gathered records.
    fn agree_gathered(&self, rows: &[&[u64]]) -> Result<settings::Agreed> {
        let settings_rows: Vec<Vec<u64>> = rows.iter().map(|r| r[HEAD..HEAD + SETTINGS].to_vec()).collect();
        settings::agree_settings_over(&Replay { me: self.world_rank, rows: &settings_rows }, &self.params)
    }

    /// A test's fault (`BARRIER_MPI_FAULT`): `open` on a node's other rank, `join` on any.
    fn fault(&self, agreed: &settings::Agreed) -> barrier::hierarchy::aside::Fault {
        let (world_rank, fault) = (self.world_rank, agreed.fault.clone());
        Box::new(move |stage: &str| match &fault {
            Some((s, r)) if s == stage && *r == world_rank => {
                Err(Error::Setup(format!("fault injected by {}={stage}:{world_rank}", settings::FAULT)))
            }
            _ => Ok(()),
        })
    }
}

/// A rank's node: its machine and, with node blocks of `block` ranks, its world rank's block.
fn node_key(row: &[u64], block: usize) -> (u64, usize) {
    (row[2], (row[1] as usize).checked_div(block).unwrap_or(0))
}

/// Where a node's first rank offered its memfd.
fn offer_of(first: &[u64]) -> Offer {
    Offer { pid: first[3] as u32, fd: first[4] as i32, identity: (first[5], first[6]) }
}

/// How long a node's other rank retries to map its first rank's segment: [`OPEN_LIMIT`], or the
/// agreed timeout where longer.
fn open_limit(agreed: &settings::Agreed) -> Duration {
    agreed.core.timeout.unwrap_or(OPEN_LIMIT).max(OPEN_LIMIT)
}

/// Whether `comm`'s ranks span nodes as this rank sees them alone: a rank on another machine
/// (as the MPI library places it), or, with node blocks of `block` ranks, in another block.
fn spans_nodes(comm: Comm, rank: usize, block: usize, p2p: &PrivateP2p) -> Result<bool> {
    let world = raw::world_ranks(comm)?;
    let my_block = world[rank].checked_div(block);
    Ok((0..world.len()).any(|r| {
        // SAFETY: `comm` is valid (the caller's contract) and `r` one of its ranks.
        let here = r == rank || unsafe { (p2p.on_this_machine)(comm, r as c_int) } != 0;
        !here || world[r].checked_div(block) != my_block
    }))
}

/// How long a node's other rank retries to map the first rank's segment at least (its
/// `BARRIER_TIMEOUT` if longer): the first rank lays it out at its own next MPI call.
const OPEN_LIMIT: Duration = Duration::from_secs(60);

impl Drop for Background {
    fn drop(&mut self) {
        // A thread still joining must not wait for ranks that will never come.
        self.give_up_join();
    }
}
