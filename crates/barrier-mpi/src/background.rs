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

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier::hierarchy::aside::{AsideSpec, AsideState, NodeAside, Offer};
use barrier::hierarchy::Allgather;
use barrier::shm::{JobShape, Segment};
use barrier::wait::handover::Switch;
use barrier::{Error, Params, Result};

use crate::census::{self, MachineJob};
use crate::comm::BarrierComm;
use crate::glue::{self, McaValues};
use crate::raw::{self, Comm, Gather};
use crate::settings::{self, LAYER};

/// Words of a rank's record before the settings' words.
const HEAD: usize = 7;
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
}

// SAFETY: the MPI handles (the communicator, the gather's request) are plain handles; the
// component calls this only from inside MPI calls (a barrier, the progress callback), where MPI's
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
    /// Built at the first blocking barrier.
    Blocking,
    /// Open MPI's serves every call.
    Declined,
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
    ///
    /// # Safety
    /// MPI is initialized; `comm` is a valid intracommunicator that outlives this value.
    pub unsafe fn start(framework: &'static str, comm: Comm, params: Params, values: &McaValues) -> Result<Background> {
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
        let mut words = vec![
            glue::declines_here(values, size),
            world_rank as u64,
            census::machine_key(),
            u64::from(std::process::id()),
            fd,
            dev,
            ino,
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
        })
    }

    /// What serves the communicator's next barrier call (`blocking`: `MPI_Barrier`), advancing
    /// the set-up first. Every rank gets the same answer for the same call.
    pub fn call(&mut self, blocking: bool) -> Turn<'_> {
        let call = self.calls;
        self.calls += 1;
        self.advance();
        if blocking {
            if let Stage::Gathering { gather, said, began, .. } = &mut self.stage {
                // Every rank started it: waiting here waits for their progress only. Said once
                // (the progress callback may have said it).
                let (framework, comm) = (self.framework, self.comm);
                let report = if *said { Duration::MAX } else { glue::JOIN_REPORT.saturating_sub(began.elapsed()) };
                let waited = gather.wait_asleep(report, |w| glue::not_joined(framework, comm, w));
                if let Err(e) = waited {
                    self.exchange_failed(&e);
                }
                self.advance();
            }
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

    /// Whether the set-up still has a step to advance (its exchange or its join).
    pub fn building(&self) -> bool {
        matches!(self.stage, Stage::Gathering { .. } | Stage::Joining { .. })
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
        let settings_rows: Vec<Vec<u64>> = rows.iter().map(|r| r[HEAD..HEAD + SETTINGS].to_vec()).collect();
        let agreed =
            match settings::agree_settings_over(&Replay { me: self.world_rank, rows: &settings_rows }, &self.params) {
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
        // One node? The machine and, with node blocks, the block of each rank's world rank.
        let node_of = |r: &[u64]| (r[2], (r[1] as usize).checked_div(agreed.core.node_block).unwrap_or(0));
        let mine = node_of(rows[self.rank]);
        if rows.iter().any(|r| node_of(r) != mine) {
            self.stage = Stage::Blocking;
            return;
        }
        let first = rows[0];
        if first[4] == u64::MAX {
            return self.decline(&format!("world rank {} could not make an empty memfd", first[1]));
        }
        let mut mask = [0u64; MASK];
        for r in &rows {
            for (m, w) in mask.iter_mut().zip(&r[HEAD + SETTINGS..]) {
                *m |= w;
            }
        }
        let cores = mask.iter().map(|w| w.count_ones() as usize).sum::<usize>().max(1);
        let job = census::job_on_machine(MachineJob { ranks: self.size, cores });
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
        // A test's fault (BARRIER_MPI_FAULT): `open` on a node's other rank, `join` on any.
        let world_rank = self.world_rank;
        let fault = move |stage: &str| match &agreed.fault {
            Some((s, r)) if s == stage && *r == world_rank => {
                Err(Error::Setup(format!("fault injected by {}={stage}:{world_rank}", settings::FAULT)))
            }
            _ => Ok(()),
        };
        let open_limit = agreed.core.timeout.unwrap_or(OPEN_LIMIT).max(OPEN_LIMIT);
        let spec = AsideSpec {
            local_rank: self.rank,
            shape,
            params: node_params,
            progress: Some(progress),
            names,
            first: Offer { pid: first[3] as u32, fd: first[4] as i32, identity: (first[5], first[6]) },
            memfd,
            open_limit,
            fault: Box::new(fault),
        };
        match NodeAside::start(spec) {
            Ok(aside) => self.stage = Stage::Joining { aside, world },
            Err(e) => self.decline(&format!("building it in the background failed: {e}")),
        }
    }

    /// A join under way or failed: no rank switches, and the thread stops waiting.
    fn give_up_join(&self) {
        if let Stage::Joining { aside, .. } = &self.stage {
            aside.give_up();
        }
    }

    /// The thread finished: ready, or declined.
    fn joined(&mut self) {
        let Stage::Joining { aside, world, .. } = std::mem::replace(&mut self.stage, Stage::Declined) else {
            unreachable!("joined() runs in the joining stage")
        };
        match aside.finish() {
            Ok((seg, universe)) => {
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

/// How long a node's other rank retries to map the first rank's segment at least (its
/// `BARRIER_TIMEOUT` if longer): the first rank lays it out at its own next MPI call.
const OPEN_LIMIT: Duration = Duration::from_secs(60);

impl Drop for Background {
    fn drop(&mut self) {
        // A thread still joining must not wait for ranks that will never come.
        self.give_up_join();
    }
}
