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
//!    steps: its component's verdict (`disable`, `min_comm_size`), its side of the settings'
//!    agreement ([`barrier::hierarchy::Proposal`], decided on the gathered words), its machine
//!    (host, boot and PID namespace), its CPU mask, and an empty memfd of its own with its
//!    descriptor and identity, made before anyone knows which rank is a node's first.
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
//! Across nodes, where the component offers a private channel, the switch is fixed in advance
//! instead: see the docs of `background/across.rs`.

mod across;
mod record;

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier::hierarchy::aside::{AsideState, NodeAside};
use barrier::shm::Segment;
use barrier::wait::handover::Switch;
use barrier::wait::{poll_until, Pace};
use barrier::{Error, Params, Result};

use crate::census;
use crate::channel::PrivateP2p;
use crate::comm::BarrierComm;
use crate::glue::{self, McaValues};
use crate::raw::{self, Comm, Gather};

use across::{mixed, spans_nodes, Across};
use record::{Member, COMPONENT, FRAMEWORK, RECORD};

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
    me: Member,
    /// Barrier calls made on the communicator since the first (number of the next).
    calls: u64,
    stage: Stage,
    /// Across nodes, ours from the second call on (see [`across`]).
    across: Option<Across>,
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
    Joining(NodeAside),
    Ready {
        comm: Box<BarrierComm>,
        seg: Arc<Segment>,
    },
    Switched(Box<BarrierComm>),
    /// Across nodes: the set-up after the exchange, and the flights, are `across`'s.
    Across,
    /// Built at the first blocking barrier.
    Blocking,
    /// Open MPI's serves every call.
    Declined,
}

impl Background {
    /// Starts the set-up of `comm`'s barrier in its first barrier call, an `MPI_Ibarrier`
    /// (collective: every rank's component makes this call in the same call; it does not block).
    /// `p2p`: the component's private channel (a communicator across nodes is ours from its
    /// second call: see the module docs).
    ///
    /// # Safety
    /// MPI is initialized; `comm` is a valid intracommunicator that outlives this value; `p2p`'s
    /// functions may be called on it.
    pub unsafe fn start(comm: Comm, params: Params, values: &McaValues, p2p: PrivateP2p) -> Result<Background> {
        let size = raw::size(comm)?;
        let rank = raw::rank(comm)?;
        let world_rank = raw::rank(raw::comm_world())?;
        let settings = crate::settings::propose(&params, world_rank);
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
        let tag = unsafe { (p2p.reserve_tags)(comm, 2) };
        // Ours from the second call on, where this rank serves and the ranks span nodes (by its
        // own backend list and node block, before the agreement).
        let ahead = here == 0 && !settings.own_only() && spans_nodes(comm, rank, settings.node_block(), &p2p)?;
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
        words.extend_from_slice(settings.words());
        words.extend_from_slice(&census::affinity_mask());
        debug_assert_eq!(words.len(), RECORD);
        crate::settings::injected(&params, "exchange")?;
        let gather = Gather::start(comm, words)?;
        let verbose = params.flag("BARRIER_VERBOSE").unwrap_or(false);
        let me = Member { comm, params, rank, size, world_rank, verbose };
        Ok(Background {
            across: ahead.then(|| Across::new(me.clone(), (p2p, tag))),
            me,
            calls: 0,
            stage: Stage::Gathering { gather, memfd, began: Instant::now(), said: false },
        })
    }

    /// What serves the communicator's next barrier call (`blocking`: `MPI_Barrier`), advancing
    /// the set-up first. Every rank gets the same answer for the same call.
    pub fn call(&mut self, blocking: bool) -> Turn<'_> {
        let call = self.calls;
        self.calls += 1;
        self.advance();
        if let Some(across) = self.across.as_mut().filter(|_| call > 0) {
            return match across.start_flight() {
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
                if self.me.verbose && self.me.rank == 0 {
                    glue::say(
                        COMPONENT,
                        &format!(
                            "barriers on a communicator of {} ranks: ours from its barrier call {call} on (built in \
                             the background after its first MPI_Ibarrier: {})",
                            self.me.size,
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
            let comm = self.me.comm;
            let report = if *said { Duration::MAX } else { glue::JOIN_REPORT.saturating_sub(began.elapsed()) };
            let waited = gather.wait_asleep(report, |w| glue::not_joined(FRAMEWORK, comm, w));
            if let Err(e) = waited {
                self.exchange_failed(&e);
            }
            self.advance();
        }
    }

    /// This rank in the communicator.
    pub fn rank(&self) -> usize {
        self.me.rank
    }

    /// Whether a split-phase barrier served ahead that finds itself waiting should give the
    /// core away (the machine's ranks may outnumber its cores).
    pub fn waits_yield(&self) -> bool {
        self.across.as_ref().is_none_or(Across::waits_yield)
    }

    /// Whether the set-up still has a step to advance (its exchange or its join).
    pub fn building(&self) -> bool {
        match self.stage {
            Stage::Gathering { .. } | Stage::Joining(_) => true,
            Stage::Across => self.across.as_ref().is_some_and(Across::building),
            _ => false,
        }
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
                Ok::<_, Error>(self.across.as_ref().is_none_or(Across::resolved))
            })?;
        } else {
            self.advance();
        }
        match self.across.as_mut() {
            Some(across) => across.drive(flight, blocking),
            None => Err(Error::InvalidArgument("a flight of a communicator not served ahead".into())),
        }
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
            Stage::Joining(aside) => match aside.poll() {
                AsideState::Finished => self.joined(),
                // Nobody switches; the others' joins end on the segment's abort.
                AsideState::Overdue(limit) => {
                    self.decline(&format!("the node's other ranks did not join its barrier within {limit:?}"))
                }
                AsideState::Running => {}
            },
            Stage::Across => {
                if let Some(across) = self.across.as_mut() {
                    across.advance();
                }
            }
            _ => {}
        }
    }

    /// Said once by the progress callback when the exchange has not completed after
    /// [`glue::JOIN_REPORT`]: harmless where a rank computes without calling MPI, a hang of the
    /// program's barriers where a rank's component never serves this communicator.
    fn still_gathering(&self, waited: Duration) {
        glue::say(
            COMPONENT,
            &format!(
                "world rank {}: the set-up of our barrier for {} ({} ranks), started at its first MPI_Ibarrier \
                 {waited:.1?} ago, still waits for every rank's part of its exchange; Open MPI's barrier serves \
                 meanwhile. A rank that computes without calling MPI delays it (harmless); a rank whose component \
                 never serves this communicator (not loaded there, or a lower or 0 coll_fastbar_priority there) \
                 never sends it, and the program's barriers there hang: give every rank the same component and \
                 settings (ompi_info --param coll fastbar --level 9 on each node).",
                self.me.world_rank,
                raw::name(self.me.comm),
                self.me.size
            ),
        );
    }

    /// The exchange failed here (an MPI error): the others may have this rank's part and go on
    /// (to a build at their first `MPI_Barrier`, or a join that waits for this rank), and this
    /// rank cannot tell them that it declines. It ends the job, saying why.
    fn exchange_failed(&self, e: &Error) -> ! {
        glue::abort_job(
            COMPONENT,
            &format!(
                "world rank {}: the exchange of the set-up of our barrier for {} ({} ranks) failed here ({e}); \
                 the other ranks go on with it and would wait for this one",
                self.me.world_rank,
                raw::name(self.me.comm),
                self.me.size
            ),
        )
    }

    fn decline(&mut self, why: &str) {
        self.give_up_join();
        glue::say(
            COMPONENT,
            &format!(
                "world rank {}: barriers on a communicator of {} ranks stay Open MPI's own: {why}",
                self.me.world_rank, self.me.size
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
        if rows.iter().any(|r| r[7] != rows[0][7]) {
            mixed(self.me.comm, self.me.world_rank, &rows);
        }
        let agreed = record::agree(&rows, self.me.world_rank, &self.me.params);
        if let Some(across) = self.across.as_mut() {
            self.stage = Stage::Across;
            return across.gathered(&rows, agreed, memfd);
        }
        let agreed = match agreed {
            Ok(a) => a,
            Err(e) => {
                // Agreed: every rank declines; the rank whose own setting is bad says which.
                if !matches!(e, Error::PeerInvalidParam { .. }) || self.me.rank == 0 {
                    self.decline(&e.to_string());
                }
                return;
            }
        };
        if agreed.core.own_only {
            return;
        }
        let here: Vec<u64> = rows.iter().map(|r| r[0]).collect();
        match glue::verdict(FRAMEWORK, self.me.comm, &here) {
            Ok(None) => {}
            Ok(Some(_)) => return,
            Err(e) => return self.decline(&e.to_string()),
        }
        // One node?
        let node = record::node_of(&rows, self.me.rank, agreed.core.node_block);
        if node.firsts.len() > 1 {
            self.stage = Stage::Blocking;
            return;
        }
        let me = &self.me;
        match record::aside_spec(&rows, &node, (me.rank, me.world_rank), &agreed, &me.params, memfd, false)
            .and_then(|spec| NodeAside::start(spec).map_err(|e| format!("building it in the background failed: {e}")))
        {
            Ok(aside) => self.stage = Stage::Joining(aside),
            Err(why) => self.decline(&why),
        }
    }

    /// A join under way or failed: no rank switches, and the thread stops waiting.
    pub(super) fn give_up_join(&self) {
        if let Stage::Joining(aside) = &self.stage {
            aside.give_up();
        }
        if let Some(across) = &self.across {
            across.give_up();
        }
    }

    /// The thread finished: ready, or declined.
    fn joined(&mut self) {
        let Stage::Joining(aside) = std::mem::replace(&mut self.stage, Stage::Declined) else {
            unreachable!("joined() runs in the joining stage")
        };
        match aside.finish() {
            Ok(barrier::hierarchy::Node { seg, universe, .. }) => {
                let comm = BarrierComm::on_one_node_built_aside(universe, &self.me.params, self.me.rank, self.me.size);
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

impl Drop for Background {
    fn drop(&mut self) {
        // A thread still joining must not wait for ranks that will never come.
        self.give_up_join();
    }
}
