//! The internode phase: dissemination among the node roots over the MPI transport.
//!
//! ⌈log2 R⌉ rounds for R nodes: in round `r`, root `j` puts the epoch into round-`r` slot of
//! root `(j + 2^r) mod R` and waits until its own round-`r` slot reaches the epoch, making MPI
//! progress (the transport's) while it waits. Slots only grow, so nothing is reset between
//! barriers. Each root registers its row of slots and the roots exchange the handles once, when
//! the communicator is created; every put goes through the transport the [`Fabric`] ranks first
//! for that peer (across nodes: MPI).
//!
//! The wait spins while this machine has a core per rank and yields otherwise; it never
//! parks (a message only lands while this rank calls MPI). Past `BARRIER_STALL_REPORT` it says
//! once which node root it waits for; past `BARRIER_TIMEOUT` it fails naming that root.

use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier::transport::{Fabric, MemHandle, Peer, Signal, Transport};
use barrier::{Error, Result};

use crate::raw::{self, Comm};
use crate::transport::MpiTransport;

/// Waits between looks at the clock.
const CHECK_EVERY: u32 = 256;

/// One root's state of the roots' dissemination.
#[derive(Debug)]
pub(crate) struct Internode {
    /// The partner's slot per round. Declared before the transport: signals hold it too.
    outbox: Vec<Signal>,
    transport: Arc<MpiTransport>,
    fabric: Fabric,
    /// World rank of the root that signals this root's slot in each round.
    senders: Vec<usize>,
    /// Its rank in the barrier communicator, likewise.
    sender_ranks: Vec<usize>,
    /// This root's rank in the barrier communicator, and the communicator's size.
    rank: usize,
    size: usize,
    waits: Waits,
}

/// One root's progress through the rounds of one internode barrier.
#[derive(Debug)]
pub(crate) struct Flight {
    epoch: u64,
    /// The round under way.
    round: usize,
    /// Whether this round's signal went out.
    signalled: bool,
    /// When this round's wait began and when the first wait of the barrier did (the timeout
    /// counts each round's wait, the stall report the whole barrier), once measured.
    round_start: Option<Instant>,
    barrier_start: Option<Instant>,
    /// The stall report was made.
    reported: bool,
}

impl Flight {
    /// The internode barrier of `epoch`, before its first round.
    pub(crate) fn new(epoch: u64) -> Self {
        Flight { epoch, round: 0, signalled: false, round_start: None, barrier_start: None, reported: false }
    }
}

/// How a root waits in the internode phase.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Waits {
    /// Yield between polls (more ranks than cores on this machine).
    pub yield_between: bool,
    /// Give up after this long, naming the root waited for (`BARRIER_TIMEOUT`).
    pub timeout: Option<Duration>,
    /// Say once that a wait takes this long, naming the root waited for, and go on
    /// (`BARRIER_STALL_REPORT`).
    pub stall: Option<Duration>,
}

impl Internode {
    /// Sets up the dissemination (collective over `roots`, the communicator of the node roots).
    /// `rank` and `size`: this root's place in the barrier communicator (for error reports).
    /// `injected`: a failure to take in place of registering the inbox (BARRIER_MPI_FAULT).
    pub(crate) fn new(roots: Comm, rank: usize, size: usize, waits: Waits, injected: Result<()>) -> Result<Self> {
        let index = raw::rank(roots)?;
        let nodes = raw::size(roots)?;
        let world = raw::world_ranks(roots)?;
        let comm_ranks: Vec<usize> = raw::allgather(roots, &[rank as u64])?.iter().map(|w| w[0] as usize).collect();
        let rounds = barrier::rounds(nodes);
        let transport = Arc::new(MpiTransport::new(roots, rounds, waits.timeout)?);
        let me = Peer { world_rank: world[index], node: index };
        let fabric = Fabric::new(me, vec![transport.clone() as Arc<dyn Transport>]);
        let mine = injected.and_then(|()| fabric.register(transport.inbox()));
        let words = mine.as_ref().map_or([u64::MAX, 0], |h| h.to_words());
        let all = raw::allgather(roots, &words)?;
        let outbox: Result<Vec<Signal>> = match mine {
            Err(e) => Err(e),
            Ok(_) => (0..rounds)
                .map(|r| {
                    let partner = (index + (1 << r)) % nodes;
                    if all[partner][0] == u64::MAX {
                        return Err(Error::Transport(format!("node root {} could not register its slots", partner)));
                    }
                    let handle = MemHandle::from_words([all[partner][0], all[partner][1]]);
                    fabric.signal_to(Peer { world_rank: world[partner], node: partner }, handle, r)
                })
                .collect(),
        };
        // Agreed: a root that cannot reach its partners must not leave the others waiting.
        if !raw::all_agree(roots, outbox.is_ok())? {
            return Err(outbox.err().unwrap_or_else(|| {
                Error::Transport("another node root could not reach its dissemination partners over MPI".into())
            }));
        }
        let sender = |r: usize| (index + nodes - (1 << r) % nodes) % nodes;
        Ok(Internode {
            outbox: outbox?,
            transport,
            fabric,
            senders: (0..rounds).map(|r| world[sender(r)]).collect(),
            sender_ranks: (0..rounds).map(|r| comm_ranks[sender(r)]).collect(),
            rank,
            size,
            waits,
        })
    }

    /// The fabric (for its ranking and counters).
    pub(crate) fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// Runs the dissemination for `epoch`.
    pub(crate) fn barrier(&self, epoch: u64) -> Result<()> {
        self.finish(&mut Flight::new(epoch))
    }

    /// Advances `flight` as far as it goes without waiting (a split-phase barrier's test):
    /// `Ok(true)` once every round is done.
    /// The same timeout and stall report as [`finish`](Self::finish), measured from the first
    /// call that found the flight waiting.
    pub(crate) fn advance(&self, flight: &mut Flight) -> Result<bool> {
        let inbox = self.transport.inbox();
        self.transport.try_progress()?;
        while let Some(out) = self.outbox.get(flight.round) {
            if !flight.signalled {
                out.signal(flight.epoch, false)?;
                flight.signalled = true;
                flight.round_start = None;
                self.transport.try_progress()?;
            }
            if !inbox[flight.round].reached(flight.epoch) {
                let now = Instant::now();
                flight.round_start.get_or_insert(now);
                let barrier_start = *flight.barrier_start.get_or_insert(now);
                // The timeout, like the stall report, counts the whole internode phase.
                let in_barrier = now - barrier_start;
                if let Some(limit) = self.waits.timeout.filter(|&l| in_barrier >= l) {
                    return Err(self.timed_out(flight.epoch, flight.round, in_barrier.max(limit)));
                }
                if self.waits.stall.is_some_and(|s| in_barrier >= s) && !flight.reported {
                    flight.reported = true;
                    self.report_stall(flight.epoch, flight.round, in_barrier);
                }
                return Ok(false);
            }
            flight.round += 1;
            flight.signalled = false;
        }
        Ok(true)
    }

    /// Runs `flight`'s remaining rounds, waiting for each (the blocking barrier, or a
    /// split-phase one completed with `wait`).
    pub(crate) fn finish(&self, flight: &mut Flight) -> Result<()> {
        let epoch = flight.epoch;
        let inbox = self.transport.inbox();
        // The stall report and the timeout count the whole internode phase (a root slow in
        // every round is reported once, and a barrier never waits more than one timeout).
        while let Some(out) = self.outbox.get(flight.round) {
            let round = flight.round;
            if !flight.signalled {
                out.signal(epoch, false)?;
                flight.signalled = true;
            }
            let slot = &inbox[round];
            let mut polls: u32 = 0;
            let mut start = flight.round_start;
            loop {
                self.transport.try_progress()?;
                if slot.reached(epoch) {
                    break;
                }
                polls = polls.wrapping_add(1);
                if self.waits.yield_between {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                if polls.is_multiple_of(CHECK_EVERY) {
                    let t0 = *start.get_or_insert_with(Instant::now);
                    // The timeout counts from the start of this barrier's internode phase, not
                    // per round (a barrier could wait several timeouts: issue 40 item 8).
                    let in_barrier = flight.barrier_start.get_or_insert(t0).elapsed();
                    if let Some(limit) = self.waits.timeout.filter(|&l| in_barrier >= l) {
                        return Err(self.timed_out(epoch, round, in_barrier.max(limit)));
                    }
                    if self.waits.stall.is_some_and(|s| in_barrier >= s) && !flight.reported {
                        flight.reported = true;
                        self.report_stall(epoch, round, in_barrier);
                    }
                    if polls.is_multiple_of(CHECK_EVERY * 64) {
                        // Long waits: let MPI make progress for the application too.
                        std::thread::yield_now();
                    }
                }
            }
            flight.round += 1;
            flight.signalled = false;
            flight.round_start = None;
        }
        Ok(())
    }

    /// Says once per wait that this root has waited long for its round's sender, and goes on.
    #[cold]
    fn report_stall(&self, epoch: u64, round: usize, waited: Duration) {
        let msg = format!(
            "barrier: world rank {} (rank {} of a communicator of {} ranks) has waited {waited:.1?} in the internode \
             phase of barrier {epoch} (round {round}): the node root at world rank {} (communicator rank {}) has \
             not signalled: its node, or a rank on it, has not arrived (or it waits for another root in turn); \
             still waiting (this report: BARRIER_STALL_REPORT; to give up instead, set BARRIER_TIMEOUT)",
            self.fabric.me().world_rank,
            self.rank,
            self.size,
            self.senders[round],
            self.sender_ranks[round],
        );
        tracing::warn!(target: "barrier", "{msg}");
        barrier::sys::say(&msg);
    }

    #[cold]
    fn timed_out(&self, epoch: u64, round: usize, waited: Duration) -> Error {
        let sender = self.senders[round];
        Error::Timeout {
            rank: self.rank,
            world_rank: self.fabric.me().world_rank,
            size: self.size,
            epoch,
            during: format!(
                "the internode phase of barrier {epoch} (round {round}, waiting for the node root at world rank \
                 {sender}: its node, or a rank on it, has not arrived)"
            ),
            waited,
            missing: vec![self.sender_ranks[round]],
            missing_world: vec![sender],
            // The communicator names it as its settings gave it (`BarrierComm::fail`).
            limit: "BARRIER_TIMEOUT".into(),
        }
    }
}
