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
//!
//! **Or MPI's own barrier among the roots** (`BARRIER_MPI_INTERNODE`, issue 42 item 3). Our
//! rounds run over MPI point-to-point, so an MPI whose own barrier is tuned for its network can
//! beat them: over the kernel's TCP between namespaces, at one rank per node, Open MPI's
//! barrier took 9.9 µs against our rounds' 11.0. With `auto`, the roots time both when the
//! communicator is made (a warm-up, then five alternating chunks of 20 barriers each; rank 0's
//! medians decide, and the other ranks learn the verdict) and keep the faster one: MPI's is
//! `MPI_Barrier` on a private duplicate of the roots' communicator for blocking barriers, and
//! `MPI_Ibarrier`, tested, for split-phase ones and for blocking ones under a timeout. As with
//! MPI's own barriers, a barrier is then blocking on every rank or split-phase on every rank
//! (MPI matches no blocking collective with a non-blocking one; our rounds allow a mix).
//! `MPI_Barrier` has no stall report (the node's other ranks still say that their root waits
//! in the internode phase), and `MPI_Ibarrier`'s can only say that a node root is missing, not
//! which: so `auto` keeps our rounds, without timing, when `BARRIER_TIMEOUT` or
//! `BARRIER_STALL_REPORT` is set.

use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier::transport::{Fabric, MemHandle, Peer, Signal, Transport};
use barrier::{Error, Result};

use crate::raw::{self, Comm, OwnedComm};
use crate::transport::MpiTransport;

/// How the node roots meet (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// Our rounds over MPI point-to-point.
    Dissemination,
    /// MPI's own barrier on a private communicator of the roots.
    Mpi,
}

/// What `BARRIER_MPI_INTERNODE` (as rank 0 has it, with rank 0's reports) asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    /// Time both, keep the faster.
    Measure,
    /// This one, without timing.
    Fixed(Way),
}

impl Choice {
    /// The word for the settings exchange, and back.
    pub(crate) fn to_word(self) -> u64 {
        match self {
            Choice::Measure => 0,
            Choice::Fixed(Way::Dissemination) => 1,
            Choice::Fixed(Way::Mpi) => 2,
        }
    }

    pub(crate) fn from_word(word: u64) -> Self {
        match word {
            1 => Choice::Fixed(Way::Dissemination),
            2 => Choice::Fixed(Way::Mpi),
            _ => Choice::Measure,
        }
    }
}

/// Barriers of each way per timed chunk, and chunks, when `auto` times them.
const TIMED_CHUNK: u32 = 20;
const TIMED_CHUNKS: usize = 5;
/// Our rounds are kept when they take at most this fraction of MPI's barrier's time.
const OURS_BY: f64 = 0.95;

/// What the roots chose, for `describe`: the way, and the timings (ours, MPI's) if timed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chosen {
    pub(crate) way: Way,
    pub(crate) timed: Option<(Duration, Duration)>,
}

impl Chosen {
    /// Every rank's copy of the roots' choice: three words.
    pub(crate) fn to_words(self) -> [u64; 3] {
        let (ours, theirs) = self.timed.map_or((0, 0), |(a, b)| (a.as_nanos() as u64, b.as_nanos() as u64));
        [u64::from(self.way == Way::Mpi), ours, theirs]
    }

    pub(crate) fn from_words(w: [u64; 3]) -> Self {
        Chosen {
            way: if w[0] == 1 { Way::Mpi } else { Way::Dissemination },
            timed: (w[1] > 0).then(|| (Duration::from_nanos(w[1]), Duration::from_nanos(w[2]))),
        }
    }

    /// The internode part of a communicator's description.
    pub(crate) fn describe(self) -> String {
        let timed = |fast: Duration, slow: Duration, other: &str| {
            format!(" ({fast:.1?} a barrier when timed, against {other}'s {slow:.1?})")
        };
        match (self.way, self.timed) {
            (Way::Dissemination, None) => "dissemination over mpi-p2p among the node roots".into(),
            (Way::Dissemination, Some((ours, theirs))) => {
                format!("dissemination over mpi-p2p among the node roots{}", timed(ours, theirs, "MPI_Barrier"))
            }
            (Way::Mpi, None) => "MPI's barrier among the node roots (BARRIER_MPI_INTERNODE=mpi)".into(),
            (Way::Mpi, Some((ours, theirs))) => {
                format!("MPI's barrier among the node roots, the faster{}", timed(theirs, ours, "our dissemination"))
            }
        }
    }
}

/// Waits between looks at the clock.
const CHECK_EVERY: u32 = 256;

/// One root's state of the roots' dissemination.
#[derive(Debug)]
pub(crate) struct Internode {
    /// The partner's slot per round. Declared before the transport: signals hold it too.
    outbox: Vec<Signal>,
    /// A private duplicate of the roots' communicator, for MPI's own barrier.
    roots: OwnedComm,
    chosen: Chosen,
    /// Epochs of our rounds used by the timing: the communicator's barrier `e` is our rounds'
    /// `base + e`.
    base: u64,
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
    /// MPI's own barrier among the roots: its `MPI_Ibarrier`, once started. A flight dropped
    /// unfinished (a failed communicator) leaves it to MPI: freeing or cancelling the request
    /// of a non-blocking collective is erroneous in MPI.
    request: Option<raw::Request>,
}

impl Flight {
    /// The internode barrier of `epoch`, before its first round.
    pub(crate) fn new(epoch: u64) -> Self {
        Flight {
            epoch,
            round: 0,
            signalled: false,
            round_start: None,
            barrier_start: None,
            reported: false,
            request: None,
        }
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
    /// `choice`: rank 0's `BARRIER_MPI_INTERNODE` (with its reports), the same on every root.
    pub(crate) fn new(
        roots: Comm,
        rank: usize,
        size: usize,
        waits: Waits,
        choice: Choice,
        injected: Result<()>,
    ) -> Result<Self> {
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
        // MPI's way needs a communicator of the roots of its own (none for our rounds alone).
        let own = match choice {
            Choice::Fixed(Way::Dissemination) => OwnedComm(raw::comm_null()),
            _ => OwnedComm(raw::dup(roots)?),
        };
        Ok(Internode {
            roots: own,
            chosen: Chosen { way: Way::Dissemination, timed: None },
            base: 0,
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

    /// Settles how the roots meet (collective over the roots, after every root's set-up has
    /// succeeded: the timing is a run of collectives).
    pub(crate) fn choose(&mut self, choice: Choice) -> Result<()> {
        self.chosen = match choice {
            Choice::Fixed(way) => Chosen { way, timed: None },
            Choice::Measure => self.time_both()?,
        };
        Ok(())
    }

    /// The roots' choice (the same on every root).
    pub(crate) fn chosen(&self) -> Chosen {
        self.chosen
    }

    /// Times our rounds against MPI's barrier among the roots (collective over the roots):
    /// rank 0's medians decide. Ours is kept only when at least [`OURS_BY`] faster: a timing of
    /// a few milliseconds is noisy.
    fn time_both(&mut self) -> Result<Chosen> {
        let mut ours = Vec::with_capacity(TIMED_CHUNKS);
        let mut theirs = Vec::with_capacity(TIMED_CHUNKS);
        for chunk in 0..=TIMED_CHUNKS {
            let t0 = Instant::now();
            for _ in 0..TIMED_CHUNK {
                self.base += 1;
                self.finish_rounds(&mut Flight::new(self.base), 0)?;
            }
            let t1 = Instant::now();
            // (Timed only without a timeout: blocking barriers are then MPI_Barrier.)
            for _ in 0..TIMED_CHUNK {
                raw::barrier(self.roots.0)?;
            }
            // The first chunk warms both up.
            if chunk > 0 {
                ours.push((t1 - t0) / TIMED_CHUNK);
                theirs.push(t1.elapsed() / TIMED_CHUNK);
            }
        }
        ours.sort();
        theirs.sort();
        let (ours, theirs) = (ours[TIMED_CHUNKS / 2], theirs[TIMED_CHUNKS / 2]);
        let way = if ours.as_secs_f64() <= theirs.as_secs_f64() * OURS_BY { Way::Dissemination } else { Way::Mpi };
        let mut words = Chosen { way, timed: Some((ours, theirs)) }.to_words();
        raw::broadcast(self.roots.0, 0, &mut words)?;
        Ok(Chosen::from_words(words))
    }

    /// The fabric (for its ranking and counters).
    pub(crate) fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// The roots' phase of barrier `epoch`, blocking. MPI's way without a timeout is
    /// `MPI_Barrier` itself (its `MPI_Ibarrier`, tested, was slower: 92 µs against 71 at 3
    /// nodes of 1 rank over TCP between namespaces); so, as with MPI's own barriers, a barrier
    /// is then blocking on every rank or split-phase on every rank.
    pub(crate) fn barrier(&self, epoch: u64) -> Result<()> {
        if self.chosen.way == Way::Mpi && self.waits.timeout.is_none() {
            return raw::barrier(self.roots.0);
        }
        self.finish(&mut Flight::new(epoch))
    }

    /// Advances `flight` as far as it goes without waiting (a split-phase barrier's test):
    /// `Ok(true)` once every round is done.
    /// The same timeout and stall report as [`finish`](Self::finish), measured from the first
    /// call that found the flight waiting.
    pub(crate) fn advance(&self, flight: &mut Flight) -> Result<bool> {
        if self.chosen.way == Way::Mpi {
            return self.advance_mpi(flight);
        }
        let epoch = self.base + flight.epoch;
        let inbox = self.transport.inbox();
        self.transport.try_progress()?;
        while let Some(out) = self.outbox.get(flight.round) {
            if !flight.signalled {
                out.signal(epoch, false)?;
                flight.signalled = true;
                flight.round_start = None;
                self.transport.try_progress()?;
            }
            if !inbox[flight.round].reached(epoch) {
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
        if self.chosen.way == Way::Mpi {
            return self.finish_mpi(flight);
        }
        self.finish_rounds(flight, self.base)
    }

    /// MPI's way, waiting: its `MPI_Ibarrier` tested until done (a split-phase barrier's wait,
    /// and blocking ones under a timeout, which then applies, as does the stall report).
    fn finish_mpi(&self, flight: &mut Flight) -> Result<()> {
        let mut polls: u32 = 0;
        while !self.advance_mpi(flight)? {
            polls = polls.wrapping_add(1);
            if self.waits.yield_between || polls.is_multiple_of(CHECK_EVERY * 64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    /// MPI's own barrier among the roots, split phase: its `MPI_Ibarrier`, tested. The timeout
    /// and the stall report count from the first call, as our rounds' do, but cannot say which
    /// root is missing.
    fn advance_mpi(&self, flight: &mut Flight) -> Result<bool> {
        if flight.round > 0 {
            return Ok(true);
        }
        let request = match &mut flight.request {
            Some(r) => r,
            None => flight.request.insert(raw::ibarrier(self.roots.0)?),
        };
        if raw::test(request)? {
            flight.request = None;
            flight.round = 1;
            return Ok(true);
        }
        let in_barrier = flight.barrier_start.get_or_insert_with(Instant::now).elapsed();
        let missing = "a node root has not arrived (its node, or a rank on it, has not; MPI's barrier does not \
                       say which: BARRIER_MPI_INTERNODE=dissemination names it)";
        if let Some(limit) = self.waits.timeout.filter(|&l| in_barrier >= l) {
            return Err(Error::Transport(format!(
                "world rank {} (rank {} of a communicator of {} ranks): the internode phase of barrier {} \
                 (MPI_Ibarrier among the node roots) timed out after {:.1?}: {missing}; check that every rank \
                 makes the same barrier calls, or raise the barrier's timeout",
                self.fabric.me().world_rank,
                self.rank,
                self.size,
                flight.epoch,
                in_barrier.max(limit)
            )));
        }
        if self.waits.stall.is_some_and(|s| in_barrier >= s) && !flight.reported {
            flight.reported = true;
            barrier::text::say(&format!(
                "barrier: world rank {} (rank {} of a communicator of {} ranks) has waited {in_barrier:.1?} in the \
                 internode phase of barrier {} (MPI_Ibarrier among the node roots): {missing}; still waiting (this \
                 report: BARRIER_STALL_REPORT)",
                self.fabric.me().world_rank,
                self.rank,
                self.size,
                flight.epoch
            ));
        }
        Ok(false)
    }

    /// Our rounds of `flight`, waiting for each; the slots' epoch is `base` plus the flight's.
    fn finish_rounds(&self, flight: &mut Flight, base: u64) -> Result<()> {
        let epoch = base + flight.epoch;
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
                        return Err(self.timed_out(flight.epoch, round, in_barrier.max(limit)));
                    }
                    if self.waits.stall.is_some_and(|s| in_barrier >= s) && !flight.reported {
                        flight.reported = true;
                        self.report_stall(flight.epoch, round, in_barrier);
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
        barrier::text::say(&msg);
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
