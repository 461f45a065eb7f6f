//! Serving a barrier: the node's barrier (the core library's communicator over the node's
//! segment); across nodes the node's gather (its root learns that every PE of the node has
//! arrived), the roots' dissemination over OpenSHMEM atomics, and the node's release (the two
//! halves of `barrier::Communicator::halves`: one gather and one release, not two whole node
//! barriers).
//!
//! Threads: a barrier of every PE holds the library's lock (one thread of a PE in it at a
//! time, as OpenSHMEM asks of collectives on one team); an active-set barrier takes no lock
//! through its wait (its table is shared atomics, [`SetServing`] is shared by reference), so a thread in one never keeps another
//! thread of the same PE out of the other (issue 40 item 4: a lock held through the whole wait
//! deadlocked a program that OpenSHMEM alone completes).

use std::cell::Cell;
use std::ffi::c_ulong;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use barrier::shm::Segment;
use barrier::Universe;

use crate::progress::call_progress;
use crate::real::Real;
use crate::waits::{pe_list, report_stall, Failure, Result, Waits};

/// One flag per cache line in the internode inbox.
pub(crate) const LINE: usize = 128;
/// Polls between looks at the clock, the timeout and the departures.
const CHECK_EVERY: u32 = 1024;

/// The node roots' dissemination: ⌈log2 R⌉ rounds for R nodes; in round `r` root `j` adds one
/// to round-`r` word of root `(j + 2^r) mod R` (`shmem_ulong_atomic_add`, remote; only `j`
/// adds to it, once per barrier, so it counts barriers: barrier `e` sees it reach `e`) and
/// waits until its own round-`r` word reaches the epoch, keeping the implementation
/// progressing. Words only grow: nothing is reset between barriers.
///
/// Departures: after the round lines the inbox holds a word per root. A root that calls
/// `shmem_finalize` adds (the barriers it completed + 1) to its word in every other root's
/// inbox, once. A root waiting in barrier `e` that finds a word below `e + 1` knows that root
/// will never arrive, and fails at once, naming it, instead of waiting for ever.
#[derive(Debug)]
pub(crate) struct Rounds {
    real: Real,
    /// This root's inbox: one flag per round, a line each, then a word per root (symmetric).
    inbox: usize,
    /// This root's index among the roots, and every root's PE.
    index: usize,
    roots: Vec<usize>,
    /// The partner root's PE per round.
    partners: Vec<i32>,
    /// The root whose signal each round waits for (for errors).
    senders: Vec<usize>,
    /// The PEs of each root's node (for reports).
    node_pes: Vec<Vec<usize>>,
    waits: Waits,
}

impl Rounds {
    /// Bytes of a root's inbox for `roots` nodes.
    pub(crate) fn inbox_bytes(roots: usize) -> usize {
        barrier::rounds(roots) * LINE + roots * 8
    }

    pub(crate) fn new(
        real: Real,
        inbox: usize,
        index: usize,
        roots: Vec<usize>,
        node_pes: Vec<Vec<usize>>,
        waits: Waits,
    ) -> Rounds {
        let r = roots.len();
        let rounds = barrier::rounds(r);
        Rounds {
            real,
            inbox,
            index,
            partners: (0..rounds).map(|k| roots[(index + (1 << k)) % r] as i32).collect(),
            senders: (0..rounds).map(|k| roots[(index + r - (1 << k) % r) % r]).collect(),
            roots,
            node_pes,
            waits,
        }
    }

    fn slot(&self, round: usize) -> &AtomicU64 {
        // SAFETY: inside this PE's symmetric inbox, one aligned line per round, written only by
        // remote atomic adds (whole words).
        unsafe { &*((self.inbox + round * LINE) as *const AtomicU64) }
    }

    /// The address of root `j`'s departure word (in any root's inbox: symmetric).
    fn departure_word(&self, j: usize) -> usize {
        self.inbox + self.senders.len() * LINE + j * 8
    }

    /// A root that left before barrier `epoch`: its index and the barriers it completed.
    fn departed_before(&self, epoch: u64) -> Option<(usize, u64)> {
        (0..self.roots.len()).filter(|&j| j != self.index).find_map(|j| {
            // SAFETY: inside this PE's inbox (see `departure_word`), written by remote adds.
            let word = unsafe { &*(self.departure_word(j) as *const AtomicU64) }.load(Ordering::Acquire);
            (word != 0 && word - 1 < epoch).then_some((j, word - 1))
        })
    }

    /// Tells every other root that this one leaves after `completed` barriers (at finalize).
    pub(crate) fn depart(&self, completed: u64) {
        for (j, &pe) in self.roots.iter().enumerate() {
            if j != self.index {
                // SAFETY: root j's inbox word for this root (symmetric address); a remote
                // atomic add of one word, made once.
                unsafe {
                    (self.real.ulong_atomic_add)(
                        self.departure_word(self.index) as *mut c_ulong,
                        completed + 1,
                        pe as i32,
                    )
                };
            }
        }
        // SAFETY: completes this PE's adds before it goes on into the implementation's finalize.
        unsafe { (self.real.quiet)() };
    }

    fn node_of_root(&self, pe: usize) -> String {
        let j = self.roots.iter().position(|&r| r == pe).unwrap_or(0);
        format!("the node root PE {pe} (its node: PEs {})", pe_list(&self.node_pes[j]))
    }

    /// Barrier `epoch`'s rounds. The timeout and the stall report count from the start of this
    /// phase, not per round.
    fn run(&self, epoch: u64, me: usize) -> Result<()> {
        let start = Instant::now();
        let mut reported = false;
        for (round, &partner) in self.partners.iter().enumerate() {
            // One add per barrier from this root alone: the partner's word counts barriers, and
            // two adds need no ordering between them (two sets would: sync_all has no quiet).
            // SAFETY: the partner's inbox line of this round (symmetric address); a remote
            // atomic add of one word.
            unsafe { (self.real.ulong_atomic_add)((self.inbox + round * LINE) as *mut c_ulong, 1, partner) };
            let slot = self.slot(round);
            let mut polls: u32 = 0;
            while slot.load(Ordering::Acquire) < epoch {
                call_progress(0);
                polls = polls.wrapping_add(1);
                if self.waits.yields {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                if !polls.is_multiple_of(CHECK_EVERY) {
                    continue;
                }
                let sender = self.senders[round];
                if let Some((j, completed)) = self.departed_before(epoch) {
                    return Err(Failure(format!(
                        "PE {} (the node root of PEs {}) called shmem_finalize after {completed} barrier(s), so barrier \
                         {epoch} can never complete (PE {me} waits in its internode phase); every PE must make the same \
                         barrier calls before shmem_finalize",
                        self.roots[j],
                        pe_list(&self.node_pes[j])
                    )));
                }
                let waited = start.elapsed();
                if let Some(limit) = self.waits.timeout.filter(|&l| waited >= l) {
                    return Err(Failure(format!(
                        "barrier {epoch} timed out after {:.1?} on PE {me}, in its internode phase (round {round}): {} \
                         never signalled: that node, or a PE on it, has not arrived (or it waits for another root in \
                         turn); check that every PE makes the same barrier calls, or raise BARRIER_TIMEOUT (PE 0's \
                         value is the job's)",
                        waited.max(limit),
                        self.node_of_root(sender)
                    )));
                }
                if !reported && self.waits.stall.is_some_and(|s| waited >= s) {
                    reported = true;
                    report_stall(format!(
                        "barrier-shmem: PE {me} has waited {:.1?} in barrier {epoch}, in its internode phase (round \
                         {round}): {} has not signalled: that node, or a PE on it, has not arrived (or it waits \
                         for another root in turn)",
                        waited,
                        self.node_of_root(sender)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Active-set barriers of sets inside this PE's node. Shared by reference: a thread waits in
/// one holding no lock.
#[derive(Debug)]
pub(crate) struct SetServing {
    sets: crate::sets::Sets,
    /// The node of every PE, and this PE.
    node_of: Vec<usize>,
    me: usize,
    waits: Waits,
}

impl SetServing {
    /// The barrier of an active set whose members all share this PE's node: `Ok(false)` when
    /// it is not such a set (or this PE is not in it, or the node's table is full) and the call
    /// must pass through.
    pub(crate) fn set_barrier(&self, start: i32, stride: i32, size: i32) -> Result<bool> {
        let Some(members) = crate::sets::members(start, stride, size, self.node_of.len()) else { return Ok(false) };
        let mine = self.node_of[self.me];
        if !members.contains(&self.me) || members.iter().any(|&pe| self.node_of[pe] != mine) {
            return Ok(false);
        }
        self.sets.barrier(&members, (start, stride, size), self.me, self.waits)
    }

    /// This PE calls `shmem_finalize`: a member waiting for it in a set learns it at once.
    pub(crate) fn depart(&self) {
        self.sets.depart(self.me);
    }
}

/// What serves the barriers of a job that agreed to be served: the barrier of every PE (the
/// node's universe, and across nodes its halves and the roots' rounds), used by one thread at a
/// time (the library's lock around it), and the active sets.
#[derive(Debug)]
pub(crate) struct Serving {
    // Field order is drop order: the table's window, then the halves (made from the node's
    // universe), then the universe, all before the segment.
    sets: Arc<SetServing>,
    halves: Option<barrier::Communicator>,
    node: Universe,
    seg: Arc<Segment>,
    local_rank: usize,
    internode: Option<Rounds>,
    /// Barriers of every PE this PE has entered across nodes.
    epoch: Cell<u64>,
    describe: String,
    me: usize,
    /// This PE is its node's only PE: a barrier skips the node's gather and release (they would
    /// wait for nobody) and is the roots' rounds alone.
    alone: bool,
    /// Every node has one PE and the implementation's own barrier was chosen for the barriers
    /// of every PE (`BARRIER_SHMEM_INTERNODE`): they pass through.
    delegated: bool,
}

// SAFETY: the node's universe is used by one thread at a time (the caller holds the library's
// lock around every use); the inbox address is this process's symmetric memory.
unsafe impl Send for Serving {}

/// Where the node's PEs are, for [`Serving::new`].
#[derive(Debug)]
pub(crate) struct Place {
    pub local_rank: usize,
    pub node_of: Vec<usize>,
    pub me: usize,
    pub waits: Waits,
    /// This PE is its node's only PE.
    pub alone: bool,
}

impl Serving {
    pub(crate) fn new(
        node: Universe,
        halves: Option<barrier::Communicator>,
        seg: Arc<Segment>,
        place: Place,
        sets: crate::sets::Sets,
        internode: Option<Rounds>,
        describe: String,
    ) -> Serving {
        let sets = SetServing { sets, node_of: place.node_of, me: place.me, waits: place.waits };
        Serving {
            sets: Arc::new(sets),
            halves,
            node,
            seg,
            local_rank: place.local_rank,
            internode,
            epoch: Cell::new(0),
            describe,
            me: place.me,
            alone: place.alone,
            delegated: false,
        }
    }

    /// The barriers of every PE pass through to the implementation from now on (agreed by
    /// every PE); `describe` says so.
    pub(crate) fn delegate(&mut self, describe: String) {
        self.delegated = true;
        self.describe = describe;
    }

    /// Whether the barriers of every PE pass through to the implementation.
    pub(crate) fn delegated(&self) -> bool {
        self.delegated
    }

    /// Adds to the description (how the roots' way was chosen).
    pub(crate) fn say_also(&mut self, what: &str) {
        self.describe = format!("{}; {what}", self.describe);
    }

    /// The active sets' side, to share with threads that wait without the lock.
    pub(crate) fn sets(&self) -> Arc<SetServing> {
        self.sets.clone()
    }

    /// What runs the barriers, in one line.
    pub(crate) fn describe(&self) -> &str {
        &self.describe
    }

    /// A barrier of every PE (collective): writes before it on any PE are visible after it on
    /// every PE (release on arrival, acquire on departure, through the node's barrier and the
    /// roots' remote adds).
    pub(crate) fn barrier(&self) -> Result<()> {
        let Some(halves) = &self.halves else { return Ok(self.node.world().barrier()?) };
        // The gather: the root returns once its node's PEs have all arrived, the others at once.
        if !self.alone {
            halves.barrier()?;
        } else {
            // Alone on its node, this PE's remote add is its whole arrival: its stores come
            // before it (the halves' release store did this where they run).
            std::sync::atomic::fence(Ordering::Release);
        }
        let epoch = self.epoch.get() + 1;
        self.epoch.set(epoch);
        if let Some(rounds) = &self.internode {
            if let Err(e) = rounds.run(epoch, self.me) {
                // The node's PEs waiting for this root stop at once instead of at their timeout.
                self.seg.set_abort(self.local_rank);
                return Err(e);
            }
        }
        if self.alone {
            // Every other PE's stores before its arrival are visible from here (the rounds'
            // loads acquire; the halves' acquire did this where they run).
            std::sync::atomic::fence(Ordering::Acquire);
            return Ok(());
        }
        // The release: the root stores it, the others wait for it.
        Ok(halves.barrier()?)
    }

    /// This PE calls `shmem_finalize`: on a node root, the other roots learn that it will make
    /// no more barriers.
    pub(crate) fn depart(&self) {
        if let Some(rounds) = &self.internode {
            rounds.depart(self.epoch.get());
        }
    }
}
