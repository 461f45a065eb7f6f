//! The roots' phase: the node roots meet, by our dissemination over the layer's link or by the
//! implementation's own barrier among them, chosen once (see the module docs of
//! [`crate::hierarchy`]).

use std::fmt;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::wait::{poll_until, Flag, Pace, Unwatched, WaitConfig, WaitError};

use super::report::{self, Names};

/// The link among the node roots a layer provides: its transport (MPI point-to-point, OpenSHMEM
/// atomics), with whatever the dissemination's rounds need set up (OpenSHMEM: a symmetric inbox;
/// MPI: nothing, each round's partner and sender are known).
///
/// ⌈log2 R⌉ rounds for R roots: in round `r`, root `j` signals round-`r` slot of root
/// `(j + 2^r) mod R` and waits until its own round-`r` slot reaches the barrier's epoch. Epochs
/// grow by one from barrier to barrier (1, 2, 3, …), and each root signals each round once per
/// barrier, so a slot may hold the epoch (a put) or count signals (an atomic add): both reach
/// barrier `e`'s epoch exactly when its signal of barrier `e` has landed.
pub trait RootsLink: fmt::Debug {
    /// Round `round`'s signal of barrier `epoch` to this root's partner in that round.
    fn signal(&self, round: usize, epoch: u64) -> Result<()>;

    /// Whether this root's slot of round `round` has reached `epoch`.
    fn reached(&self, round: usize, epoch: u64) -> bool;

    /// Moves the transport along: called on every poll that finds a slot not yet arrived (a
    /// message only lands while this rank calls MPI). A link whose signals need the sender's
    /// progress to leave makes that call in [`signal`](Self::signal).
    fn progress(&self) -> Result<()>;

    /// This root's rounds of a barrier are done: a link whose signals need the sender's
    /// progress to land (the simulated network's asynchronous puts) makes them land here, so
    /// that no signal waits in this root's queue while it waits for its node.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// The flag round `round`'s signal lands in, where a waiter may sleep on it: the signal
    /// needs none of this rank's calls to land, and its sender wakes sleepers (the core's
    /// simulated network under a parking policy; see [`Roots::park_with`]). `None`, the
    /// default: the waiter polls.
    fn parks_on(&self, _round: usize) -> Option<&Flag> {
        None
    }

    /// Whether root `j` will never arrive at barrier `epoch` (it finalized after fewer
    /// barriers): the error that says so, or `None`. Called when a wait looks at the clock.
    fn departed(&self, _epoch: u64) -> Option<Error> {
        None
    }
}

/// The implementation's own barrier among the node roots, where the layer offers one (MPI's
/// barrier on a communicator of the roots; OpenSHMEM's `shmem_barrier_all` where every node has
/// one PE).
pub trait OwnBarrier: fmt::Debug + Send {
    /// Its name in descriptions ("MPI's barrier").
    fn name(&self) -> &'static str;

    /// Its name in the reports of a split-phase wait ("MPI_Ibarrier"); by default its name.
    fn split_name(&self) -> &'static str {
        self.name()
    }

    /// The barrier, blocking.
    fn barrier(&self) -> Result<()>;

    /// The barrier started split phase, or `None` (the default) where it has no split form
    /// (then every wait is [`barrier`](Self::barrier)).
    fn start(&self) -> Result<Option<Box<dyn OwnPending>>> {
        Ok(None)
    }
}

/// A split-phase barrier of the implementation's own, started.
pub trait OwnPending: fmt::Debug + Send {
    /// Whether it completed (progressing the implementation).
    fn test(&mut self) -> Result<bool>;
}

/// How the roots meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Our dissemination over the layer's link.
    Ours,
    /// The implementation's own barrier among the roots.
    Own,
}

/// What the layer's setting that chooses the roots' way (barrier-mpi's and barrier-openshmem's
/// internode settings, as the communicator's rank 0 has them) asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Time both, keep the faster.
    Measure,
    /// This one, without timing.
    Fixed(Way),
    /// Ours without timing, because rank 0 set a timeout or a stall report: only ours names the
    /// root a wait is for.
    OursForReports,
}

impl Choice {
    /// The choice of a layer's setting `value` (`auto`, `dissemination`, or `own`: the layer's
    /// word for the implementation's barrier), on rank 0, whose `BARRIER_TIMEOUT` or
    /// `BARRIER_STALL_REPORT` is `reports`.
    pub fn from_setting(value: Option<&str>, own: &str, reports: bool) -> Self {
        match value.map(str::trim) {
            Some(v) if v.eq_ignore_ascii_case("dissemination") => Choice::Fixed(Way::Ours),
            Some(v) if v.eq_ignore_ascii_case(own) => Choice::Fixed(Way::Own),
            _ if reports => Choice::OursForReports,
            _ => Choice::Measure,
        }
    }

    /// The word for a settings exchange, and back.
    pub fn to_word(self) -> u64 {
        match self {
            Choice::Measure => 0,
            Choice::Fixed(Way::Ours) => 1,
            Choice::Fixed(Way::Own) => 2,
            Choice::OursForReports => 3,
        }
    }

    /// See [`to_word`](Self::to_word); an unknown word is `Measure`.
    pub fn from_word(word: u64) -> Self {
        match word {
            1 => Choice::Fixed(Way::Ours),
            2 => Choice::Fixed(Way::Own),
            3 => Choice::OursForReports,
            _ => Choice::Measure,
        }
    }
}

/// Barriers of each way per timed chunk, and timed chunks (after one that warms both up).
const TIMED_CHUNK: u32 = 20;
const TIMED_CHUNKS: usize = 5;
/// Ours is kept when it takes at most this fraction of the implementation's time: a timing of a
/// few milliseconds is noisy.
const OURS_BY: f64 = 0.95;

/// What the roots chose (the same on every root, and shared with every rank for descriptions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// The way.
    pub way: Way,
    /// The timings (ours, the implementation's) per barrier, where timed.
    pub timed: Option<(Duration, Duration)>,
    /// Ours was kept without timing because a timeout or a stall report is set.
    pub untimed_for_reports: bool,
}

impl Chosen {
    /// Our rounds, untimed.
    pub const OURS: Chosen = Chosen { way: Way::Ours, timed: None, untimed_for_reports: false };

    /// Three words, for ranks that are not roots.
    pub fn to_words(self) -> [u64; 3] {
        let (ours, own) = self.timed.map_or((0, 0), |(a, b)| (a.as_nanos() as u64, b.as_nanos() as u64));
        [u64::from(self.way == Way::Own) | u64::from(self.untimed_for_reports) << 1, ours, own]
    }

    /// See [`to_words`](Self::to_words).
    pub fn from_words(w: [u64; 3]) -> Self {
        Chosen {
            way: if w[0] & 1 == 1 { Way::Own } else { Way::Ours },
            timed: (w[1] > 0).then(|| (Duration::from_nanos(w[1]), Duration::from_nanos(w[2]))),
            untimed_for_reports: w[0] & 2 == 2,
        }
    }

    /// The roots' part of a description: `ours` names our rounds ("dissemination over
    /// mpi-p2p"), `own` the implementation's barrier ("MPI's barrier"), `forced` the setting
    /// that forces it (barrier-mpi's "…_INTERNODE=mpi").
    pub fn describe(self, ours: &str, own: &str, forced: &str) -> String {
        let timed = |fast: Duration, slow: Duration, other: &str| {
            format!(", the faster ({fast:.1?} a barrier when timed, against {other}'s {slow:.1?})")
        };
        match (self.way, self.timed) {
            (Way::Ours, None) if self.untimed_for_reports => format!(
                "{ours} among the node roots (untimed: BARRIER_TIMEOUT or BARRIER_STALL_REPORT is set, and only its \
                 reports name the node root a wait is for)"
            ),
            (Way::Ours, None) => format!("{ours} among the node roots"),
            (Way::Ours, Some((fast, slow))) => format!("{ours} among the node roots{}", timed(fast, slow, own)),
            (Way::Own, None) => format!("{own} among the node roots ({forced})"),
            (Way::Own, Some((slow, fast))) => {
                format!("{own} among the node roots{}", timed(fast, slow, "our dissemination"))
            }
        }
    }
}

/// One root's progress through the roots' phase of one barrier.
#[derive(Debug)]
pub struct Flight {
    epoch: u64,
    /// The round under way.
    round: usize,
    /// Whether this round's signal went out.
    signalled: bool,
    /// When the phase first waited (the timeout and the stall report count the whole phase).
    start: Option<Instant>,
    /// The stall report was made.
    reported: bool,
    /// The implementation's own barrier, once started. A flight dropped unfinished (a failed
    /// communicator) leaves it to the implementation: freeing or cancelling a non-blocking
    /// collective's request is erroneous in MPI.
    own: Option<Box<dyn OwnPending>>,
}

impl Flight {
    /// The roots' phase of barrier `epoch`, before its first round.
    pub fn new(epoch: u64) -> Self {
        Flight { epoch, round: 0, signalled: false, start: None, reported: false, own: None }
    }
}

/// How a root waits in the roots' phase (the communicator's agreed settings).
#[derive(Clone, Copy, Debug)]
pub struct RootsWaits {
    /// Spin or yield between polls.
    pub pace: Pace,
    /// Give up after this long in one barrier's phase (`BARRIER_TIMEOUT`).
    pub timeout: Option<Duration>,
    /// Say once per barrier who is awaited after this long (`BARRIER_STALL_REPORT`).
    pub stall: Option<Duration>,
}

/// One node root's side of the roots' phase.
#[derive(Debug)]
pub struct Roots<L> {
    link: L,
    own: Option<Box<dyn OwnBarrier>>,
    names: Names,
    waits: RootsWaits,
    rounds: usize,
    chosen: Chosen,
    /// Barriers of ours spent timing: the communicator's barrier `e` is our rounds' `base + e`.
    base: u64,
    /// How a blocking wait for our rounds sleeps on the link's flags, where it may.
    park: Option<WaitConfig>,
}

/// How long a sleeping root waits before it looks at the clock (its timeout, its stall report,
/// a root that left).
const LOOK_SLICE: Duration = Duration::from_millis(10);

impl<L: RootsLink> Roots<L> {
    /// A root's phase over `link` among `names.roots.len()` roots; `own`: the implementation's
    /// barrier among the roots, where the layer offers it. Ours until [`choose`](Self::choose).
    pub fn new(link: L, own: Option<Box<dyn OwnBarrier>>, names: Names, waits: RootsWaits) -> Self {
        let rounds = crate::region::rounds(names.roots.len());
        Roots { link, own, names, waits, rounds, chosen: Chosen::OURS, base: 0, park: None }
    }

    /// The layer's link.
    pub fn link(&self) -> &L {
        &self.link
    }

    /// Waits from here on as `waits` says (a layer whose first barrier allows for a set-up
    /// still running on other roots: barrier-mpi's flights of a barrier set up in the background).
    pub fn set_waits(&mut self, waits: RootsWaits) {
        self.waits = waits;
    }

    /// Lets a blocking wait for our rounds sleep on the link's flags ([`RootsLink::parks_on`]),
    /// waiting as `wait` says (its spin, yields and park; its timeout is the roots' own), where
    /// the roots' pace yields (the wait policy parks: by default where the machine's ranks
    /// outnumber its cores), and a root that polls
    /// takes the core from the ranks it waits for.
    pub fn park_with(&mut self, wait: WaitConfig) {
        self.park = (self.waits.pace == Pace::Yield).then_some(WaitConfig { timeout: None, progress: None, ..wait });
    }

    /// How the roots meet.
    pub fn chosen(&self) -> Chosen {
        self.chosen
    }

    /// Barriers of ours this root has entered, timing included (what a departing root tells
    /// the others it completed).
    pub fn entered(&self, epoch: u64) -> u64 {
        self.base + epoch
    }

    /// Settles how the roots meet: collective over the roots, every root with the same
    /// `choice`, after every root's set-up succeeded (the timing is a run of barriers).
    /// `share` gives every root root 0's words (the layer's broadcast among the roots): root
    /// 0's timing decides.
    pub fn choose(&mut self, choice: Choice, share: impl FnOnce(&mut [u64; 3]) -> Result<()>) -> Result<Chosen> {
        self.chosen = match (choice, &self.own) {
            (Choice::Fixed(Way::Ours), _) | (Choice::Measure, None) => Chosen::OURS,
            (Choice::OursForReports, _) => Chosen { untimed_for_reports: true, ..Chosen::OURS },
            (Choice::Fixed(Way::Own), Some(_)) => Chosen { way: Way::Own, ..Chosen::OURS },
            (Choice::Fixed(Way::Own), None) => {
                return Err(Error::Setup(format!(
                    "{}: the implementation offers no barrier among these node roots",
                    self.names.setting
                )))
            }
            (Choice::Measure, Some(_)) => self.time_both(share)?,
        };
        Ok(self.chosen)
    }

    /// Times our rounds against the implementation's barrier among the roots: a chunk that
    /// warms both up, then alternating chunks; root 0's medians decide for every root.
    fn time_both(&mut self, share: impl FnOnce(&mut [u64; 3]) -> Result<()>) -> Result<Chosen> {
        let own = self.own.as_ref().expect("timed only where the implementation offers a barrier");
        let mut ours = Vec::with_capacity(TIMED_CHUNKS);
        let mut theirs = Vec::with_capacity(TIMED_CHUNKS);
        for chunk in 0..=TIMED_CHUNKS {
            let t0 = Instant::now();
            for _ in 0..TIMED_CHUNK {
                self.base += 1;
                // (Flight 0: the rounds' epoch is `base` itself.)
                self.finish_ours(&mut Flight::new(0))?;
            }
            let t1 = Instant::now();
            for _ in 0..TIMED_CHUNK {
                own.barrier()?;
            }
            if chunk > 0 {
                ours.push((t1 - t0) / TIMED_CHUNK);
                theirs.push(t1.elapsed() / TIMED_CHUNK);
            }
        }
        ours.sort();
        theirs.sort();
        let (ours, theirs) = (ours[TIMED_CHUNKS / 2], theirs[TIMED_CHUNKS / 2]);
        let way = if ours.as_secs_f64() <= theirs.as_secs_f64() * OURS_BY { Way::Ours } else { Way::Own };
        let mut words = Chosen { way, timed: Some((ours, theirs)), untimed_for_reports: false }.to_words();
        share(&mut words)?;
        Ok(Chosen::from_words(words))
    }

    /// The implementation's barrier, when it was chosen.
    fn own_way(&self) -> Option<&dyn OwnBarrier> {
        match self.chosen.way {
            Way::Own => self.own.as_deref(),
            Way::Ours => None,
        }
    }

    /// The roots' phase of barrier `epoch`, blocking. The implementation's way without a
    /// timeout is its blocking barrier itself (MPI's `MPI_Ibarrier`, tested, was slower: 92 µs
    /// against 71 at 3 nodes of 1 rank over TCP between namespaces); so, as with MPI's own
    /// barriers, a barrier is then blocking on every rank or split-phase on every rank.
    pub fn barrier(&self, epoch: u64) -> Result<()> {
        match self.own_way() {
            Some(own) if self.waits.timeout.is_none() => own.barrier(),
            _ => self.finish(&mut Flight::new(epoch)),
        }
    }

    /// Advances `flight` as far as it goes without waiting (a split-phase barrier's test):
    /// `Ok(true)` once the phase is done. The timeout and the stall report count from the first
    /// call that found it waiting.
    pub fn advance(&self, flight: &mut Flight) -> Result<bool> {
        if self.step(flight)? {
            return Ok(true);
        }
        self.look(flight)?;
        Ok(false)
    }

    /// Runs `flight` to its end, waiting (polling the link; see [`crate::wait::poll`]).
    pub fn finish(&self, flight: &mut Flight) -> Result<()> {
        match self.park {
            Some(wait) if self.own_way().is_none() => self.sleep_out(flight, wait),
            _ => self.wait_out(flight, Self::step),
        }
    }

    /// Runs `flight` to its end, sleeping on each round's flag where the link offers one (the
    /// wait layer's spin, yields and park), looking at the clock every [`LOOK_SLICE`].
    fn sleep_out(&self, flight: &mut Flight, mut wait: WaitConfig) -> Result<()> {
        loop {
            if self.step_ours(flight)? {
                return Ok(());
            }
            // The timeout and the stall report count from the phase's first wait.
            flight.start.get_or_insert_with(Instant::now);
            let Some(flag) = self.link.parks_on(flight.round) else {
                return self.wait_out(flight, Self::step_ours);
            };
            match wait.wait_or_recheck(flag, self.base + flight.epoch, &Unwatched, Some(LOOK_SLICE), &mut None) {
                Ok(()) => continue,
                Err(WaitError::Recheck) => {}
                Err(w) => return Err(Error::Broken(format!("the roots' wait failed: {w:?}"))),
            }
            self.look(flight)?;
            // Back to sleep at once after a look: the spin and the yields were spent.
            wait = WaitConfig { spin: 0, yields: 0, ..wait };
        }
    }

    /// Our rounds alone, waiting (the timing's).
    fn finish_ours(&self, flight: &mut Flight) -> Result<()> {
        self.wait_out(flight, Self::step_ours)
    }

    /// Polls `step` until the phase is done, looking at the clock every few hundred polls.
    #[inline]
    fn wait_out(&self, flight: &mut Flight, step: fn(&Self, &mut Flight) -> Result<bool>) -> Result<()> {
        poll_until(self.waits.pace, |look| {
            if step(self, flight)? {
                return Ok(true);
            }
            if look {
                self.look(flight)?;
            }
            Ok(false)
        })
    }

    /// Everything that does not wait: whether the phase is done.
    fn step(&self, flight: &mut Flight) -> Result<bool> {
        let Some(own) = self.own_way() else { return self.step_ours(flight) };
        if flight.round > 0 {
            return Ok(true);
        }
        let pending = match &mut flight.own {
            Some(p) => p,
            None => match own.start()? {
                Some(p) => flight.own.insert(p),
                None => {
                    own.barrier()?;
                    flight.round = 1;
                    return Ok(true);
                }
            },
        };
        if pending.test()? {
            flight.own = None;
            flight.round = 1;
            return Ok(true);
        }
        Ok(false)
    }

    /// Our rounds, as far as they go without waiting: the link progresses once per look at a
    /// slot that has not arrived.
    #[inline]
    fn step_ours(&self, flight: &mut Flight) -> Result<bool> {
        let epoch = self.base + flight.epoch;
        while flight.round < self.rounds {
            if !flight.signalled {
                self.link.signal(flight.round, epoch)?;
                flight.signalled = true;
            }
            if !self.link.reached(flight.round, epoch) {
                self.link.progress()?;
                if !self.link.reached(flight.round, epoch) {
                    return Ok(false);
                }
            }
            flight.round += 1;
            flight.signalled = false;
            if flight.round == self.rounds {
                self.link.flush()?;
            }
        }
        Ok(true)
    }

    /// A look at the clock while the phase waits: a root that left, the timeout, the stall
    /// report (all counted from the phase's first wait).
    #[cold]
    fn look(&self, flight: &mut Flight) -> Result<()> {
        let now = Instant::now();
        let waited = now - *flight.start.get_or_insert(now);
        let own = self.own_way();
        if own.is_none() {
            if let Some(left) = self.link.departed(self.base + flight.epoch) {
                return Err(left);
            }
        }
        // Who the wait is for: our round's sender, or (the implementation's barrier) unknown.
        let awaited = match own {
            None => report::Awaited::Root { round: flight.round, sender: self.sender(flight.round) },
            Some(own) => report::Awaited::Unknown { barrier: own.split_name() },
        };
        if let Some(limit) = self.waits.timeout.filter(|&l| waited >= l) {
            return Err(report::timed_out(&self.names, flight.epoch, awaited, waited.max(limit)));
        }
        if self.waits.stall.is_some_and(|s| waited >= s) && !flight.reported {
            flight.reported = true;
            report::stall(&self.names, flight.epoch, awaited, waited);
        }
        Ok(())
    }

    /// The root (index) whose signal round `round` waits for.
    fn sender(&self, round: usize) -> usize {
        let r = self.names.roots.len();
        (self.names.index + r - (1 << round) % r) % r
    }
}
